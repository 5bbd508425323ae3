"""Category "control_flow": nested branches, loops with data-dependent but bounded trip
counts, break/continue, bounded while loops, early return, wp.where and conditional
expressions."""

from __future__ import annotations

import math

import numpy as np

from ...spec import KernelSpec
from . import numeric as nm
from . import ops
from .expr import const
from .frame import Frame, generate_checked, pick, standard_frame
from .interval import Interval
from .stmts import Profile
from .wtypes import F32, F64, I32

PROFILE = Profile(
    families={
        "arith": 3.0,
        "select": 2.0,
        "minmax": 1.0,
        "trig": 0.5,
        "explog": 0.5,
        "round": 0.4,
        "cast": 0.5,
        "intdiv": 0.6,
        "helper": 0.12,
        "special": 0.3,
    },
    local_types=((F32, 4.0), (I32, 2.5), (F64, 0.4)),
    stmts={
        "let": 2.0,
        "update": 2.0,
        "if": 3.0,
        "for": 2.5,
        "while": 0.25,
        "early_return": 0.8,
        "helper": 0.5,
        "neighbour": 0.5,
    },
    size={"basic": (1, 2, 2, 1), "intermediate": (2, 3, 2, 2), "advanced": (3, 4, 2, 3)},
)

IN_POOL = (F32, F32, F32, I32, I32, F64)
OUT_POOL = (F32, F32, I32, F64)
NOUNS = (
    "values",
    "samples",
    "particles",
    "cells",
    "queries",
    "events",
    "steps",
    "paths",
    "scores",
    "states",
    "grid",
    "keys",
    "levels",
    "signal",
)


REQUIRED = ("if ", "for ", "while ", "wp.where(", " else ")


def _collatz(f: Frame) -> None:
    """Count Collatz steps of a small positive integer, at most K of them."""
    kb, g = f.kb, f.gen
    src = g.varying_leaf(I32)
    if src is None:
        return
    m = int(pick(f.rng, (30, 50, 64, 100)))
    kmax = int(pick(f.rng, (16, 24, 32)))
    start = ops.add(ops.int_div("%", g.fit_nonneg(src), const(I32, m)), const(I32, 1))
    if start is None:
        return
    n = kb.declare("local_int", start, mutable=True)
    steps = kb.declare("local_int", const(I32, 0), mutable=True)
    # exact simulation on the samples; the bound on n comes from enumerating 1..m
    nv, sv = kb.full(start.vals).astype(np.int64), np.zeros(kb.n_samples)
    peak = 1
    for x0 in range(1, m + 1):
        x = x0
        for _ in range(kmax):
            if x == 1:
                break
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            peak = max(peak, x)
    for _ in range(kmax):
        act = (nv != 1) & (sv < kmax)
        nv = np.where(act, np.where(nv % 2 == 0, nv // 2, 3 * nv + 1), nv)
        sv = sv + act
    kb.begin_loop(
        f"while {n.text} != 1 and {steps.text} < {kmax}:", kmax, np.array([kmax]), None, mutable=(n.text, steps.text)
    )
    if f.rng.random() < 0.5:
        kb.emit(f"if {n.text} % 2 == 0:")
        kb.emit(f"    {n.text} = {n.text} // 2")
        kb.emit("else:")
        kb.emit(f"    {n.text} = 3 * {n.text} + 1")
    else:
        kb.emit(f"{n.text} = wp.where({n.text} % 2 == 0, {n.text} // 2, 3 * {n.text} + 1)")
    kb.emit(f"{steps.text} += 1")
    kb.end_loop(has_loop_var=False)
    for var, vals, hi in ((n, nv, peak), (steps, sv, kmax)):
        v = kb.vars[var.text]
        v.expr = kb.var_expr(var.text, v.expr.with_(iv=Interval(0, hi), vals=vals.astype(float)))
        v.uses = 0


def _newton_sqrt(f: Frame) -> None:
    """Newton iterations for sqrt(s): x <- (x + s / x) / 2 (x stays >= min(s, sqrt(s)) > 0)."""
    kb, g = f.kb, f.gen
    s = g.fit_positive(g.gen(F32, 1), 0.5)
    if s.iv.hi > 100:
        s = g.fit_mag(s, 100.0)
        if s.iv.lo < 0.5:
            return
    sv = kb.declare("local", s)
    x = (
        kb.declare("local", sv, mutable=True)
        if f.rng.random() < 0.5
        else kb.declare("local", ops.add(sv, const(F32, 1.0)) or sv, mutable=True)
    )
    k = int(pick(f.rng, (3, 4, 5, 6)))
    lv = kb.names.fresh("loop")
    xs = kb.full(x.vals).astype(float)
    svals = kb.full(sv.vals)
    for _ in range(k):
        xs = 0.5 * (xs + svals / xs)
    kb.begin_loop(f"for {lv} in range({k}):", k, np.array([k]), None, mutable=(x.text,))
    kb.emit(
        pick(
            f.rng,
            (
                f"{x.text} = 0.5 * ({x.text} + {sv.text} / {x.text})",
                f"{x.text} = ({x.text} + {sv.text} / {x.text}) * 0.5",
            ),
        )
    )
    kb.end_loop(has_loop_var=False)
    lo = min(s.iv.lo, math.sqrt(s.iv.lo))
    v = kb.vars[x.text]
    v.expr = kb.var_expr(x.text, v.expr.with_(iv=Interval(lo, max(x.iv.hi, 1.0)), vals=xs))
    v.uses = 0


def _piecewise(f: Frame) -> None:
    """y = piecewise function of x over 3-4 intervals (an if/elif/else chain)."""
    kb, g = f.kb, f.gen
    x = g.varying_leaf(F32)
    if x is None:
        return
    qs = sorted({float(f"{nm.quantile(x.vals, q):.2g}") for q in (0.25, 0.5, 0.75)})
    if len(qs) < 2:
        return
    y = kb.declare("local", const(F32, 0.0), mutable=True)
    conds = [ops.comparison("<", x, const(F32, q)) for q in qs]
    if any(c is None or not c.varying for c in conds):
        return
    kb.begin_if(conds[0])
    kb.update(y.text, "=", g.fit_mag(g.gen_varying(F32, 1), 50.0))
    for c in conds[1:]:
        kb.begin_elif(lambda c=c: c)
        kb.update(y.text, "=", g.fit_mag(g.gen_varying(F32, 1), 50.0))
    kb.begin_else()
    kb.update(y.text, "=", g.fit_mag(g.gen_varying(F32, 1), 50.0))
    kb.end_if()


def _search(f: Frame) -> None:
    """Index of the first neighbour above a threshold (break out of the scan)."""
    kb, _g = f.kb, f.gen
    arrays = [a for a in kb.args if a.kind == "array" and a.role == "in" and a.ndim == 1 and a.type in (F32, F64)]
    if not arrays:
        return
    a = pick(f.rng, arrays)
    n = a.shape[0]
    k = int(pick(f.rng, (4, 6, 8)))
    found = kb.declare("local_int", const(I32, k), mutable=True)
    data = a.data  # (worlds, n)
    thr_v = float(f"{nm.quantile(data, 0.7):.2g}")
    thr = const(a.type, thr_v)
    lv = kb.names.fresh("loop")
    i, iv = kb.tid[0], kb.tid_exprs[0].vals.astype(np.int64)
    hits = np.full(kb.n_samples, float(k))
    for j in range(k - 1, -1, -1):
        vals = data[kb.world, np.fmod(iv + j, n)]
        hits = np.where(vals > thr_v, float(j), hits)
    kb.begin_loop(f"for {lv} in range({k}):", k, np.array([k]), None, mutable=(found.text,))
    kb.emit(f"if {a.name}[({i} + {lv}) % {a.name}.shape[0]] > {thr.text}:")
    kb.emit(f"    {found.text} = {lv}")
    kb.emit("    break")
    kb.end_loop(has_loop_var=False)
    v = kb.vars[found.text]
    v.expr = kb.var_expr(found.text, v.expr.with_(iv=Interval(0, k), vals=hits))
    v.uses = 0


def _stencil(f: Frame) -> None:
    """Sum over a clamped 3x3 neighbourhood (nested loops) on a 2-D grid."""
    kb, _g = f.kb, f.gen
    if len(kb.launch) != 2:
        return
    grids = [
        a for a in kb.args if a.kind == "array" and a.role == "in" and a.type == F32 and tuple(a.shape) == kb.launch
    ]
    if not grids:
        return
    a = pick(f.rng, grids)
    r, c = kb.tid
    rv, cv = (e.vals.astype(np.int64) for e in kb.tid_exprs)
    R, C = kb.launch
    acc = kb.declare("local", const(F32, 0.0), mutable=True)
    total = np.zeros(kb.n_samples)
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            total += a.data[kb.world, np.clip(rv + di, 0, R - 1), np.clip(cv + dj, 0, C - 1)]
    di, dj = kb.names.fresh("loop"), kb.names.fresh("loop")
    kb.begin_loop(f"for {di} in range(-1, 2):", 3, np.array([3]), None, mutable=(acc.text,))
    kb.begin_loop(f"for {dj} in range(-1, 2):", 3, np.array([3]), None)
    kb.emit(
        f"{acc.text} += {a.name}[wp.clamp({r} + {di}, 0, {a.name}.shape[0] - 1), "
        f"wp.clamp({c} + {dj}, 0, {a.name}.shape[1] - 1)]"
    )
    kb.end_loop(has_loop_var=False)
    kb.end_loop(has_loop_var=False)
    v = kb.vars[acc.text]
    v.expr = kb.var_expr(acc.text, v.expr.with_(iv=a.interval.scale(9.0).union(Interval.point(0.0)), vals=total))
    v.uses = 0


# _collatz is a while loop: a forward-only row (Warp's CPU adjoint of while loops is unusable)
MOTIFS = (_collatz, _newton_sqrt, _newton_sqrt, _piecewise, _piecewise, _search, _stencil, _stencil)


def _build(rng: np.random.Generator) -> Frame:
    f = standard_frame(
        rng,
        "control_flow",
        PROFILE,
        IN_POOL,
        OUT_POOL,
        dims=(1, 1, 1, 2, 2, 3),
        n_in=(1, 3),
        n_out=(1, 2),
        param_pool=(F32, I32),
        n_params=(0, 1, 1, 2),
        nouns=NOUNS,
        float_io=0.9,
    )
    f.require_any(REQUIRED)
    if rng.random() < 0.5:
        pick(rng, MOTIFS)(f)
    f.body.body()
    f.write_outputs()
    return f


def generate(rng: np.random.Generator) -> KernelSpec:
    return generate_checked(rng, _build)
