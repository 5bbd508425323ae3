"""compile: NVRTC-check every kernel at the run's level (extract/levels.py: the front end by
default, or the full compile), one translation unit per batch, bisected on failure."""

from __future__ import annotations

from ..contracts.reject import Reject, RejectReason
from ..extract import compile_units
from .base import Item, Stage


class CompileStage(Stage):
    name = "compile"
    reasons = (RejectReason.COMPILE_ERROR,)

    def __init__(self, arch: int, level: str) -> None:
        super().__init__()
        self.arch = arch
        self.level = level

    def process(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        kept, rejects = [], []
        for item, res in zip(
            items, compile_units([it.kernel for it in items], arch=self.arch, level=self.level), strict=False
        ):
            if res.ok:
                item.compile_ms = res.time_ms
                kept.append(item)
            else:
                rejects.append(
                    item.reject(RejectReason.COMPILE_ERROR, res.log.splitlines()[0] if res.log else "", res.log)
                )
        return kept, rejects
