"""The GPU suite: prove a dataset's recorded CUDA on a real GPU (see GPU_TESTING.md).

- :func:`gpu_validate` ``(path, *, limit, device, jobs, report_path, progress) -> GpuReport``
- :func:`format_gpu_report` ``(report) -> str``
- :class:`GpuUnavailable`: raised, with a one-line reason, where Warp sees no CUDA device
- :func:`run_gpu_validation`: the command (prints the report, returns the exit status:
  0 passed, drift allowed; 1 failures; 2 no GPU / no dataset)

Command line: ``python -m cudagen_data.gpu PATH``.

Modules: recheck (orchestration), worker (what a worker process measures), pool
(crash-tolerant worker processes), judge (verdict per row), cuda_text (byte-for-byte CUDA
checks), report, command.  The float64 twin and the tolerance model are in
:mod:`cudagen_data.numerics`, below this suite, the gradient check and eval.
"""

from .command import run_gpu_validation
from .recheck import GpuUnavailable, gpu_validate
from .report import GpuReport, RowVerdict, format_gpu_report

__all__ = ["GpuReport", "GpuUnavailable", "RowVerdict", "format_gpu_report", "gpu_validate", "run_gpu_validation"]
