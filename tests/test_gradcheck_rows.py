"""Rows say what was verified about their backward, and `cudagen validate` checks it again:
real rows (tests/kernel_rows.py, a forward-only one among them) written as a dataset
folder by the producer's writer, validated, and tampered with."""

from __future__ import annotations

import functools

import kernel_rows
import orjson
import pytest
from fixtures_rows import write_folder
from gradcheck_kernels import BAD

from cudagen_data.canonical import text_hash
from cudagen_data.execution import execute_specs
from cudagen_data.execution import test_vectors as vectors_of
from cudagen_data.extract import extract_source
from cudagen_data.gradcheck import GradientCheck
from cudagen_data.pipeline.config import ProduceConfig, versions
from cudagen_data.pipeline.work import build_row
from cudagen_data.validate import validate_path


@pytest.fixture(scope="module")
def rows():
    return dict(zip(kernel_rows.KERNELS, kernel_rows.make_rows(list(kernel_rows.KERNELS)), strict=False))


def _jsonl(path, rows):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def test_rows_record_the_check(rows):
    assert rows["forward_only"]["gradient_check"]["status"] == "forward_only"
    assert rows["forward_only"]["cuda_backward"] == "" and not rows["forward_only"]["metadata"]["has_backward"]
    for name in ("chain", "geometry", "tile", "float64", "float16"):
        check = rows[name]["gradient_check"]
        assert check["status"] == "verified" and check["precision"] == "float64" and check["probes"] >= 3, name
        assert check["worst_rel_error"] < 1e-3


def test_validate_reruns_the_gradient_check_and_passes_forward_only_rows(rows, tmp_path):
    write_folder(tmp_path / "ds", list(rows.values()))
    report = validate_path(tmp_path / "ds")
    assert report.ok, [(f.check, f.message) for f in report.failures]
    assert report.checks_run["gradient_check"] == sum(
        r["gradient_check"]["status"] == "verified" for r in rows.values()
    )
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "## Verified backward" in card and "forward-only" in card
    stats = orjson.loads((tmp_path / "ds" / "stats.json").read_bytes())
    assert stats["gradient_check"]["by_status"]["forward_only"] == 1
    assert stats["row_length"]["all"]["rows"] == len(rows)


def test_validate_catches_a_wrong_backward_claimed_verified(tmp_path):
    """A row made with the producer's steps from a kernel Warp differentiates wrongly (a
    dynamic loop's carried value used non-linearly after it), claiming "verified"."""
    spec = BAD["dynamic_loop"]
    (run,) = execute_specs([spec], reference_checks={})
    kernel = extract_source(spec.python_source).kernels[0]
    config = ProduceConfig(count=1, categories=(spec.category,))
    claim = GradientCheck("verified", "", "float64", 4, 0.0)
    row = build_row(
        config,
        0,
        spec,
        kernel,
        text_hash(kernel.preamble),
        vectors_of(spec, run),
        "ok",
        0.0,
        0.0,
        versions()["warp"],
        claim,
    )
    report = validate_path(_jsonl(tmp_path / "bad.jsonl", [row.to_dict()]))
    failures = [(f.check, f.message) for f in report.failures]
    assert {c for c, _ in failures} == {"gradient_check"}, failures
    # Warp's wrong adjoint here returns zero input gradients: the vacuous-backward check
    # of the recorded vectors says so too, next to the re-check's mismatch
    mismatch = [m for _, m in failures if "re-check says mismatch" in m]
    assert len(mismatch) == 1 and "dynamic for loop" in mismatch[0], failures


def test_validate_catches_false_forward_only_claims(rows, tmp_path):
    chain = rows["chain"]
    lying_fwd = {**rows["forward_only"], "gradient_check": {**chain["gradient_check"]}}
    claims_fwd = {**chain, "gradient_check": {**rows["forward_only"]["gradient_check"]}}
    report = validate_path(_jsonl(tmp_path / "rows.jsonl", [lying_fwd, claims_fwd]))
    problems = {(f.row_id == chain["id"], f.check) for f in report.failures}
    assert problems == {(False, "gradient_check"), (True, "gradient_check")}


def test_a_row_without_twin_is_checked_on_the_executed_kernel_with_the_same_result():
    """The execute stage checks a row that has no float64 twin on the kernel it built
    (gradcheck.check_own_build); it must say exactly what check_gradients says after
    building that kernel again, and leave every row with a twin to check_gradients."""
    from cudagen_data.execution import forward_only_reason
    from cudagen_data.generators import categories, generate
    from cudagen_data.gradcheck import Point, check_gradients, check_own_build
    from cudagen_data.numerics.twin import TwinUnavailable, twin_spec

    specs = [generate(c, 1, i) for i in range(4) for c in categories()]  # 60 kernels, 11 without a twin
    seen = {}

    def on_run(i, kernel, run):
        decoded = vectors_of(specs[i], run).decoded()
        seen[i] = check_own_build(specs[i], kernel, Point(decoded["inputs"], decoded["output_grads"]))

    runs = execute_specs(specs, on_run=on_run)
    ok = [i for i, r in enumerate(runs) if r.ok]
    assert sorted(seen) == ok
    own = [i for i in ok if seen[i] is not None]
    assert len(own) >= 5  # float64-native and float32-only kernels are among them
    for i in ok:
        if seen[i] is None and not forward_only_reason(specs[i].python_source):
            twin_spec(specs[i])  # left to check_gradients: it has a twin (a forward-only kernel has no check)
    # check_gradients builds each kernel again (a row's check does not depend on its batch)
    points = []
    for i in own:
        decoded = vectors_of(specs[i], runs[i]).decoded()
        points.append(Point(decoded["inputs"], decoded["output_grads"]))
    again = dict(zip(own, check_gradients([specs[i] for i in own], points), strict=True))
    for i in own:
        assert seen[i] == again[i], specs[i].category
        with pytest.raises(TwinUnavailable):
            twin_spec(specs[i])  # NativeFloat64 is a TwinUnavailable too
    assert sum(again[i].status == "verified" for i in own) >= len(own) // 2


def test_a_costly_size_is_checked_on_an_optimized_build_with_the_same_result(monkeypatch):
    """check_own_build checks a size predicted to be costly (gradcheck.COSTLY_CHECK_SECONDS)
    on the same source built for speed (execution.OptimizedBuild): what it records must be
    exactly what the row's own build records, size by size (a float64 gemm's 257-cube size
    took 48 s on the row's build, ~5 s so).  Here every other size of every kernel is
    predicted costly (threshold 0), against none (threshold infinite), on kernels checked in
    float64 and in float32, verified at every size, and mismatched (at their own size)."""
    from cudagen_data import execution, gradcheck
    from cudagen_data.generators import generate
    from cudagen_data.gradcheck import Point, check_own_build
    from cudagen_data.sizes import other_sizes

    picks = [("vector", 2), ("vector", 5), ("matrix", 0), ("matrix", 4), ("softmax", 1), ("norm", 9)]
    specs = [generate(c, 1, i) for c, i in picks]
    more = [[execution.SizedRun(label, sized, guard=guard) for label, sized, guard, _ in other_sizes(s)] for s in specs]
    built = []
    plain = execution.OptimizedBuild.kernel.func

    def counted(self):
        built.append(self.spec.kernel_name)
        return plain(self)

    monkeypatch.setattr(execution.OptimizedBuild, "kernel", functools.cached_property(counted))
    monkeypatch.setattr(execution.OptimizedBuild.kernel, "attrname", "kernel", raising=False)
    seen = {}

    def on_run(i, kernel, run):
        point = Point.of(run)
        monkeypatch.setattr(gradcheck, "COSTLY_CHECK_SECONDS", float("inf"))
        own = check_own_build(specs[i], kernel, point)
        before = len(built)
        monkeypatch.setattr(gradcheck, "COSTLY_CHECK_SECONDS", 0.0)
        fast = check_own_build(specs[i], kernel, point)
        seen[i] = (own, fast, len(built) - before, len(point.sizes))

    runs = execute_specs(specs, more=more, on_run=on_run)
    assert all(r.ok for r in runs)
    assert sorted(seen) == list(range(len(specs)))
    statuses = set()
    for i, (own, fast, builds, other) in seen.items():
        assert own is not None and own == fast, specs[i].kernel_name
        if other and (own.status == "verified" or own.reason.startswith("at launch")):
            assert builds == 1, specs[i].kernel_name  # its other sizes ran on the optimized build
            statuses.add((own.status, own.precision))
    assert {("verified", "float64"), ("verified", "float32")} <= statuses  # at every size, both precisions
    assert {own.status for own, _, _, _ in seen.values()} == {"verified", "mismatch"}

    # the rows with a float64 twin: check_gradients builds the twins, and a costly size of a
    # twin runs on the twin's optimized build, with the same result
    twins = [generate(c, 1, i) for c, i in (("arithmetic", 0), ("math", 1), ("stencil", 2), ("atomic", 0), ("scan", 1))]
    more = [[execution.SizedRun(label, sized, guard=guard) for label, sized, guard, _ in other_sizes(s)] for s in twins]
    runs = execute_specs(twins, more=more)
    assert all(r.ok and r.more_sizes for r in runs)
    points = [Point.of(r) for r in runs]
    monkeypatch.setattr(gradcheck, "COSTLY_CHECK_SECONDS", float("inf"))
    before = len(built)
    plain_checks = gradcheck.check_gradients(twins, points)
    assert len(built) == before
    monkeypatch.setattr(gradcheck, "COSTLY_CHECK_SECONDS", 0.0)
    fast_checks = gradcheck.check_gradients(twins, points)
    assert plain_checks == fast_checks
    assert {c.precision for c in plain_checks} == {"float64"} and {c.status for c in plain_checks} == {"verified"}
    assert sorted(built[before:]) == sorted(s.kernel_name for s in twins)  # one optimized twin build each


def test_the_optimized_build_is_never_made_off_the_cpu(monkeypatch):
    """A GPU run (validate --device cuda, the GPU suite) checks every size on the kernel it
    was given: OptimizedBuild answers None there without building anything."""
    import contextlib

    from cudagen_data import execution, warp_boundary
    from cudagen_data.generators import generate

    def no_build(*args, **kwargs):
        raise AssertionError("an optimized build was made off the CPU")

    monkeypatch.setattr(warp_boundary, "batch_module", no_build)
    with contextlib.ExitStack() as stack:
        assert execution.OptimizedBuild(generate("gemm", 1, 0), stack, "cuda:0", backward=True).kernel is None
        with pytest.raises(AssertionError, match="off the CPU"):
            _ = execution.OptimizedBuild(generate("gemm", 1, 0), stack, "cpu", backward=True).kernel
