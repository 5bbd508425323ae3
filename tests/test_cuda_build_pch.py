"""CUDA builds through the Warp boundary leave no NVRTC precompiled header behind.

NVRTC (CUDA 13+) writes a ~76 MB header per module name into
``<tmp>/__nvrtc_auto_pch_<pid>_<n>/`` and never deletes it; our modules are each built
once, so the boundary turns precompiled headers off for CUDA builds.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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
