"""Emitting one kernel: arguments, thread indices, statements, helper functions.

:class:`KernelBuilder` writes source lines while tracking, for every local variable, what
is known about its value (an :class:`Expr` whose text is the variable's name): a sound
interval and its values on the sample threads (see ``numeric.py``).  Control flow updates
that knowledge:

- ``if``/``elif``/``else``: each branch starts from the state before the ``if``; afterwards
  a variable's interval is the union over the branches (and the state before, if there is
  no ``else``); its sample values are selected per thread by the branch conditions.
- loops: the outer variables a loop body may update are declared when the loop opens and
  *locked* (not readable) until it closes; their updates are recorded as per-iteration
  contributions (add / set / min-max / contraction), and the loop end turns "0 to K
  iterations of that" into an interval, so loop bodies cannot grow values unboundedly.
  Sample values after a loop are an estimate (trip count times the contribution).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ...spec import DTYPES, ArgSpec
from . import numeric as nm
from .expr import PREC_ATOM, Expr
from .interval import Interval
from .names import NameAllocator
from .ops import fits_type
from .wtypes import WType

MAX_SAMPLES = 32


def _is_call(text: str) -> bool:
    """``wp.float64(2.0)``-style text: a single constructor call around a literal."""
    return bool(re.fullmatch(r"[\w.]+\([^()]*\)", text))


_IDENT = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)")
_ASSIGN_TARGET = re.compile(r"^\s*[A-Za-z_]\w*(\[[^\]]*\]|\.[A-Za-z_]\w*)?\s*(?:=|\+=|-=|\*=)\s")


@dataclass
class Arg:
    """A kernel parameter (array or scalar) and the sample data drawn for it."""

    name: str
    kind: str  # "array" | "scalar"
    type: WType
    shape: tuple[int, ...] = ()
    role: str = "in"
    domain: tuple[float, float] = (-1.0, 1.0)
    ndim_style: str = "suffix"  # arrays: "suffix" -> wp.array2d(...), "kw" -> wp.array(..., ndim=2)
    data: np.ndarray | None = field(default=None, repr=False)
    probe: int | None = None  # the probe world that redraws this input (numeric.PROBES)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def annotation(self, short: bool) -> str:
        dt = self.type.annotation(short)
        if self.kind == "scalar":
            return dt
        if self.ndim == 1:
            return f"wp.array(dtype={dt})"
        if self.ndim_style == "kw":
            return f"wp.array(dtype={dt}, ndim={self.ndim})"
        return f"wp.array{self.ndim}d(dtype={dt})"

    def spec(self) -> ArgSpec:
        return ArgSpec(
            name=self.name,
            kind=self.kind,
            dtype=self.type.spec_dtype,
            shape=tuple(self.shape) if self.kind == "array" else (),
            role=self.role if self.kind == "array" else "in",
            domain=(float(self.domain[0]), float(self.domain[1])),
        )

    @property
    def interval(self) -> Interval:
        return Interval(float(self.domain[0]), float(self.domain[1]))


def draw(rng: np.random.Generator, t: WType, domain: tuple[float, float], shape: tuple[int, ...]) -> np.ndarray:
    """Values drawn the way the executor draws inputs (uniform; integers for int types)."""
    comp = DTYPES[t.spec_dtype][1] if t.storable else t.shape
    full = tuple(shape) + tuple(comp)
    lo, hi = domain
    if t.is_int:
        return rng.integers(int(math.ceil(lo)), int(math.floor(hi)) + 1, size=full).astype(float)
    return rng.uniform(lo, hi, size=full)


def draw_worlds(
    rng: np.random.Generator, t: WType, domain: tuple[float, float], shape: tuple[int, ...], probe: int | None
) -> np.ndarray:
    """One draw per world (numeric.py): the independent draws, then the probe worlds, which
    repeat world 0's, except probe world ``probe`` where this input is drawn again (a
    different value, for a scalar whose domain has another)."""
    first = draw(rng, t, domain, (nm.WORLDS,) + tuple(shape))
    out = np.concatenate([first, np.repeat(first[:1], nm.PROBES, axis=0)])
    if probe is not None:
        again = draw(rng, t, domain, (1,) + tuple(shape))[0]
        for _ in range(8):  # a scalar (or a one-element array) may come out the same
            if again.size > 1 or not np.array_equal(again, first[0]):
                break
            again = draw(rng, t, domain, (1,) + tuple(shape))[0]
        out[nm.WORLDS + probe] = again
    return out


@dataclass
class Var:
    """A local variable: what is known about its current value."""

    name: str
    expr: Expr
    loop_depth: int  # number of enclosing loops at declaration
    block_depth: int  # number of enclosing blocks (if/loop) at declaration
    uses: int = 0
    moving: bool = False  # declared in a loop body from values that change between its iterations


@dataclass
class _LoopFrame:
    max_trips: int
    trips: np.ndarray  # estimated trip count per sample thread
    mutable: tuple[str, ...] = ()  # outer variables the body may update (locked while inside)
    # outer variables already updated in this body: each is updated at most once per
    # iteration, which keeps the per-iteration effect a single, soundly summarized update
    updated: dict[str, None] = field(default_factory=dict)
    # variable name -> (kind, interval, sample contribution): kind "add" (per-iteration sum),
    # "set" (assigned value), "min"/"max", or "decay:<c>" (x = c*x + e).
    updates: dict[str, tuple[str, Interval, np.ndarray]] = field(default_factory=dict)


@dataclass
class _IfFrame:
    before: dict[str, Expr]
    conds: list[np.ndarray] = field(default_factory=list)
    branch_states: list[dict[str, Expr]] = field(default_factory=list)
    has_else: bool = False


class KernelBuilder:
    """Accumulates the source of one kernel (and its helper functions)."""

    def __init__(self, rng: np.random.Generator, names: NameAllocator | None = None, short_annot: bool | None = None):
        self.rng = rng
        self.names = names or NameAllocator(rng)
        self.short_annot = bool(rng.random() < 0.6) if short_annot is None else short_annot
        # one spelling of float32/int32 conversions per kernel: float(x) or wp.float32(x)
        self.cast_style = "short" if self.short_annot == (rng.random() < 0.8) else "ctor"
        self.args: list[Arg] = []
        self.lines: list[str] = []
        self.helpers: list[str] = []  # complete source blocks of @wp.func definitions
        self.structs: list[str] = []  # complete source blocks of @wp.struct definitions
        self.indent = 1
        self.vars: dict[str, Var] = {}
        self.block_depth = 0
        self.loops: list[_LoopFrame] = []
        self.ifs: list[_IfFrame] = []
        self.locked: dict[str, int] = {}  # var name -> loop depth that locked it
        self.loop_vars: list[Expr] = []
        self.launch: tuple[int, ...] = ()
        self.tid: tuple[str, ...] = ()
        self.tid_exprs: tuple[Expr, ...] = ()
        self.sample_ids: tuple[np.ndarray, ...] = ()  # per launch dim: index of each sample thread
        self.world = np.zeros(1, dtype=np.int64)  # which input draw each sample thread belongs to
        self._own_elements: dict[str, Expr] = {}
        self.n_samples = 1
        self.active = np.ones(1, dtype=bool)  # sample threads that have not returned
        self.returned = False  # set after a return (nothing may follow in that block)

    # ------------------------------------------------------------------ arguments
    def add_array(
        self,
        role_pool: str,
        t: WType,
        shape: tuple[int, ...],
        role: str = "in",
        domain: tuple[float, float] = (-1.0, 1.0),
        name: str | None = None,
    ) -> Arg:
        ndim_style = "kw" if self.rng.random() < 0.25 else "suffix"
        arg = Arg(name or self.names.fresh(role_pool), "array", t, tuple(shape), role, domain, ndim_style)
        if role != "out":
            arg.probe = self._probe_slot() if role == "in" else None
            arg.data = draw_worlds(self.rng, t, domain, tuple(shape), arg.probe)  # one draw per sample world
        self.args.append(arg)
        return arg

    def add_scalar(self, role_pool: str, t: WType, domain: tuple[float, float]) -> tuple[Arg, Expr]:
        arg = Arg(self.names.fresh(role_pool), "scalar", t, (), "in", domain)
        arg.probe = self._probe_slot()
        arg.data = draw_worlds(self.rng, t, domain, (), arg.probe)
        self.args.append(arg)
        return arg, self.param_expr(arg)

    def _probe_slot(self) -> int:
        """Inputs take the probe worlds in turn (more inputs than probes share them)."""
        return sum(a.probe is not None for a in self.args) % nm.PROBES

    def param_expr(self, arg: Arg) -> Expr:
        """A scalar parameter: the same value for every thread of a world."""
        per_thread = max(1, self.n_samples // nm.TOTAL)
        vals = np.repeat(arg.data, per_thread, axis=0) if self.n_samples > 1 else arg.data[:1]
        return Expr(arg.name, arg.type, arg.interval, vals=vals)

    def scalar_params(self, t: WType) -> list[Expr]:
        return [self.param_expr(a) for a in self.args if a.kind == "scalar" and a.type == t]

    # ------------------------------------------------------------------ threads
    def set_launch(self, dims: tuple[int, ...]) -> tuple[Expr, ...]:
        """Emit the ``wp.tid()`` line; pick the sample threads; return the index expressions."""
        self.launch = tuple(dims)
        role = {1: "tid1", 2: "tid2", 3: "tid3"}[len(dims)]
        self.tid = (self.names.fresh(role),) if len(dims) == 1 else self.names.fresh_group(role)
        self.emit(f"{', '.join(self.tid)} = wp.tid()")
        total = int(np.prod(dims))
        n = min(MAX_SAMPLES, total)
        drawn = [np.sort(self.rng.choice(total, size=n, replace=False)) for _ in range(nm.WORLDS)]
        linear = np.concatenate(drawn + [drawn[0]] * nm.PROBES)  # probe worlds: world 0's threads
        self.world = np.repeat(np.arange(nm.TOTAL), n)
        self.sample_ids = tuple(np.unravel_index(linear, dims))
        self.n_samples = n * nm.TOTAL
        self.active = np.ones(self.n_samples, dtype=bool)
        self.tid_exprs = tuple(
            Expr(name, WType("int32"), Interval(0, d - 1), vals=ids.astype(float))
            for name, d, ids in zip(self.tid, dims, self.sample_ids, strict=False)
        )
        return self.tid_exprs

    @property
    def center(self) -> str:
        """Index text of the current thread's own element."""
        return ", ".join(self.tid)

    def element(self, arg: Arg, index: str | None = None, index_vals: tuple[np.ndarray, ...] | None = None) -> Expr:
        """``arg[index]`` (default: the thread's own element) with its sample values."""
        if index is None:
            cached = self._own_elements.get(arg.name)
            if cached is None:
                cached = self._own_elements[arg.name] = self.element(arg, self.center, self.sample_ids)
            return cached
        idx = index
        ids = self.sample_ids if index_vals is None else index_vals
        ids = tuple(np.broadcast_to(np.asarray(i, dtype=np.int64), (self.n_samples,)) for i in ids)
        vals = arg.data[(self.world,) + ids]
        return Expr(f"{arg.name}[{idx}]", arg.type, arg.interval, vals=vals)

    # ------------------------------------------------------------------ emission
    def emit(self, line: str) -> None:
        if self.returned:
            raise RuntimeError("statement after return")
        self.lines.append("    " * self.indent + line)
        self._count_uses(line)

    def _count_uses(self, line: str) -> None:
        """Count reads of local variables in an emitted line (the assigned name is not a read)."""
        m = _ASSIGN_TARGET.match(line)
        rest = line[m.end() :] if m else line
        if m and m.group(1):
            rest = m.group(1) + " " + rest  # indices of an element assignment are reads
        for name in _IDENT.findall(rest):
            v = self.vars.get(name) or self.vars.get(name.split(".")[0])  # struct fields are "s.field"
            if v is not None:
                v.uses += 1

    def full(self, vals: np.ndarray) -> np.ndarray:
        """Sample values with the thread dimension materialized."""
        return np.broadcast_to(vals, (self.n_samples,) + vals.shape[1:]).copy()

    def var_expr(self, name: str, e: Expr) -> Expr:
        return Expr(
            name, e.type, e.iv, PREC_ATOM, size=1, min_norm=e.min_norm, unit=e.unit, det_lo=e.det_lo, vals=e.vals
        )

    def declare(self, role: str, e: Expr, name: str | None = None, mutable: bool = False) -> Expr:
        """``name = e``; returns the variable as an expression.  A literal value is bound
        through its constructor (``float(0.0)``): Warp re-types a variable bound to a bare
        literal at its first typed use and refuses to mutate it inside a dynamic loop."""
        name = name or self.names.fresh(role)
        text = e.text
        if e.literal and e.type.is_scalar and not _is_call(text):
            ctor = {"float32": "float", "int32": "int"}.get(e.type.scalar) if self.cast_style == "short" else None
            text = f"{ctor or e.type.ctor}({e.text})"
        elif e.literal and not e.type.is_scalar and not text.startswith("wp."):
            text = f"{e.type.ctor}({e.text})"
        self.emit(f"{name} = {text}")
        v = self.var_expr(name, e)
        self.vars[name] = Var(name, v, len(self.loops), self.block_depth, moving=self.reads_moving(text))
        return v

    def moving_names(self) -> set[str]:
        """Names whose values change from one iteration of the innermost loop to the next:
        its variable and the locals of its body computed from them."""
        if not self.loops:
            return set()
        level = len(self.loops)
        return {e.text for e in self.loop_vars[-1:]} | {
            n for n, v in self.vars.items() if v.loop_depth >= level and v.moving
        }

    def reads_moving(self, text: str) -> bool:
        """Whether ``text`` reads a value that changes between iterations of the innermost loop."""
        return bool(self.loops) and not self.moving_names().isdisjoint(_IDENT.findall(text))

    def unused_vars(self) -> list[Var]:
        return [v for v in self.vars.values() if v.uses == 0 and v.name not in self.locked]

    def may_update(self, v: Var) -> bool:
        """Inside loops only loop-local variables and the loops' declared mutables change.
        Struct fields ("s.field") are written once, where the struct is filled in."""
        if "." in v.name:
            return False
        if v.loop_depth == len(self.loops):
            return v.name not in self.locked
        # updates are recorded in the innermost loop: it must have declared the variable
        return v.name in self.loops[-1].mutable and v.name not in self.loops[-1].updated

    def readable_vars(self, t: WType | None = None) -> list[Var]:
        return [v for v in self.vars.values() if v.name not in self.locked and (t is None or v.expr.type == t)]

    # ------------------------------------------------------------------ updates
    def update(
        self, name: str, op: str, e: Expr, result: Expr | None = None, decay: float = 0.0, text: str | None = None
    ) -> None:
        """Emit an update of an existing variable and record what it does to its value.

        ``op``: "=" (set), "+=", "-=", "*=" (accumulate/scale), "min"/"max" (the caller
        passes ``result`` = ``wp.max(x, e)``), or "decay" (``result`` = ``c * x + e``).
        ``text`` overrides the emitted line.
        """
        var = self.vars[name]
        in_loop = var.loop_depth < len(self.loops)
        if text is not None:
            self.emit(text)
        elif op in ("+=", "-=", "*="):
            self.emit(f"{name} {op} {e.text}")
        elif op == "=":
            self.emit(f"{name} = {e.text}")
        else:
            assert result is not None
            self.emit(f"{name} = {result.text}")
        if in_loop:
            self._record_loop_update(name, op, e, decay)
            return
        var.moving = var.moving or self.reads_moving(self.lines[-1])
        old = var.expr
        if op == "=":
            new = e
        elif op in ("+=", "-=", "*="):
            if op == "+=":
                iv, vals = old.iv + e.iv, old.vals + e.vals
            elif op == "-=":
                iv, vals = old.iv - e.iv, old.vals - e.vals
            else:
                iv, vals = old.iv * e.iv, old.vals * nm.expand(e.vals, len(old.type.shape))
            new = old.with_(iv=iv, vals=vals, unit=False, min_norm=0.0, det_lo=0.0)
        else:
            new = result
        var.expr = self.var_expr(name, new)
        var.uses = 0  # the new value has not been read yet

    def _record_loop_update(self, name: str, op: str, e: Expr, decay: float) -> None:
        frame = self.loops[-1]
        kind = {"+=": "add", "-=": "add", "=": "set", "min": "min", "max": "max", "*=": "set"}.get(op, f"decay:{decay}")
        iv = -e.iv if op == "-=" else e.iv
        vals = -e.vals if op == "-=" else e.vals
        if name in frame.updated:
            raise RuntimeError(f"{name} updated twice in one loop iteration")
        frame.updates[name] = (kind, iv, vals)
        frame.updated[name] = None
        self.locked.setdefault(name, len(self.loops))

    # ------------------------------------------------------------------ blocks
    def _push_block(self) -> None:
        self.indent += 1
        self.block_depth += 1

    def _pop_block(self) -> None:
        self.indent -= 1
        self.block_depth -= 1
        for name in [n for n, v in self.vars.items() if v.block_depth > self.block_depth]:
            del self.vars[name]

    def _state(self) -> dict[str, Expr]:
        return {n: v.expr for n, v in self.vars.items() if n not in self.locked}

    def _restore(self, state: dict[str, Expr]) -> None:
        for n, e in state.items():
            if n in self.vars:
                self.vars[n].expr = e

    def begin_if(self, cond: Expr, keyword: str = "if") -> None:
        self.emit(f"{keyword} {cond.text}:")
        self.ifs.append(_IfFrame(before=self._state(), conds=[self.full(cond.vals).astype(bool)]))
        self._push_block()

    def begin_elif(self, make_cond) -> None:
        """``make_cond()`` builds the condition once the previous branch's locals are gone."""
        frame = self.ifs[-1]
        self._close_branch(frame)
        cond = make_cond()
        frame.conds.append(self.full(cond.vals).astype(bool))
        self.emit(f"elif {cond.text}:")
        self._push_block()

    def begin_else(self) -> None:
        frame = self.ifs[-1]
        self._close_branch(frame)
        frame.has_else = True
        self.emit("else:")
        self._push_block()

    def _close_branch(self, frame: _IfFrame) -> None:
        self._pop_block()
        self.returned = False
        frame.branch_states.append(self._state())
        self._restore(frame.before)

    def end_if(self) -> None:
        frame = self.ifs.pop()
        self._close_branch(frame)
        # which branch each sample thread takes
        taken = np.zeros(self.n_samples, dtype=bool)
        masks = []
        for c in frame.conds:
            masks.append(c & ~taken)
            taken |= c
        if frame.has_else:
            masks.append(~taken)
        states = frame.branch_states if frame.has_else else frame.branch_states + [frame.before]
        for name, before in frame.before.items():
            if name not in self.vars:
                continue
            es = [s.get(name, before) for s in states]
            iv = es[0].iv
            for e in es[1:]:
                iv = iv.union(e.iv)
            vals = self.full(before.vals)
            for mask, e in zip(masks, es, strict=False):
                vals = nm.select(mask, self.full(e.vals), vals)
            merged = before.with_(
                iv=iv,
                vals=vals,
                unit=all(e.unit for e in es),
                min_norm=min(e.min_norm for e in es),
                det_lo=min(e.det_lo for e in es),
            )
            self.vars[name].expr = self.var_expr(name, merged)
            if any(e is not before for e in es):
                self.vars[name].uses = min(self.vars[name].uses, 0)

    def begin_loop(
        self,
        header: str,
        max_trips: int,
        trips: np.ndarray,
        loop_var: Expr | None = None,
        mutable: tuple[str, ...] = (),
    ) -> None:
        """Open a loop.  ``mutable`` names the outer variables the body may update: they are
        locked (not readable) for the whole body, so no read sees a value from a later
        iteration that the interval analysis did not account for."""
        self.emit(header)
        self.loops.append(
            _LoopFrame(
                max_trips=max_trips, trips=self.full(np.asarray(trips, dtype=float).reshape(-1)), mutable=tuple(mutable)
            )
        )
        for name in mutable:
            self.locked.setdefault(name, len(self.loops))
        self._push_block()
        if loop_var is not None:
            self.loop_vars.append(loop_var)

    def end_loop(self, has_loop_var: bool = True) -> None:
        frame = self.loops.pop()
        self._pop_block()
        self.returned = False
        if has_loop_var:
            self.loop_vars.pop()
        k = frame.max_trips
        trips = frame.trips
        for name, (kind, contrib, cvals) in frame.updates.items():
            var = self.vars.get(name)
            if var is None:
                continue
            if kind == "add":
                total = Interval(min(0.0, k * contrib.lo), max(0.0, k * contrib.hi))
                tvals = nm.expand(trips, cvals.ndim - 1) * cvals
            else:
                total, tvals = contrib, cvals
            if var.loop_depth < len(self.loops):
                # declared outside an enclosing loop too: the whole inner loop is one update
                # of the enclosing loop's iteration (0..K times the contribution for "add")
                parent = self.loops[-1]
                if name in parent.updated:
                    raise RuntimeError(f"{name} updated twice in one loop iteration")
                parent.updates[name] = (kind, total, tvals)
                parent.updated[name] = None
                continue
            old = var.expr
            ran = nm.expand(trips > 0, cvals.ndim - 1)
            if kind == "add":
                iv, vals = old.iv + total, old.vals + tvals
            elif kind in ("set", "min", "max"):
                iv = old.iv.union(total)
                if kind == "set":
                    new_vals = cvals
                else:
                    new_vals = np.minimum(old.vals, cvals) if kind == "min" else np.maximum(old.vals, cvals)
                vals = np.where(ran, new_vals, old.vals)
            else:  # decay: x <- c*x + e keeps |x| <= max(|x0|, |e|/(1-c))
                c = float(kind.split(":")[1])
                bound = max(old.iv.mag, total.mag / (1.0 - c))
                iv = Interval(-bound, bound)
                ck = nm.expand(c**trips, cvals.ndim - 1)
                vals = old.vals * ck + cvals * (1.0 - ck) / (1.0 - c)
            var.expr = self.var_expr(name, old.with_(iv=iv, vals=self.full(vals), unit=False, min_norm=0.0, det_lo=0.0))
            var.uses = 0
        depth = len(self.loops)
        for name in [n for n, d in self.locked.items() if d > depth]:
            del self.locked[name]

    def loop_safe(self, iv: Interval, t: WType) -> bool:
        """Whether an interval is fine for a value of type ``t``."""
        return fits_type(t, iv)

    def emit_return(self, cond_vals: np.ndarray | None = None) -> None:
        self.emit("return")
        self.returned = True
        if cond_vals is not None:
            self.active = self.active & ~self.full(cond_vals).astype(bool)
