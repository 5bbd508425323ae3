"""Finishing a produced folder: last Parquet shards, stats.json, manifest.json, the card.

The folder is marked complete only after all of them are written (atomically), so a run
killed while finishing finishes again on the next start.
"""

from __future__ import annotations

import orjson

from ..contracts.manifest import SPLITS, FileEntry, Manifest
from ..contracts.row import ROW_SCHEMA
from ..contracts.stats import RunStats
from ..dataset import lengths, store
from ..dataset.store import DatasetFolder, RunState
from ..extract.levels import compiler_record
from ..publish.card import render_card, split_num_bytes
from .config import command_line, versions


def finalize(folder: DatasetFolder, config, state: RunState, *, command: str | None = None) -> dict:
    """Finish the Parquet shards (the last ones, final names: shards.py); write stats,
    manifest and dataset card for ``state``; mark the run complete.

    ``command`` (default: the command that reproduces ``config``) is what the manifest
    records."""

    stats = RunStats.from_json(state.tally).to_stats_json(config.fast)
    files: list[FileEntry] = []
    split_files: dict[str, list[str]] = {}
    shards = folder.finish_shards(state)
    for split in SPLITS:
        for shard in shards.get(split, []):  # checksums taken when each shard was written
            files.append(FileEntry(shard["path"], split, shard["rows"], shard["xxh3_128"]))
            split_files.setdefault(split, []).append(shard["path"])
        if state.jsonl:
            rel = store.jsonl_path(split)
            files.append(FileEntry(rel, split, stats["by_split"][split], store.file_checksum(folder.path(rel))))
    # row lengths per category, from the Parquet just finished (stats.json and the card)
    parquet = [folder.path(rel) for files_of_split in split_files.values() for rel in files_of_split]
    stats["row_length"] = {
        **lengths.parquet_distribution(parquet),
        "max_chars": getattr(config, "max_chars", lengths.DEFAULT_MAX_CHARS),
    }
    rejects = sum(stats["rejects_by_reason"].values())
    files.append(FileEntry(store.REJECTS_FILE, None, rejects, store.file_checksum(folder.path(store.REJECTS_FILE))))
    manifest = Manifest(
        config=config.to_dict(),
        versions=versions(),
        command=command if command is not None else command_line(config),
        preambles=dict(sorted(state.preambles.items())),
        files=files,
        compiler={} if config.fast else compiler_record(config.arch, config.compile_level, config.resources),
    ).to_dict()
    store.write_json(folder.path("stats.json"), stats)
    store.write_json(folder.path("manifest.json"), manifest)
    card = render_card(manifest, stats, ROW_SCHEMA, split_files, num_bytes=split_num_bytes(folder.root, split_files))
    store.write_text(folder.path("README.md"), card)
    state.complete = True
    folder.save_state(state)
    return stats


def load_stats(folder: DatasetFolder) -> dict:
    p = folder.path("stats.json")
    if not p.exists():
        raise store.DatasetError(f"{p}: not found; is {folder.root} a finished cudagen dataset?")
    return orjson.loads(p.read_bytes())
