"""A run's counts: per-stage counters, accepted rows by category / split / tier; stats.json.

:class:`RunStats` is saved in the run state after every batch (so a resumed run goes on
counting) and rendered as stats.json by :meth:`RunStats.to_stats_json`.  Pass rates
come from the stage counters: ``kept / in`` of the compile and execute stages.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from .reject import RejectReason
from .row import ResourceInfo

# Stages in the order a slot passes them (dedup runs in the producer, on rows).
WORKER_STAGES = ("generate", "extract", "compile", "execute", "gradcheck")
FAST_STAGES = ("generate", "extract")
STAGE_NAMES = WORKER_STAGES + ("dedup",)
# cudagen mine: a file's kernels are collected (its own stage), then pass the shared
# extract, compile and dedup stages.  Execution rejects nothing there (a real kernel that
# cannot run is kept, unexecuted).
MINE_STAGES = ("collect", "extract", "compile", "dedup")
TIMED_STAGES = WORKER_STAGES + ("write",)

# stats.json keys that hold wall-clock timings: the only ones that differ between two runs.
TIMING_STATS = ("generation_time_seconds", "pairs_per_second", "stage_seconds")


@dataclass
class StageCounter:
    """What one stage saw: items in, items kept, items rejected by reason."""

    entered: int = 0
    kept: int = 0
    rejected: dict[str, int] = field(default_factory=dict)

    def keep(self, n: int = 1) -> None:
        self.entered += n
        self.kept += n

    def reject(self, reason: RejectReason | str, n: int = 1) -> None:
        self.entered += n
        key = str(reason)
        self.rejected[key] = self.rejected.get(key, 0) + n

    def pass_rate(self) -> float | None:
        return round(self.kept / self.entered, 4) if self.entered else None

    def to_json(self) -> dict:
        return {"in": self.entered, "kept": self.kept, "rejected": dict(sorted(self.rejected.items()))}

    @classmethod
    def from_json(cls, d: dict) -> StageCounter:
        return cls(d["in"], d["kept"], dict(d["rejected"]))


@dataclass
class RunStats:
    """The running counts of a produce run (plain JSON in the run state)."""

    accepted: dict[str, int]
    slots: dict[str, int]
    by_split: dict[str, int]
    by_difficulty: dict[str, int] = field(default_factory=dict)
    by_category_difficulty: dict[str, dict[str, int]] = field(default_factory=dict)
    stages: dict[str, StageCounter] = field(default_factory=lambda: {s: StageCounter() for s in STAGE_NAMES})
    forward_lines: int = 0
    backward_lines: int = 0
    # category -> gradient_check.status -> accepted rows
    gradient_check: dict[str, dict[str, int]] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in TIMED_STAGES})
    elapsed_seconds: float = 0.0
    # category -> ResourceTally.to_json() of the rows with a `resources` column (--resources)
    resources: dict[str, dict] = field(default_factory=dict)
    # category -> {"rows": executed rows, "all_sizes": rows with 3 sizes in test_vectors,
    # "fixed_size": rows of a kernel that runs at one size only, "unused_args": rows with one}
    sizes: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def new(cls, categories, splits) -> RunStats:
        return cls(
            accepted={c: 0 for c in categories},
            slots={c: 0 for c in categories},
            by_split={s: 0 for s in splits},
            by_category_difficulty={c: {} for c in categories},
        )

    # ------------------------------------------------------------ counting

    def count_slot(self, category: str, path: tuple[str, ...], reason: RejectReason | None) -> None:
        """A slot the run consumed: it passed the stages of ``path`` (a worker's stages,
        in order) up to the one that owns ``reason``, or all of them if accepted."""
        self.slots[category] += 1
        stop = len(path) if reason is None else (path.index(reason.stage) if reason.stage in path else len(path) - 1)
        for name in path[:stop]:
            self.stages[name].keep()
        if reason is not None:
            self.stages[path[stop]].reject(reason)

    def count_row(
        self,
        category: str,
        difficulty: str,
        split: str,
        forward_lines: int,
        backward_lines: int,
        gradient_status: str = "unchecked",
        resources: ResourceInfo | None = None,
        *,
        sizes: int = 0,
        fixed_size: bool = False,
        unused_args: bool = False,
    ) -> None:
        """``sizes``: how many sizes the row's test vectors hold (0: none, ``--fast``)."""
        self.accepted[category] += 1
        if sizes:
            tally = self.sizes.setdefault(category, {"rows": 0, "all_sizes": 0, "fixed_size": 0, "unused_args": 0})
            tally["rows"] += 1
            tally["all_sizes"] += sizes >= 3
            tally["fixed_size"] += fixed_size
            tally["unused_args"] += unused_args
        if resources is not None:
            tally = ResourceTally.from_json(self.resources.get(category))
            tally.add(resources)
            self.resources[category] = tally.to_json()
        per_status = self.gradient_check.setdefault(category, {})
        per_status[gradient_status] = per_status.get(gradient_status, 0) + 1
        self.by_split[split] += 1
        self.by_difficulty[difficulty] = self.by_difficulty.get(difficulty, 0) + 1
        per_cat = self.by_category_difficulty[category]
        per_cat[difficulty] = per_cat.get(difficulty, 0) + 1
        self.forward_lines += forward_lines
        self.backward_lines += backward_lines

    def add_seconds(self, seconds: dict[str, float]) -> None:
        for stage, s in seconds.items():
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + s

    def rejects_by_reason(self) -> dict[str, int]:
        total: Counter = Counter()
        for counter in self.stages.values():
            total.update(counter.rejected)
        return dict(sorted(total.items()))

    def gradient_check_json(self) -> dict:
        """Rows by gradient_check.status, per category and in all; the verified share."""
        by_cat = {c: dict(sorted(d.items())) for c, d in sorted(self.gradient_check.items())}
        total: Counter = Counter()
        for d in by_cat.values():
            total.update(d)
        rows = sum(total.values())
        return {
            "by_status": dict(sorted(total.items())),
            "by_category": by_cat,
            "verified_rate": round(total["verified"] / rows, 4) if rows else None,
        }

    def sizes_json(self) -> dict | None:
        """Per category and in all: executed rows, rows with all 3 sizes (and their share),
        fixed-size rows, rows with an unused argument; None when nothing was executed."""
        if not self.sizes:
            return None
        total: Counter = Counter()
        for d in self.sizes.values():
            total.update(d)

        def summary(d) -> dict:
            rows = d["rows"]
            return {**dict(d), "all_sizes_rate": round(d["all_sizes"] / rows, 4) if rows else None}

        return {"by_category": {c: summary(d) for c, d in sorted(self.sizes.items())}, "all": summary(total)}

    def resources_json(self) -> dict | None:
        """Per category and in all: rows measured, median registers (forward, backward), rows
        that spill; None when no row was measured (a run without --resources)."""
        if not self.resources:
            return None
        tallies = {c: ResourceTally.from_json(d) for c, d in sorted(self.resources.items())}
        total = ResourceTally()
        for t in tallies.values():
            total.merge(t)
        return {"by_category": {c: t.summary() for c, t in tallies.items()}, "all": total.summary()}

    # ------------------------------------------------------------ persistence

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["stages"] = {name: c.to_json() for name, c in self.stages.items()}
        return d

    @classmethod
    def from_json(cls, d: dict) -> RunStats:
        return cls(**{**d, "stages": {name: StageCounter.from_json(c) for name, c in d["stages"].items()}})

    def to_stats_json(self, fast: bool) -> dict:
        """stats.json (keys as since the first release; ``stages`` added with the stage counters)."""
        total = sum(self.accepted.values())
        dedup = self.stages["dedup"].rejected
        elapsed = self.elapsed_seconds
        return {
            "total_pairs": total,
            "by_category": dict(self.accepted),
            "by_split": dict(self.by_split),
            "by_difficulty": dict(sorted(self.by_difficulty.items())),
            "by_category_difficulty": {c: dict(sorted(d.items())) for c, d in self.by_category_difficulty.items()},
            "avg_forward_lines": round(self.forward_lines / total, 2) if total else 0.0,
            "avg_backward_lines": round(self.backward_lines / total, 2) if total else 0.0,
            "kernels_tried": sum(self.slots.values()),
            "rejects_by_reason": self.rejects_by_reason(),
            "duplicates_dropped": sum(dedup.values()),
            "duplicates_by_hash": {"python": dedup.get("duplicate_python", 0), "cuda": dedup.get("duplicate_cuda", 0)},
            "compile_pass_rate": None if fast else self.stages["compile"].pass_rate(),
            "execution_pass_rate": None if fast else self.stages["execute"].pass_rate(),
            "gradient_check": self.gradient_check_json(),
            "resources": self.resources_json(),
            "sizes": self.sizes_json(),
            "stages": {name: c.to_json() for name, c in self.stages.items()},
            # timing fields: the only values that differ between two identical runs
            "generation_time_seconds": round(elapsed, 3),
            "pairs_per_second": round(total / elapsed, 2) if elapsed else None,
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
        }


@dataclass
class ResourceTally:
    """Register counts as histograms (a median needs no list of every row) and spill counts."""

    rows: int = 0
    forward_registers: dict[int, int] = field(default_factory=dict)
    backward_registers: dict[int, int] = field(default_factory=dict)
    rows_with_spills: int = 0

    def add(self, r: ResourceInfo) -> None:
        self.rows += 1
        self.forward_registers[r.forward_registers] = self.forward_registers.get(r.forward_registers, 0) + 1
        if r.backward_registers is not None:
            self.backward_registers[r.backward_registers] = self.backward_registers.get(r.backward_registers, 0) + 1
        self.rows_with_spills += int(r.spills)

    def merge(self, other: ResourceTally) -> None:
        self.rows += other.rows
        self.rows_with_spills += other.rows_with_spills
        pairs = ((self.forward_registers, other.forward_registers), (self.backward_registers, other.backward_registers))
        for mine, theirs in pairs:
            for k, n in theirs.items():
                mine[k] = mine.get(k, 0) + n

    def summary(self) -> dict:
        return {
            "rows": self.rows,
            "median_forward_registers": histogram_median(self.forward_registers),
            "median_backward_registers": histogram_median(self.backward_registers),
            "rows_with_spills": self.rows_with_spills,
        }

    def to_json(self) -> dict:
        # JSON keys are strings; sorted so the run state is the same bytes for the same rows
        return {
            "rows": self.rows,
            "forward_registers": {str(k): v for k, v in sorted(self.forward_registers.items())},
            "backward_registers": {str(k): v for k, v in sorted(self.backward_registers.items())},
            "rows_with_spills": self.rows_with_spills,
        }

    @classmethod
    def from_json(cls, d: dict | None) -> ResourceTally:
        if not d:
            return cls()
        return cls(
            d["rows"],
            {int(k): v for k, v in d["forward_registers"].items()},
            {int(k): v for k, v in d["backward_registers"].items()},
            d["rows_with_spills"],
        )


def histogram_median(counts: dict[int, int]) -> float | None:
    """The median of the values a {value: count} histogram holds (mean of the middle two
    for an even count); None when empty."""
    n = sum(counts.values())
    if n == 0:
        return None
    middle = []
    seen = 0
    for value in sorted(counts):
        lo, seen = seen, seen + counts[value]
        for rank in ((n - 1) // 2, n // 2):  # 0-based ranks of the middle element(s)
            if lo <= rank < seen:
                middle.append(value)
    return (middle[0] + middle[1]) / 2
