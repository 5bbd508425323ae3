"""The producer: runs batches through an executor and keeps exactly N distinct pairs.

Results are consumed strictly in batch order, slot by slot, so which pairs are kept
(the earlier slot wins a duplicate; a category stops at its quota) never depends on
worker timing.  Slots of a category that is already full are neither counted nor kept,
which is also why the executor may skip them without changing the result.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..dataset import store
from ..dataset.schema import ROW_SCHEMA
from ..dataset.store import DatasetError, DatasetFolder, RunState
from ..publish.splits import assign_split
from .config import ProduceConfig, ProduceError, command_line, fingerprint, versions
from .executor import make_executor
from .work import BatchResult, SlotOutcome, merge_results, reject_record, run_batch

# Stop instead of looping forever when generators stop yielding valid, new kernels.
MAX_SLOTS_PER_ROW = 20

EXECUTION_REASONS = ("load_error", "build_error", "launch_error", "nan_output", "constant_output", "reference_mismatch", "backward_error", "nan_gradient")


@dataclass
class ProduceResult:
    output: Path
    stats: dict
    notes: list[str]
    resumed: bool
    already_complete: bool = False


def _new_tally(config: ProduceConfig) -> dict:
    return {
        "accepted": {c: 0 for c in config.categories},
        "slots": {c: 0 for c in config.categories},
        "by_split": {s: 0 for s in store.SPLITS},
        "by_difficulty": {},
        "by_category_difficulty": {c: {} for c in config.categories},
        "rejects": {},
        "duplicates": {"python": 0, "cuda": 0},
        "forward_lines": 0,
        "backward_lines": 0,
        "stage_seconds": {"generate": 0.0, "extract": 0.0, "compile": 0.0, "execute": 0.0, "write": 0.0},
        "elapsed_seconds": 0.0,
    }


class _Dedup:
    def __init__(self) -> None:
        self.python: set[str] = set()
        self.cuda: set[str] = set()

    def add(self, row: dict) -> str | None:
        """None if new (and remembered), else which hash repeated."""
        if row["python_hash"] in self.python:
            return "python"
        if row["cuda_hash"] in self.cuda:
            return "cuda"
        self.python.add(row["python_hash"])
        self.cuda.add(row["cuda_hash"])
        return None


def open_run(folder: DatasetFolder, config: ProduceConfig, overwrite: bool) -> tuple[RunState, bool, list[str]]:
    """The state to continue from: (state, resumed, notes).  Refuses a foreign folder."""
    fp = fingerprint(config).decode()
    if overwrite:
        folder.clear()
    state = folder.load_state()
    if state is None:
        if folder.has_outputs():
            raise ProduceError(f"{folder.root}: holds dataset files but no run state; use --overwrite to start over, or choose another --output")
        state = RunState(fingerprint=fp, tally=_new_tally(config))
        return state, False, folder.start(state)
    if state.fingerprint != fp:
        raise ProduceError(f"{folder.root}: was made with another configuration or version ({_describe(state.fingerprint)}); this run is ({_describe(fp)}); use --overwrite to start over, or choose another --output")
    return state, True, ([] if state.complete else folder.start(state))


def _describe(fp: str) -> str:
    import orjson

    d = orjson.loads(fp)
    c = d["config"]
    return f"count={c['count']} seed={c['seed']} categories={','.join(c['categories'])} arch={c['arch']} fast={c['fast']} batch_size={c['batch_size']} warp={d['versions']['warp']} generator={d['versions']['generator']}"


def produce(
    config: ProduceConfig,
    output: str | Path = "data/production",
    *,
    workers: int = 0,
    overwrite: bool = False,
    progress: bool = True,
    on_batch: Callable[[BatchResult], None] | None = None,
) -> ProduceResult:
    """Make (or finish) the dataset of ``config`` in ``output``.  Safe to kill at any time."""
    folder = DatasetFolder(output)
    folder.root.mkdir(parents=True, exist_ok=True)
    try:
        state, resumed, notes = open_run(folder, config, overwrite)
    except DatasetError as exc:
        raise ProduceError(str(exc)) from None
    if state.complete:
        return ProduceResult(folder.root, load_stats(folder), notes, resumed, already_complete=True)

    tally = state.tally
    dedup = _Dedup()
    for split in store.SPLITS:
        for row in folder.iter_rows(split):
            dedup.add(row)

    def full(category: str) -> bool:
        return tally["accepted"][category] >= config.quota(category)

    max_batches = -(-config.count * MAX_SLOTS_PER_ROW // config.batch_size) + 1
    bar = _progress_bar(config, tally, progress)
    executor = make_executor(workers)
    parts = plan_parts(config, workers)
    window = max(1, 2 * executor.workers)
    units: deque[_Unit] = deque()  # submitted, in slot order
    queued: deque[tuple[int, range]] = deque()  # parts of started batches not yet submitted
    inflight: Counter = Counter()  # category -> slots submitted and not yet consumed
    next_batch = state.next_batch
    started = time.perf_counter()
    elapsed_before = tally["elapsed_seconds"]

    def predicted_full(category: str) -> bool:
        # as if every slot in flight will be accepted (nearly all are); a wrong guess is repaired
        return tally["accepted"][category] + inflight[category] >= config.quota(category)

    def submit(batch: int, slots, skip: frozenset) -> Future:
        return executor.submit(run_batch, config, batch, skip, slots)

    def submit_more() -> None:
        nonlocal next_batch
        while len(units) < window:
            if not queued:
                if next_batch >= max_batches:
                    return
                queued.extend((next_batch, r) for r in part_ranges(config, next_batch, parts))
                next_batch += 1
            skip = frozenset(c for c in config.categories if predicted_full(c))
            if len(skip) == len(config.categories):
                return  # what is in flight should finish the run: wait for it
            batch, slots = queued.popleft()
            counts = Counter(c for c in (config.slot(s)[0] for s in slots) if c not in skip)
            inflight.update(counts)
            units.append(_Unit(batch, slots, skip, counts, submit(batch, slots, skip)))

    def result_of(unit: _Unit) -> BatchResult:
        nonlocal executor
        try:
            return unit.future.result()
        except BrokenProcessPool:
            # A worker died (a kernel crashed native code): every future of the pool is lost.
            # Re-run this unit alone, bisecting down to the slot that crashes (that slot is
            # rejected, deterministically); then resubmit the rest to a new pool.
            executor.close(kill=True)
            result = _run_isolated(config, unit.batch, list(unit.slots), unit.skip)
            executor = make_executor(workers)
            for other in units:
                other.future = submit(other.batch, other.slots, other.skip)
            return result

    # what has been consumed of the batch being read, committed when the batch is whole
    batch_parts: list[BatchResult] = []
    batch_rows: dict[str, list[dict]] = {s: [] for s in store.SPLITS}
    batch_rejects: list[dict] = []

    def commit_batch(batch: int) -> None:
        t0 = time.perf_counter()
        result = merge_results(batch, batch_parts)
        state.next_batch = batch + 1
        state.preambles.update(result.preambles)
        tally["elapsed_seconds"] = elapsed_before + time.perf_counter() - started
        folder.commit(state, batch_rows, batch_rejects)
        tally["stage_seconds"]["write"] += time.perf_counter() - t0
        batch_parts.clear()
        batch_rejects.clear()
        for rows in batch_rows.values():
            rows.clear()
        if on_batch is not None:
            on_batch(result)

    try:
        while not all(full(c) for c in config.categories):
            submit_more()
            if not units:
                short = [c for c in config.categories if not full(c)]
                raise ProduceError(f"categories {', '.join(short)} stopped yielding new valid kernels after {max_batches} batches; see {store.REJECTS_FILE} for why")
            unit = units.popleft()
            part = result_of(unit)
            inflight.subtract(unit.counts)
            # Slots skipped on a guess that their category would be full by now, and it is not:
            # run them now, so the result is what running every needed slot gives.
            missing = frozenset(c for c in unit.skip if not full(c))
            if missing:
                repair = _Unit(unit.batch, unit.slots, frozenset(config.categories) - missing, Counter())
                repair.future = submit(repair.batch, repair.slots, repair.skip)
                part = merge_results(unit.batch, [part, result_of(repair)])
            rows_by_split, rejects = _consume(config, part, tally, dedup, full)
            for split, rows in rows_by_split.items():
                batch_rows[split] += rows
            batch_rejects += rejects
            batch_parts.append(part)
            if bar is not None:
                bar.n = sum(tally["accepted"].values())
                bar.set_postfix(rejects=sum(tally["rejects"].values()), dups=sum(tally["duplicates"].values()), refresh=False)
                bar.refresh()
            if unit.slots.stop == config.batch_slots(unit.batch).stop:
                commit_batch(unit.batch)  # whole batches only: the run state counts batches
        if batch_parts:
            # the run ended inside a batch: its other slots would only be skipped as full
            commit_batch(batch_parts[0].batch)
    except BaseException:
        executor.close(kill=True)
        if bar is not None:
            bar.close()
        raise
    executor.close(kill=True)  # whatever is still running was speculative: not needed
    if bar is not None:
        bar.close()
    stats = finalize(folder, config, state)
    return ProduceResult(folder.root, stats, notes, resumed)


@dataclass
class _Unit:
    """A part of a batch in flight: which slots, which categories it skips."""

    batch: int
    slots: range
    skip: frozenset
    counts: Counter  # category -> slots it runs
    future: Future | None = None


def plan_parts(config: ProduceConfig, workers: int) -> int:
    """Parts to cut each batch into: enough units for every worker to stay busy to the end
    of a short run.  It changes how work is scheduled, never the rows (work.py)."""
    if workers <= 1:
        return 1
    batches = -(-config.count // config.batch_size)
    return max(1, min(4, -(-6 * workers // batches), config.batch_size))


def part_ranges(config: ProduceConfig, batch: int, parts: int) -> list[range]:
    slots = config.batch_slots(batch)
    bounds = [slots.start + len(slots) * i // parts for i in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _run_isolated(config: ProduceConfig, batch: int, slots: list[int], skip: frozenset) -> BatchResult:
    """Run ``slots`` in a process of their own; on a crash, halve and retry down to single
    slots, so only a slot that crashes its process alone is rejected."""
    solo = make_executor(1)
    try:
        return solo.submit(run_batch, config, batch, skip, slots).result()
    except BrokenProcessPool:
        pass
    finally:
        solo.close(kill=True)
    live = [s for s in slots if config.slot(s)[0] not in skip]
    if len(live) <= 1:
        return BatchResult(batch, [
            SlotOutcome(s, config.slot(s)[0], reject=reject_record(s, None, config.slot(s)[0], "worker_crash", "the worker process died running this kernel alone"))
            for s in live
        ])  # fmt: skip
    mid = len(live) // 2
    return merge_results(batch, [_run_isolated(config, batch, live[:mid], skip), _run_isolated(config, batch, live[mid:], skip)])


def _consume(config: ProduceConfig, result: BatchResult, tally: dict, dedup: _Dedup, full) -> tuple[dict, list]:
    rows_by_split: dict[str, list[dict]] = {s: [] for s in store.SPLITS}
    rejects: list[dict] = []
    for outcome in result.outcomes:
        if full(outcome.category):
            continue  # not counted: whether it was even run depends on timing
        tally["slots"][outcome.category] += 1
        reject = outcome.reject
        row = outcome.row
        if reject is None and row is not None:
            repeated = dedup.add(row)
            if repeated is None:
                split = assign_split(row["shape_hash"], config.split_ratios)
                rows_by_split[split].append(row)
                _count_row(tally, row, split)
                continue
            tally["duplicates"][repeated] += 1
            reject = reject_record(outcome.slot, None, outcome.category, f"duplicate_{repeated}", f"same {repeated} hash as an earlier pair")
            reject.update(index=row["metadata"]["index"], kernel_name=row["kernel_name"], python_source=row["python_source"])
        tally["rejects"][reject["reason"]] = tally["rejects"].get(reject["reason"], 0) + 1
        rejects.append(reject)
    for stage, seconds in result.stage_seconds.items():
        tally["stage_seconds"][stage] = tally["stage_seconds"].get(stage, 0.0) + seconds
    return rows_by_split, rejects


def _count_row(tally: dict, row: dict, split: str) -> None:
    cat, tier = row["category"], row["difficulty"]
    tally["accepted"][cat] += 1
    tally["by_split"][split] += 1
    tally["by_difficulty"][tier] = tally["by_difficulty"].get(tier, 0) + 1
    per_cat = tally["by_category_difficulty"][cat]
    per_cat[tier] = per_cat.get(tier, 0) + 1
    tally["forward_lines"] += row["metadata"]["forward_lines"]
    tally["backward_lines"] += row["metadata"]["backward_lines"]


def compute_stats(config: ProduceConfig, tally: dict) -> dict:
    total = sum(tally["accepted"].values())
    rejects = Counter(tally["rejects"])
    slots = sum(tally["slots"].values())
    compiled = slots - rejects["generator_error"] - rejects["codegen_error"]
    executed = compiled - rejects["compile_error"]
    passed_exec = executed - sum(rejects[r] for r in EXECUTION_REASONS) - rejects["worker_crash"]
    elapsed = tally["elapsed_seconds"]
    return {
        "total_pairs": total,
        "by_category": dict(tally["accepted"]),
        "by_split": dict(tally["by_split"]),
        "by_difficulty": dict(sorted(tally["by_difficulty"].items())),
        "by_category_difficulty": {c: dict(sorted(d.items())) for c, d in tally["by_category_difficulty"].items()},
        "avg_forward_lines": round(tally["forward_lines"] / total, 2) if total else 0.0,
        "avg_backward_lines": round(tally["backward_lines"] / total, 2) if total else 0.0,
        "kernels_tried": slots,
        "rejects_by_reason": dict(sorted(tally["rejects"].items())),
        "duplicates_dropped": sum(tally["duplicates"].values()),
        "duplicates_by_hash": dict(tally["duplicates"]),
        "compile_pass_rate": None if config.fast else (round((compiled - rejects["compile_error"]) / compiled, 4) if compiled else None),
        "execution_pass_rate": None if config.fast else (round(passed_exec / executed, 4) if executed else None),
        # timing fields: the only values that differ between two identical runs
        "generation_time_seconds": round(elapsed, 3),
        "pairs_per_second": round(total / elapsed, 2) if elapsed else None,
        "stage_seconds": {k: round(v, 3) for k, v in tally["stage_seconds"].items()},
    }


TIMING_STATS = ("generation_time_seconds", "pairs_per_second", "stage_seconds")


def finalize(folder: DatasetFolder, config: ProduceConfig, state: RunState) -> dict:
    """Parquet shards, stats, manifest and dataset card; then mark the run complete."""
    stats = compute_stats(config, state.tally)
    files = []
    split_files: dict[str, list[str]] = {}
    for split in store.SPLITS:
        for rel, rows in folder.write_parquet(split):
            files.append({"path": rel, "split": split, "rows": rows, "xxh3_128": store.file_checksum(folder.path(rel))})
            split_files.setdefault(split, []).append(rel)
        rel = store.jsonl_path(split)
        files.append({"path": rel, "split": split, "rows": stats["by_split"][split], "xxh3_128": store.file_checksum(folder.path(rel))})
    files.append({"path": store.REJECTS_FILE, "split": None, "rows": sum(stats["rejects_by_reason"].values()), "xxh3_128": store.file_checksum(folder.path(store.REJECTS_FILE))})
    manifest = {
        "format": "cudagen-data",
        "schema_version": 1,
        "config": config.to_dict(),
        "versions": versions(),
        "command": command_line(config),
        "preambles": dict(sorted(state.preambles.items())),
        "files": files,
    }
    store.write_json(folder.path("stats.json"), stats)
    store.write_json(folder.path("manifest.json"), manifest)
    from ..publish.card import render_card

    from ..publish.card import split_num_bytes

    card = render_card(manifest, stats, ROW_SCHEMA, split_files, num_bytes=split_num_bytes(folder.root, split_files))
    store.write_text(folder.path("README.md"), card)
    state.complete = True
    folder.save_state(state)
    return stats


def load_stats(folder: DatasetFolder) -> dict:
    import orjson

    p = folder.path("stats.json")
    if not p.exists():
        raise ProduceError(f"{p}: not found; is {folder.root} a finished cudagen dataset?")
    return orjson.loads(p.read_bytes())


def load_config(folder: DatasetFolder) -> ProduceConfig:
    import orjson

    p = folder.path("manifest.json")
    if not p.exists():
        raise ProduceError(f"{p}: not found; is {folder.root} a finished cudagen dataset?")
    return ProduceConfig.from_dict(orjson.loads(p.read_bytes())["config"])


def _progress_bar(config: ProduceConfig, tally: dict, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=config.count, initial=sum(tally["accepted"].values()), unit="pair", desc="produce", dynamic_ncols=True, smoothing=0.1)


def format_summary(stats: dict, output: Path | str) -> str:
    """One screen: what was made, what was rejected and why, how fast."""
    lines = [f"{stats['total_pairs']} pairs in {output}"]
    width = max((len(c) for c in stats["by_category"]), default=8)
    lines.append("  category".ljust(width + 4) + "pairs  " + "  ".join(t[:5].rjust(5) for t in ("basic", "intermediate", "advanced")))
    for cat, n in stats["by_category"].items():
        tiers = stats.get("by_category_difficulty", {}).get(cat, {})
        lines.append(f"  {cat.ljust(width)}  {n:5d}  " + "  ".join(f"{tiers.get(t, 0):5d}" for t in ("basic", "intermediate", "advanced")))
    lines.append("  splits: " + ", ".join(f"{s} {n}" for s, n in stats["by_split"].items()))
    lines.append(f"  lines: forward {stats['avg_forward_lines']}, backward {stats['avg_backward_lines']} (average)")
    rates = []
    if stats.get("compile_pass_rate") is not None:
        rates.append(f"compile {stats['compile_pass_rate']:.1%}")
    if stats.get("execution_pass_rate") is not None:
        rates.append(f"execution {stats['execution_pass_rate']:.1%}")
    lines.append(f"  tried {stats['kernels_tried']} kernels" + (f"; pass rates: {', '.join(rates)}" if rates else " (--fast: no compile or execution)"))
    rejects = stats["rejects_by_reason"]
    if rejects:
        lines.append("  rejects: " + ", ".join(f"{r} {n}" for r, n in rejects.items()))
    if stats.get("pairs_per_second"):
        lines.append(f"  time: {stats['generation_time_seconds']:.1f} s, {stats['pairs_per_second']:.1f} pairs/s")
    return "\n".join(lines)
