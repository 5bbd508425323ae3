"""`cudagen negatives` benchmark: negatives for N rows against the time `produce` took to make them.

    python benchmarks/bench_negatives.py [--rows 200] [--workers 2] [--per-row 3] [--seed 0] [--keep DIR]

Both are measured in this run, on this machine, with the same workers: first ``cudagen
produce --count N`` (every category, full validation) into a temporary folder, then
``cudagen negatives`` on it.  Target (issue #24): negatives / produce < 1, in wall seconds
and in CPU seconds (the same ratio where other work shares the machine).  Also prints
the targets of the negatives themselves: negatives per positive, distinct kinds,
categories represented, the share of run-stage candidates the CPU witness proved, the
kinds' balance (stats.json -> negatives -> balance), and where the negatives' worker
time went (cudagen_data/spans.py names, summed over the workers: wall and CPU seconds;
nested spans are also inside their parents).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200, help="pairs to produce, then make negatives for")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--per-row", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="make the dataset here and keep it")
    args = parser.parse_args()

    from cudagen_data.generators import categories
    from cudagen_data.negatives import make_negatives
    from cudagen_data.pipeline.config import ProduceConfig
    from cudagen_data.pipeline.producer import produce

    with tempfile.TemporaryDirectory(prefix="bench-negatives-") as tmp:
        folder = args.keep or Path(tmp) / "ds"
        config = ProduceConfig(count=args.rows, categories=tuple(categories()), seed=args.seed)
        t0, c0 = time.perf_counter(), cpu_seconds()
        produce(config, folder, workers=args.workers, overwrite=True, progress=False)
        produce_s, produce_cpu = time.perf_counter() - t0, cpu_seconds() - c0
        t0, c0 = time.perf_counter(), cpu_seconds()
        result = make_negatives(folder, per_row=args.per_row, seed=args.seed, workers=args.workers)
        negatives_s, negatives_cpu = time.perf_counter() - t0, cpu_seconds() - c0
    stats = result.stats
    cats = len(stats["by_category"])
    print(f"rows: {stats['positives']} produced in {produce_s:.1f} s ({args.workers} workers)")
    print(f"negatives: {stats['negatives']} in {negatives_s:.1f} s ({stats['per_positive']:.2f} per row)")
    print(f"ratio negatives / produce: {negatives_s / produce_s:.2f} (target < 1)")
    print(f"CPU seconds (this process and its worker processes, what a loaded machine leaves comparable): "
          f"produce {produce_cpu:.1f}, negatives {negatives_cpu:.1f}, ratio {negatives_cpu / produce_cpu:.2f}; "
          f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    print(f"kinds: {len(stats['by_kind'])} distinct: {stats['by_kind']}")
    print(f"by stage: {stats['by_stage']}")
    print(f"categories represented: {cats} of {len(categories())}")
    print(f"run-stage candidates proven by the CPU witness: {stats['run_proven_rate']:.1%} (target >= 95%)")
    discarded = {k: c["discarded"] for k, c in stats["candidates_by_kind"].items() if c["discarded"]}
    print(f"discarded by kind: {discarded}")
    fair = stats["balance"]
    print(f"kinds balanced (shipped / fair share within a factor of {fair['factor']:g}): {fair['balanced']} "
          f"({fair['ratio_min']} to {fair['ratio_max']})")  # fmt: skip
    print(f"rows whose witness crashed its process: {stats['rows_witness_crashed']}")
    print_spans(result.spans, negatives_s, args.workers)
    return 0


def cpu_seconds() -> float:
    """CPU seconds of this process and of every worker process it has joined (both halves
    join their workers before they return, so each half's difference counts its own)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def print_spans(timing: dict[str, dict[str, float]], elapsed: float, workers: int) -> None:
    """Worker time by span, and what the workers' time leaves unaccounted for (pool
    start-up, a crashed batch's lost work, the parent's reading and writing)."""
    batches = timing.get("batch", {}).get("wall", 0.0)
    print(f"worker time: {batches:.1f} s in batches over {max(workers, 1)} workers "
          f"(elapsed x workers: {elapsed * max(workers, 1):.1f} s)")  # fmt: skip
    print(f"  {'span':34s} {'wall s':>8s} {'cpu s':>8s} {'count':>6s} {'% batch':>8s}")
    for name, t in sorted(timing.items(), key=lambda kv: -kv[1]["wall"]):
        share = 100.0 * t["wall"] / batches if batches else 0.0
        print(f"  {name:34s} {t['wall']:8.1f} {t['cpu']:8.1f} {int(t['count']):6d} {share:7.1f}%")


if __name__ == "__main__":
    sys.exit(main())
