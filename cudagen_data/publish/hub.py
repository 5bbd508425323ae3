"""Uploading a dataset folder to the Hugging Face Hub.

What is uploaded (paths in the repo are the paths in the folder):

- ``README.md`` (the dataset card), ``manifest.json`` (config, versions, Warp's CUDA
  preamble, per-file checksums: needed to rebuild compilable translation units and to
  reproduce), ``stats.json``;
- ``data/*.parquet``: exactly the shards ``manifest.json`` lists (a shard on disk that the
  manifest does not list is an error: it would be a stale leftover of an earlier run).

What is not:

- ``jsonl/``: the same rows as the Parquet shards; uploading both doubles the repo for
  no gain (``load_dataset`` reads the Parquet through the card's ``configs``);
- ``.cudagen/``: private resumable state;
- ``rejects.jsonl`` unless ``include_rejects=True``: compiler logs can name local paths
  and the file can be large; ``stats.json`` already counts rejects by reason.

Publishing is one commit: every file added, and every file under ``data/`` already in
the repo that the plan does not hold deleted (stale shards of an earlier, larger
upload would otherwise be loaded with the new ones).  Files outside ``data/`` that the
plan does not name are left alone.

Before anything is uploaded, the folder is checked: shard row counts and xxh3-128
checksums against the manifest, and no absolute path of this machine (the folder, the
home directory) in the metadata files or the string columns, nor the host name in the
metadata files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cudagen_data.contracts.manifest import DEFAULT_CONFIG
from cudagen_data.contracts.reject import REAL_REJECTS_FILE, REJECTS_FILE
from cudagen_data.publish import PublishError
from cudagen_data.publish.folder import (
    MANIFEST,
    README,
    STATS,
    hostname,
    load_manifest,
    parquet_files,
    private_strings,
    read_json,
    verify_data_file,
)

DATA_DIR = "data/"
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")

LEFT_OUT = {
    "jsonl/": "same rows as data/*.parquet",
    ".cudagen/": "private resumable state",
    REJECTS_FILE: "compiler logs may name local paths; stats.json counts rejects (include_rejects=True to upload)",
    REAL_REJECTS_FILE: (
        "kernels not mined, one by one; stats.json counts them by reason (include_rejects=True to upload)"
    ),
}


@dataclass(frozen=True)
class UploadFile:
    path: str  # relative to the folder and in the repo, POSIX separators
    size: int


@dataclass(frozen=True)
class UploadPlan:
    """What :func:`publish` uploads, and (after a real publish) what it did."""

    folder: Path
    files: tuple[UploadFile, ...]
    rows: dict = field(default_factory=dict)  # split -> rows
    left_out: tuple[str, ...] = ()  # "path: reason" for files present but not uploaded
    repo_id: str | None = None
    private: bool = False
    dry_run: bool = True
    deleted: tuple[str, ...] = ()  # stale repo files removed by the commit
    commit_url: str | None = None

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def describe(self) -> str:
        """A human-readable summary (what the CLI prints for --dry-run)."""
        where = (
            f"https://huggingface.co/datasets/{self.repo_id} ({'private' if self.private else 'public'} dataset repo)"
            if self.repo_id
            else "a Hugging Face dataset repo"
        )
        verb = "Would upload" if self.dry_run else "Uploaded"
        rows = ", ".join(f"{s} {n:,}" for s, n in self.rows.items())
        lines = [f"{verb} {len(self.files)} files ({_size(self.total_bytes)}; rows: {rows}) to {where}:"]
        width = max(len(f.path) for f in self.files)
        lines += [f"  {f.path:<{width}}  {_size(f.size):>10}" for f in self.files]
        if self.left_out:
            lines.append("Not uploaded:")
            lines += [f"  {item}" for item in self.left_out]
        if self.dry_run:
            lines.append("Files under data/ already in the repo and not listed above are deleted in the same commit.")
        elif self.deleted:
            lines.append("Deleted stale files: " + ", ".join(self.deleted))
        if self.commit_url:
            lines.append(f"Commit: {self.commit_url}")
        return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def validate_repo_id(repo_id: object) -> str:
    """Return ``repo_id`` if it is ``ORG/NAME`` as the Hub accepts it, else raise PublishError."""
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise PublishError(f"repo id {repo_id!r}: expected ORG/NAME, e.g. my-org/cuda-warp-pairs")
    for part in repo_id.split("/"):
        if not _NAME_RE.fullmatch(part) or "--" in part or ".." in part or part.endswith(".git"):
            raise PublishError(
                f"repo id {repo_id!r}: ORG and NAME use letters, digits, '-', '_', '.', at most 96 characters, "
                "no leading/trailing '-' or '.', no '--' or '..'"
            )
    return repo_id


# ----------------------------------------------------------------------------- planning


def _check_text(folder: Path, rel: str, needles: list[str], host: str | None) -> None:
    text = (folder / rel).read_text(encoding="utf-8", errors="replace")
    for needle in needles:
        if needle in text:
            raise PublishError(f"{rel}: contains a local path ({needle!r}); refusing to publish it")
    if host and re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", text, re.IGNORECASE):
        raise PublishError(f"{rel}: contains this machine's host name ({host!r}); refusing to publish it")


def _check_parquet(folder: Path, rel: str, needles: list[str]) -> None:
    # Vectorised substring search over every string (and list<string>) column: Warp
    # writes source-file paths into CUDA comments, so a path can reach the data.

    pf = pq.ParquetFile(folder / rel)
    for batch in pf.iter_batches(batch_size=4096):
        for name, col in zip(batch.schema.names, batch.columns, strict=False):
            if pa.types.is_list(col.type) and pa.types.is_string(col.type.value_type):
                col = pc.list_flatten(col)
            if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                continue
            for needle in needles:
                if pc.any(pc.match_substring(col, needle)).as_py():
                    raise PublishError(
                        f"{rel}: column {name!r} contains a local path ({needle!r}); refusing to publish it"
                    )


def plan_upload(folder, include_rejects: bool = False, verify: bool = True, check_private: bool = True) -> UploadPlan:
    """Check the folder and list the files :func:`publish` would upload.  No network.

    ``verify`` checks shard row counts and checksums against the manifest;
    ``check_private`` refuses folders whose published files name local paths or the
    host name.  Raises PublishError naming the file at fault.
    """
    folder = Path(folder)
    manifest = load_manifest(folder)
    shards = parquet_files(folder, manifest, config=None)  # every configuration (default, real)
    if not shards:
        raise PublishError(f"{MANIFEST}: lists no Parquet files")
    read_json(folder, STATS)  # must exist and parse
    if not (folder / README).is_file():
        raise PublishError(f"{README}: missing in the dataset folder (the writer renders it with card.render_card)")

    listed = {s.path for s in shards}
    for path in sorted((folder / "data").rglob("*.parquet")) if (folder / "data").is_dir() else []:
        rel = path.relative_to(folder).as_posix()
        if rel not in listed:
            raise PublishError(f"{rel}: Parquet file not listed in {MANIFEST} (stale shard of an earlier run?)")

    meta_files = [README, MANIFEST, STATS]
    has_rejects = (folder / REJECTS_FILE).is_file()
    if include_rejects and has_rejects:
        meta_files.append(REJECTS_FILE)
    if include_rejects and (folder / REAL_REJECTS_FILE).is_file():
        meta_files.append(REAL_REJECTS_FILE)

    if verify:
        for shard in shards:
            verify_data_file(folder, shard, checksum=True)
    if check_private:
        needles, host = private_strings(folder), hostname()
        for rel in meta_files:
            _check_text(folder, rel, needles, host)
        for shard in shards:
            _check_parquet(folder, shard.path, needles)

    rows = {}
    for f in shards:  # "train" for the default configuration, "real/train" for the others
        key = f.split if f.config == DEFAULT_CONFIG else f"{f.config}/{f.split}"
        rows[key] = rows.get(key, 0) + f.rows
    files = tuple(UploadFile(rel, (folder / rel).stat().st_size) for rel in meta_files + [s.path for s in shards])
    left_out = tuple(
        f"{name}: {reason}"
        for name, reason in LEFT_OUT.items()
        if (folder / name.rstrip("/")).exists() and not (name in (REJECTS_FILE, REAL_REJECTS_FILE) and include_rejects)
    )
    return UploadPlan(folder=folder, files=files, rows=rows, left_out=left_out)


def build_operations(plan: UploadPlan, existing_files) -> list:
    """The commit's operations: add every planned file; delete files under ``data/`` in
    the repo (``existing_files``) that the plan does not hold.  Pure: no network."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    planned = set(plan.paths)
    ops: list = [CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=str(plan.folder / f.path)) for f in plan.files]
    stale = sorted(p for p in existing_files if p.startswith(DATA_DIR) and p not in planned)
    ops += [CommitOperationDelete(path_in_repo=p) for p in stale]
    return ops


def publish(
    folder,
    repo_id: str,
    private: bool = False,
    dry_run: bool = False,
    token: str | None = None,
    *,
    include_rejects: bool = False,
    api=None,
) -> UploadPlan:
    """Upload the folder to the dataset repo ``repo_id`` (ORG/NAME) in one commit.

    Creates the repo if needed (``private`` applies to a new repo).  ``token`` defaults to
    huggingface_hub's usual sources (``HF_TOKEN``, ``huggingface-cli login``).  With
    ``dry_run`` nothing touches the network: the plan is returned (``plan.describe()``
    says what would be uploaded and where).  ``api`` replaces ``HfApi(token=token)``
    (tests).  Raises PublishError for a bad repo id or folder.
    """
    validate_repo_id(repo_id)
    plan = replace(plan_upload(folder, include_rejects=include_rejects), repo_id=repo_id, private=private)
    if dry_run:
        return plan

    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    existing = api.list_repo_files(repo_id, repo_type="dataset")
    operations = build_operations(plan, existing)
    total = sum(plan.rows.values())
    info = api.create_commit(
        repo_id,
        operations=operations,
        commit_message=f"Upload {total:,} rows ({len(plan.files)} files) with cudagen-data",
        repo_type="dataset",
    )
    deleted = tuple(op.path_in_repo for op in operations if type(op).__name__ == "CommitOperationDelete")
    return replace(plan, dry_run=False, deleted=deleted, commit_url=getattr(info, "commit_url", None))
