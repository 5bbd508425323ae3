"""`cudagen eval` on a GPU: the dataset's own CUDA scores 100% at every stage, every
mutant fails at its stage, a crashing candidate fails alone, the command reports
correct@1 and pass@k.  Needs a CUDA device (the run stage has no dry run)."""

from __future__ import annotations

from collections import Counter

import kernel_rows
import numpy as np
import orjson
import pytest
from conftest import JOBS

from cudagen_data.contracts.test_vectors import TestVectors
from cudagen_data.eval import Candidate, Scorer, make_mutants
from cudagen_data.eval.equivalence import Verdict, verdicts
from cudagen_data.eval.mutants import PARTIAL_KINDS, make_partial_mutants
from cudagen_data.gpu.recheck import dataset_rows

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu(cuda_device):
    if cuda_device == "cpu":
        pytest.skip("the eval run stage needs a GPU (no dry run)")
    return cuda_device


@pytest.fixture(scope="module")
def hand_rows(gpu):
    return kernel_rows.make_row_objects(list(kernel_rows.KERNELS))


@pytest.fixture(scope="module")
def produced(gpu, request):
    produced_dataset = request.getfixturevalue("produced_dataset")  # only once the GPU is known to be there
    rows = [row for _, row in dataset_rows(produced_dataset)]
    preambles = orjson.loads((produced_dataset / "manifest.json").read_bytes())["preambles"]
    return rows, preambles


@pytest.fixture(scope="module")
def scorer(gpu):
    with Scorer(gpu, workers=JOBS) as s:
        yield s


def test_the_datasets_own_cuda_scores_100_percent(scorer, produced, hand_rows):
    rows, preambles = produced
    all_rows = rows + hand_rows
    pairs = [(r, Candidate(r.id, r.cuda_forward)) for r in all_rows]
    pairs += [(r, Candidate(r.id, r.cuda_forward, r.cuda_backward)) for r in all_rows if r.cuda_backward]
    scores = scorer.score_many(pairs, preambles)
    bad = [
        (r.id, r.kernel_name, s.failed.name, s.failed.detail)
        for (r, _), s in zip(pairs, scores, strict=False)
        if s.reached != "run"
    ]
    assert not bad, bad
    assert all(s.reward == 1.0 and s.complete for s in scores)
    # a passing candidate ran every set: drawn sets the row's own kernel fails on are left
    # out (a note says so), and a kernel without float inputs gets no adversarial set
    ran = [s.input_sets for s in scores]
    full = [d["fresh"] >= 12 and d["adversarial"] >= 6 * len(d["sizes"]) for d in ran]
    assert sum(full) >= 0.9 * len(ran), [d for d, f in zip(ran, full, strict=True) if not f][:5]
    recorded = [len(TestVectors.from_json(r.test_vectors).sets()) for r, _ in pairs]
    assert all(len(d["sizes"]) == n == d["recorded"] for n, d in zip(recorded, ran, strict=True))  # every size ran


def test_every_mutant_fails_at_its_stage(scorer, produced, hand_rows):
    """Every mutant fails at its stage, but for run-stage mutants that the CPU witness
    (eval/equivalence.py: the same edit on Warp's CPU forward, judged the same way on the
    same inputs) shows to compute the same results: those the judge cannot reject."""
    rows, preambles = produced
    all_rows = rows + hand_rows
    pairs, mutants = [], []
    for i, r in enumerate(all_rows):
        for m in make_mutants(r, all_rows[i + 1 :] + all_rows[:i]):
            pairs.append((r, Candidate(r.id, m.forward)))
            mutants.append(m)
    scores = scorer.score_many(pairs, preambles)
    passed = [k for k, (m, s) in enumerate(zip(mutants, scores, strict=False)) if m.stage == "run" and s.failed is None]
    witness = dict(
        zip(passed, verdicts([(pairs[k][0], mutants[k]) for k in passed], seed=scorer.seed, workers=JOBS), strict=False)
    )
    table = Counter((m.kind, m.stage, s.failed.name if s.failed else f"passed ({witness[k].status})")
                    for k, (m, s) in enumerate(zip(mutants, scores, strict=False)))  # fmt: skip
    print("\n".join(f"{k:24} expected {st:9} got {got:24} {n}" for (k, st, got), n in sorted(table.items())))
    wrong = [
        (
            pairs[k][0].id,
            pairs[k][0].kernel_name,
            m.kind,
            m.stage,
            s.failed.name if s.failed else "passed",
            s.failed.detail if s.failed else f"CPU witness: {witness[k].status}: {witness[k].detail}",
        )
        for k, (m, s) in enumerate(zip(mutants, scores, strict=False))
        if (s.failed.name != m.stage if s.failed else witness.get(k, Verdict("unknown")).status != "equivalent")
    ]
    assert not wrong, wrong
    equivalent = len(witness) - sum(v.status != "equivalent" for v in witness.values())
    run_stage = sum(m.stage == "run" for m in mutants)
    print(f"{equivalent} of {run_stage} run-stage mutants compute the same results on the judge's inputs (CPU witness)")
    assert equivalent <= 0.15 * run_stage  # the mutants stay a test of the judge
    assert {m.kind for m in mutants} >= {
        "operator_swapped",
        "index_off_by_one",
        "bounds_check_dropped",
        "writes_zeros",
        "foreign_kernel",
        "stale_global",
        "memorized_outputs",
    }
    memorized = [(p[0], s) for p, m, s in zip(pairs, mutants, scores, strict=True) if m.kind == "memorized_outputs"]
    own = "recorded inputs (launch {})"
    assert memorized and not any(
        s.failed.detail.startswith(own.format("x".join(map(str, r.launch_dim)))) for r, s in memorized
    )  # right on the recorded inputs of the row's own size, wrong at other sizes or on drawn inputs


@pytest.fixture(scope="module")
def escape_rows(gpu):
    return kernel_rows.make_row_objects(list(kernel_rows.ESCAPE_KERNELS), sizes=True)


def test_partial_work_mutants_never_pass(gpu, produced, hand_rows, escape_rows):
    """Issue #23: kernels that do part of the work (first element, first half, first
    block, all but the last element or block), skip it, replay the recorded outputs from
    a table, or ship the right forward with an empty or partial backward
    (eval/mutants.py: make_partial_mutants), for every row of a produced dataset of every
    category, the hand-written kernels and the issue's known escapes (a half-thread
    min_two_level, an input-blind row): 0 pass unless the CPU witness shows the edit
    changes nothing (eval/equivalence.py: the same mask or table in Warp's CPU kernel,
    judged as the run stage judges; for a tile kernel it says which lanes hold no work)."""
    rows, preambles = produced
    all_rows = rows + hand_rows + escape_rows
    pairs, mutants = [], []
    for r in all_rows:
        for m in make_partial_mutants(r):
            pairs.append((r, Candidate(r.id, m.forward, m.backward)))
            mutants.append(m)
    # A lane that leaves a tile kernel early may leave its block waiting at a barrier: such
    # a candidate is stopped after 30 s (and fails), not the default 120 s.
    with Scorer(gpu, workers=JOBS, candidate_timeout=30) as scorer:
        scores = scorer.score_many(pairs, preambles)
        seed = scorer.seed
    passed = [k for k, s in enumerate(scores) if s.failed is None]
    found = [(pairs[k][0], mutants[k]) for k in passed]
    # the CPU witness; a tile lane cut it does not excuse is decided on this GPU, bit for bit
    # against the row's own kernel with shared memory poisoned (equivalence.gpu_lane_verdict)
    witness = dict(zip(passed, verdicts(found, seed=seed, workers=JOBS, device=gpu), strict=True))
    table = Counter((pairs[k][0].category, m.kind, s.failed.name if s.failed else f"passed ({witness[k].status})")
                    for k, (m, s) in enumerate(zip(mutants, scores, strict=True)))  # fmt: skip
    print("\n".join(f"{cat:14} {kind:30} {got:24} {n}" for (cat, kind, got), n in sorted(table.items())))
    for k in passed:
        r = pairs[k][0]
        print(
            f"passed, witnessed: {r.category}/{r.kernel_name} {r.id} {mutants[k].kind}: "
            f"{witness[k].status}: {witness[k].detail[:400]}"
        )
    wrong = [(pairs[k][0].id, pairs[k][0].kernel_name, m.kind, s.failed.name if s.failed else "passed",
              s.failed.detail[:200] if s.failed else f"CPU witness: {witness[k].status}: {witness[k].detail[:200]}")
             for k, (m, s) in enumerate(zip(mutants, scores, strict=True))
             if (s.failed.name != "run" if s.failed else witness[k].status != "equivalent")]  # fmt: skip
    assert not wrong, wrong
    assert {m.kind for m in mutants} == set(PARTIAL_KINDS)
    assert {r.category for r in rows} <= {pairs[k][0].category for k in range(len(pairs))}  # every category
    # a failing candidate reports the sets it ran, up to the one it failed on
    ran = [s.input_sets for s in scores if s.input_sets]
    assert all(1 <= d["sets"] and len(d["sizes"]) >= 1 for d in ran)
    stopped = Counter(s.failed.detail.split(" inputs (", 1)[0] for s in scores if s.failed and s.failed.name == "run")
    print(f"{len(pairs)} partial-work mutants of {len(all_rows)} rows; passed (witnessed equivalent): {len(passed)}; "
          f"the sets they failed on: {dict(stopped.most_common(8))}")  # fmt: skip


def test_the_known_escapes_fail(scorer, escape_rows):
    """The two escapes the issue found on the H100: a min_two_level that runs half its
    threads, and the all-but-last-element reduction; both fail every time."""
    by_name = {r.kernel_name: r for r in escape_rows}
    row = by_name["min_two_level"]
    kinds = {m.kind: m for m in make_partial_mutants(row)}
    pairs = [(row, Candidate(row.id, kinds[k].forward)) for k in ("partial_first_half", "partial_all_but_last_element")]
    scores = scorer.score_many(pairs)
    assert all(s.failed is not None and s.failed.name == "run" for s in scores), [s.stages for s in scores]


def test_a_crashing_candidate_fails_only_itself(gpu, hand_rows):
    chain, atomic = hand_rows[0], hand_rows[3]
    crash = chain.cuda_forward.replace("wp::array_store(var_y, var_0,", "wp::array_store(var_y, var_0 + 1000000000,")
    assert crash != chain.cuda_forward
    pairs = [
        (atomic, Candidate(atomic.id, atomic.cuda_forward)),
        (chain, Candidate(chain.id, crash)),
        (chain, Candidate(chain.id, chain.cuda_forward)),
        (atomic, Candidate(atomic.id, atomic.cuda_forward)),
    ]
    with Scorer(gpu, workers=1) as s:
        first, broken, after, last = s.score_many(pairs)
    assert broken.failed.name == "run", broken.stages
    assert first.reached == after.reached == last.reached == "run", (first.failed, after.failed, last.failed)


def test_eval_command_on_the_gpu(gpu, hand_rows, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from cudagen_data.cli import app
    from cudagen_data.contracts import ROW_SCHEMA, SCHEMA_VERSION

    folder = tmp_path / "ds"  # a minimal dataset folder (the GPU machine lacks what the card needs)
    (folder / "data").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist([r.to_dict() for r in hand_rows], schema=ROW_SCHEMA),
        folder / "data" / "test-00000-of-00001.parquet",
    )
    manifest = {
        "format": "cudagen-data",
        "schema_version": SCHEMA_VERSION,  # a reader refuses a folder of another row schema
        "files": [{"path": "data/test-00000-of-00001.parquet", "split": "test", "rows": len(hand_rows)}],
        "preambles": {},
    }
    (folder / "manifest.json").write_bytes(orjson.dumps(manifest))
    preds = []
    for r in hand_rows:
        preds.append({"id": r.id, "cuda_forward": r.cuda_forward})
        preds.append({"id": r.id, "cuda_forward": next(m for m in make_mutants(r) if m.kind == "writes_zeros").forward})
    (tmp_path / "p.jsonl").write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    res = CliRunner().invoke(app, ["eval", str(tmp_path / "p.jsonl"), "--dataset", str(folder), "--device", gpu,
                                   "--report", str(tmp_path / "r.json"), "--workers", str(JOBS)])  # fmt: skip
    print(res.output)
    assert res.exit_code == 0, res.output
    totals = orjson.loads((tmp_path / "r.json").read_bytes())["totals"]["all"]
    assert totals["correct@1"] == pytest.approx(0.5) and totals["pass@1"] == pytest.approx(0.5)
    assert totals["compile@1"] == 1.0


def test_a_candidate_that_never_finishes_is_stopped(gpu, hand_rows):
    chain = hand_rows[0]
    endless = chain.cuda_forward.replace("{", "{\n    for (volatile int spin = 0; spin >= 0; spin = spin * 0) {}", 1)
    pairs = [(chain, Candidate(chain.id, endless)), (chain, Candidate(chain.id, chain.cuda_forward))]
    with Scorer(gpu, workers=1, candidate_timeout=20) as s:
        stuck, fine = s.score_many(pairs)
    assert stuck.failed.name == "run" and "did not finish within 20 s" in stuck.failed.detail, stuck.stages
    assert fine.reached == "run", fine.failed


def test_the_scrub_poisons_shared_memory(cuda_device):
    """eval/shared_scrub.py on this device: a kernel that reads shared memory it never wrote
    finds the last launch's leftover without the scrub (printed: a GPU need not keep it),
    and the scrub's word of each guard fill with it, in every block.  Runs in the dry run
    too (CUDAGEN_GPU_DRY_RUN=1: Warp's CPU tile arena)."""
    from cudagen_data import warp_boundary
    from cudagen_data.eval.shared_scrub import CANARY_MARKER, SCRUB_WORDS, leftovers, shared_scrub

    dev = warp_boundary.warp().get_device(cuda_device)
    blocks = 4 if dev.is_cpu else 2 * dev.sm_count
    bare = leftovers(cuda_device, blocks)
    print(f"without the scrub: {100 * np.mean(bare == CANARY_MARKER):.0f}% of the words read are the last launch's")
    scrub = shared_scrub(cuda_device)
    for fill, word in SCRUB_WORDS.items():
        got = leftovers(cuda_device, blocks, scrub=scrub, fill=fill)
        values, counts = np.unique(got, return_counts=True)
        assert np.all(got == word), (fill, {hex(int(v)): int(n) for v, n in zip(values, counts, strict=True)})


SHARED_SUM = ("""import warp as wp

TILE = wp.constant(64)

@wp.kernel
def tile_shared_sum(x: wp.array(dtype=wp.float32), total: wp.array(dtype=wp.float32)):
    i = wp.tid()
    t = wp.tile_load(x, shape=TILE, offset=i * TILE, storage="shared")
    wp.tile_atomic_add(total, wp.tile_sum(t))
""", (kernel_rows._arr("x", "float32", (256,)), kernel_rows._arr("total", "float32", (1,), "out")),
      (4,), 64)  # fmt: skip


@pytest.fixture(scope="module")
def shared_sum_row(gpu):
    """A 1-D shared tile of 64 on 64 lanes: every lane loads one element (Warp copies a 1-D
    tile element by element, on the GPU too)."""
    kernel_rows.KERNELS["shared_sum"] = SHARED_SUM
    try:
        (row,) = kernel_rows.make_row_objects(["shared_sum"])
    finally:
        del kernel_rows.KERNELS["shared_sum"]
    return row


def test_a_lane_that_skips_its_shared_load_fails_on_the_gpu(gpu, shared_sum_row, scorer):
    """All but the last element of a tile sum whose every lane loads an element into shared
    memory: its last lane's slot holds what was there before.  Right after the row's own
    kernel ran on the same inputs, that is the right value (printed: whether the judge
    without the scrub passes it that way); with the scrub before every launch it reads
    poison, and the judge, as it runs, rejects it."""
    from cudagen_data.eval.reference import compute_reference
    from cudagen_data.eval.run import candidate_kernel, judge_set, planned_runs, run_guarded
    from cudagen_data.eval.shared_scrub import shared_scrub

    row = shared_sum_row
    mutant = next(m for m in make_partial_mutants(row) if m.kind == "partial_all_but_last_element")
    (sc,) = scorer.score_many([(row, Candidate(row.id, mutant.forward))])
    assert sc.failed is not None and sc.failed.name == "run", sc.stages
    ref = compute_reference(row, seed=scorer.seed)
    with candidate_kernel(row, row.cuda_forward, None, gpu) as (own, _):
        with candidate_kernel(row, mutant.forward, None, gpu) as (cut, _):

            def judged(scrub) -> list[str]:
                for s, fill, _ in planned_runs(ref):
                    run_guarded(s.spec, own, gpu, s.inputs, {}, False, fill)  # the launch before: right, same inputs
                    got = run_guarded(s.spec, cut, gpu, s.inputs, {}, False, fill, scrub=scrub)
                    if failures := judge_set(ref, s, got, outputs_only=True):
                        return failures
                return []

            bare = judged(None)
            print(f"without the scrub, after the row's own launch: {'fails: ' + bare[0] if bare else 'PASSES'}")
            assert judged(shared_scrub(gpu))
