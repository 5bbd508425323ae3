"""`cudagen negatives` on a GPU: a random sample of shipped negatives sent through
`cudagen eval`'s scorer fails at exactly its recorded stage, and their positives pass 100%.

The negatives come from ``CUDAGEN_NEGATIVES_DATASET`` (a folder with a ``negatives``
configuration, e.g. made on the CPU machine and carried over) or, without it, from a
fresh dataset made here (``NEGATIVES_POSITIVES`` pairs of every category, then
``cudagen negatives`` on it).  ``CUDAGEN_NEGATIVES_SAMPLE`` (default 300) negatives are
drawn at random (seed 0).

With ``CUDAGEN_GPU_DRY_RUN=1`` (no GPU) the scorer's ladder ends after compile: structure
and compile negatives must fail at their stage, run-stage negatives must pass both (the
run stage itself is not checked there).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from conftest import JOBS

from cudagen_data.contracts.manifest import Manifest
from cudagen_data.contracts.row import is_real_row
from cudagen_data.eval import Candidate, Scorer

pytestmark = pytest.mark.gpu

NEGATIVES_POSITIVES = 120  # 8 a category: ~360 negatives at 3 a row
SAMPLE = int(os.environ.get("CUDAGEN_NEGATIVES_SAMPLE", "300"))


@pytest.fixture(scope="module")
def folder(cuda_device, tmp_path_factory) -> Path:
    given = os.environ.get("CUDAGEN_NEGATIVES_DATASET")
    if given:
        return Path(given)
    from make_dataset import make_dataset

    from cudagen_data.generators import categories
    from cudagen_data.negatives import make_negatives

    out = make_dataset(tmp_path_factory.mktemp("neg_gpu") / "ds", NEGATIVES_POSITIVES, categories=categories(),
                       workers=JOBS, batch_size=10)  # fmt: skip
    make_negatives(out, per_row=3, seed=0, workers=JOBS)
    return out


def _rows(folder: Path, manifest: Manifest, config: str) -> list[dict]:
    return [r for f in manifest.parquet_files(config) for r in pq.read_table(folder / f.path).to_pylist()]


def test_negatives_fail_at_their_stage_and_positives_pass(cuda_device, folder):
    manifest = Manifest.read(folder)
    negatives = _rows(folder, manifest, "negatives")
    positives = {("default", r["id"]): r for r in _rows(folder, manifest, "default")}
    positives |= {("real", r["id"]): r for r in _rows(folder, manifest, "real")}
    assert len(negatives) >= SAMPLE, f"{len(negatives)} negatives in {folder}, fewer than the sample of {SAMPLE}"
    sample = random.Random(0).sample(negatives, SAMPLE)
    pairs = []
    for neg in sample:
        row = positives[(neg["positive_config"], neg["positive_id"])]
        pairs.append((row, Candidate(row["id"], neg["cuda_forward"], neg["cuda_backward"] or None)))
    used = {(n["positive_config"], n["positive_id"]) for n in sample}
    rights = [positives[k] for k in sorted(used)]
    pairs += [(r, Candidate(r["id"], r["cuda_forward"], r["cuda_backward"] or None)) for r in rights]
    with Scorer(cuda_device, workers=JOBS, seed=12345) as scorer:
        scores = scorer.score_many(pairs, manifest.preambles)
    gpu = cuda_device != "cpu"
    wrong_stage, kinds = [], Counter()
    for neg, score in zip(sample, scores, strict=False):
        failed = score.failed.name if score.failed else None
        if gpu or neg["stage"] != "run":
            ok = failed == neg["stage"]
        else:  # dry run: the ladder ends after compile; a run-stage negative must get there
            ok = failed is None and score.stage("compile").ok
        kinds[(neg["kind"], neg["stage"], "ok" if ok else "WRONG")] += 1
        if not ok:
            detail = score.failed.detail[:200] if score.failed else "passed every stage"
            wrong_stage.append((neg["id"], neg["kind"], neg["variant"], neg["stage"], failed, detail))
    print("\nnegatives by kind, stage and verdict:", dict(sorted(kinds.items())))
    if os.environ.get("OUT"):  # run_on_device.sh's report folder
        report = {"device": cuda_device, "sample": len(sample), "positives": len(rights),
                  "by_kind_stage_verdict": {"/".join(k): v for k, v in sorted(kinds.items())}}  # fmt: skip
        (Path(os.environ["OUT"]) / "negatives_gpu.json").write_bytes(orjson.dumps(report))
    # a mined row's Python source needs its file, so no run stage can load it (its negatives
    # are structure and compile ones): it must pass up to the front end
    not_passing = [
        (r["id"], r["kernel_name"], s.failed.name if s.failed else None, s.failed.detail[:200] if s.failed else "")
        for r, s in zip(rights, scores[len(sample) :], strict=False)
        if (s.reached != ("run" if gpu else "compile") if not is_real_row(r) else not s.stage("structure").ok)
    ]
    assert not not_passing, f"{len(not_passing)}/{len(rights)} positives do not pass: {not_passing[:10]}"
    assert not wrong_stage, f"{len(wrong_stage)}/{len(sample)} negatives not failing at their stage: {wrong_stage[:20]}"
