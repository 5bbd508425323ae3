"""Generators stay inside what Warp differentiates: the static prediction behind redraws
and forward-only declarations (the gradient check is the safety net, tested apart)."""

from __future__ import annotations

import dataclasses

import pytest
from gradcheck_kernels import BAD, GOOD, KINKS, arr, scalar

from cudagen_data.execution import forward_only_reason
from cudagen_data.extract import extract_kernels
from cudagen_data.generators import categories, generate
from cudagen_data.generators.differentiable import adjoint_hazard, declare_forward_only, forward_only_cause

FORWARD_ONLY = {"tile_scan", "frac", "atomic_min_inout"}  # not differentiable by Warp at all
# Left to the gradient check: often used where no gradient flows through them (the max
# shift of a softmax), and then the backward is right.
CHECKER_DECIDES = {"tile_max", "tile_reduce"}


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_known_bad_construct_is_predicted(name):
    spec = BAD[name]
    if name in CHECKER_DECIDES:
        assert forward_only_cause(spec) is None and adjoint_hazard(spec) is None
    elif name in FORWARD_ONLY:
        assert forward_only_cause(spec)
    else:
        assert forward_only_cause(spec) is None and adjoint_hazard(spec)


@pytest.mark.parametrize("name", sorted(GOOD) + sorted(KINKS))
def test_correct_kernels_are_not_flagged(name):
    spec = {**GOOD, **KINKS}[name]
    assert forward_only_cause(spec) is None and adjoint_hazard(spec) is None


def test_selection_and_integer_loops_are_not_hazards():
    src = """import warp as wp

@wp.kernel
def pick(x: wp.array2d(dtype=float), n: int, idx: wp.array(dtype=int), y: wp.array(dtype=float)):
    i = wp.tid()
    best = float(-1.0e30)
    best_j = int(-1)
    for j in range(n):
        if x[i, j] > best:
            best = x[i, j]
            best_j = j
    idx[i] = best_j
    y[i] = wp.sin(x[i, best_j])
"""
    args = (arr("x", (4, 8)), scalar("n", "int32", 8), arr("idx", (4,), "out", dtype="int32"), arr("y", (4,), "out"))
    spec = dataclasses.replace(GOOD["static_loop"], python_source=src, kernel_name="pick", args=args)
    assert adjoint_hazard(spec) is None


def test_declared_forward_only_kernels_have_no_backward():
    spec = declare_forward_only(GOOD["separate_output"], "a reason")
    assert forward_only_reason(spec.python_source) and "forward_only" in spec.features
    (kernel,) = extract_kernels(spec.python_source)
    assert kernel.forward and kernel.backward == ""


def test_generated_kernels_declare_what_they_are():
    """Across categories: a kernel with no float input or output array is declared
    forward-only; the rest have a backward."""
    for cat in categories():
        for i in range(3):
            spec = generate(cat, 3, i)
            assert (
                bool(forward_only_cause(spec)) == bool(forward_only_reason(spec.python_source))
                or "while" in spec.python_source
            )


def test_tile_matmul_accumulator_is_a_carried_value():
    head = """import warp as wp

TM = wp.constant(4)

@wp.kernel
def mm(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float), y: wp.array2d(dtype=float)):
    bi, bj = wp.tid()
    acc = wp.tile_zeros(shape=(TM, TM), dtype=float)
    for kk in range(8 // TM):
        wp.tile_matmul(
            wp.tile_load(a, shape=(TM, TM), offset=(bi * TM, kk * TM)),
            wp.tile_load(b, shape=(TM, TM), offset=(kk * TM, bj * TM)),
            acc,
        )
"""
    args = (arr("a", (8, 8)), arr("b", (8, 8)), arr("y", (8, 8), "out"))
    linear = head + "    wp.tile_store(y, acc, offset=(bi * TM, bj * TM))\n"
    nonlinear = head + "    acc = wp.tile_map(wp.sin, acc)\n    wp.tile_store(y, acc, offset=(bi * TM, bj * TM))\n"
    spec = dataclasses.replace(GOOD["static_loop"], kernel_name="mm", args=args, block_dim=16)
    assert adjoint_hazard(dataclasses.replace(spec, python_source=linear)) is None
    assert "acc" in adjoint_hazard(dataclasses.replace(spec, python_source=nonlinear))


def test_values_that_only_decide_comparisons_carry_no_gradient():
    """A running best of an argmax copied into a threshold: selection only, not a hazard;
    the same value feeding an output is one."""
    body = """import warp as wp

@wp.kernel
def sel(x: wp.array2d(dtype=float), n: int, idx: wp.array2d(dtype=int), y: wp.array(dtype=float)):
    i = wp.tid()
    bound = float(1.0e30)
    for r in range(idx.shape[1]):
        best = float(-1.0e30)
        bi = int(-1)
        for e in range(n):
            v = x[i, e]
            if v < bound and v > best:
                best = v
                bi = e
        idx[i, r] = bi
        bound = best
    y[i] = wp.sin(x[i, idx[i, 0]])
"""
    args = (arr("x", (4, 8)), scalar("n", "int32", 8), arr("idx", (4, 2), "out", dtype="int32"), arr("y", (4,), "out"))
    spec = dataclasses.replace(GOOD["static_loop"], python_source=body, kernel_name="sel", args=args)
    assert adjoint_hazard(spec) is None
    leaky = body.replace("y[i] = wp.sin(x[i, idx[i, 0]])", "y[i] = wp.sin(bound)")
    assert adjoint_hazard(dataclasses.replace(spec, python_source=leaky))
