"""The production table: how to grow an expression of a given type.

Each entry is ``(family, name, applies(t), build(gen, t, depth))``.  ``build`` returns an
:class:`Expr` of type ``t`` or ``None`` (operands did not fit; the generator tries another
production).  Families are what category profiles weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import numpy as np

from . import numeric as nm
from . import ops
from .builder import KernelBuilder
from .expr import Expr, const
from .wtypes import F32, I32, WType


class ExprSource(Protocol):
    """What a production needs of the expression generator (exprgen.ExprGen, which imports
    this table): declared here so the table does not import its user back."""

    kb: KernelBuilder
    rng: np.random.Generator
    helper_hook: Callable[[WType, int], Expr | None] | None

    def chance(self, p: float) -> bool: ...
    def pick(self, seq): ...
    def lit(self, t: WType, lo: float = 0.1, hi: float = 4.0, signed: bool = False) -> Expr: ...
    def gen(self, t: WType, depth: int) -> Expr: ...
    def threshold(self, e: Expr) -> Expr: ...
    def cond(self, depth: int = 1) -> Expr: ...
    def fit_positive(self, e: Expr, m: float = 0.1) -> Expr: ...
    def fit_nonneg(self, e: Expr) -> Expr: ...
    def fit_nonzero(self, e: Expr, m: float = ops.DEN_MIN) -> Expr: ...
    def fit_within(self, e: Expr, lo: float, hi: float) -> Expr: ...
    def fit_mag(self, e: Expr, mag: float) -> Expr: ...
    def to_int(self, e: Expr, t: WType) -> Expr | None: ...


# ----------------------------------------------------------------------------- predicates
def is_fs(t: WType) -> bool:
    return t.is_scalar and t.scalar in ("float32", "float64")


def is_is(t: WType) -> bool:
    return t.is_scalar and t.is_int


def is_vf(t: WType) -> bool:
    return t.is_vector and t.scalar in ("float32", "float64")


def is_mf(t: WType) -> bool:
    return t.is_matrix and t.is_float


def is_num(t: WType) -> bool:
    return not t.is_bool and not t.quat and t.scalar != "float16"


def is_q(t: WType) -> bool:
    return t.quat


def _sub(g: ExprSource, t: WType, d: int) -> Expr:
    return g.gen(t, d - 1)


# ----------------------------------------------------------------------------- arithmetic
def p_add(g, t, d):
    a, b = _sub(g, t, d), _sub(g, t, d)
    return ops.add(a, b)


def p_sub(g, t, d):
    a, b = _sub(g, t, d), _sub(g, t, d)
    return ops.sub(a, b)


def p_mul(g, t, d):
    a, b = _sub(g, t, d), _sub(g, t, d)
    if t.is_float and (a.iv.mag * b.iv.mag > ops.FLOAT_CAP):
        b = g.fit_mag(b, 4.0)
    return ops.mul(a, b)


def p_scale(g, t, d):
    """vector/matrix times a scalar (either side)."""
    v = _sub(g, t, d)
    s = g.gen(t.component(), d - 1) if g.chance(0.5) else g.lit(t.component(), 0.1, 3.0, signed=True)
    s = g.fit_mag(s, 8.0)
    return ops.mul(s, v) if g.chance(0.5) else ops.mul(v, s)


def p_div(g, t, d):
    a = _sub(g, t, d)
    b = g.fit_nonzero(g.gen(t.component(), d - 1))
    return ops.div(a, b)


def p_neg(g, t, d):
    a = _sub(g, t, d)
    return None if a.op == "neg" else ops.neg(a)


def p_pow(g, t, d):
    base = g.fit_positive(_sub(g, t, d), ops.POW_BASE_MIN)
    if base.iv.hi > 50:
        return None
    expo = g.lit(t, 0.5, 3.0) if g.chance(0.6) else g.fit_mag(_sub(g, t, d), 2.0)
    return ops.power(base, expo, style=g.pick(["op", "call"]))


def p_float_mod(g, t, d):
    a = _sub(g, t, d)
    return ops.float_mod(a, g.lit(t, 0.5, 3.0))


def p_int_div(g, t, d):
    a = _sub(g, t, d)
    den = g.lit(t, 2, 9) if g.chance(0.6) else g.fit_positive(_sub(g, t, d), 1)
    if den.iv.lo < 1:
        den = g.lit(t, 2, 9)
    return ops.int_div(g.pick(["//", "%"]), a, den, style="op" if g.chance(0.8) else "call")


# ----------------------------------------------------------------------------- integers
def p_bitop(g, t, d):
    a = g.fit_nonneg(_sub(g, t, d))
    b = g.lit(t, 1, 255) if g.chance(0.5) else g.fit_nonneg(_sub(g, t, d))
    return ops.bitop(g.pick(["&", "|", "^"]), a, b, style="op" if g.chance(0.8) else "call")


def p_shift(g, t, d):
    a = g.fit_nonneg(_sub(g, t, d))
    amount = g.lit(t, 1, 4)
    op = "<<" if a.iv.hi < 2**14 and g.chance(0.5) else ">>"
    return ops.shift(op, a, amount, style="op" if g.chance(0.8) else "call")


def p_invert(g, t, d):
    return ops.invert(_sub(g, t, d), style="op" if g.chance(0.7) else "call")


def p_bit_count(g, t, d):
    if t != I32:
        return None
    return ops.bit_count(g.fit_nonneg(_sub(g, t, d)))


# ----------------------------------------------------------------------------- casts
_CAST_SOURCES = {
    "float32": ("float64", "int32", "int32", "float16", "uint32", "int64"),
    "float64": ("float32", "float32", "int32", "int64"),
    "int32": ("float32", "float32", "float64", "uint32", "int64", "int16", "int8", "uint8"),
    "uint32": ("int32", "int32", "float32"),
    "int64": ("int32", "float64"),
    "int16": ("int32",),
    "int8": ("int32",),
    "uint8": ("int32",),
    "uint16": ("int32",),
    "uint64": ("int32",),
}


def p_cast(g, t, d):
    srcs = _CAST_SOURCES.get(t.scalar)
    if not srcs:
        return None
    src = WType(g.pick(srcs))
    style = g.kb.cast_style
    if src.scalar == "float16":  # round-trip through half precision
        inner = ops.cast(g.fit_mag(g.gen(F32, d - 1), 100.0), src)
        return ops.cast(inner, t, style) if inner is not None else None
    e = g.gen(src, d - 1)
    if e.op == "cast":
        return None  # no cast of a cast
    if t.is_int and src.is_float:
        return g.to_int(e, t)
    if t.is_int:
        if t.is_unsigned:
            e = g.fit_nonneg(e)
        if e.iv.lo < -ops.INT_CAP[t.scalar] or e.iv.hi > ops.INT_CAP[t.scalar]:
            return None
    if src.is_int and not t.is_int and t.is_float and e.iv.mag > 1e6:
        return None
    return ops.cast(e, t, style)


def p_vec_cast(g, t, d):
    other = "float64" if t.scalar == "float32" else "float32"
    return ops.vec_cast(g.gen(t.with_scalar(other), d - 1), t.scalar)


# ----------------------------------------------------------------------------- scalar math
def _unary_fitted(g: ExprSource, fn: str, t: WType, d: int) -> Expr | None:
    a = _sub(g, t, d)
    if a.text.startswith(f"wp.{fn}("):
        return None  # f(f(x)) reads as a mistake
    if fn in ("sqrt",):
        a = g.fit_positive(a, ops.SQRT_MIN + g.pick([0.0, 0.0, 0.5, 1.0]))
    elif fn in ("log", "log2", "log10"):
        a = g.fit_positive(a, ops.LOG_MIN + g.pick([0.05, 0.5, 1.0]))
    elif fn == "cbrt":
        a = g.fit_nonzero(a, 0.05)
    elif fn in ("asin", "acos"):
        a = g.fit_within(a, -0.95, 0.95)
    elif fn == "tan":
        a = g.fit_within(a, -1.2, 1.2)
    elif fn in ("sinh", "cosh"):
        a = g.fit_within(a, -4.0, 4.0)
    elif fn == "exp":
        a = g.fit_within(a, -5.0, 5.0)
    elif fn == "erfinv":
        a = g.fit_within(a, -0.9, 0.9)
    elif fn == "erfcinv":
        a = g.fit_within(a, 0.15, 1.85)
    elif fn in ops.QUANTIZERS and fn not in ("sign", "step", "nonzero"):
        sp = nm.sample_spread(a.vals)
        if 0 < sp < 3.0:  # scale so the result keeps several levels over the threads
            k = const(t, float(min(1000.0, max(2.0, _nice_up(4.0 / sp)))))
            a = ops.mul(a, k) or a
    elif fn in ("sign", "step", "nonzero"):
        mid = g.threshold(a)
        if a.vals is not None and (np.all(a.vals >= 0) or np.all(a.vals <= 0)):
            a = ops.sub(a, mid) or a
    return ops.unary(fn, a)


def _nice_up(x: float) -> float:
    for v in (2.0, 4.0, 5.0, 8.0, 10.0, 16.0, 20.0, 32.0, 50.0, 100.0, 200.0, 500.0, 1000.0):
        if v >= x:
            return v
    return 1000.0


def _unary_family(*fns: str):
    def build(g, t, d):
        return _unary_fitted(g, g.pick(list(fns)), t, d)

    return build


def p_atan2(g, t, d):
    y = _sub(g, t, d)
    x = g.fit_nonzero(_sub(g, t, d)) if g.chance(0.5) else g.fit_positive(_sub(g, t, d))
    return ops.binary_fn("atan2", y, x)


def p_copysign(g, t, d):
    return ops.binary_fn("copysign", _sub(g, t, d), _sub(g, t, d))


def p_minmax(g, t, d):
    a = _sub(g, t, d)
    b = _sub(g, t, d) if g.chance(0.6) else g.threshold(a) if a.type.is_scalar and a.iv.width > 0 else _sub(g, t, d)
    return ops.binary_fn(g.pick(["min", "max"]), a, b)


def _quantiles(e: Expr, q: tuple[float, ...]) -> list[float] | None:
    if e.vals is None or not e.varying:
        return None
    return [nm.quantile(e.vals, x) for x in q]


def p_clamp(g, t, d):
    """Clamp to bounds inside the data (from the sample values), so it does not saturate."""
    x = _sub(g, t, d)
    qs = _quantiles(x, (0.1, 0.35, 0.65, 0.9))
    if qs is None:
        return None
    if t.is_int:
        a, b = int(math.floor(qs[0])), int(math.ceil(qs[3]))
        if b - a < 2:
            return None
        return ops.clamp(x, const(t, a), const(t, b))
    a = nm.nice_float(g.rng, qs[0], qs[1]) if g.chance(0.8) else float(f"{x.iv.lo - 1.0:.2g}")
    b = nm.nice_float(g.rng, qs[2], qs[3])
    if b <= a:
        return None
    return ops.clamp(x, const(t, a), const(t, b))


def p_abs(g, t, d):
    a = _sub(g, t, d)
    if t.is_vector:
        return ops.vec_abs(a)
    return ops.unary("abs", a)


def p_lerp(g, t, d):
    a, b = _sub(g, t, d), _sub(g, t, d)
    w = g.gen(t.component(), d - 1) if g.chance(0.6) else g.lit(t.component(), 0.1, 0.9)
    w = g.fit_within(w, 0.0, 1.0)
    return ops.lerp(a, b, w)


def p_smoothstep(g, t, d):
    x = _sub(g, t, d)
    qs = _quantiles(x, (0.0, 0.3, 0.7, 1.0))
    if qs is None:
        return None
    e0 = nm.nice_float(g.rng, qs[0], qs[1])
    e1 = nm.nice_float(g.rng, qs[2], qs[3])
    if e1 - e0 < 0.1:
        return None
    return ops.smoothstep(const(t, e0), const(t, e1), x)


def p_where(g, t, d):
    c = g.cond(max(0, d - 2))
    a, b = _sub(g, t, d), _sub(g, t, d)
    return ops.where(c, a, b, style="where" if g.chance(0.7) else "ternary")


# ----------------------------------------------------------------------------- vectors
def p_vec_ctor(g, t, d):
    comp = t.component()
    # components are kept shallow: wp.vec3(x, y * 2.0, -z) reads well, nested calls do not
    return ops.vec_ctor(
        t,
        [g.gen(comp, max(0, d - 2)) if g.chance(0.7) else g.lit(comp, 0.1, 2.0, signed=True) for _ in range(t.length)],
    )


def p_vec_splat(g, t, d):
    return ops.vec_splat(t, g.gen(t.component(), d - 1))


def p_cross(g, t, d):
    if t.shape != (3,):
        return None
    a, b = g.fit_mag(_sub(g, t, d), 20.0), g.fit_mag(_sub(g, t, d), 20.0)
    return ops.cross(a, b)


def nonzero_vec(g: ExprSource, v: Expr) -> Expr:
    """A vector with a guaranteed minimum length (for normalize)."""
    if v.min_norm >= 0.1:
        return v
    t = v.type
    comp = t.component()
    if g.chance(0.5):
        # add a constant offset along a direction: length >= offset - |v|... needs |v| small
        if v.iv.mag * math.sqrt(t.length) < 1.0:
            off = (
                ops.vec_ctor(t, [const(comp, 0.0)] * (t.length - 1) + [g.lit(comp, 1.5, 3.0)])
                if g.chance(0.5)
                else ops.vec_splat(t, g.lit(comp, 1.5, 3.0))
            )
            s = ops.add(v, off) if off is not None else None
            if s is not None:
                return s.with_(min_norm=max(0.1, (off.iv.hi - v.iv.mag)))
    comps = [g.fit_positive(g.gen(comp, 1), 0.1) if k == 0 else g.gen(comp, 1) for k in range(t.length)]
    return ops.vec_ctor(t, comps) or v


def p_normalize(g, t, d):
    v = nonzero_vec(g, _sub(g, t, d))
    if g.chance(0.15) and t.is_vector:
        return ops.normalize(v, smooth=True)
    return ops.normalize(v)


def p_cw(g, t, d):
    a = _sub(g, t, d)
    if g.chance(0.5):
        return ops.cw("cw_mul", a, g.fit_mag(_sub(g, t, d), 10.0))
    b = _sub(g, t, d)
    comp = t.component()
    if b.iv.mig < ops.DEN_MIN:
        b = ops.vec_ctor(t, [g.fit_positive(g.gen(comp, 0), 0.2) for _ in range(t.length)]) or b
    return ops.cw("cw_div", a, b)


def p_vec_minmax(g, t, d):
    return ops.binary_fn(g.pick(["min", "max"]), _sub(g, t, d), _sub(g, t, d))


def p_reflect(g, t, d):
    """d - 2 (d . n) n with a unit normal: the reflection idiom."""
    if t.is_scalar:
        return None
    v = g.fit_mag(_sub(g, t, d), 20.0)
    n = ops.normalize(nonzero_vec(g, g.gen(t, max(0, d - 2))))
    if n is None:
        return None
    dn = ops.dot(v, n)
    two = const(t.component(), 2.0)
    proj = ops.mul(ops.mul(two, dn), n) if dn is not None else None
    return ops.sub(v, proj) if proj is not None else None


# vectors -> scalars
def p_dot(g, t, d):
    n = int(g.pick([2, 3, 3, 4]))
    vt = WType(t.scalar, (n,))
    a, b = g.fit_mag(g.gen(vt, d - 1), 20.0), g.fit_mag(g.gen(vt, d - 1), 20.0)
    return ops.dot(a, b)


def p_vec_norm(g, t, d):
    vt = WType(t.scalar, (int(g.pick([2, 3, 3, 4])),))
    v = g.fit_mag(g.gen(vt, d - 1), 30.0)
    fn = g.pick(["length", "length", "length_sq", "norm_l1", "norm_l2", "norm_huber", "norm_pseudo_huber"])
    if fn in ("length", "norm_l2"):
        v = nonzero_vec(g, v)  # d|v|/dv is undefined at 0
    return ops.vec_norm(fn, v)


def p_component(g, t, d):
    vt = WType(t.scalar, (int(g.pick([2, 3, 3, 4])),))
    v = g.gen(vt, d - 1)
    return ops.component(v, int(g.rng.integers(vt.length)), style=g.pick(["attr", "attr", "index"]))


def p_vec_reduce(g, t, d):
    vt = WType(t.scalar, (int(g.pick([2, 3, 4])),))
    return ops.vec_reduce(g.pick(["min", "max"]), g.gen(vt, d - 1))


def p_argminmax(g, t, d):
    if t != I32:
        return None
    vt = WType("float32", (int(g.pick([2, 3, 4])),))
    r = ops.vec_reduce(g.pick(["argmin", "argmax"]), g.gen(vt, d - 1))
    return ops.cast(r, I32, style=g.kb.cast_style) if r is not None else None


# ----------------------------------------------------------------------------- matrices
def p_mat_ctor(g, t, d):
    comp = t.component()
    comps = [g.gen(comp, 0) if g.chance(0.6) else g.lit(comp, 0.1, 2.0, signed=True) for _ in range(t.ncomp)]
    return ops.mat_ctor(t, comps)


def p_mat_from_vectors(g, t, d):
    how = g.pick(["rows", "cols"])
    n = t.shape[1] if how == "rows" else t.shape[0]
    k = t.shape[0] if how == "rows" else t.shape[1]
    vt = WType(t.scalar, (n,))
    return ops.mat_from_vectors(how, t, [g.gen(vt, d - 1) for _ in range(k)])


def p_outer(g, t, d):
    if t.shape[0] != t.shape[1]:
        return None
    a = g.fit_mag(g.gen(WType(t.scalar, (t.shape[0],)), d - 1), 20.0)
    b = g.fit_mag(g.gen(WType(t.scalar, (t.shape[1],)), d - 1), 20.0)
    return ops.outer(a, b)


def p_skew(g, t, d):
    if t.shape != (3, 3):
        return None
    return ops.skew(g.gen(WType(t.scalar, (3,)), d - 1))


def p_diag(g, t, d):
    if t.shape[0] != t.shape[1]:
        return None
    return ops.diag(g.gen(WType(t.scalar, (t.shape[0],)), d - 1))


def p_transpose(g, t, d):
    return ops.transpose(g.gen(WType(t.scalar, (t.shape[1], t.shape[0])), d - 1))


def well_conditioned(g: ExprSource, t: WType, d: int) -> Expr | None:
    """A square matrix with |det| bounded below: a rotation, or A + c*I diagonally dominant."""
    n = t.shape[0]
    if t.shape == (3, 3) and g.chance(0.3):
        q = quat_unit(g, WType(t.scalar, (4,), quat=True), max(1, d - 1))
        m = ops.quat_to_matrix(q) if q is not None else None
        if m is not None:
            return m
    a = g.fit_mag(g.gen(t, max(0, d - 1)), 2.0)
    c = g.lit(t.component(), n * a.iv.mag + 0.5, n * a.iv.mag + 3.0)
    return ops.add_diagonal(a, c, style=g.pick(["eye_left", "eye_right", "diag"]))


def p_inverse(g, t, d):
    if t.shape[0] != t.shape[1]:
        return None
    m = well_conditioned(g, t, d)
    return ops.inverse(m) if m is not None else None


def p_matmul(g, t, d):
    a = g.fit_mag(g.gen(t, d - 1), 10.0)
    b = g.fit_mag(g.gen(t, d - 1), 10.0)
    return ops.matmul(a, b, style="op" if g.chance(0.75) else "call")


def p_identity_scaled(g, t, d):
    if t.shape[0] != t.shape[1]:
        return None
    s = g.gen(t.component(), d - 1)
    eye = ops.identity(t.shape[0], t.scalar)
    return ops.mul(s, eye) if g.chance(0.5) else ops.mul(eye, s)


def p_mat_vec(g, t, d):
    """M @ v (or v @ M) producing a vector."""
    n = t.length
    mt = WType(t.scalar, (n, n))
    m = g.fit_mag(g.gen(mt, d - 1), 10.0)
    v = g.fit_mag(g.gen(t, d - 1), 10.0)
    r = g.rng.random()
    if r < 0.55:
        return ops.matmul(m, v)
    if r < 0.75:
        return ops.matmul(m, v, style="call")
    return ops.matmul(v, m)


def p_get_diag(g, t, d):
    return ops.get_diag(g.gen(WType(t.scalar, (t.length, t.length)), d - 1))


def p_mat_row(g, t, d):
    m = g.gen(WType(t.scalar, (t.length, t.length)), d - 1)
    return ops.matrix_row(m, int(g.rng.integers(m.type.shape[0])))


# matrices -> scalars
def _square(g: ExprSource, t: WType) -> WType:
    n = int(g.pick([2, 3, 3, 4]))
    return WType(t.scalar, (n, n))


def p_determinant(g, t, d):
    return ops.determinant(g.fit_mag(g.gen(_square(g, t), d - 1), 3.0))


def p_trace(g, t, d):
    return ops.trace(g.gen(_square(g, t), d - 1))


def p_ddot(g, t, d):
    mt = _square(g, t)
    return ops.ddot(g.fit_mag(g.gen(mt, d - 1), 10.0), g.fit_mag(g.gen(mt, d - 1), 10.0))


def p_mat_entry(g, t, d):
    m = g.gen(_square(g, t), d - 1)
    n = m.type.shape[0]
    return ops.matrix_entry(m, int(g.rng.integers(n)), int(g.rng.integers(n)), style=g.pick(["pair", "pair", "chain"]))


# ----------------------------------------------------------------------------- quaternions
def quat_unit(g: ExprSource, t: WType, d: int) -> Expr | None:
    """A unit quaternion: from axis-angle, roll-pitch-yaw, or a normalized 4-vector."""
    comp = t.component()
    r = g.rng.random()
    if r < 0.45:
        axis = ops.normalize(nonzero_vec(g, g.gen(WType(t.scalar, (3,)), max(0, d - 1))))
        angle = g.fit_mag(g.gen(comp, max(0, d - 1)), 6.3)
        return ops.quat_from_axis_angle(axis, angle) if axis is not None else None
    if r < 0.7:
        return ops.quat_rpy(*[g.fit_mag(g.gen(comp, max(0, d - 2)), 3.2) for _ in range(3)])
    comps = [g.fit_positive(g.gen(comp, 0), 0.2)] + [g.gen(comp, max(0, d - 2)) for _ in range(3)]
    q = ops.vec_ctor(t, comps)
    return ops.normalize(q) if q is not None else None


def p_quat(g, t, d):
    r = g.rng.random()
    if r < 0.5 or d <= 1:
        return quat_unit(g, t, d)
    a = quat_unit(g, t, d - 1)
    if r < 0.8:
        return ops.quat_mul(a, quat_unit(g, t, d - 1))
    return ops.quat_inverse(a)


def p_quat_rotate(g, t, d):
    if t.shape != (3,) or not t.is_vector:
        return None
    q = g.gen(WType(t.scalar, (4,), quat=True), d - 1)
    if not q.unit:
        q = quat_unit(g, q.type, d - 1)
        if q is None:
            return None
    v = g.fit_mag(_sub(g, t, d), 50.0)
    return ops.quat_rotate(q, v, inverse_=g.chance(0.3))


def p_transform(g, t, d):
    if t != WType("float32", (3,)):
        return None
    q = quat_unit(g, WType("float32", (4,), quat=True), max(1, d - 1))
    if q is None:
        return None
    p = g.fit_mag(g.gen(t, d - 2), 50.0)
    v = g.fit_mag(_sub(g, t, d), 50.0)
    return ops.transform_apply(g.pick(["transform_point", "transform_vector"]), p, q, v)


def p_quat_to_matrix(g, t, d):
    if t.shape != (3, 3):
        return None
    q = quat_unit(g, WType(t.scalar, (4,), quat=True), d - 1)
    return ops.quat_to_matrix(q) if q is not None else None


# ----------------------------------------------------------------------------- formulas
# Compositions people write over and over (activations, kernels, polynomials); built from
# the typed builders so domains, intervals and sample values stay exact.
def _one(t):
    return const(t, 1.0)


def p_sigmoid(g, t, d):
    x = g.fit_within(_sub(g, t, d), -20.0, 20.0)
    return ops.div(_one(t), ops.add(_one(t), ops.unary("exp", ops.neg(x))))


def p_softplus(g, t, d):
    x = g.fit_within(_sub(g, t, d), -5.0, 5.0)
    return ops.unary("log", ops.add(_one(t), ops.unary("exp", x)))


def p_gelu(g, t, d):
    x = g.fit_mag(_sub(g, t, d), 10.0)
    inner = (
        ops.unary("erf", ops.mul(x, const(t, 0.7071067811865476)))
        if g.chance(0.5)
        else ops.unary("erf", ops.div(x, const(t, 1.4142135623730951)))
    )
    return ops.mul(ops.mul(const(t, 0.5), x), ops.add(_one(t), inner))


def p_silu(g, t, d):
    x = g.fit_within(_sub(g, t, d), -20.0, 20.0)
    return ops.div(x, ops.add(_one(t), ops.unary("exp", ops.neg(x))))


def p_gaussian(g, t, d):
    x = g.fit_mag(_sub(g, t, d), 10.0)
    sigma = g.lit(t, 0.3, 2.0)
    two_s2 = const(t, float(f"{2.0 * sigma.iv.lo * sigma.iv.lo:.4g}"))
    return ops.unary("exp", ops.neg(ops.div(ops.mul(x, x), two_s2)))


def p_horner(g, t, d):
    """c0 + x * (c1 + x * (c2 + x * c3))"""
    x = g.fit_mag(_sub(g, t, d), 2.0)
    deg = int(g.pick([2, 3, 3, 4]))
    acc = g.lit(t, 0.1, 2.0, signed=True)
    for _ in range(deg):
        acc = ops.add(g.lit(t, 0.1, 2.0, signed=True), ops.mul(x, acc))
    return acc


def p_hypot(g, t, d):
    a, b = g.fit_mag(_sub(g, t, d), 20.0), g.fit_mag(_sub(g, t, d), 20.0)
    eps = g.lit(t, 1e-4, 1e-2) if g.chance(0.5) else g.lit(t, 0.01, 0.5)
    return ops.unary("sqrt", ops.add(ops.add(ops.mul(a, a), ops.mul(b, b)), eps))


def p_logsumexp(g, t, d):
    a, b = g.fit_within(_sub(g, t, d), -5.0, 5.0), g.fit_within(_sub(g, t, d), -5.0, 5.0)
    m = ops.binary_fn("max", a, b)
    s = ops.add(ops.unary("exp", ops.sub(a, m)), ops.unary("exp", ops.sub(b, m)))
    return ops.add(m, ops.unary("log", s))


def p_wrap_angle(g, t, d):
    """atan2(sin x, cos x): an angle wrapped to (-pi, pi]."""
    x = g.fit_mag(_sub(g, t, d), 20.0)
    s, c = ops.unary("sin", x), ops.unary("cos", x)
    if s is None or c is None:
        return None
    # sin and cos never vanish together: atan2 is well defined (and differentiable) here
    return ops.binary_fn("atan2", s.with_(min_norm=0.7), c.with_(min_norm=0.7))


def p_exp_decay(g, t, d):
    x = g.fit_positive(_sub(g, t, d), 0.0)
    rate = g.lit(t, 0.1, 3.0)
    x = g.fit_mag(x, 30.0)
    return ops.mul(
        g.gen(t, d - 1) if g.chance(0.4) else g.lit(t, 0.5, 3.0), ops.unary("exp", ops.neg(ops.mul(rate, x)))
    )


def p_helper(g, t, d):
    return g.helper_hook(t, d) if g.helper_hook is not None else None


_ANY_NUM = is_num

PRODUCTIONS = [
    # arithmetic
    ("arith", "add", _ANY_NUM, p_add),
    ("arith", "sub", _ANY_NUM, p_sub),
    ("arith", "mul", lambda t: t.is_scalar and is_num(t), p_mul),
    ("arith", "scale", lambda t: is_vf(t) or is_mf(t), p_scale),
    ("arith", "div", lambda t: is_fs(t) or is_vf(t) or is_mf(t), p_div),
    ("arith", "neg", lambda t: is_num(t) and not t.is_unsigned, p_neg),
    ("intdiv", "int_div", is_is, p_int_div),
    ("intdiv", "float_mod", is_fs, p_float_mod),
    ("bits", "bitop", is_is, p_bitop),
    ("bits", "shift", is_is, p_shift),
    ("bits", "invert", lambda t: is_is(t) and not t.is_unsigned, p_invert),
    ("bits", "bit_count", is_is, p_bit_count),
    ("cast", "cast", lambda t: t.is_scalar and not t.is_bool, p_cast),
    ("cast", "vec_cast", lambda t: is_vf(t) or is_mf(t), p_vec_cast),
    # scalar math
    (
        "trig",
        "trig",
        is_fs,
        _unary_family(
            "sin",
            "cos",
            "sin",
            "cos",
            "tan",
            "asin",
            "acos",
            "atan",
            "sinh",
            "cosh",
            "tanh",
            "tanh",
            "degrees",
            "radians",
        ),
    ),
    ("trig", "atan2", is_fs, p_atan2),
    ("explog", "explog", is_fs, _unary_family("exp", "exp", "log", "log", "log2", "log10", "sqrt", "sqrt", "cbrt")),
    ("explog", "pow", is_fs, p_pow),
    (
        "round",
        "round",
        is_fs,
        _unary_family("floor", "ceil", "round", "rint", "trunc", "frac", "sign", "step", "nonzero", "abs"),
    ),
    ("special", "special", is_fs, _unary_family("erf", "erfc", "erfinv", "erfcinv")),
    ("special", "copysign", is_fs, p_copysign),
    ("special", "smoothstep", is_fs, p_smoothstep),
    ("special", "lerp", lambda t: is_fs(t) or is_vf(t), p_lerp),
    ("minmax", "minmax", lambda t: (t.is_scalar and is_num(t)) or t.is_vector, p_minmax),
    ("minmax", "clamp", lambda t: t.is_scalar and is_num(t), p_clamp),
    (
        "minmax",
        "abs",
        lambda t: is_fs(t) or (is_is(t) and not t.is_unsigned) or (t.is_vector and not t.is_unsigned),
        p_abs,
    ),
    ("select", "where", lambda t: not t.is_bool, p_where),
    # vectors
    ("vec", "ctor", is_vf, p_vec_ctor),
    ("vec", "splat", is_vf, p_vec_splat),
    ("vec", "cross", is_vf, p_cross),
    ("vec", "normalize", is_vf, p_normalize),
    ("vec", "cw", is_vf, p_cw),
    ("vec", "vminmax", is_vf, p_vec_minmax),
    ("vec", "reflect", is_vf, p_reflect),
    ("vec_reduce", "dot", is_fs, p_dot),
    ("vec_reduce", "norm", is_fs, p_vec_norm),
    ("vec_reduce", "component", is_fs, p_component),
    ("vec_reduce", "vreduce", is_fs, p_vec_reduce),
    ("vec_reduce", "argminmax", lambda t: t == I32, p_argminmax),
    # matrices
    ("mat", "ctor", is_mf, p_mat_ctor),
    ("mat", "from_vectors", is_mf, p_mat_from_vectors),
    ("mat", "outer", is_mf, p_outer),
    ("mat", "skew", is_mf, p_skew),
    ("mat", "diag", is_mf, p_diag),
    ("mat", "transpose", is_mf, p_transpose),
    ("mat", "inverse", is_mf, p_inverse),
    ("mat", "matmul", is_mf, p_matmul),
    ("mat", "identity", is_mf, p_identity_scaled),
    ("mat", "quat_to_matrix", is_mf, p_quat_to_matrix),
    ("mat_vec", "mat_vec", is_vf, p_mat_vec),
    ("mat_vec", "get_diag", is_vf, p_get_diag),
    ("mat_vec", "row", is_vf, p_mat_row),
    ("mat_reduce", "determinant", is_fs, p_determinant),
    ("mat_reduce", "trace", is_fs, p_trace),
    ("mat_reduce", "ddot", is_fs, p_ddot),
    ("mat_reduce", "entry", is_fs, p_mat_entry),
    # quaternions / transforms
    ("quat", "quat", is_q, p_quat),
    ("quat", "rotate", is_vf, p_quat_rotate),
    ("quat", "transform", is_vf, p_transform),
    # formulas
    ("formula", "sigmoid", is_fs, p_sigmoid),
    ("formula", "softplus", is_fs, p_softplus),
    ("formula", "gelu", is_fs, p_gelu),
    ("formula", "silu", is_fs, p_silu),
    ("formula", "gaussian", is_fs, p_gaussian),
    ("formula", "horner", is_fs, p_horner),
    ("formula", "hypot", is_fs, p_hypot),
    ("formula", "logsumexp", is_fs, p_logsumexp),
    ("formula", "wrap_angle", is_fs, p_wrap_angle),
    ("formula", "exp_decay", is_fs, p_exp_decay),
    # helper functions
    ("helper", "call", lambda t: not t.is_bool, p_helper),
]
