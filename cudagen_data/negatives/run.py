"""``cudagen negatives`` as a library call: a dataset folder's positive rows -> its ``negatives`` configuration.

    >>> from cudagen_data.negatives import make_negatives
    >>> result = make_negatives("data/production", per_row=3, seed=0, workers=2)
    >>> result.stats["by_kind"]

Order and determinism: the positive rows are read in manifest order (the synthetic
``default`` configuration's splits, then ``real``'s); for each, the kinds it allows are
ranked by how often each was chosen so far (fewest first: kinds stay balanced where rows
allow them), and the first ``per_row`` candidates that are proven wrong are shipped (a
discarded one is replaced by the next in the ranking; a row still short after ROUNDS
witness rounds takes its next structure and compile candidates: :func:`prove_rows`).
The ranking depends only on the rows and the options, never on what was proven, and
each row is proven on its own (whatever batch or worker it is in), so the same folder,
options and seed give the same negatives byte for byte however many workers run, how
the rows are batched, and however often a run is interrupted.  Rows are committed batch
by batch (dataset/store.py: spools, shards and a run state of their own under
``.cudagen/negatives/``); a killed run resumes where it was.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import signal
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import xxhash

from .. import __version__, spans, warp_boundary
from ..canonical import text_hash
from ..contracts.manifest import DEFAULT_CONFIG, SPLITS, FileEntry, Manifest, ManifestError
from ..contracts.negative import NEGATIVE_SCHEMA, NEGATIVES_CONFIG, NegativeRow
from ..contracts.row import Row, row_from_dict
from ..dataset import shards, store
from ..dataset.files import DatasetError
from ..dataset.lock import writer_lock
from ..pipeline.config import versions
from ..publish.card import split_num_bytes
from ..publish.card_negatives import with_negatives
from .kinds import KIND_DOCS, KINDS, RUN, Candidate, candidates
from .prove import RowWork, Witness, prove_candidates, unified_diff

DEFAULT_PER_ROW = 3
# Positive rows per worker job at most (one CPU witness module and one NVRTC call per
# round); fewer where the folder is small, so that every worker gets a few jobs
# (:func:`batch_size`).  What is written does not depend on it: rows are proven one by
# one, and shards are cut by row count.
BATCH_ROWS = 20
MIN_BATCH_ROWS = 5
BATCH_TIMEOUT = 1800.0  # seconds a job of several rows may take in a worker before it is redone row by row
ROW_TIMEOUT = 600.0  # seconds one row's proofs may take (then: its structure and compile kinds only)
ROUNDS = 3  # witness rounds per batch: a discarded candidate is replaced by the row's next one
STATE_FILE = f".cudagen/{NEGATIVES_CONFIG}/state.json"
STATE_FORMAT = 1
POSITIVE_CONFIGS = (DEFAULT_CONFIG, "real")


class NegativesError(DatasetError):
    """Bad input for ``cudagen negatives`` (one line naming the folder, file or option)."""


@dataclass
class NegativesState:
    """The negatives run's committed progress (dataset/store.py's RunState, for this configuration)."""

    fingerprint: str
    format: int = STATE_FORMAT
    next_batch: int = 0
    batch_rows: int = 0  # rows per batch of this run (0: not started); a resumed run keeps it
    sizes: dict[str, int] = field(default_factory=dict)
    tally: dict = field(default_factory=dict)
    complete: bool = False
    jsonl: bool = False
    shard_rows: int = shards.SHARD_ROWS
    shards: dict[str, list[dict]] = field(default_factory=lambda: {s: [] for s in SPLITS})
    spool_rows: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SPLITS})

    config = NEGATIVES_CONFIG  # class attributes: where shards.py puts the spools and shards,
    schema = NEGATIVE_SCHEMA  # and the Arrow schema it writes them with

    def append_files(self) -> list[str]:
        return list(shards.open_spools(self).values())

    def to_json(self) -> bytes:
        return orjson.dumps(self.__dict__, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)


@dataclass
class Positive:
    config: str
    split: str
    row: Row


@dataclass
class NegativesResult:
    stats: dict
    already_complete: bool = False
    notes: list[str] = field(default_factory=list)
    # this call's worker time by span (wall, cpu, count): benchmarks/bench_negatives.py; not written
    spans: dict[str, dict[str, float]] = field(default_factory=dict)


# --------------------------------------------------------------------------- reading


def read_positives(root: Path) -> tuple[Manifest, list[Positive]]:
    """The folder's manifest and its positive rows, in manifest order."""
    try:
        manifest = Manifest.read(root)
    except ManifestError as exc:
        raise NegativesError(str(exc)) from None
    out: list[Positive] = []
    for config in POSITIVE_CONFIGS:
        for entry in manifest.parquet_files(config):
            path = root / entry.path
            try:
                rows = pq.read_table(path).to_pylist()
            except (OSError, ValueError) as exc:
                raise NegativesError(f"{path}: unreadable Parquet shard ({type(exc).__name__})") from None
            for r in rows:
                try:
                    out.append(Positive(config, entry.split, row_from_dict(r)))
                except (TypeError, KeyError) as exc:
                    raise NegativesError(f"{path}: not a cudagen row shard ({type(exc).__name__}: {exc})") from None
    if not out:
        raise NegativesError(f"{root}: the manifest lists no positive rows (default or real configuration)")
    return manifest, out


# --------------------------------------------------------------------------- ranking


def _foreign(positives: list[Positive], i: int) -> list[Row]:
    """The row whose kernel a ``structure/foreign_kernel`` candidate of row ``i`` copies: the next one."""
    return [positives[(i + 1) % len(positives)].row] if len(positives) > 1 else []


def rank(positives: list[Positive], kinds: tuple[str, ...], per_row: int) -> list[list[tuple[str, str]]]:
    """Per row, the (kind, variant) of its candidates in the order they are tried: kinds
    chosen least often so far first (ties: KINDS order rotated by the row's position),
    one candidate per kind; a kind's variant is its least used one.  The kinds' other
    variants follow, in the same order: a row that allows fewer kinds than ``per_row``
    (a mined row: structure and compile only) still gets ``per_row`` negatives."""
    chosen_kinds: Counter = Counter()
    chosen_variants: Counter = Counter()
    order = list(KINDS)
    out = []
    for i, pos in enumerate(positives):
        by_kind: dict[str, list[Candidate]] = {}
        for cand in candidates(pos.row, _foreign(positives, i)):
            if cand.kind in kinds:
                by_kind.setdefault(cand.kind, []).append(cand)
        rotation = {k: (order.index(k) - i) % len(order) for k in by_kind}
        ranked = sorted(by_kind, key=lambda k: (chosen_kinds[k], rotation[k]))
        picks, extra = [], []
        for kind in ranked:
            variants = [c.variant for c in by_kind[kind]]
            ordered = sorted(variants, key=lambda v: (chosen_variants[(kind, v)], variants.index(v)))
            picks.append((kind, ordered[0]))
            extra += [(kind, v) for v in ordered[1:]]
        picks += extra
        for kind, variant in picks[:per_row]:
            chosen_kinds[kind] += 1
            chosen_variants[(kind, variant)] += 1
        out.append(picks)
    return out


# --------------------------------------------------------------------------- one batch (in a worker)


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


def run_batch(job: BatchJob) -> BatchResult:
    """Prove candidates for a batch of positive rows, ``per_row`` at most each (:func:`prove_rows`)."""
    t0 = time.perf_counter()
    spans.take()  # what ran before this batch in the process is not its time
    work = []
    with spans.span("negatives.candidates"):
        for pos, foreign, ranked in zip(job.positives, job.foreign, job.ranking, strict=True):
            made = {(c.kind, c.variant): c for c in candidates(pos.row, foreign)}
            work.append(RowWork(pos.row, [made[k] for k in ranked]))
    _injected_crash(job)
    prove_rows(work, job.per_row, job.preambles, job.seed)
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


def prove_rows(work: list[RowWork], per_row: int, preambles: dict[str, str], seed: int, rounds: int = ROUNDS) -> None:
    """Decide candidates of each row, in its order, until it has ``per_row`` proven.

    Up to ``rounds`` rounds take each row's next candidates, as many as it still lacks
    (one CPU witness for all of them, kept across the rounds).  A row still short after
    them (its run-stage candidates discarded, or too few of them) then takes its next
    structure and compile candidates, which need no witness and are nearly always
    proven, until it has ``per_row`` or none are left."""
    tried = [0] * len(work)
    with warp_boundary.quiet_stderr(), Witness(seed) as witness:
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


def _injected_crash(job: BatchJob) -> None:
    """Fault injection for tests: a worker process (never the parent) that would witness a
    row whose id is in $CUDAGEN_TEST_NEGATIVES_CRASH_ROWS (comma-separated) dies the way a
    witness that corrupts native memory kills it."""
    ids = {s.strip() for s in os.environ.get(CRASH_ENV, "").split(",") if s.strip()}
    if not ids or multiprocessing.parent_process() is None:
        return
    for pos, ranked in zip(job.positives, job.ranking, strict=True):
        if str(pos.row.id) in ids and any(KINDS[kind] == RUN for kind, _ in ranked):
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


def stats_json(tally: dict) -> dict:
    """stats.json -> ``negatives`` (``seconds`` is the only timing field)."""
    total = sum(tally["by_kind"].values())
    run = [c for k, c in tally["candidates_by_kind"].items() if KINDS[k] == RUN]
    run_tried = sum(c["tried"] for c in run)
    return {
        "negatives": total,
        "positives": tally["positives"],
        "per_positive": round(total / tally["positives"], 4) if tally["positives"] else 0.0,
        "by_kind": {k: tally["by_kind"][k] for k in KINDS if k in tally["by_kind"]},
        "by_variant": dict(sorted(tally["by_variant"].items())),
        "by_stage": {s: tally["by_stage"][s] for s in ("structure", "compile", "run") if s in tally["by_stage"]},
        "by_category": dict(sorted(tally["by_category"].items())),
        "by_split": {s: tally["by_split"][s] for s in SPLITS if s in tally["by_split"]},
        "by_config": dict(sorted(tally["by_config"].items())),
        "candidates_by_kind": {
            k: {**c, "discarded": dict(sorted(c["discarded"].items()))}
            for k, c in sorted(tally["candidates_by_kind"].items(), key=lambda kv: list(KINDS).index(kv[0]))
        },
        "run_proven_rate": round(sum(c["proven"] for c in run) / run_tried, 4) if run_tried else None,
        # rows whose run-stage witness killed its process (they got structure and compile negatives only)
        "rows_witness_crashed": tally.get("rows_witness_crashed", 0),
        "seconds": round(tally["seconds"], 3),
    }


BALANCE_FACTOR = 2.0  # issue #24: kinds balanced within a factor of 2 where the rows allow them


def fair_shares(allowing: dict[str, int], total: int) -> dict[str, float]:
    """``total`` negatives spread evenly over the kinds, no kind getting more than the
    rows that allow it (one negative each: water-filling); where the rows allow fewer
    than ``total`` in all (a mined folder: structure and compile only), each kind's
    allowing rows scaled up to the total."""
    room = sum(allowing.values())
    if room <= total:
        return {k: n * total / room for k, n in allowing.items()} if room else {}
    shares: dict[str, float] = {}
    left, open_kinds = float(total), sorted(allowing, key=lambda k: (allowing[k], k))
    while open_kinds:
        level = left / len(open_kinds)
        if allowing[open_kinds[0]] > level:
            shares.update({k: level for k in open_kinds})
            break
        kind = open_kinds.pop(0)
        shares[kind] = allowing[kind]
        left -= allowing[kind]
    return shares


def balance(by_kind: dict[str, int], allowing: dict[str, int]) -> dict:
    """How evenly the negatives are spread over the kinds the rows allow: each kind's
    count over its fair share (:func:`fair_shares`), and whether every one lies within
    a factor of BALANCE_FACTOR (a kind few rows allow, ``race``, is held to what they
    allow, not to the others' counts)."""
    allowed = {k: allowing[k] for k in KINDS if allowing.get(k)}
    shares = fair_shares(allowed, sum(by_kind.get(k, 0) for k in allowed))
    ratios = {k: round(by_kind.get(k, 0) / shares[k], 3) for k in allowed if shares.get(k)}
    low, high = (min(ratios.values()), max(ratios.values())) if ratios else (None, None)
    return {
        "fair_share": {k: round(v, 2) for k, v in shares.items() if k in ratios},
        "shipped_over_fair": ratios,
        "ratio_min": low,
        "ratio_max": high,
        "factor": BALANCE_FACTOR,
        "balanced": bool(ratios) and low >= 1 / BALANCE_FACTOR and high <= BALANCE_FACTOR,
    }


# --------------------------------------------------------------------------- the run


def _fingerprint(manifest: Manifest, per_row: int, kinds: tuple[str, ...], seed: int) -> str:
    files = [(f.path, f.xxh3_128) for c in POSITIVE_CONFIGS for f in manifest.parquet_files(c)]
    key = orjson.dumps({"files": files, "per_row": per_row, "kinds": list(kinds), "seed": seed, "version": __version__})
    return xxhash.xxh3_128_hexdigest(key)


def check_options(per_row: int, kinds: list[str] | None, workers: int) -> tuple[str, ...]:
    if per_row < 1:
        raise NegativesError(f"--per-row {per_row}: must be at least 1")
    if workers < 0:
        raise NegativesError(f"--workers {workers}: must be 0 (in this process) or more")
    chosen = tuple(kinds) if kinds else tuple(KINDS)
    unknown = [k for k in chosen if k not in KINDS]
    if unknown:
        raise NegativesError(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in chosen)


def make_negatives(
    root: str | os.PathLike,
    *,
    per_row: int = DEFAULT_PER_ROW,
    kinds: list[str] | None = None,
    seed: int = 0,
    workers: int = 2,
    batch_rows: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> NegativesResult:
    """Add (or finish) the folder's ``negatives`` configuration; see the module docstring.
    ``batch_rows``: positive rows per batch (None: :func:`batch_size`; a resumed run keeps
    its own).  ``progress(n)`` is called with the number of positive rows each committed
    batch held.  Holds the folder's writer lock throughout (dataset/lock.py)."""
    root = Path(root)
    chosen = check_options(per_row, kinds, workers)
    with writer_lock(root):
        return _make_negatives(root, chosen, per_row, seed, workers, batch_rows, progress)


def batch_size(positives: int, workers: int) -> int:
    """Rows per batch: BATCH_ROWS, fewer where that would leave a worker fewer than two
    batches (MIN_BATCH_ROWS at least): the run's last batches then end close together."""
    return max(MIN_BATCH_ROWS, min(BATCH_ROWS, -(-positives // (2 * max(workers, 1)))))


def _make_negatives(root, chosen, per_row, seed, workers, batch_rows, progress) -> NegativesResult:
    manifest, positives = read_positives(root)
    folder = store.DatasetFolder(root, STATE_FILE)
    fingerprint = _fingerprint(manifest, per_row, chosen, seed)
    state = _load_state(folder)
    notes: list[str] = []
    if state is not None and state.fingerprint != fingerprint:
        notes.append("an earlier negatives run with other options or rows was replaced")
        _clear(root)
        state = None
    if state is not None and state.complete:
        written = orjson.loads((root / "stats.json").read_bytes()) if (root / "stats.json").exists() else {}
        return NegativesResult(written.get(NEGATIVES_CONFIG) or stats_json(state.tally), already_complete=True)
    if state is None:
        state = NegativesState(fingerprint, tally=new_tally())
    if not state.batch_rows:  # a new run (or one from before batch_rows was kept: it used BATCH_ROWS)
        fresh = state.next_batch == 0
        state.batch_rows = (batch_rows or batch_size(len(positives), workers)) if fresh else BATCH_ROWS
    batch_rows = state.batch_rows
    notes += folder.start(state)
    ranking = rank(positives, chosen, per_row)
    jobs = [
        BatchJob(
            b,
            positives[i : i + batch_rows],
            [_foreign(positives, j) for j in range(i, min(i + batch_rows, len(positives)))],
            ranking[i : i + batch_rows],
            per_row,
            manifest.preambles,
            seed,
        )  # fmt: skip
        for b, i in enumerate(range(0, len(positives), batch_rows))
    ]
    if progress is not None:
        progress(sum(len(j.positives) for j in jobs[: state.next_batch]))
    timing: dict[str, dict[str, float]] = {}
    for result in _results(jobs[state.next_batch :], workers):
        add_spans(timing, {**result.spans, "batch": {"wall": result.seconds, "cpu": 0.0, "count": 1}})
        add_tally(state.tally, {**result.tally, "seconds": result.seconds})
        state.next_batch = result.index + 1
        folder.commit(state, result.rows, [])
        if progress is not None:
            progress(len(jobs[result.index].positives))
    allowed = Counter(kind for picks in ranking for kind in {k for k, _ in picks})
    stats = _finish(root, folder, state, manifest, per_row, chosen, seed, allowed)
    return NegativesResult(stats, notes=notes, spans=timing)


@dataclass
class _Piece:
    """Rows ``lo:hi`` of a batch job: what one worker runs at a time."""

    job: BatchJob
    lo: int
    hi: int

    def rows(self) -> int:
        return self.hi - self.lo

    def sub_job(self) -> BatchJob:
        j, lo, hi = self.job, self.lo, self.hi
        return dataclasses.replace(j, positives=j.positives[lo:hi], foreign=j.foreign[lo:hi], ranking=j.ranking[lo:hi])

    def halves(self) -> list[_Piece]:
        mid = (self.lo + self.hi) // 2
        return [_Piece(self.job, self.lo, mid), _Piece(self.job, mid, self.hi)]

    def single_rows(self) -> list[_Piece]:
        return [_Piece(self.job, k, k + 1) for k in range(self.lo, self.hi)]


def _results(jobs: list[BatchJob], workers: int) -> Iterator[BatchResult]:
    """Each job's result, in job order (``workers`` processes; 0: in this process).

    Each worker is a pool of one process, so a worker that dies (a witness that corrupts
    its process's heap despite the guards) or hangs (past BATCH_TIMEOUT, ROW_TIMEOUT for
    one row) names the piece of work it was running; that worker is replaced and the
    piece is done again in parts: halved after a crash (down to the row that crashes),
    row by row after a hang.  A row whose witness still kills its process or hangs gets
    its structure and compile candidates only (:func:`_without_witness`).  Rows are
    proven one by one, so a job's result is the same however it was split; only a row
    that crashes or hangs changes what is written (a time limit depends on the
    machine's load: it is generous)."""
    if workers == 0:
        for job in jobs:
            yield run_batch(job)
        return
    context = multiprocessing.get_context("spawn")
    pools: list[ProcessPoolExecutor | None] = [None] * workers
    queue: deque[_Piece] = deque(_Piece(job, 0, len(job.positives)) for job in jobs)
    running: dict[int, tuple[_Piece, Future, float]] = {}  # worker -> its piece, future, deadline
    done: dict[int, list[tuple[int, BatchResult]]] = {}  # job position -> (first row, result) of its pieces
    position = {job.index: k for k, job in enumerate(jobs)}
    yielded = 0
    try:
        while yielded < len(jobs):
            for slot in range(workers):
                if slot not in running and queue:
                    piece = queue.popleft()
                    if pools[slot] is None:
                        pools[slot] = ProcessPoolExecutor(1, mp_context=context)
                    limit = BATCH_TIMEOUT if piece.rows() > 1 else ROW_TIMEOUT
                    running[slot] = (piece, pools[slot].submit(run_batch, piece.sub_job()), time.monotonic() + limit)
            if not running:  # nothing left to run (every piece done): cannot happen before the last yield
                raise RuntimeError("negatives: jobs left without work queued")
            deadline = min(d for _, _, d in running.values())
            finished, _ = wait([f for _, f, _ in running.values()], max(0.0, deadline - time.monotonic()),
                               FIRST_COMPLETED)  # fmt: skip
            for slot, (piece, future, until) in list(running.items()):
                if future in finished:
                    try:
                        result, parts = future.result(), []
                    except BrokenProcessPool:
                        result, parts = None, piece.halves() if piece.rows() > 1 else []
                elif time.monotonic() >= until:
                    result, parts = None, piece.single_rows() if piece.rows() > 1 else []
                else:
                    continue
                del running[slot]
                if result is None:  # the worker died or hangs: replace it, redo the piece in parts
                    _kill(pools[slot])
                    pools[slot].shutdown(wait=True, cancel_futures=True)
                    pools[slot] = None
                    if not parts:
                        result = _without_witness(piece.sub_job())
                    queue.extendleft(reversed(parts))
                if result is not None:
                    done.setdefault(position[piece.job.index], []).append((piece.lo, result))
            while yielded < len(jobs) and _rows_done(done.get(yielded, [])) == len(jobs[yielded].positives):
                yield _merged(jobs[yielded].index, [r for _, r in sorted(done.pop(yielded), key=lambda p: p[0])])
                yielded += 1
    finally:
        for slot, pool in enumerate(pools):
            if pool is not None:
                if slot in running:  # stopped early (an error, or the caller stopped reading)
                    _kill(pool)
                pool.shutdown(wait=True, cancel_futures=True)


def _rows_done(parts: list[tuple[int, BatchResult]]) -> int:
    return sum(r.tally["positives"] for _, r in parts)


def _merged(index: int, parts: list[BatchResult]) -> BatchResult:
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


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kill a pool's worker processes (a hung witness never returns; shutdown would wait)."""
    for process in list((pool._processes or {}).values()):  # the executor's own handles: no public API
        process.kill()


def _without_witness(job: BatchJob) -> BatchResult:
    """``job`` (one row whose run-stage witness kills its process or hangs) with its
    structure and compile candidates only, in this process; counted in ``rows_witness_crashed``."""
    job = dataclasses.replace(job, ranking=[[(kind, v) for kind, v in picks if KINDS[kind] != RUN]
                                            for picks in job.ranking])  # fmt: skip
    result = run_batch(job)
    result.tally["rows_witness_crashed"] = len(job.positives)
    return result


def _load_state(folder: store.DatasetFolder) -> NegativesState | None:
    p = folder.path(STATE_FILE)
    if not p.exists():
        return None
    try:
        data = orjson.loads(p.read_bytes())
        state = NegativesState(**data)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise NegativesError(f"{p}: unreadable run state ({exc}); delete it to start over") from None
    if state.format != STATE_FORMAT:
        raise NegativesError(f"{p}: run state of another cudagen-data version; delete it to start over")
    return state


def _clear(root: Path) -> None:
    for rel in (f".cudagen/{NEGATIVES_CONFIG}", f"data/{NEGATIVES_CONFIG}"):
        shutil.rmtree(root / rel, ignore_errors=True)


def _finish(root: Path, folder: store.DatasetFolder, state: NegativesState, manifest: Manifest, per_row: int,
            kinds: tuple[str, ...], seed: int, allowed: Counter) -> dict:  # fmt: skip
    """Last shards, manifest entries, stats.json -> negatives, the card; then complete."""
    moved = folder.finish_shards(state)
    files = [
        FileEntry(s["path"], split, s["rows"], s["xxh3_128"], NEGATIVES_CONFIG)
        for split in SPLITS
        for s in moved.get(split, [])
    ]
    manifest = Manifest.read(root)  # as it is now (another writer may have added to it before this run)
    manifest.files = [f for f in manifest.files if f.config != NEGATIVES_CONFIG] + files
    words = ["cudagen", "negatives", "DATASET_DIR", "--per-row", str(per_row), "--seed", str(seed)]
    if kinds != tuple(KINDS):
        words += ["--kinds", ",".join(kinds)]
    manifest.negatives = {"command": " ".join(words), "versions": versions()}
    stats = stats_json(state.tally)
    # how many positive rows allow each kind: a kind is balanced against what rows allow
    stats["rows_allowing_kind"] = {k: allowed[k] for k in KINDS if k in allowed}
    stats["balance"] = balance(stats["by_kind"], stats["rows_allowing_kind"])
    stats_path = root / "stats.json"
    all_stats = orjson.loads(stats_path.read_bytes()) if stats_path.exists() else {}
    all_stats[NEGATIVES_CONFIG] = stats
    store.write_json(stats_path, all_stats)
    store.write_json(root / "manifest.json", manifest.to_dict())
    split_files = {split: [s["path"] for s in moved[split]] for split in SPLITS if moved.get(split)}
    counts = {split: sum(s["rows"] for s in moved[split]) for split in split_files}
    readme = (root / "README.md").read_text(encoding="utf-8") if (root / "README.md").exists() else ""
    sizes = split_num_bytes(root, split_files)
    card = with_negatives(readme, split_files=split_files, counts=counts, schema=NEGATIVE_SCHEMA, stats=stats,
                          kind_docs=KIND_DOCS, kind_stages=KINDS, num_bytes=sizes)  # fmt: skip
    store.write_text(root / "README.md", card)
    state.complete = True
    folder.save_state(state)
    return stats


def format_summary(stats: dict, root: Path | str) -> str:
    lines = [
        f"{stats['negatives']} negatives from {stats['positives']} positive rows "
        f"({stats['per_positive']:.2f} per row) -> {root} (configuration 'negatives')",
        "  by kind: " + ", ".join(f"{k} {v}" for k, v in stats["by_kind"].items()),
        "  by stage: " + ", ".join(f"{k} {v}" for k, v in stats["by_stage"].items()),
    ]
    discarded = {k: sum(c["discarded"].values()) for k, c in stats["candidates_by_kind"].items() if c["discarded"]}
    if discarded:
        lines.append("  discarded candidates: " + ", ".join(f"{k} {v}" for k, v in discarded.items()))
    if stats["run_proven_rate"] is not None:
        lines.append(f"  run-stage candidates proven by the CPU witness: {stats['run_proven_rate']:.1%}")
    fair = stats.get("balance") or {}
    if fair.get("ratio_min") is not None:
        verdict = "within" if fair["balanced"] else "NOT within"
        lines.append(f"  kinds {verdict} a factor of {fair['factor']:g} of their fair share (shipped / fair share "
                     f"{fair['ratio_min']:.2f} to {fair['ratio_max']:.2f})")  # fmt: skip
    lines.append(f"  time: {stats['seconds']:.1f} s of worker time")
    return "\n".join(lines)
