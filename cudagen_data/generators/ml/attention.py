"""Scaled dot-product attention for one head, with and without a causal mask.

    out = softmax(scale * Q K^T [+ causal mask]) V,   Q (S, D), K (Skv, D), V (Skv, Dv)

Strategies: a thread per (query, output feature) with two passes over the keys; the same
with an online (flash-style) single pass; a thread per query that writes the attention
probabilities to an output and reads them back for P V; tiles (tile_matmul of Q and
tile_transpose(K), a tile_map causal mask built from tile_arange index tiles, row
softmax with tile_reduce / tile_sum, tile_matmul with V).  Passes start from key 0 so the
adjoint's replay of dynamic loops stays finite (see softmax.py).

params: S, Skv, D, Dv, causal, scale ("arg" name | "sqrt" = 1/sqrt(D) | value), q, k, v,
out, probs (name or None), strategy.
"""

from __future__ import annotations

import math

import numpy as np

from ...spec import KernelSpec
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
    make_spec,
    order_args,
    pick_float,
    scalar,
)

CATEGORY = "attention"
MASK = -1.0e9


def generate(rng: np.random.Generator) -> KernelSpec:
    strategy = choice(rng, ["two_pass", "online", "probs", "tile"], [0.25, 0.25, 0.2, 0.3])
    names = Names(rng)
    ft = pick_float(rng, 0.25)
    causal = coin(rng, 0.5)
    if strategy == "tile":
        return _tile(rng, names, ft, causal)
    return _loops(rng, names, ft, causal, strategy)


class _Qkv:
    def __init__(self, rng, names: Names, ft: FloatType, S, Skv, D, Dv):
        self.q = names("q", "query", "Q", "q_in")
        self.k = names("k", "key", "K", "k_in")
        self.v = names("v", "value", "V", "v_in")
        self.out = names("out", "o", "ctx", "attn_out", "y")
        self.inputs = [arr(self.q, ft.dtype, (S, D)), arr(self.k, ft.dtype, (Skv, D)), arr(self.v, ft.dtype, (Skv, Dv))]
        self.outputs = [arr(self.out, ft.dtype, (S, Dv), "out")]
        self.scalars: list = []
        self.probs = None
        self.S, self.Skv, self.Dv = S, Skv, Dv


def _scale(rng, names, ft: FloatType, D: int, qkv: _Qkv, sizes: Sizes | None, d_expr: str | None):
    """(expression, params value) for the softmax scale."""
    form = choice(rng, ["arg", "literal", "computed"], [0.35, 0.35, 0.3])
    if form == "arg":
        name = names("scale", "sm_scale", "inv_sqrt_d", "alpha")
        qkv.scalars.append(scalar(name, ft.dtype, (1.0 / math.sqrt(D), 1.0 / math.sqrt(D))))
        return name, name
    if form == "computed" and d_expr:
        return f"{ft.lit(1.0)} / wp.sqrt({ft.cast(d_expr)})", "sqrt"
    return ft.lit(1.0 / math.sqrt(D)), 1.0 / math.sqrt(D)


def _score_func(rng, names, ft: FloatType, funcs: list[str]) -> str:
    """A @wp.func dot product of row r of a with row s of b (appended to ``funcs``); its name."""
    fname = names("dot_qk", "score", "qk_dot", "row_dot")
    fbody = Code(1)
    fbody(f"acc = {ft.zero()}")
    with loop(fbody, "c", "0", "a.shape[1]", choice(rng, ["range", "range2"])):
        fbody("acc += a[r, c] * b[s, c]")
    fbody("return acc")
    funcs.append(
        f"@wp.func\ndef {fname}(a: {array_ann(2, ft.ann, 0)}, b: {array_ann(2, ft.ann, 0)}, r: int, s: int):\n"
        f"{fbody.text()}"
    )
    return fname


class _Keys:
    """Query ``i`` against the keys: its scores (through a helper or an inline loop over the
    head dimension), the loops over keys (bounded by the causal limit or the key count),
    and the causal mask."""

    def __init__(self, rng, code: Code, ft: FloatType, qkv: _Qkv, i, fname, c, nd, nkv, scale_expr, causal):
        self.rng, self.code, self.ft, self.qkv, self.i = rng, code, ft, qkv, i
        self.fname, self.c, self.nd, self.nkv, self.scale_expr, self.causal = fname, c, nd, nkv, scale_expr, causal
        self.mask_form = None

    def score(self, j: str, into: str):
        code, qkv, i = self.code, self.qkv, self.i
        if self.fname:
            code(f"{into} = {self.fname}({qkv.q}, {qkv.k}, {i}, {j}) * {self.scale_expr}")
        else:
            code(f"{into} = {self.ft.zero()}")
            with loop(code, self.c, "0", self.nd, "range"):
                code(f"{into} += {qkv.q}[{i}, {self.c}] * {qkv.k}[{j}, {self.c}]")
            code(f"{into} = {into} * {self.scale_expr}")

    def key_loop(self, j: str, start: str):
        if self.causal and self.mask_form == "bound":
            return loop(self.code, j, start, f"{self.i} + 1", choice(self.rng, ["range", "range2"]))
        return loop(self.code, j, start, self.nkv, choice(self.rng, ["range", "range2", "range3"]))

    def masked(self, sv: str, j: str):
        if self.causal and self.mask_form == "branch":
            with self.code.block(f"if {j} > {self.i}:"):
                self.code(f"{sv} = {self.ft.lit(MASK)}")

    def scored(self, j: str, sc: str):
        """``sc`` = the (masked) score of key ``j``, inside a key loop."""
        self.score(j, sc)
        self.masked(sc, j)


def _per_feature(names, code: Code, ft: FloatType, keys: _Keys, qkv: _Qkv, strategy, i, j, m, denom, sc, sc0):
    """A thread per (query, output feature): two passes over the keys (max, then the
    weighted sum) or one online pass that rescales as the max grows; the launch."""
    d = names("d", "feat", "col", "dv")
    code(f"{i}, {d} = wp.tid()")
    acc = names("acc", "o_acc", "weighted", "num")
    keys.score("0", sc0)
    if strategy == "two_pass":
        code(f"{m} = {sc0}")
        with keys.key_loop(j, "1"):
            keys.scored(j, sc)
            code(f"{m} = wp.max({m}, {sc})")
        code(f"{denom} = wp.exp({sc0} - {m})", f"{acc} = {denom} * {qkv.v}[0, {d}]")
        with keys.key_loop(j, "1"):
            keys.scored(j, sc)
            p = names("p", "w", "pij")
            code(f"{p} = wp.exp({sc} - {m})", f"{denom} += {p}", f"{acc} += {p} * {qkv.v}[{j}, {d}]")
    else:
        code(f"{m} = {sc0}", f"{denom} = {ft.cast('1.0')}", f"{acc} = {qkv.v}[0, {d}]")
        mn, corr, p = names("m_new", "mn", "new_max"), names("corr", "alpha_c", "rescale"), names("p", "w", "pij")
        with keys.key_loop(j, "1"):
            keys.scored(j, sc)
            code(
                f"{mn} = wp.max({m}, {sc})",
                f"{corr} = wp.exp({m} - {mn})",
                f"{p} = wp.exp({sc} - {mn})",
                f"{denom} = {denom} * {corr} + {p}",
                f"{acc} = {acc} * {corr} + {p} * {qkv.v}[{j}, {d}]",
                f"{m} = {mn}",
            )
    code(f"{qkv.out}[{i}, {d}] = {acc} / {denom}")


def _per_query_probs(names, code: Code, ft: FloatType, keys: _Keys, qkv: _Qkv, sizes: Sizes, i, j, m, denom, sc, sc0):
    """A thread per query that writes the probabilities P to an output and reads them back
    for P V."""
    code(f"{i} = wp.tid()")
    qkv.probs = names("probs", "attn", "p_out", "weights")
    qkv.outputs.append(arr(qkv.probs, ft.dtype, (qkv.S, qkv.Skv), "out"))
    keys.score("0", sc0)
    code(f"{m} = {sc0}")
    with keys.key_loop(j, "1"):
        keys.scored(j, sc)
        code(f"{m} = wp.max({m}, {sc})")
    code(f"{denom} = wp.exp({sc0} - {m})")
    with keys.key_loop(j, "1"):
        keys.scored(j, sc)
        code(f"{denom} += wp.exp({sc} - {m})")
    inv = names("inv_l", "rcp", "norm")
    code(f"{inv} = {ft.lit(1.0)} / {denom}")
    with loop(code, j, "0", keys.nkv, "range"):
        keys.score(j, sc)
        if keys.causal:
            with code.block(f"if {j} > {i}:"):
                code(f"{qkv.probs}[{i}, {j}] = {ft.lit(0.0)}")
            with code.block("else:"):
                code(f"{qkv.probs}[{i}, {j}] = wp.exp({sc} - {m}) * {inv}")
        else:
            code(f"{qkv.probs}[{i}, {j}] = wp.exp({sc} - {m}) * {inv}")
    d = names("d", "feat", "col")
    nv = sizes.get("Dv", qkv.Dv, f"{qkv.v}.shape[1]", ["v_dim", "dv", "d_v"], allow_const=False)
    acc = names("acc", "o_acc", "total")
    with loop(code, d, "0", nv, "range"):
        code(f"{acc} = {ft.zero()}")
        with loop(code, j, "0", keys.nkv, "range"):
            code(f"{acc} += {qkv.probs}[{i}, {j}] * {qkv.v}[{j}, {d}]")
        code(f"{qkv.out}[{i}, {d}] = {acc}")


def _loops(rng, names, ft, causal, strategy):
    S = choice(rng, [4, 8, 12, 16])
    Skv = S if causal or coin(rng, 0.5) else choice(rng, [4, 8, 16])
    D = choice(rng, [4, 8, 16])
    Dv = D if coin(rng, 0.7) else choice(rng, [4, 8])
    while S * D > 256 or Skv * D > 256:
        D //= 2
    qkv = _Qkv(rng, names, ft, S, Skv, D, Dv)
    sizes = Sizes(rng, names)
    code = Code(1)
    funcs: list[str] = []
    i = names("i", "qi", "row", "t")
    nd = sizes.get("D", D, f"{qkv.q}.shape[1]", ["head_dim", "d", "dim", "d_k"], allow_const=D <= 8)
    nkv = sizes.get("Skv", Skv, f"{qkv.k}.shape[0]", ["seq_kv", "n_keys", "s_kv", "kv_len"], allow_const=False)
    scale_expr, scale_param = _scale(rng, names, ft, D, qkv, sizes, nd)
    # score(i, j): helper function or inline loop
    use_func = coin(rng, 0.5)
    c = names("c", "e", "f", "dd")
    fname = _score_func(rng, names, ft, funcs) if use_func else None
    keys = _Keys(rng, code, ft, qkv, i, fname, c, nd, nkv, scale_expr, causal)
    keys.mask_form = choice(rng, ["bound", "branch"]) if causal else None

    j = names("j", "kj", "key_idx", "s")
    m, denom = names("m", "row_max", "mx"), names("l", "denom", "sum_exp", "z")
    sc, sc0 = names("sc", "score_ij", "logit"), names("s0", "first", "score0")
    if strategy in ("two_pass", "online"):
        _per_feature(names, code, ft, keys, qkv, strategy, i, j, m, denom, sc, sc0)
        launch = (S, Dv)
    else:  # probs: write P, then read it back for P V
        _per_query_probs(names, code, ft, keys, qkv, sizes, i, j, m, denom, sc, sc0)
        launch = (S,)
    args = order_args(rng, qkv.inputs, qkv.outputs, qkv.scalars + sizes.scalar_args)
    kname = names(
        f"{'causal_' if causal else ''}attention_{strategy}",
        "sdpa",
        "attention_head",
        "flash_attention" if strategy == "online" else "attention",
        "single_head_attention",
    )
    src = assemble(rng, kname, args, ft, code, sizes.constants, funcs)
    params = {
        "S": S,
        "Skv": Skv,
        "D": D,
        "Dv": Dv,
        "causal": causal,
        "scale": scale_param,
        "q": qkv.q,
        "k": qkv.k,
        "v": qkv.v,
        "out": qkv.out,
        "probs": qkv.probs,
        "strategy": strategy,
    }
    algo = 1 + (1 if causal else 0) + (1 if strategy == "online" else 0)
    return make_spec(CATEGORY, kname, src, args, launch, params, algorithmic=algo)


def _tile_causal_mask(rng, names, code: Code, ft: FloatType, funcs: list[str], s, b, tq, skv):
    """Mask the score tile ``s`` of query block ``b`` above the diagonal: a @wp.func mapped over
    the scores with row and column index tiles built from tile_arange."""
    shape = f"({tq}, {skv})"
    mfn = names("causal_mask", "mask_future", "apply_mask")
    sv, r_, c_, r0 = "sv", "r", "c", "r0"
    body = choice(
        rng,
        [
            f"    if {c_} > {r_} + {r0}:\n        return {ft.lit(MASK)}\n    return {sv}\n",
            f"    return wp.where({c_} > {r_} + {r0}, {ft.lit(MASK)}, {sv})\n",
        ],
    )
    funcs.append(f"@wp.func\ndef {mfn}({sv}: {ft.ann}, {r_}: int, {c_}: int, {r0}: int):\n{body}")
    rows, cols = names("rows", "ri", "row_idx"), names("cols", "ci", "col_idx")
    code(
        f"{rows} = wp.tile_broadcast(wp.tile_reshape(wp.tile_arange({tq}, dtype=int), shape=({tq}, 1)), shape={shape})",
        f"{cols} = wp.tile_broadcast(wp.tile_reshape(wp.tile_arange({skv}, dtype=int), shape=(1, {skv})), "
        f"shape={shape})",
        f"{s} = wp.tile_map({mfn}, {s}, {rows}, {cols}, wp.tile_full(shape={shape}, value={b} * {tq}, dtype=int))",
    )


def _tile_softmax_pv(rng, names, code: Code, s, tv_t, tq, skv, dv) -> str:
    """Emit softmax(scores ``s``) times the value tile, normalising before or after the
    product; the output tile's name."""
    shape = f"({tq}, {skv})"
    m, e, denom = names("m", "row_max", "mx"), names("e", "p_num", "ex"), names("l", "denom", "row_sum")
    code(
        f"{m} = wp.tile_reduce(wp.max, {s}, axis=1)",
        f"{e} = wp.tile_map(wp.exp, {s} - wp.tile_broadcast(wp.tile_reshape({m}, shape=({tq}, 1)), shape={shape}))",
        f"{denom} = wp.tile_sum({e}, axis=1)",
    )
    p, o = names("p", "probs_t", "attn"), names("o", "out_tile", "ctx")
    if coin(rng):
        code(
            f"{p} = {e} / wp.tile_broadcast(wp.tile_reshape({denom}, shape=({tq}, 1)), shape={shape})",
            f"{o} = wp.tile_matmul({p}, {tv_t})",
        )
    else:  # normalise after P V: divide the (TQ, Dv) output rows instead of the probabilities
        code(
            f"{o} = wp.tile_matmul({e}, {tv_t})",
            f"{o} = {o} / wp.tile_broadcast(wp.tile_reshape({denom}, shape=({tq}, 1)), shape=({tq}, {dv}))",
        )
    return o


def _tile_shapes(rng, causal):
    """(TQ, S, Skv, D, Dv): query rows per tile and the problem, every tile within 256 elements."""
    TQ = choice(rng, [1, 2, 4, 8])
    S = TQ * choice(rng, [1, 2, 4])
    Skv = S if causal or coin(rng, 0.5) else choice(rng, [4, 8, 16])
    D = choice(rng, [4, 8, 16])
    Dv = D if coin(rng, 0.7) else choice(rng, [4, 8])
    while S * D > 256 or Skv * D > 256 or S * Skv > 256:
        D = max(4, D // 2)
        if S * Skv > 256:
            S = Skv = S // 2
    S = max(S, TQ)
    if causal:
        Skv = S
    return TQ, S, Skv, D, Dv


def _tile(rng, names, ft, causal):
    TQ, S, Skv, D, Dv = _tile_shapes(rng, causal)
    qkv = _Qkv(rng, names, ft, S, Skv, D, Dv)
    const = Constants(rng, names)

    tq, skv, dd, dv = (
        const(TQ, "TQ", "BLOCK_Q", "ROWS"),
        const(Skv, "SKV", "KV_LEN", "N_KEYS"),
        const(D, "HEAD_DIM", "DK", "D"),
        const(Dv, "DV", "V_DIM", "VD"),
    )
    scale_expr, scale_param = _scale(rng, names, ft, D, qkv, None, None)
    funcs: list[str] = []
    code = Code(1)
    b = names("b", "blk", "qb", "tile_id")
    code(f"{b} = wp.tid()")
    tq_t, tk_t, tv_t = names("q_blk", "q_tile", "qt"), names("k_tile", "kt", "keys"), names("v_tile", "vt", "vals")
    code(
        f"{tq_t} = wp.tile_load({qkv.q}, shape=({tq}, {dd}), offset=({b} * {tq}, 0))",
        f"{tk_t} = wp.tile_load({qkv.k}, shape=({skv}, {dd}))",
        f"{tv_t} = wp.tile_load({qkv.v}, shape=({skv}, {dv}))",
    )
    s = names("s", "scores", "logits")
    if coin(rng, 0.5):
        code(f"{s} = wp.tile_matmul({tq_t}, wp.tile_transpose({tk_t})) * {scale_expr}")
    else:
        code(f"{s} = wp.tile_matmul({tq_t} * {scale_expr}, wp.tile_transpose({tk_t}))")
    if causal:
        _tile_causal_mask(rng, names, code, ft, funcs, s, b, tq, skv)
    o = _tile_softmax_pv(rng, names, code, s, tv_t, tq, skv, dv)
    code(f"wp.tile_store({qkv.out}, {o}, offset=({b} * {tq}, 0))")
    args = order_args(rng, qkv.inputs, qkv.outputs, qkv.scalars)
    kname = names(
        f"{'causal_' if causal else ''}attention_tiled", "tile_sdpa", "flash_attention_tile", "tiled_attention"
    )
    src = assemble(rng, kname, args, ft, code, const.items, funcs, mathdx_off=True)
    params = {
        "S": S,
        "Skv": Skv,
        "D": D,
        "Dv": Dv,
        "causal": causal,
        "scale": scale_param,
        "q": qkv.q,
        "k": qkv.k,
        "v": qkv.v,
        "out": qkv.out,
        "probs": None,
        "strategy": "tile",
    }
    return make_spec(
        CATEGORY,
        kname,
        src,
        args,
        (S // TQ,),
        params,
        block_dim=choice(rng, [32, 64, 128]),
        algorithmic=1 + (1 if causal else 0),
    )


# --------------------------------------------------------------------------- reference


def check(spec: KernelSpec, inputs: dict, outputs: dict) -> str | None:
    p = spec.params
    q, k, v = (as_f64(inputs[p[n]]) for n in ("q", "k", "v"))
    sc = p["scale"]
    scale = (
        float(inputs[sc])
        if isinstance(sc, str) and sc != "sqrt"
        else (1.0 / math.sqrt(p["D"]) if sc == "sqrt" else float(sc))
    )
    s = scale * (q @ k.T)
    if p["causal"]:
        s = np.where(np.triu(np.ones_like(s, dtype=bool), 1), -np.inf, s)
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    probs = e / e.sum(axis=1, keepdims=True)
    want = probs @ v
    mag = probs @ np.abs(v) * (1.0 + scale * np.abs(q) @ np.abs(k).T).max(axis=1, keepdims=True)
    dtype = next(a.dtype for a in spec.args if a.name == p["out"])
    msgs = [check_close(p["out"], outputs[p["out"]], want, dtype, scale=mag)]
    if p.get("probs"):
        msgs.append(
            check_close(
                p["probs"], outputs[p["probs"]], probs, dtype, scale=probs * (1.0 + np.abs(s[np.isfinite(s)]).max())
            )
        )
    return first_error(*msgs)
