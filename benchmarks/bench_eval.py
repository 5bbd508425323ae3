"""`cudagen eval` benchmark: candidates/s through the ladder, and its floor, in one run.

    python benchmarks/bench_eval.py [--dataset DIR | --rows 60] [--candidates 400]
                                    [--device cpu|cuda:0] [--workers N]

Candidates are each row's own CUDA plus every mutant of it (eval/mutants.py), repeated
in that order up to --candidates (so most rows have several candidates, as in pass@k).
Rows come from --dataset (every split) or are produced first with the producer
(--rows, not timed).

- cpu: structure + NVRTC front end (targets: >= 20 candidates/s on the 2-core machine).
  Floor, measured in the same run: the bare NVRTC front end of the same candidates'
  units, batched exactly as the judge first submits them (no parsing, no bisection, no
  bookkeeping); overhead = judge / floor - 1.
- cuda:N: the whole ladder on the GPU (target: 1,000 candidates in <= 120 s on an H100,
  16 workers), split into worker start-up, CPU stages and run stage.
Both check that every candidate lands where it must (own CUDA: passes; each mutant:
fails at its stage) and print the disagreements.
"""

from __future__ import annotations

import argparse
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
    rows = [row for _, row in dataset_rows(dataset)]
    preambles = orjson.loads((dataset / "manifest.json").read_bytes()).get("preambles", {})
    return rows, preambles


def candidates(rows: list[dict], n: int):
    from cudagen_data.eval import Candidate, make_mutants

    per_row = []
    for i, row in enumerate(rows):
        items = [(row, Candidate(row["id"], row["cuda_forward"], row["cuda_backward"] or None), "original", "pass")]
        items += [
            (row, Candidate(row["id"], m.forward), m.kind, m.stage)
            for m in make_mutants(row, rows[i + 1 : i + 2] or rows[:1])
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
            back = cand.backward if cand.backward is not None else row["cuda_backward"]
            units.append(
                Unit(
                    scorer._preamble(row, preambles),
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=60, help="rows to produce when no --dataset is given")
    ap.add_argument("--candidates", type=int, default=400)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None, help="GPU worker processes (default: CPU cores)")
    args = ap.parse_args()

    from cudagen_data.eval import Scorer

    rows, preambles = load_rows(args.dataset, args.rows, args.workers or 0)
    items = candidates(rows, args.candidates)
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
        from cudagen_data.eval.compile import Unit

        warm = {}
        for row, _cand, _, _ in items:
            pre = scorer._preamble(row, preambles)  # noqa: SLF001
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
        found = [(items[k][0], Mutant(items[k][2], items[k][1].forward, "run")) for k in passed_mutants]
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
