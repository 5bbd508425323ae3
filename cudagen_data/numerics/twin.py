"""The float64 twin of a kernel: the same computation with every float32 type widened.

The twin gives a reference for the float32 kernel that is ~1e9 times more precise, so the
float32 rounding error of each output (|cpu32 - ref64|) can be measured instead of
guessed.  The rewrite works on the AST of the row's Python source:

- types: ``float`` / ``wp.float32`` / ``wp.float16`` -> ``wp.float64``; ``wp.vecN`` ->
  ``wp.vecNd``; ``wp.matNM`` -> ``wp.matNMd``; ``wp.quat`` -> ``wp.quatd``;
  ``wp.transform`` -> ``wp.transformd`` (and their ``f``/``h`` spellings);
- literals: Warp types ``2.0`` as float32 and does no implicit promotion
  (``float64 * 2.0`` is an error), so every float literal becomes ``wp.float64(2.0)``.

Integer and boolean code is left alone.  Whatever Warp still rejects (a float32-only
builtin, say) makes the twin unavailable for that row; the caller then falls back to a
documented magnitude-scaled tolerance and counts it.
"""

from __future__ import annotations

import ast
import dataclasses

import numpy as np

from ..spec import DTYPES, ArgSpec, KernelSpec

# Warp attribute names (wp.<name>) -> their float64 counterpart.
_WIDEN: dict[str, str] = {
    "float32": "float64",
    "float16": "float64",
    "quat": "quatd",
    "quatf": "quatd",
    "quath": "quatd",
    "transform": "transformd",
    "transformf": "transformd",
    "transformh": "transformd",
    "spatial_vector": "spatial_vectord",
    "spatial_vectorf": "spatial_vectord",
    "spatial_matrix": "spatial_matrixd",
    "spatial_matrixf": "spatial_matrixd",
}
for _n in (2, 3, 4):
    for _suffix in ("", "f", "h"):
        _WIDEN[f"vec{_n}{_suffix}"] = f"vec{_n}d"
    for _m in (2, 3, 4):
        for _suffix in ("", "f", "h"):
            _WIDEN[f"mat{_n}{_m}{_suffix}"] = f"mat{_n}{_m}d"

# ArgSpec dtypes -> their float64 counterpart (only dtypes spec.DTYPES knows).
WIDE_DTYPE: dict[str, str] = {
    "float16": "float64",
    "float32": "float64",
    "vec2": "vec2d",
    "vec3": "vec3d",
    "vec4": "vec4d",
    "mat22": "mat22d",
    "mat33": "mat33d",
    "mat44": "mat44d",
    "quat": "quatd",
}


# Builtins Warp 1.19 has in float32 only (warp.math helpers with float32 literals, tile
# scans): a source using one has no twin, found here before a CPU build tries it.
FLOAT32_ONLY = (
    "tile_scan_inclusive",
    "tile_scan_exclusive",
    "norm_l1",
    "norm_l2",
    "norm_huber",
    "norm_pseudo_huber",
    "smooth_normalize",
)


class TwinUnavailable(Exception):
    """Why a row has no float64 twin (one line)."""


class NativeFloat64(TwinUnavailable):
    """The kernel has no float32 code: it is its own float64 reference."""


class _Widen(ast.NodeTransformer):
    def __init__(self, wp_names: set[str]):
        self.wp_names = wp_names  # names the source binds to the warp module ("wp")
        self.changed = False

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "float" and isinstance(node.ctx, ast.Load):
            self.changed = True
            return ast.copy_location(_wp_attr("float64", self._wp()), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id in self.wp_names and node.attr in _WIDEN:
            self.changed = True
            return ast.copy_location(ast.Attribute(node.value, _WIDEN[node.attr], node.ctx), node)
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if type(node.value) is float:
            self.changed = True
            call = ast.Call(_wp_attr("float64", self._wp()), [ast.Constant(node.value)], [])
            return ast.copy_location(call, node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Attribute) and node.func.attr in FLOAT32_ONLY:
            raise TwinUnavailable(f"wp.{node.func.attr} has no float64 version in Warp")
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr in ("quat_identity", "transform_identity")
            and not node.args
            and not node.keywords
        ):
            self.changed = True  # the identity's dtype defaults to float32
            return ast.copy_location(
                ast.Call(node.func, [], [ast.keyword("dtype", _wp_attr("float64", self._wp()))]), node
            )
        # wp.float64(2.0) needs no second wrapping (and stays readable).
        if (
            isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in self.wp_names
            and node.func.attr in ("float64", "float32", "float16")
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and not node.keywords
        ):
            if node.func.attr != "float64":
                self.changed = True
            return ast.copy_location(ast.Call(_wp_attr("float64", self._wp()), node.args, []), node)
        return self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node  # f-strings hold no kernel code

    def _wp(self) -> str:
        return "wp" if "wp" in self.wp_names else next(iter(self.wp_names))


def _wp_attr(attr: str, wp_name: str) -> ast.Attribute:
    return ast.Attribute(ast.Name(wp_name, ast.Load()), attr, ast.Load())


def _warp_aliases(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name for a in node.names if a.name == "warp")
    return names


def twin_source(source: str) -> str:
    """The float64 rewrite of ``source`` (raises TwinUnavailable if nothing can be widened)."""
    tree = ast.parse(source)
    wp_names = _warp_aliases(tree)
    if not wp_names:
        raise TwinUnavailable("source does not `import warp`")
    widen = _Widen(wp_names)
    new_tree = ast.fix_missing_locations(widen.visit(tree))
    if not widen.changed:
        raise NativeFloat64("no float32 code: the kernel is its own float64 reference")
    return ast.unparse(new_tree) + "\n"


def twin_spec(spec: KernelSpec) -> KernelSpec:
    """The twin's KernelSpec: widened source and float arguments (same names, shapes, launch)."""
    args = []
    for a in spec.args:
        if DTYPES[a.dtype][0] in ("float32", "float16") and a.dtype not in WIDE_DTYPE:
            raise TwinUnavailable(f"argument {a.name!r}: no float64 dtype for {a.dtype}")
        args.append(dataclasses.replace(a, dtype=WIDE_DTYPE.get(a.dtype, a.dtype)))
    return dataclasses.replace(spec, python_source=twin_source(spec.python_source), args=tuple(args))


def widen_value(value, dtype: str):
    """A recorded value (array or scalar) cast to the twin's float64 dtype."""
    if dtype not in WIDE_DTYPE:
        return value
    if isinstance(value, np.ndarray):
        return value.astype(np.float64)
    return float(value)


def widen_all(values: dict, args: tuple[ArgSpec, ...]) -> dict:
    dtypes = {a.name: a.dtype for a in args}
    return {n: widen_value(v, dtypes[n]) for n, v in values.items()}
