"""extract: KernelSpec -> the CUDA Warp emits for its kernel (forward, backward, device functions)."""

from __future__ import annotations

import time

from ..contracts.reject import Reject, RejectReason
from ..dataset.lengths import DEFAULT_MAX_CHARS, row_length
from ..extract import DEFAULT_BLOCK_DIM, extract_source
from .base import Item, Stage


class ExtractStage(Stage):
    name = "extract"
    reasons = (RejectReason.CODEGEN_ERROR, RejectReason.TOO_LONG)

    def __init__(self, arch: int, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        super().__init__()
        self.arch = arch
        self.max_chars = max_chars

    def process(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        kept, rejects = [], []
        for item in items:
            spec = item.spec
            t0 = time.perf_counter()
            report = extract_source(spec.python_source, block_dim=spec.block_dim or DEFAULT_BLOCK_DIM, arch=self.arch)
            item.front_ms += (time.perf_counter() - t0) * 1000.0
            kernel = next((k for k in report.kernels if k.name == spec.kernel_name), None)
            if report.errors or kernel is None:
                detail = (
                    "; ".join(f"line {e.line}: {e.message}" for e in report.errors)
                    or f"no kernel named {spec.kernel_name}"
                )
                rejects.append(item.reject(RejectReason.CODEGEN_ERROR, detail))
                continue
            length = row_length(spec.python_source, kernel.forward, kernel.backward)
            if length > self.max_chars:
                rejects.append(
                    item.reject(
                        RejectReason.TOO_LONG,
                        f"{length} characters of Python + forward + backward CUDA (--max-chars {self.max_chars})",
                    )
                )
                continue
            item.kernel = kernel
            kept.append(item)
        return kept, rejects
