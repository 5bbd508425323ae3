"""The negative row (``cudagen negatives``): a wrong kernel made from a positive row, proven wrong.

Declared like :class:`.row.Row`: each field its Arrow type and meaning; the schema and
the card's column table are derived from these declarations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow as pa

from .row import column, field_docs

NEGATIVES_CONFIG = "negatives"


@dataclass
class NegativeRow:
    """One wrong (forward, backward) pair and the proof that it is wrong."""

    id: str = column(
        pa.string(), "Stable id: a hash of the positive's id, the kind, the variant and the wrong CUDA text."
    )
    positive_id: str = column(
        pa.string(), "`id` of the row the negative was made from (in the configuration `positive_config` names)."
    )
    positive_config: str = column(
        pa.string(), "Configuration of the positive row: `default` (synthetic) or `real` (mined)."
    )
    kernel_name: str = column(pa.string(), "Name of the positive's `@wp.kernel` function.")
    category: str = column(pa.string(), "The positive's generator category (`real` for a mined row).")
    kind: str = column(
        pa.string(), 'What is wrong, one of the kinds listed in the card (section "Configuration `negatives`").'
    )
    variant: str = column(
        pa.string(), "A finer label within the kind (`wrong_name`, `undeclared_name`, `sign_flipped`...); may be empty."
    )
    stage: str = column(pa.string(), "The stage of `cudagen eval` that rejects it: `structure`, `compile` or `run`.")
    evidence: str = column(
        pa.string(),
        "One line of proof made on a CPU machine: the structure rule it breaks, NVRTC's first error, or, for "
        "run-stage kinds, the CPU witness's first failing output or gradient, with its error.",
    )
    cuda_forward: str = column(pa.string(), "The wrong forward kernel, as a candidate would submit it.")
    cuda_backward: str = column(
        pa.string(),
        "The backward submitted with it: the positive's, except for `wrong_backward` "
        "(empty where the positive has none).",
    )
    diff: str = column(
        pa.string(), "Unified diff from the positive's CUDA (forward, then backward) to this pair: what is wrong."
    )
    python_source: str = column(pa.string(), "The positive's Python source: the task the CUDA should implement.")
    device_functions: str = column(pa.string(), "The positive's `device_functions` (the unit compiles with them).")
    preamble_hash: str = column(pa.string(), "Key into `manifest.json` -> `preambles`, as for the positive.")
    generator_version: str = column(pa.string(), "Version of cudagen-data that made and proved the negative.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


NEGATIVE_SCHEMA = pa.schema([(f.name, f.metadata["arrow"]) for f in dataclasses.fields(NegativeRow)])
NEGATIVE_COLUMN_DOCS = field_docs(NegativeRow)
