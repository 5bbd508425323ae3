"""`cudagen eval --timing` on a GPU: does the timing mean something, what does it cost, and where does the time go.

    python benchmarks/bench_timing.py --device cuda:0 --rows 300 --candidates 1000 --workers 16 [--part own,slowed,cost]
    python benchmarks/bench_timing.py --device cpu --rows 6 --candidates 12      # CPU stand-in: the plumbing only

Rows come from --dataset (every split) or are produced first (--rows, not timed).  Three
parts (--part picks any of them; own and slowed run together, in one Scorer, when both are
picked; cost runs two fresh Scorers, worker start-up included in each):

own     Every row's own CUDA (forward, and backward where it has one) timed against itself:
        target median |speedup - 1| <= 5%; prints the spread (p5, quartiles, p95, largest
        deviation) and how many rows were timed at a scaled size.
slowed  A slowed copy of every row's forward (eval/speed.slowed_forward: a redundant loop of
        dependent volatile updates before the work, results unchanged): target >= 95% of the
        timed rows measured slower (speedup < 1).
cost    --candidates candidates (each row's own CUDA and its mutants, as benchmarks/bench_eval.py
        makes them) scored without and then with timing, in this run: target with / without <= 2.

Every part prints where the timing's time went, summed over its timed candidates
(``TimingResult.cost_s``, worker-seconds): building the row's own kernel and the row's
setup (size probe, inputs, the reference's results; once per row), recording the
candidate's launches, waiting for the exclusive GPU lock, holding it (the launch loop:
serialised over all workers), reading the results; and the locked share of the part's
wall time.

--device cpu: Warp's CPU backend stands in for the GPU, in this process (no worker pool):
a candidate's CUDA is not compiled, the row's Python kernel stands in for it (for the
slowed part, the row's Python kernel with a redundant loop), the timing runs 1 warm-up and
5 timed launches at about 8,192 threads.  It runs every code path of the timing and the
report; its figures are not the GPU targets (and are not judged).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import statistics
import sys
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_eval import candidates, load_rows  # noqa: E402

SPANS = ("own_build", "row_setup", "prepare", "lock_wait", "locked", "after")
PARTS = ("own", "slowed", "cost")


@dataclass
class Scored:
    """What this benchmark reads of a candidate's score (from a Score, or the CPU stand-in's Outcome)."""

    reached_run: bool
    speedup: float | None
    timing: dict | None
    why: str  # the failure, or the notes of an untimed candidate


def _spread(values: list[float]) -> str:
    if not values:
        return "none timed"
    q = statistics.quantiles(values, n=20) if len(values) > 1 else values * 19
    quart = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return (
        f"p5 {q[0]:.3f}, q1 {quart[0]:.3f}, median {statistics.median(values):.3f}, q3 {quart[2]:.3f}, p95 {q[-1]:.3f}"
    )


def _where_time_goes(scores: list[Scored], wall: float) -> str:
    totals = dict.fromkeys(SPANS, 0.0)
    for s in scores:
        for k, v in ((s.timing or {}).get("cost_s") or {}).items():
            totals[k] = totals.get(k, 0.0) + v
    timed = sum(1 for s in scores if s.timing)
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in totals.items())
    return (
        f"   timing's own time over {timed} timed candidates (worker-seconds): {parts}; "
        f"locked {totals['locked'] / max(wall, 1e-9):.1%} of the {wall:.1f} s wall time"
    )


# --------------------------------------------------------------------------- scoring: GPU


def _score_gpu(device, workers, timing, pairs, preambles) -> tuple[list[Scored], float]:
    from cudagen_data.eval import Scorer

    t0 = time.perf_counter()
    with Scorer(device, workers=workers, timing=timing, full_compile=False) as scorer:
        scores = scorer.score_many(pairs, preambles)
    secs = time.perf_counter() - t0
    out = [
        Scored(s.reached == "run", s.speedup, s.timing, s.failed.detail if s.failed else "; ".join(s.notes))
        for s in scores
    ]
    return out, secs


# --------------------------------------------------------------------------- scoring: the CPU stand-in

SLOW_PYTHON_ITERATIONS = 200


def slowed_python(source: str, kernel_name: str) -> str:
    """The row's Python kernel with a redundant loop of dependent updates before its body
    (the CPU stand-in's speed.slowed_forward); results unchanged."""
    fn = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == kernel_name
    )  # fmt: skip
    first = fn.body[0]
    pad = " " * first.col_offset
    loop = (
        f"{pad}cudagen_acc = float(0.0)\n{pad}for cudagen_r in range({SLOW_PYTHON_ITERATIONS}):\n"
        f"{pad}    cudagen_acc += wp.sin(cudagen_acc + float(cudagen_r))\n"
        f"{pad}if cudagen_acc > 1.0e30:\n{pad}    return\n"
    )
    lines = source.splitlines(keepends=True)
    lines.insert(first.lineno - 1, loop)
    return "".join(lines)


@contextlib.contextmanager
def cpu_stand_in(stand_ins: dict[str, str]):
    """The run stage's GPU build replaced by a Python kernel on Warp's CPU backend (the row's,
    or ``stand_ins[candidate forward]``), and the timing scaled down to the CPU."""
    from cudagen_data import warp_boundary
    from cudagen_data.eval import run, timing

    @contextlib.contextmanager
    def cpu_kernel(row, forward, backward, device, precompiled_header=False):
        with warp_boundary.loaded_source(stand_ins.get(forward, row.python_source)) as loaded:
            yield getattr(loaded.module, row.kernel_name), "cpu (stand-in)"

    saved = run.candidate_kernel, timing.candidate_kernel, timing.METHOD
    run.candidate_kernel = timing.candidate_kernel = cpu_kernel
    timing.METHOD = timing.Method(warmup=1, timed=5, target_threads=1 << 13, flush_bytes=1 << 20)
    try:
        yield
    finally:
        run.candidate_kernel, timing.candidate_kernel, timing.METHOD = saved


def _score_cpu(timing, pairs, stand_ins) -> tuple[list[Scored], float]:
    from cudagen_data.eval.pool import Job, run_inline
    from cudagen_data.eval.structure import row_key

    t0 = time.perf_counter()
    jobs: dict[str, Job] = {}
    for i, (row, cand) in enumerate(pairs):
        job = jobs.setdefault(row_key(row), Job(row, 5, [], fresh_sets=1, timing=timing))
        job.candidates.append((i, cand.forward, cand.backward))
    with cpu_stand_in(stand_ins):
        results = run_inline(list(jobs.values()), "cpu", OrderedDict())
    secs = time.perf_counter() - t0
    out = []
    for i in range(len(pairs)):
        o = results[i]
        speedup = o.timing["speedup"] if o.ok and o.timing else None
        out.append(Scored(o.ok, speedup, o.timing, o.detail or "; ".join(o.notes)))
    return out, secs


# --------------------------------------------------------------------------- the parts


def part_own_slowed(score, rows, own: bool, slowed: bool, stand_in: bool) -> bool:
    """The own and slowed parts; both selected, in one scoring run (per row one reference,
    one build of the own kernel and one timing setup serve both, as for several samples)."""
    from cudagen_data.eval import Candidate
    from cudagen_data.eval.speed import slowed_forward

    pairs, stand_ins = [], {}
    if own:
        pairs += [(r, Candidate(r.id, r.cuda_forward, r.cuda_backward or None)) for r in rows]
    if slowed:
        for r in rows:
            text = slowed_forward(r.cuda_forward)
            pairs.append((r, Candidate(r.id, text)))
            if stand_in:
                stand_ins[text] = slowed_python(r.python_source, r.kernel_name)
    scores, secs = score(True, pairs, stand_ins)
    what = " and ".join(p for p, on in (("own vs own", own), ("slowed", slowed)) if on)
    print(f"{what}: {len(rows)} rows, {len(pairs)} candidates scored with timing in {secs:.1f} s")
    ok = True
    if own:
        ok &= _report_own(scores[: len(rows)], rows)
    if slowed:
        ok &= _report_slowed(scores[-len(rows) :], rows)
    print(_where_time_goes(scores, secs))
    return ok


def _report_own(scores: list[Scored], rows) -> bool:
    timed = [s for s in scores if s.speedup is not None]
    speedups = [s.speedup for s in timed]
    dev = [abs(s - 1.0) for s in speedups]
    sizes = Counter("scaled" if s.timing["size"].startswith("scaled") else "recorded" for s in timed)
    backward = sum(1 for s in timed if s.timing["backward"] is not None)
    untimed = Counter(s.why[:90] for s in scores if s.speedup is None)
    med = statistics.median(dev) if dev else float("nan")
    print(f"own vs own: {len(timed)} of {len(rows)} rows timed ({dict(sizes)}; {backward} with a backward)")
    print(f"   speedup {_spread(speedups)}; median |speedup - 1| {med:.4f} (target <= 0.05); "
          f"max {max(dev, default=0):.3f}")  # fmt: skip
    print(f"   within 5%: {sum(d <= 0.05 for d in dev) / max(len(dev), 1):.1%}; not timed: {dict(untimed) or 0}")
    return med <= 0.05


def _report_slowed(scores: list[Scored], rows) -> bool:
    speedups = [s.speedup for s in scores if s.speedup is not None]
    slower = sum(s < 1.0 for s in speedups) / len(speedups) if speedups else 0.0
    failed = Counter(s.why[:90] for s in scores if not s.reached_run)
    print(f"slowed: {len(speedups)} of {len(rows)} timed, {slower:.1%} measured slower (target >= 95%)")
    print(f"   speedup {_spread(speedups)}; failed: {dict(failed) or 0}")
    return slower >= 0.95


def part_cost(score, rows, n_candidates) -> bool:
    items = candidates(rows, n_candidates)
    pairs = [(row, cand) for row, cand, _, _ in items]
    plain, t_plain = score(False, pairs, {})
    timed, t_timed = score(True, pairs, {})
    n_timed = sum(s.speedup is not None for s in timed)
    same = [a.reached_run for a in plain] == [b.reached_run for b in timed]
    print(f"cost: {len(pairs)} candidates: without timing {t_plain:.1f} s, with timing {t_timed:.1f} s "
          f"({n_timed} timed); ratio {t_timed / t_plain:.2f} (target <= 2); same verdicts: {same}")  # fmt: skip
    if not same:
        diff = Counter(
            (a.reached_run, b.reached_run, b.why[:80]) for a, b in zip(plain, timed, strict=True)
            if a.reached_run != b.reached_run
        )  # fmt: skip
        print(f"   differences (passed without, passed with, why): {dict(diff)}")
    print(_where_time_goes(timed, t_timed))
    return t_timed / t_plain <= 2.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--part", default="all", help=f"comma-separated parts to run: {', '.join(PARTS)} (default all)")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each part's lines survive a time limit that ends the run
    parts = PARTS if args.part == "all" else tuple(p.strip() for p in args.part.split(","))
    bad = [p for p in parts if p not in PARTS]
    if bad:
        print(f"error: --part {','.join(bad)}: use {', '.join(PARTS)} or all", file=sys.stderr)
        return 2
    if args.device != "cpu":
        from cudagen_data.eval import Scorer

        try:  # before any rows are made: the Scorer's own check of the device
            Scorer(args.device, timing=True).close()
        except ValueError as exc:
            print(f"error: --device {args.device}: {exc}", file=sys.stderr)
            return 2
    if args.rows < 1:
        print(f"error: --rows {args.rows}: at least 1", file=sys.stderr)
        return 2

    rows, preambles = load_rows(args.dataset, args.rows, args.workers or 0)
    rows = [r for r in rows if r.cuda_forward][: args.rows]
    stand_in = args.device == "cpu"
    if stand_in:
        print("CPU stand-in: candidate CUDA is not compiled (Python kernels stand in); figures are not the GPU targets")

        def score(timing, pairs, stand_ins):
            return _score_cpu(timing, pairs, stand_ins)
    else:

        def score(timing, pairs, stand_ins):
            return _score_gpu(args.device, args.workers, timing, pairs, preambles)

    ok = True
    t0 = time.perf_counter()
    if "own" in parts or "slowed" in parts:
        ok &= part_own_slowed(score, rows, "own" in parts, "slowed" in parts, stand_in)
    if "cost" in parts:
        ok &= part_cost(score, rows, args.candidates)
    print(f"parts {', '.join(parts)} in {time.perf_counter() - t0:.1f} s")
    if stand_in:
        print("done (CPU stand-in: targets not judged)")
        return 0
    print("OK" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
