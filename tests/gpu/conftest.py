"""Fixtures of the GPU suite.  Every test here is marked ``gpu`` and skips, with the
reason, where Warp sees no CUDA device, so a CPU-only CI stays green.

CUDAGEN_GPU_DRY_RUN=1 runs the suite without a GPU instead (device "cpu": CUDA is
compiled and text-checked, kernels run on the CPU): for working on the suite itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # make_dataset (here), kernel_rows (tests/)

DATASET_ROWS_PER_CATEGORY = 4
JOBS = min(8, os.cpu_count() or 1)


@pytest.fixture(scope="session")
def cuda_device() -> str:
    from cudagen_data import warp_boundary

    if os.environ.get("CUDAGEN_GPU_DRY_RUN") == "1":
        return "cpu"
    if warp_boundary.warp().get_cuda_device_count() == 0:
        pytest.skip("no CUDA device: Warp found no CUDA driver/GPU on this machine (see GPU_TESTING.md)")
    return "cuda:0"


@pytest.fixture(scope="session")
def produced_dataset(cuda_device, tmp_path_factory) -> Path:
    """A small dataset of every category, made with the producer (CPU run recorded).
    Small batches spread over worker processes keep this to seconds."""
    from make_dataset import make_dataset

    from cudagen_data.generators import categories

    cats = categories()
    out = tmp_path_factory.mktemp("gpu_dataset")
    return make_dataset(out, DATASET_ROWS_PER_CATEGORY * len(cats), categories=cats, workers=JOBS, batch_size=10)
