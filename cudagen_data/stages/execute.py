"""execute: run every kernel on Warp's CPU backend (one module per batch, bisected on a
failed build); keep those whose outputs and gradients pass, with their test vectors."""

from __future__ import annotations

import time

from ..contracts.reject import Reject, RejectReason
from ..execution import execute_specs, test_vectors
from .base import Item, Stage


class ExecuteStage(Stage):
    name = "execute"
    reasons = tuple(r for r in RejectReason if r.stage == "execute")

    def __init__(self) -> None:
        super().__init__()
        self.share_ms = 0.0  # the last call's wall time per kernel (a row's time includes it)

    def process(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        t0 = time.perf_counter()
        runs = execute_specs([item.spec for item in items])
        self.share_ms = (time.perf_counter() - t0) * 1000.0 / len(items)
        kept, rejects = [], []
        for item, run in zip(items, runs):
            if run.ok:
                item.vectors = test_vectors(item.spec, run)
                kept.append(item)
            else:
                rejects.append(item.reject(run.reason or RejectReason.EXECUTION_ERROR, run.detail))
        return kept, rejects
