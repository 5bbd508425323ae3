"""What the extra sizes cost per row (#23 item 5), and what they buy (items 1 and 2).

    python benchmarks/bench_sizes.py [--count 150] [--seed 11] [--categories all|a,b,...]

The same kernels go through the worker stages (generate, extract, NVRTC front end,
execute, gradient check) twice in this one process, each time from an empty Warp kernel
cache: once recording the generated size only (the floor: ExecuteStage(all_sizes=False))
and once at every size (the default).  Printed:

- CPU seconds per kept row (this process: Warp's LLVM builds and NVRTC run in it) and
  wall seconds, both ways, and the ratio (target: at most +30% CPU per row);
- test_vectors bytes per row both ways;
- from the all-sizes run: rows with all 3 sizes per category (target >= 80%, every
  category), fixed-size rows, rows with an unused argument, and the input_blind and
  vacuous_backward rejects.
"""

from __future__ import annotations

import argparse
import collections
import time


def run_stages(config, all_sizes: bool):
    from cudagen_data import warp_boundary
    from cudagen_data.pipeline.work import worker_stages
    from cudagen_data.stages import ExecuteStage, Item

    stages = [ExecuteStage(all_sizes=all_sizes) if isinstance(s, ExecuteStage) else s for s in worker_stages(config)]
    items = [Item(slot, *config.slot(slot)) for slot in range(config.count)]
    rejects = []
    with warp_boundary.fresh_kernel_cache():
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for stage in stages:
            items, dropped = stage(items)
            rejects += dropped
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return items, rejects, cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=150)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--categories", default="all")
    args = parser.parse_args()

    from cudagen_data import generators
    from cudagen_data.pipeline.config import ProduceConfig

    categories = generators.categories() if args.categories == "all" else tuple(args.categories.split(","))
    config = ProduceConfig(count=args.count, categories=categories, seed=args.seed, batch_size=args.count)
    results = {}
    for all_sizes in (False, True):
        items, rejects, cpu, wall = run_stages(config, all_sizes)
        results[all_sizes] = (items, rejects, cpu, wall)
        n = max(len(items), 1)
        vbytes = sum(len(it.vectors.to_json()) for it in items) / n
        label = "every size  " if all_sizes else "own size only"
        print(
            f"{label}: {len(items)} rows kept of {config.count}; CPU {cpu:.1f} s = {cpu / n:.3f} s/row; "
            f"wall {wall:.1f} s; test_vectors {vbytes / 1024:.1f} KiB/row"
        )
    (one, _, cpu1, _), (every, rejects, cpu3, _) = results[False], results[True]
    per1, per3 = cpu1 / max(len(one), 1), cpu3 / max(len(every), 1)
    print(f"extra CPU per row for the other sizes: {per3 / per1 - 1:+.1%} (target <= +30%; ratio {per3 / per1:.3f})")

    tally = collections.defaultdict(collections.Counter)
    for it in every:
        t = tally[it.category]
        t["rows"] += 1
        t["3 sizes"] += len(it.vectors.sets()) >= 3
        t["fixed size"] += it.size_note.startswith("fixed size")
        t["unused args"] += bool(it.unused_args)
    print(f"\n{'category':14} {'rows':>5} {'3 sizes':>8} {'%':>6} {'fixed':>6} {'unused':>7}")
    total = collections.Counter()
    for cat in categories:
        t = tally[cat]
        total.update(t)
        share = t["3 sizes"] / t["rows"] if t["rows"] else 0.0
        print(f"{cat:14} {t['rows']:5} {t['3 sizes']:8} {share:6.1%} {t['fixed size']:6} {t['unused args']:7}")
    share = total["3 sizes"] / total["rows"] if total["rows"] else 0.0
    t = total
    print(f"{'all':14} {t['rows']:5} {t['3 sizes']:8} {share:6.1%} {t['fixed size']:6} {t['unused args']:7}")
    reasons = collections.Counter(str(r.reason) for r in rejects)
    print(
        f"\nrejects (every size): input_blind {reasons['input_blind']}, vacuous_backward "
        f"{reasons['vacuous_backward']}; all: {dict(sorted(reasons.items()))}"
    )
    unused = total["unused args"] / max(total["rows"], 1)
    print(f"rows with an unused argument: {total['unused args']} of {total['rows']} ({unused:.1%}; target < 2%)")


if __name__ == "__main__":
    main()
