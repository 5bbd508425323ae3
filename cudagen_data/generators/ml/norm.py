"""Layer norm and RMS norm over rows, with or without an affine weight / bias.

Strategies: two passes per row (mean, then variance); one pass accumulating sum and sum
of squares; Welford's online mean / M2 update; a thread per element that recomputes its
row statistics; a thread per row that saves mean / rstd to outputs and normalises with
the stored values (as training kernels do); tiles (tile_sum, tile_map, broadcast).

params: variant ("layernorm" | "rmsnorm"), eps (value) / eps_arg (argument name or None),
weight / bias (argument names or None), view, x, out, mean_out / rstd_out, strategy.
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
    first_error,
    loop,
    make_spec,
    order_args,
    pick_float,
    scalar,
)

CATEGORY = "norm"


def generate(rng: np.random.Generator) -> KernelSpec:
    variant = choice(rng, ["layernorm", "rmsnorm"], [0.6, 0.4])
    strategies = ["two_pass", "one_pass", "welford", "elem", "saved", "tile"]
    p = [0.22, 0.12, 0.14, 0.14, 0.14, 0.24]
    if variant == "rmsnorm":
        p[1], p[2] = 0.0, 0.0  # one sum of squares: no separate one-pass / Welford forms
    strategy = choice(rng, strategies, p)
    names = Names(rng)
    ft = pick_float(rng, 0.3)
    affine = choice(
        rng, ["none", "weight", "weight_bias"], [0.25, 0.35, 0.4] if variant == "layernorm" else [0.3, 0.6, 0.1]
    )
    eps = choice(rng, [1e-5, 1e-6, 1e-3, 1e-2])
    lo = choice(rng, [-1.0, -2.0, 0.0])
    x_dom = (lo, lo + choice(rng, [2.0, 4.0]))
    if strategy == "tile":
        return _tile(rng, names, ft, variant, affine, eps, x_dom)
    return _loops(rng, names, ft, variant, affine, eps, x_dom, strategy)


class _Args:
    def __init__(self, rng, names: Names, ft: FloatType, variant, affine, eps, x_dom, R, C, x_shape):
        self.x = names("x", "inp", "hidden", "act", "h")
        self.out = names("out", "y", "normed", "result", "h_out")
        self.w = names("weight", "gamma", "w", "scale") if affine != "none" else None
        self.b = names("bias", "beta", "b", "shift") if affine == "weight_bias" else None
        self.eps_arg = names("eps", "epsilon", "eps_val") if coin(rng, 0.5) else None
        self.eps = eps
        self.inputs = [arr(self.x, ft.dtype, x_shape, "in", x_dom)]
        if self.w:
            self.inputs.append(arr(self.w, ft.dtype, (C,), "in", (0.5, 1.5)))
        if self.b:
            self.inputs.append(arr(self.b, ft.dtype, (C,), "in", (-0.5, 0.5)))
        self.scalars = [scalar(self.eps_arg, ft.dtype, (eps, eps))] if self.eps_arg else []
        self.outputs = [arr(self.out, ft.dtype, x_shape, "out")]
        self.mean_out = self.rstd_out = None
        self.eps_const = None

    def eps_expr(self, rng, ft: FloatType, consts: list, names: Names) -> str:
        if self.eps_arg:
            return self.eps_arg
        if coin(rng, 0.4):
            self.eps_const = names("EPS", "EPSILON", "NORM_EPS")
            value = repr(self.eps) if not ft.is64 else f"wp.float64({self.eps!r})"
            consts.append((self.eps_const, value))
            return self.eps_const
        return ft.lit(self.eps)

    def params(self, variant, R, C, strategy):
        return {
            "variant": variant,
            "eps": self.eps,
            "eps_arg": self.eps_arg,
            "weight": self.w,
            "bias": self.b,
            "view": [R, C],
            "x": self.x,
            "out": self.out,
            "mean_out": self.mean_out,
            "rstd_out": self.rstd_out,
            "strategy": strategy,
        }


def _affine(a: _Args, val: str, j: str, rng) -> str:
    if a.w:
        val = f"{val} * {a.w}[{j}]" if coin(rng) else f"{a.w}[{j}] * {val}"
    if a.b:
        val = f"{val} + {a.b}[{j}]"
    return val


class _Row:
    """Row ``r``'s element ``j`` of an array, in the 2-D or flat layout."""

    def __init__(self, layout, r, ncols):
        self.layout, self.r, self.ncols = layout, r, ncols

    def el(self, array, jj):
        if self.layout == "flat":
            return f"{array}[{self.r} * {self.ncols} + {jj}]"
        return f"{array}[{self.r}, {jj}]"


def _mean_var(rng, names, code: Code, ft: FloatType, a: _Args, row: _Row, variant, strategy, j, n, style, mean, var):
    """Emit the row statistics: ``var`` (the mean square for RMS norm) and ``mean`` (two
    passes, one pass of sum and sum of squares, or Welford's update); the mean's name, or
    None for RMS norm."""
    el, nf = row.el, ft.cast(n)
    if variant == "rmsnorm":
        ss = names("ss", "sumsq", "acc", "sq_sum")
        code(f"{ss} = {ft.zero()}")
        with loop(code, j, "0", n, style):
            v = names("v", "xv", "cur")
            if coin(rng):
                code(f"{v} = {el(a.x, j)}", f"{ss} += {v} * {v}")
            else:
                code(f"{ss} += {el(a.x, j)} * {el(a.x, j)}")
        code(f"{var} = {ss} / {nf}")
        return None
    if strategy == "welford":
        m2, cnt = names("m2", "M2", "sq_dev"), names("count", "cnt", "n_seen")
        code(f"{mean} = {ft.zero()}", f"{m2} = {ft.zero()}", f"{cnt} = {ft.zero()}")
        with loop(code, j, "0", n, style):
            v, d = names("v", "xv", "cur"), names("delta", "d", "dev")
            code(
                f"{v} = {el(a.x, j)}",
                f"{cnt} += {ft.lit(1.0)}",
                f"{d} = {v} - {mean}",
                f"{mean} += {d} / {cnt}",
                f"{m2} += {d} * ({v} - {mean})",
            )
        code(f"{var} = {m2} / {nf}")
    elif strategy == "one_pass":
        s1, s2 = names("s1", "total", "sum_x"), names("s2", "total_sq", "sum_xx")
        code(f"{s1} = {ft.zero()}", f"{s2} = {ft.zero()}")
        with loop(code, j, "0", n, style):
            v = names("v", "xv", "cur")
            code(f"{v} = {el(a.x, j)}", f"{s1} += {v}", f"{s2} += {v} * {v}")
        code(f"{mean} = {s1} / {nf}", f"{var} = wp.max({s2} / {nf} - {mean} * {mean}, {ft.lit(0.0)})")
    else:
        s1 = names("s1", "total", "acc")
        code(f"{s1} = {ft.zero()}")
        with loop(code, j, "0", n, style):
            code(f"{s1} += {el(a.x, j)}")
        code(f"{mean} = {s1} / {nf}" if coin(rng) else f"{mean} = {s1} * ({ft.lit(1.0)} / {nf})")
        s2, d = names("s2", "acc2", "dev_sq"), names("d", "dev", "centered")
        code(f"{s2} = {ft.zero()}")
        with loop(code, j, "0", n, style):
            code(f"{d} = {el(a.x, j)} - {mean}", f"{s2} += {d} * {d}")
        code(f"{var} = {s2} / {nf}")
    return mean


def _save_stats(names, code: Code, ft: FloatType, a: _Args, R, r, mean, rstd):
    """Write mean / rstd to outputs and read them back (as training kernels do); the names
    the normalisation then reads."""
    a.rstd_out = names("rstd_out", "inv_std_out", "saved_rstd")
    a.outputs.append(arr(a.rstd_out, ft.dtype, (R,), "out"))
    code(f"{a.rstd_out}[{r}] = {rstd}")
    if mean:
        a.mean_out = names("mean_out", "saved_mean", "mu_out")
        a.outputs.append(arr(a.mean_out, ft.dtype, (R,), "out"))
        code(f"{a.mean_out}[{r}] = {mean}")
        mean2 = names("mu_r", "m_saved", "mean_r")
        code(f"{mean2} = {a.mean_out}[{r}]")
        mean = mean2
    rstd2 = names("rs_r", "r_saved", "rstd_r")
    code(f"{rstd2} = {a.rstd_out}[{r}]")
    return mean, rstd2


def _write_normed(rng, names, code: Code, a: _Args, row: _Row, mean, rstd, sd, own, j, n):
    """Emit out = (x - mean) * rstd (or / std), then the affine weight and bias: at the
    thread's own element (``own``) or in a loop over the row."""
    el = row.el

    def normed(jj):
        centered = f"({el(a.x, jj)} - {mean})" if mean else el(a.x, jj)
        return f"{centered} * {rstd}" if sd is None else f"{centered} / {sd}"

    def write(jj):
        if coin(rng, 0.5):
            y = names("y", "nv", "xhat")
            code(f"{y} = {normed(jj)}", f"{el(a.out, jj)} = {_affine(a, y, jj, rng)}")
        else:
            code(f"{el(a.out, jj)} = {_affine(a, normed(jj), jj, rng)}")

    if own:
        write(own)
    else:
        with loop(code, j, "0", n, choice(rng, ["range", "range2", "range3"])):
            write(j)


def _loops(rng, names, ft: FloatType, variant, affine, eps, x_dom, strategy):
    R = choice(rng, [2, 4, 6, 8, 16])
    C = choice(rng, [c for c in (8, 12, 16, 24, 32, 48, 64) if R * c <= 256])
    layout = choice(rng, ["2d", "flat"], [0.8, 0.2])
    x_shape = (R, C) if layout == "2d" else (R * C,)
    a = _Args(rng, names, ft, variant, affine, eps, x_dom, R, C, x_shape)
    sizes = Sizes(rng, names)
    consts: list = []
    n = sizes.get(
        "n",
        C,
        f"{a.x}.shape[1]" if layout == "2d" else None,
        ["n", "cols", "width", "hidden_dim", "d"],
        allow_const=C <= 16,
    )
    ncols = sizes.get("cols", C, None, ["row_stride", "stride", "ld"]) if layout == "flat" else None
    eps_e = a.eps_expr(rng, ft, consts, names)
    code = Code(1)
    r = names("row", "r", "i", "tok")
    j = names("j", "k", "c", "f")
    own = None
    if strategy == "elem":
        own = names("col", "jj", "feat", "e")
        code(f"{r}, {own} = wp.tid()")
        launch = (R, C)
    else:
        code(f"{r} = wp.tid()")
        launch = (R,)
    row = _Row(layout, r, ncols)

    style = choice(rng, ["range", "range2", "range3", "rev"], [0.5, 0.2, 0.15, 0.15])
    mean, var = names("mean", "mu", "avg"), names("var", "variance", "sigma2", "ms")
    rstd = names("rstd", "inv_std", "inv_rms", "rs")
    mean = _mean_var(rng, names, code, ft, a, row, variant, strategy, j, n, style, mean, var)
    form = choice(rng, ["rsqrt", "divide"]) if strategy != "saved" else "rsqrt"
    sd = None
    if form == "rsqrt":
        code(f"{rstd} = {ft.lit(1.0)} / wp.sqrt({var} + {eps_e})")
    else:
        sd = names("std", "sd", "denom")
        code(f"{sd} = wp.sqrt({var} + {eps_e})")
    if strategy == "saved":
        mean, rstd = _save_stats(names, code, ft, a, R, r, mean, rstd)
    _write_normed(rng, names, code, a, row, mean, rstd, sd, own, j, n)
    args = order_args(rng, a.inputs, a.outputs, a.scalars + sizes.scalar_args)
    kname = names(
        f"{variant}_{strategy}",
        variant,
        f"{variant}_rows",
        "rms_norm" if variant == "rmsnorm" else "layer_norm",
        f"{'rms' if variant == 'rmsnorm' else 'layer'}_norm_{'affine' if affine != 'none' else 'plain'}",
    )
    src = assemble(rng, kname, args, ft, code, list(sizes.constants) + consts)
    algo = {"welford": 4, "saved": 1, "one_pass": 1}.get(strategy, 0)
    return make_spec(CATEGORY, kname, src, args, launch, a.params(variant, R, C, strategy), algorithmic=algo)


def _tile(rng, names, ft, variant, affine, eps, x_dom):
    C = choice(rng, [8, 16, 32, 64])
    R = choice(rng, [r for r in (2, 4, 8, 16) if r * C <= 256])
    a = _Args(rng, names, ft, variant, affine, eps, x_dom, R, C, (R, C))
    consts: list = []
    Cc = str(C)
    if coin(rng):
        Cc = names("N", "COLS", "HIDDEN", "D")
        consts.append((Cc, str(C)))
    eps_e = a.eps_expr(rng, ft, consts, names)
    code = Code(1)
    r = names("row", "r", "i", "b")
    code(f"{r} = wp.tid()")
    t = names("t", "xt", "row_tile", "tile")
    code(f"{t} = wp.tile_load({a.x}[{r}], shape={Cc})")
    inv_n = ft.lit(1.0 / C)
    scalar_stats = coin(rng, 0.5)  # pull statistics out as scalars, or keep them as 1-element tiles
    if variant == "layernorm":
        mean = names("mean", "mu", "avg")
        if scalar_stats:
            code(f"{mean} = wp.tile_extract(wp.tile_sum({t}), 0) * {inv_n}")
            d = names("d", "centered", "xc")
            code(f"{d} = {t} - wp.tile_full({Cc}, {mean}, dtype={ft.ann})")
        else:
            code(f"{mean} = wp.tile_sum({t}) * {inv_n}")
            d = names("d", "centered", "xc")
            code(f"{d} = {t} - wp.tile_broadcast({mean}, shape=({Cc},))")
    else:
        d = t
    var = names("var", "ms", "variance")
    sq = f"wp.tile_map(wp.mul, {d}, {d})"
    rstd = names("rstd", "inv_std", "inv_rms")
    if scalar_stats:
        code(f"{var} = wp.tile_extract(wp.tile_sum({sq}), 0) * {inv_n}")
        code(f"{rstd} = {ft.lit(1.0)} / wp.sqrt({var} + {eps_e})")
        y = names("y", "xhat", "normed")
        code(f"{y} = {d} * {rstd}")
    else:
        fname = names("inv_sqrt_eps", "rsqrt_eps", "inv_std_fn")
        e_par = "eps_v"
        func = (
            f"@wp.func\ndef {fname}(v: {ft.ann}, {e_par}: {ft.ann}):\n"
            f"    return {ft.lit(1.0)} / wp.sqrt(v * {inv_n} + {e_par})\n"
        )
        code(f"{var} = wp.tile_sum({sq})")
        code(f"{rstd} = wp.tile_map({fname}, {var}, wp.tile_full(1, {eps_e}, dtype={ft.ann}))")
        y = names("y", "xhat", "normed")
        code(f"{y} = wp.tile_map(wp.mul, {d}, wp.tile_broadcast({rstd}, shape=({Cc},)))")
    if a.w:
        wt = names("wt", "gamma_t", "w_tile")
        code(f"{wt} = wp.tile_load({a.w}, shape={Cc})", f"{y} = wp.tile_map(wp.mul, {y}, {wt})")
    if a.b:
        bt = names("bt", "beta_t", "b_tile")
        code(f"{bt} = wp.tile_load({a.b}, shape={Cc})", f"{y} = {y} + {bt}")
    code(f"wp.tile_store({a.out}[{r}], {y})")
    funcs = [func] if not scalar_stats else []
    args = order_args(rng, a.inputs, a.outputs, a.scalars)
    kname = names(
        f"tile_{variant}",
        f"{variant}_tiled",
        f"block_{variant}",
        "rms_norm_tile" if variant == "rmsnorm" else "layer_norm_tile",
    )
    src = assemble(rng, kname, args, ft, code, consts, funcs)
    return make_spec(
        CATEGORY, kname, src, args, (R,), a.params(variant, R, C, "tile"), block_dim=choice(rng, [32, 64, 128])
    )


# --------------------------------------------------------------------------- reference


def check(spec: KernelSpec, inputs: dict, outputs: dict) -> str | None:
    p = spec.params
    x = as_f64(inputs[p["x"]]).reshape(p["view"])
    eps = float(inputs[p["eps_arg"]]) if p["eps_arg"] else float(p["eps"])
    dtype = next(a.dtype for a in spec.args if a.name == p["out"])
    if p["variant"] == "layernorm":
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        xc = x - mean
    else:
        mean = None
        var = (x * x).mean(axis=1, keepdims=True)
        xc = x
    rstd = 1.0 / np.sqrt(var + eps)
    y = xc * rstd
    # float32 error of (x - mean) * rstd grows with |x| / std (cancellation in x - mean,
    # and in E[x^2] - mean^2 for the one-pass form)
    scale = (np.abs(x) + np.abs(mean if mean is not None else 0.0)) * rstd
    if p["strategy"] == "one_pass":
        scale = scale + (x * x).mean(axis=1, keepdims=True) * rstd**3 * np.abs(xc)
    if p["weight"]:
        w = as_f64(inputs[p["weight"]])[None, :]
        y, scale = y * w, scale * np.abs(w)
    if p["bias"]:
        b = as_f64(inputs[p["bias"]])[None, :]
        y, scale = y + b, scale + np.abs(b)
    got = as_f64(outputs[p["out"]]).reshape(y.shape)
    msgs = [check_close(p["out"], got, y, dtype, scale=scale)]
    if p.get("mean_out"):
        msgs.append(check_close(p["mean_out"], outputs[p["mean_out"]], mean[:, 0], dtype, scale=np.abs(x).mean(axis=1)))
    if p.get("rstd_out"):
        msgs.append(
            check_close(
                p["rstd_out"],
                outputs[p["rstd_out"]],
                rstd[:, 0],
                dtype,
                scale=rstd[:, 0] * (1.0 + (x * x).mean(axis=1) / (var[:, 0] + eps)),
            )
        )
    return first_error(*msgs)
