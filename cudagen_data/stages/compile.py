"""compile: NVRTC-check every kernel at the run's level (extract/levels.py: the front end by
default, or the full compile), one translation unit per batch, bisected on failure.

With ``--resources`` every kernel that passes is then built alone to machine code for the
run's arch and ptxas's report on it is kept (extract/resources.py); a kernel that passes
the check but not that build is rejected as a compile error, with the build's log."""

from __future__ import annotations

import time

from ..contracts.reject import Reject, RejectReason
from ..extract import compile_units
from ..extract.resources import ResourceError, measure_kernel
from .base import Item, Stage


class CompileStage(Stage):
    name = "compile"
    reasons = (RejectReason.COMPILE_ERROR,)

    def __init__(self, arch: int, level: str, resources: bool = False) -> None:
        super().__init__()
        self.arch = arch
        self.level = level
        self.resources = resources

    def process(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        kept, rejects = [], []
        results = compile_units([it.kernel for it in items], arch=self.arch, level=self.level)
        for item, res in zip(items, results, strict=True):
            if not res.ok:
                rejects.append(
                    item.reject(RejectReason.COMPILE_ERROR, res.log.splitlines()[0] if res.log else "", res.log)
                )
                continue
            item.compile_ms = res.time_ms
            if self.resources:
                t0 = time.perf_counter()
                try:
                    item.resources = measure_kernel(item.kernel, arch=self.arch)
                except ResourceError as exc:
                    rejects.append(item.reject(RejectReason.COMPILE_ERROR, str(exc), str(exc)))
                    continue
                item.compile_ms += (time.perf_counter() - t0) * 1000.0
            kept.append(item)
        return kept, rejects
