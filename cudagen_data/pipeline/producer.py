"""The producer: runs batches through the worker pool and keeps exactly N distinct pairs.

Results are consumed strictly in batch order, slot by slot, so which pairs are kept
(the earlier slot wins a duplicate; a category stops at its quota) never depends on
worker timing.  Slots of a category that is already full are neither counted nor kept,
which is also why the scheduler may skip them without changing the result.
"""

from __future__ import annotations

import errno
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..contracts.manifest import SPLITS
from ..contracts.reject import Reject
from ..contracts.row import Row
from ..contracts.stats import RunStats
from ..dataset import store
from ..dataset.lock import writer_lock
from ..dataset.store import DatasetError, DatasetFolder, RunState
from ..extract.frontend import NvrtcUnavailable
from ..extract.levels import compiler_record
from ..publish.splits import assign_split
from ..stages import DedupStage
from .config import ProduceConfig, ProduceError, fingerprint
from .finalize import finalize, load_stats
from .pool import WorkersCannotStart
from .scheduler import Scheduler
from .work import BatchResult, merge_results

# What to do when the workers cannot start: the usual cause is a script that calls produce()
# at its top level, which every spawned worker imports again.
START_HINT = (
    "called from a script? every worker process imports it again: put the call under "
    '`if __name__ == "__main__":`; otherwise run with --workers 0 to see the error in this process'
)
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)


@dataclass
class ProduceResult:
    output: Path
    stats: dict
    notes: list[str]
    resumed: bool
    already_complete: bool = False
    tasks_by_node: dict[str, int] = field(default_factory=dict)  # Ray: parts of batches each node ran


def open_run(folder: DatasetFolder, config: ProduceConfig, overwrite: bool) -> tuple[RunState, bool, list[str]]:
    """The state to continue from: (state, resumed, notes).  Refuses a foreign folder."""
    fp = fingerprint(config).decode()
    if overwrite:
        folder.clear()
    state = folder.load_state()
    if state is None:
        if folder.has_outputs():
            raise ProduceError(
                f"{folder.root}: holds dataset files but no run state; use --overwrite to start over, or choose "
                "another --output"
            )
        state = RunState(
            fingerprint=fp,
            tally=RunStats.new(config.categories, SPLITS).to_json(),
            jsonl=config.jsonl,
            shard_rows=config.shard_rows,
        )
        return state, False, folder.start(state)
    if state.fingerprint != fp:
        raise ProduceError(
            f"{folder.root}: was made with another configuration or version ({_describe(state.fingerprint)}); this "
            f"run is ({_describe(fp)}); use --overwrite to start over, or choose another --output"
        )
    try:
        RunStats.from_json(state.tally)
    except (KeyError, TypeError):
        raise ProduceError(
            f"{folder.root}: its run state was written by an older cudagen-data (no stage counters); use --overwrite "
            "to start over"
        ) from None
    return state, True, ([] if state.complete else folder.start(state))


def check_compiler(config: ProduceConfig) -> None:
    """Fail in one line, before any work, if the compile check cannot run (a missing or
    mismatched standalone NVRTC for ``--compile frontend``)."""

    try:
        compiler_record(config.arch, config.compile_level)
    except NvrtcUnavailable as exc:
        raise ProduceError(str(exc)) from None


def _describe(fp: str) -> str:
    d = orjson.loads(fp)
    c = d["config"]
    return (
        f"count={c['count']} seed={c['seed']} categories={','.join(c['categories'])} arch={c['arch']} "
        f"compile={c.get('compile_level', 'ptx')} fast={c['fast']} batch_size={c['batch_size']} "
        f"jsonl={c.get('jsonl', True)} shard_rows={c.get('shard_rows')} "
        f"warp={d['versions']['warp']} generator={d['versions']['generator']}"
    )


class BatchWriter:
    """What has been consumed of the batch being read, committed when the batch is whole."""

    def __init__(self, folder: DatasetFolder, state: RunState, stats: RunStats, on_batch):
        self.folder, self.state, self.stats, self.on_batch = folder, state, stats, on_batch
        self.parts: list[BatchResult] = []
        self.rows: dict[str, list[Row]] = {s: [] for s in SPLITS}
        self.rejects: list[Reject] = []

    def add(self, part: BatchResult, rows_by_split: dict[str, list[Row]], rejects: list[Reject]) -> None:
        self.parts.append(part)
        for split, rows in rows_by_split.items():
            self.rows[split] += rows
        self.rejects += rejects

    def commit(self, batch: int, elapsed: float) -> None:
        t0 = time.perf_counter()
        result = merge_results(batch, self.parts)
        self.state.next_batch = batch + 1
        self.state.preambles.update(result.preambles)
        self.stats.elapsed_seconds = elapsed
        self.state.tally = self.stats.to_json()
        self.folder.commit(self.state, self.rows, self.rejects)
        self.stats.stage_seconds["write"] += time.perf_counter() - t0
        self.state.tally = self.stats.to_json()
        self.parts, self.rejects = [], []
        self.rows = {s: [] for s in SPLITS}
        if self.on_batch is not None:
            self.on_batch(result)


def produce(
    config: ProduceConfig,
    output: str | Path = "data/production",
    *,
    workers: int = 0,
    overwrite: bool = False,
    progress: bool = True,
    on_batch: Callable[[BatchResult], None] | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> ProduceResult:
    """Make (or finish) the dataset of ``config`` in ``output``.  Safe to kill at any time.

    ``executor`` is "local" (``workers`` processes on this machine; 0: in this process) or
    "ray" (Ray tasks on the cluster at ``ray_address``, or on a private local Ray with
    ``workers`` CPUs when None).  Both give the same rows.  The process holds the
    folder's writer lock throughout (dataset/lock.py): a second writer fails at once."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):  # a worker importing the calling script
        raise ProduceError(f"produce() ran while a worker process started ({START_HINT})")
    if not config.fast:
        check_compiler(config)
    folder = DatasetFolder(output)
    try:
        with writer_lock(folder.root):
            return _produce_locked(config, folder, workers, overwrite, progress, on_batch, executor, ray_address)
    except DatasetError as exc:
        raise ProduceError(str(exc)) from None
    except WorkersCannotStart as exc:
        raise ProduceError(f"{exc}; {START_HINT}") from None
    except OSError as exc:  # a full disk, a quota, a file-size limit, a folder made read-only
        if exc.errno not in WRITE_ERRNOS:
            raise
        raise ProduceError(
            f"{exc.filename or folder.root}: cannot write ({exc.strerror}); what was committed is kept: "
            "make room (or fix permissions) and run the same command again to resume"
        ) from None


def _produce_locked(
    config: ProduceConfig,
    folder: DatasetFolder,
    workers: int,
    overwrite: bool,
    progress: bool,
    on_batch: Callable[[BatchResult], None] | None,
    executor: str,
    ray_address: str | None,
) -> ProduceResult:
    try:
        state, resumed, notes = open_run(folder, config, overwrite)
    except DatasetError as exc:
        raise ProduceError(str(exc)) from None
    if state.complete:
        return ProduceResult(folder.root, load_stats(folder), notes, resumed, already_complete=True)

    stats = RunStats.from_json(state.tally)
    dedup = DedupStage(stats.stages["dedup"])
    for python_hash, cuda_hash in folder.iter_committed_hashes(state):
        dedup.remember(python_hash, cuda_hash)

    scheduler = Scheduler(config, workers, state.next_batch, lambda c: stats.accepted[c], executor, ray_address)
    writer = BatchWriter(folder, state, stats, on_batch)
    bar = _progress_bar(config, stats, progress)
    started, elapsed_before = time.perf_counter(), stats.elapsed_seconds
    try:
        while not all(scheduler.full(c) for c in config.categories):
            got = scheduler.next_part()
            if got is None:
                short = [c for c in config.categories if not scheduler.full(c)]
                raise ProduceError(
                    f"categories {', '.join(short)} stopped yielding new valid kernels after {scheduler.max_batches} "
                    f"batches; see {store.REJECTS_FILE} for why"
                )
            unit, part = got
            rows_by_split, rejects = consume(config, part, stats, dedup, scheduler.full)
            writer.add(part, rows_by_split, rejects)
            if bar is not None:
                bar.n = sum(stats.accepted.values())
                bar.set_postfix(
                    rejects=sum(stats.rejects_by_reason().values()),
                    dups=stats.stages["dedup"].entered - stats.stages["dedup"].kept,
                    refresh=False,
                )
                bar.refresh()
            if unit.slots.stop == config.batch_slots(unit.batch).stop:
                writer.commit(unit.batch, elapsed_before + time.perf_counter() - started)  # whole batches only
        if writer.parts:
            # the run ended inside a batch: its other slots would only be skipped as full
            writer.commit(writer.parts[0].batch, elapsed_before + time.perf_counter() - started)
    finally:
        scheduler.close()
        if bar is not None:
            bar.close()
    tasks_by_node = dict(getattr(scheduler.executor, "tasks_by_node", {}))
    return ProduceResult(folder.root, finalize(folder, config, state), notes, resumed, tasks_by_node=tasks_by_node)


def consume(
    config: ProduceConfig, result: BatchResult, stats: RunStats, dedup: DedupStage, full
) -> tuple[dict[str, list[Row]], list[Reject]]:
    """Count and sort one part's outcomes, in slot order: rows by split, and rejects."""
    rows_by_split: dict[str, list[Row]] = {s: [] for s in SPLITS}
    rejects: list[Reject] = []
    for outcome in result.outcomes:
        if full(outcome.category):
            continue  # not counted: whether it was even run depends on timing
        reject, row = outcome.reject, outcome.row
        stats.count_slot(outcome.category, outcome.path, reject.reason if reject is not None else None)
        if reject is None and row is not None:
            reject = dedup.check(row, outcome.slot)
            if reject is None:
                split = assign_split(row.shape_hash, config.split_ratios)
                rows_by_split[split].append(row)
                stats.count_row(
                    row.category,
                    row.difficulty,
                    split,
                    row.metadata.forward_lines,
                    row.metadata.backward_lines,
                    row.gradient_check.status,
                    row.resources,
                    sizes=outcome.sizes,
                    fixed_size=row.size_note.startswith("fixed size"),
                    unused_args=bool(row.unused_args),
                )
                continue
        rejects.append(reject)
    stats.add_seconds(result.stage_seconds)
    return rows_by_split, rejects


def _progress_bar(config: ProduceConfig, stats: RunStats, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(
        total=config.count,
        initial=sum(stats.accepted.values()),
        unit="pair",
        desc="produce",
        dynamic_ncols=True,
        smoothing=0.1,
    )
