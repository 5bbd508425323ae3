"""Matrix-multiply kernels with fused epilogues, shared by the gemm and linear_act families.

    out = act(alpha * op(A) @ op(B) + bias + beta * C_old) + residual

A is stored (M, K) or transposed (K, M); B is stored (K, N) or transposed (N, K) (the
nn.Linear weight layout).  Strategies: a thread per output element (2-D launch or a
flattened 1-D launch), a thread per output row, a k-loop unrolled by two, a @wp.func dot
product, float64 accumulation of float32 data, and tiles (wp.tile_load / tile_matmul /
tile_store, with tile_transpose for transposed operands and tile_map epilogues).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _activations as acts
from ._common import (
    Code,
    Constants,
    FloatType,
    Names,
    Sizes,
    arr,
    array_ann,
    as_f64,
    assemble,
    check_close,
    choice,
    coin,
    first_error,
    loop,
    order_args,
    scalar,
)

PLAIN_STRATEGIES = ("elem", "flat", "row", "unroll2", "dot_func", "mixed")


@dataclass
class MatmulConfig:
    M: int
    N: int
    K: int
    ft: FloatType
    strategy: str  # one of PLAIN_STRATEGIES or "tile"
    a_trans: bool = False
    b_trans: bool = False
    alpha: bool = False
    beta: bool = False
    bias: str = "none"  # "none" | "col" (N,) | "row" (M,)
    act: str | None = None
    slope: float = 0.01
    residual: bool = False
    tm: int = 8
    tn: int = 8
    tk: int = 8
    # argument name candidates, so families can speak their own vocabulary
    a_names: tuple[str, ...] = ("a", "A", "lhs", "mat_a")
    b_names: tuple[str, ...] = ("b", "B", "rhs", "mat_b")
    c_names: tuple[str, ...] = ("c", "C", "out", "result", "prod")
    bias_names: tuple[str, ...] = ("bias", "b_vec", "shift", "bias_vec")

    def __post_init__(self) -> None:
        if self.act == "relu" and self.M * self.N < 32:
            self.act = "leaky_relu"  # all of a few ReLU outputs can be zero (a rejected, constant output): leak instead


def build(rng: np.random.Generator, cfg: MatmulConfig, names: Names, kname_options: list[str]):
    """(kernel name, source, args, launch_dim, block_dim, params)."""
    ft = cfg.ft
    a, b = names(*cfg.a_names), names(*cfg.b_names)
    c = names(*cfg.c_names)
    bias = names(*cfg.bias_names) if cfg.bias != "none" else None
    res = names("residual", "skip", "res", "shortcut") if cfg.residual else None
    alpha = names("alpha", "scale", "gain") if cfg.alpha else None
    beta = names("beta", "keep", "decay") if cfg.beta else None
    M, N, K = cfg.M, cfg.N, cfg.K
    a_shape = (K, M) if cfg.a_trans else (M, K)
    b_shape = (N, K) if cfg.b_trans else (K, N)
    inputs = [arr(a, ft.dtype, a_shape), arr(b, ft.dtype, b_shape)]
    if bias:
        inputs.append(arr(bias, ft.dtype, (N,) if cfg.bias == "col" else (M,), "in", (-0.5, 0.5)))
    if res:
        inputs.append(arr(res, ft.dtype, (M, N)))
    c_arg = arr(c, ft.dtype, (M, N), "inout" if cfg.beta else "out", (-1.0, 1.0))
    scalars = []
    if alpha:
        scalars.append(scalar(alpha, ft.dtype, (0.5, 1.5)))
    if beta:
        scalars.append(scalar(beta, ft.dtype, (0.25, 1.0)))
    funcs: list[str] = []
    act_name = None
    if cfg.act and (cfg.strategy == "tile" or coin(rng, 0.5)):
        act_name = names(cfg.act, f"{cfg.act}_fn", "activation", "act")
        funcs.append(acts.func(cfg.act, act_name, ft, rng, cfg.slope))
    params = {
        "M": M,
        "N": N,
        "K": K,
        "a": a,
        "b": b,
        "c": c,
        "a_trans": cfg.a_trans,
        "b_trans": cfg.b_trans,
        "alpha": alpha,
        "beta": beta,
        "bias": bias,
        "bias_kind": cfg.bias,
        "act": cfg.act,
        "slope": cfg.slope,
        "residual": res,
        "strategy": cfg.strategy,
    }
    if cfg.strategy == "tile":
        src, launch, block_dim, consts = _tile_body(rng, cfg, names, a, b, c, bias, res, alpha, beta, act_name, funcs)
        sizes_args: list = []
    else:
        code, launch, sizes, consts = _plain_body(rng, cfg, names, a, b, c, bias, res, alpha, beta, act_name, funcs)
        src, block_dim, sizes_args = code, None, sizes.scalar_args
    args = order_args(rng, inputs, [c_arg], scalars + sizes_args)
    kname = names(*kname_options)
    source = assemble(rng, kname, args, ft, src, consts, funcs, mathdx_off=cfg.strategy == "tile")
    return kname, source, args, launch, block_dim, params


def _a(cfg, a, i, k):
    return f"{a}[{k}, {i}]" if cfg.a_trans else f"{a}[{i}, {k}]"


def _b(cfg, b, k, j):
    return f"{b}[{j}, {k}]" if cfg.b_trans else f"{b}[{k}, {j}]"


def _epilogue(rng, cfg, code: Code, names: Names, acc: str, i: str, j: str, c, bias, res, alpha, beta, act_name):
    """Statements applying the epilogue to ``acc`` and storing out[i, j]."""
    ft = cfg.ft
    fused = coin(rng, 0.4)
    pre_terms = [f"{alpha} * {acc}" if alpha else acc]
    if bias:
        pre_terms.append(f"{bias}[{j}]" if cfg.bias == "col" else f"{bias}[{i}]")
    if beta:
        pre_terms.append(f"{beta} * {c}[{i}, {j}]")
    if fused and (act_name or not cfg.act):
        pre = " + ".join(pre_terms)
        val = f"{act_name}({pre})" if act_name else pre
        if res:
            val = f"{val} + {res}[{i}, {j}]"
        code(f"{c}[{i}, {j}] = {val}")
        return
    v = names("v", "y", "pre", "z", "h")
    code(f"{v} = {' + '.join(pre_terms)}")
    if cfg.act:
        code(f"{v} = {act_name}({v})" if act_name else f"{v} = {acts.expr(cfg.act, v, ft, rng, cfg.slope)}")
    if res:
        code(f"{v} = {v} + {res}[{i}, {j}]" if coin(rng) else f"{v} += {res}[{i}, {j}]")
    code(f"{c}[{i}, {j}] = {v}")


def _plain_body(rng, cfg, names, a, b, c, bias, res, alpha, beta, act_name, funcs):
    ft = cfg.ft
    M, N, K = cfg.M, cfg.N, cfg.K
    sizes = Sizes(rng, names)
    code = Code(1)
    strategy = cfg.strategy
    i, j, k = names("i", "row", "m"), names("j", "col", "n"), names("k", "kk", "p", "t")
    k_shape = f"{a}.shape[0]" if cfg.a_trans else f"{a}.shape[1]"
    nk = sizes.get("K", K, k_shape, ["k_dim", "inner", "depth", "kdim"], allow_const=K <= 16 and strategy != "row")
    style = choice(rng, ["range", "range2", "range3", "rev"], [0.45, 0.2, 0.15, 0.2])
    if strategy in ("elem", "unroll2", "dot_func", "mixed"):
        if coin(rng, 0.75):
            code(f"{i}, {j} = wp.tid()")
            launch = (M, N)
        else:
            code(f"{j}, {i} = wp.tid()")
            launch = (N, M)
    elif strategy == "flat":
        t = names("tid", "idx", "e", "lin")
        ncols = sizes.get("N", N, f"{c}.shape[1]", ["n_cols", "ncols", "width"])
        code(f"{t} = wp.tid()", f"{i} = {t} // {ncols}", f"{j} = {t} % {ncols}")
        launch = (M * N,)
    else:  # row
        code(f"{i} = wp.tid()")
        launch = (M,)
    acc = names("acc", "s", "dot", "total", "sum_")

    def k_loop():
        if strategy == "mixed":
            code(f"{acc} = wp.float64(0.0)")
            with loop(code, k, "0", nk, style):
                code(f"{acc} += wp.float64({_a(cfg, a, i, k)}) * wp.float64({_b(cfg, b, k, j)})")
            code(f"{acc}32 = {ft.cast(acc)}")
            return f"{acc}32"
        if strategy == "unroll2":
            a0, a1 = f"{acc}0", f"{acc}1"
            code(f"{a0} = {ft.zero()}", f"{a1} = {ft.zero()}")
            with code.block(f"for {k} in range(0, {nk}, 2):"):
                code(f"{a0} += {_a(cfg, a, i, k)} * {_b(cfg, b, k, j)}")
                code(f"{a1} += {_a(cfg, a, i, k + ' + 1')} * {_b(cfg, b, k + ' + 1', j)}")
            code(f"{acc} = {a0} + {a1}")
            return acc
        if strategy == "dot_func":
            fname = names("dot_rc", "row_col_dot", "inner_product", "dot_at")
            fa, fb, fi, fj = "fa", "fb", "r", "q"
            body = Code(1)
            body(f"s = {ft.zero()}")
            kk = "kk"
            with loop(body, kk, "0", f"{fa}.shape[{0 if cfg.a_trans else 1}]", style):
                body(f"s += {_a(cfg, fa, fi, kk)} * {_b(cfg, fb, kk, fj)}")
            body("return s")
            funcs.insert(
                0,
                f"@wp.func\ndef {fname}({fa}: {array_ann(2, ft.ann, 0)}, {fb}: {array_ann(2, ft.ann, 0)}, "
                f"{fi}: int, {fj}: int):\n{body.text()}",
            )
            code(f"{acc} = {fname}({a}, {b}, {i}, {j})")
            return acc
        code(f"{acc} = {ft.zero()}")
        with loop(code, k, "0", nk, style):
            term = f"{_a(cfg, a, i, k)} * {_b(cfg, b, k, j)}"
            code(f"{acc} += {term}" if coin(rng, 0.7) else f"{acc} = {acc} + {term}")
        return acc

    if strategy == "row":
        ncols = sizes.get("N", N, f"{c}.shape[1]", ["n_cols", "ncols", "width", "n_out"], allow_const=False)
        with loop(code, j, "0", ncols, choice(rng, ["range", "range2"])):
            result = k_loop()
            _epilogue(rng, cfg, code, names, result, i, j, c, bias, res, alpha, beta, act_name)
    else:
        result = k_loop()
        _epilogue(rng, cfg, code, names, result, i, j, c, bias, res, alpha, beta, act_name)
    return code, launch, sizes, list(sizes.constants)


def _tile_body(rng, cfg, names, a, b, c, bias, res, alpha, beta, act_name, funcs):
    ft = cfg.ft
    M, N, K, TM, TN, TK = cfg.M, cfg.N, cfg.K, cfg.tm, cfg.tn, cfg.tk
    const = Constants(rng, names, p=0.6)

    tm, tn = const(TM, "TILE_M", "TM", "BM"), const(TN, "TILE_N", "TN", "BN")
    single_k = coin(rng, 0.3)
    tk = const(K if single_k else TK, "TILE_K", "TK", "BK")
    code = Code(1)
    bi, bj = names("bi", "i", "tile_row", "by"), names("bj", "j", "tile_col", "bx")
    code(f"{bi}, {bj} = wp.tid()")
    acc = names("acc", "c_tile", "sum_tile", "accum")

    def loads(kk: str):
        ta, tb = names("ta", "a_tile", "lhs_tile"), names("tb", "b_tile", "rhs_tile")
        if cfg.a_trans:
            code(f"{ta} = wp.tile_transpose(wp.tile_load({a}, shape=({tk}, {tm}), offset=({kk}, {bi} * {tm})))")
        else:
            code(f"{ta} = wp.tile_load({a}, shape=({tm}, {tk}), offset=({bi} * {tm}, {kk}))")
        if cfg.b_trans:
            code(f"{tb} = wp.tile_transpose(wp.tile_load({b}, shape=({tn}, {tk}), offset=({bj} * {tn}, {kk})))")
        else:
            code(f"{tb} = wp.tile_load({b}, shape=({tk}, {tn}), offset=({kk}, {bj} * {tn}))")
        return ta, tb

    if single_k:
        ta, tb = loads("0")
        code(f"{acc} = wp.tile_matmul({ta}, {tb})")
    else:
        code(f"{acc} = wp.tile_zeros(shape=({tm}, {tn}), dtype={ft.ann})")
        kk = names("kk", "step", "kt", "p")
        steps = K // TK
        bound = choice(rng, [str(steps), f"{K} // {tk}"])
        with code.block(f"for {kk} in range({bound}):"):
            ta, tb = loads(f"{kk} * {tk}")
            code(f"wp.tile_matmul({ta}, {tb}, {acc})")
    cur = acc
    if alpha:
        code(f"{acc} = {acc} * {alpha}")
    if bias:
        bt = names("bias_tile", "bt", "shift_tile")
        if cfg.bias == "col":
            code(
                f"{bt} = wp.tile_load({bias}, shape={tn}, offset={bj} * {tn})",
                f"{acc} = {acc} + wp.tile_broadcast(wp.tile_reshape({bt}, shape=(1, {tn})), shape=({tm}, {tn}))",
            )
        else:
            code(
                f"{bt} = wp.tile_load({bias}, shape={tm}, offset={bi} * {tm})",
                f"{acc} = {acc} + wp.tile_broadcast(wp.tile_reshape({bt}, shape=({tm}, 1)), shape=({tm}, {tn}))",
            )
    if beta:
        old = names("c_old", "prev", "old_tile")
        code(
            f"{old} = wp.tile_load({c}, shape=({tm}, {tn}), offset=({bi} * {tm}, {bj} * {tn}))",
            f"{acc} = {acc} + {old} * {beta}",
        )
    if cfg.act:
        out_t = names("y", "act_tile", "h")
        code(f"{out_t} = wp.tile_map({act_name}, {acc})")
        cur = out_t
    if res:
        rt = names("r_tile", "skip_tile", "res_tile")
        code(
            f"{rt} = wp.tile_load({res}, shape=({tm}, {tn}), offset=({bi} * {tm}, {bj} * {tn}))",
            f"{cur} = {cur} + {rt}",
        )
    code(f"wp.tile_store({c}, {cur}, offset=({bi} * {tm}, {bj} * {tn}))")
    block_dim = choice(rng, [32, 64, 128])
    return code, (M // TM, N // TN), block_dim, const.items


# --------------------------------------------------------------------------- reference


def check(spec, inputs: dict, outputs: dict) -> str | None:
    p = spec.params
    A = as_f64(inputs[p["a"]])
    B = as_f64(inputs[p["b"]])
    if p["a_trans"]:
        A = A.T
    if p["b_trans"]:
        B = B.T
    pre = A @ B
    scale = np.abs(A) @ np.abs(B)
    if p["alpha"]:
        al = float(inputs[p["alpha"]])
        pre, scale = al * pre, abs(al) * scale
    if p["bias"]:
        bv = as_f64(inputs[p["bias"]])
        bb = bv[None, :] if p["bias_kind"] == "col" else bv[:, None]
        pre, scale = pre + bb, scale + np.abs(bb)
    if p["beta"]:
        be = float(inputs[p["beta"]])
        c0 = as_f64(inputs[p["c"]])
        pre, scale = pre + be * c0, scale + abs(be) * np.abs(c0)
    want = acts.numpy(p["act"], pre, p.get("slope", 0.01))
    scale = scale * acts.SLOPE_BOUND[p["act"]]
    if p["residual"]:
        r = as_f64(inputs[p["residual"]])
        want, scale = want + r, scale + np.abs(r)
    dtype = next(x.dtype for x in spec.args if x.name == p["c"])
    return first_error(check_close(p["c"], outputs[p["c"]], want, dtype, scale=scale))
