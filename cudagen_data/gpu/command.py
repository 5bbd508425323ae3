"""The GPU suite as a command: validate, print the report, return the exit status.

``cudagen gpu-validate`` and ``python -m cudagen_data.gpu`` both call
:func:`run_gpu_validation`.  Exit status: 0 every row passed (drift allowed), 1 a row
failed (or nothing ran), 2 no usable GPU, no dataset at the path, or workers that
cannot start: one ``error: ...`` line on stderr, no traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..dataset.store import DatasetError
from .pool import PoolError
from .recheck import GpuUnavailable, gpu_validate
from .report import format_gpu_report


def run_gpu_validation(
    path: str | Path,
    *,
    limit: int | None = None,
    device: str = "cuda:0",
    jobs: int | None = None,
    report_path: str | Path | None = None,
    progress: bool = True,
) -> int:

    try:
        report = gpu_validate(path, limit=limit, device=device, jobs=jobs, report_path=report_path, progress=progress)
    except (GpuUnavailable, DatasetError, PoolError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if report_path:
        print(f"JSON report: {report_path}")
    print(format_gpu_report(report))  # its last line is the verdict
    return report.exit_code
