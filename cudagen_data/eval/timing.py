"""``cudagen eval --timing``: how fast a correct candidate is against the row's own kernel.

A candidate that passed the run stage is timed against the row's own Warp kernel (the
recorded CUDA, built the way the run stage builds a candidate) on the same GPU, on the
same inputs, in the same worker process:

- **Size.** The row's spec is the smallest size worth nothing for timing (a few dozen
  threads), so it is scaled up where the kernel takes its size from its arguments: the
  first launch dimension and the first dimension of every array as long as it are
  multiplied by a power of two (:func:`scale_factor`: about ``TARGET_THREADS`` threads,
  at most ``MAX_SCALED_BYTES`` of arrays).  The scaled size is tried first on the row's
  own kernel with guard cells (run.py): if it writes out of bounds there (its size does
  not come from its arguments: a fixed stride, a tile kernel), the row's size is used.
  The report says which size was timed (``TimingResult.size``).
- **Method** (the usual one: Triton's ``do_bench``, and what KernelBench issues #47 and
  #150 asked for): ``WARMUP_LAUNCHES`` untimed launches of each kernel, then
  ``TIMED_LAUNCHES`` timed launches of each, candidate and reference interleaved
  (ABBA order: :func:`schedule`), all on one stream.  Before every launch the arrays it
  writes are restored, then the L2 cache is flushed by zeroing a buffer of
  ``L2_FLUSH_BYTES`` (larger than any GPU's L2); CUDA events are recorded right before
  and after the launch, so only the kernel is inside them (the flush keeps the GPU busy
  while Python enqueues the launch).  The result is the median per kernel; the speedup is
  reference median / candidate median.  Forward, and backward where the candidate brings
  one (the adjoint launch alone, from the forward's results).
- **Every timed launch is checked.** The candidate's first timed outputs are compared
  with the reference's (the run stage's tolerance model, numerics/tolerance.py); each later
  timed launch must give the same bits (compared on the GPU) or is copied back and
  compared with the reference the same way.  A candidate that does less on timed launches
  fails the run stage (:class:`TimingMismatch`); nothing distinguishes a timed launch
  from a checked one, since they are the same launches.
- **Exclusive GPU.** Timing holds the GPU lock exclusively (:func:`gpu_access`), while
  the run stage's launches in other workers hold it shared: no other worker's kernel
  runs during a timing.

Pure parts (sizes, schedule, medians, fast_p, geometric mean) are in speed.py, tested on the CPU
(tests/test_timing.py), and so is the whole timing loop on Warp's CPU backend with a
wall clock in place of CUDA events; the GPU checks are tests/gpu/test_timing_gpu.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np

from .. import warp_boundary
from ..execution import launch, uses_while_loop
from ..numerics.tolerance import check_array
from ..spec import KernelSpec, is_float_dtype
from .reference import Reference, draw_fresh, draw_rng, grad_key
from .run import CandidateBuildFailed, candidate_kernel, run_guarded
from .speed import (
    CANDIDATE,
    L2_FLUSH_BYTES,
    REFERENCE,
    TARGET_THREADS,
    TIMED_LAUNCHES,
    WARMUP_LAUNCHES,
    KernelTiming,
    TimingResult,
    scale_factor,
    scaled_spec,
    schedule,
)


class TimingMismatch(Exception):
    """A timed launch of the candidate gave results that do not match the reference (one line)."""


# --------------------------------------------------------------------------- the GPU lock


_LOCK_DIR = tempfile.gettempdir()


@contextlib.contextmanager
def gpu_access(device: str, exclusive: bool) -> Iterator[None]:
    """A lock per GPU across processes: the run stage's launches share it, a timing holds it
    alone.  A turnstile (taken briefly by everyone, held by a waiting timing) keeps a
    stream of shared holders from starving a timing."""
    if not device.startswith("cuda"):
        yield
        return
    tag = device.replace(":", "_")
    gate_path = os.path.join(_LOCK_DIR, f"cudagen-eval-{tag}-{os.getuid()}.gate")
    lock_path = os.path.join(_LOCK_DIR, f"cudagen-eval-{tag}-{os.getuid()}.lock")
    with open(gate_path, "a") as gate, open(lock_path, "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- clocks


class EventClock:
    """CUDA events on the device's stream around one launch."""

    def __init__(self, device: str):
        wp = warp_boundary.warp()
        self.wp = wp
        self.stream = wp.get_device(device).stream
        self.start = wp.Event(device, enable_timing=True)
        self.end = wp.Event(device, enable_timing=True)

    def __call__(self, run: Callable[[], None]) -> float:
        self.stream.record_event(self.start)
        run()
        self.stream.record_event(self.end)
        return float(self.wp.get_event_elapsed_time(self.start, self.end))


class WallClock:
    """For Warp's CPU backend (tests): launches are synchronous there."""

    def __call__(self, run: Callable[[], None]) -> float:
        t0 = time.perf_counter()
        run()
        return (time.perf_counter() - t0) * 1000.0


@functools.cache
def _flush_buffer(device: str, nbytes: int):
    wp = warp_boundary.warp()
    return wp.zeros(max(1, nbytes // 4), dtype=wp.int32, device=device)


@functools.cache
def _mismatch_kernel():
    wp = warp_boundary.warp()

    @wp.kernel
    def count_mismatched_bytes(a: wp.array(dtype=wp.uint8), b: wp.array(dtype=wp.uint8), n: wp.array(dtype=wp.int32)):
        i = wp.tid()
        if a[i] != b[i]:
            wp.atomic_add(n, 0, 1)

    return count_mismatched_bytes


def _bytes_view(a):
    wp = warp_boundary.warp()
    return wp.array(ptr=a.ptr, dtype=wp.uint8, shape=(a.capacity,), device=a.device)


def same_bits(a, b, device: str) -> bool:
    """Whether two contiguous Warp arrays of one shape and dtype hold the same bytes (on the device)."""
    wp = warp_boundary.warp()
    count = wp.zeros(1, dtype=wp.int32, device=device)
    wp.launch(_mismatch_kernel(), dim=a.capacity, inputs=[_bytes_view(a), _bytes_view(b), count], device=device)
    return int(count.numpy()[0]) == 0


# --------------------------------------------------------------------------- one kernel's arrays


class _Bench:
    """One kernel's own arrays at the timing size, the launches, and what they write."""

    def __init__(self, spec: KernelSpec, kernel, device: str, inputs: dict, output_grads: dict):
        wp = warp_boundary.warp()
        self.spec, self.device = spec, device
        self.arrays, self.pristine, self.adjoints, self.adj_pristine = {}, {}, {}, {}
        args, adj_args = [], []
        for a in spec.args:
            if a.kind == "array":
                arr = wp.array(np.ascontiguousarray(inputs[a.name]), dtype=getattr(wp, a.dtype), device=device)
                self.arrays[a.name] = arr
                args.append(arr)
                if a.role != "in":
                    self.pristine[a.name] = wp.clone(arr)
                if is_float_dtype(a.dtype):
                    seed = output_grads.get(a.name)
                    adj = (
                        wp.zeros_like(arr)
                        if seed is None
                        else wp.array(seed, dtype=getattr(wp, a.dtype), device=device)
                    )
                    self.adjoints[a.name] = adj
                    self.adj_pristine[a.name] = wp.clone(adj)
                    adj_args.append(adj)
                else:
                    adj_args.append(None)
            else:
                value = inputs[a.name]
                scalar = getattr(wp, a.dtype)(*value.reshape(-1).tolist()) if isinstance(value, np.ndarray) else value
                args.append(scalar)
                adj_args.append(type(scalar)(0) if not isinstance(value, np.ndarray) else getattr(wp, a.dtype)())
        self.forward = launch(spec, kernel, args, device, record=True)
        dim = spec.launch_dim[0] if len(spec.launch_dim) == 1 else tuple(spec.launch_dim)
        launcher = wp.launch_tiled if spec.is_tiled else wp.launch
        extra = {"block_dim": spec.block_dim} if spec.is_tiled else {}
        self.backward = None
        if self.adjoints:
            self.backward = launcher(kernel, dim=dim, inputs=args, adj_inputs=adj_args, device=device, adjoint=True,
                                     record_cmd=True, **extra)  # fmt: skip

    def written(self, backward: bool) -> dict:
        """The arrays a launch writes: outputs, or the input gradients of the backward."""
        if backward:
            return {grad_key(a.name): self.adjoints[a.name] for a in self.spec.args
                    if a.name in self.adjoints and a.role != "out"}  # fmt: skip
        return {a.name: self.arrays[a.name] for a in self.spec.args if a.kind == "array" and a.role != "in"}

    def restore(self, backward: bool, primal_after_forward: dict | None = None) -> None:
        """Put back what the last launch changed (enqueued on the stream, outside the events):
        the arrays a forward writes (to their inputs, or for a backward to the forward's
        results) and, for a backward, every gradient (seeds and zeros)."""
        wp = warp_boundary.warp()
        for name, start in self.pristine.items():
            wp.copy(self.arrays[name], primal_after_forward[name] if backward else start)
        if backward:
            for name, adj in self.adjoints.items():
                wp.copy(adj, self.adj_pristine[name])


# --------------------------------------------------------------------------- timing


def _check(expected: dict[str, np.ndarray], got: dict[str, np.ndarray], native64: bool, what: str) -> None:
    for name, want in expected.items():
        kind = "input gradient" if name.endswith(".grad") else "output"
        check = check_array(name, kind, got[name], want, native64=native64)
        if not check.ok:
            raise TimingMismatch(f"{what}: {check.describe()}")


def _time_pair(reference: _Bench, candidate: _Bench, device: str, clock, backward: bool, native64: bool,
               warmup: int, timed: int, primal: dict | None, flush_bytes: int) -> KernelTiming:  # fmt: skip
    """Interleaved launches of both kernels; every timed candidate launch checked."""
    wp = warp_boundary.warp()
    benches = {REFERENCE: reference, CANDIDATE: candidate}
    flush = _flush_buffer(device, flush_bytes)
    times: dict[str, list[float]] = {CANDIDATE: [], REFERENCE: []}
    first: dict[str, dict] = {}  # kernel -> device copies of its first timed results
    expected: dict[str, np.ndarray] = {}  # the reference's first timed results, on the host
    to_check: list[tuple[int, dict[str, np.ndarray]]] = []  # candidate launches compared on the host
    for who, is_timed in schedule(warmup, timed):
        bench = benches[who]
        bench.restore(backward, primal)
        flush.zero_()
        cmd = bench.backward if backward else bench.forward
        ms = clock(cmd.launch)
        if not is_timed:
            continue
        times[who].append(ms)
        written = bench.written(backward)
        n = len(times[who])
        if who not in first:
            first[who] = {k: wp.clone(v) for k, v in written.items()}
            host = {k: v.numpy().copy() for k, v in written.items()}
            if who == REFERENCE:
                expected = host
            else:
                to_check.append((n, host))
        elif who == CANDIDATE and not all(same_bits(v, first[who][k], device) for k, v in written.items()):
            to_check.append((n, {k: v.numpy().copy() for k, v in written.items()}))
    what = "backward" if backward else "forward"
    for n, got in to_check:
        _check(expected, got, native64, f"timed {what} launch {n} of {timed}")
    return KernelTiming(times[CANDIDATE], times[REFERENCE])


def probe_rng(seed: int, row_id: str):
    """The draws of the size probe (their own stream: the timing inputs do not depend on whether it ran)."""
    return draw_rng(seed, row_id, 0, "timing size probe", 0)


def inputs_rng(seed: int, row_id: str):
    """The timing inputs' draws: the run's secret seed and the row, a stream of their own."""
    return draw_rng(seed, row_id, 0, "timing", 0)


def largest_size(ref: Reference) -> KernelSpec:
    """The row's largest recorded size (most threads launched), where timing starts from."""
    specs = [s.spec or ref.spec for s in ref.sets] or [ref.spec]
    return max(specs, key=lambda s: math.prod(s.launch_dim))


def timing_size(
    spec: KernelSpec, reference_kernel, device: str, rng, target_threads: int = TARGET_THREADS
) -> tuple[KernelSpec, str]:
    """The scaled spec where the row's own kernel runs it in bounds, else the row's."""
    factor = scale_factor(spec, target_threads)
    if factor > 1:
        big = scaled_spec(spec, factor)
        inputs, grads = draw_fresh(big, rng)
        # guards as long as the longest scaled array: an index computed from the bigger
        # launch (i // 4 into a fixed array, say) lands in them rather than past them
        guard = max(int(np.prod(a.shape, dtype=np.int64)) for a in big.args if a.kind == "array")
        got = run_guarded(big, reference_kernel, device, inputs, grads, backward=False, guard_elements=guard)
        # a read past the end picks up a NaN guard: a NaN output says the size is not the kernel's
        finite = all(not np.issubdtype(v.dtype, np.floating) or np.all(np.isfinite(v)) for v in got.values.values())
        if not got.problems and finite:
            return big, f"scaled x{factor} (launch dim {', '.join(map(str, big.launch_dim))})"
    return spec, f"recorded size (launch dim {', '.join(map(str, spec.launch_dim))})"


def time_candidate(spec: KernelSpec, reference_kernel, candidate_kernel, device: str, seed: int, row_id: str, *,
                   backward: bool, native64: bool = False, clock=None, warmup: int = WARMUP_LAUNCHES,
                   timed: int = TIMED_LAUNCHES, flush_bytes: int = L2_FLUSH_BYTES,
                   target_threads: int = TARGET_THREADS, sized: tuple[KernelSpec, str] | None = None,
                   ) -> TimingResult:  # fmt: skip
    """Time ``candidate_kernel`` against ``reference_kernel`` (the row's own) at the timing
    size (``sized``: :func:`timing_size`'s answer for this row, where already known); raises
    TimingMismatch when a timed launch's results are wrong.  The inputs depend on the seed
    and the row only."""
    wp = warp_boundary.warp()
    clock = clock or (EventClock(device) if device.startswith("cuda") else WallClock())
    if sized is None:
        sized = timing_size(spec, reference_kernel, device, probe_rng(seed, row_id), target_threads)
    big, size = sized
    inputs, grads = draw_fresh(big, inputs_rng(seed, row_id))
    ref = _Bench(big, reference_kernel, device, inputs, grads)
    cand = _Bench(big, candidate_kernel, device, inputs, grads)
    fwd = _time_pair(ref, cand, device, clock, False, native64, warmup, timed, None, flush_bytes)
    result = TimingResult(size, big.launch_dim, fwd)
    if backward and grads and ref.backward is not None and not uses_while_loop(spec.python_source):
        # both backwards start from the reference's forward results (checked equal above)
        ref.restore(False)
        ref.forward.launch()
        primal = {name: wp.clone(ref.arrays[name]) for name in ref.pristine}
        result.backward = _time_pair(ref, cand, device, clock, True, native64, warmup, timed, primal, flush_bytes)
    elif backward:
        result.notes.append("backward not timed: the row's kernel has no backward launch with gradients to seed")
    return result


# --------------------------------------------------------------------------- the run stage's entry


class OwnKernel:
    """The row's own kernel on the GPU, built the way a candidate is (its recorded CUDA put
    in place of itself), on first use; released with the job."""

    def __init__(self, row: dict, device: str, precompiled_header: bool = False):
        self.row, self.device, self.precompiled_header = row, device, precompiled_header
        self._stack = contextlib.ExitStack()
        self._kernel = None
        self.sized: tuple[KernelSpec, str] | None = None  # timing_size's answer for the row, once asked

    def __enter__(self) -> OwnKernel:
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def kernel(self):
        if self._kernel is None:
            row = self.row
            own = candidate_kernel(
                row, row["cuda_forward"], row["cuda_backward"] or None, self.device, self.precompiled_header
            )
            self._kernel = self._stack.enter_context(own)[0]
        return self._kernel


def measure(ref: Reference, row: dict, candidate, own: OwnKernel, device: str, seed: int,
            backward: bool) -> tuple[dict | None, str]:  # fmt: skip
    """Time a candidate that passed the run stage: (TimingResult.to_dict(), "") or (None, why):
    "timed launches: ..." when a timed launch was wrong (the candidate fails), "not timed: ..."
    when the timing itself could not run (the candidate keeps its verdict)."""
    try:
        own_kernel = own.kernel()  # built (compiled) outside the GPU lock
    except CandidateBuildFailed as exc:
        return None, f"not timed: the row's own kernel does not build ({exc})"
    spec = largest_size(ref)
    if any(a.layout for a in spec.args):
        return None, "not timed: a mined kernel's array layouts are not supported by the timing"
    with gpu_access(device, exclusive=True):
        try:
            if own.sized is None:
                own.sized = timing_size(spec, own_kernel, device, probe_rng(seed, str(row["id"])))
            result = time_candidate(spec, own_kernel, candidate, device, seed, str(row["id"]),
                                    backward=backward, native64=ref.native64, sized=own.sized)  # fmt: skip
        except TimingMismatch as exc:
            return None, f"timed launches: {exc}"
        except Exception as exc:  # noqa: BLE001 - an allocation or launch error in the timing itself
            return None, f"not timed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return result.to_dict(), ""
