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

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import warp_boundary
from ..bisect import halves
from ..contracts.row import Row
from ..pipeline.pool import EXIT, PipePool, PipeTask, PoolError, exit_reason, prepare_worker, serve
from .worker import CONTEXT_LOST, process_chunk

Item = tuple[int, Row]  # (position, row)
STAGES = ("device", "reference")
EXIT_CONTEXT_LOST = 3

__all__ = ["Item", "PoolError", "run_inline", "run_pool"]

OnStage = Callable[[str, list], None]  # (stage, outcomes)
OnCrash = Callable[[list[Item], str, str], None]  # (items, stage, why): the stage those rows lost


def _worker_main(conn, device: str, parent_pid: int) -> None:
    prepare_worker(parent_pid)
    warp_boundary.warp()

    def handle(job):
        items, stages = job
        for stage, outcomes in process_chunk(items, device, stages):
            # nothing more can run in this CUDA context: the worker exits
            yield (EXIT, EXIT_CONTEXT_LOST) if stage == CONTEXT_LOST else (stage, outcomes)

    serve(conn, handle)


@dataclass
class Chunk(PipeTask):
    """Rows for one worker, and the stages to run on them."""

    items: list[Item]
    stages: tuple[str, ...] = STAGES
    on_stage: OnStage | None = None
    on_crash: OnCrash | None = None
    received: dict[str, set[int]] = field(default_factory=dict)  # stage -> positions with results

    def job(self):
        return list(self.items), self.stages

    def on_message(self, stage: str, outcomes) -> None:
        self.received.setdefault(stage, set()).update(o.pos for o in outcomes)
        self.on_stage(stage, outcomes)

    def missing(self, stage: str) -> list[Item]:
        got = self.received.get(stage, set())
        return [it for it in self.items if it[0] not in got]

    def on_lost(self, timed_out: bool, exitcode: int | None) -> list[PipeTask]:
        """Requeue what the dead worker left unfinished; report a crashing row once it stands alone."""
        # Stages run in order (device for every row, then reference), so the stage that died
        # is the first with rows missing, and the culprit is among those rows.
        again: list[PipeTask] = []
        dev_left = self.missing("device") if "device" in self.stages else []
        if dev_left:
            done = [it for it in self.items if it not in dev_left]  # partial results (lost CUDA context)
            if done and "reference" in self.stages:
                again.append(self._redone(done, ("reference",)))
            return self._redo(dev_left, self.stages, exitcode) + again
        return self._redo(self.missing("reference"), ("reference",), exitcode)

    def _redone(self, items: list[Item], stages: tuple[str, ...]) -> Chunk:
        return Chunk(items, stages, self.on_stage, self.on_crash)

    def _redo(self, left: list[Item], stages: tuple[str, ...], exitcode: int | None) -> list[PipeTask]:
        if not left:
            return []
        if exitcode == EXIT_CONTEXT_LOST:  # the worker reported the culprit itself
            return [self._redone(left, stages)]
        if len(left) == 1:  # found it (a row that failed on the device needs no CPU reference)
            self.on_crash(left, stages[0], exit_reason(exitcode))
            return []
        # halve until the crashing row stands alone (queued, not recursive: workers run them)
        first, second = halves(left)
        return [self._redone(first, stages), self._redone(second, stages)]


def run_inline(chunks: list[list[Item]], device: str, on_stage: OnStage) -> None:
    """Everything in this process: no crash isolation (tests, debugging, jobs=0)."""
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
    pool = PipePool(
        _worker_main,
        (device, os.getpid()),
        size=min(jobs, len(chunks)),
        startup_deaths=2,
        hint="; see their error output above",
        on_exit=warp_boundary.remove_nvrtc_pch,  # a killed worker's NVRTC header (its builds use one)
    )
    try:
        for _ in pool.run(Chunk(items, STAGES, on_stage, on_crash) for items in chunks):
            pass
    finally:
        pool.close()
    return pool.deaths
