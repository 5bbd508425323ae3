"""Benchmark the six basic generators against issue #3's acceptance criteria.

Generates ``--count`` kernels (equal per category) and reports:

- generation speed;
- exact duplicates (identical ``python_source``)                       -> must be 0;
- distinct canonical shapes, overall and per category                  -> >= 95% / >= 90%;
- distinct Warp builtins called (``wp.<name>(...)`` across sources)    -> >= 80;
- kernels Warp's codegen rejects (every kernel)                        -> < 0.5%;
- NVRTC compile failures on a sample (default 1,000 kernels)           -> 0;
- the difficulty split per category.

Generation and codegen run in ``--jobs`` worker processes (default 2: the machine's
cores); each worker generates and extracts its share, so the figures are the same for
any number of jobs.  Prints the figures and PASS/FAIL per criterion; exits non-zero if a
criterion fails.

Usage: python benchmarks/bench_generators.py [--count 10000] [--seed 0] [--jobs 2] [--nvrtc-sample 1000]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import multiprocessing as mp
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHUNK = 40  # specs per work item


@dataclass
class Record:
    category: str
    index: int
    source: str
    shape_hash: str
    builtins: list[str]
    difficulty: str
    gen_s: float
    codegen_error: str | None = None
    kernels: list = field(default_factory=list)  # ExtractedKernel, only for the NVRTC sample


def work(item: tuple[list[tuple[str, int]], int, bool, frozenset]) -> list[Record]:
    """Generate (and extract) one chunk of (category, index) pairs."""
    triples, seed, codegen, nvrtc_keys = item
    from cudagen_data import canonical
    from cudagen_data.generators import generate
    from cudagen_data.generators.basic.features import wp_calls

    if codegen:
        from cudagen_data.extract import ExtractError, extract_kernels
    out = []
    for category, index in triples:
        t0 = time.perf_counter()
        spec = generate(category, seed, index)
        gen_s = time.perf_counter() - t0
        rec = Record(
            category,
            index,
            spec.python_source,
            canonical.shape_hash(spec.python_source),
            wp_calls(ast.parse(spec.python_source)),
            spec.difficulty,
            gen_s,
        )
        if codegen:
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    kernels = extract_kernels(spec.python_source)
                if (category, index) in nvrtc_keys:
                    rec.kernels = kernels
            except ExtractError as exc:
                rec.codegen_error = str(exc)[:300]
        out.append(rec)
    return out


def compile_sample(kernels: list) -> list[tuple[bool, str]]:
    from cudagen_data.extract import compile_units

    return [(r.ok, r.log[:300]) for r in compile_units(kernels)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10000, help="kernels in total (split equally over categories)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for generation + codegen")
    ap.add_argument("--nvrtc-sample", type=int, default=1000, help="kernels compiled with NVRTC (0: skip)")
    ap.add_argument("--no-codegen", action="store_true", help="skip the Warp codegen and NVRTC checks")
    args = ap.parse_args()

    from cudagen_data.generators.basic import GENERATORS

    cats = list(GENERATORS)
    per_cat = args.count // len(cats)
    total = per_cat * len(cats)
    # interleave categories so every chunk costs about the same
    order = [(c, i) for i in range(per_cat) for c in cats]
    step = max(1, total // max(args.nvrtc_sample, 1))
    nvrtc_keys = frozenset(order[::step][: args.nvrtc_sample]) if args.nvrtc_sample > 0 else frozenset()
    codegen = not args.no_codegen
    items = [(order[k : k + CHUNK], args.seed, codegen, nvrtc_keys) for k in range(0, total, CHUNK)]
    print(f"{total} kernels ({per_cat} per category), seed {args.seed}, {args.jobs} job(s)")

    t0 = time.perf_counter()
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            chunks = pool.map(work, items, chunksize=1)
    else:
        chunks = [work(it) for it in items]
    wall = time.perf_counter() - t0
    records = [r for ch in chunks for r in ch]
    gen_cpu = sum(r.gen_s for r in records)
    print(
        f"generation{' + codegen' if codegen else ''}: {wall:.1f} s wall; generation alone "
        f"{1000 * gen_cpu / max(total, 1):.1f} ms/kernel (per process)"
    )

    results: list[tuple[str, bool]] = []
    by_cat: dict[str, list[Record]] = {c: [] for c in cats}
    for r in records:
        by_cat[r.category].append(r)

    # exact duplicates
    dups = sum(n - 1 for n in Counter(r.source for r in records).values())
    print(f"exact duplicates (python_source): {dups}")
    results.append(("exact duplicates == 0", dups == 0))

    # canonical shapes and tiers
    print(f"{'category':<14}{'kernels':>8}{'shapes':>8}{'distinct':>10}   basic/intermediate/advanced")
    cat_ok = True
    for c in cats:
        rs = by_cat[c]
        n_shapes = len({r.shape_hash for r in rs})
        frac = n_shapes / max(len(rs), 1)
        tiers = Counter(r.difficulty for r in rs)
        split = "/".join(str(tiers.get(t, 0)) for t in ("basic", "intermediate", "advanced"))
        print(f"{c:<14}{len(rs):>8}{n_shapes:>8}{100 * frac:>9.1f}%   {split}")
        cat_ok &= frac >= 0.90
    n_all = len({r.shape_hash for r in records})
    overall = n_all / max(total, 1)
    print(f"{'overall':<14}{total:>8}{n_all:>8}{100 * overall:>9.1f}%")
    results.append(("distinct shapes >= 95% overall", overall >= 0.95))
    results.append(("distinct shapes >= 90% per category", cat_ok))

    # builtins
    used = Counter(b for r in records for b in r.builtins)
    print(f"distinct Warp builtins called: {len(used)}")
    print("  " + " ".join(sorted(used)))
    results.append(("distinct builtins >= 80", len(used) >= 80))

    if codegen:
        rejected = [r for r in records if r.codegen_error]
        for r in rejected[:5]:
            print(f"  codegen rejected {r.category}/{r.index}: {r.codegen_error[:160]}")
        per = Counter(r.category for r in rejected)
        print(
            f"codegen: {total - len(rejected)}/{total} accepted, {len(rejected)} rejected "
            f"({100 * len(rejected) / max(total, 1):.2f}%) {dict(per) if per else ''}"
        )
        results.append(("codegen rejections < 0.5%", len(rejected) / max(total, 1) < 0.005))

        sample = [k for r in records if r.kernels for k in r.kernels]
        if sample:
            t0 = time.perf_counter()
            halves = [sample[k :: args.jobs] for k in range(args.jobs)] if args.jobs > 1 else [sample]
            if args.jobs > 1:
                with mp.get_context("spawn").Pool(args.jobs) as pool:
                    outcomes = [o for part in pool.map(compile_sample, halves) for o in part]
            else:
                outcomes = compile_sample(sample)
            bad = [log for ok, log in outcomes if not ok]
            print(f"NVRTC: {len(sample) - len(bad)}/{len(sample)} compiled in {time.perf_counter() - t0:.1f} s")
            for log in bad[:3]:
                print(f"  {log}")
            results.append((f"NVRTC failures == 0 on {len(sample)}", not bad))

    print()
    for name, ok in results:
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
