"""What one worker does with a chunk of rows: two stages, each returning plain data.

1. ``device_stage``: per row, regenerate the CUDA and compare it with the recorded text;
   build the kernel on the GPU in a module of its own, exactly as the producer rendered
   it (so the compiled translation unit can be checked against the recorded text); run
   it forward and backward on the row's recorded inputs and output gradients, at every
   recorded size (test_vectors' sets: the row's own size, then ``more_sizes``).
2. ``reference_stage``: on the CPU, run the float32 kernel again and its float64 twin
   on the same inputs, all in one batched Warp module; tolerance.py turns the two into
   per-element tolerances.

The device stage comes first and is sent back on its own, so a crash in the CPU
stage (a native crash takes the whole process) costs only the tolerance estimate.
Judging happens in the parent (recheck.py); this module only measures.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from .. import warp_boundary
from ..contracts.read import recorded_run, row_to_spec
from ..contracts.reject import compiler_log_line, error_line
from ..contracts.row import Row, is_real_row
from ..contracts.test_vectors import TestVectors, VectorSet
from ..execution import SizedRun, execute_specs, run_kernel
from ..extract import DEFAULT_BLOCK_DIM, generate_cuda
from ..mine.discover import MineError
from ..mine.locate import kernel_of
from ..mine.recheck import run_row
from ..numerics.twin import NativeFloat64, TwinUnavailable, twin_spec, widen_all
from ..spec import KernelSpec
from ..warp_boundary.mining import cpu_module_of
from . import cuda_text


class BuildFailed(Exception):
    """The kernel did not compile or load for the device (one line)."""


@dataclass
class DeviceOutcome:
    pos: int
    regen_differs: list[str] | None = None  # parts that regenerate differently; None: not checked
    compiled_missing: list[str] | None = None  # recorded parts absent from the compiled unit; None: not checked
    build: str = ""  # how the kernel was built, e.g. "ptx sm_86" (driver JIT) or "cubin sm_90"
    error: tuple[str, str] | None = None  # (check, message) when the row could not be run
    has_vectors: bool = True
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    input_grads: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    # the row's other recorded sizes, in test_vectors order: (size label, outputs, input grads, error or None)
    more_sizes: list[tuple[str, dict, dict, tuple[str, str] | None]] = field(default_factory=list)


@dataclass
class ReferenceOutcome:
    pos: int
    twin: str = "ok"  # "ok", or why there is no float64 twin
    native64: bool = False  # the kernel has no float32 code: it is its own float64 reference
    cpu32: dict[str, np.ndarray] = field(default_factory=dict)  # fresh CPU float32 run: outputs + input grads
    ref64: dict[str, np.ndarray] = field(default_factory=dict)  # float64 twin: outputs + input grads
    seconds: float = 0.0
    more_sizes: list[tuple[dict, dict]] = field(default_factory=list)  # (cpu32, ref64) at each other size


@dataclass
class _Prepared:
    pos: int
    row: Row
    spec: KernelSpec | None = None
    inputs: dict | None = None
    output_grads: dict | None = None
    problem: str = ""  # why the row cannot be run ("" if it can)
    sets: list[VectorSet] = field(default_factory=list)  # every recorded size, the row's own first


def prepare(pos: int, row: Row) -> _Prepared:
    item = _Prepared(pos, row)
    if not row.test_vectors:
        item.problem = "no test vectors"
        return item
    try:
        item.spec = row_to_spec(row)
        item.sets = TestVectors.from_json(row.test_vectors).sets()
        item.inputs, _, item.output_grads, _ = recorded_run(row)
    except (KeyError, ValueError, TypeError, orjson.JSONDecodeError) as exc:
        item.problem = f"unreadable test vectors or arg specs: {type(exc).__name__}: {exc}"
    return item


CONTEXT_LOST = "context_lost"


def process_chunk(rows: list[tuple[int, Row]], device: str, stages=("device", "reference")):
    """Yield (stage, outcomes) for each requested stage, device stage first.

    If a kernel leaves the CUDA context unusable (an illegal address is sticky: every
    later call in this process fails), yield the rows done so far and then
    (CONTEXT_LOST, None): the caller must not run anything more in this process.
    """
    items = [prepare(pos, row) for pos, row in rows]
    if "device" in stages:
        done = []
        for item in items:
            done.append(_safely(device_stage, item, device))
            if device.startswith("cuda") and not context_usable(device):
                done[-1].error = (
                    "gpu_run",
                    f"{done[-1].error[1] + '; ' if done[-1].error else ''}this kernel left the CUDA context unusable",
                )
                yield "device", done
                yield CONTEXT_LOST, None
                return
        yield "device", done
    if "reference" in stages:
        try:
            yield "reference", reference_stage(items)
        except Exception as exc:  # noqa: BLE001 - lose the tolerance estimate, not the run
            yield (
                "reference",
                [ReferenceOutcome(item.pos, twin=f"CPU reference stage failed: {error_line(exc)}") for item in items],
            )
    warp_boundary.clear_private_cache()  # every module here was built for one use: keep the disk flat


def context_usable(device: str) -> bool:
    """False after a sticky CUDA error (e.g. an illegal memory access)."""
    wp = warp_boundary.warp()
    try:
        with warp_boundary.quiet_stderr():
            wp.synchronize_device(device)
        return True
    except RuntimeError:
        return False


def _safely(stage, item: _Prepared, device: str) -> DeviceOutcome:
    """A Python error on one row (a malformed row, say) is that row's failure, not the chunk's."""
    try:
        return stage(item, device)
    except Exception as exc:  # noqa: BLE001
        return DeviceOutcome(item.pos, error=("internal", f"while checking this row: {error_line(exc)}"))


# --------------------------------------------------------------------------- device stage


def device_stage(item: _Prepared, device: str) -> DeviceOutcome:
    wp = warp_boundary.warp()
    row, out = item.row, DeviceOutcome(item.pos)
    t0 = time.perf_counter()
    out.regen_differs = cuda_text.regenerate(row)
    out.seconds["regenerate"] = time.perf_counter() - t0
    if item.problem:
        out.has_vectors = item.problem != "no test vectors"
        if out.has_vectors:
            out.error = ("test_vectors", item.problem)
        return out
    spec = item.spec
    if is_real_row(row):
        return _real_device_stage(item, device, out)
    with warp_boundary.loaded_source(row.python_source) as loaded:
        kernel = getattr(loaded.module, spec.kernel_name, None)
        if not isinstance(kernel, wp.Kernel):
            why = loaded.errors[0].message if loaded.errors else f"no kernel named {spec.kernel_name!r}"
            out.error = ("gpu_build", f"source does not load: {why}")
            return out
        return _build_and_run(item, device, out, kernel, kernel.module)


def _real_device_stage(item: _Prepared, device: str, out: DeviceOutcome) -> DeviceOutcome:
    """A mined kernel: found again through its provenance, built alone with its module's options."""

    try:
        kernel = kernel_of(item.row)
    except MineError as exc:
        out.error = ("gpu_build", f"source not found: {exc}")
        return out
    with cpu_module_of([kernel], optimization_level=None, same_options=True) as module:
        return _build_and_run(item, device, out, kernel, module, release=False)


def _build_and_run(
    item: _Prepared, device: str, out: DeviceOutcome, kernel, module, release: bool = True
) -> DeviceOutcome:
    row, spec = item.row, item.spec
    block_dim = spec.block_dim or DEFAULT_BLOCK_DIM
    arch = int(row.compile.arch)
    module.options["block_dim"] = block_dim
    t1 = time.perf_counter()
    try:
        if device.startswith("cuda"):
            out.build, text = _build_cuda(module, device, block_dim, arch)
        else:
            out.build, text = _compile_only(module, arch)
    except BuildFailed as exc:
        out.error = ("gpu_build", str(exc))
        return out
    finally:
        out.seconds["build"] = time.perf_counter() - t1
    out.compiled_missing = cuda_text.compiled_matches(text, row) if text is not None else None
    if not device.startswith("cuda"):
        module.options["optimization_level"] = 0  # dry run: a fast CPU build, results are checked not timed
        module.mark_modified()
    t2 = time.perf_counter()
    try:
        if is_real_row(row):  # a mined kernel: constant outputs are fine there
            run = run_row(row, kernel, device)
        else:
            run = run_kernel(spec, kernel, device, None, item.inputs, item.output_grads)
            for vset in item.sets[1:] if run.ok else ():
                decoded = vset.decoded()
                sized = vset.sized_spec(spec)
                other = run_kernel(sized, kernel, device, None, decoded["inputs"], decoded["output_grads"])
                error = None if other.ok else ("gpu_run", f"size {vset.size}: {other.reason}: {other.detail}")
                out.more_sizes.append((vset.size, other.outputs, other.input_grads, error))
    finally:
        out.seconds["run"] = time.perf_counter() - t2
        if release:
            warp_boundary.release_module(module)
    out.outputs, out.input_grads = run.outputs, run.input_grads
    if not run.ok:
        out.error = ("gpu_run", f"{run.reason}: {run.detail}")
    return out


def _build_cuda(module, device: str, block_dim: int, arch: int) -> tuple[str, str | None]:
    """Compile and load on the GPU; (how it was built, the compiled source text or None
    if Warp's kernel cache does not hold it).

    NVRTC's precompiled header of Warp's headers is on: made by a process's first row,
    reused by the rest (the pool removes a killed worker's).
    Where Warp emits PTX for this driver, it is emitted for the row's recorded arch,
    just like the producer's NVRTC check, and the driver JIT-compiles it for the GPU.
    Where Warp must emit CUBIN (a driver older than Warp's toolkit), it targets the
    GPU's own arch; the compiled-text check then shows whether the text still matches.
    """
    build = _guarded(
        lambda: warp_boundary.load_module_on_gpu(
            module, device, block_dim=block_dim, ptx_arch=arch, precompiled_header=True
        )
    )
    source = Path(warp_boundary.compiled_source_path(module, block_dim))
    return build, (source.read_text(encoding="utf-8") if source.exists() else None)


def _compile_only(module, arch: int) -> tuple[str, str]:
    """Dry run without a GPU: compile the module's CUDA to PTX the way a GPU load would
    (with NVRTC's precompiled header, as :func:`_build_cuda`: its NVRTC ~2x less CPU)."""
    with tempfile.TemporaryDirectory(prefix="cudagen-gpu-") as tmp:
        return f"ptx sm_{arch} (compile only)", _guarded(
            lambda: warp_boundary.compile_module_to_ptx(module, arch, tmp, precompiled_header=True)
        )


def _guarded(build):
    """Run a build step (returns what it returns); on failure raise BuildFailed with the
    error and the compiler's first error line."""
    error = None
    with warp_boundary.captured_stderr() as log:  # NVRTC writes its log to fd 2
        try:
            return build()
        except Exception as exc:  # noqa: BLE001 - NVRTC / driver errors come in many types
            error = exc
    if error is not None:
        raise BuildFailed(error_line(error) + compiler_log_line(log))


# --------------------------------------------------------------------------- reference stage


def reference_stage(items: list[_Prepared]) -> list[ReferenceOutcome]:
    """Fresh float32 CPU runs and float64 twin runs for every runnable row, batched."""
    t0 = time.perf_counter()
    outcomes = [ReferenceOutcome(item.pos) for item in items]
    specs, given, more, owners = [], [], [], []
    for item, out in zip(items, outcomes, strict=False):
        if item.problem:
            out.twin = item.problem
            continue
        if is_real_row(item.row):
            out.twin = "mined kernel: no float64 twin (its source needs its file)"
            continue
        try:
            twin = checked_twin(item.spec)
        except NativeFloat64 as exc:
            out.twin, out.native64 = str(exc), True
            continue
        except TwinUnavailable as exc:
            out.twin = str(exc)
            continue
        specs += [item.spec, twin]
        given += [
            (item.inputs, item.output_grads),
            (widen_all(item.inputs, item.spec.args), widen_all(item.output_grads, item.spec.args)),
        ]
        more32, more64 = [], []
        for vset in item.sets[1:]:
            d = vset.decoded()
            sized = vset.sized_spec(item.spec)
            more32.append(SizedRun(vset.size, sized, (d["inputs"], d["output_grads"])))
            wide = (widen_all(d["inputs"], sized.args), widen_all(d["output_grads"], sized.args))
            more64.append(SizedRun(vset.size, vset.sized_spec(twin), wide))
        more += [more32, more64]
        owners.append(out)
    if specs:
        runs = execute_specs(specs, device="cpu", reference_checks={}, given=given, more=more)
        for i, out in enumerate(owners):
            run32, run64 = runs[2 * i], runs[2 * i + 1]
            if not run32.ok:
                out.twin = f"the float32 CPU re-run failed ({run32.reason}: {run32.detail})"
            elif not run64.ok:
                out.twin = f"the float64 twin failed on the CPU ({run64.reason}: {run64.detail})"
            else:
                out.cpu32 = {**run32.outputs, **_grad_keys(run32.input_grads)}
                out.ref64 = {**run64.outputs, **_grad_keys(run64.input_grads)}
                for (_, _, r32), (_, _, r64) in zip(run32.more_sizes, run64.more_sizes, strict=True):
                    out.more_sizes.append(
                        (
                            {**r32.outputs, **_grad_keys(r32.input_grads)} if r32.ok else {},
                            {**r64.outputs, **_grad_keys(r64.input_grads)} if r64.ok else {},
                        )
                    )
    elapsed = time.perf_counter() - t0
    for out in outcomes:
        out.seconds = elapsed / max(len(outcomes), 1)
    return outcomes


def grad_key(name: str) -> str:
    """Input gradients share the outputs' dict under a key no argument name can take."""
    return f"{name}.grad"


def _grad_keys(grads: dict) -> dict:
    return {grad_key(n): g for n, g in grads.items()}


def checked_twin(spec: KernelSpec) -> KernelSpec:
    """The twin, if Warp can generate it (a codegen error would break the shared CPU build)."""
    wp = warp_boundary.warp()
    twin = twin_spec(spec)
    with warp_boundary.loaded_source(twin.python_source) as loaded:
        kernel = getattr(loaded.module, spec.kernel_name, None)
        if not isinstance(kernel, wp.Kernel):
            why = loaded.errors[0].message if loaded.errors else "kernel missing"
            raise TwinUnavailable(f"the float64 rewrite does not load: {why}")
        try:
            generate_cuda(kernel, block_dim=spec.block_dim or DEFAULT_BLOCK_DIM)
        except Exception as exc:  # noqa: BLE001 - Warp raises many types for bad kernels
            # Warp's first line names the kernel; the last one says what is wrong.
            text = str(exc)
            lines = [ln.strip().lstrip(";") for ln in text.splitlines() if ln.strip()]
            where = re.findall(r'Error while parsing function "(\w+)"', text)
            raise TwinUnavailable(
                f"Warp rejects the float64 rewrite{f' (in {where[-1]})' if where else ''}: "
                f"{lines[-1] if lines else type(exc).__name__}"
            ) from None
    return twin
