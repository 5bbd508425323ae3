"""Driver memory and disk over a long --fast run: do they stay flat?

    python benchmarks/bench_driver_rss.py --count 200000 --workers 16 [--executor ray] [--jsonl]

Runs ``produce`` (all categories, seed 1, --fast, --no-jsonl unless --jsonl) in this process
(the driver) and samples, after every committed batch, the driver's resident memory and
the disk used by the run's private spools and staged shards (.cudagen/).  Prints both per
tenth of the run, and:

- the floor: the driver's RSS before the first batch (Python, imports, the executor),
  measured in the same run; peak / floor;
- growth: (RSS at the end - RSS at the first tenth) per 100,000 pairs, i.e. what the
  dedup memory of every kept pair's two hashes costs, and the extrapolation to 1M pairs;
- target: peak driver RSS <= 1 GB at 200,000 pairs.

200,000 --fast pairs take ~30 min on 2 cores; smaller --count values show the same
flatness (the growth line is per pair).
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


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def du_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--executor", choices=("local", "ray"), default="local")
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--jsonl", action="store_true", help="also write JSONL (default: --no-jsonl, as for a large run)")
    ap.add_argument("--output", type=Path, default=None, help="default: a temporary folder, removed at the end")
    args = ap.parse_args()

    from cudagen_data.generators import categories
    from cudagen_data.pipeline import ProduceConfig, produce

    config = ProduceConfig(count=args.count, categories=categories(), seed=1, fast=True, jsonl=args.jsonl)
    out = args.output or Path(tempfile.mkdtemp(prefix="cudagen-driver-rss-"))
    samples: list[tuple[int, float, float]] = []  # (pairs committed, rss MB, private disk MB)
    pairs = 0
    floor = rss_mb()

    def on_batch(result) -> None:
        nonlocal pairs
        pairs += sum(1 for o in result.outcomes if o.row is not None)  # rows the batch produced (an upper bound on kept)
        samples.append((pairs, rss_mb(), du_mb(out / ".cudagen")))

    print(f"{os.cpu_count()} cpus, {args.workers} workers, executor {args.executor}, {args.count} --fast pairs, jsonl {args.jsonl}", flush=True)
    t0 = time.perf_counter()
    try:
        result = produce(config, out, workers=args.workers, progress=False, on_batch=on_batch, executor=args.executor, ray_address=args.ray_address)
        elapsed = time.perf_counter() - t0
        data_mb = du_mb(out / "data")
    finally:
        if args.output is None:
            shutil.rmtree(out, ignore_errors=True)
    stats = result.stats
    print(f"{stats['total_pairs']} pairs in {elapsed:.0f} s ({stats['total_pairs'] / elapsed:.0f} pairs/s); Parquet {data_mb:.0f} MB", flush=True)
    if not samples:
        return 0
    n = len(samples)
    tenths = [samples[max(0, (t + 1) * n // 10 - 1)] for t in range(10)]
    print("driver RSS at the end of each tenth (MB):  " + " ".join(f"{r:.0f}" for _, r, _ in tenths))
    print("private disk (.cudagen/) at each tenth (MB): " + " ".join(f"{d:.1f}" for _, _, d in tenths))
    peak = max(r for _, r, _ in samples)
    print(f"floor (driver before the first batch) {floor:.0f} MB; peak {peak:.0f} MB = {peak / floor:.2f} x floor (target: peak <= 1024 MB at 200,000 pairs)")
    first_pairs, first_rss, _ = tenths[0]
    last_pairs, last_rss, _ = tenths[-1]
    if last_pairs > first_pairs:
        per_100k = (last_rss - first_rss) / (last_pairs - first_pairs) * 100_000
        print(f"growth after the first tenth: {per_100k:.1f} MB per 100,000 pairs -> ~{last_rss + per_100k * (1_000_000 - last_pairs) / 100_000:.0f} MB at 1,000,000 pairs")
    print(f"private disk peak {max(d for _, _, d in samples):.1f} MB (spools hold at most one shard of rows per split)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
