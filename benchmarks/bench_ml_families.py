"""Generate ML-family kernels and push them through the real pipeline stages.

Per category: generate ``--count`` kernels from ``--seed``, extract their CUDA and
compile it with NVRTC (batched), run them on Warp's CPU backend (forward + backward),
apply the family's NumPy reference check, and count distinct canonical shapes.

    python benchmarks/bench_ml_families.py --count 1000 --seed 0
    python benchmarks/bench_ml_families.py --count 20 --categories softmax norm
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudagen_data import canonical  # noqa: E402
from cudagen_data.extract import DEFAULT_BLOCK_DIM, ExtractError, compile_units, extract_kernels  # noqa: E402
from cudagen_data.generators import generate  # noqa: E402
from cudagen_data.generators.ml import GENERATORS, REFERENCE_CHECKS  # noqa: E402
from cudagen_data.validate.execute import execute_specs  # noqa: E402


def bench_category(category: str, count: int, seed: int, batch: int, verbose: bool) -> dict:
    t0 = time.perf_counter()
    specs = [generate(category, seed, i) for i in range(count)]
    t_gen = time.perf_counter() - t0
    shapes = Counter(canonical.shape_hash(s.python_source) for s in specs)
    tiers = Counter(s.difficulty for s in specs)

    # extract + NVRTC compile
    t0 = time.perf_counter()
    compiled_ok = [False] * count
    failures: Counter = Counter()
    examples: dict[str, str] = {}
    extracted, owners = [], []
    for i, spec in enumerate(specs):
        try:
            kernels = extract_kernels(spec.python_source, block_dim=spec.block_dim or DEFAULT_BLOCK_DIM)
            kernel = next(k for k in kernels if k.name == spec.kernel_name)
        except (ExtractError, StopIteration) as exc:
            failures["extract"] += 1
            examples.setdefault("extract", f"#{i}: {exc}")
            continue
        extracted.append(kernel)
        owners.append(i)
    for start in range(0, len(extracted), batch):
        results = compile_units(extracted[start:start + batch])
        for i, res in zip(owners[start:start + batch], results):
            compiled_ok[i] = res.ok
            if not res.ok:
                failures["compile"] += 1
                examples.setdefault("compile", f"#{i}: {res.log[:300]}")
    t_compile = time.perf_counter() - t0

    # CPU execution (forward + backward), then the NumPy reference on the outputs
    t0 = time.perf_counter()
    executed_ok = [False] * count
    numpy_ok = [False] * count
    check = REFERENCE_CHECKS[category]
    for start in range(0, count, batch):
        chunk = specs[start:start + batch]
        results = execute_specs(chunk, reference_checks={})  # reference applied below, counted on its own
        for k, (spec, res) in enumerate(zip(chunk, results)):
            i = start + k
            if not res.ok:
                failures[f"exec:{res.reason}"] += 1
                examples.setdefault(f"exec:{res.reason}", f"#{i} {spec.kernel_name}: {res.detail[:300]}")
                continue
            executed_ok[i] = True
            message = check(spec, res.inputs, res.outputs)
            if message:
                failures["numpy"] += 1
                examples.setdefault("numpy", f"#{i} {spec.kernel_name}: {message}")
            else:
                numpy_ok[i] = True
    t_exec = time.perf_counter() - t0

    all_ok = sum(c and e and n for c, e, n in zip(compiled_ok, executed_ok, numpy_ok))
    row = {
        "category": category,
        "count": count,
        "compile": sum(compiled_ok),
        "execute": sum(executed_ok),
        "numpy": sum(numpy_ok),
        "all": all_ok,
        "shapes_pct": 100.0 * len(shapes) / count,
        "tiers": dict(tiers),
        "seconds": (t_gen, t_compile, t_exec),
        "failures": dict(failures),
        "examples": examples if verbose else {},
    }
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="kernels per category (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--categories", nargs="*", default=list(GENERATORS), help="subset of the ML categories")
    parser.add_argument("--batch", type=int, default=50, help="kernels per NVRTC unit / CPU module")
    parser.add_argument("--quiet", action="store_true", help="do not print an example of each failure kind")
    args = parser.parse_args(argv)

    header = f"{'category':<12} {'count':>5} {'compile':>8} {'execute':>8} {'numpy':>8} {'all':>6} {'shapes%':>8}  tiers (b/i/a)   time s (gen/nvrtc/cpu)"
    print(header, flush=True)
    rows = []
    for category in args.categories:
        row = bench_category(category, args.count, args.seed, args.batch, not args.quiet)
        rows.append(row)
        t = row["tiers"]
        g, c, e = row["seconds"]
        print(f"{category:<12} {row['count']:>5} {row['compile']:>8} {row['execute']:>8} {row['numpy']:>8} "
              f"{row['all']:>6} {row['shapes_pct']:>7.1f}%  {t.get('basic', 0)}/{t.get('intermediate', 0)}/"
              f"{t.get('advanced', 0)}  {g:.1f}/{c:.1f}/{e:.1f}"
              + (f"  failures: {row['failures']}" if row["failures"] else ""), flush=True)
        for key, text in row["examples"].items():
            print(f"    [{category}] {key}: {text}", flush=True)
    ok = all(r["all"] == r["count"] and r["shapes_pct"] >= 80.0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
