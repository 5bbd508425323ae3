"""dedup: drop a row whose canonical Python or CUDA hash an earlier row has.

Runs in the producer on rows in slot order, so the earlier slot always wins and the
result never depends on worker timing.  It counts into the run's ``dedup`` counter.
"""

from __future__ import annotations

from ..contracts.reject import Reject, RejectReason
from ..contracts.row import Row
from ..contracts.stats import StageCounter


class DedupStage:
    name = "dedup"
    # DUPLICATE_SHAPE: mining's dedup (mine/rows.py), which keeps one kernel per canonical shape
    reasons = (RejectReason.DUPLICATE_PYTHON, RejectReason.DUPLICATE_CUDA, RejectReason.DUPLICATE_SHAPE)

    def __init__(self, counter: StageCounter | None = None) -> None:
        self.python: set[str] = set()
        self.cuda: set[str] = set()
        self.counter = counter if counter is not None else StageCounter()

    def remember(self, python_hash: str, cuda_hash: str) -> None:
        """A row already kept (a resumed run reads them back)."""
        self.python.add(python_hash)
        self.cuda.add(cuda_hash)

    def check(self, row: Row, slot: int) -> Reject | None:
        """None if ``row`` is new (and now remembered), else its reject; counted either way."""
        reason = None
        if row.python_hash in self.python:
            reason, which = RejectReason.DUPLICATE_PYTHON, "python"
        elif row.cuda_hash in self.cuda:
            reason, which = RejectReason.DUPLICATE_CUDA, "cuda"
        if reason is None:
            self.remember(row.python_hash, row.cuda_hash)
            self.counter.keep()
            return None
        self.counter.reject(reason)
        return Reject(
            slot=slot,
            category=row.category,
            index=row.metadata.index,
            kernel_name=row.kernel_name,
            reason=reason,
            detail=f"same {which} hash as an earlier pair",
            log="",
            python_source=row.python_source,
        )
