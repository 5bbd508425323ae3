"""The CPU build's extra clang flags change its speed, never a result."""

from __future__ import annotations

import numpy as np

from cudagen_data.generators import categories, generate
from cudagen_data import execution as execute
from cudagen_data.warp_boundary import modules


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
    for spec, (out_a, grad_a), (out_b, grad_b) in zip(specs, with_flags, without):
        for a, b in ((out_a, out_b), (grad_a, grad_b)):
            assert a.keys() == b.keys()
            for name in a:
                assert np.array_equal(a[name], b[name]), (spec.category, name)
