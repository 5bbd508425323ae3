"""Worker processes that mine one file at a time, each file under a time limit.

Importing a file runs its top-level code.  So files are mined in worker processes the
parent can kill: a file that hangs costs its time limit, a file that crashes its worker
costs only itself (the other files of its bundle are mined again, each alone).  A
worker takes a small bundle of files, so that their CPU runs share one LLVM build; each
run is forked from the worker (worker.run_isolated), so a kernel that divides by zero
or writes out of bounds on made-up inputs loses only its own run.

The workers are a :class:`..pipeline.pool.PipePool` (per-task time limits and
kill-and-replace, which the producer's ``concurrent.futures`` executor does not offer);
this module says what a bundle's messages mean and what a lost worker costs.
"""

from __future__ import annotations

import ast
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from ..contracts.reject import RealReject, RejectReason
from ..pipeline.pool import PipePool, PipeTask, exit_reason, prepare_worker, serve
from ..warp_boundary.mining import install_kernel_hook
from .discover import SourceFile, kernel_defs
from .worker import Executed, MinedKernel, mine_bundle

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
    prepare_worker()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # mined files print; keep the terminal for the parent
    os.dup2(devnull, 2)
    install_kernel_hook()

    def handle(bundle: list[SourceFile]):
        try:
            yield from mine_bundle(
                bundle,
                arch=options.arch,
                compile_check=options.compile_check,
                compile_level=options.compile_level,
                run=options.run,
            )
        except BaseException as exc:  # noqa: BLE001 - reported; the parent gives the bundle's files up
            yield "error", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"

    serve(conn, handle)  # the time limit counts from its "ready", not from Warp's start-up


def bundles(
    files: list[SourceFile], max_files: int = BUNDLE_FILES, max_defs: int = BUNDLE_DEFS
) -> list[list[SourceFile]]:
    """Consecutive files grouped until they declare ``max_defs`` kernels (a big file alone)."""
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


class _Bundle(PipeTask):
    """A few files mined by one worker, each under its own time limit."""

    def __init__(self, bundle: list[FileResult], timeout_s: float):
        self.bundle, self.timeout_s = bundle, timeout_s
        self.weight = len(bundle)  # files: a worker is recycled after FILES_PER_WORKER
        self.pos = 0  # the file being imported / generated
        self.in_runs = self.in_compile = False
        self.until: float | None = None  # the current time limit (None: the first file's, from the hand-over)
        self.started: float | None = None  # when the current file started
        self.finished: list[FileResult] = []  # what this task hands back

    def job(self) -> list[SourceFile]:
        return [r.src for r in self.bundle]

    def deadline(self, heard: float) -> float:
        return self.until if self.until is not None else self.given_at + self.timeout_s

    def on_message(self, kind: str, payload) -> None:
        bundle, now = self.bundle, time.monotonic()
        if kind == "start":
            self.pos = payload
            self.until = now + self.timeout_s  # each file has its own time limit
            self.started = now
        elif kind == "seconds":
            result = bundle[self.pos]
            for stage, secs in payload.items():
                result.stage_seconds[stage] = result.stage_seconds.get(stage, 0.0) + secs
        elif kind == "kernels":
            pos, kernels, rejects = payload
            bundle[pos].kernels, bundle[pos].rejects = kernels, rejects
            bundle[pos].seconds += now - (self.started if self.started is not None else self.given_at)
        elif kind == "compiling":
            self.in_compile = True
            self.until = now + self.timeout_s * len(bundle)  # the compile check of all the bundle's kernels
        elif kind == "compiled":
            for pos, i, ok, log, ms, level in payload:
                k = bundle[pos].kernels[i]
                k.compile_ok, k.compile_log, k.compile_ms, k.compile_level = ok, log, ms, level
        elif kind == "runs":
            self.in_compile = False
            self.in_runs = True
            self.until = now + self.timeout_s * len(bundle)  # the runs of all the bundle's files
        elif kind == "executed":
            for pos, e in payload:
                bundle[pos].executed[e.index] = e
        elif kind == "error":
            bundle[self.pos].rejects.append(
                RealReject(bundle[self.pos].src.relpath, 0, "", RejectReason.MINING_ERROR, payload)
            )

    def on_done(self) -> None:
        self.finished = self.bundle

    def on_lost(self, timed_out: bool, exitcode: int | None) -> list[PipeTask]:
        """The worker died or hung.  Blame the file it was on; mine the others again alone."""
        bundle = self.bundle
        detail = "time limit reached" if timed_out else exit_reason(exitcode)
        alone = [_Bundle([FileResult(r.src)], self.timeout_s) for r in bundle]
        if (self.in_runs or self.in_compile) and len(bundle) > 1:
            # The bundle's compile check or a shared CPU build (runs themselves are forked one
            # by one) hung or crashed: no file to blame yet; each is mined again alone, so only
            # the file whose build fails loses its runs.  (Seen: SIGABRT in a CPU build of
            # warp/tests/cuda/test_cluster_dim.py's bundle, heap-layout dependent.)
            return alone
        if self.in_runs:
            # A lone file's CPU build hung or crashed: the kernels stay, unexecuted.
            for result in bundle:
                for i in range(len(result.kernels)):
                    if i not in result.executed:
                        result.not_run.setdefault(i, f"runs stopped: {detail}")
            self.finished = bundle
            return []
        blamed = bundle[self.pos]
        blamed.rejects.append(
            RealReject(
                blamed.src.relpath,
                0,
                "",
                RejectReason.TIMEOUT if timed_out else RejectReason.CRASH,
                f"{detail} while {'compiling' if self.in_compile else 'importing or generating'}",
            )
        )
        self.finished = [blamed]
        return [again for again, r in zip(alone, bundle, strict=True) if r is not blamed]


def mine_files(files: list[SourceFile], options: Options, workers: int = 2) -> Iterator[FileResult]:
    """Mine every file; yields one FileResult per file (in completion order)."""
    pool = PipePool(
        _worker_main,
        (options,),
        size=workers,
        startup_timeout=STARTUP_TIMEOUT_S,
        recycle_after=FILES_PER_WORKER,  # a worker keeps every module it imported
    )
    tasks = [_Bundle([FileResult(f) for f in b], options.timeout_s) for b in bundles(files)]
    try:
        for task in pool.run(tasks):
            yield from task.finished
    finally:
        pool.close(kill=True)
