"""`cudagen produce --resources`: what it costs, and that every row that compiles gets one.

    python benchmarks/bench_resources.py [--count 1000] [--workers 2] [--categories all|a,b,...]

Two runs of the same configuration (same seed, so the same kernels), one with
``--resources`` and one without, each into a fresh folder, same workers; prints:
- rows, and rows with a ``resources`` column (target: 100% of the rows, i.e. of every kernel
  that passed the compile check and the rest of the pipeline);
- wall time of both runs and their ratio (the extra cost of a full compile per kernel);
- the compile stage's seconds in both runs (where the cost lands);
- that the two datasets hold the same rows apart from the column (the measurement
  changes nothing else);
- registers and spills over the dataset (median forward / backward registers, rows that spill).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import orjson


def _rows(folder: Path) -> dict[str, dict]:
    out = {}
    for path in sorted((folder / "jsonl").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            row = orjson.loads(line)
            out[row["id"]] = row
    return out


def main() -> None:
    from cudagen_data.contracts.row import strip_timing
    from cudagen_data.generators import categories as all_categories
    from cudagen_data.pipeline.config import ProduceConfig
    from cudagen_data.pipeline.producer import produce

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--categories", default="all")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    cats = tuple(all_categories()) if args.categories == "all" else tuple(args.categories.split(","))

    tmp = Path(tempfile.mkdtemp(prefix="bench_resources_"))
    try:
        timings, stats, folders = {}, {}, {}
        for resources in (False, True):
            folder = tmp / ("with" if resources else "without")
            config = ProduceConfig(count=args.count, categories=cats, seed=args.seed, resources=resources)
            t0 = time.perf_counter()
            result = produce(config, folder, workers=args.workers, progress=False)
            timings[resources] = time.perf_counter() - t0
            stats[resources] = result.stats
            folders[resources] = folder

        without, with_ = _rows(folders[False]), _rows(folders[True])
        measured = [r for r in with_.values() if r["resources"] is not None]
        same_rows = sorted(without) == sorted(with_) and all(
            strip_timing({**with_[i], "resources": None}) == strip_timing(without[i]) for i in without
        )
        res = orjson.loads((folders[True] / "stats.json").read_bytes())["resources"]
        s_off, s_on = stats[False]["stage_seconds"], stats[True]["stage_seconds"]
        print(f"bench_resources: {args.count} pairs, {len(cats)} categories, {args.workers} workers, seed {args.seed}")
        print(f"  rows: {len(with_)}; with a resources column: {len(measured)} ({len(measured) / len(with_):.1%})")
        print(f"  same rows apart from the column: {same_rows}")
        ratio = timings[True] / timings[False]
        print(f"  wall time: without {timings[False]:.1f} s, with {timings[True]:.1f} s; ratio {ratio:.2f}x")
        print(
            f"  compile stage (worker seconds): without {s_off.get('compile', 0):.1f} s, "
            f"with {s_on.get('compile', 0):.1f} s"
        )
        a = res["all"]
        print(
            f"  median registers: forward {a['median_forward_registers']}, backward {a['median_backward_registers']}; "
            f"rows that spill: {a['rows_with_spills']}"
        )
        for cat, d in res["by_category"].items():
            print(
                f"    {cat:<14} rows {d['rows']:>5}  fwd {d['median_forward_registers']}  "
                f"bwd {d['median_backward_registers']}  spill {d['rows_with_spills']}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
