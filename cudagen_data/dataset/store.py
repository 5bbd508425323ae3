"""The dataset folder on disk: Parquet shards written as the run goes, JSONL optionally.

Crash safety rests on one rule: a batch is committed by (1) appending its lines to the
append files (JSONL, rejects, the shard spools of shards.py) and fsyncing them, and
writing any shard that filled up, then (2) atomically replacing ``.cudagen/state.json``,
which records each append file's committed size and every finished shard.  On start
every append file is cut back to its committed size, which removes a torn last line and
any half-written batch alike, and files the state does not know are removed, so a run
killed at any moment resumes with nothing lost and nothing twice.

What the private folder holds is checked before a run resumes from it, so a file damaged
outside this tool (a disk error, a careless edit) stops the run with one line naming it
instead of ending up as wrong rows: the state file carries a checksum of itself, each
append file's committed bytes an xxh3-64 digest (kept up to date batch by batch), and
each finished shard its xxh3-128 checksum.

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
import xxhash

from ..contracts.manifest import SPLITS
from ..contracts.reject import REJECTS_FILE
from ..contracts.row import Row, row_from_dict
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
    digests: dict[str, str] = field(default_factory=dict)  # append file -> xxh3-64 of its committed bytes

    def append_files(self) -> list[str]:
        return [*(JSONL_FILES if self.jsonl else ()), REJECTS_FILE, *shards.open_spools(self).values()]

    def to_json(self) -> bytes:
        return orjson.dumps(
            {**self.__dict__, "check": state_check(self.__dict__)}, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2
        )


def state_check(data: dict) -> str:
    """The checksum a state file carries of the rest of itself."""
    return xxhash.xxh3_64_hexdigest(
        orjson.dumps({k: v for k, v in data.items() if k != "check"}, option=orjson.OPT_SORT_KEYS)
    )


class DatasetFolder:
    def __init__(self, root: str | os.PathLike, state_file: str = STATE_FILE):
        """``state_file``: where the run state is saved (another configuration's writer,
        such as ``cudagen negatives``, keeps a state of its own)."""
        self.root = Path(root)
        self.state_file = state_file
        self._hashers: dict = {}  # append file -> running xxh3-64 of its committed bytes (start() to commit())

    def path(self, rel: str) -> Path:
        return self.root / rel

    # ---------------------------------------------------------------- run state

    def load_state(self) -> RunState | None:
        p = self.path(self.state_file)
        if not p.exists():
            return None
        try:
            data = orjson.loads(p.read_bytes())
            check = data.pop("check", None)  # states written before the check have none
            state = RunState(**data)
        except (orjson.JSONDecodeError, TypeError, AttributeError) as exc:
            raise DatasetError(f"{p}: unreadable run state ({exc}); use --overwrite to start over") from None
        if check is not None and check != state_check(data):
            raise DatasetError(
                f"{p}: the run state does not match its checksum (changed outside this tool); "
                "use --overwrite to start over"
            )
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
        self._check_shards(state)
        self._hashers = {}
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
            self._check_committed(state, rel, committed)
            if size > committed:
                notes.append(f"{rel}: dropped {size - committed} uncommitted bytes (torn or unfinished batch)")
            with open(p, "ab") as f:
                f.truncate(committed)
        return notes

    def _check_committed(self, state, rel: str, committed: int) -> None:
        """Compare an append file's committed bytes with their recorded digest (before
        anything is cut), and keep the running digest for the next commits."""
        digests = getattr(state, "digests", None)
        if digests is None or (committed and rel not in digests):
            return  # a state without digests (another writer's, or an older one): nothing to compare
        hasher = xxhash.xxh3_64()
        if committed:
            with open(self.path(rel), "rb") as f:
                left = committed
                while left:
                    block = f.read(min(left, 1 << 20))
                    hasher.update(block)
                    left -= len(block)
            if hasher.hexdigest() != digests[rel]:
                raise DatasetError(
                    f"{self.path(rel)}: its committed bytes differ from what the run state recorded (changed "
                    "outside this tool); use --overwrite to start over"
                )
        self._hashers[rel] = hasher

    def _check_shards(self, state) -> None:
        """Every finished shard the state records is there, with its recorded checksum."""
        config = shards.config_of(state)
        for split, done in state.shards.items():
            for index, shard in enumerate(done):
                staged = self.path(shards.staged_path(split, index, config))
                path = staged if staged.exists() else self.path(shards.final_path(split, index, len(done), config))
                if not path.exists():
                    raise DatasetError(f"{staged}: a finished shard the run state records is missing; use --overwrite")
                if file_checksum(path) != shard["xxh3_128"]:
                    raise DatasetError(
                        f"{path}: checksum differs from the run state's (changed outside this tool); "
                        "use --overwrite to start over"
                    )

    def _track(self, state, rel: str, data: bytes) -> None:
        digests = getattr(state, "digests", None)
        hasher = self._hashers.get(rel)
        if digests is None:
            return
        if hasher is None:
            if state.sizes[rel] != len(data):  # bytes before this commit that no digest covers
                digests.pop(rel, None)
                return
            hasher = self._hashers[rel] = xxhash.xxh3_64()
        hasher.update(data)
        digests[rel] = hasher.hexdigest()

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
            try:
                with open(self.path(rel), "ab") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:  # a full disk: name the file (the state still says what is committed)
                exc.filename = exc.filename or str(self.path(rel))
                raise
            state.sizes[rel] = state.sizes.get(rel, 0) + len(data)
            self._track(state, rel, data)
        for split, index in filled:
            shards.close_spool(self.root, state, split, index)
            rel = shards.spool_path(split, index, shards.config_of(state))
            self._hashers.pop(rel, None)
            getattr(state, "digests", {}).pop(rel, None)
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

    def iter_rows(self, split: str) -> Iterator[Row]:
        """The split's rows (its JSONL file), each read as the row contract."""
        for lineno, record in enumerate(self.iter_jsonl(jsonl_path(split)), 1):
            try:
                yield row_from_dict(record)
            except (TypeError, KeyError) as exc:
                raise DatasetError(f"{self.path(jsonl_path(split))}:{lineno}: not a dataset row ({exc})") from None

    def iter_committed_hashes(self, state: RunState) -> Iterator[tuple[str, str]]:
        """(python_hash, cuda_hash) of every committed row, from shards and spools."""
        return shards.iter_hashes(self.root, state)

    # ---------------------------------------------------------------- finishing

    def finish_shards(self, state: RunState) -> dict[str, list[dict]]:
        """Last shards written and moved to data/; split -> [{"path", "rows", "xxh3_128"}]."""
        return shards.finish(self.root, state, self.save_state)
