"""``cudagen eval``: read predictions and a dataset split, score, report.

Every prediction line is checked before anything is scored, so bad input costs nothing
and writes nothing: ``EvalInputError`` carries one line naming the file, line and field.
"""

from __future__ import annotations

import importlib.metadata
import platform
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from .. import __version__
from ..contracts import Manifest, ManifestError, Row
from ..dataset.read import NotARow, read_rows_from
from ..dataset.store import DatasetError, write_json
from ..gpu.recheck import GpuUnavailable, describe_device
from .reference import DEFAULT_FRESH_SETS
from .report import EvalReport, Result
from .score import Candidate, RowProblem, Scorer


class EvalInputError(Exception):
    """Bad predictions or dataset (one line naming the file and line)."""


def load_split(dataset: Path, split: str) -> tuple[dict[str, Row], dict[str, str]]:
    """(rows by id, preambles) of one split of a dataset folder; or every row of one
    .jsonl/.parquet file (preambles then come from a manifest above it, if any)."""
    preambles: dict[str, str] = {}
    if dataset.is_dir():
        try:
            manifest = Manifest.read(dataset)
        except ManifestError as exc:
            raise EvalInputError(f"--dataset {dataset}: {exc}") from None
        preambles = manifest.preambles
        files = [dataset / f.path for f in manifest.parquet_files() if f.split == split]
        if not files:
            splits = sorted({f.split for f in manifest.files if f.split})
            raise EvalInputError(
                f"--split {split}: {dataset} has no such split (it has: {', '.join(splits) or 'none'})"
            )
        for f in files:
            if not f.exists():
                raise EvalInputError(f"{f}: listed in the manifest but missing")
    elif dataset.is_file():
        files = [dataset]
        above = next((p for p in dataset.parents if (p / "manifest.json").exists()), None)
        if above is not None:
            try:
                preambles = Manifest.read(above).preambles
            except ManifestError:
                preambles = {}  # not ours: preambles are regenerated from the rows' sources
    else:
        raise EvalInputError(f"--dataset {dataset}: no such file or folder")
    rows = {}
    for f in files:
        for where, row in read_rows_from(f):
            if isinstance(row, NotARow):
                raise EvalInputError(f"{where}: {row.problem}")
            rows[str(row.id)] = row
    return rows, preambles


def read_predictions(path: Path, rows: dict[str, Row], split: str) -> Iterator[tuple[int, Candidate]]:
    """(line, candidate) for every prediction; EvalInputError on the first bad line."""
    if not path.is_file():
        raise EvalInputError(f"{path}: no such predictions file")
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path.name}:{n}"
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise EvalInputError(f"{where}: not a JSON line") from None
            if not isinstance(obj, dict):
                raise EvalInputError(f"{where}: expected a JSON object with id and cuda_forward")
            rid, fwd, bwd = obj.get("id"), obj.get("cuda_forward"), obj.get("cuda_backward")
            if not isinstance(rid, str) or not rid:
                raise EvalInputError(f"{where}: missing or non-string 'id'")
            if not isinstance(fwd, str):
                raise EvalInputError(f"{where}: missing or non-string 'cuda_forward' (id {rid})")
            if bwd is not None and not isinstance(bwd, str):
                raise EvalInputError(f"{where}: 'cuda_backward' must be a string or absent (id {rid})")
            if rid not in rows:
                raise EvalInputError(f"{where}: id {rid} is not in the {split} split ({len(rows)} rows)")
            yield n, Candidate(rid, fwd, bwd or None)


def evaluate(
    predictions: str | Path,
    dataset: str | Path,
    *,
    split: str = "test",
    device: str = "cpu",
    seed: int | None = None,
    workers: int | None = None,
    report_path: str | Path | None = None,
    fresh_sets: int = DEFAULT_FRESH_SETS,
    timing: bool = False,
) -> EvalReport:
    """Score every prediction; write the JSON report if asked.  Raises EvalInputError.
    ``timing`` (a GPU): every candidate that passes is timed against the row's own kernel."""
    if timing and not device.startswith("cuda"):
        raise EvalInputError(f"--timing needs a GPU: --device {device} (use --device cuda:N)")
    started = time.perf_counter()
    dataset, predictions = Path(dataset), Path(predictions)
    try:
        rows, preambles = load_split(dataset, split)
    except DatasetError as exc:
        raise EvalInputError(str(exc)) from None
    env = _environment(device)
    cands = list(read_predictions(predictions, rows, split))
    with Scorer(device, workers=workers, seed=seed, fresh_sets=fresh_sets, timing=timing) as scorer:
        try:
            scores = scorer.score_many([(rows[c.row_id], c) for _, c in cands], preambles)
        except RowProblem as exc:
            raise EvalInputError(f"--dataset {dataset}: {exc}") from None
        info = scorer.describe()
    report = EvalReport(dataset.name, split, info, env)
    for (line, c), sc in zip(cands, scores, strict=False):
        row = rows[c.row_id]
        report.results.append(Result(line, c.row_id, str(row.category), str(row.difficulty), sc))
    report.seconds = time.perf_counter() - started
    if report_path is not None:
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        write_json(Path(report_path), orjson.loads(report.to_json()))
    return report


def _environment(device: str) -> dict:
    if device != "cpu" and not device.startswith("cuda"):
        raise EvalInputError(f"--device {device}: use cpu or cuda:N")
    env = {"cudagen_data": __version__, "python": platform.python_version()}
    for dist in ("warp-lang", "nvidia-cuda-nvrtc", "numpy"):
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist] = None
    if device.startswith("cuda"):
        try:
            env.update(describe_device(device))
        except GpuUnavailable as exc:
            raise EvalInputError(f"--device {device}: {exc}") from None
    return env
