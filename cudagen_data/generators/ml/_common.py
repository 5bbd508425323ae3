"""Shared building blocks for the ML kernel families.

Every family module writes Warp source as text.  The helpers here keep that text
varied in ways a canonicaliser cannot fold away (loop forms, how sizes reach the
kernel, annotation spellings, helper functions) while keeping each kernel correct,
and they derive features and a difficulty tier from the finished source so that
those labels describe what was actually emitted.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...astwalk import walk
from ...spec import ArgSpec, KernelSpec
from ..difficulty import difficulty

# --------------------------------------------------------------------------- random


def choice(rng: np.random.Generator, options: Sequence[Any], p: Sequence[float] | None = None) -> Any:
    """One element of ``options`` (a list of any objects, unlike ``rng.choice``)."""
    if p is not None:
        p = np.asarray(p, dtype=float)
        p = p / p.sum()
    return options[int(rng.choice(len(options), p=p))]


def coin(rng: np.random.Generator, p: float = 0.5) -> bool:
    return bool(rng.random() < p)


# --------------------------------------------------------------------------- dtypes


@dataclass(frozen=True)
class FloatType:
    """A float dtype as the kernel spells it.

    Warp types bare Python float literals as float32, so float64 kernels must wrap
    every literal (``wp.float64(0.5)``); ``lit`` does that.
    """

    dtype: str  # spec dtype: "float32" or "float64"
    ann: str  # annotation / constructor spelling: "float", "wp.float32", "wp.float64"

    @property
    def is64(self) -> bool:
        return self.dtype == "float64"

    def lit(self, value: float) -> str:
        text = repr(float(value))
        return f"wp.float64({text})" if self.is64 else text

    def cast(self, expr: str) -> str:
        if self.is64 and expr.isidentifier() and expr.isupper():
            # wp.float64(N) on an int wp.constant retypes N itself in Warp 1.19 (a later
            # range(N) then fails to compile); going through float() avoids that
            return f"wp.float64(float({expr}))"
        return f"{self.ann}({expr})"

    def zero(self) -> str:
        """A typed zero that declares a local of this type (``float(0.0)``)."""
        return self.cast("0.0")


def pick_float(rng: np.random.Generator, p64: float = 0.3) -> FloatType:
    if coin(rng, p64):
        return FloatType("float64", "wp.float64")
    return FloatType("float32", choice(rng, ["float", "wp.float32"]))


def array_ann(ndim: int, elem: str, style: int) -> str:
    """Annotation of a ``ndim``-D array; style 0 uses wp.array2d/3d, style 1 ``ndim=``."""
    if ndim == 1:
        return f"wp.array(dtype={elem})"
    if style == 0:
        return f"wp.array{ndim}d(dtype={elem})"
    return f"wp.array(dtype={elem}, ndim={ndim})"


# --------------------------------------------------------------------------- names


class Names:
    """Picks readable, unique identifiers from per-role candidate lists."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def __call__(self, *candidates: str) -> str:
        free = [c for c in candidates if c not in self.used]
        if free:
            name = choice(self.rng, free)
        else:
            base = candidates[0]
            k = 2
            while f"{base}{k}" in self.used:
                k += 1
            name = f"{base}{k}"
        self.used.add(name)
        return name


# --------------------------------------------------------------------------- code text


class Constants:
    """Module-level constants a kernel names instead of inlining (``TILE_M = 16``), each with
    probability ``p``; ``items`` go to :func:`module_source`."""

    def __init__(self, rng: np.random.Generator, names: Names, p: float = 0.5):
        self.rng, self.names, self.p = rng, names, p
        self.items: list[tuple[str, str]] = []

    def __call__(self, value: Any, *candidates: str) -> str:
        """The text for ``value``: a new constant's name, or the literal."""
        if coin(self.rng, self.p):
            name = self.names(*candidates)
            self.items.append((name, str(value)))
            return name
        return str(value)


class Code:
    """Indented Python source lines."""

    def __init__(self, level: int = 0):
        self.lines: list[str] = []
        self.level = level

    def __call__(self, *lines: str) -> None:
        for line in lines:
            self.lines.append("    " * self.level + line)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self(header)
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# No ``while`` form: Warp 1.19's adjoint of a while loop indexes arrays with the
# already-incremented counter, writing one element past the end of gradient arrays.
LOOP_STYLES = ("range", "range2", "range3", "rev")


@contextmanager
def loop(code: Code, var: str, start: str, stop: str, style: str) -> Iterator[None]:
    """``for var in range(start, stop)`` in one of several spellings.

    ``rev`` walks the range backwards; only for bodies whose result does not depend
    on the visiting order (sums, strict max/min over distinct values).
    """
    if style == "rev":
        low = str(int(start) - 1) if start.lstrip("-").isdigit() else f"{start} - 1"
        header = f"for {var} in range({stop} - 1, {low}, -1):"
    elif style == "range" and start == "0":
        header = f"for {var} in range({stop}):"
    elif style == "range3":
        header = f"for {var} in range({start}, {stop}, 1):"
    else:
        header = f"for {var} in range({start}, {stop}):"
    with code.block(header):
        yield


class Sizes:
    """How sizes reach the kernel: from an array's shape, an int argument, or a module constant.

    Loops bounded by a module constant of at most 16 iterations are unrolled by Warp,
    which makes their adjoint exact; ``allow_const`` lets a family limit that to loops
    whose unrolled size stays small.
    """

    def __init__(self, rng: np.random.Generator, names: Names, p_shape: float = 0.45, p_arg: float = 0.3):
        self.rng = rng
        self.names = names
        self.p = (p_shape, p_arg, max(0.0, 1.0 - p_shape - p_arg))
        self.constants: list[tuple[str, str]] = []  # (name, value text)
        self.scalar_args: list[ArgSpec] = []
        self._cache: dict[str, str] = {}
        self.const_keys: set[str] = set()

    def get(
        self, key: str, value: int, shape_of: str | None, candidates: Sequence[str], allow_const: bool = True
    ) -> str:
        """The expression for size ``key`` (same key, same expression)."""
        if key in self._cache:
            return self._cache[key]
        p = list(self.p)
        if shape_of is None:
            p[0] = 0.0
        if not allow_const:
            p[2] = 0.0
        style = choice(self.rng, ["shape", "arg", "const"], p)
        return self.named(key, value, shape_of if style == "shape" else style, candidates)

    def named(self, key: str, value: int, how: str, candidates: Sequence[str]) -> str:
        """The expression for size ``key`` given how it reaches the kernel: "arg" (an int
        argument), "const" (a module constant), "literal", or the expression itself (an
        array's shape)."""
        if how == "const":
            expr = self.names(*[c.upper() for c in candidates])
            self.constants.append((expr, str(int(value))))
            self.const_keys.add(key)
        elif how == "arg":
            expr = self.names(*candidates)
            self.scalar_args.append(ArgSpec(expr, "scalar", "int32", domain=(float(value), float(value))))
        elif how == "literal":
            expr = str(int(value))
        else:
            expr = how
        self._cache[key] = expr
        return expr

    def is_const(self, key: str) -> bool:
        return key in self.const_keys


def module_source(
    kernel: str, funcs: Sequence[str] = (), constants: Sequence[tuple[str, str]] = (), mathdx_off: bool = False
) -> str:
    """A complete module: imports, optional config, constants, helper functions, the kernel."""
    parts = ["import warp as wp\n"]
    if mathdx_off:
        # keeps tile_matmul on Warp's own CUDA so the emitted source is self-contained
        parts[0] += "\nwp.config.enable_mathdx_gemm = False\n"
    if constants:
        parts.append("\n".join(f"{n} = wp.constant({v})" for n, v in constants) + "\n")
    parts.extend(funcs)
    parts.append(kernel)
    return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"


def assemble(
    rng: np.random.Generator,
    kname: str,
    args: Sequence[ArgSpec],
    ft: FloatType,
    code: Code,
    constants: Sequence[tuple[str, str]] = (),
    funcs: Sequence[str] = (),
    mathdx_off: bool = False,
) -> str:
    """The module source for a kernel body: annotations from the arg specs, then module_source."""
    ann_style = int(coin(rng, 0.3))
    params = []
    body = code.text() + "\n".join(funcs)
    # a by-value scalar the body never reads is left out (make_spec follows the signature)
    args = [a for a in args if a.kind != "scalar" or re.search(rf"(?<![\w.]){re.escape(a.name)}\b", body)]
    for a in args:
        if a.dtype.startswith("int"):
            elem = "int" if a.dtype == "int32" else f"wp.{a.dtype}"
        else:
            elem = ft.ann if a.dtype == ft.dtype else f"wp.{a.dtype}"
            if elem == "wp.float32" and coin(rng, 0.3):
                elem = "float"
        params.append((a.name, elem if a.kind == "scalar" else array_ann(len(a.shape), elem, ann_style)))
    sig = signature(kname, params, wrap=len(params) > 3 and coin(rng, 0.4))
    kernel = f"@wp.kernel\n{sig}\n{code.text()}"
    return module_source(kernel, funcs, constants, mathdx_off)


def signature(name: str, params: Sequence[tuple[str, str]], wrap: bool) -> str:
    """``def name(a: T, ...):`` on one line or one parameter per line."""
    if wrap:
        inner = "".join(f"\n    {n}: {t}," for n, t in params)
        return f"def {name}({inner}\n):"
    return f"def {name}(" + ", ".join(f"{n}: {t}" for n, t in params) + "):"


# --------------------------------------------------------------------------- structure -> labels


def _is_wp_attr(node: ast.AST, attr: str | None = None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "wp"
        and (attr is None or node.attr == attr)
    )


def features_of(tree: ast.Module) -> tuple[str, ...]:
    """Warp builtins and language features the parsed source uses, sorted."""
    # parameter annotations (wp.array(dtype=...)) are types, not features
    in_annotations = {id(n) for a in walk(tree) if isinstance(a, ast.arg) and a.annotation for n in walk(a.annotation)}
    found: set[str] = set()
    for node in walk(tree):
        if id(node) in in_annotations:
            continue
        if isinstance(node, ast.Call) and _is_wp_attr(node.func):
            found.add(f"wp.{node.func.attr}")
        elif isinstance(node, ast.For):
            found.add("for")
        elif isinstance(node, ast.While):
            found.add("while")
        elif isinstance(node, ast.If):
            found.add("if")
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript):
            found.add("array_augassign")  # arr[i] += v is an atomic add in Warp
        elif isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if _is_wp_attr(dec, "func"):
                    found.add("wp.func")
                elif _is_wp_attr(dec, "kernel"):
                    found.add("wp.kernel")
    found.discard("wp.kernel")
    if any(f.startswith("wp.tile") for f in found):
        found.add("tile")
    if any(f.startswith("wp.atomic") or f in ("wp.tile_atomic_add", "array_augassign") for f in found):
        found.add("atomic")
    return tuple(sorted(found))


# --------------------------------------------------------------------------- specs


def arr(
    name: str, dtype: str, shape: tuple[int, ...], role: str = "in", domain: tuple[float, float] = (-1.0, 1.0)
) -> ArgSpec:
    return ArgSpec(name, "array", dtype, tuple(int(s) for s in shape), role, (float(domain[0]), float(domain[1])))


def scalar(name: str, dtype: str, domain: tuple[float, float]) -> ArgSpec:
    return ArgSpec(name, "scalar", dtype, (), "in", (float(domain[0]), float(domain[1])))


def make_spec(
    category: str,
    kernel_name: str,
    source: str,
    args: Sequence[ArgSpec],
    launch_dim: Sequence[int],
    params: dict[str, Any],
    block_dim: int | None = None,
    algorithmic: int = 0,
) -> KernelSpec:
    tree = ast.parse(source)
    features = features_of(tree)
    signature = next(
        {p.arg for p in n.args.args} for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel_name
    )
    return KernelSpec(
        category=category,
        kernel_name=kernel_name,
        python_source=source,
        args=tuple(a for a in args if a.name in signature),  # assemble() leaves out scalars nothing reads
        launch_dim=tuple(int(d) for d in launch_dim),
        difficulty=difficulty(category, tree, features, algorithmic),
        features=features,
        block_dim=block_dim,
        params=params,
    )


def order_args(
    rng: np.random.Generator, inputs: list[ArgSpec], outputs: list[ArgSpec], scalars: list[ArgSpec]
) -> list[ArgSpec]:
    """Parameter order: inputs then outputs then scalars, or outputs first, or scalars early."""
    style = choice(rng, ["in_out_sc", "out_in_sc", "in_sc_out"], [0.6, 0.2, 0.2])
    if style == "out_in_sc":
        return outputs + inputs + scalars
    if style == "in_sc_out":
        return inputs + scalars + outputs
    return inputs + outputs + scalars


# --------------------------------------------------------------------------- checks

RTOL = {"float32": 2e-4, "float64": 1e-9}


def check_close(name: str, got: Any, want: Any, dtype: str, scale: Any = 0.0, rtol: float | None = None) -> str | None:
    """None if ``got`` matches the float64 reference ``want``.

    Allowed error per element: rtol * (|want| + scale) + a floor of rtol * 1e-3 * max|want|.
    ``scale`` is the magnitude the result was built from (e.g. the sum of |terms| of a
    reduction), so cancellation does not make honest float32 rounding look like a bug.
    """
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != reference {want.shape}"
    if not np.all(np.isfinite(got)):
        return f"{name}: non-finite values"
    if not np.all(np.isfinite(want)):
        return f"{name}: reference is non-finite (inputs outside the kernel's domain)"
    r = RTOL[dtype] if rtol is None else rtol
    peak = float(np.max(np.abs(want))) if want.size else 0.0
    tol = r * (np.abs(want) + np.asarray(scale, dtype=np.float64)) + r * 1e-3 * max(peak, 1.0)
    err = np.abs(got - want)
    bad = err > tol
    if np.any(bad):
        k = int(np.argmax(err - tol))
        idx = np.unravel_index(k, want.shape) if want.ndim else ()
        return (
            f"{name}: {int(bad.sum())}/{want.size} elements off; worst at {tuple(int(i) for i in idx)}: "
            f"got {got.flat[k]:.7g}, want {want.flat[k]:.7g}, tol {np.ravel(tol)[k] if np.ndim(tol) else tol:.3g}"
        )
    return None


def first_error(*messages: str | None) -> str | None:
    for m in messages:
        if m:
            return m
    return None


def as_f64(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)
