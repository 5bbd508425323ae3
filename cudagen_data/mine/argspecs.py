"""Arguments of a mined kernel, filled from its annotations alone (runs in a worker).

A kernel can be run when every parameter is an array (1-4 dimensions; plain, indexed,
or 1-D fabric) of a scalar, vector, matrix, quaternion or transform type, a scalar or
such a value passed by value, or a struct of those.  Meshes, volumes, textures, arrays
of structs, fabric arrays of arrays and ``uint64`` handles cannot be made up, so such
kernels are not run.

Sizes are small and equal (``EXTENT`` per dimension) and integers are drawn within the
extent, so that an integer input used as an index stays in bounds.  Roles come from
Warp's own code generation, which marks each array argument read and/or written.
"""

from __future__ import annotations

import ast
import textwrap

from .. import warp_boundary as warp_env
from ..spec import DTYPES, ArgSpec, is_float_dtype
from ..warp_boundary import mining as warp_mining

EXTENT = 8  # elements per array dimension and per launch dimension
FLOAT_DOMAIN = (-1.0, 1.0)
# Float scalars are mostly sizes, steps and coefficients: positive keeps int(w / h) from being 0.
FLOAT_SCALAR_DOMAIN = (0.25, 2.0)
INT_DOMAIN = (1.0, float(EXTENT - 1))  # no zero: an integer divisor would raise SIGFPE
MAX_STRUCT_DEPTH = 3


def dtype_name(t) -> str | None:
    """The spec dtype name of a Warp (or Python) type, or None if it has none: a named
    dtype where Warp has one (``vec3``), else a parametric one (``vector(3,int8)``)."""
    wp = warp_env.warp()
    if t is float:
        return "float32"
    if t is int:
        return "int32"
    if t is bool:
        return "bool"
    for name in DTYPES:
        if getattr(wp, name, None) is t:
            return name
    generic = getattr(t, "_wp_generic_type_str_", None)
    scalar = dtype_name(getattr(t, "_wp_scalar_type_", None)) if generic else None
    if scalar is None or scalar not in DTYPES or DTYPES[scalar][1]:
        return None
    shape = tuple(getattr(t, "_shape_", ()))
    name = {
        "vec_t": f"vector({shape[0]},{scalar})" if len(shape) == 1 else None,
        "mat_t": f"matrix({shape[0]},{shape[1]},{scalar})" if len(shape) == 2 else None,
        "quat_t": f"quaternion({scalar})",
        "transform_t": f"transformation({scalar})",
    }.get(generic)
    return name if name in DTYPES else None


def arg_specs(kernel) -> tuple[list[ArgSpec] | None, str]:
    """(specs in parameter order, "") or (None, why the kernel cannot be filled).

    A struct argument becomes one spec per field (``s.f``), in field order."""
    try:
        access = warp_mining.array_access(kernel)
    except Exception as exc:  # noqa: BLE001
        return None, f"array access analysis failed: {type(exc).__name__}"
    specs: list[ArgSpec] = []
    for var in kernel.adj.args:
        read, written = access.get(var.label, (False, False))
        role = "inout" if written and read else ("out" if written else "in")
        why = _add_specs(specs, var.label, var.type, role)
        if why:
            return None, f"argument {why}"
    if not any(s.kind == "array" and s.role != "in" for s in specs):
        return None, "writes no array argument: nothing to record"
    return specs, ""


def _add_specs(specs: list[ArgSpec], name: str, t, role: str, depth: int = 0) -> str:
    """Append the spec(s) of one argument (or struct field); "" or why it cannot be
    filled: ``'name': KIND (type)``, KIND as :func:`unfillable_kind` reads it back."""
    layout = warp_mining.array_layout(t)
    if layout is not None:
        dtype = dtype_name(t.dtype)
        if dtype is None:
            what = "array of structs" if warp_mining.struct_fields(t.dtype) is not None else "array of another type"
            return f"{name!r}: {what} ({_type_name(t.dtype)})"
        if layout in ("fabric", "indexedfabric") and t.ndim != 1:
            return f"{name!r}: fabric array of arrays ({dtype})"
        if layout in ("fabric", "indexedfabric") and not _fabric_dtype(dtype):
            return f"{name!r}: fabric array of another type ({dtype})"
        domain = INT_DOMAIN if not is_float_dtype(dtype) else FLOAT_DOMAIN
        specs.append(ArgSpec(name, "array", dtype, (EXTENT,) * t.ndim, role, domain, layout))
        return ""
    fields = warp_mining.struct_fields(t)
    if fields is not None:
        if depth >= MAX_STRUCT_DEPTH:
            return f"{name!r}: struct nested deeper than {MAX_STRUCT_DEPTH} ({_type_name(t)})"
        for field_name, field_type in fields:
            # Warp does not track which struct fields a kernel writes: every field array is
            # drawn and read back; those the run leaves unchanged are dropped (worker.run_one).
            why = _add_specs(specs, f"{name}.{field_name}", field_type, "inout", depth + 1)
            if why:
                inner = why.split(": ", 1)[1]
                kind = inner if inner.startswith("struct with") else f"struct with {inner}"
                return f"{name!r}: {kind}"
        return ""
    dtype = dtype_name(t)
    if dtype == "uint64":  # uint64 scalars are handles (mesh, bvh, volume ids)
        return f"{name!r}: uint64 handle (uint64)"
    if dtype is None:
        what = (
            "texture"
            if _type_name(t).startswith("Texture")
            else ("array of another kind" if hasattr(t, "ndim") else "another type")
        )
        return f"{name!r}: {what} ({_type_name(t)})"
    domain = INT_DOMAIN if not is_float_dtype(dtype) else FLOAT_SCALAR_DOMAIN
    specs.append(ArgSpec(name, "scalar", dtype, (), "in", domain))
    return ""


def _type_name(t) -> str:
    return str(getattr(t, "key", None) or getattr(t, "__name__", None) or t)


def unfillable_kind(reason: str) -> str:
    """The KIND of a not-executed reason ``argument 'x': KIND (type)`` (stats, reports)."""
    what = reason.split(": ", 1)[1] if reason.startswith("argument ") and ": " in reason else reason
    return what.split(" (", 1)[0]


def _fabric_dtype(dtype: str) -> bool:
    """Fabric holds scalars, vectors, square matrices and quaternions (not transforms)."""
    if dtype == "transform" or dtype.startswith("transformation("):
        return False
    comp = DTYPES[dtype][1]
    return len(comp) < 2 or comp[0] == comp[1]


def launch_rank(source: str) -> int:
    """Dimensions of the launch: how many indices the kernel unpacks from ``wp.tid()``."""
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "tid"
                or isinstance(func, ast.Name)
                and func.id == "tid"
            ):
                target = node.targets[0]
                return len(target.elts) if isinstance(target, ast.Tuple) else 1
    return 1


def uses_tiles(source: str) -> bool:
    """Tile kernels need a block size the source does not state: they are not run."""
    return "tile_" in source
