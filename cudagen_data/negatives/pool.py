"""The worker processes of ``cudagen negatives``: batches proven in persistent workers,
results handed back in batch order, a witness that kills its worker isolated to its row.

The workers are a :class:`..pipeline.pool.PipePool` (pipeline/pool.py), kept for the whole
run: each imports Warp and makes clang's precompiled header once (its first CPU build,
seconds); only a worker that dies is replaced.  A worker takes the next piece of work as
soon as it is free, so neither waits for the other.

A worker that dies (a wrong kernel's wild write: an index read past an array's end, from
the guard cells, then used as an index, lands beyond every guard) or passes its piece's
time limit is killed and replaced, and the piece's rows are done again: the worker says
which row's candidates its witness is judging (batch.run_batch's ``on_judging``), so that
row is redone alone and the rows before and after it as two pieces; a worker lost
outside the judging (a build, which no row owns) has its rows redone one by one.  A row
that still kills its worker or hangs alone gets its structure and compile candidates only
(batch.without_witness, counted in ``rows_witness_crashed``).  Rows are proven one by
one, so a batch's result is the same however it was split (batch.merged); only a row
that crashes or hangs alone changes what is written (a time limit depends on the
machine's load: it is generous).  Before, each worker was a pool of one process and a
crashed batch was halved down to the row, each half in a fresh process (clang's
precompiled header made again each time), while the other worker could sit idle.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Connection

from ..pipeline.pool import PipePool, PipeTask, init_warp_worker, serve
from .batch import BatchJob, BatchResult, merged, run_batch, without_witness

BATCH_TIMEOUT = 1800.0  # seconds a piece of several rows may take in a worker before it is redone row by row
ROW_TIMEOUT = 600.0  # seconds one row's proofs may take (then: its structure and compile kinds only)
STARTUP_TIMEOUT = 300.0  # seconds a worker may take to import Warp and say ready
RESULT = "result"
JUDGING = "judging"  # the witness judges the candidates of this row of the piece (None: none now)


def _worker_main(conn: Connection, parent_pid: int) -> None:
    init_warp_worker(parent_pid)  # dies with the parent; Ctrl-C is the parent's

    def judging(r: int | None) -> None:
        conn.send((JUDGING, r))  # sent at once (the result is sent when the batch ends)

    serve(conn, lambda job: [(RESULT, run_batch(job, judging))])


class BatchPiece(PipeTask):
    """Rows ``lo:hi`` of a batch: what one worker runs at a time."""

    def __init__(self, batch: BatchJob, lo: int, hi: int):
        self.batch, self.lo, self.hi = batch, lo, hi
        self.result: BatchResult | None = None
        self.judging: int | None = None  # the row (of the piece) whose candidates the witness is judging
        self.lost = False  # a lone row whose worker died or hung

    def rows(self) -> int:
        return self.hi - self.lo

    def job(self) -> BatchJob:
        b, lo, hi = self.batch, self.lo, self.hi
        if (lo, hi) == (0, len(b.positives)):
            return b
        return BatchJob(b.index, b.positives[lo:hi], b.foreign[lo:hi], b.ranking[lo:hi], b.per_row, b.preambles, b.seed)

    def on_message(self, kind: str, payload) -> None:
        if kind == RESULT:
            self.result = payload
        elif kind == JUDGING:
            self.judging = payload

    def deadline(self, heard: float) -> float:
        return self.given_at + (BATCH_TIMEOUT if self.rows() > 1 else ROW_TIMEOUT)

    def on_lost(self, timed_out: bool, exitcode: int | None) -> list[PipeTask]:
        """Its rows again: the row being judged alone and the rows before and after it as
        two pieces (a build or a plan, which no row owns: every row alone)."""
        if self.rows() == 1:
            self.lost = True
            return []
        if self.judging is None:
            return [BatchPiece(self.batch, k, k + 1) for k in range(self.lo, self.hi)]
        blamed = self.lo + self.judging
        parts = [(blamed, blamed + 1), (self.lo, blamed), (blamed + 1, self.hi)]
        return [BatchPiece(self.batch, lo, hi) for lo, hi in parts if hi > lo]


def results(jobs: Iterable[BatchJob], workers: int) -> Iterator[BatchResult]:
    """Each job's result, in job order (``workers`` processes; 0: in this process).  ``jobs``
    is read lazily, a few ahead of the workers (the caller ranks a batch's rows when it is
    read): the workers start first, and import Warp while the first batches are made."""
    if workers == 0:
        for job in jobs:
            yield run_batch(job)
        return
    pool = PipePool(_worker_main, (os.getpid(),), size=workers, startup_timeout=STARTUP_TIMEOUT)
    pool.start()
    order: deque[BatchJob] = deque()  # jobs handed to the pool and not yet yielded, in order
    done: dict[int, list[tuple[int, BatchResult]]] = {}  # job index -> (first row, result) of its pieces

    def pieces() -> Iterator[BatchPiece]:
        for job in jobs:
            order.append(job)
            yield BatchPiece(job, 0, len(job.positives))

    finished = False
    try:
        for piece in pool.run(pieces(), ahead=workers):
            result = piece.result
            if result is None and piece.lost:
                result = without_witness(piece.job())
            if result is None:  # a piece of several rows was lost: its rows are queued again
                continue
            done.setdefault(piece.batch.index, []).append((piece.lo, result))
            while order and _rows_done(done.get(order[0].index, [])) == len(order[0].positives):
                job = order.popleft()
                yield merged(job.index, [r for _, r in sorted(done.pop(job.index), key=lambda p: p[0])])
        finished = True
    finally:
        pool.close(kill=not finished)  # stopped early (an error, or the caller stopped reading): don't wait


def _rows_done(parts: list[tuple[int, BatchResult]]) -> int:
    return sum(r.tally["positives"] for _, r in parts)
