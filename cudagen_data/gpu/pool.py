"""Run chunks of rows in worker processes, surviving native crashes.

Each worker is a spawned process (Warp, LLVM and the CUDA driver hold threads and
global state a fork would copy half-way) with its own CUDA context on the same GPU, so
NVRTC compiles and CPU reference builds run on all cores at once.  A kernel that
crashes its process (a segfault in native code) must not take the run with it: the
parent knows which rows each worker holds and which stage results have come back, and
when a worker dies it splits the unfinished rows in halves and runs them again, until
the crashing row stands alone and is reported.  A worker whose CUDA context a kernel
broke (worker.CONTEXT_LOST) reports that row itself and exits; its other rows simply
go to a fresh worker.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from ..bisect import halves
from ..pipeline.pool import PipeWorker, exit_reason

Item = tuple[int, dict]  # (position, slim row)
STAGES = ("device", "reference")
EXIT_CONTEXT_LOST = 3


@dataclass
class Chunk:
    items: list[Item]
    stages: tuple[str, ...] = STAGES
    received: dict[str, set[int]] = field(default_factory=dict)  # stage -> positions with results

    def missing(self, stage: str) -> list[Item]:
        got = self.received.get(stage, set())
        return [it for it in self.items if it[0] not in got]


class PoolError(RuntimeError):
    """Worker processes die before doing any work (an environment problem, not a row's)."""


OnStage = Callable[[str, list], None]  # (stage, outcomes)
OnCrash = Callable[[list[Item], str, str], None]  # (items, stage, why): the stage those rows lost


def _worker_main(conn, device: str, parent_pid: int) -> None:
    from ..pipeline.orphans import die_with_parent, use_private_tmp

    die_with_parent(parent_pid)  # a parent killed with -9 must not leave workers behind
    if sys.platform.startswith("linux"):
        use_private_tmp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    from .. import warp_boundary
    from .worker import CONTEXT_LOST, process_chunk

    warp_boundary.warp()
    conn.send(("ready", None))
    while True:
        job = conn.recv()
        if job is None:
            return
        items, stages = job
        for stage, outcomes in process_chunk(items, device, stages):
            if stage == CONTEXT_LOST:
                conn.close()
                os._exit(EXIT_CONTEXT_LOST)  # nothing more can run in this CUDA context
            conn.send((stage, outcomes))
        conn.send(("done", None))


class _Worker(PipeWorker):
    def __init__(self, ctx, device: str):
        super().__init__(ctx, _worker_main, device, os.getpid())
        self.chunk: Chunk | None = None
        self.ready = False  # set when it has started Warp and can take work

    def give(self, chunk: Chunk) -> None:
        self.chunk = chunk
        self.send(
            (list(chunk.items), chunk.stages)
        )  # if it died already, the main loop sees its sentinel and requeues the chunk


def run_inline(chunks: list[list[Item]], device: str, on_stage: OnStage) -> None:
    """Everything in this process: no crash isolation (tests, debugging, jobs=0)."""
    from .worker import process_chunk

    for items in chunks:
        for stage, outcomes in process_chunk(items, device):
            if outcomes is not None:
                on_stage(stage, outcomes)


def run_pool(
    chunks: list[list[Item]],
    device: str,
    jobs: int,
    on_stage: OnStage,
    on_crash: OnCrash,
) -> int:
    """Run every chunk on ``jobs`` workers; returns how many worker processes died."""
    ctx = multiprocessing.get_context("spawn")
    queue: deque[Chunk] = deque(Chunk(items) for items in chunks)
    workers = [_Worker(ctx, device) for _ in range(min(jobs, len(queue)))]
    deaths, startup_deaths = 0, 0
    try:
        while queue or any(w.chunk for w in workers):
            for w in workers:
                if w.chunk is None and queue:
                    w.give(queue.popleft())
            busy = [w for w in workers if w.chunk is not None]
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy])
            for w in busy:
                if not (w.conn in ready or w.proc.sentinel in ready):
                    continue
                if _drain(w, on_stage):
                    continue
                deaths += 1
                if w.ready:
                    _after_death(w.chunk, w.proc.exitcode, queue, on_crash)
                else:  # it never started: not the chunk's fault
                    startup_deaths += 1
                    if startup_deaths >= 2 and not any(x.ready for x in workers):
                        raise PoolError(
                            f"worker processes die while starting ({w.exit_reason()}); see their error output above"
                        )
                    queue.appendleft(w.chunk)
                workers[workers.index(w)] = _Worker(ctx, device)
    finally:
        for w in workers:
            w.stop()
    return deaths


def _drain(w: _Worker, on_stage: OnStage) -> bool:
    """Take every message a worker has sent; False if it has died."""
    try:
        while w.conn.poll():
            stage, outcomes = w.conn.recv()
            if stage == "ready":
                w.ready = True
                continue
            if stage == "done":
                w.chunk = None
                return True
            w.chunk.received.setdefault(stage, set()).update(o.pos for o in outcomes)
            on_stage(stage, outcomes)
    except (EOFError, OSError):
        w.proc.join(timeout=30)
        return False
    return w.proc.is_alive()


def _after_death(chunk: Chunk, exitcode: int | None, queue: deque, on_crash: OnCrash) -> None:
    """Requeue what a dead worker left unfinished; report a crashing row once it stands alone."""
    # Stages run in order (device for every row, then reference), so the stage that died
    # is the first with rows missing, and the culprit is among those rows.
    dev_left = chunk.missing("device") if "device" in chunk.stages else []
    if dev_left:
        done = [it for it in chunk.items if it not in dev_left]  # partial results (lost CUDA context)
        if done and "reference" in chunk.stages:
            queue.appendleft(Chunk(done, ("reference",)))
        _redo(dev_left, chunk.stages, exitcode, queue, on_crash)
    else:
        _redo(chunk.missing("reference"), ("reference",), exitcode, queue, on_crash)


def _redo(left: list[Item], stages: tuple[str, ...], exitcode: int | None, queue: deque, on_crash: OnCrash) -> None:
    if not left:
        return
    if exitcode == EXIT_CONTEXT_LOST:  # the worker reported the culprit itself
        queue.appendleft(Chunk(left, stages))
    elif len(left) == 1:  # found it (a row that failed on the device needs no CPU reference)
        on_crash(left, stages[0], exit_reason(exitcode))
    else:  # halve until the crashing row stands alone (queued, not recursive: workers run them)
        first, second = halves(left)
        queue.appendleft(Chunk(second, stages))
        queue.appendleft(Chunk(first, stages))
