"""execute: run every kernel on Warp's CPU backend (one module per batch, bisected on a
failed build); keep those whose outputs and gradients pass, with their test vectors.

Each kernel runs at its generated size and at the other sizes (sizes.py: ``large`` and
``ragged``) on the same build; a size that fails is left out of the test vectors and
named in the row's ``size_note``.  Its outputs must depend on its inputs
(inputs_matter.py): an input-blind kernel is rejected, arguments that reach no output
are listed in the row's ``unused_args``.

A kernel that the gradient check will probe as it is (no float64 twin) is checked here,
on the kernel this stage built, rather than built a second time by the gradcheck stage
(``Item.own_build_check``; the gradcheck stage still decides what its result means)."""

from __future__ import annotations

import time

from .. import spans
from ..contracts.reject import Reject, RejectReason
from ..execution import SizedRun, execute_specs, size_note, test_vectors
from ..generators.ml import REFERENCE_CHECKS
from ..gradcheck import Point, check_own_build
from ..sizes import fixed_size_reason, other_sizes
from .base import Item, Stage


class ExecuteStage(Stage):
    name = "execute"
    reasons = tuple(r for r in RejectReason if r.stage == "execute")

    def __init__(self, check_own_builds: bool = True, all_sizes: bool = True) -> None:
        super().__init__()
        self.share_ms = 0.0  # the last call's wall time per kernel (a row's time includes it)
        self.check_own_builds = check_own_builds
        self.all_sizes = all_sizes  # False: the generated size only (the benchmark's baseline)

    def process(self, items: list[Item]) -> tuple[list[Item], list[Reject]]:
        t0 = time.perf_counter()
        vectors = {}

        def on_run(i: int, kernel, run) -> None:
            item = items[i]
            with spans.span("execute.vectors"):
                vectors[i] = test_vectors(item.spec, run)
            if self.check_own_builds:
                with spans.span("execute.own_build_check"):
                    # the point the gradcheck stage would check at: every recorded size
                    item.own_build_check = check_own_build(item.spec, kernel, Point.of_vectors(item.spec, vectors[i]))

        more = [
            [
                SizedRun(label, spec, guard=guard, alternatives=tuple(alts))
                for label, spec, guard, alts in other_sizes(item.spec, item.spec.category in REFERENCE_CHECKS)
            ]
            if self.all_sizes
            else []
            for item in items
        ]
        runs = execute_specs([item.spec for item in items], more=more, probe_inputs=True, on_run=on_run)
        self.share_ms = (time.perf_counter() - t0) * 1000.0 / len(items)
        kept, rejects = [], []
        for i, (item, run) in enumerate(zip(items, runs, strict=False)):
            if run.ok:
                item.vectors = vectors[i] if i in vectors else test_vectors(item.spec, run)
                item.size_note = size_note(run, fixed_size_reason(item.spec) if self.all_sizes else "not asked")
                item.unused_args = run.unused_args
                kept.append(item)
            else:
                item.own_build_check = None
                rejects.append(item.reject(run.reason or RejectReason.EXECUTION_ERROR, run.detail))
        return kept, rejects
