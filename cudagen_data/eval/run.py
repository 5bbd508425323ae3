"""Stage 3 (a GPU): the candidate in place of Warp's kernel, run and judged.

Build: the row's Python kernel is loaded as the GPU suite loads it (gpu/worker.py); when
Warp generates its module's CUDA, the recorded forward (and backward, where the
candidate gives one) must be found verbatim in that text and the candidate's text is put
in its place; Warp then compiles and loads that module as usual, in a kernel cache of
its own (a cached binary from an earlier candidate must never be loaded).  The compiled
``.cu`` is checked to contain the candidate.

Run: forward (and backward where the row has one) on every input set of the row's
reference (reference.py), with each array in the middle of a larger buffer whose guard
cells hold a sentinel: a write out of bounds changes a guard and fails the candidate,
as does a write to an input-only array.  Results are judged with the GPU suite's
tolerance model (gpu/tolerance.py); an output that is constant where the reference
varies never passes.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import warp_boundary
from ..extract import DEFAULT_BLOCK_DIM
from ..gpu.tolerance import check_array
from ..spec import DTYPES, ArgSpec, KernelSpec, is_float_dtype
from ..execution import launch, uses_while_loop
from .reference import InputSet, Reference, grad_key

GUARD_ELEMENTS = 256  # at least this many guard scalars on each side of every array


class CandidateBuildFailed(Exception):
    """The candidate's module did not compile or load for the GPU (one line)."""


@dataclass
class Measured:
    values: dict[str, np.ndarray] = field(default_factory=dict)  # outputs and "<name>.grad"
    problems: list[str] = field(default_factory=list)  # guard / input-write violations, launch errors


# --------------------------------------------------------------------------- build


@contextlib.contextmanager
def substituted_module(row: dict, forward: str, backward: str | None):
    """Yield the row's kernel, whose module compiles the candidate's text in place of the
    recorded forward (and backward, where the candidate gives one)."""
    wp = warp_boundary.warp()
    replacements = [(row["cuda_forward"], forward)]
    if backward is not None and row["cuda_backward"]:
        replacements.append((row["cuda_backward"], backward))
    with warp_boundary.loaded_source(row["python_source"]) as loaded:
        kernel = getattr(loaded.module, row["kernel_name"], None)
        if not isinstance(kernel, wp.Kernel):
            raise CandidateBuildFailed("the row's Python source does not load (not the candidate's fault)")
        module = kernel.module
        module.options["block_dim"] = row["block_dim"] or DEFAULT_BLOCK_DIM
        try:
            with warp_boundary.substituted_cuda(module, replacements):
                yield kernel
        finally:
            warp_boundary.release_module(module)


def _guarded_build(build):
    """Run a build step; CandidateBuildFailed with the error and the compiler's first error line."""
    error, log, result = None, [], None
    with warp_boundary.captured_stderr() as log:
        try:
            result = build()
        except warp_boundary.SubstitutionMissing as exc:
            error = f"{exc} (drift: not the candidate's fault)"
        except Exception as exc:  # noqa: BLE001 - NVRTC / driver errors come in many types
            error = _first_line(exc)
    if error is not None:
        raise CandidateBuildFailed(error + _log_line(log))
    return result


def compile_substituted(row: dict, forward: str, backward: str | None = None) -> str:
    """Without a GPU: compile the substituted module to PTX for the row's arch, as a GPU
    load would; returns the translation unit Warp compiled (tests, dry runs)."""
    arch = int(row["compile"]["arch"])
    with substituted_module(row, forward, backward) as kernel, tempfile.TemporaryDirectory(prefix="cudagen-eval-") as tmp:
        return _guarded_build(lambda: warp_boundary.compile_module_to_ptx(kernel.module, arch, tmp))


@contextlib.contextmanager
def candidate_kernel(row: dict, forward: str, backward: str | None, device: str):
    """Yield (kernel, how it was built) with the candidate compiled in, loaded on ``device``
    (a GPU); CandidateBuildFailed if it does not build."""
    block_dim = row["block_dim"] or DEFAULT_BLOCK_DIM
    with substituted_module(row, forward, backward) as kernel:
        # A kernel cache of its own: never a binary of an earlier candidate for this row.
        # As in the GPU suite: PTX for the row's arch where the driver JIT-compiles it, else CUBIN.
        with warp_boundary.fresh_kernel_cache():
            built = _guarded_build(lambda: warp_boundary.load_module_on_gpu(kernel.module, device, block_dim=block_dim, ptx_arch=int(row["compile"]["arch"])))
            compiled = Path(warp_boundary.compiled_source_path(kernel.module, block_dim))
            if not compiled.exists() or forward not in compiled.read_text(encoding="utf-8"):
                raise CandidateBuildFailed("the compiled module does not hold the candidate's text")
        yield kernel, built


# --------------------------------------------------------------------------- run


def _sentinel(np_dtype: str):
    if np_dtype.startswith("float"):
        return np.nan
    if np_dtype == "bool":
        return True
    return np.iinfo(np_dtype).max - 3


def _guarded(arg: ArgSpec, value: np.ndarray, device: str, requires_grad: bool):
    """(view, buffer, guard rows): the array in the middle of a buffer with sentinel rows."""
    wp = warp_boundary.warp()
    np_dtype, comp = DTYPES[arg.dtype]
    row_elems = int(np.prod(arg.shape[1:] + comp, dtype=np.int64)) or 1
    g = max(1, -(-GUARD_ELEMENTS // row_elems))
    full = np.empty((arg.shape[0] + 2 * g, *arg.shape[1:], *comp), dtype=np_dtype)
    full[...] = _sentinel(np_dtype)
    full[g : g + arg.shape[0]] = value
    buf = wp.array(full, dtype=getattr(wp, arg.dtype), shape=(arg.shape[0] + 2 * g, *arg.shape[1:]), device=device, requires_grad=requires_grad)
    view = buf[g : g + arg.shape[0]]
    if requires_grad:
        view.requires_grad = True  # Warp's slice keeps the buffer's grad (a view of it) but not the flag
    return view, buf, g


def _guards_intact(buf_np: np.ndarray, g: int, np_dtype: str, zero: bool) -> bool:
    guards = np.concatenate([buf_np[:g].reshape(-1), buf_np[-g:].reshape(-1)])
    if zero:
        return bool(np.all(guards == 0))
    if np_dtype.startswith("float"):
        return bool(np.all(np.isnan(guards)))
    return bool(np.all(guards == _sentinel(np_dtype)))


def run_guarded(spec: KernelSpec, kernel, device: str, inputs: dict, output_grads: dict, backward: bool) -> Measured:
    """Launch forward (+ backward) on guarded arrays; the results and any violations."""
    wp = warp_boundary.warp()
    out = Measured()
    grad_args = [a for a in spec.args if a.kind == "array" and is_float_dtype(a.dtype)]
    views, bufs = {}, {}
    args = []
    for a in spec.args:
        if a.kind == "array":
            view, buf, g = _guarded(a, inputs[a.name], device, a in grad_args)
            views[a.name], bufs[a.name] = view, (buf, g)
            args.append(view)
        else:
            value = inputs[a.name]
            args.append(getattr(wp, a.dtype)(*value.reshape(-1).tolist()) if isinstance(value, np.ndarray) else value)
    tape = wp.Tape()
    try:
        with tape:
            launch(spec, kernel, args, device)
        wp.synchronize_device(device)
    except Exception as exc:  # noqa: BLE001
        out.problems.append(f"launch failed: {_first_line(exc)}")
        return out
    for a in spec.args:
        if a.kind != "array":
            continue
        buf, g = bufs[a.name]
        np_dtype = DTYPES[a.dtype][0]
        if not _guards_intact(buf.numpy(), g, np_dtype, zero=False):
            out.problems.append(f"wrote out of bounds of array {a.name!r}")
        value = views[a.name].numpy()
        if a.role == "in":
            if not np.array_equal(value, inputs[a.name], equal_nan=np_dtype.startswith("float")):
                out.problems.append(f"wrote to input-only array {a.name!r}")
        else:
            out.values[a.name] = value.copy()
    if not backward or not output_grads or uses_while_loop(spec.python_source):
        return out
    try:
        seeds = {views[n]: wp.array(np.ascontiguousarray(g), dtype=getattr(wp, _arg(spec, n).dtype), device=device) for n, g in output_grads.items()}
        tape.backward(grads=seeds)
        wp.synchronize_device(device)
        for a in grad_args:  # read before tape.reset(), which zeroes every gradient
            buf, g = bufs[a.name]
            if buf.grad is not None and not _guards_intact(buf.grad.numpy(), g, DTYPES[a.dtype][0], zero=True):
                out.problems.append(f"backward wrote out of bounds of the gradient of {a.name!r}")
            if a.role != "out":
                out.values[grad_key(a.name)] = views[a.name].grad.numpy().copy()
    except Exception as exc:  # noqa: BLE001
        out.problems.append(f"backward launch failed: {_first_line(exc)}")
    finally:
        tape.reset()
    return out


# --------------------------------------------------------------------------- judge


def judge_set(ref: Reference, s: InputSet, got: Measured) -> list[str]:
    """Why the candidate's results on one input set fail ([] if they pass)."""
    if got.problems:
        return [f"{s.name} inputs: {p}" for p in got.problems]
    failures = []
    for key, expected in s.expected.items():
        kind = "input gradient" if key.endswith(".grad") else "output"
        name = key[: -len(".grad")] if kind == "input gradient" else key
        if key not in got.values:
            failures.append(f"{s.name} inputs: {kind} {name!r} was not produced")
            continue
        value, expected = got.values[key], np.asarray(expected)
        check = check_array(name, kind, value, expected, cpu32=s.cpu32.get(key), ref64=s.ref64.get(key), native64=ref.native64)
        if not check.ok:
            failures.append(f"{s.name} inputs: {check.describe()}")
        elif _constant(value) and not _constant(expected):
            failures.append(f"{s.name} inputs: {kind} {name!r} is constant where the reference varies")
    return failures


def _constant(a: np.ndarray) -> bool:
    flat = np.asarray(a).reshape(len(a), -1) if np.ndim(a) else np.asarray(a).reshape(1, -1)
    return flat.shape[0] > 1 and bool(np.all(flat == flat[0]))


def _arg(spec: KernelSpec, name: str) -> ArgSpec:
    return next(a for a in spec.args if a.name == name)


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _log_line(log: list[str]) -> str:
    text = "".join(log).strip()
    errors = [ln.strip() for ln in text.splitlines() if "error" in ln.lower()]
    first = errors[0] if errors else (text.splitlines()[0].strip() if text else "")
    return f" | {first}" if first else ""
