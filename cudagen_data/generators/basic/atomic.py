"""Category "atomic": reductions into accumulators, histograms, scatter-add through an index
array, segment sums, running min/max, bit-mask accumulation, and ``+=`` on array elements.

Every thread first computes its value(s) with the shared statement machinery; one or two
*sinks* then combine the values across threads.  Accumulators whose start value matters
(``atomic_min``/``atomic_max``) are "inout" with a domain on the far side of the data, so
the result always differs from the start.
"""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from . import numeric as nm
from . import ops
from .builder import Arg
from .expr import Expr, const
from .frame import Frame, generate_checked, pick, standard_frame
from .stmts import Profile
from .wtypes import F32, I32, WType, vec

V3 = vec(3)

PROFILE = Profile(
    families={
        "arith": 3.0,
        "trig": 0.6,
        "explog": 0.6,
        "minmax": 1.0,
        "select": 0.8,
        "cast": 0.8,
        "intdiv": 0.6,
        "round": 0.4,
        "vec": 0.6,
        "vec_reduce": 0.6,
        "helper": 0.12,
        "bits": 0.3,
    },
    local_types=((F32, 5.0), (I32, 1.5), (V3, 0.8)),
    stmts={"let": 4.0, "update": 2.0, "if": 0.8, "for": 0.6, "neighbour": 0.6, "helper": 0.3},
    size={"basic": (0, 2, 2, 1), "intermediate": (2, 3, 2, 2), "advanced": (3, 5, 2, 2)},
)

IN_POOL = (F32, F32, F32, I32, V3)
NOUNS = (
    "histogram",
    "counts",
    "totals",
    "bins",
    "energy",
    "mass",
    "votes",
    "forces",
    "scores",
    "bounds",
    "hits",
    "tally",
    "segments",
    "buckets",
)


class Sinks:
    """Accumulator outputs and what the sample threads put into them (for the final check)."""

    def __init__(self, f: Frame):
        self.f = f
        # arg name -> (start values per world, [(world ids, slot ids, contribution, how)])
        self.records: dict[str, tuple[np.ndarray, list]] = {}
        f.extra_checks.append(self.check)

    def add(self, arg: Arg, start: np.ndarray) -> None:
        self.records[arg.name] = (start, [])
        self.f.world_outputs[arg.name] = lambda w, name=arg.name: self.accumulated(name, w)

    def contribute(self, arg: Arg, slots: np.ndarray, vals: np.ndarray, how: str) -> None:
        kb = self.f.kb
        slots = np.broadcast_to(np.asarray(slots, dtype=np.int64), (kb.n_samples,))
        vals = kb.full(np.asarray(vals, dtype=float))
        self.records[arg.name][1].append((kb.world, slots, vals, how))

    def accumulated(self, name: str, w: int) -> np.ndarray:
        """The accumulator ``name`` after the sample threads of world ``w`` added to it."""
        start, contribs = self.records[name]
        acc = start[w].copy().astype(float)
        for world, slots, vals, how in contribs:
            sel = world == w
            for s, v in zip(slots[sel], vals[sel], strict=False):
                if how == "add":
                    acc[s] += v
                elif how == "max":
                    acc[s] = np.maximum(acc[s], v)
                elif how == "min":
                    acc[s] = np.minimum(acc[s], v)
                elif how == "or":
                    acc[s] = float(int(acc[s]) | int(v))
        return acc

    def check(self) -> bool:
        """In every sample world the accumulated array differs from its start and (if it has
        several slots) is not constant."""
        for name, (start, _) in self.records.items():
            for w in range(nm.WORLDS):
                acc = self.accumulated(name, w)
                if not np.all(np.isfinite(acc)) or np.array_equal(acc, start[w]):
                    return False
                flat = acc.reshape(acc.shape[0], -1)
                if acc.shape[0] > 1 and np.all(flat == flat[0]):
                    return False
        return True


def _value(f: Frame, t: WType) -> Expr:
    """The per-thread value to accumulate: uses the locals computed so far."""
    e = f.body.output_value(t)
    if t.is_float:
        e = f.gen.fit_mag(e, 100.0)
    return f.kb.declare("local" if t.is_scalar else "local_vec", e)


def _atomic_call(f: Frame, fn: str, arr: Arg, index: str, value: Expr) -> None:
    """``wp.atomic_add(arr, i, v)`` or its ``arr[i] += v`` / ``-=`` spelling."""
    kb = f.kb
    if fn == "add" and f.rng.random() < 0.4:
        kb.emit(f"{arr.name}[{index}] += {value.text}")
    elif fn == "sub" and f.rng.random() < 0.4:
        kb.emit(f"{arr.name}[{index}] -= {value.text}")
    else:
        kb.emit(f"wp.atomic_{fn}({arr.name}, {index}, {value.text})")


def _sink_reduce(f: Frame, sinks: Sinks) -> None:
    """Sum (or difference) into one slot or a few segment slots."""
    kb, rng = f.kb, f.rng
    t = pick(rng, (F32, F32, F32, V3)) if any(a.type == V3 for a in kb.args) else F32
    v = _value(f, t)
    n_threads = int(np.prod(kb.launch))
    k = int(pick(rng, (1, 1, 2, 4, 8)))
    k = max(1, min(k, n_threads // 4))
    arr = kb.add_array("accum", t, (k,), "out", (0.0, 0.0))
    sinks.add(arr, np.zeros((nm.TOTAL, k) + t.shape))
    lin = kb.tid_exprs[0].vals.astype(np.int64)
    if k == 1:
        index, slots = "0", np.zeros_like(lin)
    elif len(kb.launch) == 1 and rng.random() < 0.5:
        seg = max(1, kb.launch[0] // k)
        index, slots = f"wp.min({kb.tid[0]} // {seg}, {k - 1})", np.minimum(lin // seg, k - 1)
    else:
        index, slots = f"{kb.tid[-1]} % {k}", np.fmod(kb.tid_exprs[-1].vals.astype(np.int64), k)
    fn = pick(rng, ("add", "add", "add", "sub"))
    _atomic_call(f, fn, arr, index, v)
    sinks.contribute(arr, slots, -v.vals if fn == "sub" else v.vals, "add")


def _sink_histogram(f: Frame, sinks: Sinks) -> None:
    """Bin a value into nb bins: counts (int) or weights (float).  The binned value folds in
    the locals computed so far (binning a bare input would leave them reaching nothing)."""
    kb, rng = f.kb, f.rng
    x = _value(f, F32)
    nb = int(pick(rng, (4, 8, 10, 16)))
    lo, hi = nm.stable(np.min(nm.draws(x.vals))), nm.stable(np.max(nm.draws(x.vals)))
    if not hi > lo:
        return
    lo_t, span = float(f"{lo:.2g}"), float(f"{(hi - lo) * 1.05:.2g}")
    if span <= 0:
        return
    rel = ops.div(ops.sub(x, const(F32, lo_t)), const(F32, span)) if lo_t != 0 else ops.div(x, const(F32, span))
    if rel is None:
        return
    scaled = ops.mul(rel, const(F32, float(nb)))
    raw = ops.cast(scaled, I32, style=kb.cast_style)
    if raw is None:
        return
    b = ops.clamp(raw, const(I32, 0), const(I32, nb - 1))
    if b is None:
        return
    bv = kb.declare("local_int", b)
    weighted = rng.random() < 0.4
    t = F32 if weighted else I32
    arr = kb.add_array("accum", t, (nb,), "out", (0.0, 0.0))
    sinks.add(arr, np.zeros((nm.TOTAL, nb)))
    if weighted:
        w = _value(f, F32)
        _atomic_call(f, "add", arr, bv.text, w)
        sinks.contribute(arr, bv.vals, w.vals, "add")
    else:
        _atomic_call(f, "add", arr, bv.text, const(I32, 1))
        sinks.contribute(arr, bv.vals, np.ones(kb.n_samples), "add")


def _sink_scatter(f: Frame, sinks: Sinks) -> None:
    """dst[idx[i]] += v through an index array (a gather/scatter pattern)."""
    kb, rng = f.kb, f.rng
    m = int(pick(rng, (4, 8, 16, 32)))
    m = max(2, min(m, int(np.prod(kb.launch)) // 2))
    idx_arr = kb.add_array("in_int", I32, kb.launch, "in", (0.0, float(m - 1)))
    index = kb.element(idx_arr)
    v = _value(f, F32)
    arr = kb.add_array("accum", F32, (m,), "out", (0.0, 0.0))
    sinks.add(arr, np.zeros((nm.TOTAL, m)))
    if rng.random() < 0.5:
        slot = index  # the domain guarantees 0 <= idx < m
        text = slot.text
    else:
        clamped = ops.clamp(index, const(I32, 0), const(I32, m - 1))
        text = (kb.declare("local_int", clamped) if clamped is not None else index).text
    _atomic_call(f, "add", arr, text, v)
    sinks.contribute(arr, index.vals, v.vals, "add")


def _sink_minmax(f: Frame, sinks: Sinks) -> None:
    """Running minimum / maximum across threads (start value beyond the data)."""
    kb, rng = f.kb, f.rng
    v = _value(f, F32)
    if len(np.unique(nm.draws(v.vals))) < 0.5 * len(nm.draws(v.vals)):
        # a value with few distinct levels makes every slot's extreme the same level
        return _sink_reduce(f, sinks)
    fn = pick(rng, ("max", "min"))
    # a few threads per slot: the extreme of many is decided by a few threads, and what
    # feeds only the others would reach nothing
    index, slots, k = _group_slots(f)
    lo, hi = v.iv.lo, v.iv.hi
    # the start lies on the far side of every value the thread can produce
    dom = (lo - 20.0, lo - 10.0) if fn == "max" else (hi + 10.0, hi + 20.0)
    arr = kb.add_array("accum", F32, (k,), "inout", (float(f"{dom[0]:.3g}"), float(f"{dom[1]:.3g}")))
    start = arr.data.reshape(nm.TOTAL, k)
    sinks.add(arr, start)
    kb.emit(f"wp.atomic_{fn}({arr.name}, {index}, {v.text})")
    sinks.contribute(arr, slots, v.vals, fn)


def _sink_bits(f: Frame, sinks: Sinks) -> None:
    """Set one bit per thread in int masks shared by a few neighbouring threads
    (wp.atomic_or).  The bit folds in the locals computed so far.  Few threads per mask:
    with many, every bit of a mask is set whatever the inputs (all-ones, input-blind)."""
    kb, g, rng = f.kb, f.gen, f.rng
    code = _value(f, I32)
    bit = ops.int_div("%", g.fit_nonneg(code), const(I32, int(pick(rng, (8, 16, 31)))))
    if bit is None or not bit.varying:
        return
    bv = kb.declare("local_int", bit)
    index, slots, k = _group_slots(f)
    arr = kb.add_array("accum", I32, (k,), "out", (0.0, 0.0))
    sinks.add(arr, np.zeros((nm.TOTAL, k)))
    kb.emit(f"wp.atomic_or({arr.name}, {index}, 1 << {bv.text})")
    sinks.contribute(arr, slots, 2.0**bv.vals, "or")


THREADS_PER_SLOT = 4


def _group_slots(f: Frame) -> tuple[str, np.ndarray, int]:
    """(index text, slot of each sample thread, number of slots): THREADS_PER_SLOT
    neighbouring threads share an accumulator slot.  Along the first launch axis the slots
    grow with the launch (a row of slots per index), so the kernel runs at other sizes; a
    1-D launch clamps the index to its last slot instead."""
    kb = f.kb
    ids = [e.vals.astype(np.int64) for e in kb.tid_exprs]
    if len(kb.launch) == 1:
        k = -(-kb.launch[0] // THREADS_PER_SLOT)
        text = f"wp.min({kb.tid[0]} // {THREADS_PER_SLOT}, {k - 1})"
        return text, np.minimum(ids[0] // THREADS_PER_SLOT, k - 1), k
    rest = int(np.prod(kb.launch[1:]))
    per_row = -(-rest // THREADS_PER_SLOT)
    if len(kb.launch) == 2:
        inner, inner_ids = kb.tid[1], ids[1]
    else:
        inner = f"({kb.tid[1]} * {kb.launch[2]} + {kb.tid[2]})"
        inner_ids = ids[1] * kb.launch[2] + ids[2]
    text = f"{kb.tid[0]} * {per_row} + {inner} // {THREADS_PER_SLOT}"
    return text, ids[0] * per_row + inner_ids // THREADS_PER_SLOT, kb.launch[0] * per_row


def _sink_columns(f: Frame, sinks: Sinks) -> None:
    """2-D launch: per-column (or per-row) sums of a value."""
    kb, rng = f.kb, f.rng
    if len(kb.launch) != 2:
        return _sink_reduce(f, sinks)
    axis = int(rng.integers(2))
    n = kb.launch[axis]
    v = _value(f, F32)
    arr = kb.add_array("accum", F32, (n,), "out", (0.0, 0.0))
    sinks.add(arr, np.zeros((nm.TOTAL, n)))
    _atomic_call(f, "add", arr, kb.tid[axis], v)
    sinks.contribute(arr, kb.tid_exprs[axis].vals, v.vals, "add")


# Running min/max accumulators and bit masks make a kernel forward-only (no gradient through
# them in Warp): a ninth each, so that most atomic rows ship a verified backward.
SINKS = (
    _sink_reduce,
    _sink_reduce,
    _sink_reduce,
    _sink_histogram,
    _sink_scatter,
    _sink_scatter,
    _sink_minmax,
    _sink_bits,
    _sink_columns,
)


def _build(rng: np.random.Generator) -> Frame:
    f = standard_frame(
        rng,
        "atomic",
        PROFILE,
        IN_POOL,
        (F32,),
        dims=(1, 1, 1, 2, 2),
        n_in=(1, 3),
        n_out=(0, 0),
        param_pool=(F32,),
        n_params=(0, 0, 1),
        first_in=F32,
        nouns=NOUNS,
    )
    sinks = Sinks(f)
    f.body.body()
    n_sinks = 1 if rng.random() < 0.65 else 2
    for _ in range(n_sinks):
        pick(rng, SINKS)(f, sinks)
    if not sinks.records:
        _sink_reduce(f, sinks)
    if rng.random() < 0.25:
        out = f.add_output(F32)  # also a per-thread result next to the accumulators
        f.body.write_output(out)
    return f


def generate(rng: np.random.Generator) -> KernelSpec:
    return generate_checked(rng, _build)
