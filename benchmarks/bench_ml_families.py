"""Generate ML-family kernels and push them through the real pipeline stages.

Per category: generate ``--count`` kernels from ``--seed``, extract their CUDA and
compile it with NVRTC (batched), run them on Warp's CPU backend (forward + backward),
apply the family's NumPy reference check, and count distinct canonical shapes.

    python benchmarks/bench_ml_families.py --count 1000 --seed 0 [--jobs N]
    python benchmarks/bench_ml_families.py --count 20 --categories softmax norm
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudagen_data import canonical, warp_boundary  # noqa: E402
from cudagen_data.execution import execute_specs  # noqa: E402
from cudagen_data.extract import DEFAULT_BLOCK_DIM, ExtractError, compile_units, extract_kernels  # noqa: E402
from cudagen_data.generators import generate  # noqa: E402
from cudagen_data.generators.ml import GENERATORS, REFERENCE_CHECKS  # noqa: E402


def run_chunk(category: str, seed: int, start: int, stop: int) -> dict:
    """Extract, NVRTC-compile (one unit), CPU-run (one module) and NumPy-check kernels
    ``start..stop`` of a category; per-kernel flags, failure counts, seconds per stage."""
    specs = [generate(category, seed, i) for i in range(start, stop)]
    n = len(specs)
    compiled_ok, executed_ok, numpy_ok = [False] * n, [False] * n, [False] * n
    failures: Counter = Counter()
    examples: dict[str, str] = {}

    t0 = time.perf_counter()
    extracted, owners = [], []
    for k, spec in enumerate(specs):
        try:
            kernels = extract_kernels(spec.python_source, block_dim=spec.block_dim or DEFAULT_BLOCK_DIM)
            extracted.append(next(x for x in kernels if x.name == spec.kernel_name))
            owners.append(k)
        except (ExtractError, StopIteration) as exc:
            failures["extract"] += 1
            examples.setdefault("extract", f"#{start + k}: {exc}")
    t_extract = time.perf_counter() - t0

    t0 = time.perf_counter()
    for k, res in zip(owners, compile_units(extracted), strict=False):
        compiled_ok[k] = res.ok
        if not res.ok:
            failures["compile"] += 1
            examples.setdefault("compile", f"#{start + k}: {res.log[:300]}")
    t_compile = time.perf_counter() - t0

    # CPU execution (forward + backward), then the family's NumPy reference on the outputs
    t0 = time.perf_counter()
    check = REFERENCE_CHECKS[category]
    for k, (spec, res) in enumerate(zip(specs, execute_specs(specs, reference_checks={}), strict=False)):
        if not res.ok:
            failures[f"exec:{res.reason}"] += 1
            examples.setdefault(f"exec:{res.reason}", f"#{start + k} {spec.kernel_name}: {res.detail[:300]}")
            continue
        executed_ok[k] = True
        message = check(spec, res.inputs, res.outputs)
        if message:
            failures["numpy"] += 1
            examples.setdefault("numpy", f"#{start + k} {spec.kernel_name}: {message}")
        else:
            numpy_ok[k] = True
    t_exec = time.perf_counter() - t0
    warp_boundary.clear_private_cache()
    return {
        "compiled": compiled_ok,
        "executed": executed_ok,
        "numpy": numpy_ok,
        "failures": failures,
        "examples": examples,
        "seconds": (t_extract, t_compile, t_exec),
    }


def _run_chunk(args: tuple) -> dict:
    return run_chunk(*args)


def bench_category(category: str, count: int, seed: int, batch: int, pool) -> dict:
    t0 = time.perf_counter()
    specs = [generate(category, seed, i) for i in range(count)]
    shapes = Counter(canonical.shape_hash(s.python_source) for s in specs)
    tiers = Counter(s.difficulty for s in specs)
    chunks = [(category, seed, a, min(a + batch, count)) for a in range(0, count, batch)]
    parts = list(pool.imap(_run_chunk, chunks)) if pool else [run_chunk(*c) for c in chunks]
    flags = {key: [f for p in parts for f in p[key]] for key in ("compiled", "executed", "numpy")}
    failures: Counter = Counter()
    examples: dict[str, str] = {}
    for p in parts:
        failures.update(p["failures"])
        for key, text in p["examples"].items():
            examples.setdefault(key, text)
    return {
        "category": category,
        "count": count,
        "compile": sum(flags["compiled"]),
        "execute": sum(flags["executed"]),
        "numpy": sum(flags["numpy"]),
        "all": sum(
            c and e and n for c, e, n in zip(flags["compiled"], flags["executed"], flags["numpy"], strict=False)
        ),
        "shapes_pct": 100.0 * len(shapes) / count,
        "tiers": dict(tiers),
        "cpu_seconds": tuple(sum(p["seconds"][i] for p in parts) for i in range(3)),  # summed over workers
        "wall": time.perf_counter() - t0,
        "failures": dict(failures),
        "examples": examples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="kernels per category (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--categories", nargs="*", default=list(GENERATORS), help="subset of the ML categories")
    parser.add_argument(
        "--batch", type=int, default=50, help="kernels per NVRTC unit / CPU module (one task per worker)"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all cores)")
    parser.add_argument("--quiet", action="store_true", help="do not print an example of each failure kind")
    args = parser.parse_args(argv)

    print(
        f"{args.count} kernels per category, seed {args.seed}, {args.jobs} workers, {os.cpu_count()} cpus", flush=True
    )
    header = (
        f"{'category':<12} {'count':>5} {'compile':>8} {'execute':>8} {'numpy':>8} {'all':>6} {'shapes%':>8}"
        "  tiers (b/i/a)   wall s  cpu s (extract/nvrtc/cpu run)"
    )
    print(header, flush=True)
    rows = []
    t_all = time.perf_counter()
    pool = multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=20) if args.jobs > 1 else None
    try:
        for category in args.categories:
            row = bench_category(category, args.count, args.seed, args.batch, pool)
            rows.append(row)
            t = row["tiers"]
            g, c, e = row["cpu_seconds"]
            print(
                f"{category:<12} {row['count']:>5} {row['compile']:>8} {row['execute']:>8} {row['numpy']:>8} "
                f"{row['all']:>6} {row['shapes_pct']:>7.1f}%  {t.get('basic', 0)}/{t.get('intermediate', 0)}/"
                f"{t.get('advanced', 0)}  {row['wall']:7.1f}  {g:.0f}/{c:.0f}/{e:.0f}"
                + (f"  failures: {row['failures']}" if row["failures"] else ""),
                flush=True,
            )
            if not args.quiet:
                for key, text in row["examples"].items():
                    print(f"    [{category}] {key}: {text}", flush=True)
    finally:
        if pool:
            pool.close()
            pool.join()
    total = sum(r["count"] for r in rows)
    passed = sum(r["all"] for r in rows)
    print(
        f"total: {passed}/{total} kernels pass compile + CPU execution + NumPy check; "
        f"min distinct shapes {min(r['shapes_pct'] for r in rows):.1f}% (target >= 80%); "
        f"{time.perf_counter() - t_all:.0f} s",
        flush=True,
    )
    ok = all(r["all"] == r["count"] and r["shapes_pct"] >= 80.0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
