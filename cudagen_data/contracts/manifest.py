"""manifest.json: what a finished dataset folder holds, and the one parser of it.

Written by :mod:`cudagen_data.pipeline.finalize`; read by publishing, ``cudagen validate``,
``cudagen gpu-validate`` and the producer (to report a finished run).  Every problem
raises :class:`ManifestError` with one line naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import orjson

from .row import SCHEMA_VERSION

SPLITS = ("train", "validation", "test")
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "cudagen-data"


class ManifestError(Exception):
    """A missing or malformed manifest (message: one line, names the file)."""


DEFAULT_CONFIG = "default"  # the synthetic rows (cudagen produce)
CONFIGS = (DEFAULT_CONFIG, "real")  # "real": kernels mined from real programs (cudagen mine)
# every configuration a folder may hold: the row configurations, and "negatives" (cudagen
# negatives: wrong kernels made from both, contracts/negative.py)
ALL_CONFIGS = (*CONFIGS, "negatives")


@dataclass
class FileEntry:
    """One file of the folder: a Parquet shard, a split's JSONL, or a rejects file (split None)."""

    path: str  # relative to the folder, POSIX separators (also its path in the Hub repo)
    split: str | None
    rows: int
    xxh3_128: str | None
    config: str = DEFAULT_CONFIG  # the dataset configuration the file belongs to

    def to_dict(self) -> dict:
        out = {"path": self.path, "split": self.split, "rows": self.rows, "xxh3_128": self.xxh3_128}
        if self.config != DEFAULT_CONFIG:  # written only where needed: default-only folders keep their bytes
            out["config"] = self.config
        return out

    @property
    def is_parquet(self) -> bool:
        return self.path.endswith(".parquet")


@dataclass
class Manifest:
    config: dict
    versions: dict
    command: str
    preambles: dict[str, str]
    files: list[FileEntry] = field(default_factory=list)
    compiler: dict = field(default_factory=dict)  # extract/levels.compiler_record; {} with --fast
    format: str = MANIFEST_FORMAT
    schema_version: int = SCHEMA_VERSION
    real: dict | None = None  # the "real" configuration's command and versions (cudagen mine)
    negatives: dict | None = None  # the "negatives" configuration's command and versions (cudagen negatives)

    def to_dict(self) -> dict:
        """Key order as written since schema version 1."""
        return (
            {
                "format": self.format,
                "schema_version": self.schema_version,
                "config": self.config,
                "versions": self.versions,
                "compiler": self.compiler,
                "command": self.command,
                "preambles": self.preambles,
                "files": [f.to_dict() for f in self.files],
            }
            | ({"real": self.real} if self.real is not None else {})
            | ({"negatives": self.negatives} if self.negatives is not None else {})
        )

    def parquet_files(self, config: str = DEFAULT_CONFIG) -> list[FileEntry]:
        """A configuration's Parquet shards, in split order (train, validation, test), then path order."""
        shards = [f for f in self.files if f.is_parquet and f.config == config]
        return sorted(shards, key=lambda f: (SPLITS.index(f.split), f.path))

    @classmethod
    def from_dict(cls, data: object) -> Manifest:
        if not isinstance(data, dict):
            raise ManifestError(f"{MANIFEST_FILE}: expected a JSON object")
        if data.get("format") != MANIFEST_FORMAT:
            raise ManifestError(f"{MANIFEST_FILE}: 'format' is {data.get('format')!r}, expected {MANIFEST_FORMAT!r}")
        if not isinstance(data.get("files"), list):
            raise ManifestError(f"{MANIFEST_FILE}: 'files' must be a list")
        files = [_file_entry(e) for e in data["files"]]
        preambles = data.get("preambles", {})
        if not isinstance(preambles, dict):
            raise ManifestError(f"{MANIFEST_FILE}: 'preambles' must be an object")
        return cls(
            config=data.get("config") or {},
            versions=data.get("versions") or {},
            command=data.get("command", ""),
            preambles=preambles,
            files=files,
            compiler=data.get("compiler") or {},
            format=data["format"],
            schema_version=data.get("schema_version", SCHEMA_VERSION),
            real=data.get("real"),
            negatives=data.get("negatives"),
        )

    @classmethod
    def read(cls, folder: str | Path) -> Manifest:
        folder = Path(folder)
        if not folder.is_dir():
            raise ManifestError(f"{folder.name or folder}: not a directory")
        path = folder / MANIFEST_FILE
        if not path.is_file():
            raise ManifestError(f"{path}: not found; is {folder} a finished cudagen dataset?")
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ManifestError(f"{MANIFEST_FILE}: not valid JSON ({exc})") from None
        manifest = cls.from_dict(data)
        if isinstance(data, dict) and data.get("schema_version") != SCHEMA_VERSION:
            # its rows have other columns (or columns that mean something else): reading them
            # with this version's schema would fail somewhere deep, or silently mean the wrong thing
            made_by = (data.get("versions") or {}).get("cudagen_data", "unknown")
            raise ManifestError(
                f"{path}: a dataset of row schema version {data.get('schema_version')} (cudagen-data {made_by}); "
                f"this cudagen-data reads version {SCHEMA_VERSION}: make it again with this version, or use that one"
            )
        return manifest


def _file_entry(entry: object) -> FileEntry:
    if not isinstance(entry, dict):
        raise ManifestError(f"{MANIFEST_FILE}: file entry {entry!r} is not an object")
    path = _safe_relpath(entry.get("path"))
    split = entry.get("split")
    config = entry.get("config", DEFAULT_CONFIG)
    if config not in ALL_CONFIGS:
        raise ManifestError(f"{path}: manifest config {config!r} is not one of {ALL_CONFIGS}")
    if path.endswith((".parquet", ".jsonl")) and not path.startswith("rejects") and split not in SPLITS:
        raise ManifestError(f"{path}: manifest split {split!r} is not one of {SPLITS}")
    rows = entry.get("rows")
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise ManifestError(f"{path}: manifest row count {rows!r} is not a count")
    checksum = entry.get("xxh3_128")
    if checksum is not None and not isinstance(checksum, str):
        raise ManifestError(f"{path}: manifest checksum {checksum!r} is not a string")
    return FileEntry(path, split, rows, checksum, config)


def _safe_relpath(path: object) -> str:
    # Paths in the manifest must stay inside the folder: relative, POSIX, no "..".
    if not isinstance(path, str) or not path:
        raise ManifestError(f"{MANIFEST_FILE}: file entry with invalid path {path!r}")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or "\\" in path:
        raise ManifestError(f"{MANIFEST_FILE}: file path {path!r} must be relative to the folder")
    return str(pure)
