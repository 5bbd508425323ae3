"""Warp values for a mined kernel's arguments, from the NumPy values of its specs.

Arrays of any layout (:data:`spec.LAYOUTS`) are views over one plain ``wp.array`` that
holds the values: outputs are read back from that array.  A struct argument is
assembled from the specs of its fields (``s.f``, ``s.inner.g``).
"""

from __future__ import annotations

import numpy as np

from .. import execution as execute
from .. import warp_boundary as warp_env
from ..spec import ArgSpec, parametric_dtype
from ..warp_boundary import mining as warp_mining

FABRIC_FIRST_BUCKET = 3  # a fabric array's first bucket; the rest of the elements make the second
_FABRIC_SCALARS = {
    "bool": "b",
    "int8": "i1",
    "int16": "i2",
    "int32": "i4",
    "int64": "i8",
    "uint8": "u1",
    "uint16": "u2",
    "uint32": "u4",
    "uint64": "u8",
    "float16": "f2",
    "float32": "f4",
    "float64": "f8",
}


def warp_value(arg: ArgSpec, value, device: str, requires_grad: bool, arrays=None):
    """(what the kernel is passed, the plain ``wp.array`` behind it or None for a scalar).
    ``arrays``: where the arrays are made (an indexed array's indices too, under the
    argument's name), an execution.Guards or a bounds.Fences (:mod:`.bounds`); None: plain."""
    make = execute.to_warp if arrays is None else arrays.array
    if arg.kind != "array" or not arg.layout:
        passed = make(arg, value, device, requires_grad)
        return passed, passed if arg.kind == "array" else None
    wp = warp_env.warp()
    base = make(ArgSpec(arg.name, "array", arg.dtype, arg.shape, arg.role, arg.domain), value, device, False)
    if arg.layout == "indexed":
        return wp.indexedarray(base, [_reversed(arg.name, n, device, make) for n in arg.shape]), base
    fabric = wp.fabricarray(data=_fabric_interface(arg, base), attrib=arg.name)
    if arg.layout == "fabric":
        return fabric, base
    return wp.indexedfabricarray(fabric, _reversed(arg.name, arg.shape[0], device, make)), base


def _reversed(name: str, n: int, device: str, make=execute.to_warp):
    """An index array ``n - 1, ..., 0`` (of argument ``name``)."""
    spec = ArgSpec(name, "array", "int32", (n,), "in", (0.0, float(n - 1)))
    return make(spec, np.arange(n - 1, -1, -1, dtype=np.int32), device, False)


def _fabric_interface(arg: ArgSpec, base) -> dict:
    """Fabric's array interface over ``base`` (what Omniverse hands Warp), in two buckets."""
    wp = warp_env.warp()
    parsed = parametric_dtype(arg.dtype)
    scalar, comp = execute.DTYPES[arg.dtype]
    if parsed is not None and parsed[0] == "quaternion" or arg.dtype in ("quat", "quatd"):
        role = "quat"
    else:
        role = {0: "", 1: "vector", 2: "matrix"}[len(comp)]
    size = int(np.prod(arg.shape))
    counts = [FABRIC_FIRST_BUCKET, size - FABRIC_FIRST_BUCKET] if size > FABRIC_FIRST_BUCKET else [size]
    item = wp.types.type_size_in_bytes(base.dtype)
    pointers, offset = [], 0
    for c in counts:
        pointers.append(int(base.ptr) + offset * item)
        offset += c
    info = {
        "type": (True, _FABRIC_SCALARS[scalar], int(np.prod(comp)) if comp else 1, 0, role),
        "access": 2,
        "pointers": pointers,
        "counts": counts,
    }
    return {"version": 1, "device": str(base.device), "attribs": {arg.name: info}, "_ref": base}


def launch_values(kernel, specs: list[ArgSpec], passed: dict) -> list:
    """The kernel's launch arguments in parameter order: struct arguments assembled from
    their fields' values (``passed`` by spec name)."""
    return [_assemble(var.label, var.type, passed) for var in kernel.adj.args]


def _assemble(name: str, t, passed: dict):
    fields = warp_mining.struct_fields(t)
    if fields is None:
        return passed[name]
    instance = t()
    for field_name, field_type in fields:
        setattr(instance, field_name, _assemble(f"{name}.{field_name}", field_type, passed))
    return instance


def has_views(specs: list[ArgSpec]) -> bool:
    """True when an argument is not passed as itself (a struct field or a view array):
    such kernels are run forward only (the gradient check launches plain arguments)."""
    return any("." in s.name or s.layout for s in specs)
