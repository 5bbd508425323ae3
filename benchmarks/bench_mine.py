"""Mining benchmark: `cudagen mine` over the installed Warp (or a subset of its files).

    python benchmarks/bench_mine.py                     # everything: the targets below
    python benchmarks/bench_mine.py --every 8           # every 8th file (a quick subset)
    python benchmarks/bench_mine.py --every 8 --verbatim 5

Figures, all measured in this run on the same files:
- kernel definitions found by AST vs kernels generated (overloads count one each), rows
  (distinct after dedup), NVRTC compile pass rate, share of rows executed with test vectors;
- wall time, and its ratio to the floor: the same files mined with --no-compile --no-run
  (import + Warp code generation only, same workers, same pool);
- per top-level folder (tests, examples, _src, ...): definitions, rows, executed;
- ``--verbatim N``: for N files, the forward and backward of every mined kernel are looked
  up in the CUDA Warp generates for the file's whole module (``ModuleBuilder`` over the
  module's kernels, as ``Module.load`` does): they must appear there verbatim.

Targets (issue #16, whole installed Warp 1.19, 2-core machine): >= 2,000 distinct kernels,
>= 97% pass the compile check, >= 40% executed, <= 600 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=1, help="mine every Nth file (1 = all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument(
        "--compile", dest="level", default="frontend", choices=("frontend", "ptx"), help="compile check level"
    )
    parser.add_argument("--verbatim", type=int, default=0, help="files to check against Warp's module codegen")
    parser.add_argument("--no-floor", action="store_true", help="skip the --no-compile --no-run floor run")
    args = parser.parse_args()

    from cudagen_data.mine import discover, pool, run

    files = discover.find_files(None)[:: args.every]
    t0 = time.perf_counter()
    full = run.mine_sources(
        files, workers=args.workers, options=pool.Options(timeout_s=args.timeout, compile_level=args.level)
    )
    full_s = time.perf_counter() - t0
    s = full.stats
    print(f"files: {len(files)} (every {args.every}th of the installed Warp)")
    print(f"kernel definitions (AST): {s['kernel_definitions']}")
    print(f"kernels generated (overloads one each): {s['kernels_generated']}")
    print(f"rows (distinct after dedup): {s['rows']}")
    print(
        f"compile check ({args.level}): {s['compile_passed']}/{s['compile_checked']} = "
        f"{100 * (s['compile_pass_rate'] or 0):.1f}%"
    )
    print(f"executed with test vectors: {s['executed']}/{s['rows']} = {100 * (s['executed_rate'] or 0):.1f}%")
    print(f"not mined, by reason: {s['rejects_by_reason']}")
    print(f"rows not executed, by reason: {s['not_executed_by_reason']}")
    print(f"  argument type cannot be filled, by kind of the first such argument: {s['unfillable_arguments']}")
    print(f"executed rows keeping only their order-independent outputs: {s['executed_partly_order_dependent']}")
    by_dir = Counter(), Counter(), Counter()
    for f in files:
        try:
            import ast

            by_dir[0][_top(f.relpath)] += len(discover.kernel_defs(ast.parse(Path(f.path).read_text())))
        except SyntaxError:
            pass
    for row in full.rows:
        by_dir[1][_top(row.provenance.path)] += 1
        by_dir[2][_top(row.provenance.path)] += row.provenance.executed
    for d in sorted(by_dir[0]):
        print(f"  {d}: {by_dir[0][d]} definitions, {by_dir[1][d]} rows, {by_dir[2][d]} executed")
    print(f"wall time: {full_s:.1f} s ({args.workers} workers); worker seconds by stage: {s['stage_seconds']}")
    if not args.no_floor:
        t0 = time.perf_counter()
        run.mine_sources(
            files, workers=args.workers, options=pool.Options(timeout_s=args.timeout, compile_check=False, run=False)
        )
        floor_s = time.perf_counter() - t0
        print(f"floor (import + codegen only, same files and workers): {floor_s:.1f} s; ratio {full_s / floor_s:.2f}x")
    if args.every == 1:
        checks = [
            ("distinct kernels >= 2000", s["rows"] >= 2000),
            ("compile pass >= 97%", (s["compile_pass_rate"] or 0) >= 0.97),
            ("executed >= 40%", (s["executed_rate"] or 0) >= 0.40),
            ("time <= 600 s", full_s <= 600),
        ]
        for name, ok in checks:
            print(f"target {name}: {'PASS' if ok else 'FAIL'}")
    if args.verbatim:
        return verbatim(files, full.rows, args.verbatim)
    return 0


def _top(relpath: str) -> str:
    parts = relpath.split("/")
    return parts[1] if len(parts) > 2 else parts[-1]


def verbatim(files, rows, n: int) -> int:
    """Compare mined text with Warp's codegen of each sampled file's whole module."""
    from cudagen_data.mine.verbatim import module_cuda_contains

    by_file: dict[str, list] = {}
    for row in rows:
        by_file.setdefault(row.provenance.path, []).append(row)
    sample = [f for f in files if f.relpath in by_file][:: max(1, len(by_file) // n)][:n]
    checked = mismatched = 0
    for f in sample:
        found, missing = module_cuda_contains(f, by_file[f.relpath])
        checked += found + len(missing)
        mismatched += len(missing)
        for name in missing:
            print(f"  not verbatim: {f.relpath}: {name}")
    print(
        f"verbatim: {checked - mismatched}/{checked} kernels of {len(sample)} files found verbatim in Warp's module "
        "CUDA"
    )
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
