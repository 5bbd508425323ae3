"""`cudagen negatives`: each kind proven at its stage on the CPU, candidates that are not
wrong discarded, the configuration written, loadable, deterministic and resumable, bad input."""

from __future__ import annotations

import shutil

import kernel_rows
import orjson
import pyarrow.parquet as pq
import pytest
from fixtures_rows import write_folder
from typer.testing import CliRunner

from cudagen_data.cli import app
from cudagen_data.contracts.manifest import Manifest
from cudagen_data.contracts.negative import NEGATIVE_SCHEMA
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
from cudagen_data.negatives.kinds import STRUCTURE

KERNELS = ["chain", "atomic", "argmax"]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return kernel_rows.make_rows(KERNELS)


@pytest.fixture(scope="module")
def preambles(rows) -> dict[str, str]:
    return {rows[0]["preamble_hash"]: extract_source(rows[0]["python_source"]).kernels[0].preamble}


@pytest.fixture(scope="module")
def dataset(rows, preambles, tmp_path_factory):
    folder = tmp_path_factory.mktemp("neg_ds")
    manifest = write_folder(folder, rows, ratios=(0.34, 0.33, 0.33))
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


def _proof(row: dict, cand: Candidate, preambles: dict) -> object:
    work = [RowWork(row, [cand])]
    prove_candidates(work, preambles, 3, [(0, 0)])
    return work[0].outcomes[0]


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
    assert outcome.proven, f"{kind}/{cand.variant} on {row['kernel_name']}: {outcome.reason}: {outcome.evidence}"
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
    harmless = Candidate("operator_swapped", "", noop(row["cuda_forward"]), row["cuda_backward"], "forward", noop)
    outcome = _proof(row, harmless, preambles)
    assert not outcome.proven and outcome.reason == "indistinguishable", outcome
    same = Candidate("structure", "wrong_name", row["cuda_forward"] + "\n", row["cuda_backward"], "none")
    outcome = _proof(row, same, preambles)
    assert not outcome.proven and outcome.reason == "passed_its_stage"
    # a run-stage kind that the structure stage already refuses is not a run-stage negative
    early = Candidate("writes_zeros", "", "__device__ int g;\n" + row["cuda_forward"], row["cuda_backward"], "forward")
    outcome = _proof(row, early, preambles)
    assert not outcome.proven and outcome.reason == "caught_earlier"


def test_a_mined_row_gets_structure_and_compile_candidates_only(rows):
    """A mined row's Python source needs its file, so nothing can run it: no run-stage kinds."""
    mined = {**rows[0], "provenance": {"path": "warp/examples/x.py"}}
    stages = {c.stage for c in candidates(mined, rows[1:])}
    assert stages == {"structure", "compile"}
    assert "run" in {c.stage for c in candidates(rows[0], rows[1:])}


def test_structure_candidates_break_a_structure_rule(rows):
    for cand in candidates(rows[0], rows[1:]):
        if cand.stage == STRUCTURE:
            assert cand.forward != rows[0]["cuda_forward"]


# --------------------------------------------------------------------------- the configuration


def test_configuration_written_and_counted(made, rows):
    folder, result = made
    negs = _negatives(folder)
    stats = orjson.loads((folder / "stats.json").read_bytes())["negatives"]
    assert len(negs) == stats["negatives"] == sum(stats["by_kind"].values())
    assert stats["positives"] == len(rows)
    assert stats["per_positive"] >= 3.0
    assert sum(stats["by_stage"].values()) == len(negs)
    positives = {r["id"]: r for r in rows}
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
            assert (neg["cuda_forward"], neg["cuda_backward"]) != (pos["cuda_forward"], pos["cuda_backward"])
    card = (folder / "README.md").read_text()
    assert "config_name: negatives" in card and "## Configuration `negatives`" in card
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
