"""The GPU suite's CPU side: what can be checked without a GPU.

- without a CUDA device, gpu_validate raises GpuUnavailable with one line;
- the float64 twin rewrite, and the tolerances derived from it: they accept a
  float32 result with the measured rounding error and reject a perturbed one;
- a dry run (device="cpu": CUDA compiled to PTX and text-checked, kernels run on the
  CPU) passes on real rows and catches corrupted outputs, gradients and CUDA text,
  while a Warp version change is reported as drift, not failure;
- the worker pool isolates a row that crashes its process;
- the GPU code path imports neither ``datasets`` nor ``huggingface_hub``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import kernel_rows
import numpy as np
import orjson
import pytest

from cudagen_data import warp_boundary
from cudagen_data.contracts.read import recorded_run
from cudagen_data.contracts.row import row_from_dict
from cudagen_data.gpu import GpuUnavailable, format_gpu_report, gpu_validate
from cudagen_data.gpu.report import GpuReport, RowVerdict
from cudagen_data.gpu.worker import grad_key, prepare, reference_stage
from cudagen_data.numerics.tolerance import check_array
from cudagen_data.numerics.twin import NativeFloat64, TwinUnavailable, twin_source, twin_spec
from cudagen_data.spec import ArgSpec

REPO = Path(__file__).resolve().parents[1]


def _has_cuda() -> bool:
    return warp_boundary.warp().get_cuda_device_count() > 0


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _tamper_vectors(row: dict, section: str, name: str, fn) -> dict:
    tv = orjson.loads(row["test_vectors"])
    data = np.asarray(tv[section][name]["data"], dtype=np.float64)
    tv[section][name]["data"] = fn(data).tolist()
    return {**row, "test_vectors": orjson.dumps(tv).decode()}


def _tamper_other_size(row: dict, size: str, name: str) -> dict:
    """``row`` with one output element changed in the set of another recorded size."""
    tv = orjson.loads(row["test_vectors"])
    (vset,) = [s for s in tv["more_sizes"] if s["size"] == size]
    data = np.asarray(vset["outputs"][name]["data"], dtype=np.float64)
    data[-1] += 0.01 * (1 + abs(data[-1]))
    vset["outputs"][name]["data"] = data.tolist()
    return {**row, "test_vectors": orjson.dumps(tv).decode()}


# --------------------------------------------------------------------------- no GPU


@pytest.mark.skipif(_has_cuda(), reason="this machine has a CUDA device")
def test_gpu_validate_without_cuda_raises_one_line(tmp_path):
    with pytest.raises(GpuUnavailable) as info:
        gpu_validate(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("no CUDA device") and "GPU_TESTING.md" in message


@pytest.mark.skipif(_has_cuda(), reason="this machine has a CUDA device")
def test_module_entry_point_exits_2_without_cuda(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "cudagen_data.gpu", str(tmp_path)], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device" in proc.stderr
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- the twin


def test_twin_source_widens_types_and_literals():
    twin = twin_source(kernel_rows.KERNELS["chain"][0])
    assert "wp.float64(2.0)" in twin and "wp.float64(0.25)" in twin and "wp.constant(wp.float64(1.5))" in twin
    assert "dtype=wp.float64" in twin and "v: wp.float64" in twin and "s: wp.float64" in twin
    assert "float)" not in twin.replace("wp.float64)", "")
    geo = twin_source(kernel_rows.KERNELS["geometry"][0])
    for wide in ("wp.vec3d", "wp.mat33d", "wp.quatd"):
        assert wide in geo
    assert "wp.vec3(" not in geo and "wp.quat)" not in geo


def test_twin_of_float64_kernel_is_the_kernel_itself():
    with pytest.raises(NativeFloat64):
        twin_source(kernel_rows.KERNELS["float64"][0])


def test_twin_unavailable_for_argument_without_float64_dtype():
    spec = kernel_rows.kernel_spec("chain")
    spec = type(spec)(**{**spec.__dict__, "args": (ArgSpec("t", "array", "transform", (4,)),) + spec.args[1:]})
    with pytest.raises(TwinUnavailable, match="transform"):
        twin_spec(spec)


# --------------------------------------------------------------------------- tolerances


@pytest.fixture(scope="module")
def rows():
    return dict(zip(kernel_rows.KERNELS, kernel_rows.make_rows(list(kernel_rows.KERNELS), sizes=True), strict=False))


@pytest.fixture(scope="module")
def references(rows):
    """Fresh float32 CPU runs and float64 twin runs, by kernel."""
    outs = reference_stage([prepare(i, row_from_dict(r)) for i, r in enumerate(rows.values())])
    return dict(zip(rows, outs, strict=False))


@pytest.mark.parametrize("name", ["chain", "geometry", "atomic", "tile", "float16"])
def test_twin_tolerance_accepts_float32_error_and_rejects_perturbation(rows, references, name):
    ref = references[name]
    assert ref.twin == "ok", ref.twin
    _, outputs, _, grads = recorded_run(row_from_dict(rows[name]))
    arrays = {**outputs, **{grad_key(n): g for n, g in grads.items()}}
    measured, rejected = 0.0, 0
    # float16 keeps ~3 digits, so its tolerance is ~1%: perturb it by 10%.
    factor = 1.1 if name == "float16" else 1.01
    for key, recorded in arrays.items():
        recorded = np.asarray(recorded)
        cpu32, ref64 = ref.cpu32[key], ref.ref64[key]
        assert np.array_equal(cpu32, recorded)  # the CPU is deterministic: re-run == recorded
        measured = max(measured, float(np.max(np.abs(cpu32.astype(np.float64) - ref64))))
        # The recorded CPU result passes, and so does a "GPU" result with the same error mirrored.
        assert check_array(key, "output", recorded, recorded, cpu32=cpu32, ref64=ref64).ok
        mirrored = (2.0 * ref64 - cpu32.astype(np.float64)).astype(recorded.dtype)
        mirror = check_array(key, "output", mirrored, recorded, cpu32=cpu32, ref64=ref64)
        assert mirror.ok and mirror.tolerance == "float64_twin", mirror.describe()
        # A wrong element (a wrong constant, a dropped term) fails.
        if np.abs(recorded).max() > 0:
            bad = recorded.astype(np.float64).copy().reshape(-1)
            i = int(np.argmax(np.abs(bad)))
            bad[i] *= factor
            wrong = check_array(
                key, "output", bad.reshape(recorded.shape).astype(recorded.dtype), recorded, cpu32=cpu32, ref64=ref64
            )
            assert not wrong.ok and wrong.index == i and wrong.ratio > 1, wrong.describe()
            rejected += 1
    assert measured > 0  # the twin measured a real float32 rounding error somewhere
    assert rejected


@pytest.mark.parametrize(
    ("category", "index", "array", "gpu_error"),
    [
        # The two failures of the first H100 run (seed 0, 1,000 pairs): the GPU errors it saw.
        ("math", 14, "y_out", 1.2e-7),  # float64 output of float32 exp(): 1 float32 ulp
        ("matrix", 56, "sink", 5.9e-5),  # sin() of a float32 intermediate of ~300
    ],
)
def test_twin_tolerance_covers_the_h100_float32_differences(category, index, array, gpu_error):
    # the kernel generator 8 made at (seed 0, index), pinned (kernel_rows.H100_TWIN_KERNELS)
    (row,) = kernel_rows.rows_of([kernel_rows.h100_twin_spec(category, index)], sizes=True)
    row = row_from_dict(row)
    ref = reference_stage([prepare(0, row)])[0]
    assert ref.twin == "ok", ref.twin
    recorded = np.asarray(recorded_run(row)[1][array])
    cpu32, ref64 = ref.cpu32[array], ref.ref64[array]
    # the GPU's error lands where the CPU's own error was smallest
    i = int(np.argmin(np.abs(cpu32.astype(np.float64) - ref64)))
    gpu = recorded.astype(np.float64).reshape(-1)
    gpu[i] += gpu_error
    check = check_array(
        array, "output", gpu.reshape(recorded.shape).astype(recorded.dtype), recorded, cpu32=cpu32, ref64=ref64
    )
    assert check.ok, check.describe()
    # ... and a wrong value (1% of the largest one) is still caught
    gpu[i] += 0.01 * float(np.max(np.abs(recorded)))
    check = check_array(
        array, "output", gpu.reshape(recorded.shape).astype(recorded.dtype), recorded, cpu32=cpu32, ref64=ref64
    )
    assert not check.ok and check.index == i


def test_integer_outputs_exact_except_where_the_twin_breaks_a_tie():
    recorded = np.array([3, 1, 4, 1], dtype=np.int32)
    assert check_array("idx", "output", recorded.copy(), recorded).ok
    off = recorded.copy()
    off[2] = 5
    result = check_array("idx", "output", off, recorded)
    assert not result.ok and result.index == 2 and "1 of 4" in result.detail
    # float32 and float64 disagree at element 2 (a near tie): the GPU may side with either.
    assert check_array("idx", "output", off, recorded, cpu32=recorded.copy(), ref64=off.copy()).ok
    # Where they agree, the recorded value is the only answer (a wrong recording is caught).
    assert not check_array("idx", "output", off, recorded, cpu32=off.copy(), ref64=off.copy()).ok


def test_fallback_and_native_tolerances():
    recorded = np.linspace(-2.0, 3.0, 50).astype(np.float32)
    near = (recorded * (1 + 2e-3)).astype(np.float32)
    assert check_array("y", "output", near, recorded).tolerance == "fallback"
    assert check_array("y", "output", near, recorded).ok
    assert not check_array("y", "output", recorded * 1.5, recorded).ok
    r64 = np.linspace(-2.0, 3.0, 50)
    native = check_array("y", "output", r64 * (1 + 1e-12), r64, native64=True)
    assert native.ok and native.tolerance == "float64_native"
    assert not check_array("y", "output", r64 * (1 + 1e-6), r64, native64=True).ok
    nan = recorded.copy()
    nan[3] = np.nan
    assert not check_array("y", "output", nan, recorded).ok
    assert not check_array("y", "output", recorded[:-1], recorded).ok


# --------------------------------------------------------------------------- dry run end to end


@pytest.fixture(scope="module")
def dry_run(rows, tmp_path_factory):
    """One dry run over the hand-made rows plus tampered copies of some of them."""
    chain, geo, argmax = rows["chain"], rows["geometry"], rows["argmax"]
    tampered = {
        "output": _tamper_vectors(
            chain, "outputs", "y", lambda d: d + np.where(np.arange(d.size) == 5, 0.01 * (1 + abs(d[5])), 0.0)
        ),
        "gradient": _tamper_vectors(geo, "input_grads", "a", lambda d: -d),
        "int_output": _tamper_vectors(argmax, "outputs", "idx", lambda d: (d + 1) % 8),
        "other_size": _tamper_other_size(chain, "large", "y"),
        "cuda_text": {**chain, "cuda_forward": chain["cuda_forward"].replace("wp::tanh(", "wp::sinh(", 1)},
        "drift": {**geo, "warp_version": "1.18.0", "cuda_backward": geo["cuda_backward"] + "// from an older Warp\n"},
    }
    good = list(rows.values())
    path = _write_jsonl(tmp_path_factory.mktemp("dry") / "rows.jsonl", good + list(tampered.values()))
    report_path = path.with_name("report.json")
    report = gpu_validate(path, device="cpu", jobs=0, report_path=report_path)
    by_pos = {v.pos: v for v in report.rows}
    verdicts = {name: by_pos[i] for i, name in enumerate(rows)}
    verdicts.update({f"tampered_{name}": by_pos[len(good) + i] for i, name in enumerate(tampered)})
    return report, verdicts, report_path


def test_dry_run_passes_real_rows_with_the_expected_tolerances(dry_run):
    report, verdicts, _ = dry_run
    for name in kernel_rows.KERNELS:
        v = verdicts[name]
        assert v.ok and v.ran, (name, v.failures)
        assert v.cuda_regenerated == "identical" and v.cuda_compiled == "identical", name
        assert v.build == "ptx sm_86 (compile only)"
    assert verdicts["float64"].tolerance == "float64_native"
    # the forward-only row (no cuda_backward) round-trips: regenerated and compiled text
    # identical, forward run on the recorded inputs, no gradients to compare
    fwd = verdicts["forward_only"]
    assert fwd.ok and fwd.ran and fwd.cuda_regenerated == "identical" and fwd.cuda_compiled == "identical"
    for name in ("chain", "geometry", "atomic", "tile", "float16", "argmax"):
        assert verdicts[name].tolerance == "float64_twin", (name, verdicts[name].twin)
    text = format_gpu_report(report)
    assert "DRY RUN" in text and text.splitlines()[-1].startswith("FAILED")


def test_dry_run_catches_tampered_rows(dry_run):
    _, verdicts, _ = dry_run
    checks = lambda v: {c for c, _ in v.failures}  # noqa: E731
    assert checks(verdicts["tampered_output"]) == {"outputs"}
    assert "element 5" in verdicts["tampered_output"].failures[0][1]
    assert checks(verdicts["tampered_gradient"]) == {"gradients"}
    assert checks(verdicts["tampered_int_output"]) == {"outputs"}
    # every recorded size is run on the device and judged: a wrong value at the large size only
    assert checks(verdicts["tampered_other_size"]) == {"outputs"}
    assert verdicts["tampered_other_size"].failures[0][1].startswith("size large: ")
    assert checks(verdicts["tampered_cuda_text"]) == {"cuda_regenerate", "cuda_compiled"}
    drift = verdicts["tampered_drift"]
    assert drift.ok and drift.ran and drift.cuda_regenerated == "drift" and drift.drift


def test_report_json_and_exit_code(dry_run):
    report, _, report_path = dry_run
    data = orjson.loads(report_path.read_bytes())
    assert data["rows"] == len(report.rows) and data["failed"] == 5 and data["drift"] == 1
    assert not data["ok"] and report.exit_code == 1
    assert {f["check"] for f in data["failures"]} == {"outputs", "gradients", "cuda_regenerate", "cuda_compiled"}
    assert data["worst"][0]["ok"] is False
    # drift alone does not fail a run
    only_drift = GpuReport(
        "x", "cuda:0", rows=[RowVerdict(0, "id", "c", "k", "1.18.0", drift=["cuda_regenerate: forward"], ran=True)]
    )
    assert only_drift.ok and only_drift.exit_code == 0


# --------------------------------------------------------------------------- crash isolation


@pytest.mark.slow
def test_pool_isolates_a_row_that_crashes_its_worker(rows, monkeypatch):
    from cudagen_data import warp_boundary
    from cudagen_data.gpu.pool import run_pool

    # the workers build with NVRTC's header (gpu/worker.py): the pool removes a crashed one's
    removed: dict[int, int] = {}
    real_remove = warp_boundary.remove_nvrtc_pch
    monkeypatch.setattr(warp_boundary, "remove_nvrtc_pch", lambda pid: removed.setdefault(pid, real_remove(pid)))

    chain = rows["chain"]
    # Writes 4 GB past the end of y: a segfault on the CPU backend.
    crashing = kernel_rows.with_source(chain, chain["python_source"].replace("y[i] =", "y[i + 1000000000] ="))
    items = [(0, row_from_dict(rows["atomic"])), (1, row_from_dict(crashing)), (2, row_from_dict(rows["argmax"]))]
    got: dict[str, set] = {"device": set(), "reference": set()}
    crashed: list[tuple[int, str, str]] = []
    restarts = run_pool([items], "cpu", 1, lambda s, outs: got[s].update(o.pos for o in outs),
                        lambda its, stage, why: crashed.extend((p, stage, why) for p, _ in its))  # fmt: skip
    assert got["device"] == {0, 2} and got["reference"] == {0, 2}
    assert [(p, s) for p, s, _ in crashed] == [(1, "device")]
    assert "SIGSEGV" in crashed[0][2] and restarts >= 2  # [0,1,2] crashes, then [1,2], then [1]
    assert len(removed) >= 3 and not any(warp_boundary.nvrtc_pch_folders(pid) for pid in removed)
    if warp_boundary.runtime_versions()["toolkit"] >= (13, 0):  # NVRTC 13+ keeps its header in /tmp
        assert sum(n > 0 for n in removed.values()) >= 2  # the crashed workers' (one that exits removes its own)


# --------------------------------------------------------------------------- imports


def test_gpu_path_needs_neither_datasets_nor_huggingface_hub(rows, tmp_path):
    """The GPU machine lacks both: block them, then run a dry run and import the GPU tests."""
    path = _write_jsonl(tmp_path / "rows.jsonl", [rows["atomic"]])
    script = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("datasets", "huggingface_hub"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        sys.path[:0] = [{str(REPO / "tests" / "gpu")!r}]
        import conftest, make_dataset  # the GPU suite's own helpers
        from cudagen_data.gpu import gpu_validate
        report = gpu_validate({str(path)!r}, device="cpu", jobs=0)
        assert report.ok, report.rows[0].failures
        print("clean")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and "clean" in proc.stdout, proc.stderr[-2000:]
