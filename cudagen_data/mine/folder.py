"""Write mined rows into a dataset folder as its second configuration, ``real``.

The folder may already hold the synthetic ``default`` configuration (``cudagen
produce``), or nothing yet.  ``real`` gets Parquet shards of its own per split under
``data/real/``, listed in ``manifest.json`` with ``"config": "real"``; its figures go to
``stats.json`` → ``real``; every kernel that was not mined goes to ``rejects_real.jsonl``
with its reason.  The card is rendered again with both configurations.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from ..contracts.manifest import MANIFEST_FILE, SPLITS, FileEntry, Manifest
from ..contracts.reject import REAL_REJECTS_FILE
from ..contracts.row import REAL_ROW_SCHEMA, ROW_SCHEMA, RealRow
from ..dataset import shards, store
from ..dataset.files import atomic_write
from ..dataset.shards import SHARD_ROWS
from ..pipeline.config import versions
from ..publish.card import split_num_bytes
from ..publish.card_real import render_card_with_real
from .rows import kernel_shape_hash

CONFIG = "real"
DATA_DIR = f"data/{CONFIG}"


def check_output(root: Path) -> None:
    """Refuse, before mining, a folder that ``real`` must not be added to: a produce run
    not finished there (its finalize would write a manifest without ``real``), somebody
    else's files (the card would replace their README.md), a dataset of another row schema
    version.  Raises DatasetError or ManifestError (one line naming the folder or file)."""
    root = Path(root)
    folder = store.DatasetFolder(root)
    state = folder.load_state()  # DatasetError if unreadable
    if state is not None and not state.complete:
        raise store.DatasetError(
            f"{root}: holds a cudagen produce run that has not finished; finish it (run its produce command "
            "again), or choose another --output"
        )
    if (root / MANIFEST_FILE).exists():
        Manifest.read(root)  # unreadable, or another row schema version
    elif folder.has_outputs() or (root / REAL_REJECTS_FILE).exists():
        raise store.DatasetError(
            f"{root}: holds files but no cudagen dataset (no {MANIFEST_FILE}); mining would replace its README.md: "
            "choose another --output"
        )


def synthetic_shapes(root: Path) -> set[str]:
    """Kernel-level shape hashes of the folder's synthetic rows (empty if it has none)."""
    folder = store.DatasetFolder(root)
    shapes: set[str] = set()
    for split in SPLITS:
        for row in folder.iter_rows(split):
            try:
                shapes.add(kernel_shape_hash(row.python_source))
            except SyntaxError:
                continue
    return shapes


def write_real(
    root: Path,
    rows_by_split: dict[str, list[RealRow]],
    rejects: list[dict],
    preambles: dict[str, str],
    stats: dict,
    command: str,
    compiler: dict | None = None,
) -> Manifest:
    """Replace the folder's ``real`` configuration with these rows (``MineResult.by_split()``);
    returns the manifest.

    ``compiler``: what the compile check ran (extract/levels.compiler_record, as produce
    records it for the synthetic rows); {} when mining ran without one."""
    root = Path(root)
    data_dir = root / DATA_DIR
    data_dir.mkdir(parents=True, exist_ok=True)
    for old in data_dir.glob("*.parquet"):
        old.unlink()
    files = []
    for split in SPLITS:
        part = [row.to_dict() for row in rows_by_split.get(split, [])]
        if not part:
            continue
        n_shards = -(-len(part) // SHARD_ROWS)
        for shard in range(n_shards):
            rel = shards.final_path(split, shard, n_shards, CONFIG)
            count, checksum = shards.write_parquet(
                shards.in_row_groups(part[shard * SHARD_ROWS : (shard + 1) * SHARD_ROWS]), root / rel, REAL_ROW_SCHEMA
            )
            files.append(FileEntry(rel, split, count, checksum, CONFIG))
    rejects_data = b"".join(orjson.dumps(r) + b"\n" for r in rejects)
    atomic_write(root / REAL_REJECTS_FILE, rejects_data)
    files.append(
        FileEntry(REAL_REJECTS_FILE, None, len(rejects), store.file_checksum(root / REAL_REJECTS_FILE), CONFIG)
    )

    if (root / MANIFEST_FILE).exists():
        manifest = Manifest.read(root)
    else:  # a folder of mined rows only
        manifest = Manifest(config={}, versions=versions(), command="", preambles={})
    manifest.files = [f for f in manifest.files if f.config != CONFIG] + files
    manifest.preambles = dict(sorted({**manifest.preambles, **preambles}.items()))
    manifest.real = {"command": command, "versions": versions(), "compiler": dict(compiler or {})}
    stats_path = root / "stats.json"
    all_stats = orjson.loads(stats_path.read_bytes()) if stats_path.exists() else {}
    all_stats[CONFIG] = stats
    store.write_json(stats_path, all_stats)
    store.write_json(root / MANIFEST_FILE, manifest.to_dict())
    store.write_text(root / "README.md", render_readme(root, manifest, all_stats))
    return manifest


def render_readme(root: Path, manifest: Manifest, all_stats: dict) -> str:
    """The card with both configurations (``real`` only if the folder has no synthetic rows)."""

    def split_files(config: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f in manifest.parquet_files(config):
            out.setdefault(f.split, []).append(f.path)
        return out

    real_files = split_files(CONFIG)
    real_counts = {
        s: sum(f.rows for f in manifest.parquet_files(CONFIG) if f.split == s) for s in SPLITS if real_files.get(s)
    }
    default_files = split_files("default")
    default = None
    if default_files:
        stats = {k: v for k, v in all_stats.items() if k != CONFIG}
        default = {
            "manifest": manifest.to_dict(),
            "stats": stats,
            "schema": ROW_SCHEMA,
            "split_files": default_files,
            "num_bytes": split_num_bytes(root, default_files),
        }
    return render_card_with_real(
        default=default,
        real_split_files=real_files,
        real_counts=real_counts,
        real_schema=REAL_ROW_SCHEMA,
        real_stats=all_stats[CONFIG],
        real_num_bytes=split_num_bytes(root, real_files),
    )
