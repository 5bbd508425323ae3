"""The GPU suite on the `real` configuration: kernels mined from the installed Warp's own
files are found again through their provenance, built for the GPU alone with their
module's options, and run on their recorded test vectors.

Outputs that depend on thread order are not recorded (mining runs every kernel again
with its threads reversed: cudagen_data/mine/order.py), so every recorded output must
come out the same on a GPU.  ``CUDAGEN_GPU_REAL_EVERY=N`` mines every Nth file of the
whole installed Warp instead of the default files (N=1: all of it; ~2 min to mine
with 16 workers, then every executed row on the GPU)."""

from __future__ import annotations

import os

import pytest
from conftest import JOBS

from cudagen_data.gpu import format_gpu_report, gpu_validate

pytestmark = pytest.mark.gpu

# Small files of Warp's own tests with kernels that run from their annotations.
FILES = ("tests/test_copy.py", "tests/test_generics.py", "tests/test_lerp.py", "tests/test_vec_constructors.py")
# Files whose kernels the H100 found order-dependent before the reversed-order check
# (scatters through atomic_add's slot, colliding index inputs), and the new argument kinds.
ORDER_FILES = (
    "_src/fem/space/partition.py",
    "_src/fem/space/trimesh_function_space.py",
    "_src/coloring.py",
    "_src/optim/linear.py",
    "_src/render/render_opengl.py",
    "tests/test_fabricarray.py",
    "tests/test_indexedarray.py",
    "tests/test_struct.py",
)


def _mine(paths, tmp_path_factory, name):
    from cudagen_data.mine.folder import write_real
    from cudagen_data.mine.pool import Options
    from cudagen_data.mine.run import mine_paths

    result = mine_paths(paths, workers=JOBS, options=Options(timeout_s=300))
    folder = tmp_path_factory.mktemp(name)
    write_real(folder, result.by_split(), result.rejects, result.preambles, result.stats, "cudagen mine (GPU suite)")
    return folder, result


def _files(names):
    from cudagen_data.mine import discover

    root = discover.installed_warp_root()
    return [root / f for f in names if (root / f).exists()]


@pytest.fixture(scope="module")
def mined_folder(cuda_device, tmp_path_factory):  # cuda_device first: without a GPU, skip before mining
    every = int(os.environ.get("CUDAGEN_GPU_REAL_EVERY", "0"))
    if every:
        from cudagen_data.mine import discover

        return _mine([f.path for f in discover.find_files(None)[::every]], tmp_path_factory, "real_every")
    return _mine(_files(FILES + ORDER_FILES), tmp_path_factory, "real")


def test_mined_rows_pass_on_the_gpu(mined_folder, cuda_device, tmp_path):
    folder, result = mined_folder
    report = gpu_validate(folder, device=cuda_device, jobs=JOBS, report_path=tmp_path / "report.json")
    print(format_gpu_report(report))
    executed = sum(r.provenance.executed for r in result.rows)
    dropped = sum(bool(r.provenance.order_dependent) for r in result.rows)
    print(
        f"mined rows: {len(result.rows)}, executed: {executed}, executed with order-dependent outputs left out: "
        f"{dropped}, "
        f"not executed by reason: {result.stats['not_executed_by_reason']}"
    )
    assert executed > 0 and report.ran == executed
    assert report.ok, format_gpu_report(report)
