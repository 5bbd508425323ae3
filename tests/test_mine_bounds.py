"""Mined kernels that step outside their arrays (cudagen_data/mine/bounds.py), in this
process on the kernels of tests/mine_tree_kinds/bounds.py: each check, the wrong kernel it
must catch, and that the kernel escapes without it.  (Mining those kernels end to end,
twice: tests/test_mine_kinds.py.)"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from cudagen_data import execution as execute
from cudagen_data.mine import argspecs, bounds, values
from cudagen_data.mine.run import _reason_class
from cudagen_data.spec import KernelSpec

pytestmark = pytest.mark.slow  # builds the tree file's Warp module on the CPU (~2 s)

TREE_FILE = Path(__file__).parent / "mine_tree_kinds" / "bounds.py"


@pytest.fixture(scope="module")
def tree():
    spec = importlib.util.spec_from_file_location("mine_tree_kinds_bounds", TREE_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spec(kernel) -> KernelSpec:
    args, why = argspecs.arg_specs(kernel)
    assert args, why
    rank = argspecs.launch_rank(inspect.getsource(kernel.func))
    source = inspect.getsource(kernel.func)
    return KernelSpec("real", kernel.key, source, tuple(args), (argspecs.EXTENT,) * rank, "basic", seed=5, index=0)


def _verdict(tree, name: str) -> str:
    """What worker.launch_taped decides for kernel ``name`` on its drawn inputs before it
    records anything: bounds.outside, then the recorded run's guard cells."""
    kernel = getattr(tree, name)
    spec = _spec(kernel)
    inputs = execute.draw_inputs(spec)
    why = bounds.outside(spec, kernel, inputs)
    return why or _guarded_breach(spec, kernel, inputs)


def _guarded_breach(spec: KernelSpec, kernel, inputs: dict) -> str:
    """The recorded run's check alone: a forward in guard cells, their bytes compared."""
    held = bounds.guards("cpu")
    made = {a.name: values.warp_value(a, inputs[a.name], "cpu", False, held) for a in spec.args}
    execute.launch(spec, kernel, values.launch_values(kernel, spec.args, {n: m[0] for n, m in made.items()}), "cpu")
    bad = held.breach("")
    return bad[1] if bad is not None else ""


EXPECTED = {
    "reads_past_end": "reads past the end of 'x'",
    "writes_past_end": "writes past the end of 'y'",
    "reads_before_start": "reads before the start of 'x'",
    "reads_index_past_end": "reads past the end of 'idx'",
    "staggered_3d": "reads past the end of 'e'",
    "csr_row_sums": "reads past the end of 'offsets'",
    "branches_past_end": "reads past the end of 'x'",
    "csr_match_count": "reads past the end of 'offsets'",
    "divides_by_before_start": "reads before the start of 'n'",
    "stays_inside": "",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_kernel_gets_its_verdict(tree, name):
    assert _verdict(tree, name) == EXPECTED[name]


# Values for every guard cell, by dtype kind (not Guards' own int max - 7: as a loop bound
# it would run this process wild): NaN and floats of both signs, small integers.
FILLS = ({"f": float("nan"), "i": 1}, {"f": 0.5, "i": 7}, {"f": 2.0, "i": 8}, {"f": -0.5, "i": 4})


@pytest.mark.parametrize("name", ["csr_match_count", "branches_past_end"])
def test_reads_that_change_no_output_for_any_fill_need_the_fence(tree, name):
    """What guard fills compared would miss: csr_match_count reads offsets[8] as a loop
    bound whose body counts nothing for values 1..8; branches_past_end compares x[8] with
    -0.25, which a NaN and positive values fail.  Their outputs are the same for every
    fill tried here; the fenced run faults on the read itself."""
    kernel = getattr(tree, name)
    spec = _spec(kernel)
    inputs = execute.draw_inputs(spec)
    outs = set()
    for fill in [f for f in FILLS if not (name == "branches_past_end" and f["f"] < 0)]:
        held = execute.Guards(1.0)
        made = {a.name: values.warp_value(a, inputs[a.name], "cpu", False, held) for a in spec.args}
        for _, buf, n, _ in held.tails:
            buf[n:] = fill[buf.dtype.kind]
        for _, head, _ in held.heads:
            head[:] = fill[head.dtype.kind]
        execute.launch(spec, kernel, values.launch_values(kernel, spec.args, {k: m[0] for k, m in made.items()}), "cpu")
        outs.add(made["y"][1].numpy().tobytes())
    assert len(outs) == 1  # no fill shows the read
    assert bounds.faults(spec, kernel, inputs, "tail", None, 0)


def test_the_fence_is_exact_on_its_side(tree):
    """offsets[8] is the first element past the end: the tail fence of 'offsets' alone
    faults; its head fence, and the other arrays' fences, do not."""
    kernel = tree.csr_match_count
    spec = _spec(kernel)
    inputs = execute.draw_inputs(spec)
    none, read_only = 0, bounds._PROT_READ
    assert bounds.faults(spec, kernel, inputs, "tail", "offsets", none)
    assert not bounds.faults(spec, kernel, inputs, "head", "offsets", none)
    assert not bounds.faults(spec, kernel, inputs, "tail", "cols", none)
    assert not bounds.faults(spec, kernel, inputs, "tail", "", none)  # nothing fenced: zeros around every array
    assert not bounds.faults(spec, kernel, inputs, "tail", "offsets", read_only)  # the read passes: it is no write
    writer = tree.writes_past_end
    wspec = _spec(writer)
    assert bounds.faults(wspec, writer, execute.draw_inputs(wspec), "tail", "y", read_only)
    inside = tree.stays_inside
    ispec = _spec(inside)  # x[i + 1] for i < 7: the last element, never past it
    assert not any(bounds.faults(ispec, inside, execute.draw_inputs(ispec), s, None, none) for s in bounds.SIDES)


def test_without_the_fences_only_the_guard_cells_catch_a_write(tree, monkeypatch):
    """The recorded run's Guards still catch a write the fences would have caught (one
    past the end lands in the cells), and only that: the reads go unseen.  (Kernels that
    read an integer past the end are left out: Guards' integer cells would run them wild.)"""
    monkeypatch.setattr(bounds, "faults", lambda *a, **k: False)
    names = [n for n in EXPECTED if n not in ("csr_row_sums", "csr_match_count", "reads_index_past_end")]
    got = {name: _verdict(tree, name) for name in names}
    assert got == {name: "writes past the end of 'y'" if name == "writes_past_end" else "" for name in names}


def test_a_fenced_run_that_cannot_be_made_is_an_error(tree, monkeypatch):
    """Not a pass: a child that could not fence its arrays says nothing about the kernel."""

    def broken(*args, **kwargs):
        raise OSError("mprotect failed")

    monkeypatch.setattr(bounds.Fences, "array", broken)
    kernel = tree.stays_inside
    with pytest.raises(RuntimeError, match="could not be fenced"):
        bounds.faults(_spec(kernel), kernel, execute.draw_inputs(_spec(kernel)), "tail", None, 0)


def test_a_gpu_run_is_not_guarded():
    """The buffers are host memory; the GPU re-runs vectors that passed the fences here."""
    assert bounds.guards("cuda:0") is None and isinstance(bounds.guards("cpu"), execute.Guards)


def test_reason_classes():
    assert _reason_class("reads past the end of 'e_x', 'e_y'") == "reads outside its arrays"
    assert _reason_class("reads before the start of 'x'") == "reads outside its arrays"
    assert _reason_class("reads or writes outside its arrays (only with every array fenced)") == (
        "reads outside its arrays"
    )
    assert _reason_class("writes past the end of 'y'") == "writes outside its arrays"
    assert _reason_class("writes before the start of 'y.grad' in the backward") == "writes outside its arrays"
