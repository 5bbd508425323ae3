"""One unit of work: a batch (or a part of one) through the worker stages, to rows.

``run_batch`` is what a worker runs: a batch, or a contiguous part of one.  It reads
nothing but its arguments and writes nothing: it returns rows and rejects (contracts),
in slot order.  Every slot's outcome depends on that slot alone (one NVRTC unit
and one CPU module per call, bisected on failure), so how a batch is cut into parts
changes the speed, never the rows.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import orjson

from .. import canonical, spans
from ..contracts.reject import Reject
from ..contracts.row import CompileInfo, GradientCheckInfo, Metadata, ResourceInfo, Row
from ..contracts.stats import WORKER_STAGES
from ..contracts.test_vectors import TestVectors
from ..execution import forward_only_reason
from ..extract import ExtractedKernel
from ..extract.levels import nvrtc_version
from ..generators import GENERATOR_VERSION
from ..gradcheck import GradientCheck
from ..spec import KernelSpec
from ..stages import CompileStage, ExecuteStage, ExtractStage, GenerateStage, GradientCheckStage, Item, Stage
from .config import ProduceConfig, versions


@dataclass
class SlotOutcome:
    slot: int
    category: str
    row: Row | None = None  # an accepted pair (dedup happens later, in slot order)
    reject: Reject | None = None
    path: tuple[str, ...] = WORKER_STAGES  # the stages this slot was to pass
    # how many sizes the row's test vectors hold, counted where they are made: the driver
    # would otherwise parse every row's vectors again (~5 ms a row, on the workers' cores)
    sizes: int = 0


@dataclass
class PartTiming:
    """When and where one part ran and where its time went (spans.py): for
    benchmarks/bench_produce.py's breakdown, never written to a dataset."""

    pid: int
    started: float  # time.monotonic() (system-wide: comparable between processes)
    ended: float
    cpu_seconds: float  # this process's CPU time during the part (time.process_time)
    slots: int  # slots run (skipped categories aside)
    spans: dict[str, float]  # wall seconds by span name
    cpu_spans: dict[str, float]  # CPU seconds by span name
    counts: dict[str, int]  # spans by name
    # the first part a process runs: its initialiser's (start, wall seconds, process CPU seconds at its end)
    worker_init: tuple[float, float, float] | None = None


@dataclass
class BatchResult:
    batch: int
    outcomes: list[SlotOutcome]
    preambles: dict[str, str] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    worker_rss_mb: float = 0.0  # resident memory of the process that ran the batch, at its end
    timings: list[PartTiming] = field(default_factory=list)  # one per part run in a worker


def worker_stages(config: ProduceConfig) -> list[Stage]:
    """The stages a worker runs, in order (``--fast``: generate and extract only)."""
    stages: list[Stage] = [GenerateStage(config.seed), ExtractStage(config.arch, config.max_chars)]
    if not config.fast:
        compile_stage = CompileStage(config.arch, config.compile_level, config.resources)
        stages += [compile_stage, ExecuteStage(), GradientCheckStage()]
    return stages


def run_batch(
    config: ProduceConfig, batch: int, skip_categories: Collection[str] = (), slots: Sequence[int] | None = None
) -> BatchResult:
    """Run every slot of ``batch`` (or of ``slots``, a part of it) whose category is not in
    ``skip_categories`` through the worker stages."""
    started, cpu_started = time.monotonic(), time.process_time()
    spans.take()  # what ran before this part (a worker's initialiser aside) is not its time
    warp_version = versions()["warp"]
    batch_slots = config.batch_slots(batch)
    if slots is None:
        slots = batch_slots
    elif any(s not in batch_slots for s in slots):
        raise ValueError(f"slots {slots[0]}..{slots[-1]} are not all in batch {batch}")

    crash_slots = _injected_crash_slots()
    items = []
    for slot in slots:
        if slot in crash_slots:
            os.kill(os.getpid(), signal.SIGSEGV)
        category, index = config.slot(slot)
        if category not in skip_categories:
            items.append(Item(slot, category, index))

    stages = worker_stages(config)
    path = tuple(s.name for s in stages)
    outcomes = {item.slot: SlotOutcome(item.slot, item.category, path=path) for item in items}
    for stage in stages:
        items, rejects = stage(items)
        for reject in rejects:
            outcomes[reject.slot].reject = reject
    share = sum(getattr(s, "share_ms", 0.0) for s in stages)  # execution and check time per kernel

    result = BatchResult(
        batch, [outcomes[s] for s in sorted(outcomes)], stage_seconds={name: 0.0 for name in WORKER_STAGES}
    )
    for stage in stages:
        result.stage_seconds[stage.name] = stage.seconds
    status = "skipped" if config.fast else "ok"
    with spans.span("rows"):
        for item in items:
            kernel = item.kernel
            preamble_hash = canonical.text_hash(kernel.preamble)
            result.preambles.setdefault(preamble_hash, kernel.preamble)
            generation_ms = round(item.front_ms + item.compile_ms + share, 3)
            check = item.gradient_check or unchecked(item.spec.python_source)
            outcomes[item.slot].sizes = len(item.vectors.sets()) if item.vectors is not None else 0
            outcomes[item.slot].row = build_row(
                config,
                batch,
                item.spec,
                kernel,
                preamble_hash,
                item.vectors,
                status,
                generation_ms,
                round(item.compile_ms, 3),
                warp_version,
                check,
                item.resources,
                size_note=item.size_note,
                unused_args=item.unused_args,
            )
    result.worker_rss_mb = _rss_mb()
    seconds, cpu_seconds, counts = spans.take()
    result.timings.append(
        PartTiming(
            os.getpid(),
            started,
            time.monotonic(),
            time.process_time() - cpu_started,
            len(outcomes),
            seconds,
            cpu_seconds,
            counts,
            spans.take_worker_init(),
        )
    )
    return result


def unchecked(source: str) -> GradientCheck:
    """The gradient_check of a row that did not pass the check stage (``--fast``)."""
    why = forward_only_reason(source)
    return GradientCheck("forward_only", why) if why else GradientCheck("unchecked", "--fast: not executed")


CRASH_ENV = "CUDAGEN_TEST_CRASH_SLOTS"


def _injected_crash_slots() -> frozenset[int]:
    """Fault injection for tests: slots (comma-separated in $CUDAGEN_TEST_CRASH_SLOTS) whose
    run kills the worker the way a kernel crashing native code does."""
    value = os.environ.get(CRASH_ENV, "")
    return frozenset(int(s) for s in value.split(",") if s.strip())


def merge_results(batch: int, parts: Iterable[BatchResult]) -> BatchResult:
    """One result from results of parts of ``batch`` (outcomes in slot order)."""
    merged = BatchResult(batch, [], stage_seconds={name: 0.0 for name in WORKER_STAGES})
    for part in parts:
        merged.outcomes += part.outcomes
        merged.preambles.update(part.preambles)
        for stage, seconds in part.stage_seconds.items():
            merged.stage_seconds[stage] = merged.stage_seconds.get(stage, 0.0) + seconds
        merged.worker_rss_mb = max(merged.worker_rss_mb, part.worker_rss_mb)
        merged.timings += part.timings
    merged.outcomes.sort(key=lambda o: o.slot)
    return merged


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux
        return 0.0


def build_row(
    config: ProduceConfig,
    batch: int,
    spec: KernelSpec,
    kernel: ExtractedKernel,
    preamble_hash: str,
    vectors: TestVectors | None,
    compile_status: str,
    generation_ms: float,
    compile_ms: float,
    warp_version: str,
    gradient_check: GradientCheck,
    resources: ResourceInfo | None = None,
    *,
    size_note: str = "",
    unused_args: list[str] = (),
) -> Row:
    """A dataset row (the contract: contracts/row.py)."""
    with spans.span("rows.hash"):
        python_hash, shape_hash = canonical.canonical_hashes(spec.python_source)
    return Row(
        id=python_hash,
        kernel_name=spec.kernel_name,
        category=spec.category,
        python_source=spec.python_source,
        cuda_forward=kernel.forward,
        cuda_backward=kernel.backward,
        metadata=Metadata(
            device="cuda",
            has_backward=bool(kernel.backward),
            forward_lines=kernel.forward_lines,
            backward_lines=kernel.backward_lines,
            generation_time_ms=generation_ms,
            seed=config.seed,
            batch=batch,
            index=spec.index,
        ),
        difficulty=spec.difficulty,
        features=list(spec.features),
        device_functions=kernel.device_functions,
        preamble_hash=preamble_hash,
        arg_specs=orjson.dumps([a.to_dict() for a in spec.args]).decode(),
        launch_dim=list(spec.launch_dim),
        block_dim=spec.block_dim,
        test_vectors=vectors.to_json() if vectors is not None else "",
        size_note=size_note,
        unused_args=list(unused_args),
        python_hash=python_hash,
        shape_hash=shape_hash,
        cuda_hash=kernel.cuda_hash,
        compile=CompileInfo(
            arch=config.arch,
            level="none" if config.fast else config.compile_level,
            nvrtc_version="" if config.fast else nvrtc_version(config.compile_level),
            status=compile_status,
            time_ms=compile_ms,
        ),
        warp_version=warp_version,
        generator_version=GENERATOR_VERSION,
        gradient_check=GradientCheckInfo(**gradient_check.to_row()),
        resources=resources,
    )
