"""Which parts of which batches are in flight, and getting their results back in order.

Results come back strictly in submission (= slot) order.  Parts of a category that is
predicted to be full are skipped (not run); a wrong guess is repaired by running them
after all, so the result is what running every needed slot gives.  A crashed worker
loses every future of its pool: the unit is re-run with crash isolation
(:func:`.pool.run_isolated`) and the rest is resubmitted to a new pool.  On Ray, only the
dead task is lost (after Ray's own retries): that unit alone is isolated, on the cluster.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from ..contracts.reject import Reject, RejectReason
from .config import ProduceConfig
from .pool import WorkerLost, check_workers_start, make_executor, run_in_fresh_process, run_isolated
from .work import BatchResult, SlotOutcome, merge_results, run_batch, worker_stages

# Stop instead of looping forever when generators stop yielding valid, new kernels.
MAX_SLOTS_PER_ROW = 20


@dataclass
class Unit:
    """A part of a batch in flight: which slots, which categories it skips."""

    batch: int
    slots: range
    skip: frozenset
    counts: Counter  # category -> slots it runs
    future: Future | None = None


MIN_ACCEPTANCE = 0.25  # the slots in flight count at least this much: a category that stops yielding rows
# ends at max_batches, not by flooding the workers with its slots
HELD_PER_WORKER = 6  # finished parts (and parts in flight) per worker that may wait to be consumed in order
MAX_PARTS = 4  # a batch is never cut finer: every part pays a fixed cost (below)


def plan_parts(config: ProduceConfig, workers: int) -> int:
    """Parts to cut each batch into while much work remains: as few as keep every worker
    busy (a window of two units per worker), because every part pays a fixed cost (an
    NVRTC call per preamble, ~0.35 s of CPU each, and two CPU module builds, ~0.2 s each),
    which a batch cut into two parts pays twice.  The last batches of a run are cut
    finer (``tail_parts``).  It changes how work is scheduled, never the rows (work.py)."""
    if workers <= 1:
        return 1
    batches = -(-config.count // config.batch_size)
    return max(1, min(MAX_PARTS, -(-2 * workers // batches), config.batch_size))


MIN_TAIL_PART = 10  # slots a part cut for the tail runs at least: a smaller one's fixed cost outweighs its work


def tail_parts(parts: int, workers: int, run_slots: int, slots_left: float) -> int:
    """Parts to cut a batch into that will run ``run_slots`` slots (its categories not
    predicted full), when ``slots_left`` slots beyond those in flight (this batch's among
    them) are expected to fill every quota: ``parts`` while that is enough to keep every
    worker busy with whole parts of this size; then finer, parts of about
    ``slots_left / workers``, so that the workers share the last batches instead of one
    running a whole batch while the others wait.  Never finer than MAX_PARTS, nor into
    parts of fewer than MIN_TAIL_PART slots to run."""
    if workers <= 1 or slots_left >= workers * run_slots:
        return parts
    want = -(-workers * run_slots // max(1, math.ceil(slots_left)))
    return max(parts, min(MAX_PARTS, want, run_slots // MIN_TAIL_PART))


FIRST_PART_SLOTS = 10  # the first parts of a run are this small: the progress bar moves within seconds


def first_batch_ranges(config: ProduceConfig, batch: int, parts: int, workers: int) -> list[range]:
    """The parts of the first batch a run starts: one small part per worker first, so that
    the first results (and the progress bar) come after seconds, not after a whole part
    of a batch; the rest of the batch is cut as any other (``parts``).  Only a few parts
    are small: every part pays a fixed cost (an NVRTC call per preamble, two CPU module
    builds: ~1 s on the 2-core machine), so ten parts of ten slots cost ~8 s of worker time
    more than one of a hundred.  Like any cut, it changes the speed, never the rows."""
    slots = config.batch_slots(batch)
    small_end = min(slots.start + max(1, workers) * FIRST_PART_SLOTS, slots.stop)
    head = _cut(range(slots.start, small_end), -(-(small_end - slots.start) // FIRST_PART_SLOTS))
    return head + _cut(range(small_end, slots.stop), parts)


def part_ranges(config: ProduceConfig, batch: int, parts: int) -> list[range]:
    slots = config.batch_slots(batch)
    return _cut(slots, parts)


def _cut(slots: range, parts: int) -> list[range]:
    bounds = [slots.start + len(slots) * i // parts for i in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


class Scheduler:
    def __init__(
        self,
        config: ProduceConfig,
        workers: int,
        next_batch: int,
        accepted: Callable[[str], int],
        executor: str = "local",
        ray_address: str | None = None,
    ):
        self.config = config
        self.accepted = accepted  # category -> rows accepted so far
        self._new_executor = lambda: make_executor(workers, executor, ray_address)
        self.executor = self._new_executor()
        self.parts = plan_parts(config, self.executor.workers)
        self.max_batches = -(-config.count * MAX_SLOTS_PER_ROW // config.batch_size) + 1
        self.units: deque[Unit] = deque()  # submitted, in slot order
        self.queued: deque[tuple[int, range]] = deque()  # parts of started batches not yet submitted
        self.inflight: Counter = Counter()  # category -> slots submitted and not yet consumed
        self.consumed: Counter = Counter()  # category -> slots run and consumed (the acceptance rate's denominator)
        self.next_batch = next_batch
        self.first_batch = next_batch

    def full(self, category: str) -> bool:
        return self.accepted(category) >= self.config.quota(category)

    def _acceptance(self, category: str) -> float:
        """Rows accepted per slot run so far in ``category`` (1 before any is consumed; at least
        MIN_ACCEPTANCE, at most 1).  Counting every slot in flight as a row would stop the
        submitting near the end of a run while the parts in flight cannot fill the quotas
        (their rejects and duplicates): workers would idle until those parts return, then
        until the few slots made up after them do."""
        # at most 1: a repair's rows are accepted, its slots not counted as consumed
        return min(1.0, max(MIN_ACCEPTANCE, (self.accepted(category) + 1) / (self.consumed[category] + 1)))

    def _expected(self, category: str) -> float:
        """Rows ``category`` will have once the parts in flight are consumed, as far as known."""
        return self.accepted(category) + self.inflight[category] * self._acceptance(category)

    def _predicted_full(self, category: str) -> bool:
        # a wrong guess either way changes no row: a skipped slot that was needed is repaired
        # (run after all), a slot of a category already full is not counted (producer.consume)
        return self._expected(category) >= self.config.quota(category)

    def _slots_left(self) -> float:
        """Slots still to run, beyond those in flight, to fill every quota as far as known:
        each category's missing rows over its acceptance (the slots of the categories that
        need none are skipped, not run)."""
        return sum(
            max(0.0, self.config.quota(c) - self._expected(c)) / self._acceptance(c) for c in self.config.categories
        )

    def _running(self) -> int:
        return sum(not u.future.done() for u in self.units)

    def _submit(self, unit: Unit) -> None:
        unit.future = self.executor.submit(run_batch, self.config, unit.batch, unit.skip, unit.slots)

    def fill(self) -> None:
        """Submit parts until the window is full (or nothing more is needed).  The window
        counts parts not yet finished: a finished part waiting for an earlier one to be
        consumed (results are consumed in slot order) holds no worker, so it does not stop
        the next part from starting; ``HELD_PER_WORKER`` bounds how many results wait."""
        config = self.config
        workers = max(1, self.executor.workers)  # read each time: a cluster may grow or shrink
        while self._running() < 2 * workers and len(self.units) < HELD_PER_WORKER * workers:
            if not self.queued:
                if self.next_batch >= self.max_batches:
                    return
                if self.next_batch == self.first_batch:
                    ranges = first_batch_ranges(config, self.next_batch, self.parts, self.executor.workers)
                else:
                    batch_slots = config.batch_slots(self.next_batch)
                    run = sum(not self._predicted_full(config.slot(s)[0]) for s in batch_slots)
                    parts = tail_parts(self.parts, self.executor.workers, run, self._slots_left())
                    ranges = part_ranges(config, self.next_batch, parts)
                self.queued.extend((self.next_batch, r) for r in ranges)
                self.next_batch += 1
            skip = frozenset(c for c in config.categories if self._predicted_full(c))
            if len(skip) == len(config.categories):
                return  # what is in flight should finish the run: wait for it
            batch, slots = self.queued.popleft()
            counts = Counter(c for c in (config.slot(s)[0] for s in slots) if c not in skip)
            self.inflight.update(counts)
            unit = Unit(batch, slots, skip, counts)
            self._submit(unit)
            self.units.append(unit)

    def next_part(self) -> tuple[Unit, BatchResult] | None:
        """The next unit in slot order and its result (repaired), or None if nothing is in
        flight.  While the next unit runs, every part that finishes makes room for another
        (``fill``): a slow part at the head of the order does not leave the others' workers idle."""
        self.fill()
        if not self.units:
            return None
        head = self.units[0].future
        while not head.done():
            running = [u.future for u in self.units if not u.future.done()]
            cf.wait(running, return_when=cf.FIRST_COMPLETED)
            self.fill()
        unit = self.units.popleft()
        part = self._result(unit)
        self.inflight.subtract(unit.counts)
        self.consumed.update(unit.counts)
        # Slots skipped on a guess that their category would be full by now, and it is not:
        # run them now, so the result is what running every needed slot gives.
        missing = frozenset(c for c in unit.skip if not self.full(c))
        if missing:
            repair = Unit(unit.batch, unit.slots, frozenset(self.config.categories) - missing, Counter())
            self._submit(repair)
            part = merge_results(unit.batch, [part, self._result(repair)])
        return unit, part

    def _result(self, unit: Unit) -> BatchResult:
        try:
            return unit.future.result()
        except WorkerLost:
            # A worker died (a kernel crashed native code).
            if not self.executor.crash_loses_pool:  # only this unit is lost: isolate it there
                return isolate_crash(self.config, unit.batch, unit.slots, unit.skip, self.executor.run_alone)
            # every future of the pool is lost
            self.executor.close(kill=True)
            check_workers_start()  # a worker that cannot start is not a kernel's crash: stop, in one line
            result = isolate_crash(self.config, unit.batch, unit.slots, unit.skip)
            self.executor = self._new_executor()
            for other in self.units:
                self._submit(other)
            return result

    def close(self) -> None:
        self.executor.close(kill=True)  # whatever still runs was speculative: not needed


def isolate_crash(
    config: ProduceConfig, batch: int, slots, skip: frozenset, run_alone=run_in_fresh_process
) -> BatchResult:
    """Re-run ``slots`` of ``batch`` with crash isolation: a slot that crashes its process
    alone is rejected (``worker_crash``), deterministically; the others run as usual."""
    live = [s for s in slots if config.slot(s)[0] not in skip]
    path = tuple(s.name for s in worker_stages(config))

    def crashed(slot: int) -> BatchResult:
        category, index = config.slot(slot)
        reject = Reject(
            slot,
            category,
            None,
            None,
            RejectReason.WORKER_CRASH,
            "the worker process died running this kernel alone",
            "",
            None,
        )
        return BatchResult(batch, [SlotOutcome(slot, category, reject=reject, path=path)])

    return merge_results(batch, run_isolated(run_slots_apart, live, crashed, config, batch, skip, run_alone=run_alone))


def run_slots_apart(config: ProduceConfig, batch: int, skip: frozenset, slots: list[int]) -> list[BatchResult]:
    """``run_batch`` on ``slots``, its result cut into one result per slot."""
    whole = run_batch(config, batch, skip, slots)
    parts = []
    for i, outcome in enumerate(whole.outcomes):
        preambles = {outcome.row.preamble_hash: whole.preambles[outcome.row.preamble_hash]} if outcome.row else {}
        parts.append(
            BatchResult(
                batch,
                [outcome],
                preambles,
                whole.stage_seconds if i == 0 else {},
                whole.worker_rss_mb,
                whole.timings if i == 0 else [],
            )
        )
    return parts
