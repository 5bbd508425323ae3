"""`cudagen eval --timing` on a GPU: does the timing mean something, and what does it cost.

    python benchmarks/bench_timing.py --device cuda:0 --rows 300 --candidates 1000 --workers 16

Rows come from --dataset (every split) or are produced first (--rows, not timed).  Three
measurements, each with a fresh Scorer (worker start-up included in every one):

1. Every row's own CUDA (forward, and backward where it has one) timed against itself:
   target median |speedup - 1| <= 5%; prints the spread (p5, quartiles, p95, largest
   deviation) and how many rows were timed at a scaled size.
2. A slowed copy of every row's forward (eval/speed.slowed_forward: a redundant loop of
   dependent volatile updates before the work, results unchanged): target >= 95% of the
   timed rows measured slower (speedup < 1).
3. --candidates candidates (each row's own CUDA and its mutants, as benchmarks/bench_eval.py
   makes them) scored without and then with timing: target with / without <= 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_eval import candidates, load_rows  # noqa: E402


def _spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=20) if len(values) > 1 else values * 19
    quart = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return (
        f"p5 {q[0]:.3f}, q1 {quart[0]:.3f}, median {statistics.median(values):.3f}, q3 {quart[2]:.3f}, p95 {q[-1]:.3f}"
    )


def _score(device, workers, timing, pairs, preambles):
    from cudagen_data.eval import Scorer

    t0 = time.perf_counter()
    with Scorer(device, workers=workers, timing=timing, full_compile=False) as scorer:
        scores = scorer.score_many(pairs, preambles)
    return scores, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    if not args.device.startswith("cuda"):
        print("error: --device cuda:N: timing needs a GPU", file=sys.stderr)
        return 2

    from cudagen_data.eval import Candidate
    from cudagen_data.eval.speed import slowed_forward

    rows, preambles = load_rows(args.dataset, args.rows, args.workers or 0)
    rows = rows[: args.rows]
    ok = True

    # 1. own vs own
    pairs = [(r, Candidate(r["id"], r["cuda_forward"], r["cuda_backward"] or None)) for r in rows]
    scores, secs = _score(args.device, args.workers, True, pairs, preambles)
    timed = [s for s in scores if s.speedup is not None]
    speedups = [s.speedup for s in timed]
    dev = [abs(s - 1.0) for s in speedups]
    sizes = Counter("scaled" if s.timing["size"].startswith("scaled") else "recorded" for s in timed)
    untimed = Counter((s.failed.detail if s.failed else "; ".join(s.notes))[:90] for s in scores if s.speedup is None)
    med = statistics.median(dev) if dev else float("nan")
    print(f"1. own vs own: {len(rows)} rows, {len(timed)} timed ({dict(sizes)}), {secs:.1f} s")
    print(f"   speedup {_spread(speedups)}; median |speedup - 1| {med:.4f} (target <= 0.05); max {max(dev):.3f}")
    print(f"   within 5%: {sum(d <= 0.05 for d in dev) / len(dev):.1%}; not timed: {dict(untimed) or 0}")
    ok &= med <= 0.05

    # 2. slowed
    pairs = [(r, Candidate(r["id"], slowed_forward(r["cuda_forward"]))) for r in rows]
    scores, secs = _score(args.device, args.workers, True, pairs, preambles)
    speedups = [s.speedup for s in scores if s.speedup is not None]
    slower = sum(s < 1.0 for s in speedups) / len(speedups) if speedups else 0.0
    failed = Counter(s.failed.detail[:90] for s in scores if s.failed)
    print(
        f"2. slowed: {len(speedups)} of {len(rows)} timed, {slower:.1%} measured slower (target >= 95%), {secs:.1f} s"
    )
    print(f"   speedup {_spread(speedups)}; failed: {dict(failed) or 0}")
    ok &= slower >= 0.95

    # 3. cost
    items = candidates(rows, args.candidates)
    pairs = [(row, cand) for row, cand, _, _ in items]
    plain, t_plain = _score(args.device, args.workers, False, pairs, preambles)
    timed_scores, t_timed = _score(args.device, args.workers, True, pairs, preambles)
    n_timed = sum(s.speedup is not None for s in timed_scores)
    same = [a.reached for a in plain] == [b.reached for b in timed_scores]
    print(f"3. {len(pairs)} candidates: without timing {t_plain:.1f} s, with timing {t_timed:.1f} s "
          f"({n_timed} timed); ratio {t_timed / t_plain:.2f} (target <= 2); same stages reached: {same}")  # fmt: skip
    if not same:
        diff = Counter(
            (a.reached, b.reached) for a, b in zip(plain, timed_scores, strict=True) if a.reached != b.reached
        )
        print(f"   differences (without, with): {diff}")
    ok &= t_timed / t_plain <= 2.0
    print("OK" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
