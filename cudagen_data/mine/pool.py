"""Worker processes that mine one file at a time, each file under a time limit.

Importing a file runs its top-level code.  So files are mined in worker processes the
parent can kill: a file that hangs costs its time limit, a file that crashes its worker
costs only itself (the other files of its bundle are mined again, each alone).  A
worker takes a small bundle of files, so that their CPU runs share one LLVM build; each
run is forked from the worker (worker.run_isolated), so a kernel that divides by zero
or writes out of bounds on made-up inputs loses only its own run.

This pool is separate from the producer's executor because it needs per-task time
limits and kill-and-replace, which ``concurrent.futures`` pools do not offer.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from ..contracts.reject import RealReject, RejectReason
from ..pipeline.pool import PipeWorker, exit_reason
from .discover import SourceFile
from .worker import Executed, MinedKernel

FILES_PER_WORKER = 40  # a worker keeps every module it imported: recycle it now and then
STARTUP_TIMEOUT_S = 300
BUNDLE_FILES = 8  # files per task: their CPU runs share LLVM builds
BUNDLE_DEFS = 40


@dataclass(frozen=True)
class Options:
    arch: int = 86
    compile_check: bool = True
    compile_level: str = "frontend"  # extract/levels.py: as produce's --compile
    run: bool = True
    timeout_s: float = 60.0


@dataclass
class FileResult:
    src: SourceFile
    kernels: list[MinedKernel] = field(default_factory=list)
    rejects: list[RealReject] = field(default_factory=list)
    executed: dict[int, Executed] = field(default_factory=dict)
    not_run: dict[int, str] = field(default_factory=dict)  # runs that crashed or hung the worker
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)


def _worker_main(conn: Connection, options: Options) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # mined files print; keep the terminal for the parent
    os.dup2(devnull, 2)
    from ..warp_boundary.mining import install_kernel_hook
    from .worker import mine_bundle

    install_kernel_hook()
    conn.send(("ready", None))  # the time limit counts from here, not from Warp's start-up
    while True:
        bundle = conn.recv()
        if bundle is None:
            return
        try:
            for message in mine_bundle(
                bundle,
                arch=options.arch,
                compile_check=options.compile_check,
                compile_level=options.compile_level,
                run=options.run,
            ):
                conn.send(message)
        except BaseException as exc:  # noqa: BLE001 - reported; the parent gives the bundle's files up
            conn.send(
                ("error", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
            )
        conn.send(("done", None))


class _Worker(PipeWorker):
    def __init__(self, ctx, options: Options):
        super().__init__(ctx, _worker_main, options)
        if not self.conn.poll(STARTUP_TIMEOUT_S) or self.conn.recv() != ("ready", None):
            self.kill()
            raise RuntimeError("a mining worker did not start")
        self.files = 0
        self.bundle: list[FileResult] | None = None
        self.deadline = 0.0
        self.pos = 0  # the file being imported / generated
        self.in_runs = False
        self.in_compile = False
        self.started = 0.0

    def give(self, bundle: list[FileResult], timeout_s: float) -> None:
        self.bundle, self.pos, self.in_runs, self.in_compile = bundle, 0, False, False
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        self.files += len(bundle)
        self.conn.send([r.src for r in bundle])


def bundles(
    files: list[SourceFile], max_files: int = BUNDLE_FILES, max_defs: int = BUNDLE_DEFS
) -> list[list[SourceFile]]:
    """Consecutive files grouped until they declare ``max_defs`` kernels (a big file alone)."""
    import ast

    from .discover import kernel_defs

    out: list[list[SourceFile]] = []
    current: list[SourceFile] = []
    count = 0
    for f in files:
        try:
            n = len(kernel_defs(ast.parse(open(f.path, encoding="utf-8", errors="replace").read())))
        except (SyntaxError, ValueError):
            n = 0
        if current and (count + n > max_defs or len(current) >= max_files):
            out.append(current)
            current, count = [], 0
        current.append(f)
        count += n
    if current:
        out.append(current)
    return out


def mine_files(files: list[SourceFile], options: Options, workers: int = 2) -> Iterator[FileResult]:
    """Mine every file; yields one FileResult per file (in completion order)."""
    ctx = multiprocessing.get_context("spawn")  # Warp/LLVM threads do not survive a fork
    queue: list[list[FileResult]] = [[FileResult(f) for f in b] for b in reversed(bundles(files))]
    pool: list[_Worker] = []
    try:
        while queue or any(w.bundle is not None for w in pool):
            while queue and (len(pool) < workers or any(w.bundle is None for w in pool)):
                idle = next((w for w in pool if w.bundle is None), None)
                if idle is None:
                    idle = _Worker(ctx, options)
                    pool.append(idle)
                idle.give(queue.pop(), options.timeout_s)
            busy = [w for w in pool if w.bundle is not None]
            ready = wait([w.conn for w in busy], timeout=max(0.0, min(w.deadline for w in busy) - time.monotonic()))
            for w in busy:
                finished: list[FileResult] = []
                if w.conn in ready:
                    try:
                        kind, payload = w.conn.recv()
                    except (EOFError, OSError):
                        finished = _lost(w, "crash", queue)
                    else:
                        finished = _take(w, kind, payload, options.timeout_s)
                elif time.monotonic() >= w.deadline:
                    finished = _lost(w, "timeout", queue)
                yield from finished
                if w.bundle is None and (not w.proc.is_alive() or w.files >= FILES_PER_WORKER):
                    w.stop() if w.proc.is_alive() else w.kill()
                    pool.remove(w)
    finally:
        for w in pool:
            w.kill()


def _take(w: _Worker, kind: str, payload, timeout_s: float) -> list[FileResult]:
    bundle = w.bundle
    if kind == "start":
        w.pos = payload
        w.deadline = time.monotonic() + timeout_s  # each file has its own time limit
        w.started = time.monotonic()
    elif kind == "seconds":
        result = bundle[w.pos]
        for stage, secs in payload.items():
            result.stage_seconds[stage] = result.stage_seconds.get(stage, 0.0) + secs
    elif kind == "kernels":
        pos, kernels, rejects = payload
        bundle[pos].kernels, bundle[pos].rejects = kernels, rejects
        bundle[pos].seconds += time.monotonic() - w.started
    elif kind == "compiling":
        w.in_compile = True
        w.deadline = time.monotonic() + timeout_s * len(bundle)  # the compile check of all the bundle's kernels
    elif kind == "compiled":
        for pos, i, ok, log, ms, level in payload:
            k = bundle[pos].kernels[i]
            k.compile_ok, k.compile_log, k.compile_ms, k.compile_level = ok, log, ms, level
    elif kind == "runs":
        w.in_compile = False
        w.in_runs = True
        w.deadline = time.monotonic() + timeout_s * len(bundle)  # the runs of all the bundle's files
    elif kind == "executed":
        for pos, e in payload:
            bundle[pos].executed[e.index] = e
    elif kind == "error":
        bundle[w.pos].rejects.append(RealReject(bundle[w.pos].src.relpath, 0, "", RejectReason.MINING_ERROR, payload))
    elif kind == "done":
        w.bundle = None
        return bundle
    return []


def _lost(w: _Worker, how: str, queue: list) -> list[FileResult]:
    """The worker died or hung.  Blame the file it was on; mine the others again alone."""
    bundle = w.bundle
    w.bundle = None
    if how == "crash":
        w.proc.join(timeout=5)  # its exit code names the signal
    code = w.proc.exitcode
    w.kill()
    detail = "time limit reached" if how == "timeout" else exit_reason(code)
    if (w.in_runs or w.in_compile) and len(bundle) > 1:
        # The bundle's compile check or a shared CPU build (runs themselves are forked one
        # by one) hung or crashed: no file to blame yet; each is mined again alone, so only
        # the file whose build fails loses its runs.  (Seen: SIGABRT in a CPU build of
        # warp/tests/cuda/test_cluster_dim.py's bundle, heap-layout dependent.)
        queue += [[FileResult(r.src)] for r in bundle]
        return []
    if w.in_runs:
        # A lone file's CPU build hung or crashed: the kernels stay, unexecuted.
        for result in bundle:
            for i in range(len(result.kernels)):
                if i not in result.executed:
                    result.not_run.setdefault(i, f"runs stopped: {detail}")
        return bundle
    blamed = bundle[w.pos]
    blamed.rejects.append(
        RealReject(
            blamed.src.relpath,
            0,
            "",
            RejectReason.TIMEOUT if how == "timeout" else RejectReason.CRASH,
            f"{detail} while {'compiling' if w.in_compile else 'importing or generating'}",
        )
    )
    for other in bundle:
        if other is not blamed:
            queue.append([FileResult(other.src)])
    return [blamed]
