"""`cudagen eval` benchmark: candidates/s through the ladder, and its floor, in one run.

    python benchmarks/bench_eval.py [--dataset DIR | --rows 60] [--candidates 400]
                                    [--device cpu|cuda:0] [--workers N] [--partial]
                                    [--seed S] [--cpu-run-stage] [--outcomes FILE] [--compare FILE]
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
  16 workers), split into worker start-up, CPU stages and run stage; the run stage by
  phase, summed over the workers: the rows' CPU references, the candidates' GPU builds,
  their judging (launches and comparisons).
--cpu-run-stage (cpu): then the run stage on Warp's CPU backend, through the eval
workers' own code (eval/pool.process_job: the row's reference, then each candidate built
and judged), each candidate stood in for by its CPU counterpart: the row's own kernel
for its CUDA, the same edit in Warp's CPU kernel function for a mutant (as the witness
of eval/equivalence.py makes it; the candidates of a row share one CPU build, timed as
the first one's build).  Mutants without a CPU counterpart (bounds_check_dropped,
memorized_outputs, a tile mask through blocks, a tile kernel's writes_zeros, whose CPU
counterpart crashes the launch) are left out.  Prints the run stage by
phase (reference / build / judge) and each candidate's verdict.
--outcomes FILE writes every candidate's verdict (stage, pass, detail; JSON lines);
--compare FILE prints where this run's verdicts differ from such a file (a change to the
judge must keep them: same candidates at the same stages).  --seed fixes the fresh
inputs' seed (default: a random one, as `cudagen eval`), so two runs can be compared.
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
import contextlib
import os
import re
import sys
import tempfile
import time
from collections import Counter, OrderedDict
from pathlib import Path

import orjson

_EXPECT_CPU = {"structure": "none", "compile": "structure", "run": "compile"}


def load_rows(dataset: Path | None, count: int, workers: int) -> tuple[list, dict[str, str]]:
    """The dataset's rows (contract Rows) and its preambles (``count`` rows produced where no dataset is given)."""
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
    rows = [row for _, row in dataset_rows(dataset)]
    preambles = orjson.loads((dataset / "manifest.json").read_bytes()).get("preambles", {})
    return rows, preambles


def candidates(rows: list, n: int, partial: bool = False):
    from cudagen_data.eval import Candidate, make_mutants
    from cudagen_data.eval.mutants import make_partial_mutants

    per_row = []
    for i, row in enumerate(rows):
        items = [(row, Candidate(row.id, row.cuda_forward, row.cuda_backward or None), "original", "pass")]
        items += [
            (row, Candidate(row.id, m.forward), m.kind, m.stage)
            for m in make_mutants(row, rows[i + 1 : i + 2] or rows[:1])
        ]
        if partial:
            items += [
                (row, Candidate(row.id, m.forward, m.backward), m.kind, m.stage) for m in make_partial_mutants(row)
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
    from cudagen_data.eval.compile import BATCH, Unit, batch_text

    units = []
    for row, cand, _, _ in items:
        if scorer._structure(row, cand).ok:  # noqa: SLF001 - only to pick the same units; not timed
            back = cand.backward if cand.backward is not None else row.cuda_backward
            units.append(
                Unit(
                    scorer._preamble(row, preambles),
                    row.device_functions,
                    cand.forward,
                    back,
                    int(row.compile.arch),
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


def run_stage_cpu(rows: list) -> int:
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
        spec, backward = now.spec, bool(row.cuda_backward)
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
            print(f"  WRONG: the row's own kernel fails its judging on the CPU: {row.id} {row.kernel_name}")
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
    builds = [r for r in rows if r.cuda_forward][:6]
    timed: dict[bool, list[float]] = {False: [], True: []}
    for row in builds:  # alternating, so load on the machine hits both alike
        for pch in (False, True):
            t0 = time.perf_counter()
            try:
                compile_substituted(row, row.cuda_forward, None, pch)
            except CandidateBuildFailed as exc:
                print(f"  WRONG: the row's own CUDA does not build: {row.id}: {exc}")
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


class CpuStandIns:
    """The CPU counterparts of the candidates of each row, built in one CPU module per row
    (renamed copies of the row's kernel, each with its candidate's edit), on first use.

    ``build`` is eval/pool.process_job's ``build``: a candidate's forward and backward
    text -> (kernel, how it was built), or CandidateBuildFailed."""

    def __init__(self):
        # row key -> (forward, backward) -> (kind, (part, edit) or None)
        self.plans: dict[tuple, dict[tuple, tuple]] = {}
        self.built: dict[tuple, dict] = {}  # row key -> (forward, backward) -> kernel, or str (why not)
        self._stack = contextlib.ExitStack()

    def add(self, row, forward: str, backward: str | None, kind: str) -> bool:
        """Plan the stand-in of one candidate; False where it has none."""
        from cudagen_data.eval.equivalence import lanes_cut
        from cudagen_data.eval.mutants import BODY_EDITS, PARTIAL_MASKS, Mutant, block_size, masked_cpu, replayed_cpu
        from cudagen_data.eval.structure import row_key

        if kind == "original":
            edit = None
        elif kind in BODY_EDITS:
            if kind == "writes_zeros" and row.block_dim:
                return False  # a tile zeroed in place loses its storage on the CPU: the launch segfaults
            edit = ("forward", BODY_EDITS[kind])
        elif kind == "replayed_outputs":
            edit = ("forward", lambda text: replayed_cpu(row, text))
        elif kind in PARTIAL_MASKS:
            mask, block, tiled = PARTIAL_MASKS[kind], block_size(row), bool(row.block_dim)
            if tiled and lanes_cut(row, Mutant(kind, forward, "run", backward))[0]:
                return False  # a mask through a block's lanes: no one-lane CPU counterpart
            edit = (mask.part, lambda text, m=mask, b=block, t=tiled: masked_cpu(text, m, b, t))
        else:
            return False  # bounds_check_dropped (a widened launch), memorized_outputs: none here
        self.plans.setdefault(row_key(row), {})[(forward, backward)] = (kind, edit)
        return True

    @contextlib.contextmanager
    def build(self, row, forward: str, backward: str | None, device: str, precompiled_header: bool = False):
        from cudagen_data.eval.run import CandidateBuildFailed
        from cudagen_data.eval.structure import row_key

        key = row_key(row)
        if key not in self.built:
            self.built[key] = self._build_row(row, self.plans[key])
        got = self.built[key].get((forward, backward), "no CPU stand-in planned")
        if isinstance(got, str):
            raise CandidateBuildFailed(got)
        yield got, "CPU stand-in"

    def _build_row(self, row, plan: dict) -> dict:
        from cudagen_data import warp_boundary
        from cudagen_data.eval.equivalence import _changed_lines
        from cudagen_data.eval.mutants import BODY_EDITS
        from cudagen_data.execution import CPU_OPT_LEVEL

        batch = self._stack.enter_context(warp_boundary.open_batch_module(optimization_level=CPU_OPT_LEVEL))
        self._stack.enter_context(warp_boundary.fresh_kernel_cache())
        name = row.kernel_name
        kernels, edits, kinds = {}, [], {}
        for i, (cand, (kind, edit)) in enumerate(plan.items()):
            kinds[cand] = kind
            new = f"{name}_cudagen_s{i}"
            source = re.sub(rf"^def {re.escape(name)}\(", f"def {new}(", row.python_source, count=1, flags=re.M)
            kernel, why = batch.add(source, new)
            kernels[cand] = kernel if kernel is not None else f"the stand-in does not load: {why}"
            if kernel is not None and edit is not None:
                edits.append((cand, (kernel, *edit)))
        try:
            with warp_boundary.edited_cpu_functions(batch.module, [e for _, e in edits]) as done:
                problem = warp_boundary.build_module(batch.module, "cpu")
        except warp_boundary.SubstitutionMissing as exc:
            problem = str(exc)
        if problem is not None:
            return dict.fromkeys(plan, f"the stand-ins' CPU module does not build: {problem}")
        for (cand, _), record in zip(edits, done, strict=True):
            if kinds[cand] in BODY_EDITS and record:
                # a body edit must change the same lines in the CPU forward as in the CUDA one (as the witness)
                if _changed_lines(*record[-1]) != _changed_lines(row.cuda_forward, cand[0]):
                    kernels[cand] = "the edit changes other lines in the CPU forward than in the CUDA one"
        return kernels

    def close(self) -> None:
        self._stack.close()


def cpu_run_stage(items, scores, seed: int) -> dict[int, tuple[str, bool, str]]:
    """The run stage on Warp's CPU backend for the candidates that passed the CPU stages
    and have a CPU stand-in (eval/pool.process_job); prints it by phase.  Returns each
    judged candidate's (stage, passed, detail) by position."""
    from cudagen_data.eval.pool import Job, process_job
    from cudagen_data.eval.structure import row_key

    stand_ins = CpuStandIns()
    jobs: dict[tuple, object] = {}
    left_out = Counter()
    for k, ((row, cand, kind, _), sc) in enumerate(zip(items, scores, strict=True)):
        if sc.reached != "compile":
            continue
        if not stand_ins.add(row, cand.forward, cand.backward, kind):
            left_out[kind] += 1
            continue
        jobs.setdefault(row_key(row), Job(row, seed, [])).candidates.append((k, cand.forward, cand.backward))
    outcomes, phases = {}, Counter()
    cache: OrderedDict = OrderedDict()
    t0 = time.perf_counter()
    try:
        for job in jobs.values():
            for what, o in process_job(job, "cpu", cache, build=stand_ins.build):
                if what == "outcome":
                    outcomes[o.key] = (o.stage, o.ok, o.detail)
                    phases.update(o.phases)
    finally:
        stand_ins.close()
    took = time.perf_counter() - t0
    passed = sum(ok for _, ok, _ in outcomes.values())
    print(f"run stage on the CPU backend (stand-ins), {len(outcomes)} candidates of {len(jobs)} rows in {took:.1f} s: "
          f"{passed} passed; left out (no CPU stand-in): {dict(left_out)}")  # fmt: skip
    print("  by phase: " + ", ".join(f"{p} {phases[p]:.2f} s" for p in ("reference", "build", "judge"))
          + f" (reference per row {phases['reference'] / max(len(jobs), 1):.3f} s; judging per candidate "
          f"{1000 * phases['judge'] / max(len(outcomes), 1):.1f} ms)")  # fmt: skip
    return outcomes


def _verdicts(items, scores, run: dict[int, tuple[str, bool, str]]) -> list[dict]:
    out = []
    for k, ((row, _, kind, _), sc) in enumerate(zip(items, scores, strict=True)):
        failed = sc.failed
        line = {"k": k, "row": str(row.id), "kind": kind, "reached": sc.reached,
                "failed": failed.name if failed else None, "detail": failed.detail if failed else ""}  # fmt: skip
        if k in run:
            line["cpu_run"] = list(run[k])
        out.append(line)
    return out


def compare_verdicts(now: list[dict], before_path: Path) -> int:
    """Print where ``now`` differs from the verdicts in ``before_path``; the number of differences."""
    before = [orjson.loads(line) for line in before_path.read_bytes().splitlines() if line.strip()]
    diffs = [(a, b) for a, b in zip(before, now, strict=False) if a != b]
    diffs += [(a, None) for a in before[len(now) :]] + [(None, b) for b in now[len(before) :]]
    print(f"verdicts vs {before_path.name}: {len(now) - len(diffs)}/{max(len(now), len(before))} the same")
    for a, b in diffs[:10]:
        print(f"  DIFFERS before {a}\n          now    {b}")
    return len(diffs)


def _phases(outcomes) -> str:
    total = Counter()
    for o in outcomes:
        total.update(o.phases)
    rows = sum(1 for o in outcomes if o.phases.get("reference", 0.0) > 0.0)
    return (", ".join(f"{p} {total[p]:.1f} s" for p in ("reference", "build", "judge"))
            + f" (reference computed for {rows} jobs; judging {1000 * total['judge'] / max(len(outcomes), 1):.1f} ms "
            "per candidate)")  # fmt: skip


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
    ap.add_argument("--seed", type=int, default=None, help="the fresh inputs' seed (default: random)")
    ap.add_argument(
        "--cpu-run-stage",
        action="store_true",
        help="cpu: then the run stage on Warp's CPU backend, candidates stood in for by CPU counterparts",
    )
    ap.add_argument("--outcomes", type=Path, default=None, help="write every candidate's verdict here (JSON lines)")
    ap.add_argument("--compare", type=Path, default=None, help="print where the verdicts differ from this file")
    args = ap.parse_args()

    from cudagen_data.eval import Scorer

    rows, preambles = load_rows(args.dataset, args.rows, args.workers or 0)
    if args.run_stage_cpu:
        return run_stage_cpu(rows[: args.run_stage_cpu])
    items = candidates(rows, args.candidates, args.partial)
    gpu = args.device.startswith("cuda")
    print(
        f"{len(items)} candidates for {len({r.id for r, *_ in items})} rows; kinds: "
        f"{dict(Counter(k for _, _, k, _ in items))}"
    )

    t0 = time.perf_counter()
    scorer = Scorer(args.device, workers=args.workers, full_compile=False, seed=args.seed)
    started = time.perf_counter() - t0
    try:
        # Not timed: preambles (regenerated where the manifest lacks them) and NVRTC's
        # precompiled header of each one, so neither the judge nor the floor pays for it.
        from cudagen_data.eval.compile import Unit

        warm = {}
        for row, _cand, _, _ in items:
            pre = scorer._preamble(row, preambles)  # noqa: SLF001
            warm.setdefault(
                (pre, int(row.compile.arch)),
                Unit(pre, row.device_functions, row.cuda_forward, row.cuda_backward, int(row.compile.arch)),
            )
        if scorer.front_end is not None:
            for u in warm.values():
                scorer.front_end(u.text(), u.arch)
        t1 = time.perf_counter()
        scores = scorer.score_many([(r, c) for r, c, _, _ in items], preambles)
        judged = time.perf_counter() - t1
        run_outcomes = list(scorer._pool.results.values()) if scorer._pool is not None else []  # noqa: SLF001
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
            wrong.append((row.id, kind, stage, got, sc.failed.detail[:120] if sc.failed else ""))
    if passed_mutants:
        from cudagen_data.eval.equivalence import verdicts
        from cudagen_data.eval.mutants import Mutant

        t2 = time.perf_counter()
        found = [(items[k][0], Mutant(items[k][2], items[k][1].forward, "run", items[k][1].backward))
                 for k in passed_mutants]  # fmt: skip
        seen = verdicts(found, seed=scorer.seed, workers=args.workers, device=args.device)
        print(
            f"run-stage mutants the judge let pass: {len(found)}; witness ({time.perf_counter() - t2:.0f} s, not "
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
                wrong.append((row.id, m.kind, "run", "pass", f"CPU witness: {v.status}: {v.detail[:100]}"))
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
        print(f"run stage by phase, summed over the workers: {_phases(run_outcomes)}")
    if floor is not None:
        print(
            f"floor: bare NVRTC front end of the same units, same batches: {floor:.2f} s = {len(items) / floor:.1f} "
            "candidates/s; "
            f"judge / floor = {judged / floor:.2f} (overhead {100 * (judged / floor - 1):.0f}%)"
        )
    if not gpu:
        print(f"target >= 20 candidates/s: {'MET' if rate >= 20 else 'NOT MET'}")
    run = cpu_run_stage(items, scores, scorer.seed) if args.cpu_run_stage and not gpu else {}
    verdicts_now = _verdicts(items, scores, run)
    if args.outcomes is not None:
        args.outcomes.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in verdicts_now))
    if args.compare is not None and compare_verdicts(verdicts_now, args.compare):
        wrong.append(("-", "-", "-", "-", f"verdicts differ from {args.compare}"))
    print(f"landed where expected (or shown equivalent): {len(items) - len(wrong)}/{len(items)}")
    for w in wrong[:20]:
        print("  WRONG", *w)
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
