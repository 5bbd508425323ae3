"""Run generated kernels on Warp's CPU backend: seeded inputs, outputs, input gradients.

All kernels of a batch are built as one Warp CPU module (one LLVM build instead of one
per kernel).  Every kernel is launched on inputs drawn from its spec's domains with an
rng derived from the spec alone, so a kernel's test vectors never depend on which batch
it ran in.  A kernel is accepted when all its outputs are finite and vary, and the
gradients of its float inputs (wp.Tape, seeded output gradients) are finite.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import xxhash

from . import inputs_matter, sizes, spans, warp_boundary
from .bisect import bisect_failures
from .contracts.reject import RejectReason, error_line
from .contracts.test_vectors import TestVectors, VectorSet
from .generators import ml
from .spec import DTYPES, ArgSpec, KernelSpec, is_float_dtype, parametric_dtype

CPU_OPT_LEVEL = 0  # ~2x faster LLVM builds than Warp's default; results are checked, not timed

Value = Any  # np.ndarray for arrays, a Python number or np.ndarray (components) for scalars


@dataclass
class ExecutionResult:
    ok: bool
    reason: RejectReason | None = None  # when not ok
    detail: str = ""
    inputs: dict[str, Value] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    output_grads: dict[str, np.ndarray] = field(default_factory=dict)
    input_grads: dict[str, np.ndarray] = field(default_factory=dict)
    # the runs at the other sizes (sizes.py), in the order asked: (label, spec at that size, run)
    more_sizes: list[tuple[str, KernelSpec, ExecutionResult]] = field(default_factory=list)
    # with probe_inputs: arguments whose fresh values changed no output (inputs.py)
    unused_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SizedRun:
    """A run asked at another size: its label, the spec at that size, and the recorded
    (inputs, output gradients) to run with (None: drawn from the size's own stream)."""

    label: str
    spec: KernelSpec
    given: tuple[dict, dict] | None = None
    guard: float = 0.0  # > 0 for a guessed size: run_kernel's out-of-bounds guard, this many times each array
    alternatives: tuple[KernelSpec, ...] = ()  # other guesses at this size, tried in order if ``spec`` fails


def input_rng(spec: KernelSpec, stream: str = "") -> np.random.Generator:
    """The rng for a spec's inputs: a stream of its own, apart from the generator's
    (``stream``: another size's, or a fresh draw's; "" the recorded size's)."""
    extra = [xxhash.xxh32_intdigest(stream.encode())] if stream else []
    return np.random.default_rng(
        [spec.seed & 0xFFFFFFFFFFFFFFFF, xxhash.xxh32_intdigest(spec.category.encode()), spec.index, 7, *extra]
    )


def draw_value(arg: ArgSpec, rng: np.random.Generator) -> Value:
    """A seeded value for one argument, as NumPy components (shape + component shape)."""
    np_dtype, comp = DTYPES[arg.dtype]
    shape = tuple(arg.shape) + comp
    if arg.kind == "array" and arg.role == "out":
        return np.zeros(shape, dtype=np_dtype)
    lo, hi = arg.domain
    if np_dtype == "bool":
        data = rng.integers(0, 2, size=shape).astype(bool)
    elif np_dtype.startswith(("int", "uint")):
        data = rng.integers(int(np.ceil(lo)), int(np.floor(hi)) + 1, size=shape).astype(np_dtype)
    else:
        data = rng.uniform(lo, hi, size=shape).astype(np_dtype)
    if arg.kind == "scalar" and not comp:
        return data.item()
    return data


def draw_inputs(spec: KernelSpec, stream: str = "") -> dict[str, Value]:
    rng = input_rng(spec, stream)
    return {arg.name: draw_value(arg, rng) for arg in spec.args}


def warp_dtype(dtype: str):
    """The Warp type of a spec dtype name (named, or parametric: ``vector(3,int8)``)."""
    wp = warp_boundary.warp()
    parsed = parametric_dtype(dtype)
    if parsed is None:
        return getattr(wp, dtype)
    kind, dims, scalar = parsed
    scalar_type = getattr(wp, scalar)
    if kind == "vector":
        return wp.types.vector(length=dims[0], dtype=scalar_type)
    if kind == "matrix":
        return wp.types.matrix(shape=dims, dtype=scalar_type)
    return getattr(wp.types, kind)(dtype=scalar_type)


def to_warp(arg: ArgSpec, value: Value, device: str, requires_grad: bool):
    wp = warp_boundary.warp()
    wp_type = warp_dtype(arg.dtype)
    if arg.kind == "array":
        return wp.array(
            np.ascontiguousarray(value),
            dtype=wp_type,
            shape=tuple(arg.shape),
            device=device,
            requires_grad=requires_grad,
        )
    if isinstance(value, np.ndarray):  # vector / matrix / quaternion by value
        return wp_type(*value.reshape(-1).tolist())
    return value


def check_outputs(
    spec: KernelSpec, inputs: dict[str, Value], outputs: dict[str, np.ndarray]
) -> tuple[RejectReason, str] | None:
    """(reason, detail) if an output is non-finite or does not vary, else None."""
    for arg in spec.args:
        if arg.name not in outputs:
            continue
        out = outputs[arg.name]
        if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
            return RejectReason.NAN_OUTPUT, f"output {arg.name!r} has non-finite values"
        if out.size > len(DTYPES[arg.dtype][1]) and np.prod(arg.shape) > 1:
            flat = out.reshape(int(np.prod(arg.shape)), -1)
            if np.all(flat == flat[0]):
                what = "all zero" if not np.any(flat) else "constant"
                return RejectReason.CONSTANT_OUTPUT, f"output {arg.name!r} is {what}"
        elif np.array_equal(out, inputs[arg.name]):
            return RejectReason.CONSTANT_OUTPUT, f"output {arg.name!r} is unchanged by the kernel"
    return None


ReferenceCheck = Callable[[KernelSpec, dict, dict], "str | None"]


def execute_specs(
    specs: Sequence[KernelSpec],
    *,
    device: str = "cpu",
    reference_checks: dict[str, ReferenceCheck] | None = None,
    given: Sequence[tuple[dict, dict] | None] | None = None,
    more: Sequence[Sequence[SizedRun]] | None = None,
    probe_inputs: bool = False,
    on_run: Callable[[int, object, ExecutionResult], None] | None = None,
) -> list[ExecutionResult]:
    """Run each spec once (forward + backward) and judge the results; one result per spec.

    Kernels are built together; if the shared build fails (one kernel breaks the C++
    build for all), the batch is split in halves until the culprits stand alone.
    ``reference_checks`` maps a category to a NumPy check (None means: the registry's).
    ``given`` supplies, per spec, recorded (inputs, output gradients) to run with instead
    of drawing them (re-checking a row's test vectors, here or on a GPU).  ``more`` asks,
    per spec, for runs at other sizes on the same build (sizes.py; each judged like the
    first, into ``result.more_sizes``); they run only where the first run passed.
    ``probe_inputs``: check that the outputs depend on the inputs (inputs_matter.py): a kernel
    whose outputs ignore every input is rejected (input_blind), and the arguments that
    reach no output are listed in ``result.unused_args``.
    ``on_run(i, kernel, result)`` is called for each successful run while its kernel is
    still loaded (the gradient check of a kernel without a float64 twin runs the very
    kernel this built, instead of building it again: gradcheck.check_own_build).
    """
    if reference_checks is None:
        reference_checks = ml.REFERENCE_CHECKS

    def attempt(idx: Sequence[int]) -> list[ExecutionResult] | None:
        sub = [specs[i] for i in idx]
        sources = [(spec.python_source, spec.kernel_name) for spec in sub]
        backward = [not forward_only_reason(spec.python_source) for spec in sub]
        with warp_boundary.batch_module(sources, optimization_level=CPU_OPT_LEVEL, backward=backward) as (
            module,
            kernels,
            errors,
        ):
            with spans.span("execute.build"):
                build_error = (
                    warp_boundary.build_module(module, device) if any(k is not None for k in kernels) else None
                )
            if build_error is not None and len(idx) > 1:
                return None  # one kernel broke the shared build: bisect
            results = []
            for i, spec, kernel, error in zip(idx, sub, kernels, errors, strict=False):
                if kernel is None:
                    results.append(ExecutionResult(False, RejectReason.LOAD_ERROR, error))
                elif build_error is not None:
                    results.append(ExecutionResult(False, RejectReason.BUILD_ERROR, build_error))
                else:
                    inputs, grads = given[i] if given is not None and given[i] is not None else (None, None)
                    with spans.span("execute.run"), contextlib.ExitStack() as stack:
                        check = reference_checks.get(spec.category)
                        cpu0 = time.process_time()
                        result = run_kernel(spec, kernel, device, check, inputs, grads)
                        seconds = time.process_time() - cpu0
                        if result.ok and probe_inputs:
                            probe_inputs_of(spec, kernel, device, result)
                        if result.ok:
                            judge = _Judge(spec, seconds, stack, device)
                            for sized in more[i] if more is not None else ():
                                result.more_sizes.append(_run_size(sized, kernel, device, check, judge))
                    results.append(result)
                    if on_run is not None and result.ok:
                        on_run(i, kernel, result)
            return results

    return bisect_failures(list(range(len(specs))), attempt)


REFERENCE_SPAN = "execute.run.reference"  # the category's NumPy reference check of a run (bench_produce's breakdown)

# A guessed size whose run is predicted to take longer than this (the first run's CPU time
# times sizes.work_growth) is first tried on an optimized build of the kernel (below).
COSTLY_GUESS_SECONDS = 1.0
JUDGE_OPT_LEVEL = 2  # Warp's default level: its runs several times faster than CPU_OPT_LEVEL's on loops


class OptimizedBuild:
    """``spec``'s source built again at JUDGE_OPT_LEVEL, the first time its kernel is asked
    for (one build, held by ``stack``): runs several times faster than the row's
    CPU_OPT_LEVEL build on loops, and records the same bits (the same C++; no fast math:
    tests/test_cpu_build.py).  Used where a run's cost, not what it records, is the
    question: the size search's costly guesses (``_Judge``) and the gradient check's
    costly sizes (gradcheck._check_sizes, for a row's own kernel or its float64 twin).
    CPU builds only: the same-bits claim is tested on the CPU."""

    def __init__(self, spec: KernelSpec, stack: contextlib.ExitStack, device: str, backward: bool):
        self.spec, self.stack, self.device, self.backward = spec, stack, device, backward

    @functools.cached_property
    def kernel(self):
        """The kernel built at JUDGE_OPT_LEVEL (None off the CPU, where the two levels are not
        shown to agree, or if the build fails: then the caller runs on the row's build)."""
        if self.device != "cpu":
            return None
        module, kernels, _ = self.stack.enter_context(
            warp_boundary.batch_module(
                [(self.spec.python_source, self.spec.kernel_name)],
                optimization_level=JUDGE_OPT_LEVEL,
                backward=[self.backward],
            )
        )
        if kernels[0] is not None and warp_boundary.build_module(module, self.device) is None:
            return kernels[0]
        return None


class _Judge(OptimizedBuild):
    """Fails a costly guessed size cheaply.  The size search (sizes.py) tries guesses in
    order until one passes; a guess that grows a loop bound with the launch can run for
    seconds at CPU_OPT_LEVEL before its guard sees the write past the end, and its failure
    is only seen once its last threads run.  Such a guess is first run forward on the
    OptimizedBuild of the same source, built without its adjoint (half the build; guesses
    fail in their forward: 0 of 54 judged at 1,000 pairs failed after it): a failure there
    is the guess's verdict; a pass is run again, forward and backward, on the row's own
    build, which alone records what a row keeps."""

    def __init__(self, spec: KernelSpec, seconds: float, stack: contextlib.ExitStack, device: str):
        super().__init__(spec, stack, device, backward=False)
        self.seconds = seconds

    def costly(self, guess: KernelSpec, sized: SizedRun) -> bool:
        if sized.guard <= 0 or sized.given is not None:
            return False  # only guesses are judged so (recorded sizes are known to pass)
        return self.seconds * sizes.work_growth(self.spec, guess) > COSTLY_GUESS_SECONDS


def _run_size(
    sized: SizedRun, kernel, device: str, check, judge: _Judge | None = None
) -> tuple[str, KernelSpec, ExecutionResult]:
    """(label, spec, run) of a size: its spec's run, or the first of its alternatives that
    passes (the first failure where none does)."""
    first = None
    tried: list[tuple[KernelSpec, ExecutionResult]] = []  # (guess, params aside; its failed run)
    for spec in (sized.spec, *sized.alternatives):
        failed = _FailedGuessTime()
        if _fails_as_before(spec, tried, check):
            failed.add()  # the same launch on the same inputs as a guess that failed: it fails again
            continue
        inputs, grads = sized.given or (draw_inputs(spec, sized.label), None)
        run = None
        if judge is not None and judge.costly(spec, sized) and judge.kernel is not None:
            judged = run_kernel(spec, judge.kernel, device, check, inputs, grads, sized.label, sized.guard, False)
            run = None if judged.ok else judged
        if run is None:
            run = run_kernel(spec, kernel, device, check, inputs, grads, sized.label, sized.guard)
        if run.ok:
            return sized.label, spec, run
        failed.add()
        first = first or (sized.label, spec, run)
        if sized.given is None:
            tried.append((spec, run))
    return first


class _FailedGuessTime:
    """The time of one guess, from now until :meth:`add`, booked as the size search's cost
    above the runs a row keeps (bench_produce's breakdown: ``execute.run.failed_size``), and
    the reference checks inside it apart too (REFERENCE_SPAN + ".failed_size"), so that the
    breakdown counts the kept runs' reference checks once and these not twice."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.reference = spans.so_far(REFERENCE_SPAN)

    def add(self) -> None:
        spans.add("execute.run.failed_size", time.perf_counter() - self.wall, time.process_time() - self.cpu)
        (wall, cpu), (wall0, cpu0) = spans.so_far(REFERENCE_SPAN), self.reference
        spans.add(REFERENCE_SPAN + ".failed_size", wall - wall0, cpu - cpu0)


def _reference_message(check: ReferenceCheck, spec: KernelSpec, inputs: dict, outputs: dict) -> str | None:
    """What the category's NumPy reference says of a run (empty or None when it agrees), timed
    (REFERENCE_SPAN); a reference that cannot take these shapes fails the run at this size."""
    try:
        with spans.span(REFERENCE_SPAN):
            return check(spec, inputs, outputs)
    except Exception as exc:  # noqa: BLE001 - a reference that cannot take these shapes: not this kernel's size
        return f"reference failed: {error_line(exc)}"


def _fails_as_before(guess: KernelSpec, tried: list[tuple[KernelSpec, ExecutionResult]], check) -> bool:
    """Whether ``guess`` is sure to fail, from a guess of the same size that failed and
    differs from it in ``params`` alone.  Only a category's NumPy reference reads
    ``params``: the launch, its drawn inputs and output gradients, the guard and the output
    checks are the same (a run is deterministic: the same bits), so such a guess fails
    again, unless the earlier one failed at the reference check itself; then that check is
    asked again, on the earlier run's inputs and outputs, with this guess's ``params``
    (passing it, the guess runs in full).  The size search tries up to 32 guesses a size,
    many of them changing only an integer the reference reads (sizes.alternatives)."""
    for spec, run in tried:
        if replace(spec, params=guess.params) != guess:
            continue
        if run.reason != RejectReason.REFERENCE_MISMATCH or check is None:
            return True  # failed before the reference check, or after it had passed (the backward)
        inputs = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in run.inputs.items()}
        return bool(_reference_message(check, guess, inputs, {k: v.copy() for k, v in run.outputs.items()}))
    return False


def run_kernel(
    spec: KernelSpec,
    kernel,
    device: str = "cpu",
    reference_check: ReferenceCheck | None = None,
    inputs: dict[str, Value] | None = None,
    output_grads: dict[str, np.ndarray] | None = None,
    stream: str = "",
    guard: float = 0.0,
    backward: bool = True,
) -> ExecutionResult:
    """Launch one kernel on seeded (or given) inputs, then backward; judge outputs and gradients.
    ``stream`` names the draw of another size (its output gradients are seeded apart too).
    ``guard`` > 0: the arrays live at the start of buffers ``guard`` times their size (plus
    :data:`GUARD_PAD`), the rest filled with a sentinel; a run that writes there, or reads
    NaN from there, fails (out_of_bounds): a size guessed for a kernel (sizes.py) is kept
    only where the kernel stays inside its arrays at that size.  ``backward`` False: a
    kernel built without its adjoint (forward only)."""
    wp = warp_boundary.warp()
    if inputs is None:
        inputs = draw_inputs(spec)
    result = ExecutionResult(
        False, inputs={k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    )
    grad_args = [a for a in spec.args if a.kind == "array" and is_float_dtype(a.dtype)]
    guards = Guards(guard, reach=guard_reach(spec, guard)) if guard > 0 else None
    make = guards.array if guards is not None else to_warp
    warp_args = {a.name: make(a, inputs[a.name], device, a in grad_args) for a in spec.args}
    tape = wp.Tape()
    try:
        with tape:
            launch(spec, kernel, [warp_args[a.name] for a in spec.args], device)
        result.outputs = {
            a.name: warp_args[a.name].numpy().copy() for a in spec.args if a.kind == "array" and a.role != "in"
        }
    except Exception as exc:  # noqa: BLE001
        result.reason, result.detail = RejectReason.LAUNCH_ERROR, error_line(exc)
        return result
    bad = guards.breach() if guards is not None else None
    bad = bad or check_outputs(spec, inputs, result.outputs)
    if bad is None and reference_check is not None:
        message = _reference_message(reference_check, spec, result.inputs, result.outputs)
        if message:
            bad = (RejectReason.REFERENCE_MISMATCH, message)
    if bad is not None:
        result.reason, result.detail = bad
        return result

    if not backward or forward_only_reason(spec.python_source):
        result.ok = True  # forward checked; a forward-only kernel ships no backward to run
        return result
    seeds = output_grads if output_grads is not None else draw_output_grads(spec, grad_args, stream)
    try:
        if seeds:
            tape.backward(grads={warp_args[n]: make(_arg(spec, n), g, device, False) for n, g in seeds.items()})
        result.output_grads = seeds
        result.input_grads = {a.name: warp_args[a.name].grad.numpy().copy() for a in grad_args if a.role != "out"}
    except Exception as exc:  # noqa: BLE001
        result.reason, result.detail = RejectReason.BACKWARD_ERROR, error_line(exc)
        return result
    finally:
        tape.reset()
    breach = guards.breach() if guards is not None else None
    if breach is not None:
        result.reason, result.detail = breach
        return result
    for name, grad in result.input_grads.items():
        if not np.all(np.isfinite(grad)):
            result.reason, result.detail = RejectReason.NAN_GRADIENT, f"gradient of {name!r} has non-finite values"
            return result
    result.ok = True
    return result


GUARD_PAD = 1024  # sentinel components after every guarded array, beyond its grown capacity


def guard_reach(spec: KernelSpec, factor: float) -> int:
    """Elements every guarded buffer of ``spec``'s run holds at least: what its largest
    array's buffer holds (``factor`` times its elements).  A guess can grow a loop bound and
    the arrays indexed by it while leaving another array the same loop reads at its old
    size (sizes.alternatives): sized by its own extent, that array's buffer ended long
    before the reads did (scan's serial_exclusive_scan, an input of 64 read to element
    4,227,135: past the buffer into whatever memory lay there, a segfault or not by the
    process's memory layout).  Every buffer reaching as far as the largest makes such reads
    land in a sentinel tail, whatever the layout."""
    return int(max((math.prod(a.shape) for a in spec.args if a.kind == "array"), default=0) * factor)


class Guards:
    """Arrays for :func:`run_kernel`'s ``guard``: each at the start of a larger NumPy buffer
    whose tail holds a sentinel, after a head of sentinel too (Warp wraps an index in
    ``[-n, 0)`` once; one below ``-n`` lands before the array); :meth:`breach` says whether
    a launch wrote into a tail or a head.
    A float tail holds NaNs whose bits name the buffer and the position (a kernel reading
    them computes NaN: a NaN output fails the run), so a NaN computed from another
    buffer's tail and written into this one is told apart from the sentinel; gradient
    tails hold 0, integer tails an unlikely value.  The buffers live as long as this object.

    A guessed size's buffers are large (``factor`` times an array that has grown already:
    hundreds of MB for a batch), so the sentinel cells are written and compared in place,
    a cache-sized chunk at a time (:func:`_sentinel_chunks`), with no copy of their bytes kept."""

    def __init__(self, factor: float, reach: int = 0) -> None:
        self.factor = factor
        self.reach = reach  # elements every buffer holds at least, of its own array's type (guard_reach)
        # (name, buffer, n, sentinel of its tail) and (name, head before the buffer, sentinel of the head);
        # a sentinel: a NaN buffer number (int) or the bits of a constant fill (a NumPy unsigned scalar)
        self.tails: list[tuple[str, np.ndarray, int, int | np.unsignedinteger]] = []
        self.heads: list[tuple[str, np.ndarray, int | np.unsignedinteger]] = []

    def _buffer(self, name: str, flat: np.ndarray, fill, capacity: int = 0) -> np.ndarray:
        """The array's buffer (its first ``n`` components, then the tail: ``factor`` times
        ``n`` in all, or ``capacity`` components if more: guard_reach), placed after a head of
        ``factor`` times ``n`` sentinel components too: a guessed size can index below 0 too
        (``n - 1 - i`` with ``n`` left at the generated size), and a write there would land on
        the heap allocator's own bookkeeping (glibc aborts later, in another kernel's run)."""
        n = flat.size
        size = int(n * self.factor) + GUARD_PAD  # the head's, and the buffer's at the least
        length = max(size, capacity + GUARD_PAD)  # the buffer's, tail included: indices run forward
        if fill is None:
            tail_is, head_is = len(self.tails), len(self.tails) + _HEAD
        else:
            tail_is = head_is = np.array(fill, dtype=flat.dtype).view(_UINT[flat.dtype.itemsize])[()]
        # a zero sentinel (gradient buffers) is what a fresh zeroed allocation holds already:
        # large ones come from the OS as zero pages, nothing to write
        zero = fill is not None and tail_is == 0
        whole = (np.zeros if zero else np.empty)(size - n + length, dtype=flat.dtype)
        head, buf = whole[: size - n], whole[size - n :]
        buf[:n] = flat
        if not zero:
            _fill_sentinel(_bits(buf[n:]), tail_is)
            _fill_sentinel(_bits(head), head_is)
        self.tails.append((name, buf, n, tail_is))
        self.heads.append((name, head, head_is))
        return buf

    def array(self, arg: ArgSpec, value: Value, device: str, requires_grad: bool):
        if arg.kind != "array":
            return to_warp(arg, value, device, requires_grad)
        wp = warp_boundary.warp()
        flat = np.ascontiguousarray(value).reshape(-1)
        kind = flat.dtype.kind
        fill = None if kind == "f" else (True if kind == "b" else np.iinfo(flat.dtype).max - 7)
        wp_type = warp_dtype(arg.dtype)
        capacity = self.reach * (flat.size // max(math.prod(arg.shape), 1))  # in components
        buf = self._buffer(arg.name, flat, fill, capacity)
        arr = wp.array(ptr=buf.ctypes.data, dtype=wp_type, shape=tuple(arg.shape), device=device)
        if requires_grad:
            gbuf = self._buffer(f"{arg.name}.grad", np.zeros_like(flat), 0, capacity)
            arr.grad = wp.array(ptr=gbuf.ctypes.data, dtype=wp_type, shape=tuple(arg.shape), device=device)
        return arr

    def breach(self, where: str = " at this size") -> tuple[RejectReason, str] | None:
        """(out_of_bounds, which array's cells a launch changed, then ``where``) or None."""
        for name, buf, n, sentinel in self.tails:
            if not _holds_sentinel(_bits(buf[n:]), sentinel):
                return RejectReason.OUT_OF_BOUNDS, f"writes past the end of {name!r}{where}"
        for name, head, sentinel in self.heads:
            if not _holds_sentinel(_bits(head), sentinel):
                return RejectReason.OUT_OF_BOUNDS, f"writes before the start of {name!r}{where}"
        return None


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_HEAD = 4099  # heads' NaN payloads: buffer numbers of their own, apart from every tail's
_QUIET_NAN = {2: (0x7E00, 0x1FF), 4: (0x7FC00000, 0x3FFFFF), 8: (0x7FF8000000000000, 0x7FFFFFFFFFFFF)}
_CHUNK = 1 << 16  # sentinel components written or compared per step (a few hundred KB: stays in cache)


def _bits(cells: np.ndarray) -> np.ndarray:
    """``cells`` as unsigned integers of the same width (sentinels are compared bit for bit)."""
    return cells.view(_UINT[cells.dtype.itemsize])


@functools.lru_cache(maxsize=8)
def _evens(uint: type) -> np.ndarray:
    """0, 2, 4, ... (``_CHUNK`` of them) in ``uint``, wrapping at its width."""
    return (np.arange(_CHUNK, dtype=np.uint64) * 2).astype(uint)


def _sentinel_chunks(bits: np.ndarray, sentinel):
    """(cells, what they hold) a ``_CHUNK`` at a time, for ``bits`` (a buffer's unsigned view)
    holding ``sentinel``.  An int sentinel ``b`` is a run of quiet NaNs whose payloads differ
    by buffer and position: cell ``i`` holds ``base | ((2 i + 1 + 7919 b) & mask)``
    (computed at the cells' own width: ``mask + 1`` divides ``2 ** width``, so the wrap
    changes nothing); any other sentinel is one constant's bits."""
    if not isinstance(sentinel, int):
        for a in range(0, bits.size, _CHUNK):
            yield bits[a : a + _CHUNK], sentinel
        return
    scratch = np.empty(min(_CHUNK, bits.size), dtype=bits.dtype)
    for a in range(0, bits.size, _CHUNK):
        cells = bits[a : a + _CHUNK]
        want = scratch[: cells.size]
        _nan_cells(want, a, sentinel)
        yield cells, want


def _nan_cells(out: np.ndarray, a: int, sentinel: int) -> None:
    """Write into ``out`` (at most ``_CHUNK`` unsigned cells) NaN sentinel ``sentinel``'s cells
    ``a``, ``a + 1``, ... (:func:`_sentinel_chunks`).  Where the payload does not wrap within
    ``out`` (nearly always: it wraps every ``(mask + 1) / 2`` cells), ``base | (low + 2 i)``
    is ``(base | low) + 2 i`` (``base`` and ``mask`` share no bit): one pass instead of three."""
    uint = out.dtype.type
    base, mask = _QUIET_NAN[out.dtype.itemsize]
    width = 8 * out.dtype.itemsize
    first = (1 + sentinel * 7919 + 2 * a) % (1 << width)  # the unmasked payload of cell a
    evens = _evens(uint)[: out.size]
    low = first & mask
    if low + 2 * (out.size - 1) <= mask:
        np.add(evens, uint(base | low), out=out)
        return
    np.add(evens, uint(first), out=out)
    np.bitwise_and(out, uint(mask), out=out)
    np.bitwise_or(out, uint(base), out=out)


def _fill_sentinel(bits: np.ndarray, sentinel) -> None:
    if not isinstance(sentinel, int):
        bits.fill(sentinel)
        return
    for a in range(0, bits.size, _CHUNK):
        _nan_cells(bits[a : a + _CHUNK], a, sentinel)


def _holds_sentinel(bits: np.ndarray, sentinel) -> bool:
    if not isinstance(sentinel, int) and sentinel == 0:
        return np.count_nonzero(bits) == 0  # one pass, no temporary
    return all(bool((cells == want).all()) for cells, want in _sentinel_chunks(bits, sentinel))


def forward_outputs(spec: KernelSpec, kernel, device: str, inputs: dict[str, Value]) -> dict[str, np.ndarray]:
    """One forward launch on ``inputs`` (no tape): the arrays the kernel writes."""
    warp_args = {a.name: to_warp(a, inputs[a.name], device, False) for a in spec.args}
    launch(spec, kernel, [warp_args[a.name] for a in spec.args], device)
    return {a.name: warp_args[a.name].numpy() for a in spec.args if a.kind == "array" and a.role != "in"}


def probe_inputs_of(spec: KernelSpec, kernel, device: str, result: ExecutionResult) -> None:
    """Judge ``result`` (a passing run) by inputs_matter: reject it if its outputs ignore
    every input, list the arguments that reach no output."""
    verdict = inputs_matter.judge(
        spec,
        result.inputs,
        result.outputs,
        lambda inputs: forward_outputs(spec, kernel, device, inputs),
        lambda stream: draw_inputs(spec, stream),
    )
    result.unused_args = verdict.unused
    if verdict.blind:
        result.ok = False
        result.reason = RejectReason.INPUT_BLIND
        result.detail = "outputs are the same for fresh inputs: they ignore every input"


def uses_while_loop(source: str) -> bool:
    """True if the source has a ``while`` loop.

    Warp 1.19's CPU adjoint of a while loop writes out of bounds (glibc aborts with
    "double free or corruption" a few launches later) and returns zero gradients, so
    such kernels are checked forward only and record no gradients.
    """
    return any(isinstance(node, ast.While) for node in ast.walk(ast.parse(source)))


@functools.lru_cache(maxsize=1024)  # asked several times per row (execute, gradcheck, rows): parse once
def forward_only_reason(source: str) -> str | None:
    """Why a kernel ships no backward to check (None: it has one).

    A source declares itself forward-only the Warp way: ``wp.set_module_options(
    {"enable_backward": False})`` or ``@wp.kernel(enable_backward=False)``.  Kernels with
    a ``while`` loop are forward-only too: Warp 1.19's CPU adjoint of a while loop
    corrupts the heap (execute.uses_while_loop).
    """
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and call_name(node.func) == "set_module_options" and node.args:
            opts = node.args[0]
            if isinstance(opts, ast.Dict):
                for k, v in zip(opts.keys, opts.values, strict=False):
                    if (
                        isinstance(k, ast.Constant)
                        and k.value == "enable_backward"
                        and isinstance(v, ast.Constant)
                        and v.value is False
                    ):
                        return "declared forward-only (enable_backward=False)"
        if isinstance(node, ast.Call) and call_name(node.func) == "kernel":
            for kw in node.keywords:
                if kw.arg == "enable_backward" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                    return "declared forward-only (enable_backward=False)"
    if uses_while_loop(source):
        return "while loop: Warp's CPU adjoint of while loops is unusable"
    return None


def call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def draw_output_grads(spec: KernelSpec, grad_args: list[ArgSpec], stream: str = "") -> dict[str, np.ndarray]:
    """Seed gradients for every float output, from a stream of the spec's own."""
    extra = [xxhash.xxh32_intdigest(stream.encode())] if stream else []
    rng = np.random.default_rng(
        [spec.seed & 0xFFFFFFFFFFFFFFFF, xxhash.xxh32_intdigest(spec.category.encode()), spec.index, 11, *extra]
    )
    seeds = {}
    for a in grad_args:
        if a.role != "in":
            np_dtype, comp = DTYPES[a.dtype]
            seeds[a.name] = rng.uniform(-1.0, 1.0, size=tuple(a.shape) + comp).astype(np_dtype)
    return seeds


def launch(spec: KernelSpec, kernel, args: list, device: str, *, record: bool = False):
    """Launch ``kernel`` on ``args``; ``record``: do not run it, return Warp's recorded
    launch instead (``.launch()`` runs it again on the same arrays, without packing the
    arguments each time: the gradient check launches a kernel ~80 times)."""
    wp = warp_boundary.warp()
    dim = spec.launch_dim[0] if len(spec.launch_dim) == 1 else tuple(spec.launch_dim)
    if spec.is_tiled:
        return wp.launch_tiled(kernel, dim=dim, inputs=args, block_dim=spec.block_dim, device=device, record_cmd=record)
    return wp.launch(kernel, dim=dim, inputs=args, device=device, record_cmd=record)


def _arg(spec: KernelSpec, name: str) -> ArgSpec:
    return next(a for a in spec.args if a.name == name)


def test_vectors(spec: KernelSpec, result: ExecutionResult) -> TestVectors:
    """The test vectors of a successful run: its own size, and every other size that passed."""
    recorded = VectorSet.of(spec, result.inputs, result.outputs, result.output_grads, result.input_grads)
    more = [
        VectorSet.of(sized, run.inputs, run.outputs, run.output_grads, run.input_grads, label)
        for label, sized, run in result.more_sizes
        if run.ok
    ]
    return TestVectors.of_sets(recorded, more)


def size_note(result: ExecutionResult, fixed_reason: str) -> str:
    """Why a successful run's test vectors hold only some sizes ("" when every size asked passed):
    ``fixed_reason`` (sizes.fixed_size_reason) where no other size was asked, else each failed size's reason."""
    if not result.more_sizes:
        return f"fixed size: {fixed_reason}" if fixed_reason else ""
    failed = [f"{label}: {run.reason}: {run.detail}" for label, _, run in result.more_sizes if not run.ok]
    return "; ".join(failed)
