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

import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from .. import warp_boundary
from ..contracts.row import Row
from ..pipeline.pool import EXIT, PipePool, PipeTask, PoolError, exit_reason, prepare_worker, serve
from .reference import DEFAULT_FRESH_SETS, ReferenceUnavailable, compute_reference
from .run import CandidateBuildFailed, candidate_kernel, judge_runs, own_runner
from .shared_scrub import shared_scrub
from .structure import row_key
from .timing import OwnKernel, context_lost, measure  # OwnKernel: the row's own kernel, built once per job for --timing

EXIT_CONTEXT_LOST = 3
__all__ = ["Job", "Outcome", "PoolError", "WorkerPool", "process_job", "run_inline"]
REFERENCE_CACHE = 64  # rows whose reference a worker keeps
# A candidate that never finishes (an endless loop on the GPU) must not stall the run: its
# worker is killed and it fails.  The row's CPU reference (a Warp CPU build of the kernel
# and its float64 twin) gets longer.
CANDIDATE_TIMEOUT = 120.0
REFERENCE_TIMEOUT = 600.0


@dataclass
class Job:
    row: Row
    seed: int
    candidates: list[tuple[int, str, str | None]]  # (key, forward, backward or None)
    fresh_sets: int = DEFAULT_FRESH_SETS
    timing: bool = False  # time every candidate that passes against the row's own kernel (timing.py)
    # set when a worker found the row cannot be timed and lost its CUDA context finding it out
    # (the row's own kernel at the timing size): the job's other candidates are not timed again
    untimed: str = ""


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
    # seconds by phase: the row's CPU reference computed for it (a job's first candidate: its
    # build and recorded sets; then the drawn sets it was first to reach), its build, its judging
    phases: dict = field(default_factory=dict)


def process_job(job: Job, device: str, cache: OrderedDict, precompiled_header: bool = False, build=None):
    """Yield ("reference", notes) then ("outcome", Outcome) per candidate; a lost CUDA
    context yields ("context_lost", None) last.  ``precompiled_header``: build with
    NVRTC's precompiled header (a worker process that removes it when done).  ``build``:
    how a candidate becomes a kernel on ``device`` (default run.candidate_kernel; a CPU
    stand-in in benchmarks/bench_eval.py).  The row's reference is lazy: its drawn sets
    are computed when the first candidate that gets that far needs them, then kept for
    the row's later candidates (and jobs)."""
    t0 = time.perf_counter()
    key = (row_key(job.row), job.seed, job.fresh_sets)
    ref = cache.get(key)
    if ref is None:
        try:
            ref = compute_reference(job.row, job.seed, job.fresh_sets, lazy=True)
        except ReferenceUnavailable as exc:
            ref = exc
        cache[key] = ref
        while len(cache) > REFERENCE_CACHE:
            _, old = cache.popitem(last=False)
            if not isinstance(old, Exception):
                old.close()  # its CPU module, kept while drawn sets remained to compute
    cache.move_to_end(key)
    first = time.perf_counter() - t0  # the reference's CPU build and recorded sets (0 when cached)
    yield "reference", None
    with OwnKernel(job.row, device, precompiled_header, build) as own:
        yield from _judge_candidates(job, device, ref, own, precompiled_header, build, first)


def _judge_candidates(job: Job, device: str, ref, own, precompiled_header: bool, build=None, first: float = 0.0):
    """process_job's candidates: ("outcome", Outcome) each, ("context_lost", None) last if it came to that."""
    build = build or candidate_kernel
    try:
        scrub = shared_scrub(device) if not isinstance(ref, Exception) else None  # built once per worker process
    except RuntimeError as exc:  # the judge's own kernel: no candidate is judged without it
        ref = exc
    own_runs = own_runner(own.kernel, device, scrub)  # the row's own CUDA per set, built and run when first needed
    for ckey, forward, backward in job.candidates:
        t0 = time.perf_counter()
        phases = {"reference": first, "build": 0.0, "judge": 0.0}
        first = 0.0
        if isinstance(ref, Exception):
            yield "outcome", Outcome(ckey, "run", False, f"not judged: {ref}", phases=phases)
            continue
        computed = ref.seconds  # drawn sets this candidate is first to reach: reference time, not judging
        try:
            timed, notes = None, []
            with build(job.row, forward, backward, device, precompiled_header) as (kernel, built):
                t1 = time.perf_counter()
                phases["build"] = t1 - t0
                # the run stage holds the GPU lock shared around each launch (run.run_guarded), not
                # across the judge: a timing elsewhere waits for one launch, not for this whole judge
                calibrated: list[str] = []  # sets judged against the row's own CUDA's error (run.judge_set)
                failures, ran = judge_runs(ref, kernel, device, bool(job.row.cuda_backward), scrub=scrub,
                                           own=own_runs, notes=calibrated)  # fmt: skip
                phases["reference"] += ref.seconds - computed
                phases["judge"] = time.perf_counter() - t1 - (ref.seconds - computed)
                # a passing candidate ran every set: it reports them all, and every note; a
                # failing one the sets up to the one it failed on, and the notes known before
                # any drawn set (the same whichever candidates of the row came first)
                notes = list(ref.notes if not failures else ref.notes[: ref.known_notes]) + calibrated
                if job.timing and not failures and job.untimed:
                    notes.append(job.untimed)
                elif job.timing and not failures:
                    timed, why = measure(ref, job.row, kernel, own, device, job.seed, backward is not None)
                    failures += [why] if why and not why.startswith("not timed") else []
                    notes += [why] if why.startswith("not timed") else []
            outcome = Outcome(ckey, "run", not failures, "; ".join(failures[:3]), built, notes=notes,
                              input_sets=ref.summary(None if not failures else ran), timing=timed,
                              phases=phases)  # fmt: skip
        except CandidateBuildFailed as exc:
            phases["build"] = time.perf_counter() - t0
            outcome = Outcome(ckey, "compile", False, f"GPU build: {exc}", phases=phases)
        except Exception as exc:  # noqa: BLE001 - a Python error on one candidate is its own failure
            outcome = Outcome(ckey, "run", False, f"while running: {type(exc).__name__}: {exc}", phases=phases)
        outcome.seconds = time.perf_counter() - t0
        if context_lost(device):
            if own.lost_context:  # the row's own kernel at the timing size, not this candidate: its verdict stands
                yield "untimed", own.unavailable
            else:
                outcome.ok = False
                outcome.detail = (outcome.detail + "; " if outcome.detail else "") + "left the CUDA context unusable"
            yield "outcome", outcome
            yield "context_lost", None
            return
        yield "outcome", outcome


def _worker_main(conn, device: str) -> None:
    prepare_worker()
    warp_boundary.warp()
    cache: OrderedDict = OrderedDict()

    def handle(job: Job):
        for kind, payload in process_job(job, device, cache, precompiled_header=device.startswith("cuda")):
            if kind == "context_lost":
                warp_boundary.remove_nvrtc_pch(os.getpid())
                yield EXIT, EXIT_CONTEXT_LOST
            yield kind, payload
        warp_boundary.clear_private_cache()

    serve(conn, handle)
    warp_boundary.remove_nvrtc_pch(os.getpid())


class _JobTask(PipeTask):
    """A job on a worker: outcomes stream in; a silent worker is killed after the reference
    or candidate time limit; a lost one fails the candidate in flight, the rest runs again."""

    def __init__(self, job: Job, pool: WorkerPool):
        self.job_, self.pool = job, pool
        self.done: set[int] = set()
        self.referenced = False
        self.untimed = job.untimed  # carried to the job's candidates that run again

    def job(self) -> Job:
        return self.job_

    def on_message(self, kind: str, payload) -> None:
        if kind == "reference":
            self.referenced = True
        elif kind == "untimed":
            self.untimed = payload
        elif kind == "outcome":
            self.pool.results[payload.key] = payload
            self.done.add(payload.key)

    def deadline(self, heard: float) -> float:
        return heard + (self.pool.candidate_timeout if self.referenced else self.pool.reference_timeout)

    def on_lost(self, timed_out: bool, exitcode: int | None) -> list[PipeTask]:
        job, results = self.job_, self.pool.results
        left = [c for c in job.candidates if c[0] not in self.done]
        if not self.referenced:  # the row's own kernel crashed the CPU reference run
            what = (
                f"took over {self.pool.reference_timeout:.0f} s"
                if timed_out
                else f"crashed its worker ({exit_reason(exitcode)})"
            )
            why = f"not judged: the CPU reference run of the row's own kernel {what}"
            for key, _, _ in left:
                results[key] = Outcome(key, "run", False, why)
            return []
        if left and exitcode != EXIT_CONTEXT_LOST:  # the candidate in flight crashed it
            culprit, left = left[0], left[1:]
            why = (f"did not finish within {self.pool.candidate_timeout:.0f} s (worker killed)" if timed_out
                   else f"crashed its worker: {exit_reason(exitcode)}")  # fmt: skip
            results[culprit[0]] = Outcome(culprit[0], "run", False, why)
        return [_JobTask(replace(job, candidates=left, untimed=self.untimed), self.pool)] if left else []


def _pick(worker, queue) -> _JobTask:
    """A job for a row this worker holds the reference of, if any waits; else the first."""
    rows = worker.memo.setdefault("rows", set())
    task = next((t for t in queue if row_key(t.job_.row) in rows), queue[0])
    rows.add(row_key(task.job_.row))
    return task


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
        # a dead or killed worker's precompiled header is removed by the pool
        self.pool = PipePool(_worker_main, (device,), size=workers, on_exit=warp_boundary.remove_nvrtc_pch)
        self.pool.start()  # Warp starts in the workers while the caller compiles
        self.results: dict[int, Outcome] = {}

    @property
    def restarts(self) -> int:
        return self.pool.deaths

    @property
    def workers(self) -> list:
        return self.pool.workers

    def run(self, jobs: list[Job]) -> dict[int, Outcome]:
        self.results = {}
        for _ in self.pool.run([_JobTask(job, self) for job in jobs], pick=_pick):
            pass
        return self.results

    def close(self) -> None:
        self.pool.close()


def run_inline(jobs: list[Job], device: str, cache: OrderedDict | None = None) -> dict[int, Outcome]:
    """Everything in this process (no crash isolation): tests and debugging."""
    cache = OrderedDict() if cache is None else cache
    results = {}
    for job in jobs:
        for kind, payload in process_job(job, device, cache):
            if kind == "outcome":
                results[payload.key] = payload
    return results
