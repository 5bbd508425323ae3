"""Random typed expression generation.

:class:`ExprGen` grows an expression of a requested Warp type: at each node it either
takes a leaf (a local variable, an element of an input array, a scalar parameter, a
thread or loop index, a literal) or applies a *production* (see ``productions.py``) whose
operands it generates recursively.  Productions are grouped in families; a category's
profile weights the families, which is how each category stresses its own features.

Well-posedness is enforced by the typed builders in ``ops.py`` (they refuse ill-posed
operands) and repaired by the ``fit_*`` helpers here, which rewrite an operand into the
domain an operation needs using forms people write (``wp.abs(x) + 0.5``,
``wp.clamp(x, -0.9, 0.9)``, ``x * x + 1.0``, ``wp.where(x >= 0.0, x + 0.2, x - 0.2)``...).
Constants that must split or bound the data (thresholds, clamp bounds) are read off the
sample values, so branches really branch and clamps do not saturate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from . import numeric as nm
from . import ops
from .builder import KernelBuilder
from .expr import Expr, const
from .interval import Interval
from .productions import PRODUCTIONS
from .wtypes import I32, WType

Production = Callable[["ExprGen", WType, int], "Expr | None"]


def _round_up(x: float) -> float:
    """A short literal not smaller than x (x > 0)."""
    p = 10 ** math.floor(math.log10(x))
    for step in (1.0, 2.0, 5.0, 10.0):
        if p * step >= x:
            return float(p * step)
    return float(10 * p)


def _round_down(x: float) -> float:
    """A short literal not larger than x (x > 0)."""
    if x <= 0:
        return x
    p = 10 ** math.floor(math.log10(x))
    for step in (1.0, 0.5, 0.25, 0.1):
        v = math.floor(x / (p * step)) * p * step
        if v > 0:
            return float(f"{v:.3g}")
    return float(f"{x:.2g}")


class ExprGen:
    def __init__(self, kb: KernelBuilder, weights: dict[str, float], literal_weight: float = 0.6):
        self.kb = kb
        self.rng = kb.rng
        self.weights = weights
        self.literal_weight = literal_weight
        self.productions = [p for p in PRODUCTIONS if weights.get(p[0], 0.0) > 0.0]
        self.helper_hook: Callable[[WType, int], Expr | None] | None = None
        self.max_size = 10  # nodes per generated expression
        self._by_type: dict[WType, dict[str, list]] = {}  # productions applicable to a type, by family

    # ------------------------------------------------------------------ randomness
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def weighted(self, items: list, weights: list[float]):
        r = self.rng.random() * sum(weights)
        acc = 0.0
        for item, w in zip(items, weights, strict=False):
            acc += w
            if r < acc:
                return item
        return items[-1]

    # ------------------------------------------------------------------ literals
    def lit(self, t: WType, lo: float = 0.1, hi: float = 4.0, signed: bool = False) -> Expr:
        comp = t.component()
        if t.quat:
            dtype = "" if t.scalar == "float32" else f"dtype=wp.{t.scalar}"
            return Expr(
                f"wp.quat_identity({dtype})",
                t,
                Interval(-1.0, 1.0),
                literal=True,
                unit=True,
                min_norm=1.0,
                vals=np.array([[0.0, 0.0, 0.0, 1.0]]),
            )
        if comp.is_int:
            lo_i = max(int(math.ceil(lo)), 0 if comp.is_unsigned else -(10**9))
            hi_i = max(lo_i, int(math.floor(hi)))
            v = int(self.rng.integers(lo_i, hi_i + 1))
            if signed and not comp.is_unsigned and self.chance(0.3):
                v = -v
            return const(t, v)
        v = nm.nice_float(self.rng, lo, hi)
        if signed and self.chance(0.35):
            v = -v
        return const(t, v)

    # ------------------------------------------------------------------ leaves
    def leaf_candidates(self, t: WType) -> list[tuple[Expr, float]]:
        kb = self.kb
        out: list[tuple[Expr, float]] = []
        held = []
        for v in kb.readable_vars(t):
            out.append((v.expr, 5.0 if v.uses == 0 else 1.0))
            held.append(v.expr)
        if kb.launch and kb.tid:
            for a in kb.args:
                if a.kind == "array" and a.role == "in" and a.type == t and tuple(a.shape) == kb.launch:
                    e = kb.element(a)
                    # not when a local already holds exactly this element
                    if not any(h.vals is not None and ops.same(h, e) for h in held):
                        out.append((e, 0.5))
        for p in kb.scalar_params(t):
            out.append((p, 0.6))
        if t == I32:
            for e in kb.tid_exprs:
                out.append((e, 0.3))
            for e in kb.loop_vars:
                out.append((e, 1.5))
        return out

    def leaf(self, t: WType, allow_literal: bool = True) -> Expr:
        cands = self.leaf_candidates(t)
        if not cands or (allow_literal and self.chance(self.literal_weight / (1.0 + len(cands)))):
            derived = self.derive(t) if not cands else None
            if derived is not None:
                return derived
            return self.lit(t, signed=True)
        return self.weighted([c for c, _ in cands], [w for _, w in cands])

    def derive(self, t: WType) -> Expr | None:
        """A value of type ``t`` when no variable of that type exists: converted or built
        from values that do exist (so it still depends on the data)."""
        if t.is_scalar and not t.is_bool:
            for src in (WType("float32"), WType("float64"), I32):
                if src != t and self.leaf_candidates(src):
                    e = self.leaf(src, allow_literal=False)
                    if t.is_int and e.type.is_float:
                        c = self.to_int(e, t)
                    else:
                        c = ops.cast(self.fit_nonneg(e) if t.is_unsigned else e, t, style=self.kb.cast_style)
                    if c is not None:
                        return c
            return None
        if t.is_vector:
            comp = t.component()
            if self.leaf_candidates(comp) or self.derive(comp) is not None:
                # leaves only: derive must not recurse into generation
                if self.chance(0.3):
                    return ops.vec_splat(t, self.leaf(comp))
                return ops.vec_ctor(t, [self.leaf(comp) for _ in range(t.length)])
        return None

    # ------------------------------------------------------------------ generation
    def gen(self, t: WType, depth: int) -> Expr:
        """An expression of type ``t`` at most ``depth`` productions deep."""
        if t.is_bool:
            return self.cond(max(0, depth - 1))
        if depth <= 0 or not self.productions:
            return self.leaf(t)
        cands = self.leaf_candidates(t)
        if self.chance(0.15 if not cands else 0.3):
            return self.leaf(t)
        for _ in range(6):
            e = self.production(t, depth)
            if e is not None:
                return e
        return self.leaf(t)

    def production(self, t: WType, depth: int) -> Expr | None:
        fams = self._by_type.get(t)
        if fams is None:
            fams = {}
            for fam, name, applies, fn in self.productions:
                if applies(t):
                    fams.setdefault(fam, []).append((name, fn))
            self._by_type[t] = fams
        if not fams:
            return None
        names = list(fams)
        fam = self.weighted(names, [self.weights[f] for f in names])
        name, fn = self.pick(fams[fam])
        e = fn(self, t, depth)
        if e is None or e.literal or e.type != t:
            return None  # an all-constant subtree is noise: constant-folding material
        if e.collapsed:
            return None  # inputs went in and nothing of them came out (Expr.collapsed)
        if e.size > self.max_size:
            return None  # keep expressions readable; larger computations use named locals
        return e if e.op else e.with_(op=name)

    def gen_varying(self, t: WType, depth: int, tries: int = 4) -> Expr:
        """Like :meth:`gen` but the value must differ between threads."""
        e = self.gen(t, depth)
        for _ in range(tries):
            if e.varying:
                return e
            e = self.gen(t, depth)
        return e if e.varying else self.mix_in_varying(e)

    def varying_leaf(self, t: WType) -> Expr | None:
        cands = [c for c, _ in self.leaf_candidates(t) if c.varying]
        if cands:
            return self.pick(cands)
        d = self.derive(t)
        return d if d is not None and d.varying else None

    def varying_scalar(self, t: WType) -> Expr | None:
        """A thread-dependent scalar of type ``t``: a varying leaf, else the thread index."""
        v = self.varying_leaf(t)
        if v is None and self.kb.tid_exprs:
            tid = self.kb.tid_exprs[0]
            v = tid if t == tid.type else ops.cast(tid, t, style=self.kb.cast_style)
        return v

    def mix_in_varying(self, e: Expr) -> Expr:
        """``e`` combined additively with something thread-dependent."""
        t = e.type
        v = self.varying_leaf(t)
        if v is None and not t.is_bool:
            s = self.varying_scalar(t.component())
            if t.is_scalar:
                v = s
            elif t.is_vector:
                v = ops.vec_splat(t, s)
            elif t.is_matrix:
                v = ops.mul(s, ops.identity(t.shape[0], t.scalar))
        if v is None:
            return e
        for op in (ops.add, ops.sub):
            r = op(e, v)
            if r is not None and r.varying:
                return r
        return v if v.varying else e

    # ------------------------------------------------------------------ conditions
    def threshold(self, e: Expr) -> Expr:
        """A literal that splits ``e``'s sample values (strictly inside their range)."""
        vals = nm.draws(e.vals).reshape(-1) if e.vals is not None else np.array([e.iv.lo, e.iv.hi])
        lo, hi = nm.stable(np.min(vals)), nm.stable(np.max(vals))
        if e.type.is_int:
            if hi - lo >= 2:
                v = int(round(nm.quantile(vals, self.rng.uniform(0.3, 0.7))))
                v = min(max(v, int(lo) + 1), int(hi))
            else:
                v = int(hi)
            return const(e.type, v)
        if hi <= lo:
            return const(e.type, float(f"{lo:.3g}") if lo != 0 else 0.5)
        a = nm.quantile(vals, 0.3)
        b = nm.quantile(vals, 0.7)
        if b <= a:
            a, b = lo, hi
        v = nm.nice_float(self.rng, a, b)
        if not lo < v < hi:
            v = (a + b) / 2.0
        return const(e.type, v)

    def comparison(self, depth: int, t: WType | None = None) -> Expr:
        if t is None:
            # compare something that varies: a type some varying local (or parameter) has
            varying = [
                v.expr.type
                for v in self.kb.readable_vars()
                if v.expr.varying
                and v.expr.type.is_scalar
                and not v.expr.type.is_bool
                and v.expr.type.scalar != "float16"
            ]
            t = self.pick(varying) if varying and self.chance(0.7) else self.pick([WType("float32")] * 4 + [I32])
        e = self.gen(t, depth)
        for _ in range(3):
            if e.varying:
                break
            e = self.gen(t, depth)
        if e.type.is_int and self.chance(0.35) and e.iv.lo >= 0:
            m = int(self.pick([2, 2, 3, 4]))
            r = ops.int_div("%", e, const(e.type, m))
            c = ops.comparison(self.pick(["==", "!="]), r, const(e.type, int(self.rng.integers(m)))) if r else None
            if c is not None and c.varying:
                return c
        op = self.pick(["<", "<=", ">", ">="])
        other = self.threshold(e) if self.chance(0.75) else self.leaf(t)
        c = ops.comparison(op, e, other)
        if c is None or not c.varying:
            c = ops.comparison(op, e, self.threshold(e)) or c
        if (c is None or not c.varying) and self.kb.tid_exprs:  # a condition must split the threads
            tid = self.pick(list(self.kb.tid_exprs))
            c = ops.comparison(self.pick([">", "<", ">=", "<="]), tid, self.threshold(tid)) or c
        if c is None:
            c = ops.comparison("<", e, const(e.type, e.iv.hi + 1))
        return c

    def cond(self, depth: int = 1) -> Expr:
        c = self.comparison(depth)
        r = self.rng.random()
        if r < 0.18:
            other = self.comparison(max(0, depth - 1))
            c2 = ops.logic(self.pick(["and", "or"]), c, other)
            if c2 is not None and c2.varying:
                c = c2
        elif r < 0.25:
            c = ops.logic_not(c) or c
        return c

    # ------------------------------------------------------------------ domain fitting
    def _first_good(
        self, forms: list[Callable[[], Expr | None]], ok: Callable[[Expr], bool], keep_varying: bool
    ) -> Expr | None:
        order = self.rng.permutation(len(forms))
        for j in order:
            r = forms[int(j)]()
            if r is not None and ok(r) and (r.varying or not keep_varying):
                return r
        return None

    def fit_positive(self, e: Expr, m: float = 0.1) -> Expr:
        """``e`` rewritten (if needed) so it is >= m."""
        if e.iv.lo >= m:
            return e
        t = e.type
        c = self.lit(t, m, m + 1.5)
        forms = [
            lambda: ops.add(ops.unary("abs", e), c),
            lambda: ops.add(ops.mul(e, e), c) if e.iv.mag < 20 else None,
            lambda: ops.add(c, ops.mul(e, e)) if e.iv.mag < 20 else None,
            lambda: ops.unary("exp", e) if e.iv.within(-5.0, 5.0) and math.exp(e.iv.lo) >= m else None,
        ]
        if e.iv.lo > -4.0:
            shift = self.lit(t, -e.iv.lo + m, -e.iv.lo + m + 1.0)
            forms.append(lambda: ops.add(e, shift))
        if e.vals is not None and nm.quantile(e.vals, 0.5) > m:
            forms.append(lambda: ops.binary_fn("max", e, const(t, m)))
        r = self._first_good(forms, lambda r: r.iv.lo >= m, keep_varying=e.varying)
        if r is not None:
            return r
        return ops.add(ops.unary("abs", e), c) or const(t, max(1.0, m))

    def fit_nonneg(self, e: Expr) -> Expr:
        if e.iv.lo >= 0:
            return e
        if e.type.is_int:
            return ops.unary("abs", e) or e
        return self.fit_positive(e, 0.0)

    def fit_nonzero(self, e: Expr, m: float = ops.DEN_MIN) -> Expr:
        """``e`` rewritten (if needed) so |e| >= m."""
        if ops.mig(e) >= m:
            return e
        t = e.type
        c = self.lit(t, m, m + 0.5)

        def signed_shift():
            zero = const(t, 0)
            cnd = ops.comparison(self.pick([">=", ">"]), e, zero)
            w = ops.where(cnd, ops.add(e, c), ops.sub(e, c), style=self.pick(["where", "where", "ternary"]))
            return w.with_(min_norm=c.iv.lo) if w is not None else None  # |x + c| or |x - c| on the matching side

        forms = [
            signed_shift,
            lambda: ops.add(ops.mul(e, e), c) if e.iv.mag < 20 else None,
            lambda: self.fit_positive(e, m),
        ]
        r = self._first_good(forms, lambda r: ops.mig(r) >= m, keep_varying=e.varying)
        return r if r is not None else self.fit_positive(e, m)

    def fit_within(self, e: Expr, lo: float, hi: float) -> Expr:
        """``e`` rewritten (if needed) to lie in [lo, hi]."""
        if e.iv.within(lo, hi):
            return e
        t = e.type
        if t.is_int:
            return self._fit_int_within(e, int(math.ceil(lo)), int(math.floor(hi)))
        mid, half = (lo + hi) / 2.0, (hi - lo) / 2.0
        forms: list[Callable[[], Expr | None]] = []
        if abs(mid) < 1e-9:
            if e.iv.mag > 0:
                k = _round_down(half / e.iv.mag)
                kt = t.component()
                forms.append(lambda: ops.mul(e, const(kt, k)))
                forms.append(lambda: ops.mul(const(kt, k), e))
            for fn in ("sin", "tanh", "cos"):

                def squash(fn=fn):
                    inner = ops.unary(fn, e)
                    return inner if half >= 1.0 else ops.mul(inner, const(t, _round_down(half)))

                forms.append(squash)
            if e.vals is not None:
                b = _round_down(half * 0.9)
                forms.append(lambda: ops.clamp(e, const(t, -b), const(t, b)))

        def affine():
            inner = ops.unary(self.pick(["tanh", "sin"]), e)
            scaled = ops.mul(const(t, _round_down(half * 0.95)), inner)
            return ops.add(const(t, round(mid, 3)), scaled) if abs(mid) > 1e-9 else scaled

        forms.append(affine)
        r = self._first_good(forms, lambda r: r.iv.within(lo, hi), keep_varying=e.varying)
        if r is None:
            r = self._first_good(forms, lambda r: r.iv.within(lo, hi), keep_varying=False)
        return r if r is not None else const(t, round(mid, 3) or 0.5)

    def _fit_int_within(self, e: Expr, lo: int, hi: int) -> Expr:
        """Integers: a remainder (``e % 4`` lies in [-3, 3]) or a clamp to the range."""
        t = e.type
        forms: list[Callable[[], Expr | None]] = []
        if lo <= -hi and hi >= 1:
            forms.append(lambda: ops.int_div("%", e, const(t, hi + 1)))
        if hi - lo >= 1:
            forms.append(
                lambda: (
                    ops.add(ops.int_div("%", self.fit_nonneg(e), const(t, hi - lo + 1)), const(t, lo))
                    if lo != 0
                    else ops.int_div("%", self.fit_nonneg(e), const(t, hi - lo + 1))
                )
            )
            forms.append(lambda: ops.clamp(e, const(t, lo), const(t, hi)))
        r = self._first_good(forms, lambda r: r.iv.within(lo, hi), keep_varying=e.varying)
        if r is None:
            r = self._first_good(forms, lambda r: r.iv.within(lo, hi), keep_varying=False)
        return r if r is not None else const(t, max(lo, min(hi, 1)))

    def fit_mag(self, e: Expr, mag: float) -> Expr:
        return self.fit_within(e, -mag, mag)

    def to_int(self, e: Expr, t: WType) -> Expr | None:
        """A float converted to integer type ``t``, scaled first so truncation keeps several
        distinct values (``int(x * 8.0)``) and kept within the type's safe range."""
        s = nm.sample_spread(e.vals) if e.varying else e.iv.width
        if s < 6.0:
            k = 6.0 / max(s, 1e-3)
            k = float(self.pick([4.0, 5.0, 8.0, 10.0, 16.0])) if k < 2 else min(1000.0, _round_up(k))
            e = ops.mul(e, const(e.type, k)) or e
        cap = min(1000.0, float(ops.INT_CAP[t.scalar]))
        if e.iv.mag > cap:
            e = self.fit_mag(e, cap)
        if t.is_unsigned:
            e = self.fit_nonneg(e)
        return ops.cast(e, t, style=self.kb.cast_style)
