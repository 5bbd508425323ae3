"""Worker memory over a long full-validation run: is RSS per worker flat?

    python benchmarks/bench_rss.py --count 20000 --workers 2 --output /tmp/rss_run [--time-limit 540]

Runs ``produce`` (all categories, seed 1, full validation) into ``--output`` and logs the
resident memory of the worker that ran each batch to ``<output>.rss.jsonl``.  With
``--time-limit`` it stops cleanly after that many seconds (the last whole batch is
committed); run the same command again to resume, as often as needed.  When the run
is complete it prints the peak worker RSS per tenth of the run: flat means the last
tenth is no higher than the first ones (target: <= 600 MB after 20,000 pairs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _TimeUp(Exception):
    pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument(
        "--time-limit", type=float, default=0.0, help="stop cleanly after this many seconds (0: run to the end)"
    )
    args = ap.parse_args()

    from cudagen_data.generators import categories
    from cudagen_data.pipeline.config import ProduceConfig
    from cudagen_data.pipeline.producer import produce

    config = ProduceConfig(count=args.count, categories=categories(), seed=1)
    log_path = args.output.with_name(args.output.name + ".rss.jsonl")
    t0 = time.perf_counter()

    def on_batch(result) -> None:
        with open(log_path, "ab") as f:
            f.write(orjson.dumps({"batch": result.batch, "rss_mb": round(result.worker_rss_mb, 1)}) + b"\n")
        if args.time_limit and time.perf_counter() - t0 > args.time_limit:
            raise _TimeUp

    print(f"{os.cpu_count()} cpus, {args.workers} workers, {args.count} pairs into {args.output}", flush=True)
    try:
        result = produce(config, args.output, workers=args.workers, progress=False, on_batch=on_batch)
    except _TimeUp:
        done = sum(1 for _ in open(log_path, "rb"))
        print(
            f"stopped after {time.perf_counter() - t0:.0f} s ({done} batches logged so far); run again to resume",
            flush=True,
        )
        return 3
    stats = result.stats
    print(
        f"complete: {stats['total_pairs']} pairs, {stats['kernels_tried']} kernels tried; this call "
        f"{time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    log = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    if not log:
        return 0
    last = max(e["batch"] for e in log) + 1
    tenths = [[e["rss_mb"] for e in log if e["batch"] * 10 // last == t] for t in range(10)]
    peaks = [max(t) if t else 0.0 for t in tenths]
    print("peak worker RSS per tenth of the run (MB): " + " ".join(f"{p:.0f}" for p in peaks), flush=True)
    print(
        f"peak {max(peaks):.0f} MB (target <= 600); last tenth {peaks[-1]:.0f} MB vs first tenth {peaks[0]:.0f} MB",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
