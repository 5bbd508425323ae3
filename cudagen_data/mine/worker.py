"""Mine a few files (runs in a worker process): kernels -> CUDA -> compile check -> CPU run.

:func:`mine_bundle` yields plain-data messages as it goes, so that a file which later
hangs or crashes its worker still hands over what was done before: first every kernel's
CUDA and compile verdict, then the CPU runs in small chunks.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import pickle
import select
import signal
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import xxhash

from .. import execution as execute
from .. import gradcheck
from .. import warp_boundary as warp_env
from ..bisect import bisect_failures
from ..contracts.reject import RealReject, RejectReason, error_line
from ..contracts.row import GradientCheckInfo
from ..contracts.test_vectors import TestVectors
from ..extract.codegen import DEFAULT_ARCH, ExtractedKernel, generate_cuda
from ..extract.levels import DEFAULT_COMPILE_LEVEL
from ..extract.nvrtc import compile_units
from ..generators.difficulty import difficulty
from ..generators.ml._common import features_of
from ..spec import ArgSpec, KernelSpec, is_float_dtype
from ..warp_boundary import mining as warp_mining
from . import argspecs, bounds, order, values
from .collect import collect
from .discover import SourceFile

CATEGORY = "real"
EXECUTE_CHUNK = 40  # kernels per CPU build (a failed build is bisected)


@dataclass
class MinedKernel:
    relpath: str
    package: str
    line: int  # the kernel's first decorator line in its file
    qualname: str
    kernel_name: str
    overload: str  # Warp's signature of a generic kernel's overload; "" otherwise
    python_source: str  # the kernel's own definition, dedented
    preamble: str
    device_functions: str
    forward: str
    backward: str
    generation_ms: float
    features: list[str]
    difficulty: str
    compile_ok: bool | None = None
    compile_log: str = ""
    compile_ms: float = 0.0
    arch: int = DEFAULT_ARCH
    compile_level: str = ""  # the compile check's level (extract/levels.py); "" when not checked
    arg_specs: list[dict] | None = None  # None: cannot be filled from annotations
    launch_dim: list[int] = field(default_factory=list)
    not_run: str = ""  # why the kernel was not run (or its run not kept)
    test_vectors: dict | None = None


@dataclass
class Executed:
    """The CPU run of one kernel of the file's kernel list."""

    index: int
    test_vectors: dict | None
    arg_specs: list[dict] | None
    not_run: str
    gradient_check: GradientCheckInfo | None = None  # the row's gradient_check, where the backward was checked
    check_seconds: float = 0.0  # of that check (timing only)
    order_dependent: list[str] = field(default_factory=list)  # entries not recorded: they depend on thread order
    order_seconds: float = 0.0  # of the chunk's reversed runs (timing only; on its first kernel)


def mine_bundle(
    srcs: list[SourceFile],
    *,
    arch: int = DEFAULT_ARCH,
    compile_check: bool = True,
    compile_level: str = DEFAULT_COMPILE_LEVEL,
    run: bool = True,
) -> Iterator[tuple[str, Any]]:
    """Mine a few files; their CPU runs share builds (an LLVM build costs ~1 s whatever its size).

    Yields, per file: ("start", pos), ("seconds", {...}), ("kernels", (pos, kernels,
    rejects)); then ("compiling", None) and ("compiled", [(pos, index, ok, log, ms, level), ...]);
    then ("runs", None) and ("executed", [(pos, Executed), ...]) chunks.

    The compile check runs once for the whole bundle (an NVRTC call costs ~0.5 s
    whatever its size, parsing Warp's headers), after every file is imported.
    """
    every: list[tuple[int, int, MinedKernel, object]] = []  # (file position, kernel index, kernel, wp.Kernel)
    for pos, src in enumerate(srcs):
        yield "start", pos
        kernels, rejects, live, seconds = prepare_file(src, arch=arch, compile_check=False, run=run)
        yield "seconds", seconds
        yield "kernels", (pos, kernels, rejects)
        every += [(pos, i, k, obj) for i, (k, obj) in enumerate(zip(kernels, live, strict=False))]
    if compile_check and every:
        yield "compiling", None
        clock = time.perf_counter()
        compile_kernels([e[2] for e in every], arch=arch, level=compile_level)
        yield "seconds", {"compile": time.perf_counter() - clock}
        yield (
            "compiled",
            [(e[0], e[1], e[2].compile_ok, e[2].compile_log, e[2].compile_ms, e[2].compile_level) for e in every],
        )
    queue = [e for e in every if not e[2].not_run and e[2].compile_ok is not False]
    if not run or not queue:
        return
    yield "runs", None
    warp_mining.reset_process_state()  # the last file may have changed wp.config (mode, ...)
    for start in range(0, len(queue), EXECUTE_CHUNK):
        chunk = queue[start : start + EXECUTE_CHUNK]
        clock = time.perf_counter()
        done = run_chunk([c[2] for c in chunk], [c[3] for c in chunk], [c[1] for c in chunk])
        for c, e in zip(chunk, done, strict=False):
            e.not_run = public_text(e.not_run, srcs[c[0]])
        checks = sum(e.check_seconds for e in done)
        reversed_runs = sum(e.order_seconds for e in done)
        yield (
            "seconds",
            {
                "run": time.perf_counter() - clock - checks - reversed_runs,
                "gradcheck": checks,
                "thread_order": reversed_runs,
            },
        )
        yield "executed", [(c[0], e) for c, e in zip(chunk, done, strict=False)]


def prepare_file(
    src: SourceFile,
    *,
    arch: int = DEFAULT_ARCH,
    compile_check: bool = True,
    compile_level: str = DEFAULT_COMPILE_LEVEL,
    run: bool = True,
) -> tuple[list[MinedKernel], list[RealReject], list, dict[str, float]]:
    """(kernels with CUDA and compile verdict, rejects, live kernel objects, stage seconds)."""
    seconds = {}
    clock = time.perf_counter()
    found = collect(src)
    seconds["import"] = time.perf_counter() - clock
    clock = time.perf_counter()
    rejects = definitions_not_collected(src, found)
    if found.import_error is not None:
        return [], rejects, [], seconds
    defs_by_line = {d.line: d for d in found.defs}
    lines = found.source.splitlines(True)
    tree = ast.parse(found.source)
    ends = {n.lineno: n.end_lineno for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    kernels: list[MinedKernel] = []
    live: list[object] = []
    for f in found.found:
        d = defs_by_line[f.line]
        source = textwrap.dedent("".join(lines[f.line - 1 : ends.get(d.def_line, d.def_line)]))
        for target, kernel in generate_overloads(src, f, source, arch, rejects):
            kernels.append(kernel)
            live.append(target)
    seconds["codegen"] = time.perf_counter() - clock
    if compile_check and kernels:
        clock = time.perf_counter()
        compile_kernels(kernels, arch=arch, level=compile_level)
        seconds["compile"] = time.perf_counter() - clock
    for k in kernels:
        if not k.not_run and argspecs.uses_tiles(k.python_source):
            k.not_run = "tile kernel: its block size is not stated in the source"
        elif not k.not_run and not run:
            k.not_run = "not run (--no-run)"
    return kernels, rejects, live, seconds


def definitions_not_collected(src: SourceFile, found) -> list[RealReject]:
    """A reject for each kernel definition of the file that import did not create: every one
    where the file fails to import; else those whose replay failed and those never run."""
    if found.import_error is not None:
        reason = classify_import_error(found.import_error)
        detail = public_text(found.import_error, src)
        return [RealReject(src.relpath, d.line, d.qualname, reason, detail) for d in found.defs]
    rejects = [
        RealReject(src.relpath, d.line, d.qualname, RejectReason.NOT_REPLAYABLE, public_text(err, src))
        for d, err in found.replay_errors or []
    ]
    covered = {f.line for f in found.found} | {d.line for d, _ in found.replay_errors or []}
    for d in found.defs:
        if d.line not in covered:
            # Defined inside a function that import does not run, in a class body that
            # failed, or under a branch not taken at import.
            rejects.append(
                RealReject(
                    src.relpath, d.line, d.qualname, RejectReason.NOT_CREATED, "the definition never ran at import"
                )
            )
    return rejects


def generate_overloads(
    src: SourceFile, f, source: str, arch: int, rejects: list[RealReject]
) -> Iterator[tuple[object, MinedKernel]]:
    """(wp.Kernel, its CUDA as a MinedKernel) for collected kernel ``f`` (whose definition is
    ``source``), one per overload of a generic kernel; what Warp cannot generate goes to
    ``rejects``."""
    targets = [(f.kernel, "")]
    if f.kernel.is_generic:
        targets = [(ovl, sig) for sig, ovl in f.kernel.overloads.items()]
        if not targets:
            rejects.append(
                RealReject(
                    src.relpath,
                    f.line,
                    f.qualname,
                    RejectReason.GENERIC_NO_OVERLOADS,
                    "generic kernel with no wp.overload: its types are only known at launch",
                )
            )
    for target, sig in targets:
        t0 = time.perf_counter()
        try:
            with warp_env.quiet_stderr():
                ext = generate_cuda(target, arch=arch, root=naming_root(src))  # paths as #18 names them
        except Exception as exc:  # noqa: BLE001 - Warp raises many types for kernels it rejects
            rejects.append(
                RealReject(
                    src.relpath,
                    f.line,
                    _named(f.qualname, sig),
                    RejectReason.CODEGEN_ERROR,
                    public_text(error_line(exc), src),
                )
            )
            continue
        ms = (time.perf_counter() - t0) * 1000.0
        specs, why = argspecs.arg_specs(target)
        kernel_tree = ast.parse(source)
        feats = features_of(kernel_tree)
        yield target, MinedKernel(
            relpath=src.relpath, package=src.package, line=f.line, qualname=f.qualname,
            kernel_name=f.qualname.rsplit(".", 1)[-1], overload=sig, python_source=source,
            preamble=ext.preamble, device_functions=ext.device_functions, forward=ext.forward,
            backward=ext.backward,
            generation_ms=round(ms, 3), features=list(feats), difficulty=difficulty(CATEGORY, kernel_tree, feats),
            arch=arch, arg_specs=[s.to_dict() for s in specs] if specs else None,
            launch_dim=[argspecs.EXTENT] * argspecs.launch_rank(source), not_run=why,
        )  # fmt: skip


def compile_kernels(kernels: list[MinedKernel], *, arch: int, level: str) -> None:
    """The compile check of these kernels (any files), one translation unit per preamble
    (failing units bisected: a kernel's verdict never depends on its neighbours)."""
    by_preamble: dict[str, list[MinedKernel]] = {}
    for k in kernels:
        by_preamble.setdefault(k.preamble, []).append(k)
    for group in by_preamble.values():
        units = [
            ExtractedKernel(k.kernel_name, "", k.line, k.preamble, k.device_functions, k.forward, k.backward)
            for k in group
        ]
        for k, res in zip(group, compile_units(units, arch=arch, level=level), strict=False):
            k.compile_ok, k.compile_log, k.compile_ms = res.ok, res.log, round(res.time_ms, 3)
            k.compile_level = level


def _named(qualname: str, sig: str) -> str:
    return f"{qualname}[{sig}]" if sig else qualname


def classify_import_error(message: str) -> RejectReason:
    low = message.lower()
    if "cuda" in low and ("device" in low or "driver" in low or "not available" in low) or "gpu" in low:
        return RejectReason.NEEDS_GPU
    if message.startswith(("ModuleNotFoundError", "ImportError")):
        return RejectReason.MISSING_DEPENDENCY
    if message.startswith("SyntaxError"):
        return RejectReason.SYNTAX_ERROR
    return RejectReason.IMPORT_ERROR


def naming_root(src: SourceFile) -> str:
    """The folder a mined file is named relative to (the mined root's parent): what
    :func:`warp_boundary.postprocess_cuda` and ``scrub_paths`` take as ``root``."""
    return os.path.dirname(src.root)


def public_text(text: str, src: SourceFile) -> str:
    """An error message with this machine's paths made machine-independent, on one line."""
    text = warp_env.scrub_paths(text, naming_root(src))
    return " ".join(text.split("\\n")).replace("\n", " ")


# --------------------------------------------------------------------------- CPU runs


def _spec(k: MinedKernel, specs: list, index: int) -> KernelSpec:
    key = f"{k.relpath}:{k.line}:{k.qualname}:{k.overload}"
    return KernelSpec(
        category=CATEGORY, kernel_name=k.kernel_name, python_source=k.python_source,
        args=tuple(ArgSpec.from_dict(s) for s in specs), launch_dim=tuple(k.launch_dim),
        difficulty=k.difficulty, seed=xxhash.xxh3_64_intdigest(key.encode()) & 0x7FFFFFFFFFFFFFFF, index=0,
    )  # fmt: skip


def run_chunk(kernels: list[MinedKernel], live: list, indices: list[int]) -> list[Executed]:
    """Build the chunk's kernels as one CPU module and run each (bisecting a failed build),
    then keep only what does not depend on thread order (:mod:`.order`)."""
    done = run_forward(kernels, live, indices)
    clock = time.perf_counter()
    ran = [
        p
        for p, e in enumerate(done)
        if e.test_vectors is not None
        and not order.plainly_independent(kernels[p].forward, [a["name"] for a in e.arg_specs if a["kind"] == "array"])
    ]
    if ran:
        for p, again in zip(
            ran, run_reversed([kernels[p] for p in ran], [live[p] for p in ran], [done[p] for p in ran]), strict=False
        ):
            done[p] = keep_order_independent(done[p], again)
    if done:
        done[0].order_seconds = time.perf_counter() - clock
    return done


def keep_order_independent(done: Executed, again: Executed) -> Executed:
    """The forward run, less the outputs and gradients the reversed run did not reproduce."""
    if again.test_vectors is None:
        why = again.not_run.split(": ", 1)[-1] if again.not_run.startswith("run in reverse") else again.not_run
        return dataclasses.replace(
            done,
            test_vectors=None,
            gradient_check=None,
            not_run=f"{order.NOT_RUN} (the run with threads reversed: {why})",
        )
    dropped = order.order_dependent(done.test_vectors, again.test_vectors)
    if not dropped:
        return done
    dropped = done.order_dependent + dropped
    kept = order.without(done.test_vectors, dropped)
    if kept is None:
        names = ", ".join(repr(d.split(".", 1)[1]) for d in dropped if d.startswith("outputs."))
        return dataclasses.replace(
            done,
            test_vectors=None,
            gradient_check=None,
            not_run=f"{order.NOT_RUN}: {names} differ with the threads run in reverse",
        )
    check = done.gradient_check
    if check is not None and any(d.startswith("input_grads.") for d in dropped):
        check = GradientCheckInfo(
            status="unverified",
            reason="input gradients depend on thread order: not recorded, not checked",
            precision="",
            probes=0,
            worst_rel_error=0.0,
        )
    return dataclasses.replace(done, test_vectors=kept, order_dependent=dropped, gradient_check=check)


def run_reversed(kernels: list[MinedKernel], live: list, done: list[Executed]) -> list[Executed]:
    """Each kernel built again with its threads run last to first, on its recorded inputs
    and output gradients (no gradient check)."""

    def attempt(pos):
        with warp_mining.cpu_module_of([live[p] for p in pos], optimization_level=execute.CPU_OPT_LEVEL) as module:
            with warp_mining.reversed_thread_order(module):
                error = warp_env.build_module(module, "cpu")
            if error is not None and len(pos) > 1:
                return None
            if error is not None:
                return [Executed(done[pos[0]].index, None, None, f"CPU build failed: {error.split(' | ')[0]}")]
            out = []
            for p in pos:
                dec = TestVectors(**done[p].test_vectors).decoded()
                k = dataclasses.replace(kernels[p], arg_specs=done[p].arg_specs)
                out.append(run_isolated(k, live[p], done[p].index, given=(dec["inputs"], dec["output_grads"])))
            return out

    return bisect_failures(list(range(len(kernels))), attempt)


def run_forward(kernels: list[MinedKernel], live: list, indices: list[int]) -> list[Executed]:
    """Build the kernels as one CPU module and run each (bisecting a failed build)."""

    def attempt(pos):
        with warp_mining.cpu_module_of([live[p] for p in pos], optimization_level=execute.CPU_OPT_LEVEL) as module:
            error = warp_env.build_module(module, "cpu")
            if error is not None and len(pos) > 1:
                return None
            if error is not None:
                # the build log's first line only: the rest names private cache paths
                return [
                    Executed(
                        indices[pos[0]], None, kernels[pos[0]].arg_specs, f"CPU build failed: {error.split(' | ')[0]}"
                    )
                ]
            return [run_isolated(kernels[p], live[p], indices[p]) for p in pos]

    return bisect_failures(list(range(len(kernels))), attempt)


RUN_TIMEOUT_S = 20.0
FENCED = b"F"  # the child's first byte once its fenced launches passed (a pickle starts with b"\x80")


def run_isolated(k: MinedKernel, kernel, index: int, given: tuple[dict, dict] | None = None) -> Executed:
    """:func:`run_one` in a forked child: a kernel that divides by zero (SIGFPE), steps
    outside its arrays (SIGSEGV) or never ends costs only that child, not the worker and
    the CPU build it holds.  The child only launches the already built kernel, first with
    its arrays fenced (:mod:`.bounds`): one that faults there is named by :func:`crashed`."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(read_end)
            check = False if given else None
            done = run_one(k, kernel, index, given, check_gradients=check, fenced=lambda: os.write(write_end, FENCED))
            data = pickle.dumps(done)
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    timed_out = False
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                break
            block = pipe.read(1 << 16)
            if not block:
                break
            chunks.append(block)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    fenced = data.startswith(FENCED)
    data = data[len(FENCED) :] if fenced else data
    if timed_out:
        return Executed(index, None, k.arg_specs, f"run hung (over {RUN_TIMEOUT_S:.0f} s)")
    if data:
        return pickle.loads(data)
    return Executed(index, None, k.arg_specs, crashed(k, kernel, index, given, status, fenced))


def crashed(k: MinedKernel, kernel, index: int, given, status: int, fenced: bool) -> str:
    """Why a child of :func:`run_isolated` ended with nothing to say (its exit ``status``):
    where its fenced launches had not passed and a fault ended it, the arrays it steps
    outside of (:func:`.bounds.outside`, from this process: each launch in a child of its
    own); else "run crashed (SIGFPE)" or the like."""
    how = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else f"exit code {os.WEXITSTATUS(status)}"
    # SIGFPE too: a divisor read past the end is a zero in the launch fenced on the other side
    if not fenced and how in ("SIGSEGV", "SIGBUS", "SIGFPE"):
        spec = _spec(k, k.arg_specs, index)
        try:
            why = bounds.outside(spec, kernel, _inputs(spec, given))
        except Exception:  # noqa: BLE001 - the crash stays a crash where the fences say nothing
            why = ""
        if why:
            return why
    return f"run crashed ({how})"


class NotRun(Exception):
    """Why a kernel's run is not kept: its row's ``provenance.not_executed_reason``."""


def run_one(
    k: MinedKernel,
    kernel,
    index: int,
    given: tuple[dict, dict] | None = None,
    device: str = "cpu",
    check_gradients: bool | None = None,
    fenced=None,
) -> Executed:
    """Launch on seeded (or ``given``) inputs, then backward on seeded (or given) output
    gradients; judge both.  Then (by default when mining, not when re-running ``given``
    vectors) the tape gradients against finite differences, on the same built kernel.
    ``fenced``: this process is a disposable child (:func:`run_isolated`); see :func:`launch_taped`."""
    try:
        spec, result, grad_args = launch_taped(k, _spec(k, k.arg_specs, index), kernel, given, device, fenced)
        racy = drop_racy_outputs(k, spec, kernel, result, device) if given is None else []
    except NotRun as why:
        return Executed(index, None, k.arg_specs, str(why))
    vectors = orjson.loads(execute.test_vectors(spec, result).to_json())
    check, clock = None, time.perf_counter()
    if (given is None if check_gradients is None else check_gradients) and grad_args and result.output_grads:
        check = gradient_check_of(spec, kernel, result, device)
    return Executed(
        index,
        vectors,
        [a.to_dict() for a in spec.args],
        "",
        check,
        time.perf_counter() - clock,
        [f"outputs.{n}" for n in racy],
    )


def launch_taped(
    k: MinedKernel, spec: KernelSpec, kernel, given: tuple[dict, dict] | None, device: str, fenced=None
) -> tuple[KernelSpec, execute.ExecutionResult, list[ArgSpec]]:
    """The forward on seeded (or given) inputs under a tape, then the backward on seeded (or
    given) output gradients: (the spec, struct fields the run left unchanged now inputs; the
    result; the arguments with gradients).  NotRun where the run fails, steps outside its
    arrays on the CPU (:mod:`.bounds`) or writes nothing finite.  On the CPU the kernel is
    first launched with its arrays fenced: here, where ``fenced`` is given (this process is
    a disposable child: a fault ends it, then ``fenced()`` says the launches passed), else
    each in a child (:func:`.bounds.outside`)."""
    wp = warp_env.warp()
    inputs = _inputs(spec, given)
    # Struct fields and indexed/fabric arrays are run forward only: the tape's adjoint and
    # the gradient check launch plain arguments.
    with_backward = (
        bool(k.backward) and not execute.uses_while_loop(k.python_source) and not values.has_views(spec.args)
    )
    grad_args = [a for a in spec.args if a.kind == "array" and is_float_dtype(a.dtype)] if with_backward else []
    held = bounds.guards(device)  # kept alive: the run's arrays live in its buffers (None off the CPU)
    made = {a.name: values.warp_value(a, inputs[a.name], device, a in grad_args, held) for a in spec.args}
    warp_args = {name: passed for name, (passed, _) in made.items()}
    make = execute.to_warp if held is None else held.array
    result = execute.ExecutionResult(
        False, inputs={n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in inputs.items()}
    )
    tape = wp.Tape()
    try:
        with warp_env.quiet_stderr():
            if held is not None and fenced is not None:
                bounds.launch_fenced(spec, kernel, inputs)
                fenced()
            elif held is not None:
                why = bounds.outside(spec, kernel, inputs)
                if why:
                    raise NotRun(why)
            with tape:
                execute.launch(spec, kernel, values.launch_values(kernel, spec.args, warp_args), device)
            result.outputs = {
                a.name: made[a.name][1].numpy().copy() for a in spec.args if a.kind == "array" and a.role != "in"
            }
            bad = held.breach("") if held is not None else None
            if bad is not None:
                raise NotRun(bad[1])
            if given is None:
                spec = _unwritten_fields_as_inputs(spec, result)
                if not result.outputs:
                    raise NotRun("writes no array argument: the run left every struct field unchanged")
            for name, out in result.outputs.items():
                if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
                    raise NotRun(f"output {name!r} has non-finite values")
            if grad_args:
                seeds = execute.draw_output_grads(spec, grad_args) if given is None else given[1]
                if seeds:
                    tape.backward(
                        grads={
                            warp_args[n]: make(next(a for a in spec.args if a.name == n), g, device, False)
                            for n, g in seeds.items()
                        }
                    )
                    bad = held.breach(" in the backward") if held is not None else None
                    if bad is not None:
                        raise NotRun(bad[1])
                result.output_grads = seeds
                result.input_grads = {
                    a.name: warp_args[a.name].grad.numpy().copy() for a in grad_args if a.role != "out"
                }
                for name, grad in result.input_grads.items():
                    if not np.all(np.isfinite(grad)):
                        raise NotRun(f"gradient of {name!r} has non-finite values")
    except NotRun:
        raise
    except Exception as exc:  # noqa: BLE001
        raise NotRun(f"run failed: {error_line(exc)}") from None
    finally:
        tape.reset()
    return spec, result, grad_args


def _inputs(spec: KernelSpec, given: tuple[dict, dict] | None) -> dict:
    """The run's inputs: the given ones, else drawn from the spec's own stream."""
    if given is not None:
        return given[0]
    rng = execute.input_rng(spec)
    return {a.name: execute.draw_value(a, rng) for a in spec.args}


def drop_racy_outputs(k: MinedKernel, spec: KernelSpec, kernel, result, device: str) -> list[str]:
    """Remove from ``result`` the outputs several threads store to without an atomic
    (:func:`lost_updates`) and return their names; NotRun where none is left, or where the
    runs with fewer threads fail (the outputs are then not shown safe)."""
    try:
        racy = lost_updates(k, spec, kernel, result.inputs, set(result.outputs), device)
    except Exception as exc:  # noqa: BLE001 - a run with fewer threads that fails: not shown safe
        raise NotRun(f"{order.NOT_RUN} (the runs with fewer threads failed: {error_line(exc)})") from None
    for name in racy:
        del result.outputs[name]
    if racy and not result.outputs:
        names = ", ".join(repr(n) for n in racy)
        raise NotRun(f"{order.NOT_RUN}: {names} stored by several threads without an atomic")
    return racy


def lost_updates(k: MinedKernel, spec: KernelSpec, kernel, inputs: dict, outputs: set[str], device: str) -> list[str]:
    """Outputs that several threads store to without an atomic (:mod:`.order`): the
    forward's plain stores at an index other than the thread's own, then the kernel run
    from the same inputs with 1, 2, ... threads along each launch dimension in turn."""
    wp = warp_env.warp()
    suspects = sorted(order.shared_stores(k.forward, outputs))
    if not suspects:
        return []
    args = {a.name: a for a in spec.args}
    several: set[str] = set()
    for axis in range(len(spec.launch_dim)):  # threads added along each dimension in turn
        states = {n: [np.asarray(inputs[n]).copy()] for n in suspects}
        for threads in range(1, spec.launch_dim[axis] + 1):
            made = {a.name: values.warp_value(a, inputs[a.name], device, False) for a in spec.args}
            dim = list(spec.launch_dim)
            dim[axis] = threads
            with warp_env.quiet_stderr():
                wp.launch(
                    kernel,
                    dim=dim[0] if len(dim) == 1 else tuple(dim),
                    device=device,
                    inputs=values.launch_values(kernel, spec.args, {n: m[0] for n, m in made.items()}),
                )
            for n in suspects:
                states[n].append(made[n][1].numpy().copy())
        several |= {n for n in suspects if order.written_by_several(states[n], len(args[n].shape))}
    return [n for n in suspects if n in several]


def _unwritten_fields_as_inputs(spec: KernelSpec, result) -> KernelSpec:
    """Warp does not say which struct fields a kernel writes, so every field array was
    drawn and read back: a field the run left unchanged is an input (dropped from the
    outputs, role "in"), never an output that records nothing."""
    args = []
    for a in spec.args:
        if (
            "." in a.name
            and a.kind == "array"
            and a.name in result.outputs
            and np.array_equal(result.outputs[a.name], result.inputs[a.name])
        ):
            del result.outputs[a.name]
            a = dataclasses.replace(a, role="in")
        args.append(a)
    return dataclasses.replace(spec, args=tuple(args))


def gradient_check_of(spec: KernelSpec, kernel, result, device: str) -> GradientCheckInfo:
    """The row's gradient_check: the built kernel's tape gradients against finite
    differences, in float32 (a mined kernel needs its file, so no float64 twin is made).
    A disagreeing adjoint is kept as ``mismatch`` with the construct responsible where
    known: the row is real code, and users filter on the status."""
    with warp_env.quiet_stderr():
        check = gradcheck.check_built(spec, kernel, gradcheck.Point(result.inputs, result.output_grads), device=device)
    info = GradientCheckInfo(**check.to_row())
    if check.status == "mismatch" and check.construct:
        info.reason = gradcheck.summary_reason(check)
    return info
