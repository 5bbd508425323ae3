"""Statement generation: the body of a kernel or helper function.

:class:`BodyGen` emits statements through a :class:`KernelBuilder` using an
:class:`ExprGen` for their expressions.  Statement kinds (weighted by the category's
:class:`Profile`): new locals, updates (``+=``, ``-=``, ``*=``, ``wp.max(x, ...)``,
contractions), element updates of vectors/matrices, neighbour and strided reads,
``if``/``elif``/``else``, ``for`` loops over constant or data-dependent ranges with
``break``/``continue``, bounded ``while`` loops, early ``return``, and calls of helper
``@wp.func``s.  Loops are bounded by construction (a constant, a clamped data value, or an
explicit step counter), so every kernel terminates.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import numeric as nm
from . import ops
from .builder import Arg, KernelBuilder
from .convert import to_type
from .expr import Expr, const
from .exprgen import ExprGen
from .interval import Interval
from .wtypes import F32, I32, WType

TIERS = ("basic", "intermediate", "advanced")


@dataclass
class Profile:
    """What a category stresses."""

    families: dict[str, float]
    local_types: tuple[tuple[WType, float], ...]
    stmts: dict[str, float]
    # per tier: (min statements, max statements, expression depth, max nesting)
    size: dict[str, tuple[int, int, int, int]] = field(
        default_factory=lambda: {"basic": (1, 2, 2, 1), "intermediate": (2, 3, 2, 2), "advanced": (3, 5, 2, 3)}
    )
    literal_weight: float = 0.6


def role_for(t: WType) -> str:
    if t.quat:
        return "local_quat"
    if t.is_matrix:
        return "local_mat"
    if t.is_vector:
        return "local_vec"
    return "local_int" if t.is_int else "local"


def index_role(t: WType) -> str:
    if t.quat:
        return "in_quat"
    if t.is_matrix:
        return "in_mat"
    if t.is_vector:
        return "in_vec"
    return "in_int" if t.is_int else "in_scalar"


# Kinds allowed inside a branch or loop body (no early return, no new loops at nest 0).
_NESTED_KINDS = ("let", "update", "if", "for", "while", "elem", "helper")


_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def _keeps(r: Expr, e: Expr) -> bool:
    """A combination ``r`` of ``e`` and another value that still varies where ``e`` did and
    in which neither side was cancelled (``Expr.collapsed``)."""
    return (r.varying or not e.varying) and not r.collapsed


def _cancels(old: Expr, new_vals: np.ndarray | None) -> bool:
    """An update whose result no longer depends on what the variable held (``x += -x``,
    ``n += 4 - n``): it varied (or depended on a parameter) and the new value does not."""
    return (old.varying and not nm.is_varying(new_vals)) or (old.live and not nm.is_live(new_vals))


class BodyGen:
    def __init__(self, kb: KernelBuilder, gen: ExprGen, profile: Profile, tier: str):
        self.kb = kb
        self.g = gen
        self.rng = kb.rng
        self.profile = profile
        self.tier = tier
        lo, hi, depth, nest = profile.size[tier]
        self.n_statements = int(self.rng.integers(lo, hi + 1))
        self.depth = depth
        self.max_nest = nest
        self.outputs: list[Arg] = []
        self.out_vals: dict[str, np.ndarray] = {}  # sample values finally written per output
        self.in_kernel = True
        self.making_helper = False
        self.loop_nest = 0
        # Defines a @wp.func returning a type and gives an expression calling it (None: no
        # helper).  Set by whoever builds the kernel (frame.py: funcs.call_new_helper);
        # stmts.py does not import funcs.py, which builds helper bodies with this class.
        self.new_helper: Callable[[BodyGen, WType], Expr | None] | None = None

    # ------------------------------------------------------------------ helpers
    def expr_depth(self) -> int:
        return int(self.rng.integers(1, self.depth + 1))

    def local_type(self) -> WType:
        types = [t for t, _ in self.profile.local_types]
        return self.g.weighted(types, [w for _, w in self.profile.local_types])

    def declare_new(self, t: WType | None = None, mutable: bool = False, depth: int | None = None) -> Expr:
        t = t or self.local_type()
        e = self.g.gen(t, self.expr_depth() if depth is None else depth)
        return self.kb.declare(role_for(t), e, mutable=mutable)

    # ------------------------------------------------------------------ driver
    def body(self) -> None:
        for _ in range(self.n_statements):
            self.statement(self.max_nest)

    def statement(self, nest: int, kinds: tuple[str, ...] | None = None) -> None:
        weights = dict(self.profile.stmts)
        if nest <= 0:
            for k in ("if", "for", "while", "early_return"):
                weights.pop(k, None)
        if not self.in_kernel or self.kb.loops or self.kb.ifs:
            weights.pop("early_return", None)
        if self.loop_nest >= 2:
            weights.pop("for", None)
            weights.pop("while", None)
        if kinds is not None:
            weights = {k: w for k, w in weights.items() if k in kinds}
        if not weights:
            weights = {"let": 1.0}
        names = list(weights)
        kind = self.g.weighted(names, [weights[k] for k in names])
        getattr(self, f"s_{kind}")(nest)

    # ------------------------------------------------------------------ simple statements
    def s_let(self, nest: int) -> None:
        self.declare_new()

    def updatable(self) -> list:
        kb = self.kb
        return [v for v in kb.vars.values() if kb.may_update(v) and not v.expr.type.is_bool and not v.expr.type.quat]

    def s_update(self, nest: int, var=None) -> bool:
        """Update an existing variable; True if one was emitted."""
        kb, g = self.kb, self.g
        cands = self.updatable()
        if var is None:
            if not cands:
                self.s_let(nest)
                return False
            var = g.pick(cands)
        t = var.expr.type
        in_loop = var.loop_depth < len(kb.loops)
        if in_loop:
            kb.locked.setdefault(var.name, len(kb.loops))  # the update may not read the variable itself
        # a value nothing has read yet is not overwritten (it would be dead: issue #23)
        kinds = ["+=", "+=", "-=", "set"] if var.uses else ["+=", "+=", "-="]
        if t.is_scalar and not in_loop and (t.is_float or t.is_int):
            kinds.append("*=")
        if t.is_scalar or t.is_vector:
            kinds.append("minmax")
        if in_loop and t.is_float:
            kinds.append("decay")
        kind = g.pick(kinds)
        d = max(1, self.expr_depth() - 1)
        if kind in ("+=", "-="):
            return self._accumulate(var, kind, d, nest)
        if kind == "*=":
            return self._scale(var, d, nest)
        if kind == "minmax":
            return self._min_max(var, d, nest)
        if kind == "decay":
            return self._decay(var, d, nest)
        return self._reassign(var, d, nest)

    def _fresh(self, var, t: WType, d: int) -> Expr:
        """A new expression for an update of ``var``: one that varies if ``var`` does not yet."""
        return self.g.gen_varying(t, d) if not var.expr.varying else self.g.gen(t, d)

    def _accumulate(self, var, kind: str, d: int, nest: int) -> bool:
        """``x += e`` / ``x -= e``, with a contribution small enough for the loops around it."""
        kb, g = self.kb, self.g
        t, old = var.expr.type, var.expr
        in_loop = var.loop_depth < len(kb.loops)
        # per-iteration contributions stay small enough that K iterations stay in range
        step_mag = 50.0 if not in_loop else max(1.0, 200.0 / self._trip_bound())
        # e does not read x: x += e - x, x -= x + e would drop what x held (issue #23)
        e = self._not_reading(var, lambda: self._fresh(var, t, d))
        e = g.fit_mag(e, step_mag) if t.is_float else e
        if (t.is_unsigned or ops.same(e, old)) and kind == "-=":
            kind = "+="
        if not in_loop:
            new_iv = old.iv + e.iv if kind == "+=" else old.iv - e.iv
            if not kb.loop_safe(new_iv, t) or (t.is_unsigned and new_iv.lo < 0):
                return self._fallback_update(var, nest)
            if _cancels(old, old.vals + e.vals if kind == "+=" else old.vals - e.vals):
                return self._fallback_update(var, nest)  # x += x * -1.0, n += 4 - n: the old value is gone
        elif t.is_int:
            # an integer accumulated over a loop must stay far from overflow
            if e.iv.mag * self._trip_bound() > ops.INT_CAP[t.scalar] / 4:
                return self._fallback_update(var, nest)
        kb.update(var.name, kind, e)
        return True

    def _scale(self, var, d: int, nest: int) -> bool:
        kb, g = self.kb, self.g
        t, old = var.expr.type, var.expr
        e = g.gen(t, d)
        if t.is_float:
            e = g.fit_within(e, -2.0, 2.0)
        else:
            e = g.fit_within(e, -3, 3) if not t.is_unsigned else g.lit(t, 2, 3)
        if not kb.loop_safe(old.iv * e.iv, t) or (t.is_unsigned and (old.iv * e.iv).lo < 0):
            return self._fallback_update(var, nest)
        if old.varying and not nm.is_varying(old.vals * e.vals):
            return self._fallback_update(var, nest)  # e.g. scaling by 0
        kb.update(var.name, "*=", e)
        return True

    def _min_max(self, var, d: int, nest: int) -> bool:
        """``x = wp.min(x, e)`` / ``wp.max``: in a loop, ``e`` must change between iterations."""
        kb, g = self.kb, self.g
        t, old = var.expr.type, var.expr
        in_loop = var.loop_depth < len(kb.loops)
        e = self._loop_moving(t, d, g.gen) if in_loop else g.gen(t, d)
        if e is None:
            return self._accumulate(var, "+=", d, nest)
        fn = g.pick(["min", "max"])
        r = ops.binary_fn(fn, old, e)
        if r is None or r.collapsed or (not in_loop and not r.varying and old.varying):
            return self._fallback_update(var, nest)
        kb.update(var.name, fn, e, result=r)
        return True

    def _decay(self, var, d: int, nest: int) -> bool:
        """``x = c * x + e`` in a loop (bounded by e / (1 - c))."""
        kb, g = self.kb, self.g
        t, old = var.expr.type, var.expr
        c = const(t.component(), float(g.pick([0.5, 0.25, 0.75, 0.9, 0.8, 0.6])))
        e = g.fit_mag(g.gen(t, d), 20.0)
        scaled = ops.mul(old, c) if g.chance(0.5) else ops.mul(c, old)
        r = ops.add(scaled, e)
        if r is None:
            return self._fallback_update(var, nest)
        kb.update(var.name, "decay", e, result=r, decay=c.iv.lo)
        return True

    def _reassign(self, var, d: int, nest: int) -> bool:
        """Plain re-assignment from a new expression (may read the old value outside loops);
        in a loop, one that changes between iterations."""
        kb, g = self.kb, self.g
        t, old = var.expr.type, var.expr
        in_loop = var.loop_depth < len(kb.loops)
        e = self._loop_moving(t, d, lambda t, d: self._fresh(var, t, d)) if in_loop else self._fresh(var, t, d)
        if e is None:
            return self._accumulate(var, "+=", d, nest)
        if in_loop and t.is_float and e.iv.mag > 100:
            e = g.fit_mag(e, 50.0)
        if not e.varying and old.varying and not in_loop:
            e = g.mix_in_varying(e)
        kb.update(var.name, "=", e)
        return True

    def _loop_moving(self, t: WType, d: int, make, tries: int = 3) -> Expr | None:
        """An expression (from ``make(t, d)``) that changes from one iteration of the
        innermost loop to the next: it reads the loop variable or a local of the loop body.
        A loop-carried ``x = e`` or ``x = wp.max(x, e)`` with ``e`` the same every iteration
        is idempotent: the trip count would reach nothing (issue #23)."""
        for _ in range(tries):
            e = make(t, d)
            if self.kb.reads_moving(e.text):
                return e
        return None

    def _not_reading(self, var, make):
        """``make()`` with ``var`` unreadable while it runs."""
        locked = self.kb.locked
        if var.name in locked:
            return make()
        locked[var.name] = len(self.kb.loops) + 1
        try:
            return make()
        finally:
            del locked[var.name]

    def consume_block_locals(self) -> None:
        """Fold locals of the closing block that nothing read into a variable from outside
        the block (so no assignment is dead code)."""
        kb, g = self.kb, self.g
        if kb.block_depth == 0 or kb.returned:
            return
        pending = [
            v for v in kb.vars.values() if v.block_depth == kb.block_depth and v.uses == 0 and v.name not in kb.locked
        ]
        for v in pending:
            outer = [
                o
                for o in self.updatable()
                if o.block_depth < kb.block_depth
                and (o.expr.type.is_float or o.expr.type.is_int)
                and not o.expr.type.is_unsigned
            ]
            if not outer:
                return
            same = [o for o in outer if o.expr.type == v.expr.type]
            target = g.pick(same or outer)
            e = to_type(g, v.expr, target.expr.type)
            v.uses += 1
            if e is None or e.collapsed:
                continue
            t = target.expr.type
            if t.is_float:
                e = g.fit_mag(e, 50.0)
            in_loop = target.loop_depth < len(kb.loops)
            if in_loop:
                kb.locked.setdefault(target.name, len(kb.loops))
                if t.is_int and e.iv.mag * self._trip_bound() > ops.INT_CAP[t.scalar] / 4:
                    kb.update(target.name, "=", e)
                    continue
            elif not kb.loop_safe(target.expr.iv + e.iv, t):
                kb.update(target.name, "=", e)
                continue
            kind = g.pick(["+=", "+=", "-="])
            if not in_loop:  # rhs = x; x -= rhs would cancel what x held
                old = target.expr.vals
                kinds = [
                    k for k in (kind, "+=") if not _cancels(target.expr, old + e.vals if k == "+=" else old - e.vals)
                ]
                if not kinds:
                    continue
                kind = kinds[0]
            kb.update(target.name, kind, e)

    def _trip_bound(self) -> int:
        n = 1
        for f in self.kb.loops:
            n *= f.max_trips
        return n

    def _fallback_update(self, var, nest) -> bool:
        """A plain re-assignment, where the chosen update would overflow or degenerate; one
        that keeps the old value if nothing has read it yet (it would be dead otherwise)."""
        kb = self.kb
        e = self.g.gen_varying(var.expr.type, 1)
        if var.uses == 0 and var.loop_depth == len(kb.loops):
            r = self.fold(var.expr, e)
            if r is not var.expr and not r.collapsed and not _cancels(var.expr, r.vals):
                kb.update(var.name, "=", r)
                return True
        kb.update(var.name, "=", e)
        return True

    def s_elem(self, nest: int) -> None:
        """Change one component of a local vector or matrix by building a fresh value:
        ``v = wp.vec3(v[0], v[1] + ..., v[2])``.  (A component write, ``v[1] += ...``, is
        what Warp 1.19 differentiates wrongly unless a global config flag is set.)"""
        kb, g = self.kb, self.g
        cands = [
            v
            for v in self.updatable()
            if (v.expr.type.is_vector or v.expr.type.is_matrix) and v.loop_depth == len(kb.loops)
        ]
        if not cands:
            t = g.pick([WType("float32", (3,)), WType("float32", (2,)), WType("float32", (4,))])
            self.declare_new(t)
            return
        var = g.pick(cands)
        t = var.expr.type
        comp = t.component()
        e = g.fit_mag(g.gen(comp, max(1, self.expr_depth() - 1)), 20.0) if comp.is_float else g.gen(comp, 1)
        old = var.expr
        vals = kb.full(old.vals)
        if t.is_vector:
            k = int(self.rng.integers(t.length))
            cells = [f"{var.name}[{j}]" for j in range(t.length)]
            at = k
            sel = (slice(None), k)
        else:
            r, c = int(self.rng.integers(t.shape[0])), int(self.rng.integers(t.shape[1]))
            cells = [f"{var.name}[{i}, {j}]" for i in range(t.shape[0]) for j in range(t.shape[1])]
            at = r * t.shape[1] + c
            sel = (slice(None), r, c)
        op = g.pick(["=", "+=", "-="]) if not t.is_unsigned else "="
        ev = kb.full(e.vals)
        vals[sel] = ev if op == "=" else (vals[sel] + ev if op == "+=" else vals[sel] - ev)
        cells[at] = e.text if op == "=" else f"{cells[at]} {op[0]} ({e.text})"
        kb.emit(f"{var.name} = {t.ctor}({', '.join(cells)})")
        iv = old.iv.union(e.iv) if op == "=" else old.iv.union(old.iv + e.iv if op == "+=" else old.iv - e.iv)
        var.expr = kb.var_expr(var.name, old.with_(iv=iv, vals=vals, unit=False, min_norm=0.0, det_lo=0.0))
        var.uses = 0

    # ------------------------------------------------------------------ branches
    def s_if(self, nest: int) -> None:
        kb, g = self.kb, self.g
        if not self.updatable():
            self.declare_new()
        kb.begin_if(g.cond(max(1, self.depth - 1)))
        self.branch_body(nest)
        r = self.rng.random()
        if r < 0.3:
            self.consume_block_locals()
            kb.begin_elif(lambda: g.cond(1))
            self.branch_body(nest)
            if self.rng.random() < 0.5:
                self.consume_block_locals()
                kb.begin_else()
                self.branch_body(nest)
        elif r < 0.7:
            self.consume_block_locals()
            kb.begin_else()
            self.branch_body(nest)
        self.consume_block_locals()
        kb.end_if()

    def branch_body(self, nest: int) -> None:
        """1-2 statements; the first updates a variable from outside the branch."""
        self.s_update(nest - 1)
        extra = int(self.rng.integers(0, 2 if self.tier != "basic" else 1))
        for _ in range(extra):
            self.statement(nest - 1, kinds=_NESTED_KINDS)
        if self.kb.loops and self.rng.random() < 0.2 and not self.kb.returned:
            self.consume_block_locals()
            self.kb.emit(self.g.pick(["continue", "break"]))
            self.kb.returned = True  # nothing may follow in this block

    # ------------------------------------------------------------------ loops
    def _accumulator(self):
        """A variable a loop will update: an existing one or a new one declared just before."""
        kb, g = self.kb, self.g
        cands = [v for v in self.updatable() if v.expr.type.is_float or v.expr.type == I32]
        if cands and g.chance(0.4):
            return g.pick(cands)
        t = self.local_type()
        if t.quat:
            t = F32
        if g.chance(0.5) or t.is_matrix:
            init = const(t, 0.0) if g.chance(0.7) else g.lit(t, 0.5, 2.0)
        else:
            init = g.gen(t, 1)
        v = kb.declare(role_for(t), init, mutable=True)
        return kb.vars[v.text]

    def _trip_count(self) -> tuple[str, int, int, np.ndarray, bool]:
        """(range arguments text, first value, max trips, trips per sample, data-dependent?)."""
        kb, g = self.kb, self.g
        r = self.rng.random()
        kmax = int(g.pick([3, 4, 5, 6, 8]))
        if r < 0.3:
            return str(kmax), 0, kmax, np.array([kmax]), False
        if r < 0.45:
            start = int(self.rng.integers(1, 3))
            return f"{start}, {start + kmax}", start, kmax, np.array([kmax]), False
        if r < 0.6:
            params = kb.scalar_params(I32)
            p = next((p for p in params if p.iv.lo >= 0 and p.iv.hi <= 8), None)
            if p is None and len(kb.args) < 9:
                _, p = kb.add_scalar("param_int", I32, (1.0, float(kmax)))
            if p is not None:
                return p.text, 0, int(p.iv.hi), p.vals, False
        # data-dependent: an integer derived from the thread's data, kept in [0, kmax]
        src = g.gen(I32, 1)
        if src.iv.lo < 0 or src.iv.hi > kmax or not src.varying:
            m = ops.int_div("%", g.fit_nonneg(src), const(I32, kmax + 1)) if src.varying else None
            if m is None or not m.varying:
                idx = kb.tid_exprs[-1] if kb.tid_exprs else src
                m = ops.int_div("%", g.fit_nonneg(idx), const(I32, kmax + 1))
            src = m
        return src.text, 0, max(1, int(src.iv.hi)), src.vals, True

    def s_for(self, nest: int) -> None:
        kb, g = self.kb, self.g
        acc = self._accumulator()
        count_text, lo, kmax, trips, count_varying = self._trip_count()
        lv_name = kb.names.fresh("loop")
        if self.rng.random() < 0.15 and lo == 0:
            header = f"for {lv_name} in range({count_text} - 1, -1, -1):"
        else:
            header = f"for {lv_name} in range({count_text}):"
        # the loop variable's sample value: a middle iteration
        mid = lo + np.floor(np.maximum(kb.full(np.asarray(trips, dtype=float).reshape(-1)) - 1, 0) / 2)
        # The variable of a constant-range loop is a compile-time constant to Warp (the loop
        # is unrolled): marking it literal makes values computed only from it get bound
        # through a constructor, which Warp needs to treat them as variables.
        static = bool(re.fullmatch(r"[\d, ]+", count_text))
        loop_var = Expr(lv_name, I32, Interval(lo, lo + kmax), vals=mid, op="loopvar", literal=static)
        mutable = [acc.name]
        others = [
            v.name for v in self.updatable() if v.name != acc.name and (v.expr.type.is_float or v.expr.type == I32)
        ]
        if others and self.rng.random() < 0.3:
            mutable.append(g.pick(others))
        kb.begin_loop(header, kmax, trips, loop_var, mutable=tuple(mutable))
        self.loop_nest += 1
        # body: maybe a read that moves with the loop variable, maybe an early exit, the update
        if self.rng.random() < 0.6:
            self.loop_read(loop_var)
        if self.rng.random() < 0.3:
            kb.begin_if(g.cond(1))
            kb.emit(g.pick(["continue", "break"]))
            kb.returned = True
            kb.end_if()
        extra = int(self.rng.integers(0, 2)) if nest > 1 else 0
        for _ in range(extra):
            self.statement(nest - 1, kinds=("let", "update", "if", "for"))
        if acc.name not in kb.loops[-1].updated:  # the body may have updated it already
            self.s_update(nest - 1, var=acc)
        self.consume_block_locals()
        self.loop_nest -= 1
        kb.end_loop()

    def loop_read(self, loop_var: Expr) -> None:
        """Declare a value read at an index that moves with the loop variable."""
        kb, g = self.kb, self.g
        arrays = [a for a in kb.args if a.kind == "array" and a.role == "in" and a.ndim == 1 and a.type.is_float]
        if not arrays or not kb.tid:
            self.declare_new(depth=1)
            return
        a = g.pick(arrays)
        n = a.shape[0]
        i, iv = kb.tid[0], kb.tid_exprs[0].vals
        k = loop_var.vals
        r = self.rng.random()
        g.chance(0.5)  # kept: the draw that chose a literal size keeps the rng stream (sizes come from the array)
        size = f"{a.name}.shape[0]"
        if r < 0.4:
            idx, ids = f"({i} + {loop_var.text}) % {size}", np.fmod(iv + k, n)
        elif r < 0.7:
            idx, ids = f"wp.min({i} + {loop_var.text}, {size} - 1)", np.minimum(iv + k, n - 1)
        else:
            idx, ids = f"wp.max({i} - {loop_var.text}, 0)", np.maximum(iv - k, 0)
        e = kb.element(a, idx, (np.clip(ids, 0, n - 1),))
        kb.declare(role_for(a.type), e)

    def s_while(self, nest: int) -> None:
        """A bounded while loop: shrink a value until it passes a threshold (or K steps)."""
        kb, g = self.kb, self.g
        t = F32 if g.chance(0.8) else WType("float64")
        steps = kb.declare("local_int", const(I32, 0), mutable=True)
        x0 = g.gen(t, max(1, self.depth - 1))
        if x0.iv.mag > 100:
            x0 = g.fit_mag(x0, 100.0)
        x0 = g.fit_positive(x0, 0.5)  # sqrt / log(x + 1) below need x > 0
        x = kb.declare(role_for(t), x0, mutable=True)
        kmax = int(g.pick([4, 6, 8, 10, 12, 16]))
        thr = g.threshold(x0) if x0.varying and g.chance(0.6) else const(t, float(g.pick([0.5, 1.0, 0.25, 2.0, 0.75])))
        if thr.iv.lo <= 0:
            thr = const(t, 0.5)
        if self.rng.random() < 0.5:
            cond = f"{x.text} > {thr.text} and {steps.text} < {kmax}"
        else:
            cond = f"{steps.text} < {kmax} and {x.text} > {thr.text}"
        # simulate the loop exactly on the sample threads
        xs, ns = kb.full(x0.vals).astype(float), np.zeros(kb.n_samples)
        c = float(g.pick([0.5, 0.5, 0.75, 0.9, 0.6]))
        shrink = self.rng.random()
        e = g.fit_within(g.gen(t, 1), 0.05, 0.5) if 0.5 <= shrink < 0.8 else None
        kb.begin_loop(f"while {cond}:", kmax, np.full(1, kmax), None, mutable=(x.text, steps.text))
        self.loop_nest += 1
        if shrink < 0.5:
            kb.update(x.text, "*=", const(t, c))
            step = lambda v: v * c  # noqa: E731
            lo = 0.0
        elif shrink < 0.8:
            kb.update(x.text, "=", e, text=f"{x.text} = {x.text} * {const(t, c).text} - {e.wrap(10)}")
            ev = kb.full(e.vals)
            step = lambda v: v * c - ev  # noqa: E731
            lo = -0.5
        elif self.rng.random() < 0.5:
            kb.update(x.text, "=", x0, text=f"{x.text} = wp.sqrt({x.text})")
            step, lo = np.sqrt, 0.0
        else:
            kb.update(x.text, "=", x0, text=f"{x.text} = wp.log({x.text} + {const(t, 1.0).text})")
            step, lo = (lambda v: np.log(v + 1.0)), 0.0  # noqa: E731
        thr_v = float(thr.iv.lo)
        with np.errstate(all="ignore"):  # threads that stopped may hold values the step rejects
            for _ in range(kmax):
                act = (xs > thr_v) & (ns < kmax)
                xs = np.where(act, step(xs), xs)
                ns = ns + act
        kb.update(steps.text, "+=", const(I32, 1))
        self.consume_block_locals()
        self.loop_nest -= 1
        kb.end_loop(has_loop_var=False)
        xv, sv = kb.vars[x.text], kb.vars[steps.text]
        xv.expr = kb.var_expr(x.text, xv.expr.with_(iv=Interval(lo, max(x0.iv.hi, 1.0)), vals=xs))
        sv.expr = kb.var_expr(steps.text, sv.expr.with_(iv=Interval(0, kmax), vals=ns))

    # ------------------------------------------------------------------ reads
    def s_neighbour(self, nest: int) -> None:
        """A read at a neighbouring or mirrored index, with bounds handling."""
        kb, g = self.kb, self.g
        arrays = [
            a
            for a in kb.args
            if a.kind == "array" and a.role == "in" and tuple(a.shape) == kb.launch and not a.type.is_matrix
        ]
        if not arrays:
            self.declare_new()
            return
        a = g.pick(arrays)
        dims = len(kb.launch)
        axis = int(self.rng.integers(dims))
        idx = list(kb.tid)
        ids = [e.vals for e in kb.tid_exprs]
        i, iv = idx[axis], ids[axis]
        n = a.shape[axis]
        g.chance(0.6)  # kept: the draw that chose a literal size keeps the rng stream (sizes come from the array)
        size = f"{a.name}.shape[{axis}]"
        off = int(g.pick([1, 1, 1, 2, 3]))
        r = self.rng.random()
        if r < 0.3:
            idx[axis], ids[axis] = f"({i} + {off}) % {size}", np.fmod(iv + off, n)
        elif r < 0.55:
            idx[axis], ids[axis] = f"wp.min({i} + {off}, {size} - 1)", np.minimum(iv + off, n - 1)
        elif r < 0.75:
            idx[axis], ids[axis] = f"wp.max({i} - {off}, 0)", np.maximum(iv - off, 0)
        elif r < 0.9:
            idx[axis], ids[axis] = f"{size} - 1 - {i}", n - 1 - iv
        else:
            idx[axis], ids[axis] = f"wp.clamp({i} - {off}, 0, {size} - 1)", np.clip(iv - off, 0, n - 1)
        e = kb.element(a, ", ".join(idx), tuple(ids))
        kb.declare(role_for(a.type), e)

    # ------------------------------------------------------------------ early return
    def s_early_return(self, nest: int) -> None:
        kb, g = self.kb, self.g
        if not self.outputs:
            self.declare_new()
            return
        cond = g.cond(1)
        kb.begin_if(cond)
        mask = kb.active & kb.full(cond.vals).astype(bool)
        for out in self.outputs:
            self.write_output(out, early=True, mask=mask)
        kb.emit_return(cond.vals)
        kb.end_if()

    # ------------------------------------------------------------------ helper functions
    def s_helper(self, nest: int) -> None:
        t = self.local_type()
        if t.quat:
            t = F32
        self.making_helper = True
        try:
            e = self.new_helper(self, t) if self.new_helper is not None else None
        finally:
            self.making_helper = False
        if e is None:
            self.declare_new(t)
            return
        self.kb.declare(role_for(t), e)

    # ------------------------------------------------------------------ outputs
    def output_value(self, t: WType, early: bool = False, share: float = 1.0) -> Expr:
        """An expression of type ``t`` that uses the variables nothing has used yet (a
        ``share`` of them, when several outputs split them)."""
        kb, g = self.kb, self.g
        parts: list[Expr] = []
        if not early:
            unused = kb.unused_vars()
            take = max(1, int(round(len(unused) * share))) if unused else 0
            for e in [v.expr for v in unused[:take]] + self.unread_inputs():
                c = self._converted(e, t)
                if c is not None:
                    parts.append(c)
        if not parts or self.rng.random() < 0.3:
            extra = g.gen(t, self.expr_depth())
            if not any(p.text == extra.text for p in parts):  # x - y + x: parts must differ
                parts.append(extra)
        e = parts[0]
        for p in parts[1:]:
            e = self.fold(e, p)
        if not e.varying:
            e = g.mix_in_varying(e)
        if t.is_float and e.iv.mag > ops.FLOAT_CAP:
            e = g.fit_mag(e, 100.0)
        return e

    def _converted(self, e: Expr, t: WType, tries: int = 3) -> Expr | None:
        """``e`` as a part of an output of type ``t``: a conversion that keeps what ``e``
        depends on (not, e.g., a cast that truncates it to one integer)."""
        g = self.g
        for _ in range(tries):
            c = to_type(g, e, t)
            if c is None:
                return None
            if t.is_float:
                c = g.fit_mag(c, 200.0)
            if not c.collapsed:
                return c
        return None

    def unread_inputs(self) -> list[Expr]:
        """Per-thread inputs and scalar parameters the kernel has not read yet."""
        kb = self.kb
        if not self.in_kernel or not kb.tid:
            return []
        text = "\n".join(kb.lines)
        out = []
        for a in kb.args:
            if a.role != "in" or re.search(rf"(?<![\w.]){re.escape(a.name)}(?!\w)", text):
                continue
            if a.kind == "scalar":
                out.append(kb.param_expr(a))
            elif tuple(a.shape) == kb.launch:
                out.append(kb.element(a))
        return out

    def fold(self, e: Expr, p: Expr) -> Expr:
        """Combine two values of one type into one (never overflowing, never cancelling)."""
        g, t = self.g, e.type
        # subtracting a value built from what e already holds may cancel it (v - ... - v)
        overlap = set(_NAME.findall(p.text)) <= set(_NAME.findall(e.text))
        choices = [ops.add, ops.add] if overlap else [ops.add, ops.add, ops.sub]
        if t.is_scalar and e.iv.mag <= 20 and p.iv.mag <= 20:
            choices.append(ops.mul)
        for op in (g.pick(choices), ops.add) if overlap else (g.pick(choices), ops.add, ops.sub):
            r = op(e, p)
            if r is not None and (not t.is_float or r.iv.mag <= ops.FLOAT_CAP) and _keeps(r, e):
                return r
        if t.is_float:
            r = ops.add(g.fit_mag(e, 100.0), g.fit_mag(p, 100.0))
            if r is not None and _keeps(r, e):
                return r
        if t.is_scalar or t.is_vector:
            r = ops.binary_fn(g.pick(["max", "min"]), e, p)
            if r is not None and _keeps(r, e):
                return r
        return e

    def write_output(self, out: Arg, early: bool = False, mask: np.ndarray | None = None, share: float = 1.0) -> None:
        """``out[i] = value``; remembers the written sample values (``mask``: which sample
        threads this write is the final one for)."""
        kb = self.kb
        e = self.output_value(out.type, early, share)
        kb.emit(f"{out.name}[{kb.center}] = {e.text}")
        if mask is None:
            mask = kb.active
        prev = self.out_vals.get(out.name)
        vals = kb.full(e.vals)
        if prev is None:
            prev = np.full_like(vals, np.nan)
        self.out_vals[out.name] = nm.select(mask, vals, prev)
