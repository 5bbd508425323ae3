"""How long rows are: Python + forward CUDA + backward CUDA, in characters.

A row is a training example, so its length is what a model has to read.  Unrolled loops
make Warp's CUDA grow fast (a 3x3x3 stencil unrolls to ~290,000 characters), so the
producer rejects rows over ``--max-chars`` (``too_long``) and the stats and the dataset
card show the distribution per category.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .. import defaults

DEFAULT_MAX_CHARS = defaults.MAX_CHARS
LENGTH_COLUMNS = ("python_source", "cuda_forward", "cuda_backward")


def row_length(python_source: str, cuda_forward: str, cuda_backward: str) -> int:
    return len(python_source) + len(cuda_forward) + len(cuda_backward)


def summarize(lengths: Iterable[int]) -> dict:
    """rows, median, p95 and max of a list of lengths (nearest-rank percentiles: exact values)."""
    arr = np.sort(np.fromiter(lengths, dtype=np.int64))
    if not arr.size:
        return {"rows": 0, "median": 0, "p95": 0, "max": 0}

    def rank(q: float) -> int:
        return int(arr[max(0, int(np.ceil(q * arr.size)) - 1)])

    return {"rows": int(arr.size), "median": rank(0.5), "p95": rank(0.95), "max": int(arr[-1])}


def distribution(pairs: Iterable[tuple[str, int]]) -> dict:
    """{"all": summary, "by_category": {category: summary}} from (category, length) pairs."""
    by_cat: dict[str, list[int]] = {}
    every: list[int] = []
    for cat, n in pairs:
        by_cat.setdefault(cat, []).append(n)
        every.append(n)
    return {"all": summarize(every), "by_category": {c: summarize(v) for c, v in sorted(by_cat.items())}}


def parquet_distribution(paths: Iterable[Path]) -> dict:
    """The length distribution of the rows in Parquet files (reads only the four columns)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    def pairs():
        for path in paths:
            table = pq.read_table(path, columns=["category", *LENGTH_COLUMNS])
            total = pc.add(
                pc.add(pc.utf8_length(table["python_source"]), pc.utf8_length(table["cuda_forward"])),
                pc.utf8_length(table["cuda_backward"]),
            )
            yield from zip(table["category"].to_pylist(), total.to_pylist(), strict=False)

    return distribution(pairs())
