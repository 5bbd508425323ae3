"""Typed builders: combine :class:`Expr` operands into a new :class:`Expr`, or refuse.

Every builder checks operand types the way Warp does (no implicit promotion) and checks
value intervals against the operation's well-posed domain; it returns ``None`` when the
combination would not compile or would not be well-posed, so a caller can try something
else.  Each result also carries its sample values (``numeric.py``).  Nothing here draws
random numbers.  Any operand may be ``None`` (a failed sub-build): the result is then
``None`` too.
"""

from __future__ import annotations

import functools
import inspect
import math

import numpy as np

from . import numeric as nm
from .expr import BINOP_PREC, PREC_ATOM, PREC_NOT, PREC_TERNARY, PREC_UNARY, Expr, binop_text, call_text, combine
from .interval import Interval, monotone, periodic_bound
from .wtypes import BOOL, INT_LIMITS, WType

# Largest magnitude a float expression may reach: keeps float32 far from overflow even
# after the few further operations an output goes through, and gradients modest.
FLOAT_CAP = 1.0e3
# Integer magnitudes stay far from wrap-around (and exactly representable as float32).
INT_CAP = {
    "int8": 100,
    "uint8": 250,
    "int16": 16000,
    "uint16": 60000,
    "int32": 2**22,
    "uint32": 2**22,
    "int64": 2**40,
    "uint64": 2**40,
}

# Lower bounds that keep functions and their gradients finite and moderate.
SQRT_MIN = 0.01
LOG_MIN = 0.05
DEN_MIN = 0.1
POW_BASE_MIN = 0.1


def fits_type(t: WType, iv: Interval) -> bool:
    """Whether values in ``iv`` are safe for type ``t`` (finite, within its range)."""
    if not iv.finite():
        return False
    if t.is_float:
        return iv.mag <= FLOAT_CAP
    if t.is_int:
        cap = INT_CAP[t.scalar]
        return -cap <= iv.lo and iv.hi <= cap and iv.lo >= INT_LIMITS[t.scalar][0]
    return True


def _result(text: str, t: WType, iv: Interval, *parts: Expr, vals=None, prec: int = PREC_ATOM, **facts) -> Expr | None:
    if not fits_type(t, iv):
        return None
    if vals is not None:
        if not nm.finite(vals):
            return None
        vals = np.asarray(vals, dtype=float)
    return combine(text, t, iv, *parts, prec=prec, vals=vals, **facts)


def mig(e: Expr) -> float:
    """Lower bound on |e| for a scalar (the interval's, or a recorded one such as that of
    ``wp.where(x >= 0.0, x + c, x - c)``, whose interval alone would contain 0)."""
    return max(e.iv.mig, e.min_norm if e.type.is_scalar else 0.0)


def same(a: Expr, b: Expr) -> bool:
    """Two expressions that certainly have the same value (``x - x`` would be 0)."""
    if _norm_text(a.text) == _norm_text(b.text):
        return True
    if a.vals is not None and b.vals is not None and a.vals.shape == b.vals.shape and a.vals.shape[0] > 1:
        return bool(np.array_equal(a.vals, b.vals))
    return False


def _norm_text(text: str) -> str:
    return text.replace("wp.float32(", "float(").replace("wp.int32(", "int(")


def _int_iv(iv: Interval) -> Interval:
    return Interval(math.floor(iv.lo), math.ceil(iv.hi))


def _extra_dims(t: WType) -> int:
    return len(t.shape)


# ----------------------------------------------------------------------------------------
# Arithmetic operators
# ----------------------------------------------------------------------------------------


def _is_numeric(t: WType) -> bool:
    return not t.is_bool


def add(a: Expr, b: Expr) -> Expr | None:
    if a.type != b.type or not _is_numeric(a.type):
        return None
    vals = a.vals + b.vals
    return _result(
        binop_text("+", a, b), a.type, a.iv + b.iv, a, b, vals=vals, prec=BINOP_PREC["+"], collapsed=_cancel(vals, a, b)
    )


def sub(a: Expr, b: Expr) -> Expr | None:
    if a.type != b.type or not _is_numeric(a.type) or same(a, b):
        return None
    iv = a.iv - b.iv
    if a.type.is_unsigned and iv.lo < 0:
        return None
    vals = a.vals - b.vals
    return _result(
        binop_text("-", a, b), a.type, iv, a, b, vals=vals, prec=BINOP_PREC["-"], collapsed=_cancel(vals, a, b)
    )


CANCEL_RATIO = 0.1


def _spread(vals: np.ndarray) -> float:
    flat = vals.reshape(vals.shape[0], -1)
    return float(np.max(np.max(flat, axis=0) - np.min(flat, axis=0)))


def _cancel(vals, a: Expr, b: Expr) -> bool:
    """A sum or difference of two values that depend on the inputs and that spreads far less
    than either: they (mostly) cancel (``k - (k - p // n)``), and what they read is lost."""
    if a.vals is None or b.vals is None or vals is None or not (a.live and b.live):
        return False
    return _spread(np.asarray(vals)) < CANCEL_RATIO * min(_spread(a.vals), _spread(b.vals))


def neg(a: Expr) -> Expr | None:
    if not _is_numeric(a.type) or a.type.is_unsigned:
        return None
    return _result(
        f"-{a.wrap(PREC_UNARY)}", a.type, -a.iv, a, vals=-a.vals, prec=PREC_UNARY, unit=a.unit, min_norm=a.min_norm
    )


def mul(a: Expr, b: Expr) -> Expr | None:
    """scalar*scalar, scalar*vector/matrix/quat (either order), matching component types."""
    ta, tb = a.type, b.type
    if ta.is_bool or tb.is_bool or ta.scalar != tb.scalar:
        return None
    if not ta.is_scalar and not tb.is_scalar:
        return None  # component-wise needs wp.cw_mul; matrix products use @
    iv = a.iv * b.iv
    t = tb if ta.is_scalar else ta
    s, v = (a, b) if ta.is_scalar else (b, a)
    vals = nm.expand(s.vals, _extra_dims(t)) * v.vals
    min_norm = v.min_norm * s.iv.mig if t.is_vector else 0.0
    det_lo = v.det_lo * s.iv.mig ** t.shape[0] if t.is_matrix else 0.0
    return _result(
        binop_text("*", a, b), t, iv, a, b, vals=vals, prec=BINOP_PREC["*"], min_norm=min_norm, det_lo=det_lo
    )


def div(a: Expr, b: Expr) -> Expr | None:
    """x / s with a float scalar denominator bounded away from zero."""
    if not b.type.is_scalar or a.type.scalar != b.type.scalar or not a.type.is_float:
        return None
    if mig(b) < DEN_MIN or same(a, b):
        return None
    m = mig(b)
    iv = a.iv / b.iv if b.iv.mig >= DEN_MIN else Interval(-a.iv.mag / m, a.iv.mag / m)
    t = a.type
    min_norm = a.min_norm / b.iv.mag if t.is_vector else 0.0
    vals = a.vals / nm.expand(b.vals, _extra_dims(t))
    return _result(binop_text("/", a, b), t, iv, a, b, vals=vals, prec=BINOP_PREC["/"], min_norm=min_norm)


def int_div(op: str, a: Expr, b: Expr, style: str = "op") -> Expr | None:
    """``//`` (floor) or ``%`` (C remainder) on integers with a positive denominator."""
    if a.type != b.type or not a.type.is_int or not a.type.is_scalar or b.iv.lo < 1:
        return None
    if op == "//":
        iv = _int_iv(Interval(min(a.iv.lo, a.iv.lo / b.iv.lo), max(a.iv.hi, a.iv.hi / b.iv.lo)))
        vals = nm.floor_div(a.vals, b.vals)
    else:
        m = b.iv.hi - 1
        iv = Interval(-m if a.iv.lo < 0 else 0, m if a.iv.hi > 0 else 0)
        vals = nm.c_mod(a.vals, b.vals)
    if style == "call":
        fn = "wp.floordiv" if op == "//" else "wp.mod"
        return _result(call_text(fn, a, b), a.type, iv, a, b, vals=vals)
    return _result(binop_text(op, a, b), a.type, iv, a, b, vals=vals, prec=BINOP_PREC[op])


def float_mod(a: Expr, b: Expr) -> Expr | None:
    """``x % c`` on floats (fmod) with a positive constant period."""
    if a.type != b.type or not a.type.is_float or not a.type.is_scalar or not b.literal or b.iv.lo < 0.25:
        return None
    m = b.iv.hi
    iv = Interval(-m if a.iv.lo < 0 else 0.0, m if a.iv.hi > 0 else 0.0)
    return _result(binop_text("%", a, b), a.type, iv, a, b, vals=nm.c_mod(a.vals, b.vals), prec=BINOP_PREC["%"])


def power(a: Expr, b: Expr, style: str = "op") -> Expr | None:
    """a ** b (or wp.pow) with a positive base and a moderate exponent."""
    if a.type != b.type or not a.type.is_float or not a.type.is_scalar:
        return None
    if a.iv.lo < POW_BASE_MIN or b.iv.mag > 4.0:
        return None
    corners = [x**y for x in (a.iv.lo, a.iv.hi) for y in (b.iv.lo, b.iv.hi)]
    if a.iv.lo < 1.0 < a.iv.hi:
        corners.append(1.0)
    iv = Interval(min(corners), max(corners))
    vals = np.power(a.vals, b.vals)
    if style == "op":
        return _result(binop_text("**", a, b), a.type, iv, a, b, vals=vals, prec=BINOP_PREC["**"])
    return _result(call_text("wp.pow", a, b), a.type, iv, a, b, vals=vals)


def matmul(a: Expr, b: Expr, style: str = "op") -> Expr | None:
    """mat @ vec, vec @ mat, mat @ mat."""
    ta, tb = a.type, b.type
    if ta.scalar != tb.scalar or not ta.is_float:
        return None
    if ta.is_matrix and tb.is_vector and ta.shape[1] == tb.length:
        t = WType(ta.scalar, (ta.shape[0],))
        k = ta.shape[1]
    elif ta.is_vector and tb.is_matrix and tb.shape[0] == ta.length:
        t = WType(ta.scalar, (tb.shape[1],))
        k = ta.length
    elif ta.is_matrix and tb.is_matrix and ta.shape[1] == tb.shape[0]:
        t = WType(ta.scalar, (ta.shape[0], tb.shape[1]))
        k = ta.shape[1]
    else:
        return None
    iv = (a.iv * b.iv).scale(k)
    unit = a.unit and b.unit
    facts = {}
    if t.is_matrix:
        facts["det_lo"] = 1.0 if unit else a.det_lo * b.det_lo
    elif ta.is_matrix and a.unit:
        facts["min_norm"] = b.min_norm
    vals = nm.matmul(a.vals, b.vals, ta.is_vector, tb.is_vector)
    text = binop_text("@", a, b) if style == "op" else call_text("wp.mul", a, b)
    prec = BINOP_PREC["@"] if style == "op" else PREC_ATOM
    return _result(text, t, iv, a, b, vals=vals, prec=prec, unit=unit, **facts)


# ----------------------------------------------------------------------------------------
# Integer bit operations
# ----------------------------------------------------------------------------------------


def _bits_bound(iv: Interval) -> int:
    """Smallest 2**k - 1 covering the non-negative interval."""
    return (1 << max(1, int(iv.hi).bit_length())) - 1


def bitop(op: str, a: Expr, b: Expr, style: str = "op") -> Expr | None:
    """``&``, ``|``, ``^`` on non-negative integers of one type."""
    if a.type != b.type or not a.type.is_int or not a.type.is_scalar or same(a, b):
        return None
    if a.iv.lo < 0 or b.iv.lo < 0:
        return None
    if op == "&":
        iv = Interval(0, min(a.iv.hi, b.iv.hi))
    else:
        iv = Interval(0, max(_bits_bound(a.iv), _bits_bound(b.iv)))
    vals = nm.bitop(op, a.vals, b.vals)
    if style == "op":
        return _result(binop_text(op, a, b), a.type, iv, a, b, vals=vals, prec=BINOP_PREC[op])
    fn = {"&": "wp.bit_and", "|": "wp.bit_or", "^": "wp.bit_xor"}[op]
    return _result(call_text(fn, a, b), a.type, iv, a, b, vals=vals)


def shift(op: str, a: Expr, b: Expr, style: str = "op") -> Expr | None:
    """``<<``/``>>`` of a non-negative integer by a small non-negative amount."""
    if a.type != b.type or not a.type.is_int or not a.type.is_scalar:
        return None
    if a.iv.lo < 0 or b.iv.lo < 0 or b.iv.hi > 8:
        return None
    if op == "<<":
        iv = Interval(a.iv.lo * 2 ** int(b.iv.lo), a.iv.hi * 2 ** int(b.iv.hi))
    else:
        iv = Interval(math.floor(a.iv.lo / 2 ** int(b.iv.hi)), a.iv.hi)
    vals = nm.shift(op, a.vals, b.vals)
    if style == "op":
        return _result(binop_text(op, a, b), a.type, iv, a, b, vals=vals, prec=BINOP_PREC[op])
    fn = "wp.lshift" if op == "<<" else "wp.rshift"
    return _result(call_text(fn, a, b), a.type, iv, a, b, vals=vals)


def invert(a: Expr, style: str = "op") -> Expr | None:
    """Bitwise not of a signed integer: ~x == -x - 1."""
    if not a.type.is_int or not a.type.is_scalar or a.type.is_unsigned:
        return None
    iv = Interval(-a.iv.hi - 1, -a.iv.lo - 1)
    text = f"~{a.wrap(PREC_UNARY)}" if style == "op" else call_text("wp.invert", a)
    return _result(text, a.type, iv, a, vals=-a.vals - 1.0, prec=PREC_UNARY if style == "op" else PREC_ATOM)


def bit_count(a: Expr) -> Expr | None:
    if not a.type.is_int or not a.type.is_scalar or a.iv.lo < 0:
        return None
    bits = max(1, int(a.iv.hi).bit_length())
    t = WType("int32") if a.type.scalar != "int64" else a.type
    return _result(call_text("wp.bit_count", a), t, Interval(0, bits), a, vals=nm.bit_count(a.vals))


# ----------------------------------------------------------------------------------------
# Comparisons and selection
# ----------------------------------------------------------------------------------------

_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}


def comparison(op: str, a: Expr, b: Expr) -> Expr | None:
    if a.type != b.type or not a.type.is_scalar or a.type.is_bool or same(a, b):
        return None
    if op in ("==", "!=") and not a.type.is_int:
        return None  # float equality is almost never what people mean
    vals = _CMP[op](a.vals, b.vals).astype(float)
    return _result(binop_text(op, a, b), BOOL, Interval(0, 1), a, b, vals=vals, prec=BINOP_PREC[op])


def logic(op: str, a: Expr, b: Expr) -> Expr | None:
    if not (a.type.is_bool and b.type.is_bool) or same(a, b):
        return None
    x, y = a.vals.astype(bool), b.vals.astype(bool)
    vals = (x & y) if op == "and" else (x | y)
    return _result(binop_text(op, a, b), BOOL, Interval(0, 1), a, b, vals=vals.astype(float), prec=BINOP_PREC[op])


def logic_not(a: Expr) -> Expr | None:
    if not a.type.is_bool:
        return None
    return _result(f"not {a.wrap(PREC_NOT)}", BOOL, Interval(0, 1), a, vals=1.0 - a.vals, prec=PREC_NOT)


def where(c: Expr, a: Expr, b: Expr, style: str = "where") -> Expr | None:
    """wp.where(c, a, b) or the conditional expression ``a if c else b``."""
    if not c.type.is_bool or a.type != b.type or same(a, b):
        return None
    iv = a.iv.union(b.iv)
    facts = {"unit": a.unit and b.unit, "min_norm": min(a.min_norm, b.min_norm), "det_lo": min(a.det_lo, b.det_lo)}
    vals = nm.select(c.vals, a.vals, b.vals)
    if c.vals is not None and not c.live:  # one side is never taken: what it reads reaches nothing
        facts["collapsed"] = (b if bool(np.all(c.vals)) else a).live
    if style == "where":
        return _result(call_text("wp.where", c, a, b), a.type, iv, c, a, b, vals=vals, **facts)
    text = f"{a.wrap(PREC_TERNARY + 1)} if {c.wrap(PREC_TERNARY + 1)} else {b.wrap(PREC_TERNARY)}"
    return _result(text, a.type, iv, c, a, b, vals=vals, prec=PREC_TERNARY, **facts)


# ----------------------------------------------------------------------------------------
# Casts
# ----------------------------------------------------------------------------------------


def cast(a: Expr, to: WType, style: str = "ctor") -> Expr | None:
    """Scalar conversion.  ``style`` "short" writes ``float(x)``/``int(x)``."""
    src = a.type
    if not (src.is_scalar and to.is_scalar) or src == to or to.is_bool or src.is_bool:
        return None
    if a.op == "loopvar" or a.literal:
        # Warp treats constants (literals, the variable of an unrolled loop) specially and
        # re-types a constant in place when it is cast, which breaks its other uses
        # (ambiguous C++ overloads); typed constants are written with const() instead
        return None
    iv = a.iv
    if to.is_int:
        if src.is_float:
            iv = Interval(math.trunc(iv.lo), math.trunc(iv.hi))
        if to.is_unsigned and iv.lo < 0:
            return None
    if style == "short" and to.scalar == "float32":
        text = call_text("float", a)
    elif style == "short" and to.scalar == "int32":
        text = call_text("int", a)
    else:
        text = call_text(to.ctor, a)
    return _result(text, to, iv, a, vals=nm.cast(a.vals, src.is_float, to.scalar))


def vec_cast(a: Expr, to_scalar: str) -> Expr | None:
    """vec3 <-> vec3d / mat33 <-> mat33d conversions via the target constructor."""
    if a.type.is_scalar or a.type.scalar == to_scalar or a.type.quat or not a.type.is_float:
        return None
    to = a.type.with_scalar(to_scalar)
    if not to.storable:
        return None
    return _result(
        call_text(to.ctor, a),
        to,
        a.iv,
        a,
        vals=nm.cast(a.vals, True, to_scalar),
        unit=a.unit,
        min_norm=a.min_norm,
        det_lo=a.det_lo,
    )


# ----------------------------------------------------------------------------------------
# Scalar math builtins
# ----------------------------------------------------------------------------------------

# name -> (domain check, image).  Domains keep values and gradients finite:
# sqrt/log see positive arguments, inverse trig stays inside (-1, 1), exp never overflows.
_UNARY = {
    "sin": (lambda iv: True, lambda iv: periodic_bound(iv, math.sin, 2 * math.pi, -1.0, 1.0)),
    "cos": (lambda iv: True, lambda iv: periodic_bound(iv, math.cos, 2 * math.pi, -1.0, 1.0)),
    "tan": (lambda iv: iv.mag <= 1.3, lambda iv: monotone(math.tan, iv)),
    "asin": (lambda iv: iv.mag <= 0.95, lambda iv: monotone(math.asin, iv)),
    "acos": (lambda iv: iv.mag <= 0.95, lambda iv: monotone(math.acos, iv, increasing=False)),
    "atan": (lambda iv: True, lambda iv: monotone(math.atan, iv)),
    "sinh": (lambda iv: iv.mag <= 5.0, lambda iv: monotone(math.sinh, iv)),
    "cosh": (lambda iv: iv.mag <= 5.0, lambda iv: Interval(math.cosh(iv.mig), math.cosh(iv.mag))),
    "tanh": (lambda iv: True, lambda iv: monotone(math.tanh, iv)),
    "exp": (lambda iv: -40.0 <= iv.lo and iv.hi <= 6.0, lambda iv: monotone(math.exp, iv)),
    "log": (lambda iv: iv.lo >= LOG_MIN, lambda iv: monotone(math.log, iv)),
    "log2": (lambda iv: iv.lo >= LOG_MIN, lambda iv: monotone(math.log2, iv)),
    "log10": (lambda iv: iv.lo >= LOG_MIN, lambda iv: monotone(math.log10, iv)),
    "sqrt": (lambda iv: iv.lo >= SQRT_MIN, lambda iv: monotone(math.sqrt, iv)),
    "cbrt": (lambda iv: iv.mig >= SQRT_MIN, lambda iv: monotone(lambda x: math.copysign(abs(x) ** (1 / 3), x), iv)),
    "abs": (lambda iv: True, lambda iv: iv.abs()),
    "sign": (lambda iv: True, lambda iv: Interval(-1.0 if iv.lo < 0 else 1.0, 1.0 if iv.hi >= 0 else -1.0)),
    "floor": (lambda iv: True, lambda iv: Interval(math.floor(iv.lo), math.floor(iv.hi))),
    "ceil": (lambda iv: True, lambda iv: Interval(math.ceil(iv.lo), math.ceil(iv.hi))),
    "round": (lambda iv: True, lambda iv: Interval(math.floor(iv.lo), math.ceil(iv.hi))),
    "rint": (lambda iv: True, lambda iv: Interval(math.floor(iv.lo), math.ceil(iv.hi))),
    "trunc": (lambda iv: True, lambda iv: Interval(math.trunc(iv.lo), math.trunc(iv.hi))),
    "frac": (lambda iv: True, lambda iv: Interval(-1.0 if iv.lo < 0 else 0.0, 1.0 if iv.hi > 0 else 0.0)),
    "degrees": (lambda iv: True, lambda iv: iv.scale(180.0 / math.pi)),
    "radians": (lambda iv: True, lambda iv: iv.scale(math.pi / 180.0)),
    "erf": (lambda iv: True, lambda iv: monotone(math.erf, iv)),
    "erfc": (lambda iv: True, lambda iv: monotone(math.erfc, iv, increasing=False)),
    "erfinv": (lambda iv: iv.mag <= 0.9, lambda iv: Interval(-1.17, 1.17)),
    "erfcinv": (lambda iv: 0.1 <= iv.lo and iv.hi <= 1.9, lambda iv: Interval(-1.17, 1.17)),
    "step": (lambda iv: True, lambda iv: Interval(0.0, 1.0)),
    "nonzero": (lambda iv: True, lambda iv: Interval(0.0, 1.0)),
}

# Functions whose output is piecewise constant.
QUANTIZERS = ("sign", "floor", "ceil", "round", "rint", "trunc", "step", "nonzero")
INT_UNARY = ("abs", "sign")


def unary(fn: str, a: Expr) -> Expr | None:
    t = a.type
    if not t.is_scalar or t.is_bool:
        return None
    if t.is_int:
        if fn not in INT_UNARY or (fn == "abs" and t.is_unsigned):
            return None
    elif t.scalar == "float16":
        return None
    check, image = _UNARY[fn]
    if not check(a.iv):
        return None
    try:
        iv = image(a.iv)
    except (ValueError, OverflowError):
        return None
    with np.errstate(all="ignore"):
        vals = nm.UNARY[fn](a.vals)
    return _result(call_text(f"wp.{fn}", a), t, iv, a, vals=vals)


def binary_fn(fn: str, a: Expr, b: Expr) -> Expr | None:
    """wp.min / wp.max / wp.atan2 / wp.copysign on scalars; min/max also on vectors."""
    if a.type != b.type or a.type.is_bool or same(a, b):
        return None
    t = a.type
    if fn in ("min", "max"):
        if t.is_matrix or t.quat:
            return None
        iv = a.iv.min_with(b.iv) if fn == "min" else a.iv.max_with(b.iv)
        vals = np.minimum(a.vals, b.vals) if fn == "min" else np.maximum(a.vals, b.vals)
        return _result(call_text(f"wp.{fn}", a, b), t, iv, a, b, vals=vals, collapsed=_one_side_wins(vals, a, b))
    if not t.is_scalar or not t.is_float:
        return None
    if fn == "atan2":
        if mig(a) < DEN_MIN and mig(b) < DEN_MIN:
            return None  # atan2(0, 0) has no gradient
        iv = Interval(-math.pi / 2, math.pi / 2) if b.iv.lo > 0 else Interval(-math.pi, math.pi)
        return _result(call_text("wp.atan2", a, b), t, iv, a, b, vals=np.arctan2(a.vals, b.vals))
    if fn == "copysign":
        return _result(
            call_text("wp.copysign", a, b), t, Interval(-a.iv.mag, a.iv.mag), a, b, vals=np.copysign(a.vals, b.vals)
        )
    return None


def _one_side_wins(vals: np.ndarray, a: Expr, b: Expr) -> bool:
    """``wp.min``/``wp.max`` whose result is one operand on every sample while the other,
    which depends on the inputs, never decides it."""
    if a.vals is None or b.vals is None:
        return False
    for keep, lose in ((a, b), (b, a)):
        if lose.live and np.array_equal(np.broadcast_to(keep.vals, vals.shape), vals):
            return not np.array_equal(np.broadcast_to(lose.vals, vals.shape), vals)
    return False


def clamp(x: Expr, lo: Expr, hi: Expr) -> Expr | None:
    if not (x.type == lo.type == hi.type) or not x.type.is_scalar or x.type.is_bool:
        return None
    if lo.iv.hi >= hi.iv.lo:
        return None
    iv = Interval(max(x.iv.lo, lo.iv.lo), min(x.iv.hi, hi.iv.hi))
    if iv.lo > iv.hi:
        return None
    vals = np.minimum(np.maximum(x.vals, lo.vals), hi.vals)
    return _result(call_text("wp.clamp", x, lo, hi), x.type, iv, x, lo, hi, vals=vals)


def lerp(a: Expr, b: Expr, t: Expr) -> Expr | None:
    if a.type != b.type or not a.type.is_float or a.type.is_matrix or a.type.quat or same(a, b):
        return None
    if t.type != a.type.component() or not t.iv.within(0.0, 1.0):
        return None
    w = nm.expand(t.vals, _extra_dims(a.type))
    vals = a.vals * (1.0 - w) + b.vals * w
    return _result(call_text("wp.lerp", a, b, t), a.type, a.iv.union(b.iv), a, b, t, vals=vals)


def smoothstep(e0: Expr, e1: Expr, x: Expr) -> Expr | None:
    if not (e0.type == e1.type == x.type) or not x.type.is_float or not x.type.is_scalar:
        return None
    if not (e0.literal and e1.literal) or e1.iv.lo - e0.iv.hi < 0.1:
        return None
    s = np.clip((x.vals - e0.vals) / (e1.vals - e0.vals), 0.0, 1.0)
    vals = s * s * (3.0 - 2.0 * s)
    return _result(call_text("wp.smoothstep", e0, e1, x), x.type, Interval(0.0, 1.0), e0, e1, x, vals=vals)


# ----------------------------------------------------------------------------------------
# Vectors
# ----------------------------------------------------------------------------------------


def _stack(parts: list[Expr]) -> np.ndarray:
    arrs = np.broadcast_arrays(*[p.vals for p in parts])
    return np.stack(arrs, axis=-1)


def vec_ctor(t: WType, comps: list[Expr]) -> Expr | None:
    if not (t.is_vector or t.quat) or len(comps) != t.length:
        return None
    if any(c.type != t.component() for c in comps):
        return None
    iv = comps[0].iv
    for c in comps[1:]:
        iv = iv.union(c.iv)
    mig_ = min(c.iv.mig for c in comps)
    return _result(call_text(t.ctor, *comps), t, iv, *comps, vals=_stack(comps), min_norm=mig_ * math.sqrt(t.length))


def vec_splat(t: WType, s: Expr) -> Expr | None:
    if not t.is_vector or s.type != t.component():
        return None
    vals = np.repeat(s.vals[..., None], t.length, axis=-1)
    return _result(call_text(t.ctor, s), t, s.iv, s, vals=vals, min_norm=s.iv.mig * math.sqrt(t.length))


def component(v: Expr, k: int, style: str = "index") -> Expr | None:
    t = v.type
    if t.is_scalar or t.is_matrix or k >= t.length:
        return None
    if style == "attr" and k < 4:
        text = f"{v.wrap(PREC_ATOM)}.{'xyzw'[k]}"
    else:
        text = f"{v.wrap(PREC_ATOM)}[{k}]"
    return _result(text, t.component(), v.iv, v, vals=v.vals[..., k])


def matrix_entry(m: Expr, r: int, c: int, style: str = "pair") -> Expr | None:
    if not m.type.is_matrix or r >= m.type.shape[0] or c >= m.type.shape[1]:
        return None
    text = f"{m.wrap(PREC_ATOM)}[{r}, {c}]" if style == "pair" else f"{m.wrap(PREC_ATOM)}[{r}][{c}]"
    return _result(text, m.type.component(), m.iv, m, vals=m.vals[..., r, c])


def matrix_row(m: Expr, r: int) -> Expr | None:
    if not m.type.is_matrix or r >= m.type.shape[0]:
        return None
    t = WType(m.type.scalar, (m.type.shape[1],))
    return _result(
        f"{m.wrap(PREC_ATOM)}[{r}]", t, m.iv, m, vals=m.vals[..., r, :], min_norm=1.0 if m.unit else 0.0, unit=m.unit
    )


def dot(a: Expr, b: Expr) -> Expr | None:
    if a.type != b.type or not (a.type.is_vector or a.type.quat) or not a.type.is_float:
        return None
    iv = (a.iv * b.iv).scale(a.type.length)
    if same(a, b):
        iv = Interval(0.0, iv.hi)
    if a.unit and b.unit:
        iv = Interval(max(iv.lo, -1.0), min(iv.hi, 1.0))
    return _result(call_text("wp.dot", a, b), a.type.component(), iv, a, b, vals=nm.dot(a.vals, b.vals))


def cross(a: Expr, b: Expr) -> Expr | None:
    if a.type != b.type or a.type.shape != (3,) or not a.type.is_vector or not a.type.is_float or same(a, b):
        return None
    m = (a.iv.mag * b.iv.mag) * 2.0
    return _result(call_text("wp.cross", a, b), a.type, Interval(-m, m), a, b, vals=nm.cross(a.vals, b.vals))


def cw(fn: str, a: Expr, b: Expr) -> Expr | None:
    """wp.cw_mul / wp.cw_div: component-wise product/quotient of two vectors."""
    if a.type != b.type or not a.type.is_vector or not a.type.is_float or same(a, b):
        return None
    if fn == "cw_mul":
        return _result(call_text("wp.cw_mul", a, b), a.type, a.iv * b.iv, a, b, vals=a.vals * b.vals)
    if b.iv.mig < DEN_MIN:
        return None
    return _result(call_text("wp.cw_div", a, b), a.type, a.iv / b.iv, a, b, vals=a.vals / b.vals)


# Warp defines these in Python with float32 accumulators: float32 vectors only.
_F32_ONLY_NORMS = ("norm_l1", "norm_l2", "norm_huber", "norm_pseudo_huber")


def vec_norm(fn: str, v: Expr) -> Expr | None:
    """length, length_sq, norm_l1, norm_l2, norm_huber, norm_pseudo_huber -> scalar."""
    t = v.type
    if not (t.is_vector or (t.quat and fn in ("length", "length_sq"))) or not t.is_float:
        return None
    if fn in _F32_ONLY_NORMS and t.scalar != "float32":
        return None
    n = t.length
    m = v.iv.mag
    lo = v.min_norm
    if fn in ("length", "norm_l2"):
        iv = Interval(lo, m * math.sqrt(n))
    elif fn == "length_sq":
        iv = Interval(lo * lo, m * m * n)
    elif fn == "norm_l1":
        iv = Interval(lo, m * n)
    elif fn == "norm_pseudo_huber":
        iv = Interval(1.0, math.sqrt(1.0 + m * m * n))
    else:
        iv = Interval(0.0, m * m * n)
    return _result(call_text(f"wp.{fn}", v), t.component(), iv, v, vals=nm.norm(fn, v.vals))


def vec_reduce(fn: str, v: Expr) -> Expr | None:
    """wp.min(v)/wp.max(v) (smallest/largest component) and wp.argmin/argmax (index)."""
    t = v.type
    if not t.is_vector:
        return None
    if fn in ("min", "max"):
        vals = np.min(v.vals, axis=-1) if fn == "min" else np.max(v.vals, axis=-1)
        return _result(call_text(f"wp.{fn}", v), t.component(), v.iv, v, vals=vals, collapsed=_never_wins(fn, v))
    if fn in ("argmin", "argmax"):
        vals = (np.argmin(v.vals, axis=-1) if fn == "argmin" else np.argmax(v.vals, axis=-1)).astype(float)
        return _result(call_text(f"wp.{fn}", v), WType("uint32"), Interval(0, t.length - 1), v, vals=vals)
    return None


def _never_wins(fn: str, v: Expr) -> bool:
    """``wp.min(v)`` / ``wp.max(v)`` with a component that depends on the inputs but is never
    the smallest (largest): what it reads reaches nothing."""
    if v.vals is None or v.vals.shape[0] <= 1:
        return False
    comps = v.vals.reshape(v.vals.shape[0], -1)
    winners = set(np.argmin(comps, axis=1) if fn == "min" else np.argmax(comps, axis=1))
    return any(k not in winners and nm.is_live(comps[:, k]) for k in range(comps.shape[1]))


def normalize(v: Expr, smooth: bool = False) -> Expr | None:
    t = v.type
    if not (t.is_vector or t.quat) or not t.is_float:
        return None
    if smooth:
        if t.quat or t.scalar != "float32":
            return None
        return _result(call_text("wp.smooth_normalize", v), t, Interval(-1.0, 1.0), v, vals=nm.smooth_normalize(v.vals))
    if v.min_norm < 0.1:
        return None
    return _result(
        call_text("wp.normalize", v), t, Interval(-1.0, 1.0), v, vals=nm.normalize(v.vals), unit=True, min_norm=1.0
    )


def vec_abs(v: Expr) -> Expr | None:
    """Component-wise wp.abs on vectors."""
    if not v.type.is_vector or v.type.is_unsigned:
        return None
    return _result(call_text("wp.abs", v), v.type, v.iv.abs(), v, vals=np.abs(v.vals), min_norm=v.min_norm)


# ----------------------------------------------------------------------------------------
# Matrices
# ----------------------------------------------------------------------------------------


def hadamard_bound(n: int, mag: float) -> float:
    """Upper bound on |det| of an n x n matrix with entries bounded by ``mag``."""
    return (math.sqrt(n) * mag) ** n


def mat_ctor(t: WType, comps: list[Expr]) -> Expr | None:
    if not t.is_matrix or len(comps) != t.ncomp or any(c.type != t.component() for c in comps):
        return None
    iv = comps[0].iv
    for c in comps[1:]:
        iv = iv.union(c.iv)
    vals = _stack(comps).reshape((-1,) + t.shape)
    return _result(call_text(t.ctor, *comps), t, iv, *comps, vals=vals)


def mat_from_vectors(how: str, t: WType, vs: list[Expr]) -> Expr | None:
    """wp.matrix_from_rows / wp.matrix_from_cols."""
    if not t.is_matrix or len(vs) != (t.shape[0] if how == "rows" else t.shape[1]):
        return None
    want = WType(t.scalar, (t.shape[1] if how == "rows" else t.shape[0],))
    if any(v.type != want for v in vs):
        return None
    iv = vs[0].iv
    for v in vs[1:]:
        iv = iv.union(v.iv)
    arrs = np.broadcast_arrays(*[v.vals for v in vs])
    vals = np.stack(arrs, axis=-2 if how == "rows" else -1)
    return _result(call_text(f"wp.matrix_from_{how}", *vs), t, iv, *vs, vals=vals)


def identity(n: int, scalar: str) -> Expr:
    dtype = "float" if scalar == "float32" else f"wp.{scalar}"
    return Expr(
        f"wp.identity(n={n}, dtype={dtype})",
        WType(scalar, (n, n)),
        Interval(0.0, 1.0),
        literal=True,
        unit=True,
        det_lo=1.0,
        vals=np.eye(n)[None],
    )


def diag(v: Expr) -> Expr | None:
    if not v.type.is_vector or not v.type.is_float:
        return None
    n = v.type.length
    t = WType(v.type.scalar, (n, n))
    return _result(
        call_text("wp.diag", v), t, v.iv.union(Interval.point(0.0)), v, vals=nm.diag(v.vals), det_lo=v.iv.mig**n
    )


def outer(a: Expr, b: Expr) -> Expr | None:
    if not (a.type.is_vector and b.type.is_vector) or a.type.scalar != b.type.scalar or not a.type.is_float:
        return None
    t = WType(a.type.scalar, (a.type.length, b.type.length))
    x, y = nm.broadcast_pair(a.vals, b.vals)
    return _result(call_text("wp.outer", a, b), t, a.iv * b.iv, a, b, vals=x[:, :, None] * y[:, None, :])


def skew(v: Expr) -> Expr | None:
    if v.type.shape != (3,) or not v.type.is_vector or not v.type.is_float:
        return None
    t = WType(v.type.scalar, (3, 3))
    return _result(call_text("wp.skew", v), t, Interval(-v.iv.mag, v.iv.mag), v, vals=nm.skew(v.vals))


def transpose(m: Expr) -> Expr | None:
    if not m.type.is_matrix:
        return None
    t = WType(m.type.scalar, (m.type.shape[1], m.type.shape[0]))
    return _result(
        call_text("wp.transpose", m), t, m.iv, m, vals=np.swapaxes(m.vals, -1, -2), unit=m.unit, det_lo=m.det_lo
    )


def determinant(m: Expr) -> Expr | None:
    t = m.type
    if not t.is_matrix or t.shape[0] != t.shape[1] or not t.is_float:
        return None
    h = hadamard_bound(t.shape[0], m.iv.mag)
    return _result(call_text("wp.determinant", m), t.component(), Interval(-h, h), m, vals=nm.determinant(m.vals))


def inverse(m: Expr) -> Expr | None:
    """wp.inverse only of matrices whose |det| is bounded away from zero."""
    t = m.type
    if not t.is_matrix or t.shape[0] != t.shape[1] or not t.is_float:
        return None
    n = t.shape[0]
    if m.det_lo < 0.2:
        return None
    bound = 1.0 if m.unit else hadamard_bound(n - 1, m.iv.mag) / m.det_lo
    return _result(
        call_text("wp.inverse", m),
        t,
        Interval(-bound, bound),
        m,
        vals=nm.inverse(m.vals),
        unit=m.unit,
        det_lo=1.0 / hadamard_bound(n, m.iv.mag),
    )


def trace(m: Expr) -> Expr | None:
    t = m.type
    if not t.is_matrix or t.shape[0] != t.shape[1] or not t.is_float:
        return None
    return _result(
        call_text("wp.trace", m), t.component(), m.iv.scale(t.shape[0]), m, vals=np.trace(m.vals, axis1=-2, axis2=-1)
    )


def ddot(a: Expr, b: Expr) -> Expr | None:
    if a.type != b.type or not a.type.is_matrix or not a.type.is_float:
        return None
    iv = (a.iv * b.iv).scale(a.type.ncomp)
    return _result(
        call_text("wp.ddot", a, b), a.type.component(), iv, a, b, vals=np.sum(a.vals * b.vals, axis=(-2, -1))
    )


def get_diag(m: Expr) -> Expr | None:
    t = m.type
    if not t.is_matrix or t.shape[0] != t.shape[1]:
        return None
    return _result(
        call_text("wp.get_diag", m),
        WType(t.scalar, (t.shape[0],)),
        m.iv,
        m,
        vals=np.diagonal(m.vals, axis1=-2, axis2=-1),
    )


def add_diagonal(m: Expr, c: Expr, style: str) -> Expr | None:
    """m + c * I: diagonally dominant (hence invertible) when c is large enough."""
    t = m.type
    if not t.is_matrix or t.shape[0] != t.shape[1] or c.type != t.component():
        return None
    n = t.shape[0]
    if style == "diag":
        vt = WType(t.scalar, (n,))
        term = diag(vec_splat(vt, c))
    else:
        eye = identity(n, t.scalar)
        term = mul(eye, c) if style == "eye_right" else mul(c, eye)
    s = add(m, term)
    if s is None:
        return None
    margin = c.iv.lo - n * m.iv.mag
    return s.with_(det_lo=margin**n if margin > 0 else 0.0)


# ----------------------------------------------------------------------------------------
# Quaternions and transforms
# ----------------------------------------------------------------------------------------


def quat_from_axis_angle(axis: Expr, angle: Expr) -> Expr | None:
    if axis.type.shape != (3,) or not axis.type.is_vector or angle.type != axis.type.component() or not axis.unit:
        return None
    t = WType(axis.type.scalar, (4,), quat=True)
    return _result(
        call_text("wp.quat_from_axis_angle", axis, angle),
        t,
        Interval(-1.0, 1.0),
        axis,
        angle,
        vals=nm.quat_from_axis_angle(axis.vals, angle.vals),
        unit=True,
        min_norm=1.0,
    )


def quat_rpy(r: Expr, p: Expr, y: Expr) -> Expr | None:
    if not (r.type == p.type == y.type) or not r.type.is_scalar or not r.type.is_float:
        return None
    t = WType(r.type.scalar, (4,), quat=True)
    return _result(
        call_text("wp.quat_rpy", r, p, y),
        t,
        Interval(-1.0, 1.0),
        r,
        p,
        y,
        vals=nm.quat_rpy(r.vals, p.vals, y.vals),
        unit=True,
        min_norm=1.0,
    )


def quat_rotate(q: Expr, v: Expr, inverse_: bool = False) -> Expr | None:
    if not q.type.quat or v.type != WType(q.type.scalar, (3,)) or not q.unit:
        return None
    fn = "wp.quat_rotate_inv" if inverse_ else "wp.quat_rotate"
    m = v.iv.mag * math.sqrt(3.0)
    return _result(
        call_text(fn, q, v),
        v.type,
        Interval(-m, m),
        q,
        v,
        vals=nm.quat_rotate(q.vals, v.vals, inverse_),
        unit=v.unit,
        min_norm=v.min_norm,
    )


def quat_mul(a: Expr, b: Expr) -> Expr | None:
    if not (a.type.quat and b.type == a.type) or not (a.unit and b.unit) or same(a, b):
        return None
    return _result(
        binop_text("*", a, b),
        a.type,
        Interval(-1.0, 1.0),
        a,
        b,
        vals=nm.quat_mul(a.vals, b.vals),
        prec=BINOP_PREC["*"],
        unit=True,
        min_norm=1.0,
    )


def quat_inverse(q: Expr) -> Expr | None:
    if not q.type.quat or not q.unit:
        return None
    return _result(
        call_text("wp.quat_inverse", q),
        q.type,
        Interval(-1.0, 1.0),
        q,
        vals=nm.quat_inverse(q.vals),
        unit=True,
        min_norm=1.0,
    )


def quat_to_matrix(q: Expr) -> Expr | None:
    if not q.type.quat or not q.unit:
        return None
    t = WType(q.type.scalar, (3, 3))
    return _result(
        call_text("wp.quat_to_matrix", q),
        t,
        Interval(-1.0, 1.0),
        q,
        vals=nm.quat_to_matrix(q.vals),
        unit=True,
        det_lo=1.0,
    )


def transform_apply(fn: str, p: Expr, q: Expr, v: Expr) -> Expr | None:
    """wp.transform_point / wp.transform_vector of wp.transform(p, q) applied to v."""
    if not q.type.quat or q.type.scalar != "float32" or not q.unit:
        return None
    if p.type != WType("float32", (3,)) or v.type != p.type:
        return None
    xform = f"wp.transform({p.text}, {q.text})"
    m = v.iv.mag * math.sqrt(3.0) + (p.iv.mag * math.sqrt(3.0) if fn == "transform_point" else 0.0)
    vals = nm.quat_rotate(q.vals, v.vals)
    if fn == "transform_point":
        vals = vals + p.vals
    e = _result(f"wp.{fn}({xform}, {v.text})", v.type, Interval(-m, m), p, q, v, vals=vals)
    return e.with_(size=e.size + 1) if e else None


def _none_safe(fn):
    """Builders accept ``None`` operands (a failed sub-build) and then return ``None``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for a in args:
            if a is None or (isinstance(a, list) and any(x is None for x in a)):
                return None
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return wrapper


for _name, _fn in list(globals().items()):
    if (
        inspect.isfunction(_fn)
        and _fn.__module__ == __name__
        and not _name.startswith("_")
        and _name not in ("mig", "same", "identity", "hadamard_bound")
    ):
        globals()[_name] = _none_safe(_fn)
