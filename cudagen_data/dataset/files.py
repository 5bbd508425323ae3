"""Durable file operations of a dataset folder: atomic replace, fsync, checksums.

Kept apart from store.py so that the shard writer (shards.py) and the folder (store.py)
both build on them without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import xxhash


class DatasetError(Exception):
    """An expected problem with a dataset folder (message names the file)."""


def file_checksum(path: Path) -> str:
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` or what it held before, never a part of it.  A failed write
    (a full disk) raises OSError naming ``path`` and leaves no temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise unwritten(exc, path, tmp) from None
    atomic_replace(tmp, path)


def atomic_replace(tmp: Path, path: Path) -> None:
    """Make the finished file ``tmp`` durable, then put it in place of ``path``."""
    try:
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise unwritten(exc, path, tmp) from None
    fsync_dir(path.parent)


def unwritten(exc: OSError, path: Path, tmp: Path | None = None) -> OSError:
    """``exc`` (a write that failed: full disk, quota, file-size limit) as an OSError naming
    ``path`` with the system's words for its errno (pyarrow's name no file and wrap the
    words); the half-written ``tmp`` is removed."""
    if tmp is not None:
        tmp.unlink(missing_ok=True)
    if exc.errno is None:
        exc.filename = exc.filename or str(path)
        return exc
    return OSError(exc.errno, os.strerror(exc.errno), str(path))


def fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json(path: Path, obj) -> None:
    atomic_write(path, orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")


def write_text(path: Path, text: str) -> None:
    atomic_write(path, text.encode())
