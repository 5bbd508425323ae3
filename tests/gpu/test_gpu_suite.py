"""The GPU suite: the recorded CUDA of produced rows builds, runs and matches on a GPU."""

from __future__ import annotations

import kernel_rows
import numpy as np
import orjson
import pytest
from conftest import JOBS

from cudagen_data.contracts.row import row_from_dict
from cudagen_data.gpu import format_gpu_report, gpu_validate
from cudagen_data.gpu.cuda_text import regenerate
from cudagen_data.gpu.recheck import dataset_rows

pytestmark = pytest.mark.gpu


def _rows(path, n=None):
    """The dataset's rows as dicts (as a user's file holds them: the tests below edit them)."""
    return [row.to_dict() for _, row in dataset_rows(path)][:n]


def _write(path, rows):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _tamper_output(row: dict) -> tuple[dict, str]:
    """A copy of ``row`` with one recorded float output element moved by 1% of the array's scale + 1."""
    tv = orjson.loads(row["test_vectors"])
    for name, value in tv["outputs"].items():
        data = np.asarray(value["data"])
        if data.dtype.kind == "f" and data.size:
            flat = data.astype(np.float64).reshape(-1)
            flat[0] += 0.01 * (1.0 + np.max(np.abs(flat)))
            value["data"] = flat.reshape(data.shape).tolist()
            return {**row, "test_vectors": orjson.dumps(tv).decode()}, name
    pytest.skip("no float output to tamper with")


def test_produced_dataset_passes_on_the_gpu(produced_dataset, cuda_device, tmp_path):
    report = gpu_validate(produced_dataset, device=cuda_device, jobs=JOBS, report_path=tmp_path / "report.json")
    print(format_gpu_report(report))
    assert report.rows and report.ran == len(report.rows)
    assert not report.failed, [(r.row_id, r.failures) for r in report.failed]
    assert all(r.cuda_regenerated == "identical" and r.cuda_compiled == "identical" for r in report.rows)
    assert all(r.build for r in report.rows)
    assert orjson.loads((tmp_path / "report.json").read_bytes())["ok"] is True


def test_regenerated_cuda_matches_recorded(produced_dataset, cuda_device):
    rows = _rows(produced_dataset)
    assert rows
    for row in rows:
        assert regenerate(row_from_dict(row)) == [], row["id"]


def test_corrupted_rows_are_caught(produced_dataset, cuda_device, tmp_path):
    control, victim = _rows(produced_dataset, 2)
    bad_output, name = _tamper_output(victim)
    bad_cuda = {**control, "cuda_forward": control["cuda_forward"].replace("{", "{\n    // edited", 1)}
    report = gpu_validate(_write(tmp_path / "rows.jsonl", [control, bad_output, bad_cuda]), device=cuda_device, jobs=2)
    control_v, output_v, cuda_v = sorted(report.rows, key=lambda v: v.pos)
    assert control_v.ok, control_v.failures
    assert {c for c, _ in output_v.failures} == {"outputs"} and repr(name) in output_v.failures[0][1]
    assert {c for c, _ in cuda_v.failures} == {"cuda_regenerate", "cuda_compiled"}
    assert report.exit_code == 1


def test_hand_written_kernels_pass_on_the_gpu(cuda_device, tmp_path):
    """vec/mat/quat, int outputs, atomics, tiles, float64 and float16, independent of the generators."""
    rows = kernel_rows.make_rows(list(kernel_rows.KERNELS))
    report = gpu_validate(_write(tmp_path / "rows.jsonl", rows), device=cuda_device, jobs=JOBS)
    print(format_gpu_report(report))
    assert report.ok, [(r.kernel_name, r.failures) for r in report.failed]
    tolerances = {r.kernel_name: r.tolerance for r in report.rows}
    assert tolerances["f64_kernel"] == "float64_native"
    assert tolerances["chain"] == tolerances["geometry"] == "float64_twin"


def test_a_kernel_that_breaks_its_cuda_context_is_isolated(cuda_device, tmp_path):
    """An out-of-bounds write on the GPU fails its own row; the other rows still pass."""
    rows = kernel_rows.make_rows(["atomic", "chain", "argmax"])
    chain = rows[1]
    rows[1] = kernel_rows.with_source(chain, chain["python_source"].replace("y[i] =", "y[i + 1000000000] ="))
    report = gpu_validate(_write(tmp_path / "rows.jsonl", rows), device=cuda_device, jobs=1)
    first, broken, last = sorted(report.rows, key=lambda v: v.pos)
    assert first.ok and last.ok, (first.failures, last.failures)  # the row after it ran in a sound context
    assert "gpu_run" in {check for check, _ in broken.failures}, broken.failures
