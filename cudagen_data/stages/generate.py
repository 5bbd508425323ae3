"""generate: (category, seed, index) -> KernelSpec, from the generator registry."""

from __future__ import annotations

import time

from ..contracts.reject import Reject, RejectReason
from ..generators import generate
from .base import Item, Stage


class GenerateStage(Stage):
    name = "generate"
    reasons = (RejectReason.GENERATOR_ERROR,)

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed

    def process(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        kept, rejects = [], []
        for item in items:
            t0 = time.perf_counter()
            try:
                item.spec = generate(item.category, self.seed, item.index)
            except Exception as exc:  # noqa: BLE001 - a generator bug rejects one slot, not the run
                rejects.append(item.reject(RejectReason.GENERATOR_ERROR, f"{type(exc).__name__}: {exc}"))
                continue
            item.front_ms += (time.perf_counter() - t0) * 1000.0
            kept.append(item)
        return kept, rejects
