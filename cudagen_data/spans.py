"""Where a worker's time goes: named spans (wall and CPU seconds), summed per process and
handed back with each part of a batch (``pipeline.work.PartTiming``), for
benchmarks/bench_produce.py.  CPU seconds (``time.process_time``: this process, all its
threads) are what a loaded machine leaves comparable between runs; wall seconds are what
adds up to the run's time.

A span costs two ``perf_counter`` and two ``process_time`` calls (~1 us); nothing here
changes what is computed.  Spans
may nest (a nested span's seconds are also inside its parent's): the reader decides
which names partition a stage.  Timestamps that are compared between processes use
``time.monotonic`` (one system-wide clock on Linux).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator

_seconds: defaultdict[str, float] = defaultdict(float)
_cpu: defaultdict[str, float] = defaultdict(float)
_counts: defaultdict[str, int] = defaultdict(int)
# this process's initialiser: (monotonic start, wall seconds, the process's CPU seconds at its end)
_worker_init: tuple[float, float, float] | None = None


@contextlib.contextmanager
def span(name: str) -> Iterator[None]:
    """Add the block's wall and CPU time to ``name``."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        add(name, time.perf_counter() - t0, time.process_time() - c0)


def add(name: str, seconds: float, cpu_seconds: float) -> None:
    _seconds[name] += seconds
    _cpu[name] += cpu_seconds
    _counts[name] += 1


def so_far(name: str) -> tuple[float, float]:
    """(wall, CPU) seconds of ``name`` since the last ``take``: a caller that learns only
    afterwards where a span's time belongs takes the difference of two readings."""
    return _seconds.get(name, 0.0), _cpu.get(name, 0.0)


def take() -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """The spans since the last ``take`` (wall seconds, CPU seconds and counts by name),
    and start afresh."""
    taken = dict(_seconds), dict(_cpu), dict(_counts)
    _seconds.clear()
    _cpu.clear()
    _counts.clear()
    return taken


def note_worker_init(started: float) -> None:
    """A worker process's initialiser, begun at ``started`` (time.monotonic), ends now."""
    global _worker_init
    _worker_init = (started, time.monotonic() - started, time.process_time())


def take_worker_init() -> tuple[float, float, float] | None:
    """The initialiser's (start, wall seconds, process CPU seconds at its end), once: the
    first part a process runs carries it."""
    global _worker_init
    found, _worker_init = _worker_init, None
    return found
