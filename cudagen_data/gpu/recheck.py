"""``gpu_validate``: prove a dataset's recorded CUDA on a real GPU.

For every row: regenerate the CUDA with the installed Warp and compare it byte for
byte; build the kernel for the GPU exactly as recorded (and check the compiled
translation unit holds the recorded text); run it forward and backward on the row's
recorded inputs and output gradients; compare outputs and input gradients with the
recorded CPU results, within tolerances measured from a float64 twin of the kernel
(tolerance.py).  Work is spread over worker processes (pool.py), one chunk of rows at
a time; the verdicts are made here.

Nothing here imports ``datasets`` or ``huggingface_hub``: the GPU machine may lack them.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from .. import __version__, warp_boundary
from ..contracts.manifest import Manifest, ManifestError
from ..contracts.row import Row
from ..dataset.read import NotARow, read_rows_from
from ..dataset.store import DatasetError
from .judge import judge
from .pool import Item, run_inline, run_pool
from .report import GpuReport

MAX_CHUNK = 25  # rows per chunk: one CPU reference build each; small enough to balance 16 workers


class GpuUnavailable(Exception):
    """No usable CUDA device (one line, says what to do)."""


def gpu_validate(
    path: str | Path,
    *,
    limit: int | None = None,
    device: str = "cuda:0",
    jobs: int | None = None,
    report_path: str | Path | None = None,
    progress: bool = False,
) -> GpuReport:
    """Validate a dataset folder (its manifest's Parquet files) or one .jsonl/.parquet file.

    ``device="cpu"`` is a dry run for machines without a GPU (testing): CUDA is compiled
    to PTX and text-checked but not run, and kernels run on Warp's CPU backend.
    ``jobs``: worker processes (default: all CPU cores; 0 runs everything in this process).
    Raises GpuUnavailable (no CUDA device) or DatasetError (no such dataset).
    """
    started = time.perf_counter()
    if not Path(path).exists():
        raise DatasetError(f"{path}: no such file or folder")
    environment = describe_device(device)
    located = list(islice(dataset_rows(Path(path)), limit))
    if jobs is None:
        jobs = os.cpu_count() or 1
    report = GpuReport(str(path), device, environment, jobs=jobs)
    rows = {pos: row for pos, (_, row) in enumerate(located)}
    items: list[Item] = [(pos, row) for pos, row in rows.items() if isinstance(row, Row)]

    device_out, reference_out, crashes = {}, {}, {}
    stage_seconds: dict[str, float] = {}

    bar = _progress(len(items), progress)

    def on_stage(stage: str, outcomes: list) -> None:
        if stage == "device" and bar is not None:
            bar.update(len(outcomes))
        target = device_out if stage == "device" else reference_out
        for o in outcomes:
            target[o.pos] = o
            if stage == "device":
                for k, s in o.seconds.items():
                    stage_seconds[k] = stage_seconds.get(k, 0.0) + s
            else:
                stage_seconds["reference"] = stage_seconds.get("reference", 0.0) + o.seconds

    def on_crash(crashed: list[Item], stage: str, why: str) -> None:
        if stage == "device" and bar is not None:
            bar.update(len(crashed))
        for pos, _ in crashed:
            crashes.setdefault(pos, {})[stage] = why

    try:
        chunks = make_chunks(items, jobs)
        if jobs == 0 or not chunks:
            run_inline(chunks, device, on_stage)
        else:
            report.worker_restarts = run_pool(chunks, device, jobs, on_stage, on_crash)
    finally:
        if bar is not None:
            bar.close()

    warp_version = environment["warp"]
    for pos, row in rows.items():
        report.rows.append(
            judge(pos, row, device_out.get(pos), reference_out.get(pos), crashes.get(pos, {}), warp_version)
        )
    report.stage_seconds = stage_seconds
    report.seconds = time.perf_counter() - started
    if report_path is not None:
        report.write_json(report_path)
    return report


def describe_device(device: str) -> dict:
    """Versions and the device's name and arch; GpuUnavailable if it cannot be used."""
    wp = warp_boundary.warp()
    env = {
        "warp": _version("warp-lang") or wp.config.version,
        "cudagen_data": __version__,
        "python": platform.python_version(),
        "numpy": _version("numpy"),
    }
    if device == "cpu":
        env.update(device_name="CPU (dry run)", device_arch="none")
        return env
    if not device.startswith("cuda"):
        raise GpuUnavailable(f"device {device!r}: use cuda:N (or cpu for a dry run)")
    count = wp.get_cuda_device_count()
    if count == 0:
        raise GpuUnavailable(
            "no CUDA device: Warp found no CUDA driver/GPU on this machine; "
            "run on a workstation with an NVIDIA GPU (see GPU_TESTING.md)"
        )
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if not 0 <= index < count:
        raise GpuUnavailable(f"device {device!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    d = wp.get_device(device)
    runtime = warp_boundary.runtime_versions()
    env.update(
        device_name=d.name,
        device_arch=d.arch,
        cuda_driver=_dotted(runtime["driver"]),
        cuda_toolkit=_dotted(runtime["toolkit"]),
    )
    return env


def dataset_rows(path: Path) -> Iterator[tuple[str, Row | NotARow]]:
    """(location, row or why the record is not one) for a dataset folder (Parquet files
    listed in its manifest) or one file."""
    if path.is_dir():
        try:
            manifest = Manifest.read(path)
        except ManifestError as exc:
            raise DatasetError(str(exc)) from None
        for shard in manifest.parquet_files() + manifest.parquet_files("real"):
            if not (path / shard.path).exists():
                raise DatasetError(f"{path / shard.path}: listed in the manifest but missing")
            yield from read_rows_from(path / shard.path)
    elif path.is_file():
        yield from read_rows_from(path)
    else:
        raise DatasetError(f"{path}: no such file or folder")


def make_chunks(items: list[Item], jobs: int) -> list[list[Item]]:
    """Chunks of at most MAX_CHUNK rows, at least ~3 per worker so the load evens out."""
    if not items:
        return []
    size = max(1, min(MAX_CHUNK, math.ceil(len(items) / max(1, 3 * jobs))))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="row", desc="gpu-validate", dynamic_ncols=True)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _dotted(v) -> str | None:
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else (str(v) if v is not None else None)
