"""The dataset folder on disk: Parquet shards written as the run goes, JSONL optionally.

Crash safety rests on one rule: a batch is committed by (1) appending its lines to the
append files (JSONL, rejects, the shard spools of shards.py) and fsyncing them, and
writing any shard that filled up, then (2) atomically replacing ``.cudagen/state.json``,
which records each append file's committed size and every finished shard.  On start
every append file is cut back to its committed size, which removes a torn last line and
any half-written batch alike, and files the state does not know are removed, so a run
killed at any moment resumes with nothing lost and nothing twice.

Layout::

    README.md  data/{split}-00000-of-0000N.parquet  jsonl/{split}.jsonl (unless --no-jsonl)
    rejects.jsonl  stats.json  manifest.json  .cudagen/{state.json,spool/,shards/,lock}

Only one process writes a folder at a time: lock.py.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..contracts.manifest import SPLITS
from ..contracts.reject import REJECTS_FILE
from . import shards
from .files import DatasetError, atomic_write, file_checksum, write_json, write_text  # noqa: F401 - the folder's API
from .lock import LOCK_FILE, STATE_DIR

STATE_FILE = f"{STATE_DIR}/state.json"
OUTPUT_NAMES = ("README.md", "data", "jsonl", REJECTS_FILE, "stats.json", "manifest.json", STATE_DIR)


def jsonl_path(split: str) -> str:
    return f"jsonl/{split}.jsonl"


STATE_FORMAT = 2  # 2: rows stream into Parquet shards (shards.py) while the run goes
JSONL_FILES = tuple(jsonl_path(s) for s in SPLITS)


@dataclass
class RunState:
    """What has been committed so far; saved after every batch."""

    fingerprint: str
    format: int = STATE_FORMAT
    next_batch: int = 0
    sizes: dict[str, int] = field(default_factory=dict)  # append file -> committed bytes
    tally: dict = field(default_factory=dict)  # the run's counts: contracts.RunStats.to_json()
    preambles: dict[str, str] = field(default_factory=dict)
    complete: bool = False
    jsonl: bool = True  # also write jsonl/{split}.jsonl
    shard_rows: int = shards.SHARD_ROWS
    shards: dict[str, list[dict]] = field(default_factory=lambda: {s: [] for s in SPLITS})  # finished: rows, xxh3_128
    spool_rows: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SPLITS})  # rows in each open spool

    def append_files(self) -> list[str]:
        return [*(JSONL_FILES if self.jsonl else ()), REJECTS_FILE, *shards.open_spools(self).values()]

    def to_json(self) -> bytes:
        return orjson.dumps(self.__dict__, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)


class DatasetFolder:
    def __init__(self, root: str | os.PathLike, state_file: str = STATE_FILE):
        """``state_file``: where the run state is saved (another configuration's writer,
        such as ``cudagen negatives``, keeps a state of its own)."""
        self.root = Path(root)
        self.state_file = state_file

    def path(self, rel: str) -> Path:
        return self.root / rel

    # ---------------------------------------------------------------- run state

    def load_state(self) -> RunState | None:
        p = self.path(self.state_file)
        if not p.exists():
            return None
        try:
            data = orjson.loads(p.read_bytes())
            state = RunState(**data)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise DatasetError(f"{p}: unreadable run state ({exc}); use --overwrite to start over") from None
        if data.get("format") != STATE_FORMAT:
            raise DatasetError(
                f"{p}: run state of an older cudagen-data (rows not in shards); finish it with that version, or use "
                "--overwrite to start over"
            )
        return state

    def has_outputs(self) -> bool:
        """Whether a run (or mine) wrote dataset files here.  The private folder does not
        count: without a state file it holds only the writer lock, or what a run killed
        before its first save left (start() saves the state before writing anything)."""
        return any(self.path(n).exists() for n in OUTPUT_NAMES if n != STATE_DIR)

    def clear(self) -> None:
        """Remove what a run writes (and nothing else a user may keep in the folder).
        The writer lock stays: its holder is the one clearing (lock.py)."""
        for name in OUTPUT_NAMES:
            p = self.path(name)
            if name == STATE_DIR and p.is_dir():
                for entry in p.iterdir():
                    if entry == self.path(LOCK_FILE):
                        continue
                    if entry.is_dir():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
            elif p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()

    def start(self, state: RunState) -> list[str]:
        """Prepare the folder for (re)starting at ``state``; returns notes on repairs made."""
        self.path(self.state_file).parent.mkdir(parents=True, exist_ok=True)
        self.save_state(state)  # first: a run killed from here on resumes (has_outputs)
        notes = shards.remove_stale(self.root, state)
        for rel in state.append_files():
            p = self.path(rel)
            p.parent.mkdir(parents=True, exist_ok=True)
            committed = state.sizes.get(rel, 0)
            size = p.stat().st_size if p.exists() else 0
            if size < committed:
                raise DatasetError(
                    f"{p}: shorter than its committed size ({size} < {committed} bytes); data was lost outside this "
                    "tool; use --overwrite to start over"
                )
            if size > committed:
                notes.append(f"{rel}: dropped {size - committed} uncommitted bytes (torn or unfinished batch)")
            with open(p, "ab") as f:
                f.truncate(committed)
        return notes

    def save_state(self, state: RunState) -> None:
        atomic_write(self.path(self.state_file), state.to_json())

    def commit(self, state: RunState, rows_by_split: dict[str, list], rejects: list) -> None:
        """Append one batch (rows and rejects: contracts or dicts) and record it as committed
        (see the module docstring)."""
        lines = {s: [orjson.dumps(r) + b"\n" for r in rows] for s, rows in rows_by_split.items()}
        appends, filled = shards.plan_appends(state, lines)
        if state.jsonl:
            appends.update({jsonl_path(s): ls for s, ls in lines.items()})
        appends[REJECTS_FILE] = [orjson.dumps(r) + b"\n" for r in rejects]
        for rel, chunk in appends.items():
            if not chunk:
                continue
            data = b"".join(chunk)
            with open(self.path(rel), "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            state.sizes[rel] = state.sizes.get(rel, 0) + len(data)
        for split, index in filled:
            shards.close_spool(self.root, state, split, index)
        self.save_state(state)
        for split, index in filled:  # in a shard now, and the state says so
            self.path(shards.spool_path(split, index, shards.config_of(state))).unlink()

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

    def iter_committed_hashes(self, state: RunState) -> Iterator[tuple[str, str]]:
        """(python_hash, cuda_hash) of every committed row, from shards and spools."""
        return shards.iter_hashes(self.root, state)

    # ---------------------------------------------------------------- finishing

    def finish_shards(self, state: RunState) -> dict[str, list[dict]]:
        """Last shards written and moved to data/; split -> [{"path", "rows", "xxh3_128"}]."""
        return shards.finish(self.root, state, self.save_state)
