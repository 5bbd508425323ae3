"""One unit of work: generate -> extract -> NVRTC compile -> CPU execution -> rows.

``run_batch`` is what a worker runs: a batch, or a contiguous part of one.  It reads
nothing but its arguments and writes nothing: it returns rows and rejects as plain
dicts, in slot order.  Every slot's outcome depends on that slot alone (one NVRTC unit
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
import xxhash

from .. import canonical
from ..extract import DEFAULT_BLOCK_DIM, ExtractedKernel, compile_units, extract_source
from ..generators import GENERATOR_VERSION, generate
from ..spec import KernelSpec
from ..validate.execute import execute_specs, test_vectors
from .config import ProduceConfig, versions


@dataclass
class SlotOutcome:
    slot: int
    category: str
    row: dict | None = None  # an accepted pair (dedup happens later, in slot order)
    reject: dict | None = None


@dataclass
class BatchResult:
    batch: int
    outcomes: list[SlotOutcome]
    preambles: dict[str, str] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    worker_rss_mb: float = 0.0  # resident memory of the process that ran the batch, at its end


def _hash(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode())


def reject_record(slot: int, spec: KernelSpec | None, category: str, reason: str, detail: str, log: str = "") -> dict:
    return {
        "slot": slot,
        "category": category,
        "index": spec.index if spec else None,
        "kernel_name": spec.kernel_name if spec else None,
        "reason": reason,
        "detail": detail,
        "log": log,
        "python_source": spec.python_source if spec else None,
    }


def run_batch(config: ProduceConfig, batch: int, skip_categories: Collection[str] = (), slots: Sequence[int] | None = None) -> BatchResult:
    """Run every slot of ``batch`` (or of ``slots``, a part of it) whose category is not in
    ``skip_categories``."""
    warp_version = versions()["warp"]
    stages = {"generate": 0.0, "extract": 0.0, "compile": 0.0, "execute": 0.0}
    result = BatchResult(batch, [], stage_seconds=stages)
    live: list[tuple[SlotOutcome, KernelSpec, ExtractedKernel, float]] = []
    batch_slots = config.batch_slots(batch)
    if slots is None:
        slots = batch_slots
    elif any(s not in batch_slots for s in slots):
        raise ValueError(f"slots {slots[0]}..{slots[-1]} are not all in batch {batch}")

    crash_slots = _injected_crash_slots()
    for slot in slots:
        if slot in crash_slots:
            os.kill(os.getpid(), signal.SIGSEGV)
        category, index = config.slot(slot)
        if category in skip_categories:
            continue
        outcome = SlotOutcome(slot, category)
        result.outcomes.append(outcome)
        t0 = time.perf_counter()
        try:
            spec = generate(category, config.seed, index)
        except Exception as exc:  # noqa: BLE001 - a generator bug rejects one slot, not the run
            outcome.reject = reject_record(slot, None, category, "generator_error", f"{type(exc).__name__}: {exc}")
            continue
        t1 = time.perf_counter()
        report = extract_source(spec.python_source, block_dim=spec.block_dim or DEFAULT_BLOCK_DIM, arch=config.arch)
        t2 = time.perf_counter()
        stages["generate"] += t1 - t0
        stages["extract"] += t2 - t1
        kernel = next((k for k in report.kernels if k.name == spec.kernel_name), None)
        if report.errors or kernel is None:
            detail = "; ".join(f"line {e.line}: {e.message}" for e in report.errors) or f"no kernel named {spec.kernel_name}"
            outcome.reject = reject_record(slot, spec, category, "codegen_error", detail)
            continue
        live.append((outcome, spec, kernel, (t2 - t0) * 1000.0))

    compile_ms = [0.0] * len(live)
    status = "skipped"
    if not config.fast and live:
        t0 = time.perf_counter()
        compiled = compile_units([k for _, _, k, _ in live], arch=config.arch)
        stages["compile"] += time.perf_counter() - t0
        status = "ok"
        kept = []
        for item, res in zip(live, compiled):
            if res.ok:
                kept.append(item)
                compile_ms[len(kept) - 1] = res.time_ms
            else:
                outcome, spec = item[0], item[1]
                outcome.reject = reject_record(outcome.slot, spec, spec.category, "compile_error", res.log.splitlines()[0] if res.log else "", res.log)
        live = kept
        compile_ms = compile_ms[: len(live)]

    vectors: list[dict | None] = [None] * len(live)
    if not config.fast and live:
        t0 = time.perf_counter()
        runs = execute_specs([spec for _, spec, _, _ in live])
        elapsed = time.perf_counter() - t0
        stages["execute"] += elapsed
        kept, kept_ms = [], []
        for item, ms, run in zip(live, compile_ms, runs):
            outcome, spec = item[0], item[1]
            if run.ok:
                vectors[len(kept)] = test_vectors(spec, run)
                kept.append(item)
                kept_ms.append(ms)
            else:
                outcome.reject = reject_record(outcome.slot, spec, spec.category, run.reason or "execution_error", run.detail)
        live, compile_ms = kept, kept_ms
        share = elapsed * 1000.0 / max(len(runs), 1)
    else:
        share = 0.0

    for (outcome, spec, kernel, gen_ms), ms, tv in zip(live, compile_ms, vectors):
        preamble_hash = _hash(kernel.preamble)
        result.preambles.setdefault(preamble_hash, kernel.preamble)
        outcome.row = build_row(config, batch, spec, kernel, preamble_hash, tv, status, round(gen_ms + ms + share, 3), round(ms, 3), warp_version)
    result.worker_rss_mb = _rss_mb()
    return result


CRASH_ENV = "CUDAGEN_TEST_CRASH_SLOTS"


def _injected_crash_slots() -> frozenset[int]:
    """Fault injection for tests: slots (comma-separated in $CUDAGEN_TEST_CRASH_SLOTS) whose
    run kills the worker the way a kernel crashing native code does."""
    value = os.environ.get(CRASH_ENV, "")
    return frozenset(int(s) for s in value.split(",") if s.strip())


def merge_results(batch: int, parts: Iterable[BatchResult]) -> BatchResult:
    """One result from results of parts of ``batch`` (outcomes in slot order)."""
    merged = BatchResult(batch, [], stage_seconds={"generate": 0.0, "extract": 0.0, "compile": 0.0, "execute": 0.0})
    for part in parts:
        merged.outcomes += part.outcomes
        merged.preambles.update(part.preambles)
        for stage, seconds in part.stage_seconds.items():
            merged.stage_seconds[stage] = merged.stage_seconds.get(stage, 0.0) + seconds
        merged.worker_rss_mb = max(merged.worker_rss_mb, part.worker_rss_mb)
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
    vectors: dict | None,
    compile_status: str,
    generation_ms: float,
    compile_ms: float,
    warp_version: str,
) -> dict:
    """A dataset row (columns: dataset/schema.py)."""
    python_hash, shape_hash = canonical.canonical_hashes(spec.python_source)
    return {
        "id": python_hash,
        "kernel_name": spec.kernel_name,
        "category": spec.category,
        "python_source": spec.python_source,
        "cuda_forward": kernel.forward,
        "cuda_backward": kernel.backward,
        "metadata": {
            "device": "cuda",
            "has_backward": bool(kernel.backward),
            "forward_lines": kernel.forward.count("\n"),
            "backward_lines": kernel.backward.count("\n"),
            "generation_time_ms": generation_ms,
            "seed": config.seed,
            "batch": batch,
            "index": spec.index,
        },
        "difficulty": spec.difficulty,
        "features": list(spec.features),
        "device_functions": kernel.device_functions,
        "preamble_hash": preamble_hash,
        "arg_specs": orjson.dumps([a.to_dict() for a in spec.args]).decode(),
        "launch_dim": list(spec.launch_dim),
        "block_dim": spec.block_dim,
        "test_vectors": orjson.dumps(vectors).decode() if vectors is not None else "",
        "python_hash": python_hash,
        "shape_hash": shape_hash,
        "cuda_hash": _hash(kernel.forward + kernel.backward),
        "compile": {"arch": config.arch, "status": compile_status, "time_ms": compile_ms},
        "warp_version": warp_version,
        "generator_version": GENERATOR_VERSION,
    }
