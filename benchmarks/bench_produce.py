"""Producer benchmark: end-to-end pairs/s (full and --fast), overhead over its floor, worker RSS.

    python benchmarks/bench_produce.py [--count 1000] [--fast-count 5000] [--workers 2]
                                       [--categories all|a,b,...] [--rss-pairs 0]

Measured in this run, each from a cold Warp kernel cache:
- full validation (generate, extract, NVRTC, CPU execution), --workers processes:
  pairs/s end to end (targets: >= 20 pairs/s, 1,000 pairs in < 50 s on 2 cores);
- --fast (generate, extract, dedup): pairs/s (target >= 400), and its floor: bare Warp
  codegen of the same kernels (benchmarks/bench_extract.py), split over the same number
  of processes;
- the floor: Warp codegen + batched NVRTC + batched CPU build of the same kernels the
  full run tried, split over the same number of processes; overhead = full / floor - 1
  (target <= 25%);
- peak worker RSS over the run (and over --rss-pairs more pairs if given; target <= 600 MB
  after 20,000).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson


def run(count: int, categories: tuple[str, ...], workers: int, fast: bool, batch_size: int, out: Path):
    from cudagen_data.pipeline.config import ProduceConfig
    from cudagen_data.pipeline.producer import produce

    rss = []
    config = ProduceConfig(count=count, categories=categories, seed=1, fast=fast, batch_size=batch_size)
    t0 = time.perf_counter()
    result = produce(config, out, workers=workers, progress=False, on_batch=lambda r: rss.append(r.worker_rss_mb))
    return time.perf_counter() - t0, result.stats, max(rss, default=0.0)


def _floor_worker(args) -> float:
    """Codegen, NVRTC and CPU-build a share of the kernels; returns seconds spent."""
    sources, arch, batch_size = args
    from cudagen_data import warp_boundary
    from cudagen_data.extract import compile_units, extract_kernels

    wp = warp_boundary.warp()
    from warp._src.context import Module

    t0 = time.perf_counter()
    for i in range(0, len(sources), batch_size):
        chunk = sources[i : i + batch_size]
        kernels = []
        for src in chunk:
            try:
                kernels += extract_kernels(src)
            except Exception:  # noqa: BLE001 - the floor skips what Warp rejects
                pass
        compile_units(kernels, arch=arch)
        module = Module(f"floor_{os.getpid()}_{i}", None)
        module.options["optimization_level"] = 0
        import contextlib

        with contextlib.ExitStack() as stack:
            for src in chunk:
                loaded = stack.enter_context(warp_boundary.loaded_source(src, fresh_function_names=False))
                for k in loaded.kernels():
                    k.module = module
                    module.register_kernel(k)
            try:
                module.load("cpu", block_dim=1)
            except Exception:  # noqa: BLE001
                pass
            warp_boundary.release_module(module)
        warp_boundary.clear_private_cache()
    return time.perf_counter() - t0


def pooled_seconds(worker, sources: list[str], workers: int, *extra) -> float:
    """Wall time of ``worker((share, *extra))`` over ``workers`` spawned processes, each
    given every ``workers``-th source; process start-up is outside the timing."""
    shares = [sources[i::workers] for i in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(worker, [([], *extra)] * workers)
        t0 = time.perf_counter()
        pool.map(worker, [(share, *extra) for share in shares])
        return time.perf_counter() - t0


def _codegen_worker(args: tuple) -> float:
    from bench_extract import bare_codegen

    from cudagen_data import warp_boundary

    warp_boundary.warp()
    return bare_codegen(args[0])


def tried_sources(out: Path) -> list[str]:
    srcs = []
    for p in sorted((out / "jsonl").glob("*.jsonl")) + [out / "rejects.jsonl"]:
        for line in p.read_bytes().splitlines():
            src = orjson.loads(line).get("python_source")
            if src:
                srcs.append(src)
    return srcs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="full-validation pairs (0: skip the full run)")
    ap.add_argument("--fast-count", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--categories", default="all")
    ap.add_argument("--rss-pairs", type=int, default=0, help="also run this many more full pairs and report worker RSS")
    ap.add_argument("--skip-floor", action="store_true")
    args = ap.parse_args()

    from cudagen_data.generators import categories as all_categories

    cats = all_categories() if args.categories == "all" else tuple(args.categories.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="cudagen-bench-"))
    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, workers {args.workers}, categories {len(cats)}, batch {args.batch_size}")
        fast_s, fast_stats, _ = run(args.fast_count, cats, args.workers, True, args.batch_size, tmp / "fast")
        fast_n = fast_stats["total_pairs"]
        print(f"--fast: {fast_n} pairs in {fast_s:.1f} s = {fast_n / fast_s:.0f} pairs/s (target >= 400); tried {fast_stats['kernels_tried']} kernels")
        if not args.skip_floor:
            sources = tried_sources(tmp / "fast")
            cg_s = pooled_seconds(_codegen_worker, sources, args.workers)
            print(f"floor:  bare Warp codegen of the same {len(sources)} kernels, {args.workers} processes: {cg_s:.1f} s = {fast_n / cg_s:.0f} pairs/s at most")
            print(f"        --fast / floor = {fast_s / cg_s:.2f} (overhead {fast_s / cg_s - 1:+.0%}: generation, canonical hashes, rows, writing)")
        if args.count <= 0:
            return
        full_s, stats, rss = run(args.count, cats, args.workers, False, args.batch_size, tmp / "full")
        n = stats["total_pairs"]
        print(f"full:   {n} pairs in {full_s:.1f} s = {n / full_s:.1f} pairs/s (target >= 20); tried {stats['kernels_tried']} kernels")
        print(f"        compile pass {stats['compile_pass_rate']:.1%}, execution pass {stats['execution_pass_rate']:.1%}; rejects {stats['rejects_by_reason']}")
        print(f"        stage seconds (summed over workers): {stats['stage_seconds']}")
        print(f"        peak worker RSS {rss:.0f} MB")
        if not args.skip_floor:
            sources = tried_sources(tmp / "full")
            floor_s = pooled_seconds(_floor_worker, sources, args.workers, 86, args.batch_size)
            print(f"floor:  codegen + batched NVRTC + batched CPU build of the same {len(sources)} kernels, {args.workers} processes: {floor_s:.1f} s")
            print(f"        pipeline / floor = {full_s / floor_s:.2f} (overhead {full_s / floor_s - 1:+.0%}; target <= +25%)")
        if args.rss_pairs:
            rss_s, rss_stats, rss_peak = run(args.rss_pairs, cats, args.workers, False, args.batch_size, tmp / "rss")
            print(f"rss:    {rss_stats['total_pairs']} pairs in {rss_s:.0f} s; peak worker RSS {rss_peak:.0f} MB (target <= 600 MB)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
