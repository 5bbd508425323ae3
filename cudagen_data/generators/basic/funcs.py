"""Helper ``@wp.func`` functions that kernels call.

A helper is generated at its call site: the call's argument values give the parameters'
intervals and sample values, the body is generated with the same statement machinery as
kernels (locals, updates, branches, an optional early ``return``), and the result's
interval and sample values come out of it.
"""

from __future__ import annotations

import numpy as np

from . import numeric as nm
from .builder import KernelBuilder, Var
from .expr import Expr, call_text
from .exprgen import ExprGen
from .stmts import BodyGen, Profile
from .wtypes import WType

_HELPER_STMTS = {"let": 3.0, "update": 2.0, "if": 1.0, "elem": 0.5}
MAX_HELPERS = 2


def _param_types(body: BodyGen, ret: WType) -> list[WType]:
    g = body.g
    n = int(g.pick([1, 2, 2, 3]))
    types = [ret if g.chance(0.6) else body.local_type()]
    for _ in range(n - 1):
        types.append(body.local_type() if g.chance(0.6) else ret)
    return [ret if t.quat else t for t in types]


def call_new_helper(body: BodyGen, ret: WType) -> Expr | None:
    """Define a helper returning ``ret`` and return an expression calling it."""
    kb, g = body.kb, body.g
    if len(kb.helpers) >= MAX_HELPERS:
        return None
    args = [g.gen_varying(t, 1) for t in _param_types(body, ret)]
    fname = kb.names.fresh("func")
    fb = KernelBuilder(kb.rng, names=kb.names, short_annot=kb.short_annot)
    fb.cast_style = kb.cast_style
    fb.n_samples = kb.n_samples
    fb.active = np.ones(kb.n_samples, dtype=bool)
    params = []
    for a in args:
        pname = kb.names.fresh("fparam")
        e = fb.var_expr(pname, a)
        fb.vars[pname] = Var(pname, e, 0, 0)
        params.append((pname, a.type))
    fgen = ExprGen(fb, g.weights, literal_weight=g.literal_weight)
    fgen.productions = [p for p in fgen.productions if p[0] != "helper"]
    prof = Profile(
        families=body.profile.families,
        local_types=body.profile.local_types,
        stmts=dict(_HELPER_STMTS),
        size={"basic": (0, 1, 2, 1), "intermediate": (0, 2, 2, 1), "advanced": (1, 2, 2, 2)},
    )
    fbody = BodyGen(fb, fgen, prof, body.tier)
    fbody.in_kernel = False
    fbody.new_helper = call_new_helper
    fbody.body()
    early = None
    if g.chance(0.35):
        cond = fgen.cond(1)
        fb.begin_if(cond)
        early_e = fgen.gen(ret, 1)
        fb.emit(f"return {early_e.text}")
        fb.returned = True
        fb.end_if()
        early = (fb.full(cond.vals).astype(bool), early_e)
    final = fbody.output_value(ret)
    fb.emit(f"return {final.text}")
    iv, vals = final.iv, fb.full(final.vals)
    if early is not None:
        iv = iv.union(early[1].iv)
        vals = nm.select(early[0], fb.full(early[1].vals), vals)
    if not iv.finite() or not nm.finite(vals):
        return None
    sig = ", ".join(f"{n}: {t.annotation(kb.short_annot)}" for n, t in params)
    kb.helpers.append(
        f"@wp.func\ndef {fname}({sig}) -> {ret.annotation(kb.short_annot)}:\n" + "\n".join(fb.lines) + "\n"
    )
    return Expr(call_text(fname, *args), ret, iv, size=1 + sum(a.size for a in args), vals=vals)


def helper_hook_for(body: BodyGen):
    """The ExprGen hook that lets expressions call helpers (the "helper" family)."""

    def hook(t: WType, depth: int) -> Expr | None:
        if t.quat or t.is_bool or not body.in_kernel or body.making_helper:
            return None
        body.making_helper = True  # no helper inside the arguments of a helper call
        try:
            return call_new_helper(body, t)
        finally:
            body.making_helper = False

    return hook
