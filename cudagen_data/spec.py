"""The contract between generators and the rest of the pipeline.

A generator turns (category, seed, index) into a :class:`KernelSpec`: plain data holding
the Python source of one Warp kernel plus everything needed to run it (argument types,
shapes, input domains, launch dimensions).  Nothing here touches Warp.
"""

from __future__ import annotations

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
    """

    name: str
    kind: Literal["array", "scalar"]
    dtype: str
    shape: tuple[int, ...] = ()
    role: ArgRole = "in"
    domain: tuple[float, float] = (-1.0, 1.0)

    def __post_init__(self) -> None:
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
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArgSpec:
        return cls(
            name=d["name"],
            kind=d["kind"],
            dtype=d["dtype"],
            shape=tuple(d.get("shape", ())),
            role=d.get("role", "in"),
            domain=(float(d["domain"][0]), float(d["domain"][1])),
        )


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
