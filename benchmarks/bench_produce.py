"""Producer benchmark: end-to-end pairs/s at both compile levels, overhead over the floor,
--fast over its floor, validate vs produce, worker RSS; every ratio from one run.

    python benchmarks/bench_produce.py [--count 1000] [--ptx-count 1000] [--fast-count 5000]
                                       [--workers 2] [--categories all|a,b,...] [--rss-pairs 0]
                                       [--skip-floor] [--rows-floor] [--skip-validate]

Measured in this run, each from a cold Warp kernel cache, --workers processes:
- --fast (generate, extract, dedup): pairs/s, and its floor: bare Warp codegen of the
  same kernels (benchmarks/bench_extract.py); overhead target <= 25%;
- full validation at the default level (generate, extract, NVRTC front end, CPU
  execution, gradient check): pairs/s (target >= 25 on 2 cores, all 15 categories), and
  its floor: Warp codegen + batched front-end NVRTC + batched CPU build and run + the
  gradient check of the same kernels; overhead = full / floor - 1 (target <= 25%);
- `cudagen validate` of that dataset with the same workers: rows/s against the
  produce pairs/s (target: validate at least as fast);
- full validation with --compile ptx (Warp's full compile), --ptx-count pairs:
  frontend / ptx pairs/s (target >= 3x), with everything on and with the gradient check's
  time taken out of both runs (its seconds summed over workers / workers: the ratio the
  issue asks for "gradient check off"; there is no switch that turns it off);
- peak worker RSS over the run (and over --rss-pairs more pairs if given; target <= 600 MB
  after 20,000).
- with --rows-floor, the rows' floor: the pipeline's own worker function (work.run_batch) on
  the slots the run consumed, one part per batch, no scheduler or commit (the floor above
  leaves out the work every row needs: making the kernel, the size search, test vectors,
  hashes); its rows are compared with the run's, and the breakdown shows the pipeline's
  distance to it part by part, and the box's speed in each phase (same_work_ratio).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import orjson

from cudagen_data.execution import REFERENCE_SPAN as REFERENCE


@dataclass
class Measured:
    """One producer run: wall time, stats, and what the breakdown needs."""

    seconds: float
    stats: dict
    rss_mb: float
    started: float  # time.monotonic() when produce() was called
    ended: float
    driver_cpu: float  # the driver's own CPU seconds (this process, all threads)
    results: list = field(default_factory=list)  # committed BatchResults, in order
    events: list = field(default_factory=list)  # the driver's scheduler events (produce_timeline.py)
    config: object = None  # the run's ProduceConfig


def run(
    count: int,
    categories: tuple[str, ...],
    workers: int,
    fast: bool,
    batch_size: int,
    out: Path,
    level: str = "frontend",
) -> Measured:
    import produce_timeline

    from cudagen_data.pipeline.producer import produce

    results = []
    config = bench_config(count, categories, fast, batch_size, level)
    cpu0, started, t0 = time.process_time(), time.monotonic(), time.perf_counter()
    with produce_timeline.recording() as events:
        result = produce(config, out, workers=workers, progress=False, on_batch=results.append)
    seconds, ended = time.perf_counter() - t0, time.monotonic()
    rss = max((r.worker_rss_mb for r in results), default=0.0)
    return Measured(seconds, result.stats, rss, started, ended, time.process_time() - cpu0, results, events, config)


def bench_config(count: int, categories: tuple[str, ...], fast: bool, batch_size: int, level: str = "frontend"):
    """The ProduceConfig of a benchmark run (seed 1)."""
    from cudagen_data.pipeline.config import ProduceConfig

    return ProduceConfig(
        count=count, categories=categories, seed=1, fast=fast, batch_size=batch_size, compile_level=level
    )


class FloorItem(NamedTuple):
    """A kernel the run tried, as the floor handles it (floor_items)."""

    python_source: str
    block_dim: int  # the block dim its CUDA was emitted at by the extract stage (a tile kernel's own)
    compiled: bool  # the pipeline NVRTC-checked it (False: rejected by the extract stage, e.g. too long)
    spec: object | None  # the KernelSpec to build and run (a row, or a reject of a run stage), else None
    sizes: list | None  # its other sizes: (label, spec at that size, recorded (inputs, output gradients))


def floor_kernels(chunk: list[FloorItem]) -> tuple[list, list]:
    """(every kernel of ``chunk`` Warp emits CUDA for, those of them the pipeline NVRTC-checks),
    each emitted as the extract stage emits it: at its item's block dim.  A tile kernel's
    CUDA differs by its ``WP_TILE_BLOCK_DIM`` and NVRTC checks each block dim in a unit of its
    own (extract/nvrtc.py groups by preamble): emitted at the default, the 273 of 1,068
    kernels a 1,000-pair run tried at another block dim would share one unit with the rest."""
    from cudagen_data.extract import extract_kernels

    emitted, compiled = [], []
    for item in chunk:
        try:
            kernels = extract_kernels(item.python_source, block_dim=item.block_dim)
        except Exception:  # noqa: BLE001 - the floor skips what Warp rejects
            continue
        emitted += kernels
        compiled += kernels if item.compiled else []
    return emitted, compiled


def _floor_worker(args) -> dict:
    """The work no pipeline can skip, for a share of the kernels: Warp codegen of every
    kernel tried and batched NVRTC at ``level`` of those the pipeline checked (each at its
    row's block dim, floor_kernels), batched CPU build and run (forward and
    backward, seeded inputs, at every recorded size, with the inputs-that-matter probe)
    of every kernel that passed the compile check, and its gradient check (finite
    differences, issue #12, at every size), as the pipeline's stages call them.  Returns its wall and CPU seconds and
    its spans (the same names as the pipeline's, cudagen_data/spans.py)."""
    items, arch, batch_size, level = args  # items: FloorItem
    from cudagen_data import spans, warp_boundary
    from cudagen_data.execution import SizedRun, execute_specs
    from cudagen_data.extract import compile_units
    from cudagen_data.gradcheck import Point, check_gradients, check_own_build
    from cudagen_data.sizes import guard_factor, other_sizes

    warp_boundary.warp()
    spans.take()
    t0, cpu0 = time.perf_counter(), time.process_time()
    parts = 0
    for i in range(0, len(items), batch_size):
        parts += 1
        chunk = items[i : i + batch_size]
        with spans.span("extract"):
            _, kernels = floor_kernels(chunk)
        if kernels:
            with spans.span("compile"):
                compile_units(kernels, arch=arch, level=level)
        specs = [item.spec for item in chunk if item.spec is not None]
        kept_sizes = [item.sizes for item in chunk if item.spec is not None]
        if specs:
            # a kernel without a float64 twin is checked on the kernel the execution built,
            # as the pipeline does (gradcheck.check_own_build): building it twice is not floor work
            own = {}

            def check_own(i, kernel, run, specs=specs, own=own):
                with spans.span("execute.own_build_check"):
                    own[i] = check_own_build(specs[i], kernel, Point.of(run))

            more = [
                [SizedRun(label, sized, guard=guard) for label, sized, guard, _ in other_sizes(spec)]
                if sizes is None
                else [SizedRun(label, sized, given, guard_factor(spec, sized)) for label, sized, given in sizes]
                for spec, sizes in zip(specs, kept_sizes, strict=True)
            ]
            with spans.span("execute"):
                runs = execute_specs(
                    specs, more=more, probe_inputs=True, reference_checks={}, on_run=check_own
                )  # no NumPy reference checks: not floor work
            ran = [
                (spec, run)
                for i, (spec, run) in enumerate(zip(specs, runs, strict=True))
                if run.ok and own.get(i) is None
            ]
            if ran:
                with spans.span("gradcheck"):
                    check_gradients([spec for spec, _ in ran], [run for _, run in ran])
    seconds, cpu_seconds, counts = spans.take()
    return {
        "pid": os.getpid(),
        "wall": time.perf_counter() - t0,
        "cpu": time.process_time() - cpu0,
        "parts": parts,
        "spans": seconds,
        "cpu_spans": cpu_seconds,
        "counts": counts,
    }


def pooled(worker, sources: list, workers: int, *extra) -> tuple[float, list]:
    """Wall time of ``worker((share, *extra))`` over ``workers`` spawned processes, each
    given every ``workers``-th source, and what each returned; process start-up is
    outside the timing.  A worker that dies (a kernel corrupting the heap, as Warp's CPU
    backend can) raises BrokenProcessPool rather than leaving the benchmark waiting."""
    shares = [sources[i::workers] for i in range(workers)]
    return _timed_map(worker, [(share, *extra) for share in shares], workers, extra)


def _timed_map(worker, calls: list, workers: int, extra: tuple) -> tuple[float, list]:
    """``worker`` over ``calls`` on ``workers`` spawned processes, each handed the next call
    when free, NumPy's BLAS in each held to its share of the cores as in the pipeline's
    workers; the wall time excludes the processes' start-up (one empty call each first)."""
    import concurrent.futures as cf

    from cudagen_data.pipeline.pool import blas_threads, limit_blas_threads

    spawn = multiprocessing.get_context("spawn")
    threads = (blas_threads(workers),)
    with cf.ProcessPoolExecutor(workers, mp_context=spawn, initializer=limit_blas_threads, initargs=threads) as pool:
        list(pool.map(worker, [([], *extra)] * workers))
        t0 = time.perf_counter()
        returned = list(pool.map(worker, calls))
        return time.perf_counter() - t0, returned


def pooled_parts(worker, items: list, workers: int, part: int, *extra) -> tuple[float, list]:
    """Like :func:`pooled`, but ``items`` cut into parts of ``part`` in order, each part
    handed to whichever process is free (as the pipeline hands out its parts), so that no
    process idles while another works through a share of heavy kernels; what each process
    returned, its parts' figures summed (``worker`` returns a dict of figures and spans)."""
    calls = [(items[i : i + part], *extra) for i in range(0, len(items), part)]
    seconds, returned = _timed_map(worker, calls, workers, extra)
    return seconds, by_process(returned)


def no_figures(pid: int) -> dict:
    """A process's figures before any part (what a floor's worker returns, summed by by_process)."""
    return {"pid": pid, "wall": 0.0, "cpu": 0.0, "parts": 0, "spans": {}, "cpu_spans": {}, "counts": {}, "rows": {}}


def by_process(returned: list[dict]) -> list[dict]:
    """Parts' figures (dicts of wall, cpu, parts, spans ...) summed per process; ``rows``
    (slot -> digest, the rows' floor's) gathered."""
    by_pid: dict[int, dict] = {}
    for r in returned:
        into = by_pid.setdefault(r["pid"], no_figures(r["pid"]))
        for key in ("wall", "cpu", "parts"):
            into[key] += r[key]
        for key in ("spans", "cpu_spans", "counts"):
            for name, value in r[key].items():
                into[key][name] = into[key].get(name, 0) + value
        into["rows"].update(r.get("rows", {}))
    return list(by_pid.values())


# --------------------------------------------------------------------------- the rows' floor


def run_rows(out: Path, config) -> dict[int, str]:
    """Slot -> row_digest of every row a finished run's folder holds (read as the row contract)."""
    from cudagen_data.contracts.manifest import SPLITS
    from cudagen_data.dataset.store import DatasetFolder

    folder = DatasetFolder(out)
    return {
        config.slot_of(r.category, r.metadata.index): row_digest(r.to_dict())
        for split in SPLITS
        for r in folder.iter_rows(split)
    }


def consumed_slots(out: Path, config, rows: dict[int, str]) -> dict[int, list[int]]:
    """The slots a finished run consumed (each of its ``rows``, run_rows, and each reject of
    its folder: a slot run and dropped because its category was full is in neither), by batch."""
    from cudagen_data.contracts.reject import REJECTS_FILE, Reject
    from cudagen_data.dataset.store import DatasetFolder

    slots = set(rows) | {Reject(**r).slot for r in DatasetFolder(out).iter_jsonl(REJECTS_FILE)}
    by_batch: dict[int, list[int]] = {}
    for slot in sorted(slots):
        by_batch.setdefault(slot // config.batch_size, []).append(slot)
    return by_batch


def row_digest(row: dict) -> str:
    """A row's bytes, timing fields aside, as a hash (the rows' floor's rows against the run's)."""
    import xxhash

    from cudagen_data.contracts.row import strip_timing

    return xxhash.xxh64_hexdigest(orjson.dumps(strip_timing(row), option=orjson.OPT_SORT_KEYS))


def _rows_floor_worker(args) -> dict:
    """The rows' floor, one batch: the pipeline's own worker function (``work.run_batch``:
    generate, extract, NVRTC, execute with the size search, gradient check, test vectors,
    rows) on the slots of ``batch`` the run consumed, in one part; what a producer without a
    scheduler would do for the same rows.  Returns its figures as the floor's worker does,
    and a digest of each row it made.  An empty call (the pool's warm-up) imports Warp only."""
    call, config = args
    from cudagen_data import warp_boundary
    from cudagen_data.pipeline.work import run_batch

    warp_boundary.warp()
    if not call:
        return no_figures(os.getpid())
    batch, slots = call
    result = run_batch(config, batch, slots=slots)
    (t,) = result.timings
    return {
        "pid": os.getpid(),
        "wall": t.ended - t.started,
        "cpu": t.cpu_seconds,
        "parts": 1,
        "spans": t.spans,
        "cpu_spans": t.cpu_spans,
        "counts": t.counts,
        "rows": {o.slot: row_digest(o.row.to_dict()) for o in result.outcomes if o.row is not None},
    }


def _rows_of(returned: list[dict]) -> dict[int, str]:
    return {slot: digest for r in returned for slot, digest in r.get("rows", {}).items()}


def rows_floor(out: Path, config, workers: int, rows: dict[int, str]) -> tuple[float, list[dict], int]:
    """(wall seconds, figures per process, slots) of the rows' floor of the run in ``out``
    (its ``rows``: run_rows): each batch's consumed slots as one part, handed to whichever of
    ``workers`` processes is free (the pipeline's own process set-up: spawned, BLAS held to a
    share of the cores)."""
    by_batch = consumed_slots(out, config, rows)
    calls = [(batch, slots) for batch, slots in sorted(by_batch.items())]
    seconds, returned = _timed_map(_rows_floor_worker, [(c, config) for c in calls], workers, (config,))
    return seconds, by_process(returned), sum(len(s) for s in by_batch.values())


def pooled_seconds(worker, sources: list, workers: int, *extra) -> float:
    return pooled(worker, sources, workers, *extra)[0]


def _codegen_worker(args: tuple) -> float:
    from bench_extract import bare_codegen

    from cudagen_data import warp_boundary

    warp_boundary.warp()
    return bare_codegen(args[0])


def tried_sources(out: Path) -> list[str]:
    return [src for src, _ in tried_items(out)]


def tried_items(out: Path) -> list[tuple[str, dict | None]]:
    """(python_source, row) of every accepted pair, (python_source, None) of every reject."""
    items = []
    for p in sorted((out / "jsonl").glob("*.jsonl")) + [out / "rejects.jsonl"]:
        for line in p.read_bytes().splitlines():
            record = orjson.loads(line)
            if record.get("python_source"):
                items.append((record["python_source"], record if p.name != "rejects.jsonl" else None))
    return items


RUN_STAGES = ("execute", "gradcheck")  # a kernel rejected here was built and run by the pipeline: so by the floor
BEFORE_COMPILE = ("generate", "extract")  # a kernel rejected here was never NVRTC-checked: nor is it by the floor


def floor_items(out: Path, seed: int = 1) -> list[FloorItem]:
    """Every kernel the run tried, as the floor handles it: each row, built and run at the
    other sizes its test vectors record (the sizes the pipeline kept: the floor runs those,
    not the guesses the pipeline tried and dropped, whose NumPy reference checks are not
    floor work), each as (label, spec at that size, the set's recorded (inputs, output
    gradients)): the floor runs and checks what the row holds (a set's spec alone would draw
    a size argument such as a matrix's column count at the row's own size, not the set's:
    less work than the row's run, 16x less for a 257-row gemm); and each reject, regenerated
    from its slot (its block dim, and its spec where a run stage rejected it: the pipeline
    built and ran it, so does the floor, at sizes.py's first guesses).  A reject of the
    extract stage (too long) is emitted but not compiled, as in the pipeline; a duplicate
    (the producer's dedup, after the workers) is compiled but not run: a pipeline that knew
    could skip its run."""
    from cudagen_data.contracts.read import row_to_spec
    from cudagen_data.contracts.reject import RejectReason
    from cudagen_data.contracts.row import row_from_dict
    from cudagen_data.contracts.test_vectors import TestVectors
    from cudagen_data.extract import DEFAULT_BLOCK_DIM
    from cudagen_data.generators import generate

    items = []
    for p in sorted((out / "jsonl").glob("*.jsonl")):
        for r in map(row_from_dict, map(orjson.loads, p.read_bytes().splitlines())):
            spec = row_to_spec(r)
            kept = TestVectors.from_json(r.test_vectors).sets()[1:] if r.test_vectors else []
            sizes = []
            for v in kept:
                d = v.decoded()
                sizes.append((v.size, v.sized_spec(spec), (d["inputs"], d["output_grads"])))
            items.append(FloorItem(r.python_source, spec.block_dim or DEFAULT_BLOCK_DIM, True, spec, sizes))
    for line in (out / "rejects.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if not r.get("python_source"):
            continue
        reason = RejectReason(r["reason"])
        spec = generate(r["category"], seed, r["index"])
        assert spec.python_source == r["python_source"], "a reject's regenerated source differs"
        run = reason.stage in RUN_STAGES and reason != RejectReason.WORKER_CRASH
        compiled = reason.stage not in BEFORE_COMPILE
        block_dim = spec.block_dim or DEFAULT_BLOCK_DIM
        items.append(FloorItem(r["python_source"], block_dim, compiled, spec if run else None, None))
    return items


# --------------------------------------------------------------------------- the breakdown

# (label, pipeline part, floor part, kind): a part is a span name (cudagen_data/spans.py), a
# sum of spans ("a-b+c"), or a lane part computed by ``lanes``; None: not in that run.  kind
# ROW: work each row needs that the floor leaves out by definition (making the kernel, its
# reference check, its size search, its test vectors and hash); SHARED: work both do, what the
# pipeline does above the floor there is its own (more parts, each with fixed costs); OWN: the
# pipeline's alone (start-up, idle, speculation).
ROW, SHARED, OWN = "row work", "shared", "own"
PARTS = (
    ("start-up: driver set-up, process spawn, Python imports", "@spawn", None, OWN),
    ("start-up: importing and initialising Warp", "@warp_init", None, OWN),
    ("idle before the first part", "@idle_first", None, OWN),
    ("generate", "generate", None, ROW),
    ("codegen (Warp CUDA codegen, length cap)", "extract", "extract", SHARED),
    ("NVRTC front end", "compile", "compile", SHARED),
    ("CPU build: first of each process (clang PCH)", "first_cpu_build", "first_cpu_build", SHARED),
    ("CPU build: the other execute builds", "execute.build-first_cpu_build", "execute.build-first_cpu_build", SHARED),
    (
        "CPU run (forward, backward, checks), failed guesses aside",
        f"execute.run-execute.run.failed_size-{REFERENCE}+{REFERENCE}.failed_size",
        "execute.run-execute.run.failed_size",
        SHARED,
    ),
    ("CPU run: NumPy reference checks of the runs kept", f"{REFERENCE}-{REFERENCE}.failed_size", None, ROW),
    ("CPU run: guessed sizes that failed (the size search)", "execute.run.failed_size", "execute.run.failed_size", ROW),
    ("test vectors (encode a run for its row)", "execute.vectors", None, ROW),
    ("gradient check on execute's build", "execute.own_build_check", "execute.own_build_check", SHARED),
    (
        "execute: loading sources, bisection, rest",
        "execute-execute.build-execute.run-execute.vectors-execute.own_build_check",
        "execute-execute.build-execute.run-execute.own_build_check",
        SHARED,
    ),
    ("gradient check: float64 twin builds", "gradcheck.build", "gradcheck.build", SHARED),
    ("gradient check: probes", "gradcheck.probe", "gradcheck.probe", SHARED),
    (
        "gradient check: loading twins, rest",
        "gradcheck-gradcheck.build-gradcheck.probe",
        "gradcheck-gradcheck.build-gradcheck.probe",
        SHARED,
    ),
    ("rows: canonical hashes", "rows.hash", None, ROW),
    ("rows: the rest (Row objects, preamble hashes)", "rows-rows.hash", None, ROW),
    ("in a part, outside the above", "@part_rest", "@part_rest", SHARED),
    ("parts finished but never used (the run was full first)", "@discarded", None, OWN),
    ("between parts: pickling a result, IPC, waiting", "@between", None, OWN),
    ("after its last part: last commit, Parquet, card; killed speculative part", "@tail", "@tail", OWN),
)
STAGE_SPANS = ("generate", "extract", "compile", "execute", "gradcheck", "rows")


SAME_WORK = "gradcheck.build"  # the float64 twin builds: the same kernels built the same way in every phase


def same_work_ratio(pipe_cpu: dict, other_cpu: dict) -> float | None:
    """The pipeline's CPU seconds over another phase's for the same work (SAME_WORK): above
    1, this box ran the pipeline's phase slower (its speed moves between the phases of one
    run by several percent: other tenants); None where a phase did none of it."""
    if pipe_cpu.get(SAME_WORK, 0.0) <= 0 or other_cpu.get(SAME_WORK, 0.0) <= 0:
        return None
    return pipe_cpu[SAME_WORK] / other_cpu[SAME_WORK]


def _value(name: str, found: dict) -> float:
    """The seconds of ``name``: a span, or spans added and taken away ("a-b+c")."""
    return sum(
        (-1.0 if sign == "-" else 1.0) * found.get(span, 0.0) for sign, span in re.findall(r"([+-]?)([^+-]+)", name)
    )


def lanes(m: Measured) -> tuple[dict[str, float], dict[str, float], dict]:
    """The pipeline's worker-seconds by part, wall and CPU: every worker's time from
    produce() to the run's end, cut at its parts (PartTiming: monotonic stamps and spans)."""
    timings = [t for r in m.results for t in r.timings]
    discarded = list(getattr(m.events, "discarded", ()))  # finished, never consumed (produce_timeline.Events)
    unused = {id(t) for t in discarded}
    by_pid: dict[int, list] = {}
    for t in timings + discarded:
        by_pid.setdefault(t.pid, []).append(t)
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def add(into: dict, name: str, seconds: float) -> None:
        into[name] = into.get(name, 0.0) + seconds

    for parts in by_pid.values():
        parts.sort(key=lambda t: t.started)
        init = next((t.worker_init for t in parts if t.worker_init), None)
        if init is not None:
            add(wall, "@spawn", init[0] - m.started)
            add(wall, "@warp_init", init[1])
            add(cpu, "@warp_init", init[2])  # the process's CPU from its start to the end of its initialiser
            add(wall, "@idle_first", parts[0].started - init[0] - init[1])
        else:  # a recycled or Ray worker: its start-up is not known apart
            add(wall, "@spawn", parts[0].started - m.started)
        for prev, nxt in zip(parts, parts[1:], strict=False):
            add(wall, "@between", nxt.started - prev.ended)
        add(wall, "@tail", m.ended - parts[-1].ended)
        for t in parts:
            if id(t) in unused:  # its whole time, in a line of its own
                add(wall, "@discarded", t.ended - t.started)
                add(cpu, "@discarded", t.cpu_seconds)
                add(wall, "@discarded_parts", 1)
                continue
            for name, sec in t.spans.items():
                add(wall, name, sec)
            for name, sec in t.cpu_spans.items():
                add(cpu, name, sec)
            add(wall, "@part_rest", (t.ended - t.started) - sum(t.spans.get(n, 0.0) for n in STAGE_SPANS))
            add(cpu, "@part_rest", t.cpu_seconds - sum(t.cpu_spans.get(n, 0.0) for n in STAGE_SPANS))
            add(wall, "@part_wall", t.ended - t.started)
            add(cpu, "@part_wall", t.cpu_seconds)
            add(wall, "@slots", t.slots)
            add(wall, "@parts", 1)
            add(wall, "@cpu_builds", t.counts.get("cpu_build", 0) + t.counts.get("first_cpu_build", 0))
    return wall, cpu, {"processes": len(by_pid), "timings": timings, "all_timings": timings + discarded}


def _fixed_cost(timings: list, span: str, per: str) -> float | None:
    """CPU seconds a call of ``span`` costs whatever its size: the intercept of its CPU
    seconds against the count of ``per`` spans, over the parts (None: too few parts)."""
    import numpy as np

    pts = [
        (t.counts.get(per, 0), t.cpu_spans[span])
        for t in timings
        if span in t.cpu_spans and "first_cpu_build" not in t.spans and t.counts.get(span) == 1
    ]
    if len(pts) < 4 or len({x for x, _ in pts}) < 2:
        return None
    x, y = np.array(pts, dtype=float).T
    _, intercept = np.polyfit(x, y, 1)
    return float(intercept)


def _fmt(value: float | None, width: int = 9) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.1f}"


def floor_lanes(returned: list, wall_seconds: float, workers: int) -> tuple[dict[str, float], dict[str, float]]:
    """A floor's worker-seconds by part, wall and CPU, from its processes' figures
    (by_process): its spans, the rest of its parts, and each process's idle time once it had
    no part left (``@tail``: the floor's wall time less the process's parts; the whole of
    it for a process that got no part)."""
    wall: dict[str, float] = {"@tail": max(workers - len(returned), 0) * wall_seconds} if returned else {}
    cpu: dict[str, float] = {}
    for r in returned:
        for name, sec in r["spans"].items():
            wall[name] = wall.get(name, 0.0) + sec
        for name, sec in r["cpu_spans"].items():
            cpu[name] = cpu.get(name, 0.0) + sec
        wall["@part_rest"] = wall.get("@part_rest", 0.0) + r["wall"] - sum(r["spans"].get(n, 0.0) for n in STAGE_SPANS)
        cpu["@part_rest"] = cpu.get("@part_rest", 0.0) + r["cpu"] - sum(r["cpu_spans"].get(n, 0.0) for n in STAGE_SPANS)
        wall["@tail"] = wall.get("@tail", 0.0) + wall_seconds - r["wall"]
    return wall, cpu


def print_breakdown(
    m: Measured,
    workers: int,
    floor_wall: float | None,
    floor_returned: list,
    kernels_tried: int,
    rows_wall: float | None = None,
    rows_returned: list = (),
) -> None:
    """Seconds per part summed over workers, the pipeline's beside the floor's: wall
    seconds (adding up to workers x wall time on each side) and CPU seconds (what a loaded
    machine leaves comparable).  ``floor_wall`` None (--skip-floor): the pipeline's alone,
    its floor columns 0 (a scaling run at 1 worker would take twice as long with its floor).
    ``rows_wall`` (--rows-floor): the rows' floor's columns too, its parts named as the
    pipeline's (it runs the pipeline's worker function), and the pipeline's distance to it."""
    floor_wall = floor_wall or 0.0
    pipe, pipe_cpu, info = lanes(m)
    floor, floor_cpu = floor_lanes(floor_returned, floor_wall, workers)
    rows, rows_cpu = floor_lanes(rows_returned, rows_wall or 0.0, workers)
    with_rows = rows_wall is not None
    pipe_total, floor_total = workers * m.seconds, workers * floor_wall  # 0 without a floor
    rows_total = workers * (rows_wall or 0.0)
    print(
        f"breakdown: seconds by part, summed over {workers} workers; wall: pipeline {workers} x {m.seconds:.1f} s"
        + (
            f" = {pipe_total:.1f}, floor {workers} x {floor_wall:.1f} s = {floor_total:.1f}"
            if floor_returned
            else f" = {pipe_total:.1f}; floor not measured (--skip-floor): its columns are 0"
        )
        + (f", rows' floor {workers} x {rows_wall:.1f} s = {rows_total:.1f}" if with_rows else "")
    )
    print(
        f"  {'part':<58}{'wall:pipe':>10}{'rows' if with_rows else '':>{9 if with_rows else 0}}{'floor':>9}"
        f"{'CPU:pipe':>10}{'rows' if with_rows else '':>{9 if with_rows else 0}}{'floor':>9}{'pipe-floor':>11}"
        + (f"{'pipe-rows':>10}" if with_rows else "")
    )
    sums = [0.0] * 6  # wall pipe, rows, floor; CPU pipe, rows, floor
    above = {ROW: 0.0, SHARED: 0.0, OWN: 0.0}  # wall worker-seconds above the floor, by kind
    above_rows = {ROW: 0.0, SHARED: 0.0, OWN: 0.0}  # above the rows' floor

    def cpu_of(name, found):  # a lane part the CPU side does not have (waiting, idle) is None, not 0
        return _value(name, found) if name and (name in found or not name.startswith("@")) else None

    for label, pname, fname, kind in PARTS:
        values = [
            _value(pname, pipe) if pname else 0.0,
            _value(pname, rows) if pname else 0.0,
            _value(fname, floor) if fname else 0.0,
            cpu_of(pname, pipe_cpu),
            cpu_of(pname, rows_cpu),
            cpu_of(fname, floor_cpu),
        ]
        sums = [a + (b or 0.0) for a, b in zip(sums, values, strict=True)]
        above[kind] += values[0] - values[2]
        above_rows[kind] += values[0] - values[1]
        diff = None if values[3] is None else values[3] - (values[5] or 0.0)
        diff_rows = None if values[3] is None else values[3] - (values[4] or 0.0)
        print(
            f"  {label:<58}{_fmt(values[0], 10)}{_fmt(values[1]) if with_rows else ''}"
            f"{_fmt(values[2] if fname else None)}{_fmt(values[3], 10)}{_fmt(values[4]) if with_rows else ''}"
            f"{_fmt(values[5])}{_fmt(diff, 11)}{_fmt(diff_rows, 10) if with_rows else ''}"
        )
    shown = [0, 1, 2, 3, 4, 5] if with_rows else [0, 2, 3, 5]
    widths = {0: 10, 1: 9, 2: 9, 3: 10, 4: 9, 5: 9}
    print(f"  {'sum of the parts':<58}" + "".join(f"{sums[i]:>{widths[i]}.1f}" for i in shown))
    print(
        f"  {'unaccounted (workers x wall - sum)':<58}{pipe_total - sums[0]:>10.1f}"
        + (f"{rows_total - sums[1]:>9.1f}" if with_rows else "")
        + f"{floor_total - sums[2]:>9.1f}   ({info['processes']} worker processes reported)"
    )
    if floor_total:
        print(
            f"  above the floor, wall worker-s: {sums[0] - sums[2]:+.1f} = row work the floor leaves out"
            f" {above[ROW]:+.1f} + more in the work both do {above[SHARED]:+.1f}"
            f" + the pipeline's own {above[OWN]:+.1f};"
            f" pipeline / floor = 1 {above[ROW] / floor_total:+.3f} (row work)"
            f" {(above[SHARED] + above[OWN]) / floor_total:+.3f} (the pipeline's: more parts, start-up, idle)"
        )
    if with_rows and rows_total:
        print(
            f"  above the rows' floor, wall worker-s: {sums[0] - sums[1]:+.1f} = in the row work {above_rows[ROW]:+.1f}"
            f" + in the work both floors do {above_rows[SHARED]:+.1f} + the pipeline's own {above_rows[OWN]:+.1f};"
            f" pipeline / rows' floor = {pipe_total / rows_total:.3f}"
        )
    phases = (("floor", floor_cpu), ("rows' floor", rows_cpu))
    speeds = [(name, r) for name, other in phases if (r := same_work_ratio(pipe_cpu, other)) is not None]
    if speeds and floor_total:
        ratios = {"floor": pipe_total / floor_total, "rows' floor": pipe_total / rows_total if rows_total else None}
        print(
            f"  the same work in each phase ({SAME_WORK}: the same kernels, the same code), pipeline's CPU over the "
            + ", ".join(f"{name}'s {r:.3f}" for name, r in speeds)
            + " (how much slower the box ran the pipeline's phase); the ratios with that taken out: "
            + ", ".join(f"pipeline / {name} {ratios[name] / r:.3f}" for name, r in speeds if ratios[name])
        )
    part_cpu, part_wall = pipe_cpu.get("@part_wall", 0.0), pipe.get("@part_wall", 0.0)
    run_cpu = part_cpu + pipe_cpu.get("@warp_init", 0.0) + pipe_cpu.get("@discarded", 0.0) + m.driver_cpu
    f_cpu, f_wall = sum(r["cpu"] for r in floor_returned), sum(r["wall"] for r in floor_returned)
    print(
        f"  CPU / wall in parts: pipeline {part_cpu:.1f} / {part_wall:.1f} = {part_cpu / max(part_wall, 1e-9):.0%},"
        f" floor {f_cpu:.1f} / {f_wall:.1f} = {f_cpu / max(f_wall, 1e-9):.0%} (below 100%: other processes had"
        f" the cores); the driver's own CPU {m.driver_cpu:.1f} s, on the same cores"
    )
    print(
        f"  CPU seconds of the run, start-up, driver and unused parts included: pipeline {run_cpu:.1f}, floor"
        f" {f_cpu:.1f}; ratio {run_cpu / f_cpu if f_cpu else float('nan'):.2f} (what a loaded machine leaves"
        f" comparable; idle time aside)"
    )
    slots = pipe.get("@slots", 0)
    print(
        f"  parts run: pipeline {int(pipe.get('@parts', 0))} used ({slots / max(pipe.get('@parts', 1), 1):.0f} slots"
        f" each) + {int(pipe.get('@discarded_parts', 0))} finished and never used, "
        f"floor {sum(r['parts'] for r in floor_returned)}; CPU builds: pipeline {int(pipe.get('@cpu_builds', 0))}, "
        f"floor {sum(r['counts'].get('cpu_build', 0) + r['counts'].get('first_cpu_build', 0) for r in floor_returned)}"
    )
    build_fixed = _fixed_cost(info["timings"], "execute.build", "execute.run")
    nvrtc_fixed = _fixed_cost(info["timings"], "compile", "extract")
    if build_fixed is not None:
        print(f"  fixed CPU cost per part (intercept over parts): execute build {build_fixed:.2f} s", end="")
        print(f", NVRTC {nvrtc_fixed:.2f} s" if nvrtc_fixed is not None else "")
    if slots:
        wasted = slots - kernels_tried
        print(
            f"  slots run {slots:.0f}, consumed {kernels_tried}: {wasted:.0f} ({wasted / slots:.1%}) discarded"
            f" (category full), ~{pipe_cpu.get('@part_wall', 0) * wasted / slots:.1f} CPU-s"
        )
    t0 = time.perf_counter()
    for r in m.results:
        pickle.loads(pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL))
    print(
        f"  pickling the results (dumps + loads, timed after the run): {time.perf_counter() - t0:.2f} s "
        f"({sum(len(pickle.dumps(r)) for r in m.results) / 2**20:.1f} MB)"
    )
    first = min((t.ended for t in info["timings"]), default=m.started)
    print(f"  first part returned {first - m.started:.1f} s after produce() was called")
    print_longest_parts(m, info["timings"])


def print_longest_parts(m: Measured, timings: list, top: int = 3) -> None:
    """The parts that bound the run's wall time from below (a part runs on one worker:
    however many workers, the run lasts at least as long as its longest part, and a part
    at the head of the slot order holds the commit of every part after it), each with
    where its time went (its largest spans; execute.run holds execute.run.failed_size)."""
    for t in sorted(timings, key=lambda t: t.started - t.ended)[:top]:
        spans_ = {k: v for k, v in t.spans.items() if k not in ("execute", "gradcheck", "rows")}  # ones with parts
        big = ", ".join(f"{k} {v:.1f}" for k, v in sorted(spans_.items(), key=lambda kv: -kv[1])[:4])
        print(
            f"  a longest part: {t.ended - t.started:.1f} s wall ({t.slots} slots), from {t.started - m.started:.1f}"
            f" to {t.ended - m.started:.1f} s of the run's {m.seconds:.1f} s; largest spans (s): {big}"
        )


# --------------------------------------------------------------------------- first results


def first_results(count: int, workers: int, out: Path, timeout: float = 600.0) -> dict[str, float]:
    """Seconds from starting ``cudagen produce --count N --workers W`` (a fresh process, an
    empty folder, as a user types it) to its progress bar's first appearance, to its
    first move (a part consumed), and to its first committed batch (rows on disk,
    ``.cudagen/state.json``'s next_batch); then stops the run with Ctrl-C."""
    import re
    import signal
    import subprocess
    import threading

    cmd = [sys.executable, "-m", "cudagen_data.cli", "produce", "--count", str(count)]
    cmd += ["--workers", str(workers), "--output", str(out)]
    found: dict[str, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=os.environ.copy())

    def read_bar() -> None:
        text = b""
        while True:
            chunk = proc.stderr.read1(4096) if hasattr(proc.stderr, "read1") else proc.stderr.read(1)
            if not chunk:
                return
            text = (text + chunk)[-4096:]
            moves = [int(n) for n in re.findall(rb"\| *(\d+)/\d+ \[", text)]
            if moves and "bar shown" not in found:
                found["bar shown"] = time.perf_counter() - t0
            if any(n > 0 for n in moves) and "bar moved" not in found:
                found["bar moved"] = time.perf_counter() - t0

    reader = threading.Thread(target=read_bar, daemon=True)
    reader.start()
    state = out / ".cudagen" / "state.json"
    while time.perf_counter() - t0 < timeout and proc.poll() is None:
        try:
            if orjson.loads(state.read_bytes()).get("next_batch", 0) > 0:
                found["first batch committed"] = time.perf_counter() - t0
                break
        except (OSError, orjson.JSONDecodeError):
            pass
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(timeout=5)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--count", type=int, default=1000, help="full-validation pairs at the default level (0: skip the full runs)"
    )
    ap.add_argument("--ptx-count", type=int, default=1000, help="full-validation pairs with --compile ptx (0: skip)")
    ap.add_argument("--fast-count", type=int, default=5000, help="--fast pairs (0: skip)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--categories", default="all")
    ap.add_argument("--rss-pairs", type=int, default=0, help="also run this many more full pairs and report worker RSS")
    ap.add_argument("--skip-floor", action="store_true")
    ap.add_argument(
        "--rows-floor",
        action="store_true",
        help="also time the rows' floor: the pipeline's worker function on the slots the run consumed, one part per"
        " batch, no scheduler or commit (its rows compared with the run's)",
    )
    ap.add_argument("--skip-validate", action="store_true", help="do not time `cudagen validate` of the full run")
    ap.add_argument(
        "--first-results",
        action="store_true",
        help="time a fresh `cudagen produce --count COUNT` to its progress bar's first move and first committed batch",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        help="copy the full run's dataset folder here (to compare two versions' rows: benchmarks/compare_runs.py)",
    )
    args = ap.parse_args()
    if args.keep is not None and args.keep.exists():
        ap.error(f"--keep {args.keep}: already exists (the full run's folder is copied there after the run)")

    from cudagen_data.extract.levels import compiler_record
    from cudagen_data.generators import categories as all_categories

    cats = all_categories() if args.categories == "all" else tuple(args.categories.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="cudagen-bench-"))
    try:
        nvrtc = compiler_record(86, "frontend")["nvrtc_version"]
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, workers {args.workers}, categories {len(cats)}, "
            f"batch {args.batch_size}, NVRTC {nvrtc}"
        )
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.first_results:
            found = first_results(max(args.count, 1), args.workers, tmp / "first")
            print(
                f"first results of a fresh `cudagen produce --count {max(args.count, 1)} --workers {args.workers}`: "
                + ", ".join(f"{k} after {v:.1f} s" for k, v in found.items())
            )
        if args.fast_count > 0:
            fast = run(args.fast_count, cats, args.workers, True, args.batch_size, tmp / "fast")
            fast_s, fast_stats = fast.seconds, fast.stats
            fast_n = fast_stats["total_pairs"]
            print(
                f"--fast: {fast_n} pairs in {fast_s:.1f} s = {fast_n / fast_s:.0f} pairs/s; tried "
                f"{fast_stats['kernels_tried']} kernels"
            )
            print(f"        stage seconds (summed over workers): {fast_stats['stage_seconds']}")
            if not args.skip_floor:
                sources = tried_sources(tmp / "fast")
                cg_s = pooled_seconds(_codegen_worker, sources, args.workers)
                print(
                    f"floor:  bare Warp codegen of the same {len(sources)} kernels, {args.workers} processes: "
                    f"{cg_s:.1f} s = {fast_n / cg_s:.0f} pairs/s at most"
                )
                print(
                    f"        --fast / floor = {fast_s / cg_s:.2f} (overhead {fast_s / cg_s - 1:+.0%}, target <= "
                    "+25%: generation, canonical hashes, rows, writing, worker start-up)"
                )
        if args.count <= 0:
            return
        full = run(args.count, cats, args.workers, False, args.batch_size, tmp / "full")
        if args.keep is not None:
            shutil.copytree(tmp / "full", args.keep)
        full_s, stats, rss = full.seconds, full.stats, full.rss_mb
        n = stats["total_pairs"]
        full_rate = n / full_s
        print(
            f"full (--compile frontend): {n} pairs in {full_s:.1f} s = {full_rate:.1f} pairs/s (target >= 25); tried "
            f"{stats['kernels_tried']} kernels"
        )
        print(
            f"        compile pass {stats['compile_pass_rate']:.1%}, execution pass "
            f"{stats['execution_pass_rate']:.1%}; rejects {stats['rejects_by_reason']}"
        )
        print(f"        stage seconds (summed over workers): {stats['stage_seconds']}")
        print(f"        peak worker RSS {rss:.0f} MB")
        import produce_timeline

        wall, _, info = lanes(full)
        produce_timeline.report(full.events, info["all_timings"], wall.get("@between", 0.0))
        if not args.skip_floor:
            from concurrent.futures.process import BrokenProcessPool

            items = floor_items(tmp / "full")
            try:
                floor_s, floor_returned = pooled_parts(
                    _floor_worker, items, args.workers, args.batch_size, 86, args.batch_size, "frontend"
                )
            except BrokenProcessPool:
                print("floor:  not measured: a floor worker died (a kernel crashed Warp's CPU backend)")
                return
            print(
                f"floor:  codegen of the same {len(items)} kernels, batched front-end NVRTC of the"
                f" {sum(item.compiled for item in items)} the pipeline checked (each at its block dim), batched CPU"
                f" build and run + gradient check of the {sum(item.spec is not None for item in items)} it ran,"
                f" {args.workers} processes: {floor_s:.1f} s = {n / floor_s:.1f} pairs/s at most"
            )
            print(
                f"        pipeline / floor = {full_s / floor_s:.2f} (overhead {full_s / floor_s - 1:+.0%}; target <="
                " +15% at 1,000 pairs, +10% at 10,000)"
            )
            rows_s, rows_returned = None, []
            if args.rows_floor:
                want = run_rows(tmp / "full", full.config)
                rows_s, rows_returned, rows_slots = rows_floor(tmp / "full", full.config, args.workers, want)
                made = _rows_of(rows_returned)
                same = sum(made.get(slot) == digest for slot, digest in want.items())
                print(
                    f"rows' floor: the pipeline's worker function (work.run_batch) on the {rows_slots} slots the run"
                    f" consumed, one part per batch ({sum(r['parts'] for r in rows_returned)} parts), handed to"
                    f" whichever of {args.workers} processes is free; no scheduler, speculation, commit or dataset:"
                    f" {rows_s:.1f} s; its rows against the run's: {same} of {len(want)} identical (timing fields"
                    f" aside){'' if same == len(want) else ': NOT THE SAME WORK'}"
                )
                print(
                    f"        pipeline / rows' floor = {full_s / rows_s:.2f} (the pipeline's own: scheduling, finer"
                    f" parts, discarded slots, IPC, commit, Parquet); rows' floor / floor = {rows_s / floor_s:.2f}"
                    " (the row work the floor leaves out, measured)"
                )
            print_breakdown(full, args.workers, floor_s, floor_returned, stats["kernels_tried"], rows_s, rows_returned)
        else:
            print_breakdown(full, args.workers, None, [], stats["kernels_tried"])
        if args.skip_validate:
            print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            return
        from cudagen_data.validate import validate_path

        t0 = time.perf_counter()
        report = validate_path(tmp / "full", workers=args.workers)
        val_s = time.perf_counter() - t0
        print(
            f"validate: {report.rows} rows in {val_s:.1f} s = {report.rows / val_s:.1f} rows/s, {args.workers} "
            f"workers ({'OK' if report.ok else 'FAILED'}); validate / produce speed = "
            f"{(report.rows / val_s) / full_rate:.2f} (target >= 1)"
        )
        if args.ptx_count > 0:
            ptx = run(args.ptx_count, cats, args.workers, False, args.batch_size, tmp / "ptx", level="ptx")
            ptx_s, ptx_stats = ptx.seconds, ptx.stats
            ptx_rate = ptx_stats["total_pairs"] / ptx_s
            print(
                f"full (--compile ptx): {ptx_stats['total_pairs']} pairs in {ptx_s:.1f} s = {ptx_rate:.1f} pairs/s; "
                f"stage seconds {ptx_stats['stage_seconds']}"
            )
            print(f"        frontend / ptx = {full_rate / ptx_rate:.1f}x with the gradient check on")

            def without_gradcheck(seconds: float, run_stats: dict) -> float:
                return run_stats["total_pairs"] / (
                    seconds - run_stats["stage_seconds"].get("gradcheck", 0.0) / args.workers
                )

            print(
                "        frontend / ptx = "
                f"{without_gradcheck(full_s, stats) / without_gradcheck(ptx_s, ptx_stats):.1f}x with its time taken "
                "out (target >= 3x)"
            )
        if args.rss_pairs:
            rss_run = run(args.rss_pairs, cats, args.workers, False, args.batch_size, tmp / "rss")
            rss_s, rss_stats, rss_peak = rss_run.seconds, rss_run.stats, rss_run.rss_mb
            print(
                f"rss:    {rss_stats['total_pairs']} pairs in {rss_s:.0f} s; peak worker RSS {rss_peak:.0f} MB "
                "(target <= 600 MB)"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
