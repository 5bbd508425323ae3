"""Records for `cudagen extract`: any Warp program -> one pair per kernel, compile status included."""

from __future__ import annotations

import time

from .. import canonical
from ..contracts.row import ExtractCompile, ExtractMetadata, ExtractRecord
from .codegen import DEFAULT_ARCH, KernelError, extract_source
from .nvrtc import compile_units


def extract_file(
    source: str, *, arch: int = DEFAULT_ARCH, compile_check: bool = True, level: str = "ptx", root: str | None = None
) -> tuple[list[ExtractRecord], list[KernelError]]:
    """(one record per kernel, problems found) for one Python source file.

    ``level``: how far the NVRTC check goes (extract/levels.py).  ``root`` is the folder
    the file was given under: a path the records name (a helper module's source
    comment) is relative to it, never absolute.

    ``python_source`` of every record is the whole file: it is what defines the kernel
    and what runs as is.  Records hold no test vectors (a user's kernel has no input
    domains); see :class:`ExtractRecord` for how they differ from dataset rows.
    """
    t0 = time.perf_counter()
    report = extract_source(source, arch=arch, root=root)
    per_kernel_ms = (time.perf_counter() - t0) * 1000.0 / max(len(report.kernels), 1)
    results = (
        compile_units(report.kernels, arch=arch, level=level)
        if compile_check and report.kernels
        else [None] * len(report.kernels)
    )
    py_hash = canonical.python_hash(source) if report.kernels else ""
    records = []
    for kernel, res in zip(report.kernels, results, strict=False):
        records.append(
            ExtractRecord(
                id=f"{py_hash}-{kernel.name}",
                kernel_name=kernel.name,
                category="user",
                python_source=source,
                cuda_forward=kernel.forward,
                cuda_backward=kernel.backward,
                metadata=ExtractMetadata(
                    device="cuda",
                    has_backward=bool(kernel.backward),
                    forward_lines=kernel.forward_lines,
                    backward_lines=kernel.backward_lines,
                    generation_time_ms=round(per_kernel_ms, 3),
                    source_line=kernel.line,
                ),
                device_functions=kernel.device_functions,
                preamble=kernel.preamble,
                cuda_hash=kernel.cuda_hash,
                compile=ExtractCompile(
                    arch=arch,
                    status="skipped" if res is None else ("ok" if res.ok else "failed"),
                    time_ms=0.0 if res is None else round(res.time_ms, 3),
                    log="" if res is None else res.log,
                ),
            )
        )
    return records, report.errors
