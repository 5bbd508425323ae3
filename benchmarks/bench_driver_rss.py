"""Driver memory and disk over a long --fast run: do they stay flat?

    python benchmarks/bench_driver_rss.py --count 200000 --workers 16 --output /tmp/drv [--time-limit 540]
    python benchmarks/bench_driver_rss.py --count 4000 --workers 2 --shard-rows 1000    # small, here

Runs ``produce`` (all categories, seed 1, --fast, --no-jsonl unless --jsonl) in this process
(the driver) and logs, after every committed batch, the pairs committed so far, the
driver's resident memory and the disk used by the run's private spools and staged shards
(.cudagen/) to ``<output>.rss.jsonl``.  With ``--time-limit`` a call stops cleanly after
that many seconds; run the same command again to resume (the resumed driver rebuilds the
dedup memory of every committed pair, so its RSS is that of a driver at that point of the
run).  When the run is complete it prints, per tenth of the run, the driver RSS and the
private disk, and:

- the floor: the driver's RSS before the first batch of the first call (Python and the
  libraries it runs, pyarrow included); peak / floor;
- growth: the least-squares slope of RSS over pairs in the second half of the run, per
  100,000 pairs (the dedup memory of every kept pair's two hashes, and allocator noise:
  at a few thousand pairs a few MB of noise dominate it), and the extrapolation to 1M;
- target: peak driver RSS <= 1 GB at 200,000 pairs.

200,000 --fast pairs take ~30 min or more on 2 cores; smaller --count values show the same
flatness (with a smaller --shard-rows the spools also cycle within the run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _TimeUp(Exception):
    pass


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


def committed_pairs(out: Path) -> int:
    state = out / ".cudagen" / "state.json"
    if not state.exists():
        return 0
    return sum(orjson.loads(state.read_bytes())["tally"]["accepted"].values())


def slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--executor", choices=("local", "ray"), default="local")
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--jsonl", action="store_true", help="also write JSONL (default: --no-jsonl, as for a large run)")
    ap.add_argument("--shard-rows", type=int, default=None, help="rows per Parquet shard (default: the producer's)")
    ap.add_argument("--output", type=Path, default=None, help="the run's folder (default: a temporary one)")
    ap.add_argument(
        "--time-limit", type=float, default=0.0, help="stop cleanly after this many seconds (0: run to the end)"
    )
    args = ap.parse_args()

    from cudagen_data.generators import categories
    from cudagen_data.pipeline import ProduceConfig, produce

    extra = {"shard_rows": args.shard_rows} if args.shard_rows else {}
    config = ProduceConfig(count=args.count, categories=categories(), seed=1, fast=True, jsonl=args.jsonl, **extra)
    out = args.output or Path(tempfile.mkdtemp(prefix="cudagen-driver-rss-"))
    log_path = out.with_name(out.name + ".rss.jsonl")
    first_call = not log_path.exists()
    pairs = committed_pairs(out)
    import pyarrow.parquet  # noqa: F401 - the driver writes Parquet: count its libraries in the floor

    floor = rss_mb()
    if first_call:
        log_path.write_bytes(orjson.dumps({"floor_mb": round(floor, 1)}) + b"\n")
    t0 = time.perf_counter()

    def on_batch(result) -> None:
        nonlocal pairs
        pairs = committed_pairs(out)
        with open(log_path, "ab") as f:
            f.write(
                orjson.dumps(
                    {"pairs": pairs, "rss_mb": round(rss_mb(), 1), "disk_mb": round(du_mb(out / ".cudagen"), 1)}
                )
                + b"\n"
            )
        if args.time_limit and time.perf_counter() - t0 > args.time_limit:
            raise _TimeUp

    print(
        f"{os.cpu_count()} cpus, {args.workers} workers, executor {args.executor}, {args.count} --fast pairs, jsonl "
        f"{args.jsonl}, "
        f"shard rows {config.shard_rows}; {pairs} pairs committed before this call",
        flush=True,
    )
    try:
        result = produce(
            config,
            out,
            workers=args.workers,
            progress=False,
            on_batch=on_batch,
            executor=args.executor,
            ray_address=args.ray_address,
        )
    except _TimeUp:
        print(
            f"stopped after {time.perf_counter() - t0:.0f} s at {pairs} pairs; run the same command again to resume",
            flush=True,
        )
        return 3
    elapsed = time.perf_counter() - t0
    stats = result.stats
    print(
        f"complete: {stats['total_pairs']} pairs; this call {elapsed:.0f} s; Parquet {du_mb(out / 'data'):.0f} MB in "
        f"{len(list((out / 'data').glob('*.parquet')))} shards",
        flush=True,
    )
    log = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    floor = log[0]["floor_mb"]
    samples = [e for e in log[1:] if "pairs" in e]
    if not samples:
        return 0
    total = max(e["pairs"] for e in samples)
    tenths = [[e for e in samples if min(9, e["pairs"] * 10 // max(total, 1)) == t] for t in range(10)]
    print(
        "peak driver RSS per tenth of the run (MB):   "
        + " ".join(f"{max(e['rss_mb'] for e in t):.0f}" if t else "-" for t in tenths)
    )
    print(
        "peak private disk per tenth (.cudagen/, MB): "
        + " ".join(f"{max(e['disk_mb'] for e in t):.0f}" if t else "-" for t in tenths)
    )
    peak = max(e["rss_mb"] for e in samples)
    print(
        f"floor (driver before the first batch) {floor:.0f} MB; peak {peak:.0f} MB = {peak / floor:.2f} x floor "
        "(target: peak <= 1024 MB at 200,000 pairs)"
    )
    later = [(e["pairs"], e["rss_mb"]) for e in samples if e["pairs"] >= total / 2]
    if len(later) >= 2:
        per_100k = slope(later) * 100_000
        print(
            f"growth over the second half (least squares): {per_100k:.1f} MB per 100,000 pairs -> "
            f"~{peak + per_100k * max(0, 1_000_000 - total) / 100_000:.0f} MB at 1,000,000 pairs"
        )
    print(
        f"private disk peak {max(e['disk_mb'] for e in samples):.0f} MB (open spools hold under one shard of rows per "
        "split)"
    )
    if args.output is None:
        shutil.rmtree(out, ignore_errors=True)
        log_path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
