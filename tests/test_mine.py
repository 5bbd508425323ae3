"""`cudagen mine` on a small tree of our own (tests/mine_tree): nested kernels, a file that
raises on import, a file that hangs, a generic kernel with overloads, a kernel that
divides by zero when run, provenance paths, and the dataset's `real` configuration."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import orjson
import pytest

from cudagen_data.contracts.row import RealRow
from cudagen_data.mine import discover
from cudagen_data.mine.pool import Options
from cudagen_data.mine.run import mine_paths

pytestmark = pytest.mark.slow  # worker processes start Warp: ~10-30 s per run

TREE = Path(__file__).parent / "mine_tree"


HANG_TREE = Path(__file__).parent / "mine_tree_hang"  # apart: its test uses a short time limit


@pytest.fixture(scope="module")
def mined():
    return mine_paths([TREE], workers=2, options=Options(timeout_s=120))


def by_qualname(result) -> dict[str, list[RealRow]]:
    out: dict[str, list[RealRow]] = {}
    for row in result.rows:
        out.setdefault(row.provenance.qualname, []).append(row)
    return out


def test_definitions_counted_by_ast():
    import ast

    defs = discover.kernel_defs(ast.parse((TREE / "nested.py").read_text()))
    assert [d.qualname for d in defs] == [
        "top_level",
        "make_offset_kernel.<locals>.offset_kernel",
        "build_helper_kernel.<locals>.helper_kernel",
        "TestNested.test_method.<locals>.in_test_method",
        "TestNested.test_needs_argument.<locals>.per_type",
        "int_kernels.<locals>.divide_by_zero",
        "int_kernels.<locals>.integer_ok",
    ]


def test_nested_kernels_are_mined(mined):
    rows = by_qualname(mined)
    for name in (
        "top_level",
        "make_offset_kernel.<locals>.offset_kernel",  # made by a factory that runs at import
        "build_helper_kernel.<locals>.helper_kernel",  # inside a function never called: replayed
        "TestNested.test_method.<locals>.in_test_method",  # inside a test method
        "int_kernels.<locals>.divide_by_zero",
        "int_kernels.<locals>.integer_ok",
    ):
        assert name in rows, name
    # The replayed kernel kept its helper @wp.func and the local constant it closes over.
    helper = rows["build_helper_kernel.<locals>.helper_kernel"][0]
    assert "cube" in helper.device_functions
    # A def that needs its enclosing function's loop variable is reported, not guessed.
    reject = next(r for r in mined.rejects if r["kernel"] == "TestNested.test_needs_argument.<locals>.per_type")
    assert reject["reason"] == "not_replayable" and "'t'" in reject["detail"]


def test_replayed_kernel_is_warp_own_codegen(mined):
    """A replayed nested kernel equals the kernel Warp makes when the function really runs."""
    from cudagen_data.extract.codegen import generate_cuda
    from cudagen_data.mine.collect import module_name_for
    from cudagen_data.mine.worker import naming_root
    from cudagen_data.warp_boundary import postprocess_cuda

    src = next(f for f in discover.find_files([TREE]) if f.relpath == "mine_tree/nested.py")
    # The module name mining gives a loose file (Warp hashes it into the kernel's name).
    name = module_name_for(Path(src.path), src.relpath)[0] + "_real"
    spec = importlib.util.spec_from_file_location(name, TREE / "nested.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    real = generate_cuda(module.build_helper_kernel(), root=naming_root(src))
    row = by_qualname(mined)["build_helper_kernel.<locals>.helper_kernel"][0]
    assert row.cuda_forward == real.forward
    assert row.cuda_backward == real.backward and row.cuda_backward
    assert row.device_functions == real.device_functions
    assert "// mine_tree/nested.py:" in row.device_functions  # the helper, named from the mined root
    assert postprocess_cuda(real.device_functions, naming_root(src)) == real.device_functions


def test_mined_text_is_in_warp_module_codegen(mined):
    from cudagen_data.mine.verbatim import module_cuda_contains

    for rel in ("nested.py", "generic.py"):
        src = next(f for f in discover.find_files([TREE]) if f.relpath == f"mine_tree/{rel}")
        rows = [r for r in mined.rows if r.provenance.path == f"mine_tree/{rel}"]
        found, missing = module_cuda_contains(src, rows)
        assert rows and missing == [] and found == len(rows)


def test_file_that_raises_on_import(mined):
    rejects = [r for r in mined.rejects if r["path"] == "mine_tree/raises.py"]
    assert rejects == [
        {
            "path": "mine_tree/raises.py",
            "line": 4,
            "kernel": "never_mined",
            "reason": "import_error",
            "detail": "RuntimeError: this file fails on import",
        }
    ]


def test_file_that_hangs_costs_only_itself():
    result = mine_paths([HANG_TREE / "hangs.py", TREE / "generic.py"], workers=1, options=Options(timeout_s=8))
    hang = [r for r in result.rejects if r["path"] == "hangs.py"]
    assert [(r["kernel"], r["reason"]) for r in hang] == [("behind_a_hang", "timeout")]
    # generic.py shared the hanging file's bundle; it was mined again on its own.
    assert {r.provenance.qualname for r in result.rows} == {"scale_any"}


def test_generic_kernel_overloads(mined):
    rows = by_qualname(mined)["scale_any"]
    split_of = {row.id: split for row, split in zip(mined.rows, mined.splits, strict=True)}
    assert sorted(r.provenance.overload for r in rows) == ["a1f4_f4_a1f4", "a1f8_f8_a1f8"]
    assert rows[0].shape_hash == rows[1].shape_hash and split_of[rows[0].id] == split_of[rows[1].id]
    assert rows[0].cuda_forward != rows[1].cuda_forward and rows[0].id != rows[1].id
    dtypes = sorted(orjson.loads(r.test_vectors)["inputs"]["a"]["dtype"] for r in rows)
    assert dtypes == ["float32", "float64"]
    reject = next(r for r in mined.rejects if r["kernel"] == "generic_without_overloads")
    assert reject["reason"] == "generic_no_overloads"


def test_warp_rejects_and_unfillable_arguments(mined):
    reject = next(r for r in mined.rejects if r["kernel"] == "rejected_by_warp")
    assert reject["reason"] == "codegen_error" and "undefined_name" in reject["detail"]
    # A struct argument is filled field by field (p.x, p.m) and assembled at launch.
    struct_row = by_qualname(mined)["takes_struct"][0]
    assert struct_row.provenance.executed is True
    tv = orjson.loads(struct_row.test_vectors)
    x = np.asarray(tv["inputs"]["p.x"]["data"], dtype=np.float32)
    out = np.asarray(tv["outputs"]["out"]["data"], dtype=np.float32)
    np.testing.assert_allclose(out[0], tv["inputs"]["p.m"]["data"] * np.linalg.norm(x), rtol=1e-5)
    # (arguments that cannot be filled: tests/test_mine_kinds.py)


def test_crashing_run_costs_only_itself(mined):
    rows = by_qualname(mined)
    crashed = rows["int_kernels.<locals>.divide_by_zero"][0].provenance
    assert not crashed.executed and "SIGFPE" in crashed.not_executed_reason
    assert rows["int_kernels.<locals>.integer_ok"][0].provenance.executed


def test_test_vectors_match_numpy(mined):
    rows = by_qualname(mined)
    for name, reference in (
        ("top_level", lambda a: a * 2.0),
        ("make_offset_kernel.<locals>.offset_kernel", lambda a: a + 0.5),
    ):
        tv = orjson.loads(rows[name][0].test_vectors)
        a = np.asarray(tv["inputs"]["a"]["data"], dtype=np.float32)
        out = np.asarray(tv["outputs"]["out"]["data"], dtype=np.float32)
        np.testing.assert_allclose(out, reference(a), rtol=1e-6)
        # out = f(a) is linear in a: d(sum(seed * out))/da = seed (x2 for the scaled one)
        seed = np.asarray(tv["output_grads"]["out"]["data"], dtype=np.float32)
        grad = np.asarray(tv["input_grads"]["a"]["data"], dtype=np.float32)
        np.testing.assert_allclose(grad, seed * (2.0 if name == "top_level" else 1.0), rtol=1e-6)
    spec = orjson.loads(rows["top_level"][0].arg_specs)
    assert [(s["name"], s["role"]) for s in spec] == [("a", "in"), ("out", "out")]


def test_provenance_is_relative_and_complete(mined):
    text = orjson.dumps([mined.rows, mined.rejects]).decode()
    for private in {str(TREE.resolve().parent), os.path.expanduser("~"), os.getcwd()}:
        assert private not in text
    for row in mined.rows:
        p = row.provenance
        assert p.path.startswith("mine_tree/") and p.line > 0
        assert p.package == "" and p.license == ""  # a user's tree: unknown
        assert p.executed == (row.test_vectors != "")
        check = row.gradient_check
        assert p.gradients_checked == (check.status in ("verified", "mismatch"))
        if not row.cuda_backward:
            assert check.status == "forward_only" and check.reason
        elif not p.executed:
            assert check.status == "unverified" and check.reason


def test_mined_rows_are_real_rows(mined):
    """Every mined row is the contract's RealRow, key for key and in column order, and
    says the contract's versions and empties (no column of its own making)."""
    from cudagen_data.contracts import REAL_ROW_SCHEMA, RealRow, is_real_row
    from cudagen_data.contracts.row import REAL_GRADIENT_STATUSES
    from cudagen_data.generators import GENERATOR_VERSION

    assert mined.rows and len(mined.splits) == len(mined.rows)
    for row in mined.rows:
        columns = row.to_dict()
        assert type(row) is RealRow and list(columns) == REAL_ROW_SCHEMA.names and is_real_row(row)
        assert RealRow.from_dict(columns) == row
        assert row.generator_version == GENERATOR_VERSION
        assert row.gradient_check.status in REAL_GRADIENT_STATUSES
        assert isinstance(row.test_vectors, str)
        assert (row.test_vectors == "") == (not row.provenance.executed)


def test_mining_counts_are_stage_counters(mined):
    """Every kernel (each overload one) is counted once: kept by every stage it passed, and
    rejected, with a reason that stage owns, by the one that stopped it."""
    from cudagen_data.contracts import RejectReason
    from cudagen_data.contracts.stats import MINE_STAGES

    stages = mined.stats["stages"]
    assert list(stages) == list(MINE_STAGES)
    assert stages["collect"]["in"] == len(mined.rows) + len(mined.rejects)
    assert stages["dedup"]["kept"] == mined.stats["rows"] == len(mined.rows)
    for before, after in zip(MINE_STAGES, MINE_STAGES[1:], strict=False):
        if after != "compile":  # (a kernel whose compile check did not run skips it)
            assert stages[after]["in"] == stages[before]["kept"], (before, after)
    for name, counter in stages.items():
        assert counter["in"] == counter["kept"] + sum(counter["rejected"].values())
        assert all(RejectReason(r).stage == name for r in counter["rejected"]), name
    by_reason = {}
    for r in mined.rejects:
        by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + 1
    assert mined.stats["rejects_by_reason"] == dict(sorted(by_reason.items()))
    assert mined.stats["kernels_generated"] == stages["extract"]["kept"]
    assert mined.stats["compile_passed"] == stages["compile"]["kept"] > 0


def test_gradient_check_of_mined_kernels(mined):
    """Executed mined kernels that ship a backward are checked against finite differences
    (float32, on the built kernel): a right adjoint is verified; Warp's wrong adjoint of a
    dynamic loop whose carried value is used non-linearly is kept, flagged, and counted."""
    rows = by_qualname(mined)
    good = rows["smooth_cubic"][0].gradient_check
    assert good.status == "verified" and good.precision == "float32" and good.probes >= 2
    assert good.worst_rel_error < 5e-2
    bad = rows["row_mean_squared"][0]
    assert bad.gradient_check.status == "mismatch" and bad.gradient_check.precision == "float32"
    assert "dynamic for loop" in bad.gradient_check.reason and bad.provenance.gradients_checked
    assert bad.cuda_backward  # kept with its (wrong) backward, for users to filter
    assert mined.stats["gradient_check"]["mismatch"] >= 1 and mined.stats["gradient_check"]["verified"] >= 2
    assert any("dynamic for loop" in k for k in mined.stats["adjoint_mismatch_constructs"])
    # The test vectors' input gradient is Warp's (wrong) one: finite differences say otherwise.
    tv = orjson.loads(bad.test_vectors)
    a = np.asarray(tv["inputs"]["a"]["data"], dtype=np.float64)
    n = tv["inputs"]["n"]["data"] if isinstance(tv["inputs"]["n"], dict) else tv["inputs"]["n"]
    seed = np.asarray(tv["output_grads"]["out"]["data"], dtype=np.float64)
    mu = a[:, :n].sum(axis=1) / n
    exact = np.zeros_like(a)
    exact[:, :n] = (seed * 2 * mu / n)[:, None]
    recorded = np.asarray(tv["input_grads"]["a"]["data"], dtype=np.float64)
    assert np.abs(recorded - exact).max() > 0.1 * np.abs(exact).max()

    # The re-check (what validate runs) agrees with both statuses, found again through provenance.
    from cudagen_data.mine.recheck import rerun_rows

    reruns = rerun_rows([rows["smooth_cubic"][0], bad], user_root=TREE.parent)
    assert [r.gradient_check.status for r in reruns] == ["verified", "mismatch"]
    assert reruns[1].gradient_check == bad.gradient_check  # same probes, same bytes


def test_warp_package_provenance():
    files = [f for f in discover.find_files(None) if f.relpath == "warp/tests/test_generics.py"]
    assert files and files[0].package == "warp-lang"
    from cudagen_data.mine.rows import LICENSES

    assert LICENSES["warp-lang"] == "Apache-2.0"


def test_dedup_against_synthetic(mined):
    from cudagen_data.mine.rows import build_rows, kernel_shape_hash

    top = by_qualname(mined)["top_level"][0]
    synthetic = (
        "import warp as wp\n\nK = wp.constant(3.0)\n\n\n@wp.kernel\n"
        "def renamed(x: wp.array(dtype=float), y: wp.array(dtype=float)):\n    t = wp.tid()\n    y[t] = x[t] * K\n"
    )
    assert kernel_shape_hash(synthetic) == top.shape_hash  # names and constants folded
    rows, splits, rejects, _ = build_rows(
        mined.files, warp_version="1.19.0", synthetic_shapes={kernel_shape_hash(synthetic)}
    )
    assert "top_level" not in {r.provenance.qualname for r in rows} and len(splits) == len(rows)
    assert {
        "kernel": "top_level",
        "reason": "duplicate_shape",
        "detail": "same shape as a synthetic row",
    }.items() <= next(r for r in rejects if r["kernel"] == "top_level").items()
    assert len(rows) == len(mined.rows) - 1


def test_missing_path_is_one_line_error(tmp_path):
    from typer.testing import CliRunner

    from cudagen_data.cli import app

    result = CliRunner().invoke(app, ["mine", str(tmp_path / "nope"), "--output", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert result.output.strip().splitlines()[-1].startswith("error: ") and "no such file" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_load_dataset_real_config(mined, tmp_path):
    import datasets

    from cudagen_data.mine.folder import write_real

    write_real(tmp_path, mined.by_split(), mined.rejects, mined.preambles, mined.stats, "cudagen mine tests/mine_tree")
    loaded = datasets.load_dataset(str(tmp_path), "real")
    assert sum(split.num_rows for split in loaded.values()) == len(mined.rows)
    rows = [r for split in loaded.values() for r in split]
    assert {r["provenance"]["qualname"] for r in rows} == {r.provenance.qualname for r in mined.rows}
    assert all(r["provenance"]["path"].startswith("mine_tree/") for r in rows)
    manifest = orjson.loads((tmp_path / "manifest.json").read_bytes())
    real_files = [f for f in manifest["files"] if f.get("config") == "real"]
    assert {f["path"] for f in real_files} >= {"rejects_real.jsonl"}
    assert sum(f["rows"] for f in real_files if f["path"].endswith(".parquet")) == len(mined.rows)
    rejects = [orjson.loads(line) for line in (tmp_path / "rejects_real.jsonl").read_bytes().splitlines()]
    assert rejects == mined.rejects


@pytest.fixture(scope="module")
def real_folder(mined, tmp_path_factory):
    from cudagen_data.mine.folder import write_real

    folder = tmp_path_factory.mktemp("real")
    write_real(folder, mined.by_split(), mined.rejects, mined.preambles, mined.stats, "cudagen mine tests/mine_tree")
    return folder


def test_export_publish_stats_real_config(real_folder, tmp_path):
    from typer.testing import CliRunner

    from cudagen_data.cli import app
    from cudagen_data.publish.export import export
    from cudagen_data.publish.hub import plan_upload

    n = export(real_folder, "chat", tmp_path / "chat.jsonl", config="real")
    assert n == sum(1 for _ in (tmp_path / "chat.jsonl").open())
    records = [orjson.loads(line) for line in (tmp_path / "chat.jsonl").read_bytes().splitlines()]
    assert n > 0 and all("cuda" in r["messages"][-1]["content"] for r in records)
    plan = plan_upload(real_folder)
    assert {p for p in plan.paths if p.endswith(".parquet")} == {
        str(p.relative_to(real_folder)) for p in (real_folder / "data/real").glob("*.parquet")
    }
    assert set(plan.rows) <= {"real/train", "real/validation", "real/test"} and sum(plan.rows.values()) > 0
    out = CliRunner().invoke(app, ["stats", str(real_folder)])
    assert out.exit_code == 0 and "configuration 'real'" in out.output and "executed with test vectors" in out.output


def test_validate_reruns_real_rows_and_catches_a_wrong_output(tmp_path):
    """Rows mined from the installed Warp are found again and re-run from their test vectors."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cudagen_data.contracts.row import REAL_ROW_SCHEMA
    from cudagen_data.mine.folder import write_real
    from cudagen_data.validate import validate_path

    warp_tests = discover.installed_warp_root() / "tests"
    files = ["test_copy.py", "test_grad.py"]  # test_grad: adjoints, verified and one custom (wrong by design)
    result = mine_paths([warp_tests / f for f in files], workers=2, options=Options(timeout_s=120))
    assert result.rows and all(r.provenance.package == "warp-lang" for r in result.rows)
    assert {r.provenance.path for r in result.rows} == {f"warp/tests/{f}" for f in files}
    write_real(tmp_path, result.by_split(), result.rejects, result.preambles, result.stats, "cudagen mine")
    report = validate_path(tmp_path)
    executed = sum(r.provenance.executed for r in result.rows)
    assert report.ok and executed > 0 and report.checks_run["cpu_execution"] == executed
    checked = [r.to_dict() for r in result.rows if r.gradient_check.status in ("verified", "mismatch")]
    assert checked and report.checks_run["gradient_check"] == len(checked)

    # The GPU suite's dry run (CUDA compiled and text-checked, kernels run on the CPU).
    from cudagen_data.gpu import gpu_validate

    gpu = gpu_validate(tmp_path, device="cpu", jobs=0)
    assert gpu.ok and gpu.ran == executed

    # Corrupt one recorded output: the re-run must catch it (written as a lone Parquet file).
    rows = [r.to_dict() for r in result.rows]
    row = next(r for r in rows if r["provenance"]["executed"])
    tv = orjson.loads(row["test_vectors"])
    name = next(iter(tv["outputs"]))
    data = np.asarray(tv["outputs"][name]["data"], dtype=np.float64) + 1.0
    tv["outputs"][name]["data"] = data.tolist()
    row["test_vectors"] = orjson.dumps(tv).decode()
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([row], schema=REAL_ROW_SCHEMA), bad)
    report = validate_path(bad)
    assert not report.ok and any(f.check == "cpu_execution" and name in f.message for f in report.failures)

    # A gradient_check status changed by hand: the re-check catches it.
    row = dict(checked[0])
    other = "mismatch" if row["gradient_check"]["status"] == "verified" else "verified"
    row["gradient_check"] = {**row["gradient_check"], "status": other}
    lied = tmp_path / "lied.parquet"
    pq.write_table(pa.Table.from_pylist([row], schema=REAL_ROW_SCHEMA), lied)
    report = validate_path(lied)
    assert not report.ok and any(f.check == "gradient_check" and "re-check says" in f.message for f in report.failures)


def test_cli_writes_no_machine_path(tmp_path):
    """The manifest records the command: mined folders by name, the output as OUT_DIR."""
    from typer.testing import CliRunner

    from cudagen_data.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["mine", str(TREE / "sub"), "--output", str(out), "--no-progress", "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    for name in ("manifest.json", "stats.json", "README.md", "rejects_real.jsonl"):
        text = (out / name).read_text()
        assert str(tmp_path) not in text and str(TREE) not in text, name
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["real"]["command"] == "cudagen mine sub --output OUT_DIR"
    # the compile check's level: NVRTC's front end by default, recorded as produce records it
    from cudagen_data.extract.levels import compiler_record

    assert manifest["real"]["compiler"] == compiler_record(86, "frontend")
    rows = _real_rows(out)
    assert rows and {r["compile"]["level"] for r in rows if r["compile"]["status"] == "ok"} == {"frontend"}


def _real_rows(folder: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return [r for f in sorted((folder / "data" / "real").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_cli_compile_levels(tmp_path):
    """--compile ptx: Warp's full compile, in rows, manifest and the recorded command;
    --no-compile: none; an unknown level: one-line error, nothing written."""
    from typer.testing import CliRunner

    from cudagen_data.cli import app
    from cudagen_data.extract.levels import compiler_record, nvrtc_version

    out = tmp_path / "ptx"
    result = CliRunner().invoke(
        app,
        [
            "mine",
            str(TREE / "sub"),
            "--output",
            str(out),
            "--no-progress",
            "--workers",
            "1",
            "--compile",
            "ptx",
            "--no-run",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["real"]["command"] == "cudagen mine sub --output OUT_DIR --compile ptx"
    assert manifest["real"]["compiler"] == compiler_record(86, "ptx")
    rows = _real_rows(out)
    assert rows and all(
        r["compile"]["level"] == "ptx"
        and r["compile"]["nvrtc_version"] == nvrtc_version("ptx")
        and r["compile"]["status"] == "ok"
        for r in rows
    )

    out = tmp_path / "none"
    result = CliRunner().invoke(
        app,
        [
            "mine",
            str(TREE / "sub"),
            "--output",
            str(out),
            "--no-progress",
            "--workers",
            "1",
            "--no-compile",
            "--no-run",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["real"]["compiler"] == {} and manifest["real"]["command"].endswith("--no-compile")
    assert all(r["compile"]["level"] == "none" and r["compile"]["status"] == "skipped" for r in _real_rows(out))

    result = CliRunner().invoke(
        app, ["mine", str(TREE / "sub"), "--output", str(tmp_path / "bad"), "--compile", "full"]
    )
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1].startswith("error: --compile 'full'")
    assert "Traceback" not in result.output and not (tmp_path / "bad").exists()


def test_in_process_mining_records_only_the_kernels_of_mined_files(tmp_path):
    """Collecting a file in this process (as `cudagen validate -w 0` of mined rows does)
    records the kernels its import makes, and only those: a kernel made afterwards (a re-run,
    a gradient check) is freed as usual, with its module.  The hook once recorded every
    kernel for the life of the process."""
    import gc
    import weakref

    from cudagen_data import warp_boundary
    from cudagen_data.mine.collect import collect

    (tmp_path / "scaled_file.py").write_text(
        "import warp as wp\n\n\n@wp.kernel\ndef scaled(a: wp.array(dtype=float)):\n    a[wp.tid()] = 2.0 * a[0]\n"
    )
    found = collect(discover.SourceFile(str(tmp_path / "scaled_file.py"), str(tmp_path), "scaled_file.py", ""))
    assert [f.qualname for f in found.found] == ["scaled"] and found.import_error is None
    with warp_boundary.loaded_source(
        "import warp as wp\n\n@wp.kernel\ndef later(a: wp.array(dtype=float)):\n    a[wp.tid()] = 1.0\n"
    ) as loaded:
        (kernel,) = loaded.kernels()
        later = weakref.ref(kernel)
        del kernel
    gc.collect()
    assert later() is None, "a kernel made after in-process mining is kept alive"
    again = collect(discover.SourceFile(str(tmp_path / "scaled_file.py"), str(tmp_path), "scaled_file.py", ""))
    assert [f.qualname for f in again.found] == ["scaled"]  # the mined file's kernels are still found
