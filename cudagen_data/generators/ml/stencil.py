"""2-D and 3-D neighbourhood stencils with clamp / zero / wrap boundaries.

Operators: Laplacian (5 / 7 point), wide cross (4th-order Laplacian), box mean,
convolution with a weight array, max filter, gradient magnitude; optionally applied as
an explicit update ``x + alpha * S(x)`` or scaled ``alpha * S(x)``.  Neighbours are
written out one by one or visited with constant-bound loops (unrolled by Warp);
boundaries are handled inline, with index helpers, or with a sampling @wp.func.

params: dims, grid (shape), boundary, op, terms ([[offset..], coefficient] for linear
operators; coefficient None means "weight array entry"), radius, update, eps and
argument names.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...sizes import FIXED_SIZE, LAUNCH_STEP
from ...spec import KernelSpec
from ._common import (
    Code,
    Names,
    Sizes,
    arr,
    array_ann,
    as_f64,
    assemble,
    check_close,
    choice,
    coin,
    make_spec,
    order_args,
    pick_float,
    scalar,
)

CATEGORY = "stencil"
OPS = ("laplace", "cross4", "box", "conv", "maxf", "gradmag")
AXES = "ijk"


def _offsets(dims: int, radius: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(-radius, radius + 1), repeat=dims))


def _linear_terms(op: str, dims: int, radius: int) -> list[tuple[tuple[int, ...], float | None]]:
    """(offset, coefficient) pairs; coefficient None = entry of the weight array."""
    zero = (0,) * dims
    if op == "laplace":
        terms = [(zero, -2.0 * dims)]
        for a in range(dims):
            for s in (-1, 1):
                off = [0] * dims
                off[a] = s
                terms.append((tuple(off), 1.0))
        return terms
    if op == "cross4":  # 4th-order accurate second derivative along each axis
        c = {1: 4.0 / 3.0, 2: -1.0 / 12.0}
        terms = [(zero, -2.5 * dims)]
        for a in range(dims):
            for dist in (1, 2):
                for s in (-1, 1):
                    off = [0] * dims
                    off[a] = s * dist
                    terms.append((tuple(off), c[dist]))
        return terms
    if op == "box":
        n = (2 * radius + 1) ** dims
        return [(off, 1.0 / n) for off in _offsets(dims, radius)]
    if op == "conv":
        return [(off, None) for off in _offsets(dims, radius)]
    raise ValueError(op)


def _boundary_access(rng, names: Names, ft, boundary: str, layout: str, dims: int, funcs: list[str]):
    """How a neighbour at (index + offset) is read: inline, through an index helper, or a
    sample helper (@wp.func appended to ``funcs``); (access, index helper, sample helper)."""
    access = choice(rng, ["inline", "index_helper", "sample_helper"], [0.4, 0.35, 0.25])
    if access == "sample_helper" and layout == "flat":
        access = "index_helper"
    if boundary == "zero" and access == "index_helper":
        access = "inline"
    fix_name = None
    if access == "index_helper":
        fix_name = (
            names("clamp_index", "clamp_idx", "edge")
            if boundary == "clamp"
            else names("wrap_index", "wrap", "periodic")
        )
        if boundary == "clamp":
            body = choice(rng, ["return wp.clamp(i, 0, n - 1)", "return wp.min(wp.max(i, 0), n - 1)"])
        else:
            body = choice(rng, ["return (i + n) % n", "return (i % n + n) % n"])
        funcs.append(f"@wp.func\ndef {fix_name}(i: int, n: int):\n    {body}\n")
    sample_name = None
    if access == "sample_helper":
        sample_name = names("sample", "fetch", "load", "read")
        fp = [names("a", "b", "p"), names("b2", "q", "m"), names("c2", "r", "s")][:dims]
        f_arr = names("f", "arr", "buf")
        params = ", ".join([f"{f_arr}: {array_ann(dims, ft.ann, 0)}"] + [f"{v}: int" for v in fp])
        fcode = Code(1)
        if boundary == "zero":
            cond = " or ".join(f"{v} < 0 or {v} >= {f_arr}.shape[{a}]" for a, v in enumerate(fp))
            with fcode.block(f"if {cond}:"):
                fcode(f"return {ft.zero()}")
            fcode(f"return {f_arr}[{', '.join(fp)}]")
        elif boundary == "clamp":
            fcode(f"return {f_arr}[{', '.join(f'wp.clamp({v}, 0, {f_arr}.shape[{a}] - 1)' for a, v in enumerate(fp))}]")
        else:
            fcode(
                "return "
                f"{f_arr}[{', '.join(f'({v} + {f_arr}.shape[{a}]) % {f_arr}.shape[{a}]' for a, v in enumerate(fp))}]"
            )
        funcs.append(f"@wp.func\ndef {sample_name}({params}):\n{fcode.text()}")
    return access, fix_name, sample_name


class _Grid:
    """The kernel's view of its grid: the cell index names, the extents, and how a cell or
    a neighbour (index + offset, read under the boundary rule) is spelled."""

    def __init__(self, code: Code, ft, dims: int, layout: str, boundary: str, x: str, idx, dim_exprs):
        self.code, self.ft, self.dims, self.layout, self.boundary = code, ft, dims, layout, boundary
        self.x, self.idx, self.dim_exprs = x, idx, dim_exprs
        self.access, self.fix_name, self.sample_name = "inline", None, None
        self.clamp_form = "clamp"
        self.tmp_count = 0

    def flat_index(self, parts: list[str]) -> str:
        parts = [f"({q})" if " " in q else q for q in parts]  # (i - 1) * W, not i - 1 * W
        d = self.dim_exprs
        if self.dims == 2:
            return f"{parts[0]} * {d[1]} + {parts[1]}"
        return f"({parts[0]} * {d[1]} + {parts[1]}) * {d[2]} + {parts[2]}"

    def element(self, array: str, parts: list[str]) -> str:
        return f"{array}[{self.flat_index(parts)}]" if self.layout == "flat" else f"{array}[{', '.join(parts)}]"

    def center(self, array: str) -> str:
        return self.element(array, list(self.idx))

    def shifted(self, a: int, off) -> str:
        idx = self.idx
        if isinstance(off, int):
            return idx[a] if off == 0 else f"{idx[a]} {'+' if off > 0 else '-'} {abs(off)}"
        return f"{idx[a]} + {off}"

    def fetch(self, offsets) -> str:
        """Expression (possibly after emitting statements) for the neighbour value."""
        parts = [self.shifted(a, o) for a, o in enumerate(offsets)]
        if all(isinstance(o, int) and o == 0 for o in offsets):
            return self.center(self.x)
        if self.access == "sample_helper":
            return f"{self.sample_name}({self.x}, {', '.join(parts)})"
        if self.boundary == "zero":
            return self._zero_padded(offsets, parts)
        fixed = []
        for a, o in enumerate(offsets):
            if isinstance(o, int) and o == 0:
                fixed.append(self.idx[a])
            else:
                fixed.append(self._in_range(parts[a], self.dim_exprs[a]))
        return self.element(self.x, fixed)

    def _in_range(self, part: str, extent: str) -> str:
        """``part`` moved into [0, extent) by the clamp or wrap rule."""
        if self.fix_name:
            return f"{self.fix_name}({part}, {extent})"
        if self.boundary == "clamp":
            if self.clamp_form == "clamp":
                return f"wp.clamp({part}, 0, {extent} - 1)"
            return f"wp.min(wp.max({part}, 0), {extent} - 1)"
        return f"({part} + {extent}) % {extent}"

    def _zero_padded(self, offsets, parts: list[str]) -> str:
        """A local holding the neighbour, or zero outside the grid."""
        self.tmp_count += 1
        v = f"nb{self.tmp_count}" if not isinstance(offsets[0], str) else "nb"
        checks = []
        for a, o in enumerate(offsets):
            if isinstance(o, int) and o < 0:
                checks.append(f"{parts[a]} >= 0")
            elif isinstance(o, int) and o > 0:
                checks.append(f"{parts[a]} < {self.dim_exprs[a]}")
            elif not isinstance(o, int):
                checks += [f"{parts[a]} >= 0", f"{parts[a]} < {self.dim_exprs[a]}"]
        self.code(f"{v} = {self.ft.zero()}")
        with self.code.block(f"if {' and '.join(checks)}:"):
            self.code(f"{v} = {self.element(self.x, parts)}")
        return v


EXTENT_NAMES = (("nx", "height", "ni", "rows"), ("ny", "width", "nj", "cols"), ("nz", "depth", "nk", "planes"))


def _extents(rng, sizes: Sizes, grid, layout: str, launch_form: str, x: str) -> tuple[list[str], str]:
    """The grid's extent along each axis as the kernel reads it, and why the kernel runs at
    one size only ("": it runs at others).

    Other sizes grow the launch's first axis (sizes.py), so only the grid's first extent
    changes: it comes from the array (``x.shape[0]``; ``x.shape[0] // row`` for a flat
    array), from an int argument (with a thread per cell, where the launch's first axis is
    the grid's), or, rarely, from a wp.constant, which fixes the kernel's size.  The other
    extents stay the same at every size: the array's shape, a literal or a constant (an
    argument only where its value differs from the first extent, which a resize grows)."""
    dims = len(grid)
    exprs = [""] * dims
    for a in range(1, dims):
        if layout == "nd":
            how = choice(rng, [f"{x}.shape[{a}]", "literal", "const"], [0.5, 0.3, 0.2])
        else:
            how = choice(rng, ["literal", "const", "arg"], [0.45, 0.35, 0.2 if grid[a] != grid[0] else 0.0])
        exprs[a] = sizes.named(f"n{a}", grid[a], how, EXTENT_NAMES[a])
    if layout == "nd":
        shape = f"{x}.shape[0]"
    else:
        row = exprs[1] if dims == 2 else f"({exprs[1]} * {exprs[2]})"
        shape = f"({x}.shape[0] // {row})"  # parenthesised: it is used inside other expressions
    how = choice(rng, [shape, "arg", "const"], [0.65, 0.3 if launch_form == "nd" else 0.0, 0.05])
    exprs[0] = sizes.named("n0", grid[0], how, EXTENT_NAMES[0])
    fixed = ""
    if how == "const":
        fixed = f"the grid's extent along the launch's first axis is wp.constant {exprs[0]} = {grid[0]}"
    return exprs, fixed


def _thread_cell(names: Names, code: Code, dims: int, grid, launch_form: str, dim_exprs: list[str]):
    """Emit thread -> cell index; (index names, launch dimensions)."""
    idx = [names(*c) for c in (("i", "y", "row", "z"), ("j", "x0", "col", "yy"), ("k", "l", "zz", "c"))][:dims]
    if launch_form == "nd":
        code(f"{', '.join(idx)} = wp.tid()")
        return idx, grid
    t = names("tid", "cell", "lin", "gid")
    code(f"{t} = wp.tid()")
    if dims == 2:
        code(f"{idx[0]} = {t} // {dim_exprs[1]}", f"{idx[1]} = {t} % {dim_exprs[1]}")
    else:
        code(
            f"{idx[0]} = {t} // ({dim_exprs[1]} * {dim_exprs[2]})",
            f"{idx[1]} = ({t} // {dim_exprs[2]}) % {dim_exprs[1]}",
            f"{idx[2]} = {t} % {dim_exprs[2]}",
        )
    return idx, (int(np.prod(grid)),)


def _offset_names(names: Names, dims: int) -> list[str]:
    return [names("di", "dy", "oi"), names("dj", "dx", "oj"), names("dk", "dz", "ok")][:dims]


def _open_offset_loops(code: Code, d: list[str], lo: str, hi: str) -> None:
    """One loop per axis over the neighbour offsets ``d``; the caller closes them
    (``code.level -= len(d)``)."""
    for var in d:
        code.lines.append("    " * code.level + f"for {var} in range({lo}, {hi}):")
        code.level += 1


def _linear(rng, names: Names, g: _Grid, op: str, radius: int, w, acc: str, enumerate_form: str, params: dict):
    """acc = a weighted sum of neighbours (laplace, cross4, box, conv); the radius argument
    the loops read, if any."""
    code, ft, dims = g.code, g.ft, g.dims
    terms = _linear_terms(op, dims, radius)
    params["terms"] = [[list(o), c] for o, c in terms]
    rad_args = []
    if enumerate_form == "loops":
        d_names = _offset_names(names, dims)
        code(f"{acc} = {ft.zero()}")
        # A radius argument keeps the loops dynamic: Warp unrolls constant-bound ones,
        # which multiplies the CUDA (a 3x3x3 neighbourhood: ~27x).  A plain running sum
        # through a dynamic loop differentiates correctly.
        rad = names("r", "rad", "radius") if (dims == 3 or radius == 2 or coin(rng, 0.6)) else None
        if rad:
            rad_args.append(scalar(rad, "int32", (radius, radius)))
        lo, hi = (f"-{rad}", f"{rad} + 1") if rad else (str(-radius), str(radius + 1))
        _open_offset_loops(code, d_names, lo, hi)
        v = g.fetch(d_names)
        if op == "conv":
            widx = ", ".join(f"{dd} + {rad or radius}" for dd in d_names)
            code(f"{acc} += {w}[{widx}] * {v}")
        else:
            code(f"{acc} += {v}")
        code.level -= dims
        if op == "box":
            n = (2 * radius + 1) ** dims
            code(choice(rng, [f"{acc} = {acc} / {ft.lit(float(n))}", f"{acc} = {acc} * {ft.lit(1.0 / n)}"]))
        return rad_args
    pieces = []
    for off, c in terms:
        v = g.fetch(off)
        if c is None:
            pieces.append(f"{w}[{', '.join(str(o + radius) for o in off)}] * {v}")
        elif c == 1.0:
            pieces.append(v)
        else:
            pieces.append(f"{ft.lit(c)} * {v}")
    if op == "box" and coin(rng):
        n = (2 * radius + 1) ** dims
        pieces = [p.replace(f"{ft.lit(1.0 / n)} * ", "") for p in pieces]
        code(f"{acc} = ({' + '.join(pieces)}) / {ft.lit(float(n))}")
        params["terms"] = [[list(o), 1.0 / n] for o, _ in terms]
    else:
        code(f"{acc} = {' + '.join(pieces)}")
    return rad_args


def _max_filter(names: Names, g: _Grid, radius: int, acc: str, enumerate_form: str) -> None:
    code = g.code
    code(f"{acc} = {g.center(g.x)}")
    if enumerate_form == "loops":
        d = _offset_names(names, g.dims)
        _open_offset_loops(code, d, str(-radius), str(radius + 1))
        code(f"{acc} = wp.max({acc}, {g.fetch(d)})")
        code.level -= g.dims
    else:
        for off in _offsets(g.dims, radius):
            if any(off):
                code(f"{acc} = wp.max({acc}, {g.fetch(off)})")


def _gradmag(rng, names: Names, g: _Grid, acc: str, params: dict) -> None:
    """acc = sqrt(sum of squared central differences + eps)."""
    ft, dims = g.ft, g.dims
    eps = choice(rng, [1e-6, 1e-4])
    params["eps"] = eps
    gr = [names("gx", "g0", "di_"), names("gy", "g1", "dj_"), names("gz", "g2", "dk_")][:dims]
    for a in range(dims):
        plus = [0] * dims
        minus = [0] * dims
        plus[a], minus[a] = 1, -1
        vp, vm = g.fetch(tuple(plus)), g.fetch(tuple(minus))
        g.code(choice(rng, [f"{gr[a]} = ({vp} - {vm}) * {ft.lit(0.5)}", f"{gr[a]} = {ft.lit(0.5)} * ({vp} - {vm})"]))
    sq = " + ".join(f"{v} * {v}" for v in gr)
    g.code(f"{acc} = wp.sqrt({sq} + {ft.lit(eps)})")


def _operator(rng, names: Names, g: _Grid, op: str, radius: int, w, acc: str, params: dict):
    """Emit ``acc = S(x)`` at the thread's cell; the extra scalar arguments it reads."""
    enumerate_form = "explicit"
    if op in ("box", "conv", "maxf"):
        enumerate_form = "loops" if (g.dims == 3 or radius == 2 or coin(rng, 0.6)) else "explicit"
    if op in ("laplace", "cross4", "box", "conv"):
        return _linear(rng, names, g, op, radius, w, acc, enumerate_form, params)
    if op == "maxf":
        _max_filter(names, g, radius, acc, enumerate_form)
    else:
        _gradmag(rng, names, g, acc, params)
    return []


def generate(rng: np.random.Generator) -> KernelSpec:
    dims = choice(rng, [2, 3], [0.65, 0.35])
    op = choice(rng, OPS, [0.2, 0.12, 0.18, 0.2, 0.15, 0.15])
    boundary = choice(rng, ["clamp", "zero", "wrap"])
    ft = pick_float(rng, 0.3)
    names = Names(rng)
    if dims == 2:
        H = choice(rng, [6, 8, 10, 12, 16])
        W = choice(rng, [w for w in (6, 8, 10, 12, 16) if H * w <= 256])
        grid = (H, W)
    else:
        grid = tuple(choice(rng, [4, 5, 6]) for _ in range(3))
    radius = 2 if op == "cross4" else (2 if (op in ("box", "conv", "maxf") and dims == 2 and coin(rng, 0.2)) else 1)
    layout = choice(rng, ["nd", "flat"], [0.75, 0.25])
    # a linear launch walks a flat array (one over a 2-D array could not grow by rows)
    launch_form = choice(rng, ["nd", "linear"]) if layout == "flat" else "nd"
    update = choice(rng, ["direct", "residual", "scaled"], [0.5, 0.3, 0.2]) if op != "maxf" else "direct"

    x = names("x", "field", "u", "grid", "src", "phi", "img")
    out = names("out", "result", "dst", "u_next", "y", "filtered")
    w = names("w", "weights", "kernel_w", "taps") if op == "conv" else None
    alpha = names("alpha", "dt", "coef", "rate") if update != "direct" else None
    sizes = Sizes(rng, names)
    code = Code(1)
    funcs: list[str] = []
    dim_exprs, fixed = _extents(rng, sizes, grid, layout, launch_form, x)
    idx, launch = _thread_cell(names, code, dims, grid, launch_form, dim_exprs)
    g = _Grid(code, ft, dims, layout, boundary, x, idx, dim_exprs)
    g.access, g.fix_name, g.sample_name = _boundary_access(rng, names, ft, boundary, layout, dims, funcs)
    g.clamp_form = choice(rng, ["clamp", "minmax"])

    acc = names("acc", "s", "total", "lap", "val")
    params = {
        "dims": dims,
        "grid": list(grid),
        "boundary": boundary,
        "op": op,
        "radius": radius,
        "update": update,
        "x": x,
        "out": out,
        "w": w,
        "alpha": alpha,
    }
    if fixed:
        params[FIXED_SIZE] = fixed
    if launch_form == "linear":
        params[LAUNCH_STEP] = int(np.prod(grid[1:]))  # the launch covers whole rows of the grid
    rad_args = _operator(rng, names, g, op, radius, w, acc, params)

    center = g.center(x)
    if update == "residual":
        result = choice(rng, [f"{center} + {alpha} * {acc}", f"{acc} * {alpha} + {center}"])
    elif update == "scaled":
        result = f"{alpha} * {acc}"
    else:
        result = acc
    code(f"{g.center(out)} = {result}")

    shape = grid if layout == "nd" else (int(np.prod(grid)),)
    inputs = [arr(x, ft.dtype, shape, "in", (-1.0, 1.0))]
    if w:
        inputs.append(arr(w, ft.dtype, (2 * radius + 1,) * dims, "in", (-1.0, 1.0)))
    scalars = ([scalar(alpha, ft.dtype, (0.05, 0.25))] if alpha else []) + rad_args
    args = order_args(rng, inputs, [arr(out, ft.dtype, shape, "out")], scalars + sizes.scalar_args)
    kname = names(f"{op}_{dims}d", f"stencil_{op}", f"{op}_{boundary}", f"apply_{op}{dims}d")
    src = assemble(rng, kname, args, ft, code, sizes.constants, funcs)
    return make_spec(CATEGORY, kname, src, args, launch, params, algorithmic=1 if dims == 3 else 0)


# --------------------------------------------------------------------------- reference

_PAD = {"clamp": "edge", "zero": "constant", "wrap": "wrap"}


def _shift(xp: np.ndarray, r: int, off, grid) -> np.ndarray:
    sl = tuple(slice(r + o, r + o + n) for o, n in zip(off, grid, strict=False))
    return xp[sl]


def check(spec: KernelSpec, inputs: dict, outputs: dict) -> str | None:
    p = spec.params
    dims, op = p["dims"], p["op"]
    x = as_f64(inputs[p["x"]])
    # the first extent from the input (it changes with the size the kernel runs at)
    rest = tuple(int(n) for n in p["grid"][1:])
    grid = (x.size // int(np.prod(rest)), *rest)
    x = x.reshape(grid)
    r = 2 if op == "cross4" else int(p["radius"])
    xp = np.pad(x, r, mode=_PAD[p["boundary"]])
    if op in ("laplace", "cross4", "box", "conv"):
        want = np.zeros(grid)
        scale = np.zeros(grid)
        w = as_f64(inputs[p["w"]]) if p.get("w") else None
        for off, c in p["terms"]:
            coef = w[tuple(o + r for o in off)] if c is None else c
            term = coef * _shift(xp, r, off, grid)
            want += term
            scale += np.abs(term)
    elif op == "maxf":
        want = np.max([_shift(xp, r, off, grid) for off in _offsets(dims, r)], axis=0)
        scale = np.abs(want)
    else:
        sq = np.zeros(grid)
        for a in range(dims):
            plus = [0] * dims
            minus = [0] * dims
            plus[a], minus[a] = 1, -1
            g = 0.5 * (_shift(xp, r, plus, grid) - _shift(xp, r, minus, grid))
            sq += g * g
        want = np.sqrt(sq + p["eps"])
        scale = np.abs(want)
    if p["update"] != "direct":
        alpha = float(inputs[p["alpha"]])
        want, scale = alpha * want, alpha * scale
        if p["update"] == "residual":
            want, scale = x + want, np.abs(x) + scale
    got = as_f64(outputs[p["out"]]).reshape(grid)
    dtype = next(a.dtype for a in spec.args if a.name == p["out"])
    return check_close(p["out"], got, want, dtype, scale=scale)
