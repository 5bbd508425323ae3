"""gradcheck: is the shipped backward right?  Warp's tape gradient against finite
differences of the forward (cudagen_data/gradcheck.py), on the float64 twin where Warp
has one; rows that disagree are rejected (adjoint_mismatch), every other row records
what was verified.  A row that ships a backward whose input gradients are zero everywhere
on every recorded size is rejected (vacuous_backward): the gradient check would compare
0 with 0, which verifies nothing about an adjoint."""

from __future__ import annotations

import time

from ..contracts.reject import Reject, RejectReason
from ..gradcheck import Point, check_gradients, summary_reason
from .base import Item, Stage


class GradientCheckStage(Stage):
    name = "gradcheck"
    reasons = (RejectReason.ADJOINT_MISMATCH, RejectReason.VACUOUS_BACKWARD)

    def __init__(self) -> None:
        super().__init__()
        self.share_ms = 0.0  # the last call's wall time per kernel (a row's time includes it)

    def process(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        t0 = time.perf_counter()
        todo = [item for item in items if item.own_build_check is None]  # the rest: checked by execute
        points = [Point.of_vectors(item.spec, item.vectors) for item in todo]
        found = dict(
            zip((id(item) for item in todo), check_gradients([item.spec for item in todo], points), strict=False)
        )
        checks = [item.own_build_check or found[id(item)] for item in items]
        self.share_ms = (time.perf_counter() - t0) * 1000.0 / len(items)
        kept, rejects = [], []
        for item, check in zip(items, checks, strict=False):
            if check.status != "forward_only" and item.vectors.input_grads_all_zero():
                rejects.append(
                    item.reject(RejectReason.VACUOUS_BACKWARD, "input gradients are zero everywhere on every size")
                )
            elif check.status == "mismatch":
                rejects.append(item.reject(RejectReason.ADJOINT_MISMATCH, summary_reason(check)))
            else:
                item.gradient_check = check
                kept.append(item)
        return kept, rejects
