"""Test vectors: what a kernel was run on and what it returned, as a row stores them.

A row's ``test_vectors`` column is :class:`TestVectors` serialized with orjson (keys in
field order)::

    {"launch_dim": [n, ...], "block_dim": null | int,
     "inputs":  {arg_name: value, ...},      # every argument, in kernel order
     "outputs": {arg_name: value, ...},      # arrays with role out/inout after the forward launch
     "output_grads": {arg_name: value, ...}, # the seed gradient put on each float output
     "input_grads":  {arg_name: value, ...}} # gradients of float inputs after tape.backward()

where an array value is ``{"dtype": "vec3", "shape": [8], "data": [[...], ...]}``
(``data`` nested as ``numpy.ndarray.tolist()`` of the component array, i.e. shape +
the dtype's component shape) and a scalar value is ``{"dtype": "float32", "data": 1.5}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from ..spec import DTYPES, ArgSpec

# The dataset card's description of the column (kept here, next to the format).
CARD_DOC = """\
`test_vectors` is a JSON string with keys in a fixed order:

```text
{"launch_dim": [n, ...], "block_dim": null | int,
 "inputs":       {arg_name: value, ...},   # every argument, in kernel order
 "outputs":      {arg_name: value, ...},   # arrays with role out/inout after the forward launch
 "output_grads": {arg_name: value, ...},   # the seed gradient put on each float output
 "input_grads":  {arg_name: value, ...}}   # gradients of float inputs after tape.backward()
```

An array value is `{"dtype": "vec3", "shape": [8], "data": [[...], ...]}` (`data` nested
like `numpy.ndarray.tolist()` of the component array: the shape followed by the dtype's
component shape); a scalar value is `{"dtype": "float32", "data": 1.5}`. Float32 results
of chained transcendental functions can differ between CPU and GPU by up to ~1e-2
relative, so compare against a float64 reference rather than a single fixed tolerance."""

Encoded = dict[str, Any]


@dataclass
class TestVectors:
    __test__ = False  # not a pytest class

    launch_dim: list[int]
    block_dim: int | None
    inputs: dict[str, Encoded]
    outputs: dict[str, Encoded]
    output_grads: dict[str, Encoded]
    input_grads: dict[str, Encoded]

    @classmethod
    def of(cls, spec, inputs: dict, outputs: dict, output_grads: dict, input_grads: dict) -> TestVectors:
        """Encode a run of ``spec`` (a KernelSpec): NumPy/number values by argument name."""
        by_name = {a.name: a for a in spec.args}

        def enc(values: dict) -> dict[str, Encoded]:
            return {n: encode_value(by_name[n], v) for n, v in values.items()}

        return cls(
            list(spec.launch_dim), spec.block_dim, enc(inputs), enc(outputs), enc(output_grads), enc(input_grads)
        )

    def to_json(self) -> str:
        return orjson.dumps(self).decode()

    @classmethod
    def from_json(cls, text: str) -> TestVectors:
        return cls(**orjson.loads(text))

    def decoded(self) -> dict[str, dict[str, Any]]:
        """inputs / outputs / output_grads / input_grads as NumPy values."""
        return {
            k: {n: decode_value(v) for n, v in getattr(self, k).items()}
            for k in ("inputs", "outputs", "output_grads", "input_grads")
        }


def encode_value(arg: ArgSpec, value: Any) -> Encoded:
    data = value.tolist() if isinstance(value, np.ndarray) else value
    out: Encoded = {"dtype": arg.dtype}
    if arg.kind == "array":
        out["shape"] = list(arg.shape)
    out["data"] = data
    return out


def decode_value(encoded: Encoded) -> Any:
    """Inverse of :func:`encode_value` (NumPy components in the dtype's precision)."""
    np_dtype, comp = DTYPES[encoded["dtype"]]
    data = encoded["data"]
    if "shape" not in encoded and not comp:
        return data
    return np.asarray(data, dtype=np_dtype).reshape(tuple(encoded.get("shape", ())) + comp)
