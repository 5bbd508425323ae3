"""The gradient check: each construct Warp 1.19 differentiates wrongly is caught, on the
float64 twin as in float32; correct kernels and kinks pass; forward-only is recognised."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck_kernels import BAD, GOOD, KINKS

from cudagen_data.execution import execute_specs
from cudagen_data.gradcheck import FLOAT32, _float32_plan, check_gradients, forward_only_reason, suspect_constructs
from cudagen_data.numerics.twin import twin_spec, widen_all

CONSTRUCT = {
    "dynamic_loop": "dynamic for loop",
    "thread_bound_loop": "dynamic for loop",
    "tile_scan": "tile_scan_inclusive",
    "tile_reduce": "tile_reduce",
    "tile_max": "tile_max",
    "frac": "wp.frac",
    "component_write": "component write",
    "atomic_min_inout": "atomic_min into in/out",
    "read_overwrite": "reads output array 'c'",
}


def _checked(group: dict):
    names = list(group)
    specs = [group[n] for n in names]
    runs = execute_specs(specs, reference_checks={})
    assert all(r.ok for r in runs), [(n, r.reason, r.detail) for n, r in zip(names, runs, strict=False) if not r.ok]
    return dict(zip(names, zip(specs, runs, check_gradients(specs, runs), strict=False), strict=False))


@pytest.fixture(scope="module")
def bad():
    return _checked(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_known_bad_construct_is_caught_and_named(bad, name):
    _, _, check = bad[name]
    assert check.status == "mismatch", check
    assert check.worst_rel_error > 0.1
    assert CONSTRUCT[name] in check.construct


def test_known_bad_constructs_are_checked_in_float64_where_warp_has_a_twin(bad):
    precisions = {n: c.precision for n, (_, _, c) in bad.items()}
    assert precisions.pop("tile_scan") == "float32"  # Warp has no float64 tile scan
    assert set(precisions.values()) == {"float64"}


@pytest.mark.parametrize("name", sorted(set(BAD) - {"tile_scan"}))
def test_the_twin_adjoint_is_the_shipped_adjoint(bad, name):
    """Why checking the float64 twin checks the float32 backward: Warp emits the same
    adjoint code for both, so the twin's tape gradient is the float32 tape gradient (the
    one the row records and cuda_backward computes), wrong in the same way."""
    spec, run, _ = bad[name]
    twin = twin_spec(spec)
    (run64,) = execute_specs(
        [twin], reference_checks={}, given=[(widen_all(run.inputs, spec.args), widen_all(run.output_grads, spec.args))]
    )
    assert run64.ok
    for arg, g32 in run.input_grads.items():
        np.testing.assert_allclose(run64.input_grads[arg], g32, rtol=1e-4, atol=1e-5 * (1 + np.abs(g32).max()))


def test_bad_constructs_are_caught_in_float32_too(bad):
    """The float32 fallback (no twin) catches them as well, with its looser tolerance."""
    names = ["dynamic_loop", "frac", "atomic_min_inout", "read_overwrite"]
    specs = [bad[n][0] for n in names]
    runs = [bad[n][1] for n in names]
    from cudagen_data import gradcheck

    original = gradcheck._plan
    try:
        gradcheck._plan = lambda pos, spec, run: _float32_plan(pos, spec, run, "forced")
        checks = check_gradients(specs, runs)
    finally:
        gradcheck._plan = original
    assert [c.status for c in checks] == ["mismatch"] * len(names)
    assert {c.precision for c in checks} == {FLOAT32.name}


def test_a_wrong_gradient_at_a_few_elements_is_caught_by_the_random_direction(bad, monkeypatch):
    """split_cells's adjoint is wrong at one column in six: the element probes (its
    largest tape gradient and two random elements) miss it; the random direction over
    all of x does not."""
    from cudagen_data import gradcheck

    spec, run, with_directions = bad["thread_bound_loop"]
    monkeypatch.setattr(gradcheck, "DIRECTIONS", False)
    (elements_only,) = check_gradients([spec], [run])
    assert elements_only.status == "verified" and elements_only.probes == 3, elements_only
    assert with_directions.status == "mismatch" and with_directions.probes == 4, with_directions
    assert with_directions.worst_rel_error > 0.1


def test_correct_kernels_pass():
    for name, (_, _, check) in _checked(GOOD).items():
        assert check.status == "verified", (name, check)
        assert check.probes >= 3 and check.worst_rel_error < 1e-6, (name, check)


def test_kinks_are_never_called_wrong():
    checks = {n: c for n, (_, _, c) in _checked(KINKS).items()}
    assert all(c.status in ("verified", "unverified") for c in checks.values()), checks
    assert checks["abs_at_zero"].status == "unverified" and checks["abs_at_zero"].non_smooth > 0
    assert checks["relu"].non_smooth > 0  # probes at the kink were seen and re-drawn
    assert checks["relu"].status == "verified"


def test_forward_only_sources():
    body = "@wp.kernel\ndef k(x: wp.array(dtype=float)):\n    i = wp.tid()\n"
    assert forward_only_reason("import warp as wp\nwp.set_module_options({'enable_backward': False})\n" + body)
    assert forward_only_reason("import warp as wp\n" + body.replace("@wp.kernel", "@wp.kernel(enable_backward=False)"))
    assert forward_only_reason("import warp as wp\n" + body + "    while x[i] > 0.0:\n        x[i] = x[i] - 1.0\n")
    assert forward_only_reason("import warp as wp\nwp.set_module_options({'enable_backward': True})\n" + body) is None


def test_forward_only_rows_are_not_probed():
    spec = GOOD["separate_output"]
    src = spec.python_source.replace(
        "import warp as wp\n", 'import warp as wp\nwp.set_module_options({"enable_backward": False})\n'
    )
    import dataclasses

    fwd = dataclasses.replace(spec, python_source=src)
    (run,) = execute_specs([fwd], reference_checks={})
    assert run.ok and run.input_grads == {} and run.output_grads == {}
    (check,) = check_gradients([fwd], [run])
    assert check.status == "forward_only" and "enable_backward" in check.reason


def test_suspects_ignore_clean_kernels():
    assert suspect_constructs(GOOD["static_loop"]) == ""
    assert suspect_constructs(GOOD["fresh_vector"]) == ""
    assert suspect_constructs(GOOD["separate_output"]) == ""
