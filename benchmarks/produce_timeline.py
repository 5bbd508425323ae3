"""What a producer's workers wait for between parts: the driver's side of the timeline.

bench_produce.py's breakdown measures, per worker, the time between the end of one part
and the start of the next ("between parts").  This says what that time was made of, from
the driver's events (recorded by wrapping the producer's Scheduler; the product is not
changed) against the workers' part stamps (PartTiming: time.monotonic, system-wide):

- **starved**: no part was waiting for a worker (every part submitted had started), so the
  worker waited for the driver to submit one; split by what the driver was doing then:
  consuming and committing a result (outside ``next_part``), blocked on a repair part it
  runs synchronously, or inside ``next_part`` with the window full (parts running or held
  results at their bound) or every category predicted full;
- **dispatch**: a part was queued, yet the worker had not started it: the executor's
  hand-over (pickling the part's arguments, the call queue, the worker's own loop).

    with produce_timeline.recording() as events:
        produce(...)
    produce_timeline.report(events, timings, workers)
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Iterator


class Events(list):
    """The driver's events, (monotonic time, event), and ``discarded``: the PartTimings of
    parts that finished but whose results the run never consumed (it was full before their
    turn; the scheduler drops them at its close).  Their work is not in any committed
    result: without them it would look like workers waiting between parts."""

    def __init__(self) -> None:
        super().__init__()
        self.discarded: list = []


@contextlib.contextmanager
def recording() -> Iterator[Events]:
    """Record the driver's scheduler events while the block runs: (monotonic time, event)
    with events submit, repair, ask (next_part entered), got (next_part returned),
    fill:<why it stopped submitting>; and the timings of finished parts never consumed."""
    from cudagen_data.pipeline import producer
    from cudagen_data.pipeline.scheduler import HELD_PER_WORKER

    events = Events()
    base = producer.Scheduler

    class Recorded(base):  # type: ignore[misc, valid-type]
        def close(self) -> None:
            for unit in self.units:  # parts submitted, not consumed: finished ones hold their timings
                future = unit.future
                if future is not None and future.done() and not future.cancelled() and future.exception() is None:
                    events.discarded.extend(future.result().timings)
            super().close()

        def _submit(self, unit) -> None:
            events.append((time.monotonic(), "repair" if not unit.counts and unit.skip else "submit"))
            super()._submit(unit)

        def fill(self) -> None:
            super().fill()
            workers = max(1, self.executor.workers)
            if self._running() >= 2 * workers:
                why = "window"
            elif len(self.units) >= HELD_PER_WORKER * workers:
                why = "held"
            elif self.next_batch >= self.max_batches and not self.queued:
                why = "no batches"
            else:
                why = "predicted full"
            events.append((time.monotonic(), f"fill:{why}"))

        def next_part(self):
            events.append((time.monotonic(), "ask"))
            try:
                return super().next_part()
            finally:
                events.append((time.monotonic(), "got"))

    producer.Scheduler = Recorded
    try:
        yield events
    finally:
        producer.Scheduler = base


def _driver_state(events: list[tuple[float, str]], times: list[float], t: float) -> str:
    """What the driver was doing at ``t``: the last ask/got/repair/fill event before it."""
    i = bisect.bisect_right(times, t) - 1
    while i >= 0:
        kind = events[i][1]
        if kind == "got":
            return "consuming and committing a result"
        if kind == "repair":
            return "blocked on a repair part"
        if kind.startswith("fill:"):
            return f"in next_part, not submitting ({kind[5:]})"
        if kind == "ask":
            return "in next_part"
        i -= 1
    return "starting"


def analyse(events: list[tuple[float, str]], timings: list) -> dict[str, float]:
    """Worker-seconds between parts, split as the module docstring says."""
    events = sorted(events)
    times = [t for t, _ in events]
    submits = sorted(t for t, k in events if k in ("submit", "repair"))
    starts = sorted(t.started for t in timings)
    by_pid: dict[int, list] = {}
    for t in timings:
        by_pid.setdefault(t.pid, []).append(t)
    out: dict[str, float] = {}

    def add(name: str, seconds: float) -> None:
        if seconds > 0:
            out[name] = out.get(name, 0.0) + seconds

    for parts in by_pid.values():
        parts.sort(key=lambda t: t.started)
        for prev, nxt in zip(parts, parts[1:], strict=False):
            gap_start, gap_end = prev.ended, nxt.started
            queued = bisect.bisect_right(submits, gap_start) - bisect.bisect_right(starts, gap_start)
            if queued > 0:
                add("dispatch: a part was queued", gap_end - gap_start)
                continue
            k = bisect.bisect_right(submits, gap_start)
            fed = min(submits[k], gap_end) if k < len(submits) else gap_end
            add(f"starved: driver {_driver_state(events, times, gap_start)}", fed - gap_start)
            add("dispatch: after the submit that fed it", gap_end - fed)
    return out


def report(events: list[tuple[float, str]], timings: list, between_total: float) -> None:
    """Print :func:`analyse`'s split beside the breakdown's "between parts" total."""
    split = analyse(events, timings)
    asks = [t for t, k in events if k == "ask"]
    gots = [t for t, k in events if k == "got"]
    outside = sum(a - g for g, a in zip(gots, asks[1:], strict=False))  # got -> next ask: consuming
    repairs = sum(1 for _, k in events if k == "repair")
    print(f"\nbetween parts, what the workers waited for ({between_total:.1f} worker-s in the breakdown):")
    for name, sec in sorted(split.items(), key=lambda kv: -kv[1]):
        print(f"  {name:62s} {sec:9.1f} s")
    print(f"  driver: {len(asks)} parts consumed, {outside:.1f} s consuming and committing between them; "
          f"{repairs} repair parts run synchronously")  # fmt: skip
