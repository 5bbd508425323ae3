"""CUDA builds through the Warp boundary leave no NVRTC precompiled header behind unless asked.

NVRTC (CUDA 13+) writes a ~76 MB header into ``<tmp>/__nvrtc_auto_pch_<pid>_<n>/`` and
removes it only when the process exits normally; the boundary turns precompiled headers
off for CUDA builds, except where a worker asks for them (eval, the GPU suite).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from cudagen_data import warp_boundary

SOURCE = """
import warp as wp

@wp.kernel
def scale(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = 2.0 * wp.sin(x[i])
"""


def _our_pch_files() -> set[Path]:
    folders = {Path(tempfile.gettempdir()), Path("/tmp")}
    return {f for d in folders for f in d.glob(f"__nvrtc_auto_pch_{os.getpid()}_*/**/*")}


def test_a_ptx_build_leaves_no_precompiled_header(tmp_path):
    before = _our_pch_files()
    with warp_boundary.batch_module([(SOURCE, "scale")], optimization_level=2) as (module, kernels, errors):
        assert kernels[0] is not None, errors
        unit = warp_boundary.compile_module_to_ptx(module, 86, str(tmp_path))
    assert "scale" in unit and list(tmp_path.glob("*.ptx"))  # it did compile
    assert _our_pch_files() - before == set()


def test_the_cpu_build_keeps_warps_precompiled_header_setting(tmp_path):
    wp = warp_boundary.warp()
    saved = wp.config.use_precompiled_headers
    with warp_boundary.batch_module([(SOURCE, "scale")], optimization_level=2) as (module, kernels, errors):
        warp_boundary.compile_module_to_ptx(module, 86, str(tmp_path))
        assert wp.config.use_precompiled_headers == saved  # restored after the CUDA build
        assert warp_boundary.build_module(module, "cpu") is None
        assert module.resolved_options[1]["use_precompiled_headers"] == saved  # the CPU variant kept it


_REMOVED_THEN_BUILT = """
import json, os, tempfile
import pytest

from cudagen_data import warp_boundary

source, made, after = {source!r}, [], []
for k in range(3):
    unit = [(source.replace("2.0", str(k + 2.0)), "scale")]  # a module of its own each time
    with warp_boundary.batch_module(unit, optimization_level=2) as (m, _, _):
        with tempfile.TemporaryDirectory() as tmp:
            warp_boundary.compile_module_to_ptx(m, 86, tmp, precompiled_header=True)
    made.append(len(warp_boundary.nvrtc_pch_folders(os.getpid())))
    if k == 1:
        after.append(warp_boundary.remove_nvrtc_pch(os.getpid()))
print(json.dumps({{"folders": made, "removed": after}}))
"""


def test_builds_share_one_header_and_go_without_once_the_process_removed_it():
    """With the header on (eval and GPU-suite workers, the GPU suite's dry run), a process's
    modules share one header folder; once the process removed it, NVRTC would fail every
    build ("invalid PCH directory"), so later builds are made without one."""
    import subprocess
    import sys

    import orjson

    res = subprocess.run([sys.executable, "-c", _REMOVED_THEN_BUILT.format(source=SOURCE)], capture_output=True,
                         text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    got = orjson.loads(res.stdout.splitlines()[-1])
    if got["folders"][0] == 0:
        pytest.skip("this NVRTC makes no precompiled-header folder (CUDA < 13: Warp's own temporary folder)")
    assert got == {"folders": [1, 1, 0], "removed": [1]}
