"""One batch of positive rows proven in a worker: its candidates made, proven in rounds
(prove.py), and turned into negative rows and counts.

Rows are proven one by one (whatever batch they are in), so a batch done in parts and
merged (:func:`merged`) gives what it would have given at once; the pool (pool.py) relies
on that to redo a crashed batch row by row.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import __version__, spans, warp_boundary
from ..canonical import text_hash
from ..contracts.negative import NegativeRow
from ..contracts.row import Row
from .kinds import KINDS, RUN, Candidate, candidates
from .prove import RowWork, Witness, prove_candidates, unified_diff

ROUNDS = 3  # witness rounds per batch: a discarded candidate is replaced by the row's next one


@dataclass
class Positive:
    config: str
    split: str
    row: Row


@dataclass
class BatchJob:
    index: int
    positives: list[Positive]
    foreign: list[list[Row]]
    ranking: list[list[tuple[str, str]]]
    per_row: int
    preambles: dict[str, str]
    seed: int


@dataclass
class BatchResult:
    index: int
    rows: dict[str, list[dict]]  # split -> negative rows
    tally: dict
    seconds: float
    # where the worker's time went (spans.py: wall and CPU seconds by span name; benchmarks only)
    spans: dict[str, dict[str, float]] = field(default_factory=dict)


def run_batch(job: BatchJob, on_judging: Callable[[int | None], None] | None = None) -> BatchResult:
    """Prove candidates for a batch of positive rows, ``per_row`` at most each (:func:`prove_rows`).
    ``on_judging(r)``: the CPU witness starts judging the candidates of the batch's row ``r``
    (None: it stopped judging); the pool blames that row if the worker dies then."""

    def judging(r: int | None) -> None:
        if r is not None:
            _injected_crash(job.positives[r])
        if on_judging is not None:
            on_judging(r)

    t0 = time.perf_counter()
    spans.take()  # what ran before this batch in the process is not its time
    work = []
    with spans.span("negatives.candidates"):
        for pos, foreign, ranked in zip(job.positives, job.foreign, job.ranking, strict=True):
            made = {(c.kind, c.variant): c for c in candidates(pos.row, foreign)}
            work.append(RowWork(pos.row, [made[k] for k in ranked]))
    prove_rows(work, job.per_row, job.preambles, job.seed, on_judging=judging)
    rows: dict[str, list[dict]] = {}
    tally = new_tally()
    for pos, w in zip(job.positives, work, strict=True):
        tally["positives"] += 1
        for outcome in w.outcomes:
            if outcome is None:
                continue
            cand = outcome.candidate
            per_kind = tally["candidates_by_kind"].setdefault(cand.kind, {"tried": 0, "proven": 0, "discarded": {}})
            per_kind["tried"] += 1
            if not outcome.proven:
                per_kind["discarded"][outcome.reason] = per_kind["discarded"].get(outcome.reason, 0) + 1
                continue
            per_kind["proven"] += 1
            row = negative_row(pos, cand, outcome.evidence)
            rows.setdefault(pos.split, []).append(row.to_dict())
            variant = f"{cand.kind}/{cand.variant}" if cand.variant else cand.kind
            keys = (("by_kind", cand.kind), ("by_stage", cand.stage), ("by_category", row.category),
                    ("by_split", pos.split), ("by_config", pos.config), ("by_variant", variant))  # fmt: skip
            for key, value in keys:
                tally[key][value] = tally[key].get(value, 0) + 1
    wall, cpu, counts = spans.take()
    timing = {name: {"wall": wall[name], "cpu": cpu[name], "count": counts[name]} for name in wall}
    return BatchResult(job.index, rows, tally, time.perf_counter() - t0, timing)


def add_spans(total: dict[str, dict[str, float]], part: dict[str, dict[str, float]]) -> None:
    for name, t in part.items():
        into = total.setdefault(name, {"wall": 0.0, "cpu": 0.0, "count": 0})
        for key, value in t.items():
            into[key] += value


def prove_rows(work: list[RowWork], per_row: int, preambles: dict[str, str], seed: int, rounds: int = ROUNDS,
               on_judging: Callable[[int | None], None] | None = None) -> None:  # fmt: skip
    """Decide candidates of each row, in its order, until it has ``per_row`` proven.

    Up to ``rounds`` rounds take each row's next candidates, as many as it still lacks
    (one CPU witness for all of them, kept across the rounds).  A row still short after
    them (its run-stage candidates discarded, or too few of them) then takes its next
    structure and compile candidates, which need no witness and are nearly always
    proven, until it has ``per_row`` or none are left.  ``on_judging``: see Witness."""
    tried = [0] * len(work)
    with warp_boundary.quiet_stderr(), Witness(seed, on_judging) as witness:
        for _ in range(rounds):
            picks = []
            for r, w in enumerate(work):
                take = list(range(tried[r], min(len(w.candidates), tried[r] + max(0, per_row - w.proven()))))
                tried[r] += len(take)
                picks += [(r, c) for c in take]
            if not picks:
                break
            prove_candidates(work, preambles, seed, picks, witness)
        while picks := _fill_picks(work, per_row):
            prove_candidates(work, preambles, seed, picks, witness)


CRASH_ENV = "CUDAGEN_TEST_NEGATIVES_CRASH_ROWS"


def _injected_crash(pos: Positive) -> None:
    """Fault injection for tests: a worker process (never the parent) whose witness starts
    judging a row whose id is in $CUDAGEN_TEST_NEGATIVES_CRASH_ROWS (comma-separated) dies
    the way a witness that corrupts native memory kills it (a wrong kernel's wild write)."""
    ids = {s.strip() for s in os.environ.get(CRASH_ENV, "").split(",") if s.strip()}
    if str(pos.row.id) in ids and multiprocessing.parent_process() is not None:
        os.kill(os.getpid(), signal.SIGSEGV)


def _fill_picks(work: list[RowWork], per_row: int) -> list[tuple[int, int]]:
    """For each row short of ``per_row`` proven: its next untried structure and compile
    candidates (ranking order), as many as it lacks."""
    picks = []
    for r, w in enumerate(work):
        need = per_row - w.proven()
        if need > 0:
            rest = [c for c, cand in enumerate(w.candidates) if w.outcomes[c] is None and cand.stage != RUN]
            picks += [(r, c) for c in rest[:need]]
    return picks


def negative_row(pos: Positive, cand: Candidate, evidence: str) -> NegativeRow:
    row = pos.row
    backward = row.cuda_backward or ""
    diff = unified_diff(row.cuda_forward, cand.forward, "forward.cu")
    if cand.backward != backward:
        diff += unified_diff(backward, cand.backward, "backward.cu")
    ident = text_hash("\0".join((pos.config, str(row.id), cand.kind, cand.variant, cand.forward, cand.backward)))
    return NegativeRow(
        id=ident,
        positive_id=str(row.id),
        positive_config=pos.config,
        kernel_name=row.kernel_name,
        category=row.category,
        kind=cand.kind,
        variant=cand.variant,
        stage=cand.stage,
        evidence=evidence,
        cuda_forward=cand.forward,
        cuda_backward=cand.backward,
        diff=diff,
        python_source=row.python_source,
        device_functions=row.device_functions or "",
        preamble_hash=row.preamble_hash,
        generator_version=__version__,
    )


# --------------------------------------------------------------------------- counting


_COUNTS = ("by_kind", "by_stage", "by_category", "by_split", "by_config", "by_variant")


def new_tally() -> dict:
    return {"positives": 0, "rows_witness_crashed": 0, "candidates_by_kind": {}, **{k: {} for k in _COUNTS},
            "seconds": 0.0}  # fmt: skip


def add_tally(total: dict, part: dict) -> None:
    total["positives"] += part["positives"]
    total["rows_witness_crashed"] = total.get("rows_witness_crashed", 0) + part.get("rows_witness_crashed", 0)
    total["seconds"] += part["seconds"]
    for key in _COUNTS:
        for k, v in part[key].items():
            total[key][k] = total[key].get(k, 0) + v
    for kind, c in part["candidates_by_kind"].items():
        t = total["candidates_by_kind"].setdefault(kind, {"tried": 0, "proven": 0, "discarded": {}})
        t["tried"] += c["tried"]
        t["proven"] += c["proven"]
        for reason, n in c["discarded"].items():
            t["discarded"][reason] = t["discarded"].get(reason, 0) + n


# --------------------------------------------------------------------------- a batch done in parts


def merged(index: int, parts: list[BatchResult]) -> BatchResult:
    """The result of a job done in parts (in row order), as if done at once (timing aside)."""
    if len(parts) == 1:
        return dataclasses.replace(parts[0], index=index)
    rows: dict[str, list[dict]] = {}
    tally = new_tally()
    timing: dict[str, dict[str, float]] = {}
    for part in parts:
        for split, part_rows in part.rows.items():
            rows.setdefault(split, []).extend(part_rows)
        add_tally(tally, {**part.tally, "seconds": 0.0})
        add_spans(timing, part.spans)
    return BatchResult(index, rows, tally, sum(p.seconds for p in parts), timing)


def without_witness(job: BatchJob) -> BatchResult:
    """``job`` (one row whose run-stage witness kills its process or hangs) with its
    structure and compile candidates only, in this process; counted in ``rows_witness_crashed``."""
    job = dataclasses.replace(job, ranking=[[(kind, v) for kind, v in picks if KINDS[kind] != RUN]
                                            for picks in job.ranking])  # fmt: skip
    result = run_batch(job)
    result.tally["rows_witness_crashed"] = len(job.positives)
    return result
