"""Prefix scans: inclusive / exclusive sums (optionally reversed, scaled or weighted) and running max.

Strategies: one thread per row with a running accumulator (serial scan); one thread per
element summing its prefix (naive parallel scan); blocked two-level scan (each thread
scans its block and adds the total of the blocks before it); tiles (wp.tile_scan_inclusive
/ tile_scan_exclusive / tile_scan_max_inclusive) per row, or across several tiles with a
carry from the earlier tiles.  Warp's tile scans take float32 only.

params: op ("sum" | "max"), mode ("inclusive" | "exclusive"), reverse, axis, view,
term ("x" | "alpha" | "weight"), names of x / w / alpha / out.
"""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from ._common import (
    Code,
    FloatType,
    Names,
    Sizes,
    arr,
    as_f64,
    assemble,
    check_close,
    choice,
    coin,
    loop,
    make_spec,
    order_args,
    pick_float,
    scalar,
)

CATEGORY = "scan"


def generate(rng: np.random.Generator) -> KernelSpec:
    # tile scans have no adjoint in Warp 1.19 (forward-only rows): a fifth of the category
    strategy = choice(rng, ["serial", "naive", "blocked", "tile", "tile_carry"], [0.35, 0.25, 0.2, 0.12, 0.08])
    op = "max" if coin(rng, 0.15) else "sum"
    mode = "inclusive" if op == "max" else choice(rng, ["inclusive", "exclusive"])
    names = Names(rng)
    if strategy.startswith("tile"):
        ft = FloatType("float32", choice(rng, ["float", "wp.float32"]))
    else:
        ft = pick_float(rng, 0.3)
    term = "x" if op == "max" else choice(rng, ["x", "alpha", "weight"], [0.6, 0.2, 0.2])
    return {"serial": _serial, "naive": _naive, "blocked": _blocked, "tile": _tile, "tile_carry": _tile_carry}[
        strategy
    ](rng, names, ft, op, mode, term)


class _Ctx:
    """Arguments shared by every strategy: x, optional weight / alpha, out."""

    def __init__(self, rng, names: Names, ft: FloatType, op: str, term: str, x_shape):
        self.rng, self.names, self.ft, self.op, self.term = rng, names, ft, op, term
        self.x = names("x", "values", "data", "inp", "src", "increments")
        self.w = names("w", "weights", "gain", "mask_w") if term == "weight" else None
        self.alpha = names("alpha", "scale", "factor", "step") if term == "alpha" else None
        self.out = (
            names("out", "prefix", "cumsum", "result", "scanned", "y")
            if op == "sum"
            else names("out", "running_max", "cummax", "peak", "result")
        )
        self.inputs = [arr(self.x, ft.dtype, x_shape, "in", (-1.0, 1.0))]
        if self.w:
            self.inputs.append(arr(self.w, ft.dtype, x_shape, "in", (0.0, 1.0)))
        self.out_arg = arr(self.out, ft.dtype, x_shape, "out")
        self.scalars = [scalar(self.alpha, ft.dtype, (0.5, 2.0))] if self.alpha else []

    def value(self, index: str) -> str:
        """The scanned term at ``index`` (e.g. ``x[r, j] * w[r, j]``)."""
        v = f"{self.x}[{index}]"
        if self.term == "weight":
            return f"{v} * {self.w}[{index}]"
        if self.term == "alpha":
            return f"{self.alpha} * {v}" if coin(self.rng) else f"{v} * {self.alpha}"
        return v

    def combine(self, acc: str, v: str) -> str:
        if self.op == "max":
            return f"{acc} = wp.max({acc}, {v})"
        return choice(self.rng, [f"{acc} += {v}", f"{acc} = {acc} + {v}"])

    def init(self) -> str:
        return self.ft.cast("-1.0e30") if self.op == "max" else self.ft.zero()

    def params(self, mode, reverse, axis, view, strategy):
        return {
            "op": self.op,
            "mode": mode,
            "reverse": reverse,
            "axis": axis,
            "view": list(view),
            "term": self.term,
            "x": self.x,
            "w": self.w,
            "alpha": self.alpha,
            "out": self.out,
            "strategy": strategy,
        }

    def args(self, sizes_args):
        return order_args(self.rng, self.inputs, [self.out_arg], self.scalars + sizes_args)


def _dims(rng, op="sum"):
    # a running max of one short row is constant whenever its first element is the largest
    # (probability 1/C); over several rows that needs every row to start with its maximum
    R = choice(rng, [1, 2, 4, 6, 8] if op == "sum" else [4, 6, 8])
    C = choice(rng, [c for c in (8, 12, 16, 24, 32, 48, 64) if R * c <= 256])
    return R, C


def _serial(rng, names, ft, op, mode, term):
    R, C = _dims(rng, op)
    one_d = R == 1 and coin(rng, 0.6)
    axis = 1 if one_d or coin(rng, 0.75) else 0
    flat = not one_d and axis == 1 and coin(rng, 0.3)  # rows stored back to back in a 1-D array
    reverse = coin(rng, 0.25)
    ctx = _Ctx(rng, names, ft, op, term, (C,) if one_d else ((R * C,) if flat else (R, C)))
    sizes = Sizes(rng, names)
    n_scan = C if axis == 1 else R
    shape_ref = f"{ctx.x}.shape[0]" if one_d else (None if flat else f"{ctx.x}.shape[{axis}]")
    n = sizes.get("n", n_scan, shape_ref, ["n", "length", "count", "width"], allow_const=n_scan <= 16)
    code = Code(1)
    if one_d:
        launch = (1,)
        idx = lambda j: j  # noqa: E731
    else:
        o = names("row", "r", "i", "lane") if axis == 1 else names("col", "c", "k", "lane")
        code(f"{o} = wp.tid()")
        launch = (R,) if axis == 1 else (C,)
        idx = (lambda j: f"{o}, {j}") if axis == 1 else (lambda j: f"{j}, {o}")  # noqa: E731
        if flat:
            base = names("base", "row_start", "off")
            code(f"{base} = {o} * {n}")
            idx = lambda j: f"{base} + {j}"  # noqa: E731
    acc = names("acc", "running", "total", "carry", "s")
    j = names("j", "k", "t", "pos")
    code(f"{acc} = {ctx.init()}")
    reverse_form = choice(rng, ["range", "mirror"]) if reverse else None
    style = choice(rng, ["range", "range2", "range3"])
    if reverse_form == "range":
        header_ctx = loop(code, j, "0", n, "rev")
        jj = j
    else:
        header_ctx = loop(code, j, "0", n, style)
        jj = j
    with header_ctx:
        if reverse_form == "mirror":
            jj = names("jr", "src_j", "m")
            code(f"{jj} = {n} - 1 - {j}")
        v = ctx.value(idx(jj))
        if mode == "inclusive":
            code(ctx.combine(acc, v), f"{ctx.out}[{idx(jj)}] = {acc}")
        else:
            if coin(rng):
                tmp = names("v", "cur", "inc")
                code(f"{tmp} = {v}", f"{ctx.out}[{idx(jj)}] = {acc}", ctx.combine(acc, tmp))
            else:
                code(f"{ctx.out}[{idx(jj)}] = {acc}", ctx.combine(acc, v))
    args = ctx.args(sizes.scalar_args)
    kname = names(
        f"{mode}_scan",
        f"scan_{'rows' if axis == 1 else 'cols'}",
        "prefix_sum" if op == "sum" else "running_max",
        f"serial_{mode}_scan",
        "cumulative",
    )
    src = assemble(rng, kname, args, ft, code, sizes.constants)
    view = (1, C) if one_d else (R, C)
    return make_spec(CATEGORY, kname, src, args, launch, ctx.params(mode, reverse, axis, view, "serial"))


def _naive(rng, names, ft, op, mode, term):
    """Every output element sums its own prefix: O(n^2) work, no dependencies between threads."""
    R, C = _dims(rng, op)
    one_d = R == 1
    flat = not one_d and coin(rng, 0.3)
    reverse = coin(rng, 0.25)
    ctx = _Ctx(rng, names, ft, op, term, (C,) if one_d else ((R * C,) if flat else (R, C)))
    sizes = Sizes(rng, names)
    code = Code(1)
    j = names("j", "i", "pos", "e")
    if one_d:
        code(f"{j} = wp.tid()")
        idx = lambda k: k  # noqa: E731
        launch = (C,)
    else:
        r = names("r", "row", "b")
        code(f"{r}, {j} = wp.tid()")
        idx = lambda k: f"{r}, {k}"  # noqa: E731
        if flat:
            width = sizes.get("n", C, None, ["n", "width", "row_len"], allow_const=False)
            idx = lambda k: f"{r} * {width} + {k}"  # noqa: E731
        launch = (R, C)
    acc = names("acc", "s", "total", "sum_")
    k = names("k", "m", "q", "t")
    code(f"{acc} = {ctx.init()}")
    if not reverse:
        start, stop = "0", (f"{j} + 1" if mode == "inclusive" else j)
    else:
        n = sizes.get(
            "n", C, None if flat else f"{ctx.x}.shape[{0 if one_d else 1}]", ["n", "length", "width"], allow_const=False
        )
        start, stop = (j if mode == "inclusive" else f"{j} + 1"), n
    with loop(code, k, start, stop, choice(rng, ["range", "range2", "range3"])):
        code(ctx.combine(acc, ctx.value(idx(k))))
    code(f"{ctx.out}[{idx(j)}] = {acc}")
    args = ctx.args(sizes.scalar_args)
    kname = names(f"naive_{mode}_scan", "parallel_prefix", f"{mode}_prefix", "scan_by_element")
    src = assemble(rng, kname, args, ft, code, sizes.constants)
    return make_spec(CATEGORY, kname, src, args, launch, ctx.params(mode, reverse, 1, (1 if one_d else R, C), "naive"))


def _blocked(rng, names, ft, op, mode, term):
    """Two-level scan: a thread scans its block, offset by the total of all earlier blocks."""
    R = choice(rng, [1, 2, 4] if op == "sum" else [4])  # see _dims
    B = choice(rng, [2, 4, 8])
    L = choice(rng, [n for n in (4, 8, 16) if R * B * n <= 256])
    C = B * L
    one_d = R == 1
    ctx = _Ctx(rng, names, ft, op, term, (C,) if one_d else (R, C))
    sizes = Sizes(rng, names)
    code = Code(1)
    blk = names("blk", "b", "block", "seg")
    if one_d:
        code(f"{blk} = wp.tid()")
        idx = lambda k: k  # noqa: E731
        launch = (B,)
    else:
        r = names("r", "row", "i")
        code(f"{r}, {blk} = wp.tid()")
        idx = lambda k: f"{r}, {k}"  # noqa: E731
        launch = (R, B)
    L_expr = sizes.get("block", L, None, ["block_len", "seg_len", "chunk", "bs"])
    base = names("base", "start", "first", "lo")
    code(f"{base} = {blk} * {L_expr}")
    off = names("offset", "carry", "prior", "before")
    code(f"{off} = {ctx.init()}")
    k = names("k", "m", "q")
    with loop(code, k, "0", base, choice(rng, ["range", "range2", "range3"])):
        code(ctx.combine(off, ctx.value(idx(k))))
    acc = names("acc", "running", "local")
    code(f"{acc} = {off}")
    t = names("t", "j", "e")
    with loop(code, t, "0", L_expr, choice(rng, ["range", "range2", "range3"])):
        pos = f"{base} + {t}"
        if mode == "inclusive":
            code(ctx.combine(acc, ctx.value(idx(pos))), f"{ctx.out}[{idx(pos)}] = {acc}")
        else:
            code(f"{ctx.out}[{idx(pos)}] = {acc}", ctx.combine(acc, ctx.value(idx(pos))))
    args = ctx.args(sizes.scalar_args)
    kname = names("blocked_scan", f"two_level_{mode}_scan", "segmented_prefix", f"block_{mode}_scan")
    src = assemble(rng, kname, args, ft, code, sizes.constants)
    return make_spec(
        CATEGORY, kname, src, args, launch, ctx.params(mode, False, 1, (1 if one_d else R, C), "blocked"), algorithmic=2
    )


def _tile_term(ctx: _Ctx, code: Code, t: str, tw_load: str | None, names: Names) -> str:
    if ctx.term == "weight":
        tw = names("tw", "wt", "wtile")
        code(f"{tw} = {tw_load}")
        return f"wp.tile_map(wp.mul, {t}, {tw})"
    if ctx.term == "alpha":
        return f"{t} * {ctx.alpha}"
    return t


def _scan_call(rng, ctx, mode, expr):
    if ctx.op == "max":
        return f"wp.tile_scan_max_inclusive({expr})"
    if mode == "exclusive" and ctx.term == "x" and coin(rng, 0.3):
        # exclusive = inclusive - x
        return f"wp.tile_scan_inclusive({expr}) - {expr}"
    return f"wp.tile_scan_{mode}({expr})"


def _tile(rng, names, ft, op, mode, term):
    R = choice(rng, [2, 4, 8] if op == "sum" else [4, 8])  # see _dims
    C = choice(rng, [c for c in (8, 16, 32, 64) if R * c <= 256])
    ctx = _Ctx(rng, names, ft, op, term, (R, C))
    consts = []
    Cc = str(C)
    if coin(rng):
        Cc = names("TILE", "N", "WIDTH", "COLS")
        consts.append((Cc, str(C)))
    code = Code(1)
    r = names("r", "row", "i", "b")
    rows_per_block = choice(rng, [1, 2]) if R >= 4 else 1
    if rows_per_block > 1:  # each block scans several rows in turn
        blk, rr = names("blk", "g", "block"), names("rr", "sub", "k")
        code(f"{blk} = wp.tid()")
        code.lines.append("    " * code.level + f"for {rr} in range({rows_per_block}):")
        code.level += 1
        code(f"{r} = {blk} * {rows_per_block} + {rr}")
    else:
        code(f"{r} = wp.tid()")
    t = names("t", "tile", "xt", "row_tile")
    form = choice(rng, ["row", "2d"])
    if form == "row":
        load = lambda a: f"wp.tile_load({a}[{r}], shape={Cc})"  # noqa: E731
    else:
        load = lambda a: f"wp.tile_load({a}, shape=(1, {Cc}), offset=({r}, 0))"  # noqa: E731
    code(f"{t} = {load(ctx.x)}")
    expr = _tile_term(ctx, code, t, load(ctx.w) if ctx.w else None, names)
    s = names("s", "scanned", "pre", "res")
    code(f"{s} = {_scan_call(rng, ctx, mode, expr)}")
    if form == "row":
        code(choice(rng, [f"wp.tile_store({ctx.out}[{r}], {s})", f"wp.tile_store({ctx.out}[{r}], {s}, offset=0)"]))
    else:
        code(f"wp.tile_store({ctx.out}, {s}, offset=({r}, 0))")
    args = ctx.args([])
    kname = names(
        f"tile_{mode}_scan", "row_scan_tiled", f"{mode}_scan_tile", "tile_cumsum" if op == "sum" else "tile_cummax"
    )
    src = assemble(rng, kname, args, ft, code, consts)
    return make_spec(
        CATEGORY,
        kname,
        src,
        args,
        (R // rows_per_block,),
        ctx.params(mode, False, 1, (R, C), "tile"),
        block_dim=choice(rng, [32, 64, 128]),
    )


def _tile_carry(rng, names, ft, op, mode, term):
    """A 1-D scan over several tiles: each block adds the totals of the tiles before it."""
    op = "sum"
    T = choice(rng, [16, 32, 64])
    B = choice(rng, [b for b in (2, 3, 4, 6, 8) if b * T <= 256])
    N = B * T
    rows = coin(rng, 0.4)  # stored as (B, T): tile b is row b
    ctx = _Ctx(rng, names, ft, op, term, (B, T) if rows else (N,))
    consts = []
    Tc = str(T)
    if coin(rng, 0.6):
        Tc = names("TILE", "BLOCK", "CHUNK")
        consts.append((Tc, str(T)))
    code = Code(1)
    b = names("b", "blk", "tile_id", "i")
    code(f"{b} = wp.tid()")
    t = names("t", "tile", "own")
    if rows:
        load = lambda a, at: f"wp.tile_load({a}[{at}], shape={Tc})"  # noqa: E731
    else:
        load = lambda a, at: f"wp.tile_load({a}, shape={Tc}, offset={at} * {Tc})"  # noqa: E731
    code(f"{t} = {load(ctx.x, b)}")
    expr = _tile_term(ctx, code, t, load(ctx.w, b) if ctx.w else None, names)
    p = names("p", "prev", "q")
    carry = names("carry", "offset", "before", "base")

    def prev_expr():
        return (
            f"wp.tile_map(wp.mul, {load(ctx.x, p)}, {load(ctx.w, p)})"
            if ctx.w  # noqa: E731
            else (f"{load(ctx.x, p)} * {ctx.alpha}" if ctx.alpha else load(ctx.x, p))
        )

    scalar_carry = coin(rng)
    s = names("s", "scanned", "res")
    carry_loop = choice(
        rng, [f"for {p} in range({b}):", f"for {p} in range(0, {b}):", f"for {p} in range({b} - 1, -1, -1):"]
    )
    swap = coin(rng)
    if scalar_carry:
        code(f"{carry} = {ft.zero()}")
        with code.block(carry_loop):
            code(f"{carry} += wp.tile_extract(wp.tile_sum({prev_expr()}), 0)")
        add = (_scan_call(rng, ctx, mode, expr), f"wp.tile_full({Tc}, {carry}, dtype={ft.ann})")
        code(f"{s} = {add[1]} + {add[0]}" if swap else f"{s} = {add[0]} + {add[1]}")
    else:
        code(f"{carry} = wp.tile_zeros(shape=1, dtype={ft.ann})")
        with code.block(carry_loop):
            code(f"{carry} += wp.tile_sum({prev_expr()})")
        add = (_scan_call(rng, ctx, mode, expr), f"wp.tile_broadcast({carry}, shape=({Tc},))")
        code(f"{s} = {add[1]} + {add[0]}" if swap else f"{s} = {add[0]} + {add[1]}")
    code(f"wp.tile_store({ctx.out}[{b}], {s})" if rows else f"wp.tile_store({ctx.out}, {s}, offset={b} * {Tc})")
    args = ctx.args([])
    kname = names("tile_scan_with_carry", f"multi_tile_{mode}_scan", "decoupled_scan", "tiled_prefix_sum")
    src = assemble(rng, kname, args, ft, code, consts)
    return make_spec(
        CATEGORY,
        kname,
        src,
        args,
        (B,),
        ctx.params(mode, False, 1, (1, N), "tile_carry"),
        block_dim=choice(rng, [32, 64]),
        algorithmic=1,
    )


# --------------------------------------------------------------------------- reference


def reference(p: dict, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    """(expected, magnitude scale) in the view's 2-D shape, scanning along axis 1 of the view."""
    x = as_f64(inputs[p["x"]]).reshape(p["view"])
    terms = x
    if p["term"] == "weight":
        terms = x * as_f64(inputs[p["w"]]).reshape(p["view"])
    elif p["term"] == "alpha":
        terms = x * float(inputs[p["alpha"]])
    axis = p["axis"]
    if axis == 0:
        terms = terms.T
    if p["reverse"]:
        terms = terms[:, ::-1]
    if p["op"] == "max":
        want = np.maximum.accumulate(terms, axis=1)
        scale = np.abs(want)
    else:
        want = np.cumsum(terms, axis=1)
        scale = np.cumsum(np.abs(terms), axis=1)
        if p["mode"] == "exclusive":
            want = want - terms  # scale stays inclusive: "inclusive - x" forms round the full prefix
    if p["reverse"]:
        want, scale = want[:, ::-1], scale[:, ::-1]
    if axis == 0:
        want, scale = want.T, scale.T
    return want, scale


def check(spec: KernelSpec, inputs: dict, outputs: dict) -> str | None:
    p = spec.params
    want, scale = reference(p, inputs)
    got = as_f64(outputs[p["out"]])
    dtype = next(a.dtype for a in spec.args if a.name == p["out"])
    return check_close(p["out"], got.reshape(want.shape), want, dtype, scale=scale)
