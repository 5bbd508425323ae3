"""``cudagen negatives`` as a library call: a dataset folder's positive rows -> its ``negatives`` configuration.

    >>> from cudagen_data.negatives import make_negatives
    >>> result = make_negatives("data/production", per_row=3, seed=0, workers=2)
    >>> result.stats["by_kind"]

Order and determinism: the positive rows are read in manifest order (the synthetic
``default`` configuration's splits, then ``real``'s); for each, the kinds it allows are
ranked by how often each was chosen so far (fewest first: kinds stay balanced where rows
allow them), and the first ``per_row`` candidates that are proven wrong are shipped (a
discarded one is replaced by the next in the ranking; a row still short after ROUNDS
witness rounds takes its next structure and compile candidates: batch.prove_rows).
The ranking depends only on the rows and the options, never on what was proven, and
each row is proven on its own (whatever batch or worker it is in), so the same folder,
options and seed give the same negatives byte for byte however many workers run, how
the rows are batched, and however often a run is interrupted.  Rows are committed batch
by batch (dataset/store.py: spools, shards and a run state of their own under
``.cudagen/negatives/``); a killed run resumes where it was.  Batches are proven in
worker processes (pool.py), each batch by batch.run_batch.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import xxhash

from .. import __version__
from ..contracts.manifest import DEFAULT_CONFIG, SPLITS, FileEntry, Manifest, ManifestError
from ..contracts.negative import NEGATIVE_SCHEMA, NEGATIVES_CONFIG
from ..contracts.row import Row, row_from_dict
from ..dataset import shards, store
from ..dataset.files import DatasetError
from ..dataset.lock import writer_lock
from ..pipeline.config import versions
from ..publish.card import split_num_bytes
from ..publish.card_negatives import with_negatives
from .batch import BatchJob, Positive, add_spans, add_tally, new_tally
from .kinds import KIND_DOCS, KINDS, RUN, Candidate, candidates
from .pool import results

DEFAULT_PER_ROW = 3
# Positive rows per worker job at most (one CPU witness module and one NVRTC call per
# round); fewer where the folder is small, so that every worker gets a few jobs
# (:func:`batch_size`).  What is written does not depend on it: rows are proven one by
# one, and shards are cut by row count.
BATCH_ROWS = 20
MIN_BATCH_ROWS = 5
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
    """:func:`ranked` as a list."""
    return list(ranked(positives, kinds, per_row))


def ranked(positives: list[Positive], kinds: tuple[str, ...], per_row: int) -> Iterator[list[tuple[str, str]]]:
    """Per row, lazily (a row's ranking depends only on the rows before it, so batches are
    ranked while the workers prove earlier ones; making every row's candidates takes
    seconds per hundred rows), the (kind, variant) of its candidates in the order they are tried: kinds
    chosen least often so far first (ties: KINDS order rotated by the row's position),
    one candidate per kind; a kind's variant is its least used one.  The kinds' other
    variants follow, in the same order: a row that allows fewer kinds than ``per_row``
    (a mined row: structure and compile only) still gets ``per_row`` negatives."""
    chosen_kinds: Counter = Counter()
    chosen_variants: Counter = Counter()
    order = list(KINDS)
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
        yield picks


# --------------------------------------------------------------------------- counting


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
    allowed: Counter = Counter()  # positive rows allowing each kind (counted as the rows are ranked)
    jobs = _jobs(positives, ranked(positives, chosen, per_row), batch_rows, per_row, manifest.preambles, seed, allowed)
    if progress is not None:
        progress(min(state.next_batch * batch_rows, len(positives)))
    timing: dict[str, dict[str, float]] = {}
    for result in results(itertools.islice(jobs, state.next_batch, None), workers):
        add_spans(timing, {**result.spans, "batch": {"wall": result.seconds, "cpu": 0.0, "count": 1}})
        add_tally(state.tally, {**result.tally, "seconds": result.seconds})
        state.next_batch = result.index + 1
        folder.commit(state, result.rows, [])
        if progress is not None:
            progress(result.tally["positives"])
    for _ in jobs:  # every row ranked (a run resumed with nothing left to prove ranks them here)
        pass
    stats = _finish(root, folder, state, manifest, per_row, chosen, seed, allowed)
    return NegativesResult(stats, notes=notes, spans=timing)


def _jobs(positives: list[Positive], ranks: Iterator[list[tuple[str, str]]], batch_rows: int, per_row: int,
          preambles: dict[str, str], seed: int, allowed: Counter) -> Iterator[BatchJob]:  # fmt: skip
    """The run's batches, in order, each made when it is asked for (its rows ranked then);
    ``allowed`` counts the kinds each ranked row allows."""
    for b, i in enumerate(range(0, len(positives), batch_rows)):
        rows = range(i, min(i + batch_rows, len(positives)))
        ranking = [next(ranks) for _ in rows]
        for picks in ranking:
            allowed.update({kind for kind, _ in picks})
        yield BatchJob(b, positives[i : rows.stop], [_foreign(positives, j) for j in rows], ranking, per_row, preambles,
                       seed)  # fmt: skip


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
