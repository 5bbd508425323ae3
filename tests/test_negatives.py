"""`cudagen negatives`: each kind proven at its stage on the CPU, candidates that are not
wrong discarded, the witness's reuse across rounds and its build splitting, rows short of
run-stage negatives filled, kinds balanced, a crashing witness isolated, the configuration
written, loadable, deterministic and resumable, mined rows, bad input."""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from pathlib import Path

import kernel_rows
import orjson
import pyarrow.parquet as pq
import pytest
from fixtures_rows import write_folder
from typer.testing import CliRunner

from cudagen_data import spans
from cudagen_data.cli import app
from cudagen_data.contracts.manifest import Manifest
from cudagen_data.contracts.negative import NEGATIVE_SCHEMA
from cudagen_data.contracts.row import Provenance, RealRow, Row
from cudagen_data.eval import mutants
from cudagen_data.extract import extract_source
from cudagen_data.negatives import (
    KINDS,
    Candidate,
    NegativesError,
    RowWork,
    candidates,
    make_negatives,
    prove_candidates,
)
from cudagen_data.negatives.batch import CRASH_ENV, BatchJob, Positive, prove_rows
from cudagen_data.negatives.kinds import RUN, STRUCTURE, memorized_edit
from cudagen_data.negatives.pool import BatchPiece
from cudagen_data.negatives.prove import Witness
from cudagen_data.negatives.run import balance, fair_shares, rank
from cudagen_data.spec import ArgSpec

KERNELS = ["chain", "atomic", "argmax"]
# A store inside a loop: Warp's loops are gotos, which C++ refuses to jump past an
# initialised table (eval/mutants.memorized_outputs scopes its table for that).
STORE_IN_LOOP = (
    """import warp as wp

@wp.kernel
def strided_scale(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tid()
    for k in range(t, 40, 8):
        y[k] = x[k] * 2.0 + 1.0
""",
    (ArgSpec("x", "array", "float32", (40,), "in", (-1.0, 1.0)), ArgSpec("y", "array", "float32", (40,), "out")),
    (8,),
    None,
)


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return kernel_rows.make_row_objects(KERNELS)


@pytest.fixture(scope="module")
def preambles(rows) -> dict[str, str]:
    return {rows[0].preamble_hash: extract_source(rows[0].python_source).kernels[0].preamble}


@pytest.fixture(scope="module")
def dataset(rows, preambles, tmp_path_factory):
    folder = tmp_path_factory.mktemp("neg_ds")
    manifest = write_folder(folder, [r.to_dict() for r in rows], ratios=(0.34, 0.33, 0.33))
    manifest["preambles"] = preambles
    (folder / "manifest.json").write_bytes(orjson.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def made(dataset, tmp_path_factory):
    """The dataset with its negatives configuration (made once)."""
    folder = tmp_path_factory.mktemp("neg_made") / "ds"
    shutil.copytree(dataset, folder)
    result = make_negatives(folder, per_row=3, seed=5, workers=0, batch_rows=2)
    return folder, result


def _negatives(folder) -> list[dict]:
    manifest = Manifest.read(folder)
    return [r for f in manifest.parquet_files("negatives") for r in pq.read_table(folder / f.path).to_pylist()]


def _proof(row: Row, cand: Candidate, preambles: dict) -> object:
    work = [RowWork(row, [cand])]
    prove_candidates(work, preambles, 3, [(0, 0)])
    return work[0].outcomes[0]


def _candidate(row: Row, rows: list[Row], kind: str, variant: str = "") -> Candidate:
    return next(c for c in candidates(row, [r for r in rows if r is not row]) if (c.kind, c.variant) == (kind, variant))


@pytest.fixture(scope="module")
def loop_row() -> Row:
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(kernel_rows.ESCAPE_KERNELS, "store_in_loop", STORE_IN_LOOP)
        return kernel_rows.make_row_objects(["store_in_loop"])[0]


# --------------------------------------------------------------------------- each kind at its stage

STAGE_WORDS = {"structure": "structure stage:", "compile": "compile stage (NVRTC", "run": "CPU witness ("}


@pytest.mark.parametrize("kind", list(KINDS))
def test_one_wrong_kernel_of_each_kind_is_proven_at_its_stage(kind, rows, preambles):
    """Every kind has at least one candidate on the hand-written rows, and its proof is made
    at its stage (the structure rule, NVRTC's error, or the CPU witness's failing output)."""
    made = [(row, c) for row in rows for c in candidates(row, [r for r in rows if r is not row]) if c.kind == kind]
    assert made, f"no {kind} candidate on {KERNELS}"
    row, cand = made[0]
    outcome = _proof(row, cand, preambles)
    assert outcome.proven, f"{kind}/{cand.variant} on {row.kernel_name}: {outcome.reason}: {outcome.evidence}"
    assert outcome.evidence.startswith(STAGE_WORDS[KINDS[kind]]), outcome.evidence
    if kind == "wrong_backward":
        assert "input gradient" in outcome.evidence and "finite differences" in outcome.evidence
    if kind == "race":
        assert "lost-update model" in outcome.evidence


def test_a_candidate_that_is_not_wrong_is_discarded(rows, preambles):
    """The witness can fail: an edit that changes no result (a statement added that writes
    nothing) is not shipped as a run-stage negative, nor is a 'structure' one that passes."""
    row = rows[0]
    noop = lambda text: text.replace("// forward\n", "// forward\n        (void)0;\n", 1)  # noqa: E731
    harmless = Candidate("operator_swapped", "", noop(row.cuda_forward), row.cuda_backward, "forward", noop)
    outcome = _proof(row, harmless, preambles)
    assert not outcome.proven and outcome.reason == "indistinguishable", outcome
    same = Candidate("structure", "wrong_name", row.cuda_forward + "\n", row.cuda_backward, "none")
    outcome = _proof(row, same, preambles)
    assert not outcome.proven and outcome.reason == "passed_its_stage"
    # a run-stage kind that the structure stage already refuses is not a run-stage negative
    early = Candidate("writes_zeros", "", "__device__ int g;\n" + row.cuda_forward, row.cuda_backward, "forward")
    outcome = _proof(row, early, preambles)
    assert not outcome.proven and outcome.reason == "caught_earlier"


def test_witness_builds_a_row_once_and_draws_inputs_only_when_needed(rows, preambles):
    """One Witness over two rounds: the row's plan and recorded reference are made once
    (a rebuild of its kernels would drop and recompute them); a candidate wrong on the
    recorded inputs never makes the drawn sets; one right on them (the recorded outputs
    from a table) makes them, and is proven on a drawn set."""
    row = rows[0]
    work = [RowWork(row, [_candidate(row, rows, "operator_swapped"), _candidate(row, rows, "memorized_outputs")])]
    spans.take()
    with Witness(3) as witness:
        prove_candidates(work, preambles, 3, [(0, 0)], witness)
        first = spans.take()[2]
        prove_candidates(work, preambles, 3, [(0, 1)], witness)
        second = spans.take()[2]
    swapped, memorized = work[0].outcomes
    assert swapped.proven and "recorded inputs" in swapped.evidence, swapped
    assert memorized.proven and ("fresh" in memorized.evidence or "adversarial" in memorized.evidence), memorized
    assert first["negatives.witness.plan"] == 1 and first["negatives.witness.reference.recorded"] == 1
    assert "negatives.witness.reference.drawn" not in first
    assert "negatives.witness.plan" not in second and "negatives.witness.reference.recorded" not in second
    assert second["negatives.witness.reference.drawn"] == 1


def test_memorized_outputs_in_a_loop_builds_on_the_cpu_and_a_copy_that_does_not_is_discarded_alone(
    loop_row, rows, preambles
):
    """The table of memorized_outputs inside a loop: as eval/mutants writes it, clang
    refuses the CPU copy (a goto past the table's initialisation) and the whole round's
    module with it; the module is split until that copy alone is discarded, and the other
    candidates of the round (other rows too) are still proven.  Scoped (as eval/mutants
    writes it), it builds and is proven."""
    preambles = {**preambles, loop_row.preamble_hash: extract_source(loop_row.python_source).kernels[0].preamble}
    scoped_text = mutants.memorized_outputs(loop_row)
    assert scoped_text is not None and "goto" in loop_row.cuda_forward
    opening = scoped_text.index("{ const wp::float32 cudagen_memo[")
    closing = scoped_text.index("; }", opening) + 1

    def unscoped_edit(text: str) -> str | None:
        made = mutants.memorized_outputs(dataclasses.replace(loop_row, cuda_forward=text))
        if made is None:
            return None
        at = made.index("{ const wp::float32 cudagen_memo[")
        end = made.index("; }", at) + 1
        return made[:at] + made[at + 2 : end] + made[end + 2 :]  # the same table and store, unscoped

    raw = unscoped_edit(loop_row.cuda_forward)
    assert raw == scoped_text[:opening] + scoped_text[opening + 2 : closing] + scoped_text[closing + 2 :]
    unscoped = Candidate("memorized_outputs", "", raw, loop_row.cuda_backward, "forward", unscoped_edit)
    scoped = _candidate(loop_row, rows, "memorized_outputs")
    assert scoped.forward == scoped_text and scoped.edit is not None and memorized_edit(loop_row)(raw) is None
    work = [
        RowWork(loop_row, [unscoped, scoped, _candidate(loop_row, rows, "operator_swapped")]),
        RowWork(rows[0], [_candidate(rows[0], rows, "index_off_by_one")]),
    ]
    prove_candidates(work, preambles, 3, [(0, 0), (0, 1), (0, 2), (1, 0)])
    bad, good, swapped = work[0].outcomes
    assert not bad.proven and bad.reason == "unknown" and "does not build" in bad.evidence, bad
    assert good.proven and swapped.proven and work[1].outcomes[0].proven, (good, swapped, work[1].outcomes[0])


def test_a_row_short_of_run_stage_negatives_takes_structure_and_compile_ones(rows, preambles):
    """A row whose run-stage candidates are all discarded (here: edits that change nothing)
    still gets per_row negatives after the witness rounds, from its structure and compile
    candidates, and no more than per_row."""
    row = rows[0]

    def noop(i: int):
        return lambda text: text.replace("// forward\n", f"// forward\n        (void){i};\n", 1)

    fwd, bwd = row.cuda_forward, row.cuda_backward
    harmless = [Candidate("operator_swapped", str(i), noop(i)(fwd), bwd, "forward", noop(i)) for i in range(3)]
    rest = [c for c in candidates(row, rows[1:]) if c.stage != RUN]
    work = [RowWork(row, harmless + rest)]
    prove_rows(work, 3, preambles, 3, rounds=1)
    decided = [o for o in work[0].outcomes if o is not None]
    assert [o.reason for o in decided[:3]] == ["indistinguishable"] * 3
    shipped = [o.candidate for o in decided if o.proven]
    assert len(shipped) == 3 and all(c.stage != RUN for c in shipped)
    assert len(decided) == 6  # the fill stops once the row has its three


def test_fair_shares_and_the_balance_check():
    """The fair share is water-filling (a kind few rows allow keeps what they allow, the rest
    share equally); the check flags a kind shipped 5x less than its share, or 2.5x more,
    and passes a spread within a factor of 2."""
    allowing = {"structure": 100, "operator_swapped": 100, "race": 10}
    assert fair_shares(allowing, 150) == {"race": 10, "structure": 70.0, "operator_swapped": 70.0}
    assert fair_shares({"structure": 10, "compile_error": 10}, 30) == {"structure": 15.0, "compile_error": 15.0}
    even = balance({"structure": 80, "operator_swapped": 60, "race": 10}, allowing)
    assert even["balanced"] and even["shipped_over_fair"]["race"] == 1.0
    starved = balance({"structure": 126, "operator_swapped": 14, "race": 10}, allowing)
    assert not starved["balanced"] and starved["ratio_min"] == 0.2
    flooded = balance({"structure": 4, "operator_swapped": 4, "race": 22}, {**allowing, "race": 30})
    assert not flooded["balanced"] and flooded["ratio_max"] == 2.2
    assert not balance({}, allowing)["balanced"]


def test_the_ranking_is_balanced_where_rows_allow_kinds(rows):
    """Ranked as make_negatives ranks them (least-chosen kinds first), 60 positives (the
    three hand-written rows, each 20 times) get kinds within a factor of 2 of their fair
    share if every first choice is proven; a ranking that always takes a row's first kinds
    (KINDS order) is not."""
    positives = [
        Positive("default", "train", dataclasses.replace(r, id=f"{r.id}-{k}")) for k in range(20) for r in rows
    ]
    ranking = rank(positives, tuple(KINDS), 3)
    allowing = Counter(kind for picks in ranking for kind in {k for k, _ in picks})
    chosen = Counter(kind for picks in ranking for kind, _ in picks[:3])
    assert balance(chosen, allowing)["balanced"], balance(chosen, allowing)
    naive = Counter(c.kind for p in positives for c in candidates(p.row, rows)[:3])
    assert not balance(naive, allowing)["balanced"]


def test_a_mined_row_gets_structure_and_compile_candidates_only(rows):
    """A mined row's Python source needs its file, so nothing can run it: no run-stage kinds."""
    where = Provenance("warp/examples/x.py", 1, "k", "", "warp-lang", "1.0", "Apache-2.0", False, "", False, [])
    mined = RealRow(**vars(rows[0]), provenance=where)
    stages = {c.stage for c in candidates(mined, rows[1:])}
    assert stages == {"structure", "compile"}
    assert "run" in {c.stage for c in candidates(rows[0], rows[1:])}


def test_structure_candidates_break_a_structure_rule(rows):
    for cand in candidates(rows[0], rows[1:]):
        if cand.stage == STRUCTURE:
            assert cand.forward != rows[0].cuda_forward


# --------------------------------------------------------------------------- the configuration


def test_configuration_written_and_counted(made, rows):
    folder, result = made
    negs = _negatives(folder)
    stats = orjson.loads((folder / "stats.json").read_bytes())["negatives"]
    assert len(negs) == stats["negatives"] == sum(stats["by_kind"].values())
    assert stats["positives"] == len(rows)
    assert stats["per_positive"] >= 3.0
    assert sum(stats["by_stage"].values()) == len(negs)
    positives = {r.id: r for r in rows}
    manifest = Manifest.read(folder)
    split_of = {}
    for f in manifest.parquet_files():
        for r in pq.read_table(folder / f.path).to_pylist():
            split_of[r["id"]] = f.split
    for f in manifest.parquet_files("negatives"):
        for neg in pq.read_table(folder / f.path).to_pylist():
            assert split_of[neg["positive_id"]] == f.split  # the positive's split: nothing leaks
            pos = positives[neg["positive_id"]]
            assert neg["stage"] == KINDS[neg["kind"]]
            assert neg["evidence"].startswith(STAGE_WORDS[neg["stage"]])
            assert neg["diff"].startswith("--- a/")
            assert (neg["cuda_forward"], neg["cuda_backward"]) != (pos.cuda_forward, pos.cuda_backward)
    assert set(stats["balance"]["fair_share"]) == {k for k, n in stats["rows_allowing_kind"].items() if n}
    assert stats["balance"]["factor"] == 2.0
    card = (folder / "README.md").read_text()
    assert "config_name: negatives" in card and "## Configuration `negatives`" in card
    verdict = "yes" if stats["balance"]["balanced"] else "**no**"
    assert f"| kinds balanced (shipped / fair share of every kind within a factor of 2) | {verdict} (" in card
    assert pq.read_schema(folder / manifest.parquet_files("negatives")[0].path).equals(NEGATIVE_SCHEMA)


def test_load_dataset(made):
    datasets = pytest.importorskip("datasets")
    folder, _ = made
    loaded = datasets.load_dataset(str(folder), "negatives")
    assert sum(len(loaded[s]) for s in loaded) == len(_negatives(folder))
    assert set(loaded[next(iter(loaded))].column_names) == set(NEGATIVE_SCHEMA.names)
    assert sum(len(d) for d in datasets.load_dataset(str(folder)).values()) == len(KERNELS)  # default still loads


def test_deterministic_and_resumable(made, dataset, tmp_path):
    """Same seed -> same bytes; a run stopped after its first batch resumes to the same bytes;
    a finished run is not redone."""
    folder, _ = made
    again = tmp_path / "again"
    shutil.copytree(dataset, again)

    class Stop(Exception):
        pass

    calls = []

    def stop_after_first_batch(n):
        calls.append(n)
        if len(calls) == 2:  # the first call reports rows already done (0); the second, the first batch
            raise Stop

    with pytest.raises(Stop):
        make_negatives(again, per_row=3, seed=5, workers=0, batch_rows=2, progress=stop_after_first_batch)
    state = orjson.loads((again / ".cudagen/negatives/state.json").read_bytes())
    assert state["next_batch"] == 1 and not state["complete"]
    make_negatives(again, per_row=3, seed=5, workers=0, batch_rows=2)
    first = Manifest.read(folder).parquet_files("negatives")
    second = Manifest.read(again).parquet_files("negatives")
    assert [(f.path, f.xxh3_128) for f in first] == [(f.path, f.xxh3_128) for f in second]
    assert make_negatives(again, per_row=3, seed=5, workers=0, batch_rows=2).already_complete


def test_a_row_whose_witness_kills_its_worker_costs_only_its_run_stage_negatives(made, dataset, tmp_path,
                                                                                   monkeypatch):  # fmt: skip
    """A worker killed while it witnesses a row (injected: CRASH_ENV) is replaced; the row
    is tried again alone (killing its worker again) and its batch's other rows apart from
    it; the row gets its structure and compile negatives only, counted in
    rows_witness_crashed; every other row's negatives are the same bytes as a run without
    the crash (and with another batch size)."""
    folder, _ = made
    crashing = _negatives(folder)[0]["positive_id"]
    monkeypatch.setenv(CRASH_ENV, crashing)
    again = tmp_path / "crash"
    shutil.copytree(dataset, again)
    result = make_negatives(again, per_row=3, seed=5, workers=2)
    assert result.stats["rows_witness_crashed"] == 1
    before = {n["id"]: n for n in _negatives(folder)}
    after = _negatives(again)
    assert {n["stage"] for n in after if n["positive_id"] == crashing} <= {"structure", "compile"}
    assert len([n for n in after if n["positive_id"] == crashing]) == 3
    others = [n for n in after if n["positive_id"] != crashing]
    assert others and others == [n for n in before.values() if n["positive_id"] != crashing]


def test_a_lost_workers_rows_are_redone_around_the_row_it_was_judging():
    """The pool's split of a piece whose worker died: the row being judged alone, the rows
    before and after it as two pieces; every row alone where the worker died outside the
    judging (a build); a lone row is given up (its structure and compile candidates only)."""
    job = BatchJob(7, [None] * 6, [[]] * 6, [[]] * 6, 3, {}, 0)
    piece = BatchPiece(job, 0, 6)
    piece.judging = 2
    assert [(p.lo, p.hi) for p in piece.on_lost(False, -11)] == [(2, 3), (0, 2), (3, 6)]
    piece.judging = 0
    assert [(p.lo, p.hi) for p in piece.on_lost(False, -11)] == [(0, 1), (1, 6)]
    piece.judging = None
    assert [(p.lo, p.hi) for p in piece.on_lost(True, None)] == [(k, k + 1) for k in range(6)]
    lone = BatchPiece(job, 4, 5)
    assert lone.on_lost(False, -11) == [] and lone.lost
    assert not piece.lost


@pytest.mark.slow
def test_negatives_of_a_mined_folder(tmp_path):
    """`cudagen negatives` on a folder `cudagen mine` made (tests/mine_tree: the `real`
    configuration only): every mined row gets three structure or compile negatives (their
    Python source needs its file: nothing runs them), in its split, and the configuration
    loads."""
    from cudagen_data.mine.folder import write_real
    from cudagen_data.mine.pool import Options
    from cudagen_data.mine.run import mine_paths

    mined = mine_paths([Path(__file__).parent / "mine_tree"], workers=1, options=Options(timeout_s=120))
    assert mined.rows
    write_real(tmp_path, mined.by_split(), mined.rejects, mined.preambles, mined.stats, "cudagen mine tests/mine_tree")
    res = CliRunner().invoke(app, ["negatives", str(tmp_path), "--no-progress", "--workers", "0"])
    assert res.exit_code == 0, res.output
    stats = orjson.loads((tmp_path / "stats.json").read_bytes())["negatives"]
    assert stats["positives"] == len(mined.rows) and stats["by_config"] == {"real": stats["negatives"]}
    assert stats["per_positive"] == 3.0 and set(stats["by_stage"]) <= {"structure", "compile"}
    manifest = Manifest.read(tmp_path)
    split_of = {
        r["id"]: f.split for f in manifest.parquet_files("real") for r in pq.read_table(tmp_path / f.path).to_pylist()
    }
    for f in manifest.parquet_files("negatives"):
        for neg in pq.read_table(tmp_path / f.path).to_pylist():
            assert neg["positive_config"] == "real" and split_of[neg["positive_id"]] == f.split
            assert neg["category"] == "real" and neg["evidence"].startswith(STAGE_WORDS[neg["stage"]])
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(str(tmp_path), "negatives")
    assert sum(len(loaded[s]) for s in loaded) == stats["negatives"]


def test_bad_input_is_one_error_line(dataset, tmp_path):
    runner = CliRunner()
    cases = [
        ([str(tmp_path / "missing")], "no such file or folder"),
        ([str(dataset), "--per-row", "0"], "--per-row 0"),
        ([str(dataset), "--kinds", "operator_swapped,teleport"], "--kinds: unknown teleport"),
        ([str(tmp_path)], "manifest.json: not found"),
    ]
    for args, words in cases:
        res = runner.invoke(app, ["negatives", *args, "--no-progress", "--workers", "0"])
        assert res.exit_code != 0, args
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], res.output
    with pytest.raises(NegativesError):
        make_negatives(tmp_path, workers=0)
