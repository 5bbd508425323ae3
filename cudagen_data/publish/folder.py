"""Reading a produced dataset folder: its manifest and the Parquet shards it names.

Shared by :mod:`.export` and :mod:`.hub`.  Every expected problem raises
:class:`PublishError` with a one-line message naming the file at fault.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from cudagen_data.contracts.manifest import DEFAULT_CONFIG, MANIFEST_FILE, FileEntry, Manifest, ManifestError
from cudagen_data.dataset.store import file_checksum as file_xxh3_128  # the manifest's checksum
from cudagen_data.publish import PublishError

MANIFEST = MANIFEST_FILE
STATS = "stats.json"
README = "README.md"

DataFile = FileEntry  # one Parquet shard listed in the manifest


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


def load_manifest(folder) -> Manifest:
    folder = Path(folder)
    if folder.is_dir() and not (folder / MANIFEST).is_file():
        raise PublishError(f"{MANIFEST}: missing in the dataset folder")
    try:
        return Manifest.read(folder)
    except ManifestError as exc:
        raise PublishError(str(exc)) from None


def parquet_files(folder, manifest: Manifest | None = None, config: str | None = DEFAULT_CONFIG) -> list[FileEntry]:
    """A configuration's Parquet shards named in the manifest (every configuration's with
    ``config=None``), in split order (train, validation, test) and, within a split, in
    path order (= shard order, the names are zero-padded).

    Checks that each one exists.  Entries for other files (e.g. JSONL) are skipped.
    """
    folder = Path(folder)
    manifest = load_manifest(folder) if manifest is None else manifest
    configs = sorted({f.config for f in manifest.files}) if config is None else [config]
    shards = [s for c in configs for s in manifest.parquet_files(c)]
    for shard in shards:
        if not (folder / shard.path).is_file():
            raise PublishError(f"{shard.path}: listed in {MANIFEST} but missing from the folder")
    return shards


def verify_data_file(folder: Path, data_file: DataFile, checksum: bool = True) -> None:
    """Raise PublishError unless the shard's row count (and checksum) match the manifest."""
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
