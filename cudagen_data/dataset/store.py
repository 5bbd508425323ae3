"""The dataset folder on disk: append-only JSONL while producing, Parquet when done.

Crash safety rests on one rule: a batch is committed by (1) appending its lines to the
JSONL files and fsyncing them, then (2) atomically replacing ``.cudagen/state.json``,
which records each file's committed size.  On start every file is cut back to its
committed size, which removes a torn last line and any half-written batch alike, so a
run killed at any moment resumes with nothing lost and nothing twice.

Layout::

    README.md  data/{split}-00000-of-0000N.parquet  jsonl/{split}.jsonl
    rejects.jsonl  stats.json  manifest.json  .cudagen/state.json
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..contracts.manifest import SPLITS
from ..contracts.row import ROW_SCHEMA

STATE_DIR = ".cudagen"
STATE_FILE = f"{STATE_DIR}/state.json"
REJECTS_FILE = "rejects.jsonl"
OUTPUT_NAMES = ("README.md", "data", "jsonl", REJECTS_FILE, "stats.json", "manifest.json", STATE_DIR)
SHARD_ROWS = 50_000  # rows per Parquet file
ROW_GROUP_ROWS = 500  # small row groups keep the Hub's dataset viewer responsive


class DatasetError(Exception):
    """An expected problem with a dataset folder (message names the file)."""


def jsonl_path(split: str) -> str:
    return f"jsonl/{split}.jsonl"


APPEND_FILES = tuple(jsonl_path(s) for s in SPLITS) + (REJECTS_FILE,)


@dataclass
class RunState:
    """What has been committed so far; saved after every batch."""

    fingerprint: str
    next_batch: int = 0
    sizes: dict[str, int] = field(default_factory=lambda: {p: 0 for p in APPEND_FILES})
    tally: dict = field(default_factory=dict)  # the run's counts: contracts.RunStats.to_json()
    preambles: dict[str, str] = field(default_factory=dict)
    complete: bool = False

    def to_json(self) -> bytes:
        return orjson.dumps(self.__dict__, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)


class DatasetFolder:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, rel: str) -> Path:
        return self.root / rel

    # ---------------------------------------------------------------- run state

    def load_state(self) -> RunState | None:
        p = self.path(STATE_FILE)
        if not p.exists():
            return None
        try:
            return RunState(**orjson.loads(p.read_bytes()))
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise DatasetError(f"{p}: unreadable run state ({exc}); use --overwrite to start over") from None

    def has_outputs(self) -> bool:
        return any(self.path(n).exists() for n in OUTPUT_NAMES)

    def clear(self) -> None:
        """Remove what a run writes (and nothing else a user may keep in the folder)."""
        for name in OUTPUT_NAMES:
            p = self.path(name)
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()

    def start(self, state: RunState) -> list[str]:
        """Prepare the folder for (re)starting at ``state``; returns notes on repairs made."""
        notes = []
        for rel in APPEND_FILES:
            p = self.path(rel)
            p.parent.mkdir(parents=True, exist_ok=True)
            committed = state.sizes.get(rel, 0)
            size = p.stat().st_size if p.exists() else 0
            if size < committed:
                raise DatasetError(f"{p}: shorter than its committed size ({size} < {committed} bytes); data was lost outside this tool; use --overwrite to start over")
            if size > committed:
                notes.append(f"{rel}: dropped {size - committed} uncommitted bytes (torn or unfinished batch)")
            with open(p, "ab") as f:
                f.truncate(committed)
        self.path(STATE_DIR).mkdir(exist_ok=True)
        self.save_state(state)
        return notes

    def save_state(self, state: RunState) -> None:
        _atomic_write(self.path(STATE_FILE), state.to_json())

    def commit(self, state: RunState, rows_by_split: dict[str, list], rejects: list) -> None:
        """Append one batch (rows and rejects: contracts or dicts) and record it as committed."""
        chunks = {jsonl_path(s): rows for s, rows in rows_by_split.items()}
        chunks[REJECTS_FILE] = rejects
        for rel, records in chunks.items():
            if not records:
                continue
            data = b"".join(orjson.dumps(r) + b"\n" for r in records)
            with open(self.path(rel), "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            state.sizes[rel] = state.sizes.get(rel, 0) + len(data)
        self.save_state(state)

    # ---------------------------------------------------------------- reading

    def iter_jsonl(self, rel: str) -> Iterator[dict]:
        p = self.path(rel)
        if not p.exists():
            return
        with open(p, "rb") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    yield orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise DatasetError(f"{p}:{lineno}: not a JSON line") from None

    def iter_rows(self, split: str) -> Iterator[dict]:
        return self.iter_jsonl(jsonl_path(split))

    # ---------------------------------------------------------------- finishing

    def write_parquet(self, split: str, shard_rows: int = SHARD_ROWS) -> list[tuple[str, int]]:
        """Write ``split``'s JSONL as Parquet shards; returns [(relative path, rows)]."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        source = self.path(jsonl_path(split))
        total = sum(1 for _ in open(source, "rb")) if source.exists() else 0
        n_shards = -(-total // shard_rows)  # an empty split gets no file: loaders reject empty splits
        data_dir = self.path("data")
        data_dir.mkdir(exist_ok=True)
        for old in data_dir.glob(f"{split}-*.parquet"):
            old.unlink()
        written = []
        rows = self.iter_rows(split)
        for shard in range(n_shards):
            rel = f"data/{split}-{shard:05d}-of-{n_shards:05d}.parquet"
            tmp = self.path(rel + ".tmp")
            count = 0
            with pq.ParquetWriter(tmp, ROW_SCHEMA, compression="zstd") as writer:
                while count < shard_rows:
                    chunk = [r for _, r in zip(range(min(ROW_GROUP_ROWS, shard_rows - count)), rows)]
                    if not chunk:
                        break
                    writer.write_table(pa.Table.from_pylist(chunk, schema=ROW_SCHEMA), row_group_size=ROW_GROUP_ROWS)
                    count += len(chunk)
            os.replace(tmp, self.path(rel))
            written.append((rel, count))
        return written


def file_checksum(path: Path) -> str:
    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json(path: Path, obj) -> None:
    _atomic_write(path, orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")


def write_text(path: Path, text: str) -> None:
    _atomic_write(path, text.encode())
