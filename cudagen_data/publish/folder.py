"""Reading a produced dataset folder: its manifest and the Parquet shards it names.

Shared by :mod:`.export` and :mod:`.hub`.  Every expected problem raises
:class:`PublishError` with a one-line message naming the file at fault.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import orjson
import xxhash

from cudagen_data.publish import PublishError
from cudagen_data.publish.splits import SPLITS

MANIFEST = "manifest.json"
STATS = "stats.json"
README = "README.md"
MANIFEST_FORMAT = "cudagen-data"


@dataclass(frozen=True)
class DataFile:
    """One Parquet shard listed in the manifest."""

    path: str  # relative to the folder, POSIX separators (also its path in the Hub repo)
    split: str
    rows: int
    xxh3_128: str | None


def read_json(folder: Path, name: str) -> dict:
    path = Path(folder) / name
    if not path.is_file():
        raise PublishError(f"{name}: missing in the dataset folder")
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise PublishError(f"{name}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise PublishError(f"{name}: expected a JSON object")
    return data


def load_manifest(folder) -> dict:
    folder = Path(folder)
    if not folder.is_dir():
        raise PublishError(f"{folder.name or folder}: not a directory")
    manifest = read_json(folder, MANIFEST)
    if manifest.get("format") != MANIFEST_FORMAT:
        raise PublishError(f"{MANIFEST}: 'format' is {manifest.get('format')!r}, expected {MANIFEST_FORMAT!r}")
    if not isinstance(manifest.get("files"), list):
        raise PublishError(f"{MANIFEST}: 'files' must be a list")
    return manifest


def _safe_relpath(path: object) -> str:
    # Paths in the manifest must stay inside the folder: relative, POSIX, no "..".
    if not isinstance(path, str) or not path:
        raise PublishError(f"{MANIFEST}: file entry with invalid path {path!r}")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or "\\" in path:
        raise PublishError(f"{MANIFEST}: file path {path!r} must be relative to the folder")
    return str(pure)


def parquet_files(folder, manifest: dict | None = None) -> list[DataFile]:
    """The Parquet shards named in the manifest, in split order (train, validation,
    test) and, within a split, in path order (= shard order, the names are zero-padded).

    Checks that each one exists.  Entries for other files (e.g. JSONL) are skipped.
    """
    folder = Path(folder)
    manifest = load_manifest(folder) if manifest is None else manifest
    out = []
    for entry in manifest["files"]:
        if not isinstance(entry, dict):
            raise PublishError(f"{MANIFEST}: file entry {entry!r} is not an object")
        path = _safe_relpath(entry.get("path"))
        if not path.endswith(".parquet"):
            continue
        split = entry.get("split")
        if split not in SPLITS:
            raise PublishError(f"{path}: manifest split {split!r} is not one of {SPLITS}")
        rows = entry.get("rows")
        if not isinstance(rows, int) or rows < 0:
            raise PublishError(f"{path}: manifest row count {rows!r} is not a count")
        if not (folder / path).is_file():
            raise PublishError(f"{path}: listed in {MANIFEST} but missing from the folder")
        out.append(DataFile(path, split, rows, entry.get("xxh3_128")))
    out.sort(key=lambda f: (SPLITS.index(f.split), f.path))
    return out


def file_xxh3_128(path: Path) -> str:
    """xxh3-128 hex digest of a file's bytes (the manifest's checksum convention)."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def verify_data_file(folder: Path, data_file: DataFile, checksum: bool = True) -> None:
    """Raise PublishError unless the shard's row count (and checksum) match the manifest."""
    import pyarrow.parquet as pq

    path = Path(folder) / data_file.path
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise PublishError(f"{data_file.path}: not a readable Parquet file ({type(exc).__name__})") from None
    if rows != data_file.rows:
        raise PublishError(f"{data_file.path}: has {rows} rows, {MANIFEST} says {data_file.rows}")
    if checksum and data_file.xxh3_128 and file_xxh3_128(path) != data_file.xxh3_128:
        raise PublishError(f"{data_file.path}: xxh3_128 checksum differs from {MANIFEST}")


def private_strings(folder) -> list[str]:
    """Strings that must not appear in anything published: the folder's absolute path
    and the home directory (they name a person or machine)."""
    needles = {str(Path(folder).resolve()), os.path.abspath(str(folder))}
    home = os.path.expanduser("~")
    if home and home not in ("/", "~"):
        needles.add(home)
    return sorted(n for n in needles if len(n) > 1)


def hostname() -> str | None:
    """This machine's host name, if it is distinctive enough to search for."""
    name = socket.gethostname().split(".")[0]
    return name if len(name) >= 4 and name.lower() != "localhost" else None
