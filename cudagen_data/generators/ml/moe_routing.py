"""Mixture-of-experts routing: top-k gating with a softmax over the selected experts.

Per token: router logits (given, or computed in-kernel as x @ W_router^T and saved to an
output), the k largest experts in descending order, and their gate weights
softmax(selected logits), optionally scaled.  Selection: k rounds of argmax that skip
experts already taken (checked against the index output, or by a strictly-below-previous
threshold), or an insertion sort into the k index slots.  Gate weights: softmax over the
selected logits, or a full softmax whose selected probabilities are renormalised (the
same values).  Optional outputs: dense combine weights (T, E) and per-expert load (sum
of gate weights, atomic adds).

params: T, E, k, logits (name), router ({"x", "w"} names or None), idx, weights, dense,
load, scale (argument name or None), strategy.
"""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from ._common import (
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
    scalar,
)

CATEGORY = "moe_routing"


def _select_top_k(rng, names: Names, ft, code: Code, selection: str, L, idx: str, t: str, ne, nk, e_: str, s_: str):
    """Emit the selection of token ``t``'s top-k experts into ``idx[t, :]`` (descending by logit
    ``L(e)``): k passes excluding taken experts or below a threshold, or an insertion sort."""
    if selection in ("exclude_taken", "threshold"):
        best, bi = names("best", "top", "mx"), names("bi", "arg", "best_e")
        prev = names("prev", "last", "bound")
        if selection == "threshold":
            code(f"{prev} = {ft.cast('1.0e30')}")
        # bounded by the index array's width (= k, known only at run time): the selection
        # carries no gradient, so it needs no unrolling (which would copy it k times)
        with loop(code, s_, "0", f"{idx}.shape[1]", "range"):
            code(f"{best} = {ft.cast('-1.0e30')}", f"{bi} = int(-1)")
            with loop(code, e_, "0", ne, choice(rng, ["range", "range2"])):
                v = names("v", "cand", "lv")
                code(f"{v} = {L(e_)}")
                if selection == "threshold":
                    cond = f"{v} < {prev} and {v} > {best}"
                    with code.block(f"if {cond}:"):
                        code(f"{best} = {v}", f"{bi} = {e_}")
                else:
                    taken, q = names("taken", "used", "seen"), names("q", "p", "u")
                    code(f"{taken} = int(0)")
                    with loop(code, q, "0", s_, "range"):
                        with code.block(f"if {idx}[{t}, {q}] == {e_}:"):
                            code(f"{taken} = 1")
                    with code.block(f"if {taken} == 0 and {v} > {best}:"):
                        code(f"{best} = {v}", f"{bi} = {e_}")
            code(f"{idx}[{t}, {s_}] = {bi}")
            if selection == "threshold":
                code(f"{prev} = {best}")
    else:  # insertion sort of expert ids into the k slots, ordered by logit
        cnt = names("filled", "count", "n_in")
        code(f"{cnt} = int(0)")
        with loop(code, e_, "0", ne, "range"):
            v, pos = names("v", "cand", "lv"), names("pos", "at", "ins")
            code(f"{v} = {L(e_)}", f"{pos} = {cnt}")
            q = names("q", "p", "u")
            with loop(code, q, "0", cnt, "range"):
                with code.block(f"if {pos} == {cnt}:"):
                    with code.block(f"if {v} > {L(f'{idx}[{t}, {q}]')}:"):
                        code(f"{pos} = {q}")
            with code.block(f"if {pos} < {nk}:"):
                last = names("last", "top_slot", "hi")
                code(f"{last} = wp.min({cnt}, {nk} - 1)")
                with code.block(f"for {q} in range({last}, {pos}, -1):"):
                    code(f"{idx}[{t}, {q}] = {idx}[{t}, {q} - 1]")
                code(f"{idx}[{t}, {pos}] = {e_}")
            with code.block(f"if {cnt} < {nk}:"):
                code(f"{cnt} += 1")


def _router_logits(rng, names: Names, ft, code: Code, sizes: Sizes, fused, T, E, D, t, ne, e_, inputs, outputs):
    """The router logits: an input, or computed in-kernel as x @ W_router^T and saved to an
    output; (logits name, router params or None)."""
    if not fused:
        logits = names("logits", "scores", "router_logits", "gate_logits")
        inputs.append(arr(logits, ft.dtype, (T, E), "in", (-3.0, 3.0)))
        return logits, None
    x, wr = names("x", "hidden", "tokens", "h"), names("w_router", "router", "gate_proj", "wg")
    logits = names("logits", "router_logits", "scores_out")
    inputs += [arr(x, ft.dtype, (T, D)), arr(wr, ft.dtype, (E, D))]
    outputs.append(arr(logits, ft.dtype, (T, E), "out"))
    c = names("c", "f", "d")
    acc = names("acc", "s", "dot")
    nd = sizes.get("D", D, f"{x}.shape[1]", ["dim", "d_model", "hidden_dim"], allow_const=D <= 8)
    with loop(code, e_, "0", ne, "range"):
        code(f"{acc} = {ft.zero()}")
        with loop(code, c, "0", nd, choice(rng, ["range", "range2"])):
            code(f"{acc} += {x}[{t}, {c}] * {wr}[{e_}, {c}]")
        code(f"{logits}[{t}, {e_}] = {acc}")
    return logits, {"x": x, "w": wr}


def _gate_denominator(names: Names, ft, code: Code, gating, L, sel, ne, nk, e_, s_):
    """Emit the top selected logit and the softmax denominator over the selected experts
    (directly, or from a full softmax renormalised); (top logit name, denominator name)."""
    mtop, den = names("m0", "top_logit", "lmax"), names("den", "z", "norm")
    if gating == "topk_softmax":
        code(f"{mtop} = {sel('0')}", f"{den} = {ft.cast('1.0')}")
        with loop(code, s_, "1", nk, "range"):
            code(f"{den} += wp.exp({sel(s_)} - {mtop})")
        return mtop, den
    full = names("full_den", "all_den", "zsum")
    # accumulators start from the first term: the adjoint replays them without their loops
    code(f"{mtop} = {sel('0')}", f"{full} = wp.exp({L('0')} - {mtop})")
    with loop(code, e_, "1", ne, "range"):
        code(f"{full} += wp.exp({L(e_)} - {mtop})")
    code(f"{den} = {ft.lit(1.0)} / {full}")
    with loop(code, s_, "1", nk, "range"):
        code(f"{den} += wp.exp({sel(s_)} - {mtop}) / {full}")
    code(f"{den} = {den} * {full}")
    return mtop, den


def _write_gates(rng, names: Names, code: Code, sel, idx, wts, t, s_, nk, mtop, den, scale, dense_name, load_name):
    """Emit each selected expert's gate weight (optionally scaled), its dense combine weight
    and its contribution to the expert's load."""
    g = names("g", "gate", "wk")
    with loop(code, s_, "0", nk, "range"):
        code(f"{g} = wp.exp({sel(s_)} - {mtop}) / {den}")
        if scale:
            code(f"{g} = {g} * {scale}")
        code(f"{wts}[{t}, {s_}] = {g}")
        if dense_name:
            code(f"{dense_name}[{t}, {idx}[{t}, {s_}]] = {g}")
        if load_name:
            code(
                choice(
                    rng, [f"wp.atomic_add({load_name}, {idx}[{t}, {s_}], {g})", f"{load_name}[{idx}[{t}, {s_}]] += {g}"]
                )
            )


def generate(rng: np.random.Generator) -> KernelSpec:
    names = Names(rng)
    ft = pick_float(rng, 0.25)
    E = choice(rng, [4, 6, 8, 12, 16])
    k = choice(rng, [kk for kk in (2, 3, 4) if kk < E])
    T = choice(rng, [t for t in (4, 8, 16, 32) if t * E <= 256])
    fused = coin(rng, 0.35)
    D = choice(rng, [4, 8, 16]) if fused else 0
    while fused and (T * D > 256 or E * D > 256):
        D //= 2
    selection = choice(rng, ["exclude_taken", "threshold", "insertion"])
    gating = choice(rng, ["topk_softmax", "softmax_renorm"], [0.7, 0.3])
    dense = coin(rng, 0.3)
    load = coin(rng, 0.3)
    scaled = coin(rng, 0.2)

    code = Code(1)
    sizes = Sizes(rng, names)
    t = names("t", "tok", "token", "i")
    code(f"{t} = wp.tid()")
    inputs, outputs, scalars, funcs = [], [], [], []
    idx = names("topk_idx", "expert_idx", "sel", "indices", "routes")
    wts = names("topk_w", "gate_w", "weights", "gates", "probs_k")
    ne = sizes.get("E", E, None, ["num_experts", "n_experts", "n_exp", "experts"], allow_const=False)
    # top-k is small: a module constant, so Warp unrolls the loops over the selected
    # experts, whose adjoint is then exact (a dynamic loop's is not: DESIGN.md)
    saved, sizes.p = sizes.p, (0.0, 0.0, 1.0)
    nk = sizes.get("k", k, None, ["top_k", "k_sel", "n_sel"], allow_const=True)
    sizes.p = saved
    e_ = names("e", "ex", "j", "expert")
    logits, router = _router_logits(rng, names, ft, code, sizes, fused, T, E, D, t, ne, e_, inputs, outputs)
    outputs += [arr(idx, "int32", (T, k), "out"), arr(wts, ft.dtype, (T, k), "out")]
    L = lambda e: f"{logits}[{t}, {e}]"  # noqa: E731
    s_ = names("s", "slot", "r", "q")

    # ---- selection
    _select_top_k(rng, names, ft, code, selection, L, idx, t, ne, nk, e_, s_)

    # ---- gate weights over the selected experts (idx row is in descending order)
    sel = lambda s: L(f"{idx}[{t}, {s}]")  # noqa: E731
    scale = names("route_scale", "scaling", "gamma") if scaled else None
    if scale:
        scalars.append(scalar(scale, ft.dtype, (0.5, 2.5)))
    mtop, den = _gate_denominator(names, ft, code, gating, L, sel, ne, nk, e_, s_)
    dense_name = names("combine", "dense_gates", "gate_dense", "dispatch_w") if dense else None
    load_name = names("expert_load", "load", "importance") if load else None
    if dense_name:
        outputs.append(arr(dense_name, ft.dtype, (T, E), "out"))
    if load_name:
        outputs.append(arr(load_name, ft.dtype, (E,), "out"))
    _write_gates(rng, names, code, sel, idx, wts, t, s_, nk, mtop, den, scale, dense_name, load_name)
    args = order_args(rng, inputs, outputs, scalars + sizes.scalar_args)
    kname = names(f"topk_gating_{selection}", "moe_router", "route_tokens", f"top{k}_router", "moe_topk_softmax")
    src = assemble(rng, kname, args, ft, code, sizes.constants, funcs)
    params = {
        "T": T,
        "E": E,
        "k": k,
        "logits": logits,
        "router": router,
        "idx": idx,
        "weights": wts,
        "dense": dense_name,
        "load": load_name,
        "scale": scale,
        "strategy": f"{selection}/{gating}",
    }
    algo = (1 if fused else 0) + (1 if selection == "insertion" else 0)
    return make_spec(CATEGORY, kname, src, args, (T,), params, algorithmic=algo)


# --------------------------------------------------------------------------- reference


def check(spec: KernelSpec, inputs: dict, outputs: dict) -> str | None:
    p = spec.params
    T, E, k = p["T"], p["E"], p["k"]
    dtype = next(a.dtype for a in spec.args if a.name == p["weights"])
    msgs = []
    if p["router"]:
        x, w = as_f64(inputs[p["router"]["x"]]), as_f64(inputs[p["router"]["w"]])
        want_logits = x @ w.T
        msgs.append(check_close(p["logits"], outputs[p["logits"]], want_logits, dtype, scale=np.abs(x) @ np.abs(w).T))
        # select on the logits the kernel computed (float32 rounding may reorder near-ties)
        logits = as_f64(outputs[p["logits"]])
    else:
        logits = as_f64(inputs[p["logits"]])
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    got_idx = np.asarray(outputs[p["idx"]]).astype(np.int64)
    if np.any(got_idx < 0) or np.any(got_idx >= E):
        return f"{p['idx']}: expert index out of range"
    got_vals = np.take_along_axis(logits, got_idx, 1)
    want_vals = np.take_along_axis(logits, order, 1)
    if not np.array_equal(got_vals, want_vals):  # equal values accept either expert of a tie
        bad = np.argwhere(got_vals != want_vals)[0]
        return (
            f"{p['idx']}: token {bad[0]} slot {bad[1]} picked expert {got_idx[tuple(bad)]}, "
            f"reference {order[tuple(bad)]}"
        )
    sel = want_vals
    e = np.exp(sel - sel[:, :1])
    gates = e / e.sum(axis=1, keepdims=True)
    if p["scale"]:
        gates = gates * float(inputs[p["scale"]])
    mag = np.abs(gates) * (1.0 + np.abs(sel - sel[:, :1]))
    msgs.append(check_close(p["weights"], outputs[p["weights"]], gates, dtype, scale=mag))
    if p["dense"]:
        dense = np.zeros((T, E))
        np.put_along_axis(dense, got_idx, gates, 1)
        msgs.append(check_close(p["dense"], outputs[p["dense"]], dense, dtype, scale=np.abs(dense)))
    if p["load"]:
        load = np.zeros(E)
        np.add.at(load, got_idx.ravel(), gates.ravel())
        msgs.append(check_close(p["load"], outputs[p["load"]], load, dtype, scale=np.abs(load) + 1e-3))
    return first_error(*msgs)
