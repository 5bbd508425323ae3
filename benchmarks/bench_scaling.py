"""Scaling: the local executor and Ray side by side, at each worker count, each point twice.

    python benchmarks/bench_scaling.py --workers 1,2 --count 1000                 # this 2-core box
    python benchmarks/bench_scaling.py --workers 1,2,4,8,16 --pairs-per-worker 100  # the 16-core GPU box
    python benchmarks/bench_scaling.py --floor --workers 16 --pairs-per-worker 20   # the producer vs 16 lone ones

For each worker count W, in one run: a private Ray instance with W CPUs is started on
127.0.0.1 (its start-up is timed and printed, not counted: a cluster is started once, by
`ray start`, and then serves many runs), then local, Ray, local, Ray runs of the same
configuration (full validation, all categories, seed 1), each from a fresh output folder
and fresh workers (Ray's are fresh for the first Ray run of W, reused by the second, as on
a cluster).  Prints pairs/s of every run, the best of two per executor, the Ray/local
ratio (the floor is the local executor, measured in the same run) and how the Ray tasks
spread over nodes.  Targets: Ray within 15% of local for 1,000 pairs on 2 cores; within
10% at every count on the 16-core GPU box.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _independent_one(config, out: Path) -> int:
    from cudagen_data.pipeline import produce

    return produce(config, out, workers=1, progress=False).stats["total_pairs"]


def independent_runs(config, workers: int, out: Path) -> tuple[float, int]:
    """The machine's floor for W-way work with no shared driver: W separate one-worker
    producers at once (seeds 1..W, count/W pairs each); (seconds until the last ends, pairs)."""
    import dataclasses
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shutil.rmtree(out, ignore_errors=True)
    each = max(1, config.count // workers)
    configs = [dataclasses.replace(config, count=each, seed=config.seed + k) for k in range(workers)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        pairs = sum(pool.map(_independent_one, configs, [out / str(k) for k in range(workers)]))
    elapsed = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return elapsed, pairs


def one_run(config, workers: int, executor: str, out: Path) -> tuple[float, int, dict]:
    from cudagen_data.pipeline import produce

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    result = produce(config, out, workers=workers, progress=False, executor=executor)
    elapsed = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return elapsed, result.stats["total_pairs"], result.tasks_by_node


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument(
        "--count",
        type=int,
        default=0,
        help="pairs per run (default: --pairs-per-worker x workers, at least --min-count)",
    )
    ap.add_argument("--pairs-per-worker", type=int, default=100)
    ap.add_argument("--min-count", type=int, default=200, help="at least this many pairs per run")
    ap.add_argument("--fast", action="store_true", help="--fast runs (codegen only) instead of full validation")
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument(
        "--floor",
        action="store_true",
        help="instead of Ray: the local executor at W workers against W independent one-worker producers run at once "
        "(does the producer or the machine limit scaling?)",
    )
    args = ap.parse_args()
    if args.floor:
        return floor_main(args)

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the private instance stays on 127.0.0.1
    import ray

    from cudagen_data.generators import categories
    from cudagen_data.pipeline import ProduceConfig

    counts = [int(w) for w in args.workers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="cudagen-scaling-"))
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, ray {ray.__version__}, "
        f"{'--fast' if args.fast else 'full validation'}, batch {args.batch_size}",
        flush=True,
    )
    rows = []
    try:
        for w in counts:
            count = args.count or max(args.min_count, args.pairs_per_worker * w)
            config = ProduceConfig(
                count=count, categories=categories(), seed=1, fast=args.fast, batch_size=args.batch_size
            )
            t0 = time.perf_counter()
            ray.init(
                address="local",
                num_cpus=w,
                object_store_memory=256 * 2**20,
                include_dashboard=False,
                log_to_driver=False,
                logging_level="warning",
            )
            ray_start = time.perf_counter() - t0
            runs: dict[str, list[float]] = {"local": [], "ray": []}
            spread = {}
            try:
                for attempt in range(2):
                    for executor in ("local", "ray"):
                        elapsed, n, by_node = one_run(config, w, executor, tmp / f"{executor}-{w}-{attempt}")
                        runs[executor].append(n / elapsed)
                        spread = by_node or spread
                        print(
                            f"  {w:2d} workers  {executor:5s} run {attempt + 1}: {n} pairs in {elapsed:6.1f} s = "
                            f"{n / elapsed:6.1f} pairs/s",
                            flush=True,
                        )
            finally:
                ray.shutdown()
            best_local, best_ray = max(runs["local"]), max(runs["ray"])
            rows.append((w, count, runs, best_local, best_ray, ray_start, spread))
            print(
                f"  {w:2d} workers: Ray start-up {ray_start:.1f} s (not counted); Ray tasks per node "
                f"{sorted(spread.values())}",
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print("workers  pairs   local pairs/s (run 1, run 2)   Ray pairs/s (run 1, run 2)   best Ray / best local")
    for w, count, runs, best_local, best_ray, _, _ in rows:
        lo, ry = runs["local"], runs["ray"]
        print(
            f"{w:7d}  {count:5d}   {best_local:6.1f} ({lo[0]:6.1f}, {lo[1]:6.1f})          {best_ray:6.1f} "
            f"({ry[0]:6.1f}, {ry[1]:6.1f})        {best_ray / best_local:5.2f}"
        )
    base = rows[0][3] / rows[0][0]
    print(
        "local speed-up over the first count, per worker: "
        + ", ".join(f"{w}: {bl / (base * w):.2f}" for w, _, _, bl, _, _, _ in rows)
    )
    return 0


def floor_main(args) -> int:
    from cudagen_data.generators import categories
    from cudagen_data.pipeline import ProduceConfig

    tmp = Path(tempfile.mkdtemp(prefix="cudagen-scaling-floor-"))
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {'--fast' if args.fast else 'full validation'}, "
        f"batch {args.batch_size}",
        flush=True,
    )
    try:
        for w in [int(x) for x in args.workers.split(",")]:
            count = args.count or max(args.min_count, args.pairs_per_worker * w)
            config = ProduceConfig(
                count=count, categories=categories(), seed=1, fast=args.fast, batch_size=args.batch_size
            )
            local, alone = [], []
            for attempt in range(2):
                elapsed, n, _ = one_run(config, w, "local", tmp / f"local-{w}-{attempt}")
                local.append(n / elapsed)
                print(
                    f"  {w:2d} workers  one producer       run {attempt + 1}: {n} pairs in {elapsed:6.1f} s = "
                    f"{n / elapsed:6.1f} pairs/s",
                    flush=True,
                )
                elapsed, n = independent_runs(config, w, tmp / f"alone-{w}-{attempt}")
                alone.append(n / elapsed)
                print(
                    f"  {w:2d} workers  {w:2d} lone producers run {attempt + 1}: {n} pairs in {elapsed:6.1f} s = "
                    f"{n / elapsed:6.1f} pairs/s",
                    flush=True,
                )
            print(
                f"  {w:2d} workers: best one producer {max(local):.1f} pairs/s, best {w} lone producers "
                f"{max(alone):.1f} pairs/s, "
                f"ratio {max(local) / max(alone):.2f} (1.0: the producer costs nothing over the machine's floor)",
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
