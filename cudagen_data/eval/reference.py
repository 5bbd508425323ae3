"""What a candidate's results are compared with: per row, input sets and their reference
results, computed on the CPU from the row's original Python kernel, at every recorded size.

At each size (launch dims, block dim and argument shapes: the row's test vectors):

- ``recorded``: the row's recorded inputs and output gradients; the expected values are
  the recorded outputs and input gradients.
- ``fresh 1..K``: inputs drawn from the row's argument specifications with the eval
  run's secret seed (a candidate cannot have seen them).  K is at least ``fresh_sets``
  and at least ``MIN_RANDOM_DRAWS / sizes``, so a row with one recorded size still gets
  ``MIN_RANDOM_DRAWS`` independent draws: a candidate right on a fraction p of random
  inputs passes them all with probability p**MIN_RANDOM_DRAWS (< 0.03% at p = 1/2).
- ``adversarial low|high @ random|last|last block``: inputs that defeat partial work
  on outputs that reduce (sums, minima, maxima, scans, atomics).  Every float input
  array, and every integer one whose domain holds more than one value, holds a narrow
  background on one side of its domain and one decisive element at the domain's other
  end, at the same flat element position in every array: a random
  one, the last, or a random one among the last block (``block`` elements, the launch's
  block size).  ``low``: background in the upper half, the element at the domain's low
  end (the minimum, and the element that moves a sum most); ``high``: mirrored (the
  maximum).  A kernel that skips the element's thread, block or last index misses it.
  They carry no output gradients: they judge the forward (and expect outputs only).

Expected values of the drawn sets come from running the original Python kernel on
Warp's CPU backend; for every set the float32 kernel and its float64 twin (numerics/twin.py)
run on the CPU, so the GPU suite's tolerance model (numerics/tolerance.py) measures each
array's float32 error.  A drawn set on which the row's own kernel fails its own checks
(a NaN, a launch error) is drawn again (``DRAW_TRIES``), then left out with a note.
One CPU build per row serves every set and every candidate of that row.

The recorded sets are computed at once; the drawn ones can be computed when the judge
first needs them (``compute_reference(lazy=True)``, the eval workers): in the order the
judge runs them, each once, kept for every later candidate of the row.  A candidate that
fails on a recorded set costs none of them.  Each set's draw depends only on the seed,
the row, the size and its name, so the sets are the same computed early or late.  The
kernels run a backward only where the judge compares gradients: recorded and fresh sets
of a row that ships a backward (run.planned_runs); without one the CPU build has no
adjoints.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import xxhash

from .. import warp_boundary
from ..contracts.read import row_to_spec
from ..contracts.row import Row
from ..contracts.test_vectors import TestVectors
from ..execution import CPU_OPT_LEVEL, draw_value, run_kernel
from ..extract import DEFAULT_BLOCK_DIM
from ..gpu.worker import checked_twin
from ..numerics.twin import NativeFloat64, TwinUnavailable, widen_all
from ..spec import DTYPES, ArgSpec, KernelSpec, is_float_dtype

DEFAULT_FRESH_SETS = 4  # fresh random input sets per recorded size (``cudagen eval --fresh-sets``)
MIN_RANDOM_DRAWS = 12  # fresh random sets per row over all its sizes, at least
ADVERSARIAL_PLACES = ("random", "last", "last block")
ADVERSARIAL_SIDES = ("low", "high")
DRAW_TRIES = 3  # draws tried for one set before it is left out (reported)


class ReferenceUnavailable(Exception):
    """The row's own kernel cannot be run on the CPU (one line; not the candidate's fault)."""


@dataclass
class RecordedSize:
    """One recorded problem size of a row: its spec (launch, block dim, shapes) and vectors."""

    spec: KernelSpec
    inputs: dict
    outputs: dict
    output_grads: dict
    input_grads: dict


@dataclass
class InputSet:
    name: str  # "recorded", "fresh 3", "adversarial low @ last"
    inputs: dict
    output_grads: dict
    expected: dict[str, np.ndarray]  # outputs and input gradients ("<name>.grad")
    cpu32: dict[str, np.ndarray] = field(default_factory=dict)  # empty: no twin
    ref64: dict[str, np.ndarray] = field(default_factory=dict)
    spec: KernelSpec | None = None  # the size it runs at (launch, block dim, shapes); None: the row's
    size: int = 0  # index of that size among the row's recorded sizes

    @property
    def kind(self) -> str:
        return self.name.split(" ", 1)[0]

    @property
    def label(self) -> str:
        """How a failure names the set: ``fresh 2 inputs (launch 300)``."""
        launch = "x".join(str(d) for d in self.spec.launch_dim) if self.spec is not None else "?"
        return f"{self.name} inputs (launch {launch})"


@dataclass(frozen=True)
class Draw:
    """A drawn set of the judge's plan: the size it runs at, its name and, for an
    adversarial set, the side and place of its decisive element."""

    size: int
    name: str
    side: str | None = None
    place: str | None = None


@dataclass
class Reference:
    spec: KernelSpec
    sets: list[InputSet]  # the sets computed so far, in the order the judge runs them
    twin: str = "ok"  # or why there is none
    native64: bool = False
    notes: list[str] = field(default_factory=list)
    sizes: list[tuple[int, ...]] = field(default_factory=list)  # launch dims of the recorded sizes
    pending: list[Draw] = field(default_factory=list)  # drawn sets not computed yet, in judging order
    seconds: float = 0.0  # CPU time spent computing its sets so far
    known_notes: int = 0  # notes known before any drawn set (what a failing candidate reports)
    _compute: Callable[[Draw], InputSet | None] | None = field(default=None, repr=False)
    _release: contextlib.ExitStack | None = field(default=None, repr=False)

    def set_at(self, k: int) -> InputSet | None:
        """The ``k``-th set the judge runs (None past the last), computing pending drawn
        sets in order until it exists."""
        while k >= len(self.sets) and self.pending:
            t0 = time.perf_counter()
            s = self._compute(self.pending[0])
            self.pending.pop(0)  # only once computed: a set that raised is tried again, not skipped
            self.seconds += time.perf_counter() - t0
            if s is not None:
                self.sets.append(s)
            if not self.pending:
                self._finish()
                self.close()  # every set computed: the CPU module is no longer needed
        return self.sets[k] if k < len(self.sets) else None

    def iter_sets(self) -> Iterator[InputSet]:
        k = 0
        while (s := self.set_at(k)) is not None:
            yield s
            k += 1

    def complete(self) -> Reference:
        """Every set computed (and the CPU module released)."""
        self.set_at(1 << 62)
        return self

    @property
    def done(self) -> bool:
        return not self.pending

    def _finish(self) -> None:
        if not any(s.kind == "fresh" for s in self.sets):
            self.notes.append("no fresh inputs on which the row's kernel passes its own checks; recorded inputs only")

    def close(self) -> None:
        """Release the CPU module that computes pending sets (a lazy reference)."""
        if self._release is not None:
            release, self._release = self._release, None
            release.close()

    def summary(self, ran: int | None = None) -> dict:
        """How many sets of each kind run (``ran``: the first that many), and at which
        sizes (the report states it)."""
        sets = self.sets if ran is None else self.sets[:ran]
        counts = {k: sum(s.kind == k for s in sets) for k in ("recorded", "fresh", "adversarial")}
        return {"sets": len(sets), **counts, "sizes": [list(d) for d in self.sizes]}


def grad_key(name: str) -> str:
    return f"{name}.grad"


def draw_rng(seed: int, row_id: str, size: int, name: str, attempt: int) -> np.random.Generator:
    """The generator of one drawn set: the secret seed, the row, the size, the set, the try."""
    row_hash, name_hash = xxhash.xxh64_intdigest(row_id.encode()), xxhash.xxh32_intdigest(name.encode())
    return np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, row_hash, size, name_hash, attempt])


def draw_fresh(spec: KernelSpec, rng: np.random.Generator) -> tuple[dict, dict]:
    inputs = {a.name: draw_value(a, rng) for a in spec.args}
    grads = {}
    for a in spec.args:
        if a.kind == "array" and is_float_dtype(a.dtype) and a.role != "in":
            np_dtype, comp = DTYPES[a.dtype]
            grads[a.name] = rng.uniform(-1.0, 1.0, size=tuple(a.shape) + comp).astype(np_dtype)
    return inputs, grads


def spiked_arrays(spec: KernelSpec) -> list[ArgSpec]:
    """The arrays an adversarial draw shapes: inputs (role in or inout) of a float type,
    and of an integer type whose domain holds more than one value (integer minima, maxima,
    sums and atomics reduce too)."""
    return [a for a in spec.args if a.kind == "array" and a.role != "out"
            and (is_float_dtype(a.dtype) or (_is_integer(a.dtype) and a.domain[0] < a.domain[1]))]  # fmt: skip


def _is_integer(dtype: str) -> bool:
    return DTYPES[dtype][0].startswith(("int", "uint"))


def decisive_position(elements: int, place: str, block: int, rng: np.random.Generator) -> int:
    """The flat element index of the decisive element among ``elements``."""
    if place == "last":
        return elements - 1
    if place == "last block":
        return int(rng.integers(max(0, elements - block), elements))
    return int(rng.integers(0, elements))


def draw_adversarial(spec: KernelSpec, rng: np.random.Generator, side: str, place: str) -> tuple[dict, dict] | None:
    """A fresh draw whose float and integer input arrays (:func:`spiked_arrays`) hold a
    background on one side of their domain and one decisive element at the other end, at
    ``place``; None if the kernel has no such array.  An integer background lies strictly
    inside (the decisive value occurs once).  No output gradients: adversarial sets judge
    the forward (the CPU reference then runs no backward either)."""
    arrays = spiked_arrays(spec)
    if not arrays:
        return None
    inputs, _ = draw_fresh(spec, rng)
    block = spec.block_dim or DEFAULT_BLOCK_DIM
    elements = min(int(np.prod(a.shape)) for a in arrays)
    at = decisive_position(elements, place, block, rng)
    for a in arrays:
        np_dtype, comp = DTYPES[a.dtype]
        lo, hi = a.domain
        mid = (lo + hi) / 2.0
        if _is_integer(a.dtype):  # [ceil(mid), hi] or [lo, floor(mid)]: never the decisive value
            band = (int(np.ceil(mid)), int(hi)) if side == "low" else (int(lo), int(np.floor(mid)))
            value = rng.integers(band[0], band[1] + 1, size=tuple(a.shape) + comp)
        else:
            band = (mid, hi) if side == "low" else (lo, mid)
            value = rng.uniform(*band, size=tuple(a.shape) + comp)
        n = int(np.prod(a.shape))
        flat = value.reshape((n, -1))
        flat[at if place != "last" else n - 1] = lo if side == "low" else hi
        inputs[a.name] = value.astype(np_dtype)
    return inputs, {}


def _flat(run, with_grads: bool = True) -> dict[str, np.ndarray]:
    """Outputs and input gradients of a run; ``with_grads`` False: outputs only (a set
    drawn without output gradients ran no backward: its input gradients mean nothing)."""
    grads = {grad_key(n): g for n, g in run.input_grads.items()} if with_grads else {}
    return {**run.outputs, **grads}


def recorded_sizes(row: Row) -> list[RecordedSize]:
    """Every recorded size of the row (contracts/test_vectors.py: the row's own first),
    each with its spec: launch, block dim, array shapes, and a scalar fixed to one value
    (a size passed by value) fixed to the value recorded at that size."""
    spec = row_to_spec(row)
    out = []
    for vectors in TestVectors.from_json(row.test_vectors).sets():
        d = vectors.decoded()
        sized = vectors.sized_spec(spec)
        args = tuple(_fixed_at(a, d["inputs"].get(a.name)) for a in sized.args)
        sized = dataclasses.replace(sized, args=args)
        out.append(RecordedSize(sized, d["inputs"], d["outputs"], d["output_grads"], d["input_grads"]))
    return out


def _fixed_at(arg: ArgSpec, recorded) -> ArgSpec:
    """``arg`` with a one-value domain moved to the value recorded at this size."""
    lo, hi = arg.domain
    if arg.kind != "scalar" or lo != hi or not isinstance(recorded, int | float) or recorded == lo:
        return arg
    return dataclasses.replace(arg, domain=(float(recorded), float(recorded)))


def fresh_per_size(fresh_sets: int, sizes: int, min_random_draws: int = MIN_RANDOM_DRAWS) -> int:
    """Fresh sets per size: ``fresh_sets``, and at least ``min_random_draws`` over all sizes."""
    return max(fresh_sets, -(-min_random_draws // max(sizes, 1)))


@dataclass
class ReferencePlan:
    """What a row's reference needs built: its kernel and, where Warp makes one, the float64 twin."""

    row: Row
    spec: KernelSpec
    twin: KernelSpec | None
    sizes: list[RecordedSize]  # the recorded sizes (the row's own first)
    twin_status: str = "ok"
    native64: bool = False

    def sources(self) -> list[tuple[str, str]]:
        """(python_source, kernel_name) of the kernels to build: the row's, then the twin's."""
        return [(s.python_source, s.kernel_name) for s in [self.spec] + ([self.twin] if self.twin is not None else [])]


def plan_reference(row: Row) -> ReferencePlan:
    """Read the row's spec and recorded sizes, and make its twin; raises ReferenceUnavailable."""
    try:
        sizes = recorded_sizes(row)
    except (KeyError, ValueError, TypeError) as exc:
        raise ReferenceUnavailable(f"unreadable test vectors or arg specs: {type(exc).__name__}: {exc}") from None
    plan = ReferencePlan(row, sizes[0].spec, None, sizes)
    try:
        plan.twin = checked_twin(plan.spec)
    except NativeFloat64 as exc:
        plan.twin_status, plan.native64 = str(exc), True
    except TwinUnavailable as exc:
        plan.twin_status = str(exc)
    return plan


def compute_reference(
    row: Row, seed: int, fresh_sets: int = DEFAULT_FRESH_SETS, adversarial: bool = True,
    min_random_draws: int = MIN_RANDOM_DRAWS, sizes: int | None = None, lazy: bool = False,
) -> Reference:  # fmt: skip
    """Every input set of every recorded size with its expected values; raises
    ReferenceUnavailable.  ``lazy``: the drawn sets are computed when the judge first
    needs them, and the row's CPU module stays loaded until ``Reference.close()`` (or
    until the last one is computed).  ``adversarial``, ``min_random_draws``, ``sizes``
    (the first that many recorded sizes): lower only to measure the judge as it was
    (benchmarks/bench_eval.py)."""
    t0 = time.perf_counter()
    plan = plan_reference(row)
    if sizes is not None:
        plan.sizes = plan.sizes[:sizes]
    gradients = bool(row.cuda_backward)  # the judge compares gradients only where the row ships a backward
    stack = contextlib.ExitStack()
    try:
        sources = plan.sources()
        module, kernels, errors = stack.enter_context(
            warp_boundary.batch_module(sources, optimization_level=CPU_OPT_LEVEL, backward=[gradients] * len(sources))
        )
        if kernels[0] is None:
            raise ReferenceUnavailable(f"the row's Python kernel does not load: {errors[0]}")
        problem = warp_boundary.build_module(module, "cpu")
        if problem is not None:
            raise ReferenceUnavailable(f"the row's Python kernel does not build on the CPU: {problem}")
        k64 = kernels[1] if plan.twin is not None else None
        ref = reference_from_kernels(plan, seed, kernels[0], k64, fresh_sets, adversarial, min_random_draws,
                                     gradients=gradients, lazy=lazy)  # fmt: skip
    except BaseException:
        stack.close()
        raise
    ref.seconds = time.perf_counter() - t0  # the CPU build included
    if ref.done:
        stack.close()
    else:
        ref._release = stack  # noqa: SLF001 - the module lives as long as sets remain to compute
        _open[id(ref)] = ref
    return ref


_open: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # lazy references holding a CPU module


@atexit.register
def _release_open() -> None:
    """At exit, while imports still work (a module released during interpreter teardown
    is not); the process's kernel cache may be gone already, which is fine now."""
    for ref in list(_open.values()):
        with contextlib.suppress(Exception):
            ref.close()


def reference_from_kernels(
    plan: ReferencePlan, seed: int, k32, k64, fresh_sets: int = DEFAULT_FRESH_SETS, adversarial: bool = True,
    min_random_draws: int = MIN_RANDOM_DRAWS, gradients: bool = True, lazy: bool = False,
) -> Reference:  # fmt: skip
    """The input sets of ``plan``'s row at every recorded size, run on its built kernel
    ``k32`` (and twin ``k64``, or None).  ``gradients`` False: the kernels were built
    without adjoints; drawn sets then have no expected gradients (judge outputs only).
    ``lazy``: the drawn sets are left pending (``Reference.set_at`` computes them; the
    kernels must stay loaded until then)."""
    row, twin = plan.row, plan.twin
    t0 = time.perf_counter()
    ref = Reference(
        plan.spec, [], plan.twin_status, plan.native64, sizes=[tuple(s.spec.launch_dim) for s in plan.sizes]
    )
    per_size = fresh_per_size(fresh_sets, len(plan.sizes), min_random_draws)

    def measured(size_spec, size, given_inputs, given_grads, name, expected=None):
        # a backward only where the judge compares gradients: sets with output gradients
        backward = gradients and bool(given_grads)
        run32 = run_kernel(size_spec, k32, "cpu", None, given_inputs, given_grads, backward=backward)
        if not run32.ok:
            return None, f"{run32.reason}: {run32.detail}"
        with_grads = expected is not None or bool(given_grads)
        s = InputSet(name, given_inputs, given_grads, expected if expected is not None else _flat(run32, with_grads),
                     spec=size_spec, size=size)  # fmt: skip
        if k64 is not None:
            twin_spec = dataclasses.replace(
                twin, launch_dim=size_spec.launch_dim, block_dim=size_spec.block_dim, args=_widened(size_spec, twin)
            )
            run64 = run_kernel(twin_spec, k64, "cpu", None, widen_all(given_inputs, size_spec.args),
                               widen_all(given_grads, size_spec.args), backward=backward)  # fmt: skip
            if run64.ok:
                s.cpu32, s.ref64 = _flat(run32, with_grads), _flat(run64, with_grads)
            else:
                ref.notes.append(f"{s.label}: the float64 twin failed on the CPU ({run64.reason})")
        return s, ""

    def drawn(draw: Draw) -> InputSet | None:
        size = plan.sizes[draw.size]
        why = ""
        for attempt in range(DRAW_TRIES):
            rng = draw_rng(seed, str(row.id), draw.size, draw.name, attempt)
            got = (draw_fresh(size.spec, rng) if draw.side is None
                   else draw_adversarial(size.spec, rng, draw.side, draw.place))  # fmt: skip
            if got is None:
                why = "no float or integer input array to place a decisive element in"
                break
            s, why = measured(size.spec, draw.size, *got, draw.name)
            if s is not None:
                return s
        ref.notes.append(f"size {draw.size} ({draw.name}): left out: {why}")
        return None

    for i, size in enumerate(plan.sizes):
        expected = {**size.outputs, **{grad_key(n): g for n, g in size.input_grads.items()}}
        s, why = measured(size.spec, i, size.inputs, size.output_grads, "recorded",
                          {k: np.asarray(v) for k, v in expected.items()})  # fmt: skip
        if s is None:
            raise ReferenceUnavailable(f"the row's kernel fails on its own recorded inputs ({why})")
        ref.sets.append(s)
    # the judge's order: adversarial sets first (a partial kernel fails there soonest), then fresh
    sizes = range(len(plan.sizes))
    if adversarial:
        ref.pending += [Draw(i, f"adversarial {side} @ {place}", side, place)
                        for i in sizes for place in ADVERSARIAL_PLACES for side in ADVERSARIAL_SIDES]  # fmt: skip
    ref.pending += [Draw(i, f"fresh {k + 1}") for i in sizes for k in range(per_size)]
    ref.known_notes = len(ref.notes)
    ref._compute = drawn  # noqa: SLF001
    ref.seconds = time.perf_counter() - t0
    if not ref.pending:
        ref._finish()  # noqa: SLF001
    elif not lazy:
        ref.set_at(1 << 62)
    return ref


def _widened(size_spec: KernelSpec, twin: KernelSpec) -> tuple[ArgSpec, ...]:
    """The twin's argument specs at the shapes of ``size_spec``."""
    shapes = {a.name: a.shape for a in size_spec.args}
    return tuple(dataclasses.replace(a, shape=shapes.get(a.name, a.shape)) for a in twin.args)
