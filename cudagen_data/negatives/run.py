"""``cudagen negatives`` as a library call: a dataset folder's positive rows -> its ``negatives`` configuration.

    >>> from cudagen_data.negatives import make_negatives
    >>> result = make_negatives("data/production", per_row=3, seed=0, workers=2)
    >>> result.stats["by_kind"]

Order and determinism: the positive rows are read in manifest order (the synthetic
``default`` configuration's splits, then ``real``'s); for each, the kinds it allows are
ranked by how often each was chosen so far (fewest first: kinds stay balanced where rows
allow them), and the first ``per_row`` candidates that are proven wrong are shipped (a
discarded one is replaced by the next in the ranking).  The ranking depends only on the
rows and the options, never on what was proven, so the same folder, options and seed
give the same negatives byte for byte however many workers run and however often a run
is interrupted.  Rows are committed batch by batch (dataset/store.py: spools, shards and
a run state of their own under ``.cudagen/negatives/``); a killed run resumes where it was.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import xxhash

from .. import __version__, warp_boundary
from ..canonical import text_hash
from ..contracts.manifest import DEFAULT_CONFIG, SPLITS, FileEntry, Manifest, ManifestError
from ..contracts.negative import NEGATIVE_SCHEMA, NEGATIVES_CONFIG, NegativeRow
from ..dataset import shards, store
from ..dataset.files import DatasetError
from ..dataset.lock import writer_lock
from ..pipeline.config import versions
from ..publish.card import split_num_bytes
from ..publish.card_negatives import with_negatives
from .kinds import KIND_DOCS, KINDS, RUN, Candidate, candidates
from .prove import RowWork, prove_candidates, unified_diff

DEFAULT_PER_ROW = 3
BATCH_ROWS = 20  # positive rows per worker job (one CPU witness module, one NVRTC unit per 32 candidates)
BATCH_TIMEOUT = 1800.0  # seconds a batch may take in a worker before it is redone row by row
ROW_TIMEOUT = 600.0  # seconds one row's proofs may take (then: its structure and compile kinds only)
ROUNDS = 3  # proving rounds per batch: a discarded candidate is replaced by the row's next one
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
    row: dict


@dataclass
class NegativesResult:
    stats: dict
    already_complete: bool = False
    notes: list[str] = field(default_factory=list)


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
            missing = {"id", "cuda_forward", "cuda_backward", "preamble_hash", "python_source"} - set(
                rows[0] if rows else {}
            )
            if missing:
                raise NegativesError(f"{path}: not a cudagen row shard (no column {sorted(missing)[0]!r})")
            out += [Positive(config, entry.split, r) for r in rows]
    if not out:
        raise NegativesError(f"{root}: the manifest lists no positive rows (default or real configuration)")
    return manifest, out


# --------------------------------------------------------------------------- ranking


def _foreign(positives: list[Positive], i: int) -> list[dict]:
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
    foreign: list[list[dict]]
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


def run_batch(job: BatchJob) -> BatchResult:
    """Prove candidates for a batch of positive rows, ``per_row`` at most each."""
    t0 = time.perf_counter()
    work = []
    for pos, foreign, ranked in zip(job.positives, job.foreign, job.ranking, strict=True):
        made = {(c.kind, c.variant): c for c in candidates(pos.row, foreign)}
        work.append(RowWork(pos.row, [made[k] for k in ranked]))
    tried = [0] * len(work)
    with warp_boundary.quiet_stderr():
        for _ in range(ROUNDS):
            picks = []
            for r, w in enumerate(work):
                need = job.per_row - sum(1 for o in w.outcomes if o is not None and o.proven)
                take = list(range(tried[r], min(len(w.candidates), tried[r] + max(0, need))))
                tried[r] += len(take)
                picks += [(r, c) for c in take]
            if not picks:
                break
            prove_candidates(work, job.preambles, job.seed, picks)
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
    return BatchResult(job.index, rows, tally, time.perf_counter() - t0)


def negative_row(pos: Positive, cand: Candidate, evidence: str) -> NegativeRow:
    row = pos.row
    backward = row["cuda_backward"] or ""
    diff = unified_diff(row["cuda_forward"], cand.forward, "forward.cu")
    if cand.backward != backward:
        diff += unified_diff(backward, cand.backward, "backward.cu")
    ident = text_hash("\0".join((pos.config, str(row["id"]), cand.kind, cand.variant, cand.forward, cand.backward)))
    return NegativeRow(
        id=ident,
        positive_id=str(row["id"]),
        positive_config=pos.config,
        kernel_name=row["kernel_name"],
        category=row["category"],
        kind=cand.kind,
        variant=cand.variant,
        stage=cand.stage,
        evidence=evidence,
        cuda_forward=cand.forward,
        cuda_backward=cand.backward,
        diff=diff,
        python_source=row["python_source"],
        device_functions=row["device_functions"] or "",
        preamble_hash=row["preamble_hash"],
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
    batch_rows: int = BATCH_ROWS,
    progress: Callable[[int], None] | None = None,
) -> NegativesResult:
    """Add (or finish) the folder's ``negatives`` configuration; see the module docstring.
    ``progress(n)`` is called with the number of positive rows each committed batch held.
    Holds the folder's writer lock throughout (dataset/lock.py)."""
    root = Path(root)
    chosen = check_options(per_row, kinds, workers)
    with writer_lock(root):
        return _make_negatives(root, chosen, per_row, seed, workers, batch_rows, progress)


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
        return NegativesResult(stats_json(state.tally), already_complete=True)
    if state is None:
        state = NegativesState(fingerprint, tally=new_tally())
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
    for result in _results(jobs[state.next_batch :], workers):
        add_tally(state.tally, {**result.tally, "seconds": result.seconds})
        state.next_batch = result.index + 1
        folder.commit(state, result.rows, [])
        if progress is not None:
            progress(len(jobs[result.index].positives))
    allowed = Counter(kind for picks in ranking for kind in {k for k, _ in picks})
    stats = _finish(root, folder, state, manifest, per_row, chosen, seed, allowed)
    return NegativesResult(stats, notes=notes)


def _results(jobs: list[BatchJob], workers: int) -> Iterator[BatchResult]:
    """Each job's result, in job order (``workers`` processes; 0: in this process).

    A witness runs edited kernels, and one that corrupts its process's heap despite the
    guards kills its worker, or one that loops forever (an edited loop counter) never ends:
    the pool is then restarted (after ``BATCH_TIMEOUT`` seconds, its workers killed), and
    the job it was waiting for is done again row by row, each row in a process of its own
    (:func:`_alone`).  A time limit depends on the machine's load: it is generous, and only
    a row that hangs (or crashes) changes what is written."""
    if workers == 0:
        for job in jobs:
            yield run_batch(job)
        return
    context = multiprocessing.get_context("spawn")
    i = 0
    while i < len(jobs):
        pool = ProcessPoolExecutor(workers, mp_context=context)
        try:
            pending: dict[int, Future] = {}
            submitted = i
            while i < len(jobs):
                while submitted < len(jobs) and submitted - i < 2 * workers:
                    pending[submitted] = pool.submit(run_batch, jobs[submitted])
                    submitted += 1
                try:
                    result = pending.pop(i).result(timeout=BATCH_TIMEOUT)
                except (BrokenProcessPool, TimeoutError):
                    _kill(pool)
                    break
                yield result
                i += 1
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if i < len(jobs):
            yield _alone(jobs[i], context)
            i += 1


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kill a pool's worker processes (a hung witness never returns; shutdown would wait)."""
    for process in list((pool._processes or {}).values()):  # the executor's own handles: no public API
        process.kill()


def _alone(job: BatchJob, context) -> BatchResult:
    """``job`` row by row, each in a fresh process; a row whose run-stage witness still
    kills its process (or hangs) gets its structure and compile candidates only (counted in
    ``rows_witness_crashed``)."""
    rows: dict[str, list[dict]] = {}
    tally = new_tally()
    seconds = 0.0
    for k in range(len(job.positives)):
        one = BatchJob(job.index, job.positives[k : k + 1], job.foreign[k : k + 1], job.ranking[k : k + 1],
                       job.per_row, job.preambles, job.seed)  # fmt: skip
        pool = ProcessPoolExecutor(1, mp_context=context)
        try:
            result = pool.submit(run_batch, one).result(timeout=ROW_TIMEOUT)
        except (BrokenProcessPool, TimeoutError):
            _kill(pool)
            one.ranking = [[(kind, v) for kind, v in job.ranking[k] if KINDS[kind] != RUN]]
            result = run_batch(one)
            result.tally["rows_witness_crashed"] = 1
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        for split, part in result.rows.items():
            rows.setdefault(split, []).extend(part)
        add_tally(tally, {**result.tally, "seconds": 0.0})
        seconds += result.seconds
    return BatchResult(job.index, rows, tally, seconds)


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
    lines.append(f"  time: {stats['seconds']:.1f} s of worker time")
    return "\n".join(lines)
