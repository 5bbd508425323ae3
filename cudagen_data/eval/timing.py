"""``cudagen eval --timing``: how fast a correct candidate is against the row's own kernel.

A candidate that passed the run stage is timed against the row's own Warp kernel (the
recorded CUDA, built the way the run stage builds a candidate) on the same GPU, on the
same inputs, in the same worker process.  What is built once per row (:class:`RowBench`,
by the row's first timed candidate, kept by :class:`OwnKernel` for the job) and what once
per candidate:

- **Size** (per row).  The row's spec is the smallest size worth nothing for timing (a
  few dozen threads), so it is scaled up where the kernel takes its size from its
  arguments: the first launch dimension and the first dimension of every array as long
  as it are multiplied by a power of two (speed.scale_factor: about ``TARGET_THREADS``
  threads, at most ``MAX_SCALED_BYTES`` of arrays).  The scaled size is tried first on
  the row's own kernel with guard cells (run.py), on the timing inputs themselves: if it
  writes out of bounds or reads a guard there (its size does not come from its
  arguments: a fixed stride, a tile kernel), the row's size is used.  The report says
  which size was timed (``TimingResult.size``).
- **Arrays** (per row).  The inputs are drawn once (the run's secret seed and the row)
  and uploaded once; both kernels launch on the *same* arrays (the same addresses), and
  before every launch every array is restored on the device from its pristine copy:
  inputs too, so every launch, timed or not, of either kernel starts from bit-identical
  memory.  The reference's own results at this size (forward outputs; the backward's
  input gradients from the reference's forward results) are computed once, as is the
  tolerance of each (below).
- **Method** (per candidate; Triton's ``do_bench``, and what KernelBench issues #47 and
  #150 asked for): ``warmup`` untimed launches of each kernel, then ``timed`` timed
  launches of each, candidate and reference interleaved (ABBA order: speed.schedule), all
  on the process's one stream.  Before every launch: the restore, then the L2 cache
  flushed by zeroing a buffer of twice the device's L2 (speed.flush_bytes); CUDA events
  are recorded right before and after the launch, so only the kernel is inside them (the
  flush keeps the GPU busy while Python enqueues the launch).  Everything is enqueued
  without a host synchronisation (events preallocated per process); one synchronize at
  the end.  The result is the median per kernel; the speedup is reference median /
  candidate median.  Forward, and backward where the candidate brings one (the adjoint
  launch alone, from the reference's forward results).
- **Every timed launch is checked, on the device.**  After each timed candidate launch,
  a check kernel compares what it wrote with the reference's results at this size, with
  the rule the run stage's tolerance model applies where no CPU twin is run
  (numerics/tolerance.check_array: floats within 1% of the value + 0.1% of the array's
  largest |value|, float64-native kernels within float64 floors, a non-finite value
  where the reference's is finite fails; integers and booleans bit for bit) and adds the
  values outside it to a per-launch counter.  The counters are read once, after the
  loop: a candidate with any value outside on any timed launch fails the run stage
  (:class:`TimingMismatch`).  Nothing distinguishes a timed launch from a checked one:
  they are the same launches, on the same restored memory.
- **Exclusive GPU, briefly.**  Only the launch loop and its synchronize hold the GPU lock
  exclusively (gpu_lock.py); the run stage elsewhere holds it shared around each of its
  launches.  Drawing, uploading, sizing, recording launches and reading results happen
  outside.  Where the time goes is reported per candidate (``TimingResult.cost_s``).

Pure parts (sizes, schedule, medians, fast_p, geometric mean) are in speed.py, tested on
the CPU (tests/test_timing.py), and so is the whole loop on Warp's CPU backend (a wall
clock in place of CUDA events); the GPU checks are tests/gpu/test_timing_gpu.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import warp_boundary
from ..contracts.reject import error_line
from ..contracts.row import Row
from ..execution import forward_only_reason, launch, warp_dtype
from ..gpu.worker import context_usable  # the GPU suite's check: False after a sticky CUDA error
from ..numerics.tolerance import FALLBACK_ABS, FALLBACK_REL, floors
from ..spec import DTYPES, ArgSpec, KernelSpec, is_float_dtype
from .gpu_lock import gpu_lock
from .reference import Reference, draw_fresh, draw_rng, grad_key
from .run import CandidateBuildFailed, candidate_kernel, run_guarded
from .speed import (
    CANDIDATE,
    REFERENCE,
    TARGET_THREADS,
    TIMED_LAUNCHES,
    WARMUP_LAUNCHES,
    KernelTiming,
    TimingResult,
    flush_bytes,
    scale_factor,
    scaled_spec,
    schedule,
)


class TimingMismatch(Exception):
    """A timed launch of the candidate gave results that do not match the reference (one line)."""


@dataclass(frozen=True)
class Method:
    """How many launches, at what size, with what flush (None: from the device's L2)."""

    warmup: int = WARMUP_LAUNCHES
    timed: int = TIMED_LAUNCHES
    target_threads: int = TARGET_THREADS
    flush_bytes: int | None = None


METHOD = Method()  # what measure() uses; tests and the CPU stand-in of bench_timing.py set a smaller one


class Spans(dict):
    """Seconds per named part of a timing (``with spans("row_setup"): ...``)."""

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - t0


# --------------------------------------------------------------------------- the device


_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38  # cuda.h


@functools.cache
def l2_cache_bytes(device: str) -> int | None:
    """The device's L2 size from the CUDA driver (None off the GPU or where it does not say)."""
    if not device.startswith("cuda"):
        return None
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        dev, value = ctypes.c_int(), ctypes.c_int()
        ordinal = warp_boundary.warp().get_device(device).ordinal
        if lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            return None
        if lib.cuDeviceGetAttribute(ctypes.byref(value), _CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev) != 0:
            return None
        return value.value or None
    except (OSError, AttributeError):
        return None


def _flush_size(device: str, method: Method) -> int:
    return method.flush_bytes if method.flush_bytes is not None else flush_bytes(l2_cache_bytes(device))


@functools.cache
def _flush_buffer(device: str, nbytes: int):
    wp = warp_boundary.warp()
    return wp.zeros(max(1, nbytes // 4), dtype=wp.int32, device=device)


@functools.cache
def _check_kernels():
    """(bytes, tolerance) check kernels, defined together so their module builds once per process."""
    wp = warp_boundary.warp()

    @wp.kernel
    def count_differing_bytes(got: wp.array(dtype=wp.uint8), want: wp.array(dtype=wp.uint8),
                              bad: wp.array(dtype=wp.int32), slot: wp.int32):  # fmt: skip
        i = wp.tid()
        if got[i] != want[i]:
            wp.atomic_add(bad, slot, 1)

    @wp.kernel
    def count_outside_tolerance(got: wp.array(dtype=Any), want: wp.array(dtype=Any), rel: wp.float64,
                                abs_scale: wp.float64, bad: wp.array(dtype=wp.int32), slot: wp.int32):  # fmt: skip
        # check_array's rule, step by step in float64: where the reference's value is not
        # finite anything passes; else a non-finite value fails, and the error over the
        # tolerance must be at most 1 (a tolerance of 0 or NaN: no error at all)
        i = wp.tid()
        r = wp.float64(want[i])
        if wp.isfinite(r):
            g = wp.float64(got[i])
            err = wp.abs(g - r)
            t = rel * wp.abs(r) + abs_scale
            if not wp.isfinite(g):
                wp.atomic_add(bad, slot, 1)
            elif t > wp.float64(0.0):
                if err / t > wp.float64(1.0):
                    wp.atomic_add(bad, slot, 1)
            elif err > wp.float64(0.0):
                wp.atomic_add(bad, slot, 1)

    for t in (wp.float16, wp.float32, wp.float64):
        wp.overload(count_outside_tolerance, {"got": wp.array(dtype=t), "want": wp.array(dtype=t)})
    return count_differing_bytes, count_outside_tolerance


def _flat_view(a, dtype, count: int):
    """A 1-D view of ``a``'s memory as ``count`` values of ``dtype`` (``a`` must outlive it)."""
    wp = warp_boundary.warp()
    return wp.array(ptr=a.ptr, dtype=dtype, shape=(count,), device=a.device)


class EventClock:
    """CUDA events on the device's stream, recorded around launch ``k``; read after a synchronize."""

    def __init__(self, device: str, launches: int):
        wp = warp_boundary.warp()
        self.wp, self.stream = wp, wp.get_device(device).stream
        self.events = _events(device, launches)

    def start(self, k: int) -> None:
        self.stream.record_event(self.events[2 * k])

    def stop(self, k: int) -> None:
        self.stream.record_event(self.events[2 * k + 1])

    def elapsed_ms(self, k: int) -> float:
        return float(self.wp.get_event_elapsed_time(self.events[2 * k], self.events[2 * k + 1], synchronize=False))


_EVENTS: dict[str, list] = {}  # device -> timing events, made once per process and reused


def _events(device: str, launches: int) -> list:
    """2 * ``launches`` timing events (at least)."""
    wp = warp_boundary.warp()
    pool = _EVENTS.setdefault(device, [])
    while len(pool) < 2 * launches:
        pool.append(wp.Event(device, enable_timing=True))
    return pool


class WallClock:
    """For Warp's CPU backend (tests, the CPU stand-in): its launches are synchronous."""

    def __init__(self):
        self.t: dict[tuple[int, int], float] = {}

    def start(self, k: int) -> None:
        self.t[k, 0] = time.perf_counter()

    def stop(self, k: int) -> None:
        self.t[k, 1] = time.perf_counter()

    def elapsed_ms(self, k: int) -> float:
        return (self.t[k, 1] - self.t[k, 0]) * 1000.0


# --------------------------------------------------------------------------- one row's arrays


@dataclass
class _Check:
    """The device check of one array a launch writes (against the reference's results)."""

    key: str  # "y" or "x.grad"
    kind: str  # "output" or "input gradient"
    tolerance: str  # check_array's name for the rule: "fallback", "float64_native", "exact"
    values: int  # values (scalars; bytes for "exact") compared
    launch: Any  # a recorded launch of the check kernel; its last parameter is the counter slot
    slot_param: int

    def enqueue(self, slot: int) -> None:
        self.launch.set_param_at_index(self.slot_param, slot)
        self.launch.launch()

    def describe(self, count: int) -> str:
        name = self.key[: -len(".grad")] if self.key.endswith(".grad") else self.key
        unit = "bytes differ (exact)" if self.tolerance == "exact" else f"values outside the {self.tolerance} tolerance"
        return f"{self.kind} {name!r} differs: {count} of {self.values} {unit}"


class RowBench:
    """One row's timing state: the size, the arrays both kernels launch on, what they are
    restored to before every launch, the reference's results and the checks of them."""

    def __init__(self, spec: KernelSpec, size: str, reference_kernel, device: str, inputs: dict, output_grads: dict,
                 native64: bool, timed: int):  # fmt: skip
        wp = warp_boundary.warp()
        self.spec, self.size, self.device, self.native64, self.timed = spec, size, device, native64, timed
        self.pristine, self.work, self.adj_pristine, self.adj = {}, {}, {}, {}
        self.args, self.adj_args = [], []
        for a in spec.args:
            dtype = warp_dtype(a.dtype)
            if a.kind == "array":
                start = wp.array(np.ascontiguousarray(inputs[a.name]), dtype=dtype, device=device)
                self.pristine[a.name], self.work[a.name] = start, wp.empty_like(start)
                self.args.append(self.work[a.name])
                if is_float_dtype(a.dtype):
                    seed = output_grads.get(a.name)
                    adj_start = (wp.zeros_like(start) if seed is None
                                 else wp.array(np.ascontiguousarray(seed), dtype=dtype, device=device))  # fmt: skip
                    self.adj_pristine[a.name], self.adj[a.name] = adj_start, wp.empty_like(adj_start)
                    self.adj_args.append(self.adj[a.name])
                else:
                    self.adj_args.append(None)
            else:
                value = inputs[a.name]
                array_like = isinstance(value, np.ndarray)
                scalar = dtype(*value.reshape(-1).tolist()) if array_like else value
                self.args.append(scalar)
                self.adj_args.append(dtype() if array_like else type(scalar)(0))
        self.has_backward = bool(output_grads) and bool(self.adj) and forward_only_reason(spec.python_source) is None
        self.own = self.launches(reference_kernel)
        self.primal: dict = {}
        self.expected: dict[bool, dict] = {}
        with gpu_lock(device, exclusive=False):
            self.restore(False)
            self.own[0].launch()
            self.expected[False] = {k: wp.clone(v) for k, v in self.written(False).items()}
            if self.has_backward:
                self.primal = {k: wp.clone(v) for k, v in self.work.items()}
                self.restore(True)
                self.own[1].launch()
                self.expected[True] = {k: wp.clone(v) for k, v in self.written(True).items()}
            wp.synchronize_device(device)
        self.counters = {b: wp.zeros(max(1, timed * len(e)), dtype=wp.int32, device=device)
                         for b, e in self.expected.items()}  # fmt: skip
        self.checks = {b: self._checks(b) for b in self.expected}

    def launches(self, kernel) -> tuple:
        """(forward, backward or None): ``kernel``'s recorded launches on this row's arrays."""
        wp = warp_boundary.warp()
        forward = launch(self.spec, kernel, self.args, self.device, record=True)
        if not self.has_backward:
            return forward, None
        spec = self.spec
        dim = spec.launch_dim[0] if len(spec.launch_dim) == 1 else tuple(spec.launch_dim)
        launcher = wp.launch_tiled if spec.is_tiled else wp.launch
        extra = {"block_dim": spec.block_dim} if spec.is_tiled else {}
        backward = launcher(kernel, dim=dim, inputs=self.args, adj_inputs=self.adj_args, device=self.device,
                            adjoint=True, record_cmd=True, **extra)  # fmt: skip
        return forward, backward

    def written(self, backward: bool) -> dict:
        """The arrays a launch writes: outputs, or the input gradients of the backward."""
        if backward:
            return {grad_key(a.name): self.adj[a.name] for a in self.spec.args
                    if a.name in self.adj and a.role != "out"}  # fmt: skip
        return {a.name: self.work[a.name] for a in self.spec.args if a.kind == "array" and a.role != "in"}

    def restore(self, backward: bool) -> None:
        """Every array back to where a launch starts (enqueued on the stream): as drawn for a
        forward; for a backward, the reference's forward results and every gradient's seed."""
        wp = warp_boundary.warp()
        source = self.primal if backward else self.pristine
        for name, work in self.work.items():
            wp.copy(work, source[name])
        if backward:
            for name, adj in self.adj.items():
                wp.copy(adj, self.adj_pristine[name])

    def _checks(self, backward: bool) -> list[_Check]:
        wp = warp_boundary.warp()
        by_bytes, by_tolerance = _check_kernels()
        counter = self.counters[backward]
        checks = []
        for key, got in self.written(backward).items():
            want = self.expected[backward][key]
            arg = _arg(self.spec, key[: -len(".grad")] if key.endswith(".grad") else key)
            kind = "input gradient" if backward else "output"
            np_dtype = np.dtype(DTYPES[arg.dtype][0])
            if np_dtype.kind != "f":
                n = got.capacity
                inputs = [_flat_view(got, wp.uint8, n), _flat_view(want, wp.uint8, n), counter, 0]
                rec = wp.launch(by_bytes, dim=n, inputs=inputs, device=self.device, record_cmd=True)
                checks.append(_Check(key, kind, "exact", n, rec, 3))
                continue
            n = got.capacity // np_dtype.itemsize
            # once per row: the array's scale, as check_array takes it (a NaN or an infinity
            # among the reference's values makes it NaN or infinite)
            values = np.abs(want.numpy().astype(np.float64))
            scale = float(np.max(values)) if values.size else 0.0
            if self.native64 and np_dtype == np.float64:
                tolerance, (rel, abs_) = "float64_native", floors(np_dtype)
            else:
                tolerance, rel, abs_ = "fallback", FALLBACK_REL, FALLBACK_ABS
            scalar = getattr(wp, np_dtype.name)
            bounds = [wp.float64(rel), wp.float64(abs_ * scale)]
            inputs = [_flat_view(got, scalar, n), _flat_view(want, scalar, n), *bounds, counter, 0]
            rec = wp.launch(by_tolerance, dim=n, inputs=inputs, device=self.device, record_cmd=True)
            checks.append(_Check(key, kind, tolerance, n, rec, 5))
        return checks


def _arg(spec: KernelSpec, name: str) -> ArgSpec:
    return next(a for a in spec.args if a.name == name)


# --------------------------------------------------------------------------- sizes and inputs


def inputs_rng(seed: int, row_id: str):
    """The timing inputs' draws: the run's secret seed and the row, a stream of their own."""
    return draw_rng(seed, row_id, 0, "timing", 0)


def largest_size(ref: Reference) -> KernelSpec:
    """The row's largest recorded size (most threads launched), where timing starts from."""
    specs = [s.spec or ref.spec for s in ref.sets] or [ref.spec]
    return max(specs, key=lambda s: math.prod(s.launch_dim))


def timing_size(spec: KernelSpec, reference_kernel, device: str, seed: int, row_id: str,
                target_threads: int = TARGET_THREADS) -> tuple[KernelSpec, str, dict, dict]:  # fmt: skip
    """(spec, what it is, inputs, output gradients): the scaled spec where the row's own
    kernel runs it in bounds on the timing inputs, else the row's (inputs drawn for it)."""
    factor = scale_factor(spec, target_threads)
    if factor > 1:
        big = scaled_spec(spec, factor)
        inputs, grads = draw_fresh(big, inputs_rng(seed, row_id))
        # guards as long as the longest scaled array: an index computed from the bigger
        # launch (i // 4 into a fixed array, say) lands in them rather than past them
        guard = max(int(np.prod(a.shape, dtype=np.int64)) for a in big.args if a.kind == "array")
        got = run_guarded(big, reference_kernel, device, inputs, grads, backward=False, guard_elements=guard)
        # a read past the end picks up a NaN guard: a NaN output says the size is not the kernel's
        finite = all(not np.issubdtype(v.dtype, np.floating) or np.all(np.isfinite(v)) for v in got.values.values())
        if not got.problems and finite:
            return big, f"scaled x{factor} (launch dim {', '.join(map(str, big.launch_dim))})", inputs, grads
    inputs, grads = draw_fresh(spec, inputs_rng(seed, row_id))
    return spec, f"recorded size (launch dim {', '.join(map(str, spec.launch_dim))})", inputs, grads


def prepare_row(spec: KernelSpec, reference_kernel, device: str, seed: int, row_id: str, native64: bool = False,
                method: Method | None = None) -> RowBench:  # fmt: skip
    """A row's timing state from its largest recorded size (``spec``) and its own kernel."""
    method = method or METHOD
    big, size, inputs, grads = timing_size(spec, reference_kernel, device, seed, row_id, method.target_threads)
    return RowBench(big, size, reference_kernel, device, inputs, grads, native64, method.timed)


# --------------------------------------------------------------------------- timing


def time_against(bench: RowBench, candidate_kernel, backward: bool, method: Method | None = None,
                 spans: Spans | None = None, clock=None) -> TimingResult:  # fmt: skip
    """Time ``candidate_kernel`` against the row's own kernel on ``bench``; raises
    TimingMismatch when a timed launch's results are outside the tolerance."""
    method, spans = method or METHOD, spans if spans is not None else Spans()
    if method.timed != bench.timed:
        raise ValueError(f"the row's bench was built for {bench.timed} timed launches, not {method.timed}")
    wp = warp_boundary.warp()
    device = bench.device
    with spans("prepare"):
        candidate = bench.launches(candidate_kernel)
        passes = [False] + ([True] if backward and bench.has_backward else [])
        if clock is None:
            launches = 2 * len(passes) * method.timed
            clock = EventClock(device, launches) if device.startswith("cuda") else WallClock()
        flush = _flush_buffer(device, _flush_size(device, method))
        order = schedule(method.warmup, method.timed)
    slots: dict[tuple[bool, str], list[int]] = {(b, w): [] for b in passes for w in (CANDIDATE, REFERENCE)}
    t0 = time.perf_counter()
    with gpu_lock(device, exclusive=True):
        t1 = time.perf_counter()
        collecting = gc.isenabled()
        gc.disable()  # no collection pause between a start event and its launch
        try:
            k = 0
            for backward_pass in passes:
                bench.counters[backward_pass].zero_()
                checks = bench.checks[backward_pass]
                kernels = {REFERENCE: bench.own, CANDIDATE: candidate}
                for who, is_timed in order:
                    bench.restore(backward_pass)
                    flush.zero_()
                    cmd = kernels[who][1 if backward_pass else 0]
                    if not is_timed:
                        cmd.launch()
                        continue
                    clock.start(k)
                    cmd.launch()
                    clock.stop(k)
                    if who == CANDIDATE:
                        n = len(slots[backward_pass, who])
                        for j, check in enumerate(checks):
                            check.enqueue(n * len(checks) + j)
                    slots[backward_pass, who].append(k)
                    k += 1
            wp.synchronize_device(device)
        except BaseException:
            with contextlib.suppress(Exception):  # nothing of ours left running once the lock is released
                wp.synchronize_device(device)
            raise
        finally:
            if collecting:
                gc.enable()
    spans["lock_wait"] = spans.get("lock_wait", 0.0) + t1 - t0
    spans["locked"] = spans.get("locked", 0.0) + time.perf_counter() - t1
    with spans("after"):
        for backward_pass in passes:
            _raise_on_mismatch(bench, backward_pass, method.timed)
        ms = {key: [clock.elapsed_ms(k) for k in ks] for key, ks in slots.items()}
        timings = [KernelTiming(ms[b, CANDIDATE], ms[b, REFERENCE]) for b in passes]
        result = TimingResult(bench.size, bench.spec.launch_dim, timings[0], timings[1] if len(timings) > 1 else None)
        if backward and not bench.has_backward:
            result.notes.append("backward not timed: the row's kernel has no backward launch with gradients to seed")
    return result


def _raise_on_mismatch(bench: RowBench, backward: bool, timed: int) -> None:
    checks = bench.checks[backward]
    if not checks:
        return
    counts = bench.counters[backward].numpy()[: timed * len(checks)].reshape(timed, len(checks))
    for n, j in zip(*np.nonzero(counts), strict=True):  # row-major: the first timed launch first
        what = "backward" if backward else "forward"
        raise TimingMismatch(f"timed {what} launch {n + 1} of {timed}: {checks[j].describe(int(counts[n, j]))}")


def time_candidate(spec: KernelSpec, reference_kernel, candidate_kernel, device: str, seed: int, row_id: str, *,
                   backward: bool, native64: bool = False, method: Method | None = None) -> TimingResult:  # fmt: skip
    """One candidate against the row's own kernel from scratch (a row's bench built for it
    alone): what tests and single timings use; the run stage keeps the bench per row."""
    method = method or METHOD
    bench = prepare_row(spec, reference_kernel, device, seed, row_id, native64, method)
    return time_against(bench, candidate_kernel, backward, method)


# --------------------------------------------------------------------------- the run stage's entry


def context_lost(device: str) -> bool:
    """Whether ``device``'s CUDA context is unusable (a sticky error: an illegal address...)."""
    return device.startswith("cuda") and not context_usable(device)


class OwnKernel:
    """The row's own kernel on the GPU, built the way a candidate is (its recorded CUDA put
    in place of itself), on first use, and the row's timing state; released with the job."""

    def __init__(self, row: Row, device: str, precompiled_header: bool = False, build=None):
        self.row, self.device, self.precompiled_header = row, device, precompiled_header
        self.build = build  # how the kernel is built (default: candidate_kernel; a CPU stand-in in benchmarks)
        self._stack = contextlib.ExitStack()
        self._kernel = None
        self.bench: RowBench | None = None  # built by the row's first timed candidate
        self.unavailable = ""  # why the row cannot be timed ("not timed: ..."), once known
        # the row's own kernel at the timing size broke the CUDA context (an illegal address:
        # its size does not scale the way the timing assumed); the worker must restart, and
        # the candidate being timed keeps its verdict (pool.py)
        self.lost_context = False

    def __enter__(self) -> OwnKernel:
        return self

    def __exit__(self, *exc) -> None:
        self.bench = None
        self._stack.close()

    def kernel(self):
        if self._kernel is None:
            row = self.row
            own = (self.build or candidate_kernel)(
                row, row.cuda_forward, row.cuda_backward or None, self.device, self.precompiled_header
            )
            self._kernel = self._stack.enter_context(own)[0]
        return self._kernel


def measure(ref: Reference, row: Row, candidate, own: OwnKernel, device: str, seed: int,
            backward: bool) -> tuple[dict | None, str]:  # fmt: skip
    """Time a candidate that passed the run stage: (TimingResult.to_dict(), "") or (None, why):
    "timed launches: ..." when a timed launch was wrong (the candidate fails), "not timed: ..."
    when the timing itself could not run (the candidate keeps its verdict).  The result's
    ``cost_s`` says where the time went: the own kernel's build and the row's setup (paid
    by the row's first timed candidate), recording the launches, waiting for the exclusive
    lock, holding it, and reading the results."""
    if own.unavailable:
        return None, own.unavailable
    spans, method = Spans(), METHOD
    try:
        with spans("own_build"):
            own_kernel = own.kernel()  # compiled outside the GPU lock
    except CandidateBuildFailed as exc:
        own.unavailable = f"not timed: the row's own kernel does not build ({exc})"
        return None, own.unavailable
    spec = largest_size(ref)
    if any(a.layout for a in spec.args):
        own.unavailable = "not timed: a mined kernel's array layouts are not supported by the timing"
        return None, own.unavailable
    if own.bench is None:
        problem = ""
        try:
            with spans("row_setup"):
                own.bench = prepare_row(spec, own_kernel, device, seed, str(row.id), ref.native64, method)
        except Exception as exc:  # noqa: BLE001 - an allocation or launch error of the row's own kernel
            problem = f"not timed: the row's own kernel at the timing size: {error_line(exc)}"
        if context_lost(device):
            own.bench, own.lost_context = None, True
            problem = "not timed: the row's own kernel at the timing size left the CUDA context unusable"
        if problem:
            own.unavailable = problem
            return None, own.unavailable
    try:
        result = time_against(own.bench, candidate, backward, method, spans)
    except TimingMismatch as exc:
        return None, f"timed launches: {exc}"
    except Exception as exc:  # noqa: BLE001 - an allocation or launch error in the timing itself
        return None, f"not timed: {error_line(exc)}"
    result.cost_s = {k: round(v, 6) for k, v in spans.items()}
    return result.to_dict(), ""
