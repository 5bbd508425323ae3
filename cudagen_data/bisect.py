"""Halve and retry: the one search for the items that make a group fail.

Many kernels are handled as one group (one NVRTC translation unit, one CPU module, one
worker process) because that is much cheaper than one at a time; when the group fails,
it is split in halves until the items that fail stand alone, so only they are rejected
and every other item gets the verdict it would get alone.  Used by the NVRTC compile
(extract/nvrtc.py), the CPU execution (execution.py), the producer's crash isolation
(pipeline/pool.py) and the GPU re-check's worker pool (gpu/pool.py, which queues the
halves instead of recursing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def halves(items: Sequence[T]) -> tuple[Sequence[T], Sequence[T]]:
    """``items`` cut in two (the first half the shorter one for odd lengths)."""
    mid = len(items) // 2
    return items[:mid], items[mid:]


def bisect_failures(items: Sequence[T], attempt: Callable[[Sequence[T]], list[R] | None]) -> list[R]:
    """One result per item, in order.

    ``attempt(group)`` handles a group as a whole and returns one result per item, or
    None if the group failed as a whole and must be split.  For a group of one item it
    must return that item's result (the failure, when it fails alone).
    """
    if not items:
        return []
    results = attempt(items)
    if results is not None:
        return results
    if len(items) == 1:
        raise ValueError("attempt() returned None for a single item: it must return that item's result")
    first, second = halves(items)
    return bisect_failures(first, attempt) + bisect_failures(second, attempt)
