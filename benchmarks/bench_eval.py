"""`cudagen eval` benchmark: candidates/s through the ladder, and its floor, in one run.

    python benchmarks/bench_eval.py [--dataset DIR | --rows 60] [--candidates 400]
                                    [--device cpu|cuda:0] [--workers N] [--partial]
                                    [--run-stage-cpu ROWS]

Candidates are each row's own CUDA plus every mutant of it (eval/mutants.py), repeated
in that order up to --candidates (so most rows have several candidates, as in pass@k);
--partial adds the partial-work family (eval/mutants.py: make_partial_mutants).
Rows come from --dataset (every split) or are produced first with the producer
(--rows, not timed).

- cpu: structure + NVRTC front end (targets: >= 20 candidates/s on the 2-core machine).
  Floor, measured in the same run: the bare NVRTC front end of the same candidates'
  units, batched exactly as the judge first submits them (no parsing, no bisection, no
  bookkeeping); overhead = judge / floor - 1.
- cuda:N: the whole ladder on the GPU (target: 1,000 candidates in <= 120 s on an H100,
  16 workers), split into worker start-up, CPU stages and run stage.
--run-stage-cpu ROWS: what the run stage's input sets cost, on Warp's CPU backend (no
GPU needed): per row, the CPU reference (recorded, fresh and adversarial sets at every
recorded size; once per row, shared by its candidates) and one judging of the row's own
kernel on all of them (what each candidate pays in launches), against the judge before
issue #23 (recorded + one fresh set, three guard fills each) measured in the same run;
and a candidate's NVRTC build (to PTX, as the GPU build) with and without the
precompiled header the eval workers now keep.
Both check that every candidate lands where it must (own CUDA: passes; each mutant:
fails at its stage) and print the disagreements.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import orjson

_EXPECT_CPU = {"structure": "none", "compile": "structure", "run": "compile"}


def load_rows(dataset: Path | None, count: int, workers: int) -> tuple[list[dict], dict[str, str]]:
    from cudagen_data.gpu.recheck import dataset_rows

    if dataset is None:
        from cudagen_data.pipeline.config import ProduceConfig
        from cudagen_data.pipeline.producer import produce

        dataset = Path(tempfile.mkdtemp(prefix="bench-eval-")) / "ds"
        t0 = time.perf_counter()
        from cudagen_data.generators import categories

        try:
            produce(
                ProduceConfig(count=count, categories=tuple(categories()), seed=3),
                dataset,
                workers=workers,
                overwrite=True,
                progress=False,
            )
        except ModuleNotFoundError as exc:  # the dataset card needs `datasets`; the data is complete without it
            if not (dataset / "manifest.json").exists():
                raise
            print(f"note: dataset card not written ({exc.name} missing)", file=sys.stderr)
        print(f"produced {count} rows in {time.perf_counter() - t0:.1f} s (not timed below)")
    # dicts: the run stage's helpers timed here (eval/run.py) still read rows by column name
    rows = [row.to_dict() for _, row in dataset_rows(dataset)]
    preambles = orjson.loads((dataset / "manifest.json").read_bytes()).get("preambles", {})
    return rows, preambles


def candidates(rows: list[dict], n: int, partial: bool = False):
    from cudagen_data.eval import Candidate, make_mutants
    from cudagen_data.eval.mutants import make_partial_mutants

    per_row = []
    for i, row in enumerate(rows):
        items = [(row, Candidate(row["id"], row["cuda_forward"], row["cuda_backward"] or None), "original", "pass")]
        items += [
            (row, Candidate(row["id"], m.forward), m.kind, m.stage)
            for m in make_mutants(row, rows[i + 1 : i + 2] or rows[:1])
        ]
        if partial:
            items += [
                (row, Candidate(row["id"], m.forward, m.backward), m.kind, m.stage) for m in make_partial_mutants(row)
            ]
        per_row.append(items)
    out = []
    while len(out) < n and per_row:
        for items in per_row:  # row-major: a row's candidates stay together, as a model's samples would
            out.extend(items)
            if len(out) >= n:
                break
    return out[:n]


def front_end_floor(items, preambles, scorer) -> float:
    """Seconds for the bare NVRTC front end over the same units, batched as the judge batches them."""
    from cudagen_data.contracts.row import as_row
    from cudagen_data.eval.compile import BATCH, Unit, batch_text

    units = []
    for row, cand, _, _ in items:
        if scorer._structure(as_row(row), cand).ok:  # noqa: SLF001 - only to pick the same units; not timed
            back = cand.backward if cand.backward is not None else row["cuda_backward"]
            units.append(
                Unit(
                    scorer._preamble(as_row(row), preambles),
                    row["device_functions"],
                    cand.forward,
                    back,
                    int(row["compile"]["arch"]),
                )
            )  # noqa: SLF001
    groups: dict[tuple[str, int], list] = {}  # as compile_many groups them: one preamble and arch per NVRTC call
    seen = set()
    for u in units:
        if (u.text(), u.arch) not in seen:
            seen.add((u.text(), u.arch))
            groups.setdefault((u.preamble, u.arch), []).append(u)
    batches = [(g[i : i + BATCH]) for g in groups.values() for i in range(0, len(g), BATCH)]
    texts = [(batch_text(b)[0], b[0].arch) for b in batches]
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    with ThreadPoolExecutor(scorer.threads) as pool:
        list(pool.map(lambda ta: scorer.front_end(*ta), texts))
    return time.perf_counter() - t0


def run_stage_cpu(rows: list[dict]) -> int:
    """Per row: the CPU reference and one judging of the row's own kernel on Warp's CPU
    backend, now and as the judge was before issue #23 (recorded + one fresh set, every
    set with the three guard fills), in the same run."""
    import dataclasses

    from cudagen_data import warp_boundary
    from cudagen_data.eval.reference import ReferenceUnavailable, compute_reference
    from cudagen_data.eval.run import (
        GUARD_FILLS,
        CandidateBuildFailed,
        compile_substituted,
        judge_set,
        planned_runs,
        run_guarded,
    )
    from cudagen_data.execution import CPU_OPT_LEVEL

    def judged(ref, kernel, runs, backward):
        for s, fill, with_backward in runs:
            got = run_guarded(s.spec, kernel, "cpu", s.inputs, s.output_grads, backward and with_backward, fill)
            if judge_set(ref, s, got, outputs_only=not with_backward):
                return False
        return True

    totals = {"ref_now": 0.0, "ref_before": 0.0, "judge_now": 0.0, "judge_before": 0.0, "runs_now": 0, "runs_before": 0}
    done = 0
    for row in rows:
        try:
            t0 = time.perf_counter()
            now = compute_reference(row, seed=1)
            t1 = time.perf_counter()
            before = compute_reference(row, seed=1, fresh_sets=1, adversarial=False, min_random_draws=1, sizes=1)
            t2 = time.perf_counter()
        except ReferenceUnavailable:
            continue
        # the judge before #23: the row's own size only, recorded + one fresh set
        own = [s for s in before.sets if s.size == 0 and s.name in ("recorded", "fresh 1")]
        before = dataclasses.replace(before, sets=own)
        old_runs = [(s, fill, i == 0) for s in before.sets for i, fill in enumerate(GUARD_FILLS)]
        spec, backward = now.spec, bool(row["cuda_backward"])
        with warp_boundary.batch_module([(spec.python_source, spec.kernel_name)], optimization_level=CPU_OPT_LEVEL) as (
            module, kernels, _):  # fmt: skip
            if kernels[0] is None or warp_boundary.build_module(module, "cpu") is not None:
                continue
            t3 = time.perf_counter()
            ok_now = judged(now, kernels[0], planned_runs(now), backward)
            t4 = time.perf_counter()
            ok_before = judged(before, kernels[0], old_runs, backward)
            t5 = time.perf_counter()
        if not (ok_now and ok_before):
            print(f"  WRONG: the row's own kernel fails its judging on the CPU: {row['id']} {row['kernel_name']}")
        done += 1
        totals["ref_now"] += t1 - t0
        totals["ref_before"] += t2 - t1  # includes the CPU build of the row's module, as the other does
        totals["judge_now"] += t4 - t3
        totals["judge_before"] += t5 - t4
        totals["runs_now"] += len(planned_runs(now))
        totals["runs_before"] += len(old_runs)
    n = max(done, 1)
    print(f"run stage on the CPU backend, {done} rows (each row's own kernel):")
    print(
        f"  CPU reference per row (once per row, all its candidates): now {totals['ref_now'] / n:.3f} s, "
        f"before {totals['ref_before'] / n:.3f} s, ratio {totals['ref_now'] / max(totals['ref_before'], 1e-9):.2f}"
    )
    builds = [r for r in rows if r["cuda_forward"]][:6]
    timed: dict[bool, list[float]] = {False: [], True: []}
    for row in builds:  # alternating, so load on the machine hits both alike
        for pch in (False, True):
            t0 = time.perf_counter()
            try:
                compile_substituted(row, row["cuda_forward"], None, pch)
            except CandidateBuildFailed as exc:
                print(f"  WRONG: the row's own CUDA does not build: {row['id']}: {exc}")
            timed[pch].append(time.perf_counter() - t0)
    warp_boundary.remove_nvrtc_pch(os.getpid())
    if len(builds) > 1:
        with_pch, without = sum(timed[True][1:]) / (len(builds) - 1), sum(timed[False]) / len(builds)
        print(f"  candidate build (NVRTC to PTX, as the GPU build), {len(builds)} rows: without the precompiled "
              f"header {without:.2f} s; with it (as the eval workers build) {with_pch:.2f} s once made "
              f"(the first build, which makes it, {timed[True][0]:.2f} s): ratio {with_pch / without:.2f}")  # fmt: skip
    now_ms, before_ms = 1000 * totals["judge_now"] / n, 1000 * totals["judge_before"] / n
    print(f"  judging per candidate: now {totals['runs_now'] / n:.1f} launches in {now_ms:.1f} ms, "
          f"before {totals['runs_before'] / n:.1f} launches in {before_ms:.1f} ms, "
          f"ratio {now_ms / max(before_ms, 1e-9):.2f}")  # fmt: skip
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=60, help="rows to produce when no --dataset is given")
    ap.add_argument("--candidates", type=int, default=400)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None, help="GPU worker processes (default: CPU cores)")
    ap.add_argument("--partial", action="store_true", help="add the partial-work mutants (issue #23)")
    ap.add_argument("--run-stage-cpu", type=int, default=0, metavar="ROWS",
                    help="only measure the run stage's input sets on the CPU backend, on ROWS rows")  # fmt: skip
    args = ap.parse_args()

    from cudagen_data.eval import Scorer

    rows, preambles = load_rows(args.dataset, args.rows, args.workers or 0)
    if args.run_stage_cpu:
        return run_stage_cpu(rows[: args.run_stage_cpu])
    items = candidates(rows, args.candidates, args.partial)
    gpu = args.device.startswith("cuda")
    print(
        f"{len(items)} candidates for {len({r['id'] for r, *_ in items})} rows; kinds: "
        f"{dict(Counter(k for _, _, k, _ in items))}"
    )

    t0 = time.perf_counter()
    scorer = Scorer(args.device, workers=args.workers, full_compile=False)
    started = time.perf_counter() - t0
    try:
        # Not timed: preambles (regenerated where the manifest lacks them) and NVRTC's
        # precompiled header of each one, so neither the judge nor the floor pays for it.
        from cudagen_data.contracts.row import as_row
        from cudagen_data.eval.compile import Unit

        warm = {}
        for row, _cand, _, _ in items:
            pre = scorer._preamble(as_row(row), preambles)  # noqa: SLF001
            warm.setdefault(
                (pre, int(row["compile"]["arch"])),
                Unit(
                    pre, row["device_functions"], row["cuda_forward"], row["cuda_backward"], int(row["compile"]["arch"])
                ),
            )
        if scorer.front_end is not None:
            for u in warm.values():
                scorer.front_end(u.text(), u.arch)
        t1 = time.perf_counter()
        scores = scorer.score_many([(r, c) for r, c, _, _ in items], preambles)
        judged = time.perf_counter() - t1
        floor = None if gpu and scorer.front_end is None else front_end_floor(items, preambles, scorer)
    finally:
        scorer.close()

    wrong, passed_mutants = [], []
    for k, ((row, _, kind, stage), sc) in enumerate(zip(items, scores, strict=False)):
        if gpu:
            got = "pass" if sc.reached == "run" else sc.failed.name if sc.failed else "incomplete"
            ok = got == stage
            if not ok and stage == "run" and got == "pass":
                passed_mutants.append(k)  # judged below by the CPU witness
                continue
        else:
            got = sc.reached
            ok = got == ("compile" if stage == "pass" else _EXPECT_CPU[stage])
        if not ok:
            wrong.append((row["id"], kind, stage, got, sc.failed.detail[:120] if sc.failed else ""))
    if passed_mutants:
        from cudagen_data.eval.equivalence import verdicts
        from cudagen_data.eval.mutants import Mutant

        t2 = time.perf_counter()
        found = [(items[k][0], Mutant(items[k][2], items[k][1].forward, "run", items[k][1].backward))
                 for k in passed_mutants]  # fmt: skip
        seen = verdicts(found, seed=scorer.seed, workers=args.workers)
        print(
            f"run-stage mutants the judge let pass: {len(found)}; CPU witness ({time.perf_counter() - t2:.0f} s, not "
            "timed above): "
            f"{dict(Counter((m.kind, v.status) for (_, m), v in zip(found, seen, strict=False)))}"
        )
        run_stage = sum(stage == "run" for *_, stage in items)
        equivalent = sum(v.status == "equivalent" for v in seen)
        print(
            f"equivalent on the judge's inputs: {equivalent} of {run_stage} run-stage mutants "
            f"({100 * equivalent / max(run_stage, 1):.1f}%)"
        )
        for (row, m), v in zip(found, seen, strict=False):
            if v.status != "equivalent":
                wrong.append((row["id"], m.kind, "run", "pass", f"CPU witness: {v.status}: {v.detail[:100]}"))
    print(f"scorer: {scorer.describe()}")
    print(f"stage reached: {dict(Counter(s.reached for s in scores))}")
    rate = len(items) / judged
    print(
        f"judge: {len(items)} candidates in {judged:.2f} s = {rate:.1f} candidates/s "
        f"({'structure + front end' if not gpu else 'whole ladder on ' + args.device})"
    )
    if gpu:
        print(
            f"worker start-up (overlaps the CPU stages): {started:.2f} s to launch; target: 1,000 candidates in <= "
            "120 s "
            f"-> {1000 / rate:.1f} s at this rate"
        )
    if floor is not None:
        print(
            f"floor: bare NVRTC front end of the same units, same batches: {floor:.2f} s = {len(items) / floor:.1f} "
            "candidates/s; "
            f"judge / floor = {judged / floor:.2f} (overhead {100 * (judged / floor - 1):.0f}%)"
        )
    if not gpu:
        print(f"target >= 20 candidates/s: {'MET' if rate >= 20 else 'NOT MET'}")
    print(f"landed where expected (or shown equivalent): {len(items) - len(wrong)}/{len(items)}")
    for w in wrong[:20]:
        print("  WRONG", *w)
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
