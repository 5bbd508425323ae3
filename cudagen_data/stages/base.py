"""What every worker stage shares: the item that moves through them, and the step protocol."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import spans, warp_boundary
from ..contracts.reject import Reject, RejectReason
from ..contracts.row import ResourceInfo
from ..contracts.test_vectors import TestVectors
from ..extract import ExtractedKernel
from ..gradcheck import GradientCheck
from ..spec import KernelSpec


@dataclass
class Item:
    """One slot on its way to becoming a row; each stage fills in its part."""

    slot: int
    category: str
    index: int
    spec: KernelSpec | None = None  # generate
    kernel: ExtractedKernel | None = None  # extract
    front_ms: float = 0.0  # generate + extract wall time of this item
    compile_ms: float = 0.0  # compile (its share of the batch's NVRTC call, plus its resources build)
    resources: ResourceInfo | None = None  # compile, with --resources
    vectors: TestVectors | None = None  # execute
    size_note: str = ""  # execute: why vectors lack some size (sizes.py)
    unused_args: list[str] = field(default_factory=list)  # execute: arguments that reach no output
    gradient_check: GradientCheck | None = None  # gradcheck
    own_build_check: GradientCheck | None = None  # execute, for gradcheck: checked on the kernel execute built

    def reject(self, reason: RejectReason, detail: str, log: str = "") -> Reject:
        # messages may quote this machine's files (Warp's headers, its kernel cache): never kept
        return Reject.of(
            self.slot,
            self.category,
            self.spec,
            reason,
            warp_boundary.scrub_paths(detail),
            warp_boundary.scrub_paths(log),
        )


class Stage:
    """A step: ``stage(items) -> (kept, rejects)``, timed in ``seconds``.

    Subclasses implement :meth:`process` and name the reasons they may reject with."""

    name: str = ""
    reasons: tuple[RejectReason, ...] = ()

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        if not items:
            return [], []
        t0, cpu0 = time.perf_counter(), time.process_time()
        kept, rejects = self.process(items)
        elapsed = time.perf_counter() - t0
        self.seconds += elapsed
        spans.add(self.name, elapsed, time.process_time() - cpu0)
        stray = [r.reason for r in rejects if r.reason.stage != self.name]
        if stray:
            raise AssertionError(f"stage {self.name} emitted reasons it does not own: {stray}")
        return kept, rejects

    def process(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        raise NotImplementedError
