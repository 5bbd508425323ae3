"""Numerically stable row-wise softmax, log-softmax and temperature softmax.

Strategies: three passes per row (max, sum, normalise); online single-pass max/sum with
rescaling; a thread per element that recomputes its row statistics; a thread per row that
saves its statistics (row max and sum, or log-sum-exp) to outputs and reads them back, as
training kernels do for the backward pass; tiles (tile_max / tile_reduce over an axis,
tile_map(wp.exp), tile_sum, broadcast).

Loop accumulators start from the row's first element rather than from -inf / 0: Warp
1.19's backward replays straight-line code but skips dynamic loops, so a sum that starts
at 0 would be divided by in the adjoint (NaN gradients).

params: op ("softmax" | "log_softmax"), temperature (argument name or None), axis, view,
x, out, stats (names of saved statistic outputs: {"max": .., "sum": .., "lse": ..}).
"""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from ._common import (
    Code,
    Constants,
    FloatType,
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
    scalar,
)

CATEGORY = "softmax"


def generate(rng: np.random.Generator) -> KernelSpec:
    strategy = choice(rng, ["three_pass", "online", "elem", "saved", "tile"], [0.22, 0.2, 0.15, 0.15, 0.28])
    op = choice(rng, ["softmax", "log_softmax"], [0.75, 0.25])
    names = Names(rng)
    ft = pick_float(rng, 0.3)
    temperature = coin(rng, 0.25)
    spread = choice(rng, [2.0, 5.0, 10.0, 30.0])
    if strategy == "tile":
        return _tile(rng, names, ft, op, temperature, spread)
    return _loops(rng, names, ft, op, temperature, spread, strategy)


def _exp_helper(rng, names, ft, funcs):
    if not coin(rng, 0.3):
        return None
    name = names("shifted_exp", "exp_minus", "stable_exp", "exp_sub")
    funcs.append(f"@wp.func\ndef {name}(v: {ft.ann}, m: {ft.ann}):\n    return wp.exp(v - m)\n")
    return name


class _Rows:
    """How the kernel reads row ``r`` of the input (element ``j`` along the reduced axis, in
    the 2-D or flat layout, divided by the temperature) and writes the output."""

    def __init__(self, x, r, axis, layout, ncols, temp, inv_temp, exp_fn):
        self.x, self.r, self.axis, self.layout, self.ncols = x, r, axis, layout, ncols
        self.temp, self.inv_temp, self.exp_fn = temp, inv_temp, exp_fn

    def el(self, array, j):
        rr, cc = (self.r, j) if self.axis == 1 else (j, self.r)
        if self.layout == "flat":
            return f"{array}[{rr} * {self.ncols}]" if cc == "0" else f"{array}[{rr} * {self.ncols} + {cc}]"
        return f"{array}[{rr}, {cc}]"

    def val(self, j):
        v = self.el(self.x, j)
        if self.temp:
            return f"{v} * {self.temp}" if self.inv_temp else f"{v} / {self.temp}"
        return v

    def ex(self, v, m):
        return f"{self.exp_fn}({v}, {m})" if self.exp_fn else f"wp.exp({v} - {m})"


def _max_and_sum(rng, names, code: Code, ft: FloatType, rows: _Rows, strategy, unrolled, jv, n, style, m, s):
    """Emit the row maximum ``m`` and the sum ``s`` of exp(x - m): one online pass that
    rescales the running sum whenever the max grows, or a max pass then a sum pass."""
    val, ex = rows.val, rows.ex
    if strategy == "online":
        if unrolled and coin(rng):
            code(f"{m} = {ft.cast('-1.0e30')}", f"{s} = {ft.zero()}")
            start = "0"
        else:
            code(f"{m} = {val('0')}", f"{s} = {ft.cast('1.0')}")
            start = "1"
        v, mn = names("v", "cur", "xv"), names("m_new", "new_max", "mn")
        with loop(code, jv, start, n, style):
            code(f"{v} = {val(jv)}", f"{mn} = wp.max({m}, {v})")
            code(f"{s} = {s} * {ex(m, mn)} + {ex(v, mn)}", f"{m} = {mn}")
        return
    code(f"{m} = {val('0')}")
    with loop(code, jv, "1", n, style):
        if coin(rng, 0.6):
            code(f"{m} = wp.max({m}, {val(jv)})")
        else:
            v = names("v", "cur", "xv")
            code(f"{v} = {val(jv)}")
            with code.block(f"if {v} > {m}:"):
                code(f"{m} = {v}")
    code(f"{s} = {ex(val('0'), m)}")
    with loop(code, jv, "1", n, style):
        code(f"{s} += {ex(val(jv), m)}" if coin(rng, 0.7) else f"{s} = {s} + {ex(val(jv), m)}")


def _save_stats(rng, names, code: Code, ft: FloatType, op, r, n_out, m, s):
    """Persist the row statistics to outputs (log-sum-exp, or max and sum) and read them
    back, as training kernels do; (max or lse name, sum name or None, stats, output args)."""
    stats: dict[str, str] = {}
    if op == "log_softmax" or coin(rng, 0.3):
        lse = names("lse", "log_norm", "logsumexp")
        stats["lse"] = lse
        code(f"{lse}[{r}] = {m} + wp.log({s})")
        lv = names("lse_r", "ln", "norm_log")
        code(f"{lv} = {lse}[{r}]")
        return lv, None, stats, [arr(lse, ft.dtype, (n_out,), "out")]
    mo, so = names("max_out", "row_max_out", "stat_max"), names("sum_out", "row_sum_out", "stat_sum")
    stats["max"], stats["sum"] = mo, so
    code(f"{mo}[{r}] = {m}", f"{so}[{r}] = {s}")
    mv, sv = names("m_saved", "mrow", "mm"), names("s_saved", "srow", "ss")
    code(f"{mv} = {mo}[{r}]", f"{sv} = {so}[{r}]")
    return mv, sv, stats, [arr(mo, ft.dtype, (n_out,), "out"), arr(so, ft.dtype, (n_out,), "out")]


def _normalise(rng, names, code: Code, ft: FloatType, rows: _Rows, op, out, m, s, own, jv, n, style):
    """Emit the output: at the thread's own element (``own``) or a loop over the row.
    ``s`` None: ``m`` holds the log-sum-exp."""
    val, ex, el = rows.val, rows.ex, rows.el
    reciprocal = op == "softmax" and s is not None and coin(rng, 0.4)
    inv = names("inv", "inv_s", "rcp", "scale")

    def write(j):
        if s is None:
            if op == "log_softmax":
                code(f"{el(out, j)} = {val(j)} - {m}")
            else:
                code(f"{el(out, j)} = wp.exp({val(j)} - {m})")
            return
        if op == "log_softmax":
            code(f"{el(out, j)} = {val(j)} - {m} - wp.log({s})")
        elif reciprocal:
            code(f"{el(out, j)} = {ex(val(j), m)} * {inv}")
        else:
            code(f"{el(out, j)} = {ex(val(j), m)} / {s}")

    if reciprocal:
        code(f"{inv} = {ft.lit(1.0)} / {s}")
    if own:
        write(own)
    else:
        with loop(code, jv, "0", n, style):
            write(jv)


def _loops(rng, names, ft: FloatType, op, temperature, spread, strategy):
    R = choice(rng, [2, 4, 6, 8, 16])
    C = choice(rng, [c for c in (4, 8, 10, 16, 24, 32, 64) if R * c <= 256])
    axis = 1 if coin(rng, 0.8) else 0
    layout = choice(rng, ["2d", "flat"], [0.8, 0.2])
    x = names("x", "logits", "scores", "inp", "z")
    out = names("out", "probs", "y", "p", "result") if op == "softmax" else names("out", "log_probs", "logp", "y")
    temp = names("temperature", "tau", "temp", "t_inv") if temperature else None
    inv_temp = temperature and temp == "t_inv"
    sizes = Sizes(rng, names)
    n_red = C if axis == 1 else R
    shape_ref = f"{x}.shape[{axis}]" if layout == "2d" else None
    n = sizes.get("n", n_red, shape_ref, ["n", "cols", "width", "classes"], allow_const=n_red <= 16)
    unrolled = sizes.is_const("n")
    if not unrolled:
        # The adjoint of a dynamic loop re-runs its body from the loop's initial state
        # (Warp skips dynamic loops when replaying the forward), so it evaluates
        # exp(x_j - x_0) instead of exp(x_j - max): keep the spread small enough for
        # those products to stay finite in float32.
        spread = min(spread, 5.0)
    ncols = sizes.get("cols", C, None, ["row_stride", "stride", "ncols"]) if layout == "flat" else None
    funcs: list[str] = []
    exp_fn = _exp_helper(rng, names, ft, funcs)
    code = Code(1)
    r = names("row", "r", "i", "b") if axis == 1 else names("col", "c", "j", "b")
    jv = names("j", "k", "e", "t")
    own = None
    if strategy == "elem":
        own = names("jj", "idx", "me", "pos")
        code(f"{r}, {own} = wp.tid()")
        launch = (R, C) if axis == 1 else (C, R)
    else:
        code(f"{r} = wp.tid()")
        launch = (R,) if axis == 1 else (C,)
    rows = _Rows(x, r, axis, layout, ncols, temp, inv_temp, exp_fn)

    m, s = names("m", "row_max", "mx", "peak"), names("s", "denom", "total", "norm")
    style = choice(rng, ["range", "range2", "range3"])
    stats: dict[str, str] = {}
    stat_args = []
    _max_and_sum(rng, names, code, ft, rows, strategy, unrolled, jv, n, style, m, s)
    if strategy == "saved":
        m, s, stats, stat_args = _save_stats(rng, names, code, ft, op, r, R if axis == 1 else C, m, s)
    _normalise(rng, names, code, ft, rows, op, out, m, s, own, jv, n, style)

    x_shape = (R, C) if layout == "2d" else (R * C,)
    inputs = [arr(x, ft.dtype, x_shape, "in", (-spread, spread))]
    scalars = [scalar(temp, ft.dtype, (0.5, 2.0))] if temp else []
    args = order_args(rng, inputs, [arr(out, ft.dtype, x_shape, "out")] + stat_args, scalars + sizes.scalar_args)
    kname = names(
        f"{op}_{strategy}",
        f"row_{op}",
        f"{op}_rows" if axis == 1 else f"{op}_cols",
        f"stable_{op}",
        "online_softmax" if strategy == "online" else f"{op}_kernel",
    )
    src = assemble(rng, kname, args, ft, code, sizes.constants, funcs)
    params = {
        "op": op,
        "temperature": temp,
        "inv_temperature": bool(inv_temp),
        "axis": axis,
        "view": [R, C],
        "x": x,
        "out": out,
        "stats": stats,
        "strategy": strategy,
    }
    algo = {"online": 3, "saved": 1}.get(strategy, 0)  # online rescaling is the advanced idea
    return make_spec(CATEGORY, kname, src, args, launch, params, algorithmic=algo)


def _tile_io(rng, const: Constants, code: Code, x, out, b, t, TR, Cc):
    """Emit the load of block ``b``'s rows into tile ``t``: one row as a 1-D tile, or TR
    rows as a 2-D tile; (tile shape text, store statement template, reduce along rows)."""
    if TR == 1 and coin(rng, 0.5):
        code(f"{t} = wp.tile_load({x}[{b}], shape={Cc})")
        return f"({Cc},)", f"wp.tile_store({out}[{b}], {{}})", False
    TRc = const(TR, "ROWS", "TILE_M", "BR") if TR > 1 else "1"
    shape = f"({TRc}, {Cc})"
    offset = f"({b} * {TRc}, 0)" if TR > 1 else f"({b}, 0)"
    code(f"{t} = wp.tile_load({x}, shape={shape}, offset={offset})")
    return shape, f"wp.tile_store({out}, {{}}, offset={offset})", TR > 1


def _tile_softmax(rng, names, code: Code, ft: FloatType, op, t, shape, row_red):
    """Emit the softmax of tile ``t`` (per row when ``row_red``); the result tile's name."""

    def bcast(red):
        if row_red:
            return (
                f"wp.tile_broadcast(wp.tile_reshape({red}, shape=({shape.split(',')[0].strip('(')}, 1)), shape={shape})"
            )
        return f"wp.tile_broadcast({red}, shape={shape})"

    m, e, s = names("m", "mx", "row_max"), names("e", "ex", "num"), names("s", "denom", "total")
    if row_red:
        code(f"{m} = wp.tile_reduce(wp.max, {t}, axis=1)")
    else:
        code(choice(rng, [f"{m} = wp.tile_max({t})", f"{m} = wp.tile_reduce(wp.max, {t})"]))
    d = names("d", "shifted", "centered")
    code(f"{d} = {t} - {bcast(m)}")
    code(f"{e} = wp.tile_map(wp.exp, {d})")
    code(f"{s} = wp.tile_sum({e}, axis=1)" if row_red else f"{s} = wp.tile_sum({e})")
    y = names("y", "res", "normed")
    if op == "log_softmax":
        code(f"{y} = {d} - {bcast(f'wp.tile_map(wp.log, {s})')}")
    elif coin(rng, 0.5):
        code(f"{y} = {e} / {bcast(s)}")
    else:
        code(f"{y} = wp.tile_map(wp.div, {e}, {bcast(s)})")
    return y


def _tile(rng, names, ft, op, temperature, spread):
    TR = choice(rng, [1, 1, 2, 4])
    C = choice(rng, [8, 16, 32, 64])
    R = TR * choice(rng, [1, 2, 4, 8])
    while R * C > 256:
        R -= TR
    x = names("x", "logits", "scores", "inp")
    out = names("out", "probs", "y", "p") if op == "softmax" else names("out", "log_probs", "logp")
    temp = names("temperature", "tau", "temp") if temperature else None
    const = Constants(rng, names)

    Cc = const(C, "COLS", "N", "WIDTH", "CLASSES")
    code = Code(1)
    b = names("b", "row", "blk", "i")
    code(f"{b} = wp.tid()")
    t = names("t", "tile", "xt", "row_tile")
    funcs: list[str] = []
    shape, store, row_red = _tile_io(rng, const, code, x, out, b, t, TR, Cc)
    if temp:
        code(
            f"{t} = {t} * ({ft.lit(1.0)} / {temp})"
            if coin(rng)
            else f"{t} = wp.tile_map(wp.div, {t}, wp.tile_full(shape={shape}, value={temp}, dtype={ft.ann}))"
        )
    code(store.format(_tile_softmax(rng, names, code, ft, op, t, shape, row_red)))
    inputs = [arr(x, ft.dtype, (R, C), "in", (-spread, spread))]
    scalars = [scalar(temp, ft.dtype, (0.5, 2.0))] if temp else []
    args = order_args(rng, inputs, [arr(out, ft.dtype, (R, C), "out")], scalars)
    kname = names(f"tile_{op}", f"{op}_tiled", f"block_{op}", f"{op}_tile_rows")
    src = assemble(rng, kname, args, ft, code, const.items, funcs)
    params = {
        "op": op,
        "temperature": temp,
        "inv_temperature": False,
        "axis": 1,
        "view": [R, C],
        "x": x,
        "out": out,
        "stats": {},
        "strategy": "tile",
    }
    return make_spec(CATEGORY, kname, src, args, (R // TR,), params, block_dim=choice(rng, [32, 64, 128]))


# --------------------------------------------------------------------------- reference


def check(spec: KernelSpec, inputs: dict, outputs: dict) -> str | None:
    p = spec.params
    z = as_f64(inputs[p["x"]]).reshape(p["view"])
    if p["axis"] == 0:
        z = z.T
    if p["temperature"]:
        tval = float(inputs[p["temperature"]])
        z = z * tval if p["inv_temperature"] else z / tval
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    lse = m + np.log(s)
    if p["op"] == "softmax":
        want = e / s
        scale = want
    else:
        want = z - lse
        scale = np.abs(z) + np.abs(lse)
    if p["axis"] == 0:
        want, scale = want.T, scale.T
    dtype = next(a.dtype for a in spec.args if a.name == p["out"])
    got = as_f64(outputs[p["out"]]).reshape(want.shape)
    msgs = [check_close(p["out"], got, want, dtype, scale=scale)]
    st = p.get("stats") or {}
    if "max" in st:
        msgs.append(check_close(st["max"], outputs[st["max"]], m[:, 0], dtype))
    if "sum" in st:
        msgs.append(check_close(st["sum"], outputs[st["sum"]], s[:, 0], dtype))
    if "lse" in st:
        msgs.append(check_close(st["lse"], outputs[st["lse"]], lse[:, 0], dtype, scale=np.abs(m[:, 0])))
    return first_error(*msgs)
