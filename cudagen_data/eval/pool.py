"""Worker processes for the run stage: a candidate that crashes fails only itself.

Each worker is a spawned process with its own CUDA context.  A job is one row and the
candidates for it that compiled: the worker computes the row's reference once
(reference.py; cached for later jobs of the same row), then builds and runs each
candidate in turn (run.py), sending one outcome per candidate as it finishes.  When a
worker dies (a segfault in a candidate, say) the parent knows which candidate was in
flight: that one fails with the reason, the rest of the job goes to a fresh worker.  A
candidate that leaves the CUDA context unusable (an illegal address is sticky) is
reported by the worker itself, which then exits; the pool starts another.

A GPU worker builds its candidates with NVRTC's precompiled header on (the header of
Warp's ``builtin.h`` is made once per process and reused: each build ~3x faster); NVRTC
never removes it (~76 MB), so the worker removes its own on exit and the pool removes a
dead or killed worker's.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from .. import warp_boundary
from ..pipeline.pool import PipeWorker
from .reference import DEFAULT_FRESH_SETS
from .structure import row_key

EXIT_CONTEXT_LOST = 3
REFERENCE_CACHE = 64  # rows whose reference a worker keeps
# A candidate that never finishes (an endless loop on the GPU) must not stall the run: its
# worker is killed and it fails.  The row's CPU reference (a Warp CPU build of the kernel
# and its float64 twin) gets longer.
CANDIDATE_TIMEOUT = 120.0
REFERENCE_TIMEOUT = 600.0


@dataclass
class Job:
    row: dict
    seed: int
    candidates: list[tuple[int, str, str | None]]  # (key, forward, backward or None)
    fresh_sets: int = DEFAULT_FRESH_SETS
    timing: bool = False  # time every candidate that passes against the row's own kernel (timing.py)


@dataclass
class Outcome:
    key: int
    stage: str  # "compile" (the GPU build failed) or "run"
    ok: bool
    detail: str = ""
    build: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    input_sets: dict = field(default_factory=dict)  # Reference.summary(): sets run, by kind, and sizes
    timing: dict | None = None  # timing.TimingResult.to_dict() of a timed candidate


def process_job(job: Job, device: str, cache: OrderedDict, precompiled_header: bool = False):
    """Yield ("reference", notes) then ("outcome", Outcome) per candidate; a lost CUDA
    context yields ("context_lost", None) last.  ``precompiled_header``: build with
    NVRTC's precompiled header (a worker process that removes it when done)."""
    from .reference import ReferenceUnavailable, compute_reference
    from .timing import OwnKernel  # the row's own kernel, built once per job where --timing needs it

    key = (row_key(job.row), job.seed, job.fresh_sets)
    ref = cache.get(key)
    if ref is None:
        try:
            ref = compute_reference(job.row, job.seed, job.fresh_sets)
        except ReferenceUnavailable as exc:
            ref = exc
        cache[key] = ref
        while len(cache) > REFERENCE_CACHE:
            cache.popitem(last=False)
    cache.move_to_end(key)
    yield "reference", None
    with OwnKernel(job.row, device, precompiled_header) as own:
        yield from _judge_candidates(job, device, ref, own, precompiled_header)


def _judge_candidates(job: Job, device: str, ref, own, precompiled_header: bool):
    """process_job's candidates: ("outcome", Outcome) each, ("context_lost", None) last if it came to that."""
    from .run import CandidateBuildFailed, candidate_kernel, judge_kernel
    from .timing import gpu_access, measure

    for ckey, forward, backward in job.candidates:
        t0 = time.perf_counter()
        if isinstance(ref, Exception):
            yield "outcome", Outcome(ckey, "run", False, f"not judged: {ref}")
            continue
        try:
            timed, notes = None, list(ref.notes)
            with candidate_kernel(job.row, forward, backward, device, precompiled_header) as (kernel, built):
                with gpu_access(device, exclusive=False):  # a timing elsewhere waits for the launches
                    failures = judge_kernel(ref, kernel, device, bool(job.row["cuda_backward"]))
                if job.timing and not failures:
                    timed, why = measure(ref, job.row, kernel, own, device, job.seed, backward is not None)
                    failures += [why] if why and not why.startswith("not timed") else []
                    notes += [why] if why.startswith("not timed") else []
            outcome = Outcome(ckey, "run", not failures, "; ".join(failures[:3]), built, notes=notes,
                              input_sets=ref.summary(), timing=timed)  # fmt: skip
        except CandidateBuildFailed as exc:
            outcome = Outcome(ckey, "compile", False, f"GPU build: {exc}")
        except Exception as exc:  # noqa: BLE001 - a Python error on one candidate is its own failure
            outcome = Outcome(ckey, "run", False, f"while running: {type(exc).__name__}: {exc}")
        outcome.seconds = time.perf_counter() - t0
        if device.startswith("cuda") and not _context_usable(device):
            outcome.ok = False
            outcome.detail = (outcome.detail + "; " if outcome.detail else "") + "left the CUDA context unusable"
            yield "outcome", outcome
            yield "context_lost", None
            return
        yield "outcome", outcome


def _context_usable(device: str) -> bool:
    from ..gpu.worker import context_usable  # the GPU suite's check: False after a sticky CUDA error

    return context_usable(device)


def _worker_main(conn, device: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warp_boundary.warp()
    cache: OrderedDict = OrderedDict()
    conn.send(("ready", None))
    while True:
        job = conn.recv()
        if job is None:
            warp_boundary.remove_nvrtc_pch(os.getpid())
            return
        for kind, payload in process_job(job, device, cache, precompiled_header=device.startswith("cuda")):
            if kind == "context_lost":
                conn.close()
                warp_boundary.remove_nvrtc_pch(os.getpid())
                os._exit(EXIT_CONTEXT_LOST)
            conn.send((kind, payload))
        warp_boundary.clear_private_cache()
        conn.send(("done", None))


class _Worker(PipeWorker):
    def __init__(self, ctx, device: str):
        super().__init__(ctx, _worker_main, device)
        self.job: Job | None = None
        self.done: set[int] = set()
        self.referenced = False
        self.ready = False  # it has started Warp and can take work
        self.progress = time.monotonic()  # when it last reported anything
        self.timed_out = False
        self.rows: set[str] = set()  # rows whose reference it holds

    def give(self, job: Job) -> None:
        self.job, self.done, self.referenced = job, set(), False
        self.progress = time.monotonic()
        self.rows.add(row_key(job.row))
        self.send(job)


class PoolError(RuntimeError):
    """Workers die before doing any work (an environment problem)."""


class WorkerPool:
    """``workers`` processes on ``device``, kept between calls of :meth:`run`."""

    def __init__(
        self,
        device: str,
        workers: int,
        *,
        candidate_timeout: float = CANDIDATE_TIMEOUT,
        reference_timeout: float = REFERENCE_TIMEOUT,
    ):
        self.device = device
        self.candidate_timeout, self.reference_timeout = candidate_timeout, reference_timeout
        self.ctx = multiprocessing.get_context("spawn")
        self.workers = [_Worker(self.ctx, device) for _ in range(max(1, workers))]
        self.restarts = 0

    def run(self, jobs: list[Job]) -> dict[int, Outcome]:
        results: dict[int, Outcome] = {}
        queue: deque[Job] = deque(jobs)
        startup_deaths = 0
        while queue or any(w.job for w in self.workers):
            for w in self.workers:
                if w.job is None and queue:
                    rid = row_key(queue[0].row)
                    # a job for a row this worker has the reference of, if any waits
                    pick = next((j for j in queue if row_key(j.row) in w.rows), None) if rid not in w.rows else queue[0]
                    pick = pick or queue[0]
                    queue.remove(pick)
                    w.give(pick)
            busy = [w for w in self.workers if w.job is not None]
            ready = list(wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=5.0))
            now = time.monotonic()
            for w in busy:
                limit = self.candidate_timeout if w.referenced else self.reference_timeout
                if w.ready and w.conn not in ready and now - w.progress > limit and w.proc.is_alive():
                    w.timed_out = True
                    w.proc.kill()
                    w.proc.join(timeout=30)
                    ready.append(w.proc.sentinel)
            for w in busy:
                if w.conn not in ready and w.proc.sentinel not in ready:
                    continue
                if self._drain(w, results):
                    continue
                self.restarts += 1
                job = w.job
                left = [c for c in job.candidates if c[0] not in w.done]
                if not w.ready:  # it never started: not the job's fault
                    startup_deaths += 1
                    if startup_deaths > 3:
                        raise PoolError(f"worker processes die while starting ({w.exit_reason()})")
                    queue.appendleft(Job(job.row, job.seed, left, job.fresh_sets, job.timing))
                elif not w.referenced:  # the row's own kernel crashed the CPU reference run
                    what = (
                        f"took over {self.reference_timeout:.0f} s"
                        if w.timed_out
                        else f"crashed its worker ({w.exit_reason()})"
                    )
                    why = f"not judged: the CPU reference run of the row's own kernel {what}"
                    for key, _, _ in left:
                        results[key] = Outcome(key, "run", False, why)
                elif left:
                    if w.proc.exitcode != EXIT_CONTEXT_LOST:  # the candidate in flight crashed it
                        culprit, left = left[0], left[1:]
                        why = (f"did not finish within {self.candidate_timeout:.0f} s (worker killed)" if w.timed_out
                               else f"crashed its worker: {w.exit_reason()}")  # fmt: skip
                        results[culprit[0]] = Outcome(culprit[0], "run", False, why)
                    if left:
                        queue.appendleft(Job(job.row, job.seed, left, job.fresh_sets, job.timing))
                warp_boundary.remove_nvrtc_pch(w.proc.pid)  # a dead worker's precompiled header
                self.workers[self.workers.index(w)] = _Worker(self.ctx, self.device)
        return results

    def _drain(self, w: _Worker, results: dict[int, Outcome]) -> bool:
        try:
            while w.conn.poll():
                kind, payload = w.conn.recv()
                w.progress = time.monotonic()
                if kind == "ready":
                    w.ready = True
                elif kind == "reference":
                    w.referenced = True
                elif kind == "outcome":
                    results[payload.key] = payload
                    w.done.add(payload.key)
                elif kind == "done":
                    w.job = None
                    return True
        except (EOFError, OSError):
            w.proc.join(timeout=30)
            return False
        return w.proc.is_alive()

    def close(self) -> None:
        for w in self.workers:
            w.stop()
            warp_boundary.remove_nvrtc_pch(w.proc.pid)  # where it was killed before removing its own


def run_inline(jobs: list[Job], device: str, cache: OrderedDict | None = None) -> dict[int, Outcome]:
    """Everything in this process (no crash isolation): tests and debugging."""
    cache = OrderedDict() if cache is None else cache
    results = {}
    for job in jobs:
        for kind, payload in process_job(job, device, cache):
            if kind == "outcome":
                results[payload.key] = payload
    return results
