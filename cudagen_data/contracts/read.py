"""Reading a row back (validate, eval, the GPU suite): the kernel it records and its recorded run.

The one place that turns a row's columns back into a :class:`~cudagen_data.spec.KernelSpec`
and decoded test vectors.  Both take a :class:`~.row.Row` (a row dict is read as one where it
comes in: :func:`~.row.row_from_dict`).
"""

from __future__ import annotations

import orjson

from ..spec import ArgSpec, KernelSpec
from .row import Row
from .test_vectors import TestVectors


def row_to_spec(row: Row) -> KernelSpec:
    return KernelSpec(
        category=row.category,
        kernel_name=row.kernel_name,
        python_source=row.python_source,
        args=tuple(ArgSpec.from_dict(a) for a in orjson.loads(row.arg_specs)),
        launch_dim=tuple(row.launch_dim),
        difficulty=row.difficulty,
        features=tuple(row.features),
        block_dim=row.block_dim,
        seed=row.metadata.seed,
        index=row.metadata.index,
    )


def recorded_run(row: Row) -> tuple[dict, dict, dict, dict]:
    """(inputs, outputs, output_grads, input_grads) decoded from the row's test vectors."""
    dec = TestVectors.from_json(row.test_vectors).decoded()
    return dec["inputs"], dec["outputs"], dec["output_grads"], dec["input_grads"]
