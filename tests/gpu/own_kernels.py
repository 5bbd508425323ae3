"""Every row's own CUDA through ``cudagen eval``'s judge on a GPU, with the failures in full.

A right candidate must score 1.0: the row's own CUDA (forward alone, and forward with its
backward) is the rightest candidate there is.  Where it fails, the judge would give a right
answer reward 0.  This prints, for each failure, the row, the stage, the input set, the size
and the judge's detail, and writes them as JSON lines for a closer look.

    python3 tests/gpu/own_kernels.py DATASET_DIR [--device cuda:0] [--workers 16] [--seed 1]
                                     [--fresh-sets 4] [--out own_failures.jsonl] [--limit N]

Exit status 0 when every own kernel passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import orjson


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fresh-sets", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("own_failures.jsonl"))
    parser.add_argument("--limit", type=int, default=None, help="the first N rows only")
    args = parser.parse_args()

    from cudagen_data.eval import Candidate, Scorer
    from cudagen_data.gpu.recheck import dataset_rows

    rows = [row for _, row in dataset_rows(args.dataset)][: args.limit]
    preambles = orjson.loads((args.dataset / "manifest.json").read_bytes())["preambles"]
    pairs = [(r, Candidate(r.id, r.cuda_forward)) for r in rows]
    pairs += [(r, Candidate(r.id, r.cuda_forward, r.cuda_backward)) for r in rows if r.cuda_backward]
    t0 = time.perf_counter()
    with Scorer(args.device, workers=args.workers, seed=args.seed, fresh_sets=args.fresh_sets) as scorer:
        scores = scorer.score_many(pairs, preambles)
    took = time.perf_counter() - t0
    failures, notes = [], Counter()
    for (row, cand), s in zip(pairs, scores, strict=True):
        for note in s.notes:
            notes[note.split(":")[0][:60]] += 1
        if s.reached == "run":
            continue
        f = s.failed
        failures.append({
            "id": row.id, "kernel_name": row.kernel_name, "category": row.category,
            "with_backward": cand.backward is not None, "stage": f.name if f else None,
            "detail": f.detail if f else "incomplete", "notes": s.notes, "input_sets": s.input_sets,
        })  # fmt: skip
    with open(args.out, "wb") as fh:
        for f in failures:
            fh.write(orjson.dumps(f) + b"\n")
    rows_failed = {f["id"] for f in failures}
    print(f"own kernels: {len(pairs)} candidates of {len(rows)} rows in {took:.1f} s on {args.device} "
          f"(seed {args.seed})")  # fmt: skip
    print(f"passed {len(pairs) - len(failures)} / {len(pairs)}; rows with a failure: {len(rows_failed)}")
    for note in sorted({n for (_, _), s in zip(pairs, scores, strict=True) for n in s.notes if "own CUDA" in n}):
        print(f"CALIBRATED {note}")
    for f in failures:
        print(f"FAIL {f['category']}/{f['kernel_name']} {f['id']} bwd={f['with_backward']} {f['stage']}: {f['detail']}")
    if notes:
        print("notes (by first words):", dict(notes.most_common(12)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
