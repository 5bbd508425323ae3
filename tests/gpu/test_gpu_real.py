"""The GPU suite on the `real` configuration: kernels mined from the installed Warp's own
files are found again through their provenance, built for the GPU alone with their
module's options, and run on their recorded test vectors."""

from __future__ import annotations

import pytest
from conftest import JOBS

from cudagen_data.gpu import format_gpu_report, gpu_validate

pytestmark = pytest.mark.gpu

# Small files of Warp's own tests with kernels that run from their annotations.
FILES = ("test_copy.py", "test_generics.py", "test_lerp.py", "test_vec_constructors.py")


@pytest.fixture(scope="module")
def mined_folder(tmp_path_factory):
    from cudagen_data.mine import discover
    from cudagen_data.mine.folder import write_real
    from cudagen_data.mine.pool import Options
    from cudagen_data.mine.run import mine_paths

    tests = discover.installed_warp_root() / "tests"
    result = mine_paths([tests / f for f in FILES if (tests / f).exists()], workers=2, options=Options(timeout_s=300))
    folder = tmp_path_factory.mktemp("real")
    write_real(folder, result.rows, result.rejects, result.preambles, result.stats, "cudagen mine (GPU suite)")
    return folder, result


def test_mined_rows_pass_on_the_gpu(mined_folder, cuda_device, tmp_path):
    folder, result = mined_folder
    report = gpu_validate(folder, device=cuda_device, jobs=JOBS, report_path=tmp_path / "report.json")
    print(format_gpu_report(report))
    executed = sum(r["provenance"]["executed"] for r in result.rows)
    assert executed > 0 and report.ran == executed
    assert report.ok, format_gpu_report(report)
