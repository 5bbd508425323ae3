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
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    atomic_replace(tmp, path)


def atomic_replace(tmp: Path, path: Path) -> None:
    """Make the finished file ``tmp`` durable, then put it in place of ``path``."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


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
