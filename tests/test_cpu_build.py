"""The CPU build's extra clang flags change its speed, never a result."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import orjson
import pytest

from cudagen_data import execution as execute
from cudagen_data.generators import categories, generate
from cudagen_data.warp_boundary import modules
from cudagen_data.warp_boundary.runtime import CPU_PCH_ENV


def _results(specs):
    runs = execute.execute_specs(specs)
    assert all(r.ok for r in runs), [(r.reason, r.detail) for r in runs if not r.ok]
    return [(r.outputs, r.input_grads) for r in runs]


def test_extra_flags_reach_the_build_and_change_no_result(monkeypatch):
    import warp._src.build as build

    specs = [generate(c, 11, 0) for c in categories()]  # one kernel of each category
    seen = []
    real = build.build_cpu

    def spy(*args, **kwargs):
        seen.append(kwargs.get("extra_flags", ""))
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "build_cpu", spy)
    with_flags = _results(specs)
    assert seen and all(modules.CPU_CHECK_FLAGS in flags for flags in seen)

    monkeypatch.setattr(modules, "CPU_CHECK_FLAGS", "")
    seen.clear()
    without = _results(specs)
    assert seen and all("-disable-llvm-verifier" not in flags for flags in seen)
    for spec, (out_a, grad_a), (out_b, grad_b) in zip(specs, with_flags, without, strict=False):
        for a, b in ((out_a, out_b), (grad_a, grad_b)):
            assert a.keys() == b.keys()
            for name in a:
                assert np.array_equal(a[name], b[name]), (spec.category, name)


@pytest.mark.slow
def test_optimization_level_0_records_what_warps_default_level_records(monkeypatch):
    """The CPU modules are built at -O0 (execution.CPU_OPT_LEVEL: ~4x faster builds than
    Warp's default -O2): a row's test vectors and its gradient check must be what an -O2
    build gives, byte for byte (same kernels of every category)."""
    from cudagen_data import gradcheck

    assert execute.CPU_OPT_LEVEL == 0 and gradcheck.CPU_OPT_LEVEL == 0
    specs = [generate(c, 23, 0) for c in categories()]

    def record():
        runs = execute.execute_specs(specs)
        assert all(r.ok for r in runs), [(r.reason, r.detail) for r in runs if not r.ok]
        checks = gradcheck.check_gradients(specs, runs)
        return [execute.test_vectors(s, r).to_json() for s, r in zip(specs, runs, strict=False)], [
            c.to_row() for c in checks
        ]

    at_0 = record()
    monkeypatch.setattr(execute, "CPU_OPT_LEVEL", 2)
    monkeypatch.setattr(gradcheck, "CPU_OPT_LEVEL", 2)
    at_2 = record()
    assert at_0[0] == at_2[0]  # inputs, outputs, output and input gradients: the same bytes
    assert at_0[1] == at_2[1]  # status, precision, probes, worst relative error
    assert sum(c["status"] == "verified" for c in at_0[1]) >= len(specs) // 2  # the check ran, on most


_SHARED_PCH_SCRIPT = """
import json, os
import warp._src.build as build

seen = []
real = build.build_cpu


def spy(*args, pch_dir=None, **kwargs):  # runs inside the boundary's wrapper: after it copied what was shared
    seen.append(sorted(f for f in os.listdir(pch_dir) if f.endswith(".pch")) if pch_dir else None)
    return real(*args, pch_dir=pch_dir, **kwargs)


build.build_cpu = spy
from cudagen_data import execution
from cudagen_data.generators import generate

specs = [generate(c, 11, 0) for c in ("arithmetic", "vector")]
runs = execution.execute_specs(specs)
vectors = [execution.test_vectors(s, r).to_json() for s, r in zip(specs, runs)]
print(json.dumps({"first_build_found": seen[0], "vectors": vectors}))
"""


def test_a_shared_precompiled_header_is_left_by_one_process_and_used_by_the_next(tmp_path):
    """CUDAGEN_CPU_PCH_DIR: the first process leaves clang's header of Warp's builtin.h in the
    folder, the next starts its first build from it; the outputs are those of a process that
    shares nothing, and so are those of a process handed a damaged header or a folder it
    cannot make."""

    def run(shared):
        env = {k: v for k, v in os.environ.items() if k != CPU_PCH_ENV}
        if shared is not None:
            env[CPU_PCH_ENV] = str(shared)
        res = subprocess.run([sys.executable, "-c", _SHARED_PCH_SCRIPT], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        return orjson.loads(res.stdout.splitlines()[-1])

    shared = tmp_path / "pch"
    first = run(shared)
    left = sorted(p.name for p in shared.rglob("*.pch"))
    assert first["first_build_found"] == [] and len(left) == 1  # built it, then left it
    second = run(shared)
    assert second["first_build_found"] == left  # started from it
    alone = run(None)
    assert alone["first_build_found"] == []
    damaged_folder = next(shared.glob("warp-*"))
    for header in damaged_folder.glob("*.pch"):  # a header that is not one: Warp builds without it, same result
        header.write_bytes(b"not a precompiled header" * 1000)
    damaged = run(shared)
    assert damaged["first_build_found"] == left
    (tmp_path / "a-file").write_text("")
    unusable = run(tmp_path / "a-file" / "pch")  # a folder that cannot be made: the process shares nothing
    assert unusable["first_build_found"] == []
    assert first["vectors"] == second["vectors"] == alone["vectors"] == unusable["vectors"] == damaged["vectors"]
