"""What the gradient check adds to the cost of a pair (issue #12 target: at most +35%).

Runs the producer's per-batch work on ``--count`` kernels of every category, in batches
of ``--batch`` (the producer's unit: one NVRTC translation unit, one CPU module for
execution, one for the check), in this process, timing each step:

    generate + extract (Warp codegen) -> NVRTC compile -> CPU execution -> gradient check

The floor is the same run without the check (everything before it, on the same kernels,
in the same process); the figure is the check's time per pair and its ratio to that
floor.  Also prints where the check's own time goes (module build vs probe launches) and
the check's verdicts.

    python benchmarks/bench_gradcheck.py --count 600            # the lead's quiet-machine run
    python benchmarks/bench_gradcheck.py --count 60 --batch 30  # a small run
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = 0.35


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from cudagen_data import gradcheck
    from cudagen_data.execution import execute_specs
    from cudagen_data.extract import DEFAULT_BLOCK_DIM, compile_units, extract_source
    from cudagen_data.generators import categories, generate

    cats = categories()
    slots = [(cats[s % len(cats)], s // len(cats)) for s in range(args.count)]
    t = collections.Counter()
    verdicts = collections.Counter()
    build = [0.0]
    inner = gradcheck._build

    def timed_build(module, device):
        t0 = time.perf_counter()
        try:
            return inner(module, device)
        finally:
            build[0] += time.perf_counter() - t0

    gradcheck._build = timed_build
    pairs = 0
    for start in range(0, len(slots), args.batch):
        chunk = slots[start : start + args.batch]
        t0 = time.perf_counter()
        specs, kernels = [], []
        for cat, index in chunk:
            spec = generate(cat, args.seed, index)
            report = extract_source(spec.python_source, block_dim=spec.block_dim or DEFAULT_BLOCK_DIM)
            kernel = next((k for k in report.kernels if k.name == spec.kernel_name), None)
            if kernel is not None and not report.errors:
                specs.append(spec)
                kernels.append(kernel)
        t1 = time.perf_counter()
        compiled = compile_units(kernels)
        specs = [s for s, c in zip(specs, compiled, strict=False) if c.ok]
        t2 = time.perf_counter()
        runs = execute_specs(specs)
        ok = [(s, r) for s, r in zip(specs, runs, strict=False) if r.ok]
        t3 = time.perf_counter()
        checks = gradcheck.check_gradients([s for s, _ in ok], [r for _, r in ok])
        t4 = time.perf_counter()
        t.update({"generate+extract": t1 - t0, "compile": t2 - t1, "execute": t3 - t2, "check": t4 - t3})
        verdicts.update(c.status for c in checks)
        pairs += len(ok)
    floor = t["generate+extract"] + t["compile"] + t["execute"]
    per = 1000.0 / max(pairs, 1)
    print(f"{pairs} pairs executed ({args.count} kernels, batches of {args.batch})")
    for k in ("generate+extract", "compile", "execute", "check"):
        print(f"  {k:<17} {t[k]:8.1f} s  {t[k] * per:7.1f} ms/pair")
    print(f"  check: module builds {build[0]:.1f} s, probes {t['check'] - build[0]:.1f} s")
    ratio = t["check"] / floor if floor else float("nan")
    print(
        f"floor (same run without the check): {floor * per:.1f} ms/pair; with it: {(floor + t['check']) * per:.1f} "
        "ms/pair"
    )
    print(
        f"check adds {ratio:+.1%} to the per-pair cost (target <= +{TARGET:.0%}): "
        f"{'met' if ratio <= TARGET else 'NOT met'}"
    )
    # Per *shipped* pair: rows the check rejects (adjoint_mismatch) cost the whole pipeline
    # and are replaced by other kernels, so they count against the check too.
    shipped = pairs - verdicts["mismatch"]
    if shipped:
        with_check = (floor + t["check"]) / shipped
        without = floor / pairs
        print(
            f"per shipped pair (adjoint_mismatch rejects {verdicts['mismatch']} of {pairs} replaced): "
            f"{with_check * 1000:.1f} ms vs {without * 1000:.1f} ms without the check: {with_check / without - 1:+.1%}"
        )
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
