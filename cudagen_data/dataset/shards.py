"""Parquet shards written while a run goes on, so the driver holds no rows and a run's
memory and disk stay flat however long it is.

Each split's accepted rows are appended, batch by batch, to a *spool*
(``.cudagen/spool/{split}-NNNNN.jsonl``), an append file like every other: its committed
size is in the run state and a restart cuts it back to that size (store.py).  When spool
``N`` holds ``shard_rows`` rows, the same commit turns it into the Parquet file
``.cudagen/shards/{split}-NNNNN.parquet`` (temporary name, fsync, rename) and the state save
that ends the commit records the shard (rows, checksum) and moves on to spool ``N + 1``;
only then is spool ``N`` deleted.  A kill at any point leaves either the old state (the new
spool and shard files are stale and removed on restart) or the new one (the old spool is
stale and removed), never half of each.

Shard boundaries fall every ``shard_rows`` rows of a split, whatever the batches, so they
are the same for every executor and every restart.  The total number of shards of a split
is known only at the end: :func:`finish` rolls each last spool into a shard and moves the
shards to Hugging Face's names, ``data/{split}-NNNNN-of-MMMMM.parquet`` (rename only; a
kill during it is finished by the next run).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pyarrow as pa

from .. import defaults
from ..contracts.manifest import SPLITS
from ..contracts.row import ROW_SCHEMA, Row
from .files import DatasetError, atomic_replace, file_checksum, fsync_dir, unwritten

SPOOL_DIR = ".cudagen/spool"
STAGED_DIR = ".cudagen/shards"
SHARD_ROWS = defaults.SHARD_ROWS  # rows per Parquet shard (why this many: defaults.py)
ROW_GROUP_ROWS = 500  # small row groups keep the Hub's dataset viewer responsive


def _splits(state) -> list[str]:
    """The state's splits in their fixed order (train, validation, test): state.json sorts keys."""
    return [s for s in SPLITS if s in state.shards]


DEFAULT_CONFIG = "default"


def config_of(state) -> str:
    """The configuration a run state writes (produce's ``default``; another writer's state
    says its own, e.g. ``negatives``): its shards live in folders of their own."""
    return getattr(state, "config", DEFAULT_CONFIG)


def _dirs(config: str) -> tuple[str, str, str]:
    """(spool folder, staged-shard folder, final folder) of a configuration."""
    if config == DEFAULT_CONFIG:
        return SPOOL_DIR, STAGED_DIR, "data"
    return f".cudagen/{config}/spool", f".cudagen/{config}/shards", f"data/{config}"


def spool_path(split: str, index: int, config: str = DEFAULT_CONFIG) -> str:
    return f"{_dirs(config)[0]}/{split}-{index:05d}.jsonl"


def staged_path(split: str, index: int, config: str = DEFAULT_CONFIG) -> str:
    return f"{_dirs(config)[1]}/{split}-{index:05d}.parquet"


def final_path(split: str, index: int, total: int, config: str = DEFAULT_CONFIG) -> str:
    return f"{_dirs(config)[2]}/{split}-{index:05d}-of-{total:05d}.parquet"


def open_spools(state) -> dict[str, str]:
    """split -> the spool the next rows of that split go to."""
    return {split: spool_path(split, len(state.shards[split]), config_of(state)) for split in _splits(state)}


def plan_appends(state, lines_by_split: dict[str, list[bytes]]) -> tuple[dict[str, list[bytes]], list[tuple[str, int]]]:
    """Spread new row lines over spools, ``shard_rows`` to a spool.  Returns (spool path ->
    lines to append, [(split, index) of spools this fills]) and advances
    ``state.spool_rows``; the caller writes, then calls :func:`close_spool` for each."""
    appends: dict[str, list[bytes]] = {}
    filled: list[tuple[str, int]] = []
    for split, lines in lines_by_split.items():
        index = len(state.shards[split])
        i = 0
        while i < len(lines):
            room = state.shard_rows - state.spool_rows[split]
            take = lines[i : i + room]
            appends.setdefault(spool_path(split, index, config_of(state)), []).extend(take)
            state.spool_rows[split] += len(take)
            i += len(take)
            if state.spool_rows[split] == state.shard_rows:
                filled.append((split, index))
                state.spool_rows[split] = 0
                index += 1
    return appends, filled


def close_spool(root: Path, state, split: str, index: int) -> None:
    """Write spool ``index`` of ``split`` as its Parquet shard and record it in ``state``
    (not saved here: the caller's state save commits it)."""
    rel = spool_path(split, index, config_of(state))
    rows, checksum = write_shard(
        root / rel, root / staged_path(split, index, config_of(state)), getattr(state, "schema", None)
    )
    state.shards[split].append({"rows": rows, "xxh3_128": checksum})
    state.sizes.pop(rel, None)


def write_shard(spool: Path, target: Path, schema=None) -> tuple[int, str]:
    """Parquet from a spool of JSON lines, ROW_GROUP_ROWS rows in memory at a time
    (``schema``: the rows' Arrow schema, the dataset row's by default)."""
    with open(spool, "rb") as lines:
        groups = iter(lambda: [orjson.loads(line) for _, line in zip(range(ROW_GROUP_ROWS), lines, strict=False)], [])
        return write_parquet(groups, target, schema)


def write_parquet(row_groups: Iterable[list[dict]], target: Path, schema=None) -> tuple[int, str]:
    """One Parquet shard, a row group per item of ``row_groups`` (each at most ROW_GROUP_ROWS
    rows; ``schema``: the dataset row's by default), zstd, written under a temporary name then
    renamed; returns (rows, checksum).  Every shard is written here: produce's and negatives'
    (from their spools) and mining's (from its rows, :func:`in_row_groups`)."""
    import pyarrow.parquet as pq

    schema = schema if schema is not None else ROW_SCHEMA
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    count = 0
    tables = (pa.Table.from_pylist(group, schema=schema) for group in row_groups)
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for table in _one_ahead(tables):
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                count += table.num_rows
    except OSError as exc:  # a full disk: pyarrow's error names no file
        raise unwritten(exc, target, tmp) from None
    except BaseException:  # a row group that does not convert, or an interrupt: no half-written file
        tmp.unlink(missing_ok=True)  # beside the shard (data/'s split patterns would match it)
        raise
    atomic_replace(tmp, target)
    return count, file_checksum(target)


def _one_ahead(items: Iterator):
    """``items``, the next one made in a thread while the caller uses this one: the row groups'
    decoding (Python objects, holds the GIL) overlaps the previous group's Parquet encoding and
    compression (pyarrow, releases it); a 10,000-row shard ~13 -> ~10 s.  Same items, same order."""
    done = object()
    with ThreadPoolExecutor(1) as pool:
        ahead = pool.submit(next, items, done)
        while (item := ahead.result()) is not done:
            ahead = pool.submit(next, items, done)
            yield item


def in_row_groups(rows: list[dict]) -> list[list[dict]]:
    """``rows`` cut into row groups of ROW_GROUP_ROWS, for :func:`write_parquet`."""
    return [rows[i : i + ROW_GROUP_ROWS] for i in range(0, len(rows), ROW_GROUP_ROWS)]


def remove_stale(root: Path, state) -> list[str]:
    """Delete spools and staged shards the state does not know (a commit cut short)."""
    notes = []
    config = config_of(state)
    keep_spools = set(open_spools(state).values())
    keep_shards = {staged_path(s, i, config) for s, done in state.shards.items() for i in range(len(done))}
    spool_dir, staged_dir, _ = _dirs(config)
    for folder, keep in ((spool_dir, keep_spools), (staged_dir, keep_shards)):
        d = root / folder
        if not d.is_dir():
            continue
        for entry in sorted(d.iterdir()):
            rel = f"{folder}/{entry.name}"
            if rel not in keep:
                entry.unlink()
                if not entry.name.endswith(".tmp"):
                    notes.append(f"{rel}: removed (not committed, or already in a shard)")
    return notes


def shard_file(root: Path, split: str, index: int, total: int) -> Path:
    """Where shard ``index`` of ``split`` is now: staged while running, under data/ once moved."""
    staged = root / staged_path(split, index)
    return staged if staged.exists() else root / final_path(split, index, total)


def iter_hashes(root: Path, state) -> Iterator[tuple[str, str]]:
    """(python_hash, cuda_hash) of every committed row: what dedup must remember on resume."""
    import pyarrow.parquet as pq

    for split, done in state.shards.items():
        for index in range(len(done)):
            path = shard_file(root, split, index, len(done))
            try:
                pf = pq.ParquetFile(path)
            except (OSError, ValueError) as exc:
                raise DatasetError(
                    f"{path}: committed shard unreadable ({type(exc).__name__}); use --overwrite to start over"
                ) from None
            for batch in pf.iter_batches(columns=["python_hash", "cuda_hash"]):
                yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=False)
        spool = root / spool_path(split, len(done))
        if spool.exists():
            with open(spool, "rb") as f:
                for line in f:
                    row = Row.from_dict(orjson.loads(line))
                    yield row.python_hash, row.cuda_hash


def finish(root: Path, state, save_state) -> dict[str, list[dict]]:
    """Roll every non-empty spool into a last shard, move all shards to their final names,
    and return split -> [{"path", "rows", "xxh3_128"}] in shard order.  Idempotent."""
    for split in _splits(state):
        if state.spool_rows[split]:
            close_spool(root, state, split, len(state.shards[split]))
            state.spool_rows[split] = 0
            save_state(state)
            (root / spool_path(split, len(state.shards[split]) - 1, config_of(state))).unlink()
    for rel in open_spools(state).values():  # empty now: nothing more will be appended
        (root / rel).unlink(missing_ok=True)
    out: dict[str, list[dict]] = {}
    config = config_of(state)
    data = root / _dirs(config)[2]
    data.mkdir(parents=True, exist_ok=True)
    for split in _splits(state):
        done = state.shards[split]
        total = len(done)
        names = set()
        for index, shard in enumerate(done):
            src, dst = root / staged_path(split, index, config), root / final_path(split, index, total, config)
            if src.exists():
                os.replace(src, dst)
            elif not dst.exists():
                raise DatasetError(
                    f"{dst}: committed shard missing (neither staged nor moved); use --overwrite to start over"
                )
            names.add(dst.name)
            out.setdefault(split, []).append(
                {"path": final_path(split, index, total, config), "rows": shard["rows"], "xxh3_128": shard["xxh3_128"]}
            )
        for old in data.glob(f"{split}-*.parquet"):
            if old.name not in names:
                old.unlink()  # an earlier layout of this folder (e.g. before an --overwrite)
    fsync_dir(data)
    return out
