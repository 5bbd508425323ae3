"""Turning a value of one type into a value of another, the way kernels usually do it.

Used to fold leftover local variables into an output of the output's type, and wherever a
motif needs "a float32 from this vector" or "a vec3 from this scalar".  Every conversion
keeps the dependence on the value (so a thread-varying value stays thread-varying as far
as possible).
"""

from __future__ import annotations

import math

from . import ops
from .expr import Expr, const
from .exprgen import ExprGen
from .productions import nonzero_vec
from .wtypes import WType


def to_type(g: ExprGen, e: Expr, t: WType) -> Expr | None:
    """``e`` converted to type ``t`` (``None`` if there is no sensible conversion)."""
    s = e.type
    if s == t:
        return e
    if s.is_bool:
        if t.is_scalar and not t.is_bool:
            return ops.where(e, g.lit(t, 1, 3) if t.is_int else g.lit(t, 0.5, 2.0), const(t, 0))
        return None
    if t.is_scalar:
        return _to_scalar(g, e, t)
    if t.is_vector:
        return _to_vector(g, e, t)
    if t.is_matrix:
        return _to_matrix(g, e, t)
    if t.quat:
        return _to_quat(g, e, t)
    return None


def _to_scalar(g: ExprGen, e: Expr, t: WType) -> Expr | None:
    s = e.type
    if s.is_scalar:
        if t.is_int and s.is_float:
            return g.to_int(e, t)
        if t.is_int and e.iv.mag > ops.INT_CAP[t.scalar]:
            e = ops.int_div("%", g.fit_nonneg(e), const(s, 1000)) or e
        if t.is_unsigned and e.iv.lo < 0:
            e = g.fit_nonneg(e)
        return ops.cast(e, t, style=g.kb.cast_style)
    # reduce to a scalar of the same component type, then cast
    s.component()
    r = None
    if s.is_vector or s.quat:
        choices = ["component", "dot", "sum"]
        if s.is_float and s.is_vector:
            choices += ["length_sq", "norm_l1", "max"]
            if e.min_norm >= 0.1 and not e.unit:
                choices.append("length")
        how = g.pick(choices)
        if how == "component":
            r = ops.component(e, int(g.rng.integers(s.length)), style=g.pick(["attr", "index"]))
        elif how == "dot":
            if s.is_float and not e.unit:
                other = g.gen(s, 1)
                r = ops.dot(g.fit_mag(e, 20.0), g.fit_mag(other, 20.0))
        elif how == "sum":
            parts = [ops.component(e, k, style="index") for k in range(s.length)]
            r = parts[0]
            for p in parts[1:]:
                r = ops.add(r, p) if r is not None else None
        elif how == "max":
            r = ops.vec_reduce(g.pick(["max", "min"]), e)
        else:
            r = ops.vec_norm(how, g.fit_mag(e, 30.0))
        if r is None:
            r = ops.component(e, 0, style="attr")
    elif s.is_matrix:
        how = g.pick(["entry", "trace", "det", "entry"])
        if how == "trace" and s.shape[0] == s.shape[1]:
            r = ops.trace(e)
        elif how == "det" and s.shape[0] == s.shape[1] and not e.unit and e.iv.mag <= 3.0:
            r = ops.determinant(e)
        if r is None:
            r = ops.matrix_entry(e, int(g.rng.integers(s.shape[0])), int(g.rng.integers(s.shape[1])))
    if r is None:
        return None
    return r if r.type == t else _to_scalar(g, r, t)


def _to_vector(g: ExprGen, e: Expr, t: WType) -> Expr | None:
    s = e.type
    comp = t.component()
    if s.is_scalar:
        x = to_type(g, e, comp)
        if x is None:
            return None
        if g.chance(0.5):
            return ops.vec_splat(t, x)
        # scale a direction: x * v
        base = g.gen(t, 1)
        return ops.mul(g.fit_mag(x, 10.0), base) or ops.vec_splat(t, x)
    if (s.is_vector or s.quat) and s.length == t.length and s.scalar != t.scalar and not s.quat:
        return ops.vec_cast(e, t.scalar)
    if s.is_vector or s.quat:
        comps = []
        for k in range(t.length):
            c = ops.component(e, k % s.length, style=g.pick(["attr", "index"]))
            if c is None:
                return None
            if c.type != comp:
                c = ops.cast(c, comp)
                if c is None:
                    return None
            comps.append(c if k < s.length else g.gen(comp, 0))
        return ops.vec_ctor(t, comps)
    if s.is_matrix:
        if s.shape[1] == t.length and s.scalar == t.scalar:
            v = g.gen(t, 0)
            return ops.matmul(g.fit_mag(e, 10.0), g.fit_mag(v, 10.0))
        if s.shape[0] == t.length and s.scalar == t.scalar and s.shape[0] == s.shape[1]:
            return ops.get_diag(e)
        r = to_type(g, e, comp)
        return _to_vector(g, r, t) if r is not None else None
    return None


def _to_matrix(g: ExprGen, e: Expr, t: WType) -> Expr | None:
    s = e.type
    n = t.shape[0]
    if s.is_scalar:
        x = to_type(g, e, t.component())
        if x is None:
            return None
        eye = ops.identity(n, t.scalar)
        base = g.gen(t, 1) if g.chance(0.4) else eye
        return ops.mul(g.fit_mag(x, 10.0), base)
    if s.is_vector and s.scalar == t.scalar:
        if s.length == n and g.chance(0.5) and t.shape[0] == t.shape[1]:
            return ops.diag(e)
        if s.length == t.shape[0]:
            other = g.gen(WType(t.scalar, (t.shape[1],)), 1)
            return ops.outer(g.fit_mag(e, 20.0), g.fit_mag(other, 20.0))
    r = to_type(g, e, t.component())
    return _to_matrix(g, r, t) if r is not None else None


def _to_quat(g: ExprGen, e: Expr, t: WType) -> Expr | None:
    comp = t.component()
    x = to_type(g, e, comp)
    if x is None:
        return None
    axis_src = g.gen(WType(t.scalar, (3,)), 1)
    axis = ops.normalize(nonzero_vec(g, axis_src))
    angle = g.fit_mag(x, math.pi)
    return ops.quat_from_axis_angle(axis, angle) if axis is not None else None
