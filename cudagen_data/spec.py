"""The contract between generators and the rest of the pipeline.

A generator turns (category, seed, index) into a :class:`KernelSpec`: plain data holding
the Python source of one Warp kernel plus everything needed to run it (argument types,
shapes, input domains, launch dimensions).  Nothing here touches Warp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

ArgRole = Literal["in", "out", "inout"]

# Warp dtype names a spec may use, mapped to (numpy scalar dtype, number of scalar components).
# Vector/matrix/quaternion arrays are stored as arrays of their components.
DTYPES: dict[str, tuple[str, tuple[int, ...]]] = {
    "float16": ("float16", ()),
    "float32": ("float32", ()),
    "float64": ("float64", ()),
    "int8": ("int8", ()),
    "uint8": ("uint8", ()),
    "int16": ("int16", ()),
    "uint16": ("uint16", ()),
    "int32": ("int32", ()),
    "uint32": ("uint32", ()),
    "int64": ("int64", ()),
    "uint64": ("uint64", ()),
    "bool": ("bool", ()),
    "vec2": ("float32", (2,)),
    "vec3": ("float32", (3,)),
    "vec4": ("float32", (4,)),
    "vec2d": ("float64", (2,)),
    "vec3d": ("float64", (3,)),
    "vec4d": ("float64", (4,)),
    "vec2i": ("int32", (2,)),
    "vec3i": ("int32", (3,)),
    "vec4i": ("int32", (4,)),
    "mat22": ("float32", (2, 2)),
    "mat33": ("float32", (3, 3)),
    "mat44": ("float32", (4, 4)),
    "mat22d": ("float64", (2, 2)),
    "mat33d": ("float64", (3, 3)),
    "mat44d": ("float64", (4, 4)),
    "quat": ("float32", (4,)),
    "quatd": ("float64", (4,)),
    "transform": ("float32", (7,)),
}

# Vector, matrix, quaternion and transform types of any scalar type (and vectors of any
# length) that have no name above, as mined kernels declare them: ``vector(3,int8)``,
# ``matrix(2,3,float16)``, ``quaternion(float64)``, ``transformation(float16)``.
_PARAMETRIC_DTYPE = re.compile(r"(vector|matrix|quaternion|transformation)\(((?:\d+,)*)(\w+)\)$")
_SCALARS = (
    "float16",
    "float32",
    "float64",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "bool",
)


def parametric_dtype(dtype: str) -> tuple[str, tuple[int, ...], str] | None:
    """(kind, dims, scalar) of a parametric dtype name (``("vector", (3,), "int8")``), else None."""
    m = _PARAMETRIC_DTYPE.match(dtype)
    if m is None or m.group(3) not in _SCALARS:
        return None
    dims = tuple(int(d) for d in m.group(2).split(",") if d)
    kind = m.group(1)
    wanted = {"vector": 1, "matrix": 2, "quaternion": 0, "transformation": 0}[kind]
    if len(dims) != wanted or any(d < 1 for d in dims):
        return None
    return kind, dims, m.group(3)


class _DtypeTable(dict):
    """DTYPES: the named dtypes, plus every parametric name :func:`parametric_dtype` reads."""

    def __missing__(self, dtype):
        parsed = parametric_dtype(dtype) if isinstance(dtype, str) else None
        if parsed is None:
            raise KeyError(dtype)
        kind, dims, scalar = parsed
        comp = {"quaternion": (4,), "transformation": (7,)}.get(kind, dims)
        return (scalar, comp)

    def __contains__(self, dtype) -> bool:
        return dict.__contains__(self, dtype) or (isinstance(dtype, str) and parametric_dtype(dtype) is not None)


DTYPES = _DtypeTable(DTYPES)


def is_float_dtype(dtype: str) -> bool:
    """True where Warp can differentiate through values of this dtype."""
    return DTYPES[dtype][0].startswith("float")


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument.

    kind "array": a ``wp.array`` of ``dtype`` with ``shape`` (len(shape) == ndim).
    kind "scalar": a value of ``dtype`` passed by value (shape is ``()``).

    ``domain`` is the closed interval inputs are drawn from (every scalar component of
    a vector/matrix is drawn independently; integer dtypes draw integers).  Arrays with
    role "out" start as zeros and are not drawn.  ``role`` says what the kernel does:
    "in" reads only, "out" writes (checked), "inout" reads and writes (checked; e.g.
    accumulators that must start at a chosen value such as +large for atomic_min).

    ``layout`` (arrays of mined kernels only; "" for a plain ``wp.array``) says which
    Warp array class the kernel takes; the values (and test vectors) are always the
    plain array behind it, of ``shape``:
    "indexed": ``wp.indexedarray`` of it, every dimension's indices in reverse order;
    "fabric": ``wp.fabricarray`` over it (1-D), in two buckets: 3 elements, then the rest;
    "indexedfabric": ``wp.indexedfabricarray`` of that fabric array, indices in reverse.
    A name ``s.f`` is field ``f`` of the struct argument ``s`` (mined kernels only).
    """

    name: str
    kind: Literal["array", "scalar"]
    dtype: str
    shape: tuple[int, ...] = ()
    role: ArgRole = "in"
    domain: tuple[float, float] = (-1.0, 1.0)
    layout: str = ""

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS or self.layout and self.kind != "array":
            raise ValueError(f"argument {self.name!r}: unknown layout {self.layout!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"argument {self.name!r}: unknown dtype {self.dtype!r}")
        if self.kind == "scalar" and (self.shape or self.role != "in"):
            raise ValueError(f"argument {self.name!r}: scalars have no shape and role 'in'")
        if self.kind == "array" and not 1 <= len(self.shape) <= 4:
            raise ValueError(f"argument {self.name!r}: arrays need 1 to 4 dimensions")
        if self.domain[0] > self.domain[1]:
            raise ValueError(f"argument {self.name!r}: empty domain {self.domain}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "role": self.role,
            "domain": [float(self.domain[0]), float(self.domain[1])],
        } | ({"layout": self.layout} if self.layout else {})  # only where set: synthetic rows' bytes unchanged

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArgSpec:
        return cls(
            name=d["name"],
            kind=d["kind"],
            dtype=d["dtype"],
            shape=tuple(d.get("shape", ())),
            role=d.get("role", "in"),
            domain=(float(d["domain"][0]), float(d["domain"][1])),
            layout=d.get("layout", ""),
        )


LAYOUTS = ("", "indexed", "fabric", "indexedfabric")

DIFFICULTIES = ("basic", "intermediate", "advanced")


@dataclass(frozen=True)
class KernelSpec:
    """A generated kernel: its source and how to run it.

    ``python_source`` is a complete module (``import warp as wp`` first) that defines
    exactly one ``@wp.kernel`` named ``kernel_name`` plus any ``@wp.func``/``@wp.struct``
    it uses.  ``launch_dim`` is passed to ``wp.launch(dim=...)``; if ``block_dim`` is set
    the kernel is a tile kernel launched with ``wp.launch_tiled(dim=launch_dim,
    block_dim=block_dim)``.  ``args`` lists the kernel's parameters in order.
    ``features`` names the Warp builtins and language features used (e.g.
    "wp.atomic_add", "while", "wp.func").  ``params`` is JSON-able data a category's
    NumPy reference needs (e.g. {"axis": 1}); empty for categories without one.
    """

    category: str
    kernel_name: str
    python_source: str
    args: tuple[ArgSpec, ...]
    launch_dim: tuple[int, ...]
    difficulty: str
    features: tuple[str, ...] = ()
    block_dim: int | None = None
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    seed: int = 0
    index: int = 0

    def __post_init__(self) -> None:
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"{self.kernel_name}: difficulty must be one of {DIFFICULTIES}")
        if not 1 <= len(self.launch_dim) <= 4:
            raise ValueError(f"{self.kernel_name}: launch_dim needs 1 to 4 dimensions")

    @property
    def is_tiled(self) -> bool:
        return self.block_dim is not None
