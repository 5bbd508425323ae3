"""Extraction benchmark: kernels/s, NVRTC ms/kernel batched vs one module per kernel, RSS growth.

    python benchmarks/bench_extract.py [--count 5000] [--nvrtc-sample 100] [--arch 86]

Figures, all measured in this run on the same kernels:
- extract_kernels() throughput, and its ratio to the floor: bare Warp codegen of the
  same sources (exec + ModuleBuilder.codegen, no splitting, no clean-up);
- NVRTC milliseconds per kernel, 50 kernels per translation unit vs one per kernel;
- RSS growth over --count extractions (target: < 50 MB for 5,000).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def sources(count: int, seed: int) -> list[str]:
    from cudagen_data.generators import generate
    from cudagen_data.generators.basic import GENERATORS

    cats = list(GENERATORS)
    return [generate(cats[i % len(cats)], seed, i // len(cats)).python_source for i in range(count)]


def bare_codegen(srcs: list[str]) -> float:
    """The floor: Warp codegen alone, each source in its own module, nothing else."""
    import linecache
    import types

    import warp as wp
    from warp._src.context import ModuleBuilder

    t0 = time.perf_counter()
    for n, src in enumerate(srcs):
        name = f"bench_floor_{n}"
        fn = f"<{name}>"
        linecache.cache[fn] = (len(src), None, src.splitlines(True), fn)
        mod = types.ModuleType(name)
        sys.modules[name] = mod  # Warp resolves annotations through the module
        exec(compile(src, fn, "exec"), mod.__dict__)
        for k in [v for v in vars(mod).values() if isinstance(v, wp.Kernel)]:
            ModuleBuilder(k.module, k.module.options | {"output_arch": 86}, target="cuda").codegen("cuda")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--nvrtc-sample", type=int, default=100)
    ap.add_argument("--arch", type=int, default=86)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from cudagen_data import warp_boundary
    from cudagen_data.extract import compile_units, extract_kernels

    warp_boundary.warp()
    srcs = sources(args.count, args.seed)
    for s in srcs[:50]:  # warm up: imports, first-use caches
        extract_kernels(s)
    gc.collect()
    rss0 = rss_mb()
    t0 = time.perf_counter()
    kernels = []
    for i, s in enumerate(srcs):
        ks = extract_kernels(s)
        if i < args.nvrtc_sample:
            kernels.extend(ks)
    extract_s = time.perf_counter() - t0
    gc.collect()
    growth = rss_mb() - rss0

    floor_n = min(1000, len(srcs))
    floor_s = bare_codegen(srcs[:floor_n])
    ours_per = extract_s / len(srcs)
    floor_per = floor_s / floor_n

    sample = kernels[: args.nvrtc_sample]
    t0 = time.perf_counter()
    batched = []
    for i in range(0, len(sample), 50):
        batched += compile_units(sample[i : i + 50], arch=args.arch)
    batched_ms = (time.perf_counter() - t0) * 1000 / len(sample)
    single_n = min(len(sample), 30)
    t0 = time.perf_counter()
    single = [compile_units([k], arch=args.arch)[0] for k in sample[:single_n]]
    single_ms = (time.perf_counter() - t0) * 1000 / single_n

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    print(
        f"extract: {len(srcs)} kernels in {extract_s:.2f} s = {len(srcs) / extract_s:.0f} kernels/s "
        f"({ours_per * 1000:.2f} ms/kernel)"
    )
    print(
        f"floor (bare Warp codegen, {floor_n} kernels): {floor_per * 1000:.2f} ms/kernel; extract/floor = "
        f"{ours_per / floor_per:.2f}x"
    )
    print(f"nvrtc batched (50/unit): {batched_ms:.1f} ms/kernel, {sum(r.ok for r in batched)}/{len(batched)} ok")
    print(f"nvrtc one module/kernel: {single_ms:.1f} ms/kernel, {sum(r.ok for r in single)}/{len(single)} ok")
    print(f"nvrtc batched / single = {batched_ms / single_ms:.2f} (speed-up {single_ms / batched_ms:.1f}x)")
    print(f"RSS growth over {len(srcs)} extractions: {growth:.1f} MB (target < 50 MB for 5,000)")


if __name__ == "__main__":
    main()
