"""Test vectors: what a kernel was run on and what it returned, as a row stores them.

A row's ``test_vectors`` column is :class:`TestVectors` serialized with orjson (keys in
field order).  The top level is one *set*: the run at the row's own size (the row's
``launch_dim``, ``block_dim`` and ``arg_specs`` shapes); ``more_sizes`` holds the runs at
the other sizes, each a complete set of the same keys plus its ``size`` label::

    {"launch_dim": [n, ...], "block_dim": null | int,
     "inputs":  {arg_name: value, ...},      # every argument, in kernel order
     "outputs": {arg_name: value, ...},      # arrays with role out/inout after the forward launch
     "output_grads": {arg_name: value, ...}, # the seed gradient put on each float output
     "input_grads":  {arg_name: value, ...}, # gradients of float inputs after tape.backward()
     "more_sizes": [{"size": "large" | "ragged", "launch_dim": ..., "block_dim": ...,
                     "inputs": ..., "outputs": ..., "output_grads": ..., "input_grads": ...}, ...]}

where an array value is ``{"dtype": "vec3", "shape": [8], "data": [[...], ...]}``
(``data`` nested as ``numpy.ndarray.tolist()`` of the component array, i.e. shape +
the dtype's component shape) and a scalar value is ``{"dtype": "float32", "data": 1.5}``.
Every set carries its own launch, block size and argument shapes (in its values), so a
reader needs nothing else to run it.  Rows written before several sizes existed have no
``more_sizes`` key: :meth:`TestVectors.sets` reads them as one set.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from ..spec import DTYPES, ArgSpec

# The dataset card's description of the column (kept here, next to the format).
CARD_DOC = """\
`test_vectors` is a JSON string with keys in a fixed order. Its top level is one *set*,
the run at the row's own size (the row's `launch_dim`, `block_dim` and `arg_specs`);
`more_sizes` holds the runs at the other sizes (see "Several sizes per row"), each a
complete set with the same keys after its `size` label:

```text
{"launch_dim": [n, ...], "block_dim": null | int,
 "inputs":       {arg_name: value, ...},   # every argument, in kernel order
 "outputs":      {arg_name: value, ...},   # arrays with role out/inout after the forward launch
 "output_grads": {arg_name: value, ...},   # the seed gradient put on each float output
 "input_grads":  {arg_name: value, ...},   # gradients of float inputs after tape.backward()
 "more_sizes": [{"size": "large" | "ragged", "launch_dim": [...], "block_dim": ...,
                 "inputs": {...}, "outputs": {...}, "output_grads": {...}, "input_grads": {...}}, ...]}
```

An array value is `{"dtype": "vec3", "shape": [8], "data": [[...], ...]}` (`data` nested
like `numpy.ndarray.tolist()` of the component array: the shape followed by the dtype's
component shape); a scalar value is `{"dtype": "float32", "data": 1.5}`. A set's argument
shapes are the `shape` of its values, so every set runs with nothing but itself and the
row's source: `wp.launch(kernel, dim=launch_dim, inputs=[inputs in order])` (or
`wp.launch_tiled(..., block_dim=block_dim)`). A row without `more_sizes` (mined rows,
rows of older versions) has one set. Float32 results of chained transcendental functions
can differ between CPU and GPU by up to ~1e-2 relative, so compare against a float64
reference rather than a single fixed tolerance."""

Encoded = dict[str, Any]

RECORDED = "recorded"  # the size label of the top-level set (not written: it is the row's own size)
SIZE_LABELS = ("large", "ragged")  # the other sizes, in the order more_sizes lists them
PARTS = ("inputs", "outputs", "output_grads", "input_grads")


@dataclass
class VectorSet:
    """One run of a kernel at one size: its launch, and the values by argument name."""

    __test__ = False  # not a pytest class

    launch_dim: list[int]
    block_dim: int | None
    inputs: dict[str, Encoded]
    outputs: dict[str, Encoded]
    output_grads: dict[str, Encoded]
    input_grads: dict[str, Encoded]
    size: str = RECORDED

    @classmethod
    def of(cls, spec, inputs: dict, outputs: dict, output_grads: dict, input_grads: dict, size: str = RECORDED):
        """Encode a run of ``spec`` (a KernelSpec, at this set's size): NumPy/number values by argument name."""
        by_name = {a.name: a for a in spec.args}

        def enc(values: dict) -> dict[str, Encoded]:
            return {n: encode_value(by_name[n], v) for n, v in values.items()}

        return cls(
            list(spec.launch_dim),
            spec.block_dim,
            enc(inputs),
            enc(outputs),
            enc(output_grads),
            enc(input_grads),
            size,
        )

    def to_dict(self) -> dict[str, Any]:
        head = {} if self.size == RECORDED else {"size": self.size}
        return head | {
            "launch_dim": self.launch_dim,
            "block_dim": self.block_dim,
            **{k: getattr(self, k) for k in PARTS},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VectorSet:
        return cls(d["launch_dim"], d["block_dim"], *(d[k] for k in PARTS), size=d.get("size", RECORDED))

    def decoded(self) -> dict[str, dict[str, Any]]:
        """inputs / outputs / output_grads / input_grads as NumPy values."""
        return {k: {n: decode_value(v) for n, v in getattr(self, k).items()} for k in PARTS}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Each array argument's shape in this set."""
        return {n: tuple(v["shape"]) for n, v in self.inputs.items() if "shape" in v}

    def sized_spec(self, spec):
        """``spec`` (a KernelSpec of the row) at this set's size: its launch, block size and array shapes."""
        shapes = self.shapes()
        args = tuple(dataclasses.replace(a, shape=shapes[a.name]) if a.name in shapes else a for a in spec.args)
        return dataclasses.replace(
            spec, args=args, launch_dim=tuple(int(d) for d in self.launch_dim), block_dim=self.block_dim
        )


@dataclass
class TestVectors(VectorSet):
    """A row's test vectors: the set at the row's own size, plus the sets at other sizes."""

    more_sizes: list[VectorSet] = field(default_factory=list)

    @classmethod
    def of_sets(cls, recorded: VectorSet, more: list[VectorSet] = ()) -> TestVectors:
        fields = {k: getattr(recorded, k) for k in ("launch_dim", "block_dim", *PARTS)}
        return cls(**fields, more_sizes=list(more))

    @classmethod
    def of(cls, spec, inputs: dict, outputs: dict, output_grads: dict, input_grads: dict) -> TestVectors:
        """One set: a run of ``spec`` at its own size."""
        return cls.of_sets(VectorSet.of(spec, inputs, outputs, output_grads, input_grads))

    def sets(self) -> list[VectorSet]:
        """Every set, the row's own size first."""
        top = VectorSet(self.launch_dim, self.block_dim, *(getattr(self, k) for k in PARTS))
        return [top, *self.more_sizes]

    def input_grads_all_zero(self) -> bool:
        """True when no set holds a non-zero input gradient: a backward that ships nothing
        to check (0 = 0 verifies no adjoint).  Only meaningful for rows with a backward."""
        return not any(np.any(decode_value(v) != 0) for s in self.sets() for v in s.input_grads.values())

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if self.more_sizes:  # absent when there is one set: single-size rows keep the original bytes
            d["more_sizes"] = [s.to_dict() for s in self.more_sizes]
        return d

    def to_json(self) -> str:
        return orjson.dumps(self.to_dict()).decode()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TestVectors:
        top = VectorSet.from_dict(d)
        return cls.of_sets(top, [VectorSet.from_dict(s) for s in d.get("more_sizes", ())])

    @classmethod
    def from_json(cls, text: str) -> TestVectors:
        return cls.from_dict(orjson.loads(text))


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
