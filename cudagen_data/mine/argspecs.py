"""Arguments of a mined kernel, filled from its annotations alone (runs in a worker).

A kernel can be run when every parameter is an array (1-4 dimensions) of a scalar,
vector or matrix type, or a scalar passed by value.  Structs, meshes, volumes, indexed
or fabric arrays and ``uint64`` handles cannot be made up, so such kernels are not run.

Sizes are small and equal (``EXTENT`` per dimension) and integers are drawn within the
extent, so that an integer input used as an index stays in bounds.  Roles come from
Warp's own code generation, which marks each array argument read and/or written.
"""

from __future__ import annotations

import ast
import textwrap

from .. import warp_boundary as warp_env
from ..warp_boundary import mining as warp_mining
from ..spec import DTYPES, ArgSpec

EXTENT = 8  # elements per array dimension and per launch dimension
FLOAT_DOMAIN = (-1.0, 1.0)
# Float scalars are mostly sizes, steps and coefficients: positive keeps int(w / h) from being 0.
FLOAT_SCALAR_DOMAIN = (0.25, 2.0)
INT_DOMAIN = (1.0, float(EXTENT - 1))  # no zero: an integer divisor would raise SIGFPE


def dtype_name(t) -> str | None:
    """The spec dtype name of a Warp (or Python) type, or None if it has none."""
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
    return None


def arg_specs(kernel) -> tuple[list[ArgSpec] | None, str]:
    """(specs in parameter order, "") or (None, why the kernel cannot be filled)."""
    try:
        access = warp_mining.array_access(kernel)
    except Exception as exc:  # noqa: BLE001
        return None, f"array access analysis failed: {type(exc).__name__}"
    specs = []
    for var in kernel.adj.args:
        t = var.type
        if warp_mining.is_plain_array_type(t):
            dtype = dtype_name(t.dtype)
            if dtype is None:
                return None, f"argument {var.label!r}: array of {getattr(t.dtype, '__name__', t.dtype)}"
            read, written = access.get(var.label, (False, False))
            role = "inout" if written and read else ("out" if written else "in")
            domain = INT_DOMAIN if not DTYPES[dtype][0].startswith("float") else FLOAT_DOMAIN
            specs.append(ArgSpec(var.label, "array", dtype, (EXTENT,) * t.ndim, role, domain))
            continue
        dtype = dtype_name(t)
        if dtype is None or dtype == "uint64":  # uint64 scalars are handles (mesh, bvh, volume ids)
            return None, f"argument {var.label!r}: {getattr(t, '__name__', str(t))}"
        domain = INT_DOMAIN if not DTYPES[dtype][0].startswith("float") else FLOAT_SCALAR_DOMAIN
        specs.append(ArgSpec(var.label, "scalar", dtype, (), "in", domain))
    if not any(s.kind == "array" and s.role != "in" for s in specs):
        return None, "writes no array argument: nothing to record"
    return specs, ""


def launch_rank(source: str) -> int:
    """Dimensions of the launch: how many indices the kernel unpacks from ``wp.tid()``."""
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr == "tid" or isinstance(func, ast.Name) and func.id == "tid":
                target = node.targets[0]
                return len(target.elts) if isinstance(target, ast.Tuple) else 1
    return 1


def uses_tiles(source: str) -> bool:
    """Tile kernels need a block size the source does not state: they are not run."""
    return "tile_" in source
