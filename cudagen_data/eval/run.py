"""Stage 3 (a GPU): the candidate in place of Warp's kernel, run and judged.

Build: the row's Python kernel is loaded as the GPU suite loads it (gpu/worker.py); when
Warp generates its module's CUDA, the recorded forward (and backward, where the
candidate gives one) must be found verbatim in that text and the candidate's text is put
in its place; Warp then compiles and loads that module as usual, in a kernel cache of
its own (a cached binary from an earlier candidate must never be loaded).  The compiled
``.cu`` is checked to contain the candidate.

Run: forward (and backward where the row has one) on every input set of the row's
reference (reference.py: recorded, fresh and adversarial sets at every recorded size),
all in the one module load, with each array in the middle of a larger buffer whose guard
cells hold a known value (a NaN of the array's own, a huge negative or a huge positive
value): a write out of bounds changes a guard and fails the candidate, as does a write
to an input-only array, and a read out of bounds shows in the results of one of the
fills.  Each recorded set runs with all three fills; the drawn sets take the fills in
turn (one run each), so every fill meets many inputs at every size without tripling the
launches.  Before every launch, forward and backward, shared memory is poisoned with the
fill's word (shared_scrub.py): a kernel that skips loading part of a tile reads poison,
never what the launch before left there (the same kernel on the same inputs, maybe).
The backward runs on the recorded and fresh sets (the adversarial ones target forward
reductions).  Results are judged with the GPU suite's tolerance model
(numerics/tolerance.py); an output that is constant where the reference varies never
passes.

The model bounds a GPU's float error by the float32 error the CPU run makes on the same
inputs.  On a few drawn sets a GPU rounds further off than that for the row's own CUDA
too, and differently from run to run (an H200 and an H100: an atomic float tally of 258
terms with cancellation, summed in the GPU's order: the own kernel's runs at 0.06x, 1.36x
and 1.97x its tolerance, a candidate copy at 2.3x and 5.9x; 1 row of 1,000), and a right
candidate must not score 0 there.  So a float array a candidate misses by little (at most
CALIBRATE_BELOW times its tolerance) is checked against the row's own CUDA, run OWN_RUNS
times on the same set and guard fill (:func:`judge_set`'s ``own``): where its runs differ
from each other (an order the GPU does not fix) or miss the tolerance themselves (by at
most OWN_LIMIT times), the candidate is judged again with OWN_MARGIN times the own
kernel's largest error added to the tolerance, and a note says so.  An own kernel that
repeats itself bit for bit within its tolerance lends nothing.  What the own kernel does
depends on the row and the secret draw alone, never on the candidate.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import warp_boundary
from ..contracts.reject import compiler_log_line, error_line
from ..contracts.row import Row
from ..execution import launch, uses_while_loop
from ..extract import DEFAULT_BLOCK_DIM
from ..numerics.tolerance import check_array
from ..spec import DTYPES, ArgSpec, KernelSpec, is_float_dtype
from .gpu_lock import gpu_lock
from .reference import InputSet, Reference, grad_key

GUARD_ELEMENTS = 256  # at least this many guard scalars on each side of every array
# Calibration against the row's own CUDA (module docstring): a candidate's float array that
# misses its tolerance by at most CALIBRATE_BELOW times is checked against OWN_RUNS runs of
# the own kernel on the same set; runs that differ, or miss by at most OWN_LIMIT times, lend
# the candidate OWN_MARGIN times the own kernel's largest error.
CALIBRATE_BELOW = 64.0
OWN_RUNS = 3
OWN_LIMIT = 64.0
OWN_MARGIN = 4.0


class CandidateBuildFailed(Exception):
    """The candidate's module did not compile or load for the GPU (one line)."""


@dataclass
class Measured:
    values: dict[str, np.ndarray] = field(default_factory=dict)  # outputs and "<name>.grad"
    problems: list[str] = field(default_factory=list)  # guard / input-write violations, launch errors


# --------------------------------------------------------------------------- build


@contextlib.contextmanager
def substituted_module(row: Row, forward: str, backward: str | None):
    """Yield the row's kernel, whose module compiles the candidate's text in place of the
    recorded forward (and backward, where the candidate gives one)."""
    wp = warp_boundary.warp()
    replacements = [(row.cuda_forward, forward)]
    if backward is not None and row.cuda_backward:
        replacements.append((row.cuda_backward, backward))
    with warp_boundary.loaded_source(row.python_source) as loaded:
        kernel = getattr(loaded.module, row.kernel_name, None)
        if not isinstance(kernel, wp.Kernel):
            raise CandidateBuildFailed("the row's Python source does not load (not the candidate's fault)")
        module = kernel.module
        module.options["block_dim"] = row.block_dim or DEFAULT_BLOCK_DIM
        try:
            with warp_boundary.substituted_cuda(module, replacements):
                yield kernel
        finally:
            warp_boundary.release_module(module)


def _guarded_build(build):
    """Run a build step; CandidateBuildFailed with the error and the compiler's first error line."""
    error, result = None, None
    with warp_boundary.captured_stderr() as log:
        try:
            result = build()
        except warp_boundary.SubstitutionMissing as exc:
            error = f"{exc} (drift: not the candidate's fault)"
        except Exception as exc:  # noqa: BLE001 - NVRTC / driver errors come in many types
            error = error_line(exc)
    if error is not None:
        raise CandidateBuildFailed(error + compiler_log_line(log))
    return result


def compile_substituted(row: Row, forward: str, backward: str | None = None, precompiled_header: bool = False) -> str:
    """Without a GPU: compile the substituted module to PTX for the row's arch, as a GPU
    load would; returns the translation unit Warp compiled (tests, dry runs, benchmarks).
    ``precompiled_header``: as for :func:`candidate_kernel`."""
    arch = int(row.compile.arch)
    with (
        substituted_module(row, forward, backward) as kernel,
        tempfile.TemporaryDirectory(prefix="cudagen-eval-") as tmp,
    ):
        return _guarded_build(lambda: warp_boundary.compile_module_to_ptx(kernel.module, arch, tmp, precompiled_header))


@contextlib.contextmanager
def candidate_kernel(row: Row, forward: str, backward: str | None, device: str, precompiled_header: bool = False):
    """Yield (kernel, how it was built) with the candidate compiled in, loaded on ``device``
    (a GPU); CandidateBuildFailed if it does not build.  ``precompiled_header``: NVRTC's
    precompiled header on (a worker process that removes it when done: pool.py)."""
    block_dim = row.block_dim or DEFAULT_BLOCK_DIM
    with substituted_module(row, forward, backward) as kernel:
        # A kernel cache of its own: never a binary of an earlier candidate for this row.
        # As in the GPU suite: PTX for the row's arch where the driver JIT-compiles it, else CUBIN.
        with warp_boundary.fresh_kernel_cache():
            built = _guarded_build(
                lambda: warp_boundary.load_module_on_gpu(
                    kernel.module,
                    device,
                    block_dim=block_dim,
                    ptx_arch=int(row.compile.arch),
                    precompiled_header=precompiled_header,
                )
            )
            compiled = Path(warp_boundary.compiled_source_path(kernel.module, block_dim))
            if not compiled.exists() or forward not in compiled.read_text(encoding="utf-8"):
                raise CandidateBuildFailed("the compiled module does not hold the candidate's text")
        yield kernel, built


# --------------------------------------------------------------------------- run


# Guard cells are checked bit for bit.  A float guard holds a NaN whose payload names its
# array (a NaN computed from an out-of-bounds read is a different NaN, and a value copied
# from another array's guard has another payload), or a huge value of either sign: a
# minimum or maximum that reads past the end picks it up.  Each input set runs once per fill.
GUARD_FILLS = ("nan", "low", "high")
_NAN_BITS = {"float16": (0x7E00, 0xFF), "float32": (0x7FC00000, 0xFFFF), "float64": (0x7FF8000000000000, 0xFFFF)}
_HUGE = {"float16": 6.0e4, "float32": 1.0e30, "float64": 1.0e300}


def guard_value(np_dtype: str, fill: str, salt: int) -> np.ndarray:
    """The guard cell value (a 0-d array) of an array for one fill; ``salt``: the array's position."""
    if np_dtype == "bool":
        return np.array(fill != "low")
    if np_dtype.startswith("float"):
        if fill == "nan":
            base, mask = _NAN_BITS[np_dtype]
            bits = np.array(base | (1 + salt) & mask, dtype=f"uint{8 * np.dtype(np_dtype).itemsize}")
            return bits.view(np_dtype)
        return np.array(-_HUGE[np_dtype] if fill == "low" else _HUGE[np_dtype], dtype=np_dtype)
    info = np.iinfo(np_dtype)
    return np.array(info.min + 3 if fill == "low" else info.max - 3, dtype=np_dtype)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"uint{8 * a.dtype.itemsize}") if a.dtype.kind == "f" else a


def _guarded(arg: ArgSpec, value: np.ndarray, device: str, requires_grad: bool, fill: str = "nan", salt: int = 0,
             guard_elements: int = GUARD_ELEMENTS):  # fmt: skip
    """(view, buffer, guard rows): the array in the middle of a buffer with guard rows."""
    wp = warp_boundary.warp()
    np_dtype, comp = DTYPES[arg.dtype]
    row_elems = int(np.prod(arg.shape[1:] + comp, dtype=np.int64)) or 1
    g = max(1, -(-guard_elements // row_elems))
    full = np.empty((arg.shape[0] + 2 * g, *arg.shape[1:], *comp), dtype=np_dtype)
    full[...] = guard_value(np_dtype, fill, salt)
    full[g : g + arg.shape[0]] = value
    buf = wp.array(
        full,
        dtype=getattr(wp, arg.dtype),
        shape=(arg.shape[0] + 2 * g, *arg.shape[1:]),
        device=device,
        requires_grad=requires_grad,
    )
    view = buf[g : g + arg.shape[0]]
    if requires_grad:
        view.requires_grad = True  # Warp's slice keeps the buffer's grad (a view of it) but not the flag
    return view, buf, g


def guards_intact(buf_np: np.ndarray, g: int, expected: np.ndarray) -> bool:
    """True where every guard cell still holds ``expected``, bit for bit."""
    guards = np.concatenate([buf_np[:g].reshape(-1), buf_np[-g:].reshape(-1)])
    return bool(np.all(_bits(guards) == _bits(np.asarray(expected, dtype=guards.dtype).reshape(1))))


def run_guarded(
    spec: KernelSpec,
    kernel,
    device: str,
    inputs: dict,
    output_grads: dict,
    backward: bool,
    fill: str = "nan",
    guard_elements: int = GUARD_ELEMENTS,
    *,
    scrub=None,
) -> Measured:
    """Launch forward (+ backward) on guarded arrays (guards: ``fill``); the results and any
    violations.  ``scrub``: called with ``fill`` right before each launch (shared_scrub.py:
    shared memory poisoned, so work a kernel skips reads poison, not a leftover)."""
    wp = warp_boundary.warp()
    out = Measured()
    grad_args = [a for a in spec.args if a.kind == "array" and is_float_dtype(a.dtype)]
    views, bufs = {}, {}
    args = []
    for salt, a in enumerate(spec.args):
        if a.kind == "array":
            view, buf, g = _guarded(a, inputs[a.name], device, a in grad_args, fill, salt, guard_elements)
            views[a.name], bufs[a.name] = view, (buf, g)
            args.append(view)
        else:
            value = inputs[a.name]
            args.append(getattr(wp, a.dtype)(*value.reshape(-1).tolist()) if isinstance(value, np.ndarray) else value)
    tape = wp.Tape()
    try:
        with gpu_lock(device, exclusive=False):  # per launch: a timing elsewhere waits for this one only
            if scrub is not None:
                scrub(fill)  # right before the launch, under the same hold: no other kernel runs in between
            with tape:
                launch(spec, kernel, args, device)
            wp.synchronize_device(device)
    except Exception as exc:  # noqa: BLE001
        out.problems.append(f"launch failed: {error_line(exc)}")
        return out
    for salt, a in enumerate(spec.args):
        if a.kind != "array":
            continue
        buf, g = bufs[a.name]
        np_dtype = DTYPES[a.dtype][0]
        full = buf.numpy()  # one copy back per array: its guards and its cells
        if not guards_intact(full, g, guard_value(np_dtype, fill, salt)):
            out.problems.append(f"wrote out of bounds of array {a.name!r}")
        value = full[g : g + a.shape[0]]
        if a.role == "in":
            if not np.array_equal(value, inputs[a.name], equal_nan=np_dtype.startswith("float")):
                out.problems.append(f"wrote to input-only array {a.name!r}")
        else:
            out.values[a.name] = value.copy()
    if not backward or not output_grads or uses_while_loop(spec.python_source):
        return out
    try:
        seeds = {
            views[n]: wp.array(np.ascontiguousarray(g), dtype=getattr(wp, _arg(spec, n).dtype), device=device)
            for n, g in output_grads.items()
        }
        with gpu_lock(device, exclusive=False):
            if scrub is not None:
                scrub(fill)
            tape.backward(grads=seeds)
            wp.synchronize_device(device)
        for a in grad_args:  # read before tape.reset(), which zeroes every gradient
            buf, g = bufs[a.name]
            if buf.grad is None:
                continue
            full = buf.grad.numpy()  # one copy back: the gradient's guards and cells (the view's grad is a view of it)
            if not guards_intact(full, g, np.zeros((), DTYPES[a.dtype][0])):
                out.problems.append(f"backward wrote out of bounds of the gradient of {a.name!r}")
            if a.role != "out":
                out.values[grad_key(a.name)] = full[g : g + a.shape[0]].copy()
    except Exception as exc:  # noqa: BLE001
        out.problems.append(f"backward launch failed: {error_line(exc)}")
    finally:
        tape.reset()
    return out


# --------------------------------------------------------------------------- judge


def judge_set(ref: Reference, s: InputSet, got: Measured, outputs_only: bool = False,
              own: Callable[[], list[Measured]] | None = None,
              notes: list[str] | None = None) -> list[str]:  # fmt: skip
    """Why the candidate's results on one input set fail ([] if they pass).  ``own``: the
    row's own CUDA's results on the same set and fill (OWN_RUNS runs), computed when first
    asked for (the calibration of the module docstring; None: no calibration); ``notes``:
    where a calibrated verdict says so."""
    where = s.label
    if got.problems:
        return [f"{where}: {p}" for p in got.problems]
    failures = []
    for key, expected in s.expected.items():
        if outputs_only and key.endswith(".grad"):
            continue
        kind = "input gradient" if key.endswith(".grad") else "output"
        name = key[: -len(".grad")] if kind == "input gradient" else key
        if key not in got.values:
            failures.append(f"{where}: {kind} {name!r} was not produced")
            continue
        value, expected = got.values[key], np.asarray(expected)
        check = check_array(
            name, kind, value, expected, cpu32=s.cpu32.get(key), ref64=s.ref64.get(key), native64=ref.native64
        )
        if not check.ok and own is not None and expected.dtype.kind == "f" and check.ratio <= CALIBRATE_BELOW:
            check = _calibrated(ref, s, key, value, expected, check, own(), notes)
        if not check.ok:
            failures.append(f"{where}: {check.describe()}")
        elif _constant(value) and not _constant(expected):
            failures.append(f"{where}: {kind} {name!r} is constant where the reference varies")
    return failures


def _calibrated(ref: Reference, s: InputSet, key: str, value: np.ndarray, expected: np.ndarray, check,
                runs: list[Measured], notes: list[str] | None):  # fmt: skip
    """The candidate's check of ``key`` again, with the own kernel's error on this set lent
    to it where the own kernel's runs differ or miss the tolerance (module docstring); else
    ``check``."""
    if not runs or any(m.problems or key not in m.values for m in runs):
        return check
    kw = {"cpu32": s.cpu32.get(key), "ref64": s.ref64.get(key), "native64": ref.native64}
    worst = max((check_array(check.array, check.kind, m.values[key], expected, **kw) for m in runs),
                key=lambda c: c.ratio)  # fmt: skip
    first = runs[0].values[key]
    noisy = any(not np.array_equal(first, m.values[key], equal_nan=True) for m in runs[1:])
    if worst.ratio > OWN_LIMIT or (worst.ok and not noisy):
        return check
    again = check_array(check.array, check.kind, value, expected, allowance=OWN_MARGIN * worst.max_abs, **kw)
    if again.ok and notes is not None:
        how = "differ from each other" if noisy else "repeat themselves"
        notes.append(
            f"{s.label}: {check.kind} {check.array!r} judged with {OWN_MARGIN:g}x the row's own CUDA's error "
            f"added to its tolerance (the own kernel's {len(runs)} runs {how}, at most {worst.ratio:.3g}x the "
            f"tolerance; the candidate: {check.ratio:.3g}x)"
        )
    return again


def planned_runs(ref: Reference) -> Iterator[tuple[InputSet, str, bool]]:
    """(set, guard fill, with backward) for every run: recorded sets with every fill (the
    backward with the first), drawn sets with one fill each in turn (the backward on
    fresh sets, not on adversarial ones).  The sets of a lazy reference are computed as
    the runs reach them."""
    for _, s, fill, with_backward in _numbered_runs(ref):
        yield s, fill, with_backward


def _numbered_runs(ref: Reference) -> Iterator[tuple[int, InputSet, str, bool]]:
    turn = 0
    for k, s in enumerate(ref.iter_sets()):
        if s.kind == "recorded":
            for i, fill in enumerate(GUARD_FILLS):
                yield k, s, fill, i == 0
        else:
            yield k, s, GUARD_FILLS[turn % len(GUARD_FILLS)], s.kind == "fresh"
            turn += 1


# (spec, set, fill, backward) -> the own kernel's OWN_RUNS runs, each set, fill and backward run once (own_runner)
OwnRun = Callable[[KernelSpec, InputSet, str, bool], list[Measured]]


def judge_runs(ref: Reference, kernel, device: str, backward: bool, spec_for=None,
               guard_elements: int = GUARD_ELEMENTS, *, scrub=None, own: OwnRun | None = None,
               notes: list[str] | None = None) -> tuple[list[str], int]:  # fmt: skip
    """:func:`judge_kernel`, and how many of ``ref``'s sets ran (a failing candidate
    stops at the set it fails on).  ``own``: runs the row's own CUDA on a set, for the
    calibration of :func:`judge_set` (None: none); ``notes``: gets its notes."""
    ran = 0
    for k, s, fill, with_backward in _numbered_runs(ref):
        ran = k + 1
        spec = s.spec or ref.spec
        spec = spec_for(spec) if spec_for is not None else spec
        got = run_guarded(spec, kernel, device, s.inputs, s.output_grads, backward and with_backward, fill,
                          guard_elements, scrub=scrub)  # fmt: skip
        own_run = None
        if own is not None:  # an OwnRun keeps its runs: several arrays of this set ask once
            own_run = lambda spec=spec, s=s, fill=fill, b=backward and with_backward: own(spec, s, fill, b)  # noqa: E731
        failures = judge_set(ref, s, got, outputs_only=not with_backward, own=own_run, notes=notes)
        if failures:
            return (failures if fill == "nan" else [f"{f} (guard cells: {fill})" for f in failures]), ran
    return [], ran


def judge_kernel(ref: Reference, kernel, device: str, backward: bool, spec_for=None,
                 guard_elements: int = GUARD_ELEMENTS, *, scrub=None) -> list[str]:  # fmt: skip
    """Run ``kernel`` on every input set of ``ref`` (planned_runs); why it fails ([] if it
    passes).  ``spec_for``: maps each set's spec to the one launched (a wider launch, to
    run threads past the end on purpose; another Python source in tests).  ``scrub``:
    see :func:`run_guarded` (the eval workers poison shared memory before every launch)."""
    return judge_runs(ref, kernel, device, backward, spec_for, guard_elements, scrub=scrub)[0]


def own_runner(own_kernel: Callable[[], object], device: str, scrub=None) -> OwnRun:
    """An :data:`OwnRun` over the row's own kernel (``own_kernel()`` builds it on first use;
    a build that fails gives no calibration), each (set, fill, backward) run OWN_RUNS times once."""
    kept: dict[tuple, list[Measured]] = {}

    def run(spec: KernelSpec, s: InputSet, fill: str, backward: bool) -> list[Measured]:
        key = (s.name, s.size, fill, backward)
        if key not in kept:
            try:
                kernel = own_kernel()
            except CandidateBuildFailed as exc:
                kept[key] = [Measured(problems=[f"the row's own CUDA does not build: {exc}"])]
            else:
                kept[key] = [run_guarded(spec, kernel, device, s.inputs, s.output_grads, backward, fill, scrub=scrub)
                             for _ in range(OWN_RUNS)]  # fmt: skip
        return kept[key]

    return run


def _constant(a: np.ndarray) -> bool:
    flat = np.asarray(a).reshape(len(a), -1) if np.ndim(a) else np.asarray(a).reshape(1, -1)
    return flat.shape[0] > 1 and bool(np.all(flat == flat[0]))


def _arg(spec: KernelSpec, name: str) -> ArgSpec:
    return next(a for a in spec.args if a.name == name)
