"""Reductions: sum, mean, sum of squares, L1, max, min, argmax, argmin.

Strategies: one thread per output with a loop; one thread per element with atomics;
chunked partial loops combined with atomics; tiles (wp.tile_sum / tile_max /
tile_argmax / tile_reduce, per row, per column block, or per block + tile_atomic_add).

params: op, axis (1 rows, 0 columns, None everything), view (the 2-D shape the
reference reduces), value_out / index_out (argument names), init (True when the
value output is an inout accumulator whose initial value takes part).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...spec import KernelSpec
from ._common import (
    LOOP_STYLES,
    Code,
    Names,
    Sizes,
    arr,
    as_f64,
    assemble,
    check_close,
    choice,
    coin,
    first_error,
    loop,
    make_spec,
    order_args,
    pick_float,
)

CATEGORY = "reduction"
SUM_OPS = ("sum", "mean", "sumsq", "abssum")
EXTREMA = ("max", "min")
ARG_OPS = ("argmax", "argmin")


def _transform(op: str, v: str, helper: str | None) -> str:
    """The per-element term a sum-like op accumulates."""
    if op == "sumsq":
        return f"{helper}({v})" if helper else f"{v} * {v}"
    if op == "abssum":
        return f"{helper}({v})" if helper else f"wp.abs({v})"
    return v


def _helper_func(op: str, ft, names: Names) -> tuple[str | None, str | None]:
    if op == "sumsq":
        name = names("square", "sq", "squared")
        body = "return v * v"
    elif op == "abssum":
        name = names("magnitude", "absval", "l1_term")
        body = "return wp.abs(v)"
    else:
        return None, None
    return name, f"@wp.func\ndef {name}(v: {ft.ann}):\n    {body}\n"


def generate(rng: np.random.Generator) -> KernelSpec:
    # arg ops (integer indices) are forward-only rows: kept to a sixth, so that most rows
    # of the category ship a backward
    op = choice(rng, SUM_OPS + EXTREMA + ARG_OPS, [0.2, 0.14, 0.14, 0.12, 0.15, 0.08, 0.1, 0.07])
    if op in ARG_OPS:
        strategy = choice(rng, ["loop", "tile"], [0.6, 0.4])
    else:
        strategy = choice(rng, ["loop", "atomic", "chunked", "tile"], [0.3, 0.2, 0.2, 0.3])
    ft = pick_float(rng, 0.3)
    names = Names(rng)
    hi = choice(rng, [1.0, 2.0, 4.0])
    x_dom = (-hi, hi) if op != "abssum" or coin(rng) else (0.0, hi)
    if op in ("max", "min") and coin(rng, 0.25):
        x_dom = (0.0, hi)
    builder = {"loop": _loop, "atomic": _atomic, "chunked": _chunked, "tile": _tile}[strategy]
    return builder(rng, op, ft, names, x_dom)


# --------------------------------------------------------------------------- strategies


def _shape_2d(rng) -> tuple[int, int]:
    r = choice(rng, [4, 6, 8, 12, 16])
    c = choice(rng, [c for c in (8, 12, 16, 24, 32) if r * c <= 256])
    return r, c


def _value_outputs(rng, op, ft, names, n_out, init_dom):
    """ArgSpecs of the value and index outputs for this op (role inout when the op folds in an initial value)."""
    value, index = None, None
    out_args = []
    if op in ARG_OPS:
        index = names("idx", "arg", "best_index", "indices", "winner")
        out_args.append(arr(index, "int32", (n_out,), "out"))
        if coin(rng, 0.4):
            value = names("best", "best_value", "peak", "extreme")
            out_args.append(arr(value, ft.dtype, (n_out,), "out"))
    else:
        value = names("out", "result", "total", "acc_out", "reduced", "y")
        role = "inout" if init_dom is not None else "out"
        out_args.append(arr(value, ft.dtype, (n_out,), role, init_dom or (-1.0, 1.0)))
    return value, index, out_args


def _extremum_init_domain(op, x_dom):
    """Domain of an inout accumulator that lies strictly beyond every input (atomic max/min start value)."""
    lo, hi = x_dom
    return (lo - 3.0, lo - 1.0) if op == "max" else (hi + 1.0, hi + 3.0)


def _access(layout: str, x: str, outer: str, inner: str, axis: int, ncols: str) -> str:
    """x element at (output index, reduced index) for the chosen layout and axis."""
    row, col = (outer, inner) if axis == 1 else (inner, outer)
    if layout == "flat":
        if col == "0":
            return f"{x}[{row} * {ncols}]"
        return f"{x}[{row} * {ncols} + {col}]"
    return f"{x}[{row}, {col}]"


def _loop_sum(rng, names, code: Code, ft, op, elem, value, o, acc, v, j, n, style, use_tmp, helper) -> None:
    """Emit a sum-like op over the loop and store it (the mean divides by the count)."""
    code(f"{acc} = {ft.zero()}")
    with loop(code, j, "0", n, style):
        term = _transform(op, v if use_tmp else elem(j), helper)
        if use_tmp:
            code(f"{v} = {elem(j)}")
        code(f"{acc} += {term}" if coin(rng) else f"{acc} = {acc} + {term}")
    if op == "mean":
        if coin(rng):
            code(f"{value}[{o}] = {acc} / {ft.cast(n)}")
        else:
            inv = names("inv_n", "scale", "rcp")
            code(f"{inv} = {ft.lit(1.0)} / {ft.cast(n)}", f"{value}[{o}] = {acc} * {inv}")
    else:
        code(f"{value}[{o}] = {acc}")


def _loop_extremum(rng, names, code: Code, ft, op, elem, value, index, o, v, j, n, style, init) -> None:
    """Emit a max / min (and for arg ops the index where it is) over the loop and store it;
    ``init``: the value output is an accumulator whose start value takes part."""
    cmp = ">" if op in ("max", "argmax") else "<"
    fn = "wp.max" if cmp == ">" else "wp.min"
    best = names("best", "m", "extreme", "cur_best")
    bi = names("best_j", "arg", "bi", "where") if op in ARG_OPS else None
    from_first = coin(rng, 0.7) or op in ARG_OPS
    if from_first:
        code(f"{best} = {elem('0')}")
        start = "1"
    else:
        code(f"{best} = {ft.cast('-1.0e30' if cmp == '>' else '1.0e30')}")
        start = "0"
    if bi:
        code(f"{bi} = int(0)")
    form = choice(rng, ["if", "builtin", "where"]) if not bi else choice(rng, ["if", "where"])
    with loop(code, j, start, n, style):
        code(f"{v} = {elem(j)}")
        if form == "if":
            with code.block(f"if {v} {cmp} {best}:"):
                code(f"{best} = {v}")
                if bi:
                    code(f"{bi} = {j}")
        elif form == "builtin":
            code(f"{best} = {fn}({best}, {v})")
        else:
            if bi:
                code(f"{bi} = wp.where({v} {cmp} {best}, {j}, {bi})")
            code(f"{best} = wp.where({v} {cmp} {best}, {v}, {best})")
    if init:
        code(f"{value}[{o}] = {fn}({value}[{o}], {best})")
    elif value:
        code(f"{value}[{o}] = {best}")
    if bi:
        code(f"{index}[{o}] = {bi}")


def _loop(rng, op, ft, names, x_dom):
    R, C = _shape_2d(rng)
    axis = choice(rng, [1, 0], [0.7, 0.3])
    if op in ARG_OPS and axis == 1:
        R = max(R, 8)  # with few rows, every row could share one argmax: a constant output
    layout = choice(rng, ["2d", "flat"], [0.75, 0.25])
    style = choice(rng, LOOP_STYLES, [0.4, 0.25, 0.15, 0.2])
    x = names("x", "values", "data", "inp", "src", "a")
    sizes = Sizes(rng, names)
    n_out, n_red = (R, C) if axis == 1 else (C, R)
    # a module constant for the reduced length unrolls the loop (exact adjoint): keep it short
    red_shape = f"{x}.shape[{axis}]" if layout == "2d" else None
    n = sizes.get(
        "red",
        n_red,
        red_shape,
        ["n", "length", "count", "width"] if axis == 1 else ["n", "rows", "height"],
        allow_const=n_red <= 16,
    )
    ncols = sizes.get("cols", C, None, ["cols", "ncols", "stride", "row_stride"]) if layout == "flat" else ""
    init_dom = _extremum_init_domain(op, x_dom) if (op in EXTREMA and coin(rng, 0.2)) else None
    value, index, out_args = _value_outputs(rng, op, ft, names, n_out, init_dom)
    helper, func_src = _helper_func(op, ft, names) if coin(rng, 0.4) else (None, None)

    o = names("row", "r", "i", "tid", "k") if axis == 1 else names("col", "c", "j", "tid")
    j = names("j", "k", "e", "m_idx", "step")
    code = Code(1)
    code(f"{o} = wp.tid()")
    acc = names("acc", "s", "total", "running", "partial")
    elem = lambda idx: _access(layout, x, o, idx, axis, ncols)  # noqa: E731
    use_tmp = coin(rng)
    v = names("v", "val", "xv", "cur")
    if op in SUM_OPS:
        _loop_sum(rng, names, code, ft, op, elem, value, o, acc, v, j, n, style, use_tmp, helper)
    else:
        _loop_extremum(rng, names, code, ft, op, elem, value, index, o, v, j, n, style, init_dom is not None)

    x_arg = arr(x, ft.dtype, (R, C) if layout == "2d" else (R * C,), "in", x_dom)
    args = order_args(rng, [x_arg], out_args, sizes.scalar_args)
    kname = names(
        f"{'row' if axis == 1 else 'col'}_{op}", f"{op}_{'rows' if axis == 1 else 'cols'}", f"reduce_{op}", f"{op}_loop"
    )
    src = _finish(kname, args, ft, code, sizes, [func_src] if func_src else [], rng)
    params = {
        "op": op,
        "axis": axis,
        "view": [R, C],
        "x": x,
        "value_out": value,
        "index_out": index,
        "init": init_dom is not None,
    }
    return make_spec(CATEGORY, kname, src, args, (n_out,), params)


def _atomic(rng, op, ft, names, x_dom):
    axis = choice(rng, [1, 0, None], [0.4, 0.2, 0.4])
    x = names("x", "values", "data", "inp", "src")
    code = Code(1)
    sizes = Sizes(rng, names)
    helper, func_src = _helper_func(op, ft, names) if coin(rng, 0.4) else (None, None)
    init_dom = _extremum_init_domain(op, x_dom) if op in EXTREMA else None
    if axis is None and coin(rng, 0.5):
        N = choice(rng, [32, 64, 96, 128, 200, 256])
        R, C = 1, N
        x_shape = (N,)
        i = names("i", "tid", "idx", "e")
        code(f"{i} = wp.tid()")
        elem = f"{x}[{i}]"
        launch = (N,)
        n_out, target = 1, "0"
        count = N
    else:
        R, C = _shape_2d(rng)
        x_shape = (R, C)
        r, c = names("r", "row", "i"), names("c", "col", "j")
        code(f"{r}, {c} = wp.tid()")
        elem = f"{x}[{r}, {c}]"
        launch = (R, C)
        if axis is None:
            n_out, target, count = 1, "0", R * C
        else:
            n_out, target, count = (R, r, C) if axis == 1 else (C, c, R)
    value, index, out_args = _value_outputs(rng, op, ft, names, n_out, init_dom)
    v = names("v", "val", "term", "contrib")
    if op in SUM_OPS:
        term = _transform(op, elem, helper)
        if op == "mean":
            n_expr = sizes.get("count", count, None, ["n", "count", "total_count"])
            term = f"{term} / {ft.cast(n_expr)}" if coin(rng) else f"{term} * ({ft.lit(1.0)} / {ft.cast(n_expr)})"
        if coin(rng, 0.5):
            code(f"{v} = {term}")
            term = v
        code(choice(rng, [f"wp.atomic_add({value}, {target}, {term})", f"{value}[{target}] += {term}"]))
    else:
        fn = "wp.atomic_max" if op == "max" else "wp.atomic_min"
        if coin(rng, 0.5):
            code(f"{v} = {elem}")
            elem = v
        code(f"{fn}({value}, {target}, {elem})")
    x_arg = arr(x, ft.dtype, x_shape, "in", x_dom)
    args = order_args(rng, [x_arg], out_args, sizes.scalar_args)
    kname = names(f"atomic_{op}", f"{op}_atomic", f"scatter_{op}", f"{op}_reduce")
    src = _finish(kname, args, ft, code, sizes, [func_src] if func_src else [], rng)
    params = {
        "op": op,
        "axis": axis,
        "view": [R, C],
        "x": x,
        "value_out": value,
        "index_out": index,
        "init": init_dom is not None,
    }
    return make_spec(CATEGORY, kname, src, args, launch, params)


@dataclass(frozen=True)
class _Chunks:
    """How a chunked reduction splits its input among threads: the view the reference
    reduces, the input's shape, the outputs and the atomic's target, the launch, and each
    thread's loop (a strided ``for`` header, or a contiguous chunk of ``chunk`` elements)
    with the element it reads at loop index ``jj``."""

    view: tuple[int, int]
    x_shape: tuple[int, ...]
    n_out: int
    target: str
    launch: tuple[int, ...]
    header: str | None
    chunk: str | None
    elem_of: Callable[[str], str]


def _chunk_split(rng, names, sizes: Sizes, code: Code, x, j, axis, strided) -> _Chunks:
    """Emit the thread index; how each thread's chunk of ``x`` is visited (everything, or per row)."""
    if axis is None:
        P = choice(rng, [4, 8, 16])
        L = choice(rng, [8, 12, 16])
        N = P * L
        p = names("p", "part", "worker", "t")
        code(f"{p} = wp.tid()")
        if strided:
            nthreads = sizes.get("threads", P, None, ["num_threads", "nthreads", "parts"])
            n_total = sizes.get("n", N, f"{x}.shape[0]", ["n", "length", "size"], allow_const=False)
            header, chunk = f"for {j} in range({p}, {n_total}, {nthreads}):", None
            elem_of = lambda jj: f"{x}[{jj}]"  # noqa: E731
        else:
            chunk = sizes.get("chunk", L, None, ["chunk", "per_thread", "block"], allow_const=True)
            header = None
            elem_of = lambda jj: f"{x}[{p} * {chunk} + {jj}]"  # noqa: E731
        return _Chunks((P, L), (N,), 1, "0", (P,), header, chunk, elem_of)
    R = choice(rng, [4, 6, 8])
    P = choice(rng, [2, 4])
    L = choice(rng, [4, 6, 8])
    C = P * L
    r, p = names("r", "row", "i"), names("p", "part", "seg")
    code(f"{r}, {p} = wp.tid()")
    if strided:
        nthreads = sizes.get("parts", P, None, ["parts", "nparts", "num_segments"])
        ncols = sizes.get("cols", C, f"{x}.shape[1]", ["cols", "n", "width"], allow_const=False)
        header, chunk = f"for {j} in range({p}, {ncols}, {nthreads}):", None
        elem_of = lambda jj: f"{x}[{r}, {jj}]"  # noqa: E731
    else:
        chunk = sizes.get("chunk", L, None, ["chunk", "seg_len", "span"], allow_const=True)
        header = None
        elem_of = lambda jj: f"{x}[{r}, {p} * {chunk} + {jj}]"  # noqa: E731
    return _Chunks((R, C), (R, C), R, r, (R, P), header, chunk, elem_of)


def _chunked(rng, op, ft, names, x_dom):
    """Each thread reduces a chunk in registers, then one atomic per thread combines the partials."""
    axis = choice(rng, [1, None], [0.5, 0.5])
    x = names("x", "values", "data", "inp")
    sizes = Sizes(rng, names)
    style = choice(rng, LOOP_STYLES, [0.4, 0.25, 0.15, 0.2])
    helper, func_src = _helper_func(op, ft, names) if coin(rng, 0.4) else (None, None)
    init_dom = _extremum_init_domain(op, x_dom) if op in EXTREMA else None
    strided = coin(rng)
    code = Code(1)
    j = names("j", "k", "e")
    ch = _chunk_split(rng, names, sizes, code, x, j, axis, strided)
    R, C = ch.view
    value, index, out_args = _value_outputs(rng, op, ft, names, ch.n_out, init_dom)
    acc = names("acc", "partial", "local", "s")
    v = names("v", "val", "cur")
    if op in SUM_OPS:
        code(f"{acc} = {ft.zero()}")
    else:
        code(f"{acc} = {ft.cast('-1.0e30' if op == 'max' else '1.0e30')}")
    with code.block(ch.header) if ch.header else loop(code, j, "0", ch.chunk, style):
        if op in SUM_OPS:
            code(f"{acc} += {_transform(op, ch.elem_of(j), helper)}")
        else:
            code(f"{v} = {ch.elem_of(j)}", f"{acc} = {'wp.max' if op == 'max' else 'wp.min'}({acc}, {v})")
    if op == "mean":
        n_expr = sizes.get("count", R * C if axis is None else C, None, ["count", "n_total", "denom"])
        code(f"{acc} = {acc} / {ft.cast(n_expr)}")
    if op in SUM_OPS:
        code(choice(rng, [f"wp.atomic_add({value}, {ch.target}, {acc})", f"{value}[{ch.target}] += {acc}"]))
    else:
        code(f"{'wp.atomic_max' if op == 'max' else 'wp.atomic_min'}({value}, {ch.target}, {acc})")
    x_arg = arr(x, ft.dtype, ch.x_shape, "in", x_dom)
    args = order_args(rng, [x_arg], out_args, sizes.scalar_args)
    kname = names(f"chunked_{op}", f"partial_{op}", f"{op}_two_level", f"blocked_{op}")
    src = _finish(kname, args, ft, code, sizes, [func_src] if func_src else [], rng)
    params = {
        "op": op,
        "axis": axis,
        "view": [R, C],
        "x": x,
        "value_out": value,
        "index_out": index,
        "init": init_dom is not None,
    }
    return make_spec(CATEGORY, kname, src, args, ch.launch, params, algorithmic=1)


@dataclass(frozen=True)
class _TileLayout:
    """What a tile reduction's load fixed: the 2-D view the reference reduces, the reduced
    axis (None: everything), the outputs, the launch, the reduced count and where each
    tile's result is stored (None: atomically added into one value)."""

    view: tuple[int, int]
    axis: int | None
    n_out: int
    launch: tuple[int, ...]
    count: int
    target: str | None


def _tile_load(rng, op, code: Code, const, x, b, t, mode) -> _TileLayout:
    """Emit the load of tile ``b`` into ``t``: a row, a block of rows, a block of columns, or
    a slice of a 1-D array."""
    if mode == "rows":
        R, C = _shape_2d(rng)
        if op in ARG_OPS:
            R = max(R, 8)  # see _loop
        Cc = const(C, "TILE", "COLS", "WIDTH", "N")
        if coin(rng):
            code(f"{t} = wp.tile_load({x}[{b}], shape={Cc})")
        else:
            code(f"{t} = wp.tile_load({x}, shape=(1, {Cc}), offset=({b}, 0))")
        return _TileLayout((R, C), 1, R, (R,), C, f"offset={b}")
    if mode == "row_block":
        TR = choice(rng, [2, 4])
        R = TR * choice(rng, [2, 3, 4])
        C = choice(rng, [c for c in (8, 16, 32) if R * c <= 256])
        TRc, Cc = const(TR, "ROWS", "TILE_M", "BR"), const(C, "COLS", "TILE_N", "WIDTH")
        code(f"{t} = wp.tile_load({x}, shape=({TRc}, {Cc}), offset=({b} * {TRc}, 0))")
        return _TileLayout((R, C), 1, R, (R // TR,), C, f"offset={b} * {TRc}")
    if mode == "col_block":
        TC = choice(rng, [4, 8])
        C = TC * choice(rng, [2, 3, 4])
        R = choice(rng, [r for r in (4, 8, 16) if _fits_256(r, C)])
        Rc, TCc = const(R, "ROWS", "HEIGHT", "TILE_M"), const(TC, "TILE_N", "BC", "COLS")
        code(f"{t} = wp.tile_load({x}, shape=({Rc}, {TCc}), offset=(0, {b} * {TCc}))")
        return _TileLayout((R, C), 0, C, (C // TC,), R, f"offset={b} * {TCc}")
    # global / partials: 1-D array cut into tiles
    T = choice(rng, [16, 32, 64])
    B = choice(rng, [2, 3, 4])
    Tc = const(T, "TILE", "BLOCK", "CHUNK")
    code(f"{t} = wp.tile_load({x}, shape={Tc}, offset={b} * {Tc})")
    if mode == "global":
        return _TileLayout((1, T * B), None, 1, (B,), T * B, None)
    return _TileLayout((B, T), 1, B, (B,), T, f"offset={b}")


def _tile_terms(rng, names, code: Code, ft, funcs: list[str], op, t) -> None:
    """Map the tile to the terms the op sums (squares, magnitudes); nothing for the others."""
    if op == "sumsq":
        if coin(rng):
            code(f"{t} = wp.tile_map(wp.mul, {t}, {t})")
        else:
            fname = names("square", "sq")
            funcs.append(f"@wp.func\ndef {fname}(v: {ft.ann}):\n    return v * v\n")
            code(f"{t} = wp.tile_map({fname}, {t})")
    elif op == "abssum":
        code(f"{t} = wp.tile_map(wp.abs, {t})")


def _tile_reduce(rng, names, code: Code, ft, funcs: list[str], op, t, s, ax, count, value, index, b) -> None:
    """Emit ``s`` = the tile's reduction (for arg ops, also the stores of the index and value)."""
    if op in SUM_OPS:
        form = choice(rng, ["tile_sum", "reduce_add", "reduce_func"], [0.5, 0.25, 0.25])
        if form == "tile_sum":
            code(f"{s} = wp.tile_sum({t}{ax})")
        elif form == "reduce_add":
            code(f"{s} = wp.tile_reduce(wp.add, {t}{ax})")
        else:
            fname = names("add_op", "plus", "combine")
            funcs.append(f"@wp.func\ndef {fname}(a: {ft.ann}, b: {ft.ann}):\n    return a + b\n")
            code(f"{s} = wp.tile_reduce({fname}, {t}{ax})")
        if op == "mean":
            code(f"{s} = {s} * {ft.lit(1.0 / count)}")
    elif op in EXTREMA:
        fn = op
        if ax or coin(rng, 0.4):
            if coin(rng, 0.7):
                code(f"{s} = wp.tile_reduce(wp.{fn}, {t}{ax})")
            else:
                fname = names(f"{fn}_op", f"take_{fn}", "pick")
                funcs.append(f"@wp.func\ndef {fname}(a: {ft.ann}, b: {ft.ann}):\n    return wp.{fn}(a, b)\n")
                code(f"{s} = wp.tile_reduce({fname}, {t}{ax})")
        else:
            code(f"{s} = wp.tile_{fn}({t})")
    else:
        code(f"{s} = wp.tile_{op}({t})")
        if value:
            mv = names("mv", "peak_tile", "vals")
            code(
                f"{mv} = wp.tile_{'max' if op == 'argmax' else 'min'}({t})", f"wp.tile_store({value}, {mv}, offset={b})"
            )
        code(f"wp.tile_store({index}, {s}, offset={b})")


def _tile(rng, op, ft, names, x_dom):
    x = names("x", "values", "data", "inp", "src")
    sizes = Sizes(rng, names)
    consts: list[tuple[str, str]] = []
    funcs: list[str] = []
    code = Code(1)

    def const(value, *cands):
        if coin(rng, 0.5):
            return str(value)
        n = names(*cands)
        consts.append((n, str(value)))
        return n

    if op in ARG_OPS:
        mode = "rows"
    elif op in EXTREMA:
        mode = choice(rng, ["rows", "row_block", "col_block", "partials"])
    else:
        mode = choice(rng, ["rows", "row_block", "col_block", "global"])
    b = names("b", "blk", "tile_id", "i", "row")
    code(f"{b} = wp.tid()")
    t = names("t", "tile", "xt", "block_vals")
    s = names("s", "red", "res", "part")
    lay = _tile_load(rng, op, code, const, x, b, t, mode)
    R, C = lay.view
    value, index, out_args = _value_outputs(rng, op, ft, names, lay.n_out, None)
    x_shape = (R * C,) if mode in ("global", "partials") else (R, C)
    _tile_terms(rng, names, code, ft, funcs, op, t)
    ax = "" if mode in ("rows", "global", "partials") else f", axis={1 if lay.axis == 1 else 0}"
    _tile_reduce(rng, names, code, ft, funcs, op, t, s, ax, lay.count, value, index, b)
    if op not in ARG_OPS:
        if lay.target is None:
            code(f"wp.tile_atomic_add({value}, {s})")
        else:
            code(f"wp.tile_store({value}, {s}, {lay.target})")

    x_arg = arr(x, ft.dtype, x_shape, "in", x_dom)
    args = order_args(rng, [x_arg], out_args, sizes.scalar_args)
    kname = names(f"tile_{op}", f"{op}_tiled", f"block_{op}", f"{op}_{mode}")
    block_dim = choice(rng, [32, 64, 128])
    src = _finish(kname, args, ft, code, sizes, funcs, rng, extra_consts=consts)
    params = {
        "op": op,
        "axis": lay.axis,
        "view": list(lay.view),
        "x": x,
        "value_out": value,
        "index_out": index,
        "init": False,
    }
    return make_spec(CATEGORY, kname, src, args, lay.launch, params, block_dim=block_dim)


def _fits_256(r: int, c: int) -> bool:
    """A (r, c) array stays within the 256-element budget for test vectors."""
    return r * c <= 256


def _finish(kname, args, ft, code, sizes, funcs, rng, extra_consts=()):
    return assemble(rng, kname, args, ft, code, list(sizes.constants) + list(extra_consts), funcs)


# --------------------------------------------------------------------------- reference


def check(spec: KernelSpec, inputs: dict, outputs: dict) -> str | None:
    p = spec.params
    op, axis = p["op"], p["axis"]
    x = as_f64(inputs[p["x"]]).reshape(p["view"])
    dtype = next(a.dtype for a in spec.args if a.name == p["x"])
    ax = None if axis is None else int(axis)
    if op in SUM_OPS:
        terms = {"sum": x, "mean": x, "sumsq": x * x, "abssum": np.abs(x)}[op]
        want = terms.sum(axis=ax)
        scale = np.abs(terms).sum(axis=ax)
        if op == "mean":
            count = x.size if ax is None else x.shape[ax]
            want, scale = want / count, scale / count
        got = outputs[p["value_out"]]
        return check_close(
            p["value_out"], got, np.reshape(want, np.shape(got)), dtype, scale=scale.reshape(np.shape(got))
        )
    if op in EXTREMA:
        want = x.max(axis=ax) if op == "max" else x.min(axis=ax)
        got = outputs[p["value_out"]]
        want = np.reshape(want, np.shape(got))
        if p.get("init"):
            init = as_f64(inputs[p["value_out"]])
            want = np.maximum(want, init) if op == "max" else np.minimum(want, init)
        return check_close(p["value_out"], got, want, dtype)
    # argmax / argmin: the index must point at an extreme value (ties resolve either way)
    pick = np.argmax if op == "argmax" else np.argmin
    want_idx = pick(x, axis=ax)
    got_idx = np.asarray(outputs[p["index_out"]]).reshape(want_idx.shape).astype(np.int64)
    n_red = x.shape[ax]
    if np.any(got_idx < 0) or np.any(got_idx >= n_red):
        return f"{p['index_out']}: index out of range"
    got_vals = np.take_along_axis(x, np.expand_dims(got_idx, ax), ax).squeeze(ax)
    want_vals = np.take_along_axis(x, np.expand_dims(want_idx, ax), ax).squeeze(ax)
    if np.any(got_vals != want_vals):
        k = int(np.argmax(got_vals != want_vals))
        return f"{p['index_out']}: entry {k} is {got_idx.flat[k]}, reference {want_idx.flat[k]}"
    msg = None
    if p.get("value_out"):
        msg = check_close(p["value_out"], outputs[p["value_out"]], want_vals, dtype)
    return first_error(msg)
