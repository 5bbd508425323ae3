"""Several sizes per row and inputs that matter (#23): each check, and the wrong kernels it must catch.

- sizes.py: a plain kernel is recorded at its size, twice it and a ragged size (more
  threads than a 256-block, not a multiple of it); a tile kernel at other tile counts;
- the out-of-bounds guard: a kernel whose index outgrows an array that did not grow
  with the launch loses that size (never a crash, never a wrong set in the row);
- inputs_matter.py: an input-blind kernel is rejected; unused arguments are named;
- a backward whose input gradients are zero everywhere is rejected (vacuous_backward);
- the test_vectors format: a single-set row reads as one set, several sets round-trip.
"""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from cudagen_data.contracts.reject import RejectReason
from cudagen_data.contracts.test_vectors import TestVectors
from cudagen_data.execution import SizedRun, execute_specs, size_note
from cudagen_data.execution import test_vectors as vectors_of
from cudagen_data.generators import generate
from cudagen_data.sizes import BLOCK, FIXED_SIZE, LAUNCH_STEP, fixed_size_reason, other_sizes, resized, size_plan
from cudagen_data.spec import ArgSpec, KernelSpec
from cudagen_data.stages import GradientCheckStage, Item


def _arr(name, dtype, shape, role="in", domain=(-1.0, 1.0)):
    return ArgSpec(name, "array", dtype, shape, role, domain)


def _spec(source: str, args, launch, block_dim=None, index=0) -> KernelSpec:
    name = source.split("@wp.kernel\ndef ", 1)[1].split("(", 1)[0]
    return KernelSpec("arithmetic", name, source, tuple(args), launch, "basic", block_dim=block_dim, index=index)


SCALE = _spec(
    """import warp as wp

@wp.kernel
def scale(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
    i = wp.tid()
    y[i] = a * wp.sin(x[i]) + x[(i + 1) % x.shape[0]]
""",
    [
        _arr("x", "float32", (24,)),
        _arr("y", "float32", (24,), "out"),
        ArgSpec("a", "scalar", "float32", (), "in", (0.5, 2.0)),
    ],
    (24,),
)

TILE = _spec(
    """import warp as wp

@wp.kernel
def row_sums(x: wp.array2d(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    t = wp.tile_load(x[i], shape=8)
    wp.tile_store(y, wp.tile_sum(t), offset=i)
""",
    [_arr("x", "float32", (4, 8)), _arr("y", "float32", (4,), "out")],
    (4,),
    block_dim=32,
)

# The memorized table: the only write is a bit per thread id; u and gain reach nothing.
BLIND = _spec(
    """import warp as wp

@wp.kernel
def correct_totals(u: wp.array(dtype=float), gain: float, counter: wp.array(dtype=int)):
    gid = wp.tid()
    ratio = u[gid] * gain
    wp.atomic_or(counter, 0, 1 << (gid % 16))
""",
    [
        _arr("u", "float32", (32,)),
        ArgSpec("gain", "scalar", "float32", (), "in", (0.5, 2.0)),
        _arr("counter", "int32", (1,), "out"),
    ],
    (32,),
)

# Uses x; takes w and bias but never lets them reach y.
UNUSED = _spec(
    """import warp as wp

@wp.kernel
def partly(x: wp.array(dtype=float), w: wp.array(dtype=float), bias: float, y: wp.array(dtype=float)):
    i = wp.tid()
    dead = w[i] * 2.0
    y[i] = x[i] * x[i] + 1.0
""",
    [
        _arr("x", "float32", (16,)),
        _arr("w", "float32", (16,)),
        ArgSpec("bias", "scalar", "float32", (), "in", (0.0, 1.0)),
        _arr("y", "float32", (16,), "out"),
    ],
    (16,),
)

# Writes y[2 i]: y has 2 * 8 - 1 elements, an extent the resize cannot tie to the launch.
STRIDED = _spec(
    """import warp as wp

@wp.kernel
def spread(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[2 * i] = x[i] * 3.0
""",
    [_arr("x", "float32", (8,)), _arr("y", "float32", (15,), "out")],
    (8,),
)

# A flat launch over a 2-D grid (the row count is implied by the launch, the width fixed):
# no array grows with the launch, so the other sizes write rows past the end, and what they
# write is NaN read from past the end of ``phi`` (a NaN tail alone would not show it).
FLAT = _spec(
    """import warp as wp

NY = wp.constant(16)

@wp.kernel
def flat_grid(phi: wp.array2d(dtype=float), dst: wp.array2d(dtype=float)):
    gid = wp.tid()
    z = gid // NY
    x0 = gid % NY
    dst[z, x0] = 2.0 * phi[z, x0]
""",
    [_arr("phi", "float32", (12, 16)), _arr("dst", "float32", (12, 16), "out")],
    (192,),
)

# Writes y[14 - 2 i] with the literal left at the generated size (Warp wraps an index in
# [-n, 0) to the end once, as Python does): the other sizes index below -n,
# i.e. before the array (on an unguarded heap: the allocator's bookkeeping).
REVERSED = _spec(
    """import warp as wp

@wp.kernel
def reverse_fixed(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[14 - 2 * i] = x[i] * 3.0
""",
    [_arr("x", "float32", (15,)), _arr("y", "float32", (15,), "out")],
    (15,),
)

# A float input that reaches the output only through floor: its gradient is zero everywhere.
FLOORED = _spec(
    """import warp as wp

@wp.kernel
def floored(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = wp.floor(x[i] * 4.0) + float(i)
""",
    [_arr("x", "float32", (16,), domain=(-3.0, 3.0)), _arr("y", "float32", (16,), "out")],
    (16,),
)


def _run(specs, probe_inputs=False):
    more = [[SizedRun(label, sized, guard=guard) for label, sized, guard, _ in other_sizes(s)] for s in specs]
    return execute_specs(specs, reference_checks={}, more=more, probe_inputs=probe_inputs)


def test_plain_kernel_is_recorded_at_three_sizes():
    (run,) = _run([SCALE])
    assert run.ok and size_note(run, fixed_size_reason(SCALE)) == ""
    vectors = TestVectors.from_json(vectors_of(SCALE, run).to_json())
    sets = vectors.sets()
    assert [s.size for s in sets] == ["recorded", "large", "ragged"]
    assert [s.launch_dim for s in sets[:2]] == [[24], [48]]
    ragged = sets[2].launch_dim[0]
    assert ragged > BLOCK and ragged % BLOCK != 0
    for s in sets:  # each set carries its own argument shapes, matching its launch
        n = s.launch_dim[0]
        assert s.shapes() == {"x": (n,), "y": (n,)}
        assert len(s.decoded()["outputs"]["y"]) == n
    # different sizes draw different inputs: not the recorded ones padded
    assert sets[1].inputs["x"]["data"][:24] != sets[0].inputs["x"]["data"]


def test_tile_kernel_gets_other_tile_counts():
    assert not fixed_size_reason(TILE)
    (run,) = _run([TILE])
    assert run.ok, run.detail
    sets = vectors_of(TILE, run).sets()
    assert [(s.launch_dim, s.block_dim, s.shapes()["x"]) for s in sets] == [
        ([4], 32, (4, 8)),
        ([8], 32, (8, 8)),
        ([5], 32, (5, 8)),
    ]


def test_a_size_that_runs_out_of_bounds_is_left_out():
    (run,) = _run([STRIDED])
    assert run.ok  # the generated size is fine
    reasons = {label: r.reason for label, _, r in run.more_sizes}
    assert reasons == {"large": RejectReason.OUT_OF_BOUNDS, "ragged": RejectReason.OUT_OF_BOUNDS}
    assert vectors_of(STRIDED, run).more_sizes == []
    note = size_note(run, "")
    assert "large: out_of_bounds" in note and "ragged: out_of_bounds" in note


def test_writes_of_values_read_past_the_end_are_caught():
    (run,) = _run([FLAT])
    assert run.ok
    assert {label: r.reason for label, _, r in run.more_sizes} == {
        "large": RejectReason.OUT_OF_BOUNDS,
        "ragged": RejectReason.OUT_OF_BOUNDS,
    }


def test_a_size_that_writes_before_the_start_is_left_out():
    (run,) = _run([REVERSED])
    assert run.ok  # the generated size is fine
    assert {label: (r.reason, r.detail) for label, _, r in run.more_sizes} == {
        "large": (RejectReason.OUT_OF_BOUNDS, "writes before the start of 'y' at this size"),
        "ragged": (RejectReason.OUT_OF_BOUNDS, "writes before the start of 'y' at this size"),
    }


def test_resize_grows_extents_tied_to_the_launch():
    big = resized(SCALE, 100)
    assert big.launch_dim == (100,) and [a.shape for a in big.args] == [(100,), (100,), ()]
    assert big.python_source == SCALE.python_source


def test_input_blind_kernel_is_rejected():
    (run,) = _run([BLIND], probe_inputs=True)
    assert not run.ok and run.reason == RejectReason.INPUT_BLIND


def test_unused_arguments_are_named_and_used_ones_are_not():
    runs = _run([UNUSED, SCALE], probe_inputs=True)
    assert runs[0].ok and runs[0].unused_args == ["w", "bias"]
    assert runs[1].ok and runs[1].unused_args == []


def test_vacuous_backward_is_rejected_and_a_real_one_is_not():
    specs = [FLOORED, SCALE]
    runs = _run(specs)
    items = []
    for k, (spec, run) in enumerate(zip(specs, runs, strict=True)):
        assert run.ok
        items.append(Item(slot=k, category=spec.category, index=k, spec=spec, vectors=vectors_of(spec, run)))
    assert items[0].vectors.input_grads_all_zero() and not items[1].vectors.input_grads_all_zero()
    kept, rejects = GradientCheckStage()(items)
    assert [r.reason for r in rejects] == [RejectReason.VACUOUS_BACKWARD]
    assert [k.spec.kernel_name for k in kept] == ["scale"]
    assert kept[0].gradient_check.status == "verified"


def test_single_set_rows_read_as_one_set_and_sets_round_trip():
    (run,) = execute_specs([SCALE], reference_checks={})
    one = vectors_of(SCALE, run)
    text = one.to_json()
    assert "more_sizes" not in orjson.loads(text)  # a one-set row keeps the original format
    assert [s.size for s in TestVectors.from_json(text).sets()] == ["recorded"]
    (run3,) = _run([SCALE])
    three = vectors_of(SCALE, run3)
    again = TestVectors.from_json(three.to_json())
    assert again == three and again.to_json() == three.to_json()
    top = orjson.loads(three.to_json())
    assert list(top) == ["launch_dim", "block_dim", "inputs", "outputs", "output_grads", "input_grads", "more_sizes"]
    assert list(top["more_sizes"][0])[:3] == ["size", "launch_dim", "block_dim"]


@pytest.mark.parametrize("label", ["large", "ragged"])
def test_sized_spec_rebuilds_the_spec_of_a_set(label):
    (run,) = _run([SCALE])
    vectors = vectors_of(SCALE, run)
    (vset,) = [s for s in vectors.more_sizes if s.size == label]
    sized = vset.sized_spec(SCALE)
    (want,) = [s for lbl, s, _, _ in other_sizes(SCALE) if lbl == label]
    assert sized.launch_dim == want.launch_dim and [a.shape for a in sized.args] == [a.shape for a in want.args]


# ----------------------------------------------------------------------------- fixed sizes, stencils


def _stencils(want, n=400):
    """Generated stencil specs (seed 0) for which ``want(spec)`` holds."""
    return [s for s in (generate("stencil", 0, i) for i in range(n)) if want(s)]


def _run_checked(specs):
    more = [
        [
            SizedRun(lbl, sized, guard=guard, alternatives=tuple(alts))
            for lbl, sized, guard, alts in other_sizes(s, True)
        ]
        for s in specs
    ]
    return execute_specs(specs, more=more)


def _recorded(runs):
    """What each run records at its other sizes: kept or not, the reason, the test vectors."""
    return [
        [
            (label, r.ok, r.reason, r.detail, vectors_of(s, r).to_json() if r.ok else None)
            for label, s, r in run.more_sizes
        ]
        for run in runs
    ]


def test_a_kernel_whose_constant_fixes_its_extent_says_so():
    """A stencil whose grid extent along the launch's first axis is a wp.constant: the
    generator declares it, no other size is tried, the row's size_note says why (the stats
    count it as fixed-size); and the declaration is true: run at the other sizes anyway
    (every guess at its arguments), the kernel fails each one."""
    spec = _stencils(lambda s: s.params.get(FIXED_SIZE))[0]
    reason = fixed_size_reason(spec)
    assert "wp.constant" in reason and f"{reason.split()[-3]} = wp.constant(" in spec.python_source
    assert other_sizes(spec, True) == []
    (run,) = _run_checked([spec])
    assert run.ok and size_note(run, reason) == f"fixed size: {reason}"
    undeclared = dataclasses.replace(spec, params={k: v for k, v in spec.params.items() if k != FIXED_SIZE})
    assert not fixed_size_reason(undeclared)
    (forced,) = _run_checked([undeclared])
    assert forced.ok and [r.ok for _, _, r in forced.more_sizes] == [False, False]


def test_a_linear_launch_over_a_flat_grid_grows_by_whole_rows():
    spec = _stencils(lambda s: LAUNCH_STEP in s.params and not s.params.get(FIXED_SIZE))[0]
    step = spec.params[LAUNCH_STEP]
    plan = dict(size_plan(spec))
    assert all(n % step == 0 for n in plan.values())
    assert plan["ragged"] > BLOCK and plan["ragged"] % BLOCK != 0
    (run,) = _run_checked([spec])
    assert run.ok and size_note(run, "") == "", size_note(run, "")


def test_stencils_take_their_extents_from_the_arrays_and_run_at_every_size():
    specs = _stencils(lambda s: not s.params.get(FIXED_SIZE), n=12)
    runs = _run_checked(specs)
    notes = [(s.index, size_note(r, "")) for s, r in zip(specs, runs, strict=True) if not r.ok or size_note(r, "")]
    assert not notes


def _nan_bits_by_formula(dtype, buffer: int, count: int):
    """The guard's NaN sentinel as first written (one uint64 pass): the chunked fill must match it bit for bit."""
    import numpy as np

    base, mask = {2: (0x7E00, 0x1FF), 4: (0x7FC00000, 0x3FFFFF), 8: (0x7FF8000000000000, 0x7FFFFFFFFFFFF)}[
        np.dtype(dtype).itemsize
    ]
    payload = (np.arange(count, dtype=np.uint64) * 2 + 1 + np.uint64(buffer * 7919)) & np.uint64(mask)
    return (np.uint64(base) | payload).astype({2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint8", "bool"])
def test_guard_cells_hold_their_sentinel_and_any_changed_cell_is_a_breach(dtype):
    """Guards' sentinels, written a chunk at a time, are the formula's bits (NaN payloads by
    buffer and position, past several chunks and past a float16 payload's wrap; heads their
    own numbers), constants for the other kinds; one changed cell anywhere in a tail or a
    head, of any buffer, is a breach named after its array and side."""
    import numpy as np

    from cudagen_data import execution

    n = 3 * execution._CHUNK // 8 + 5  # factor 9: tails and heads span several chunks
    value = (np.arange(n) % 7).astype(dtype)
    guards = execution.Guards(9.0)
    bufs = [guards._buffer("a", value, None if value.dtype.kind == "f" else np.ones(1, dtype)[0])]
    bufs.append(guards._buffer("a.grad", np.zeros_like(value), 0))
    assert guards.breach() is None
    for k, (_, buf, m, _) in enumerate(guards.tails):
        assert m == n and np.array_equal(buf[:n], value if k == 0 else np.zeros_like(value))
    if value.dtype.kind == "f":
        (_, buf, _, _), (_, head, _) = guards.tails[0], guards.heads[0]
        assert np.array_equal(buf[n:].view(np.dtype(f"u{buf.itemsize}")), _nan_bits_by_formula(dtype, 0, buf.size - n))
        assert np.array_equal(head.view(np.dtype(f"u{buf.itemsize}")), _nan_bits_by_formula(dtype, 4099, head.size))
        assert np.all(np.isnan(buf[n:])) and np.all(np.isnan(head))
    for k, (name, buf, m, _) in enumerate(guards.tails):
        for where in (m, m + execution._CHUNK + 3, buf.size - 1):
            keep = buf[where].copy()
            bits = buf[where : where + 1].view(np.dtype(f"u{buf.itemsize}"))
            bits ^= 1  # one bit of one cell: a float NaN stays NaN, only its payload changes
            assert guards.breach(" here") == (RejectReason.OUT_OF_BOUNDS, f"writes past the end of {name!r} here")
            buf[where] = keep
            assert guards.breach() is None
        _, head, _ = guards.heads[k]
        for where in (0, head.size // 2, head.size - 1):
            keep = head[where].copy()
            head[where : where + 1].view(np.dtype(f"u{head.itemsize}"))[...] ^= 1
            assert guards.breach() == (RejectReason.OUT_OF_BOUNDS, f"writes before the start of {name!r} at this size")
            head[where] = keep
    assert guards.breach() is None


# Each thread loops over n, which equals the launch (a size passed by value, grown with it),
# and writes hist[t * n + e]: hist grows as 4 rows per thread, so at a grown size the last
# threads write past its end.  The size search's costliest kind of failed guess, small.
HIST = _spec(
    """import warp as wp

@wp.kernel
def spread_rows(x: wp.array(dtype=float), hist: wp.array(dtype=float), n: int):
    t = wp.tid()
    for e in range(n):
        hist[t * n + e] = x[t] * float(e + 1)
""",
    [
        _arr("x", "float32", (4,)),
        _arr("hist", "float32", (16,), "out"),
        ArgSpec("n", "scalar", "int32", (), "in", (4.0, 4.0)),
    ],
    (4,),
)


def test_work_growth_follows_the_loop_bounds_a_guess_grows():
    """sizes.work_growth: the launch's growth times that of each argument a loop bound reads."""
    from cudagen_data.sizes import work_growth

    (_, large, _, _), (_, ragged, _, _) = other_sizes(HIST)
    assert [a.domain for a in ragged.args if a.name == "n"] == [(257.0, 257.0)]
    assert work_growth(HIST, large) == 2 * 2 and work_growth(HIST, ragged) == (257 / 4) ** 2
    (_, scale_large, _, _), _ = other_sizes(SCALE)  # no loop: the launch alone
    assert work_growth(SCALE, scale_large) == 2
    # a recorded size keeps its size arguments in its inputs, not in its spec's domain
    recorded = dataclasses.replace(ragged, args=HIST.args)
    assert work_growth(HIST, recorded) == 257 / 4
    assert work_growth(HIST, recorded, {"n": 4}, {"n": 257}) == (257 / 4) ** 2


def test_a_costly_guess_is_judged_on_an_optimized_build_with_the_same_verdict(monkeypatch):
    """A guessed size predicted to be costly is first run on the kernel built at
    JUDGE_OPT_LEVEL; a failure there is its verdict, a pass is run again on the row's own
    build.  Judging every guess so (threshold 0) must record exactly what running them all
    on the row's own build records: each size kept or left out, each reason with its
    numbers, each recorded output and gradient; and every kept run must come from the
    row's build.  The wrong judges this catches: one that keeps its own runs, one that
    drops the guard, one used for sizes a row recorded (validate's re-runs)."""
    from cudagen_data import execution

    # a failure under the guard; a first guess that fails and an alternative kept; failures
    # whose reason carries the outputs' numbers (the two builds must agree to the bit)
    specs = [HIST, generate("attention", 1, 3), generate("softmax", 1, 4)]
    calls = []
    real = execution.run_kernel

    def spy(spec, kernel, *args, **kwargs):
        run = real(spec, kernel, *args, **kwargs)
        calls.append((kernel.module.options["optimization_level"], id(spec), run.ok))
        if calls[-1][0] == execution.JUDGE_OPT_LEVEL:  # the judge's build: forward only, run so
            backward = kwargs.get("backward", args[6] if len(args) > 6 else True)  # run_kernel's 9th argument
            forward_only.append((kernel.options.get("enable_backward", True), backward))
        return run

    forward_only = []

    monkeypatch.setattr(execution, "run_kernel", spy)

    monkeypatch.setattr(execution, "COSTLY_GUESS_SECONDS", float("inf"))
    plain = _run_checked(specs)
    assert {level for level, _, _ in calls} == {execution.CPU_OPT_LEVEL}
    calls.clear()
    monkeypatch.setattr(execution, "COSTLY_GUESS_SECONDS", 0.0)
    judged = _run_checked(specs)
    assert _recorded(judged) == _recorded(plain)
    assert any(not ok for level, _, ok in calls if level == execution.JUDGE_OPT_LEVEL)  # a failure judged there
    assert forward_only and set(forward_only) == {(False, False)}
    for run in judged:
        for _, spec, r in run.more_sizes:
            if r.ok:  # the last run of a kept size was on the row's own build
                assert [lvl for lvl, s, _ in calls if s == id(spec)][-1] == execution.CPU_OPT_LEVEL
    # HIST's guesses failed on the optimized build, under its guard, and never ran on the row's
    assert [r.reason for _, _, r in judged[0].more_sizes] == [RejectReason.OUT_OF_BOUNDS] * 2
    assert [(lvl, ok) for lvl, s, ok in calls if s in {id(g) for _, g, _ in judged[0].more_sizes}] == [
        (execution.JUDGE_OPT_LEVEL, False)
    ] * 2
    calls.clear()
    kept = [SizedRun(label, s, given=(r.inputs, r.output_grads)) for label, s, r in plain[1].more_sizes]
    assert len(kept) == 2 and all(r.ok for _, _, r in plain[1].more_sizes)
    execute_specs(specs[1:2], more=[kept])  # recorded sizes (validate): never judged, whatever the threshold
    assert {level for level, _, _ in calls} == {execution.CPU_OPT_LEVEL}


def test_a_guess_differing_from_a_failed_one_in_params_alone_is_not_run_again(monkeypatch):
    """sizes.alternatives offers up to 32 guesses a size, many of them differing only in an
    integer that the category's NumPy reference reads (``params``: the launch, its inputs
    and its guard are the same).  Such a guess fails again without running where the earlier
    one failed before the reference check (gemm 393's 24 writes past the end) or after it
    passed; where the earlier one failed the reference check, the check is asked again with
    the new ``params`` (reduction 23 and scan 273 keep such a guess: a memo skipping them
    would leave their sizes out; attention 3 keeps a guess with the launch of one that failed
    but other shapes: a memo keyed on the launch alone would skip it).  With the memo and
    without it, every size records the same; with it, fewer runs (32 against 74)."""
    from cudagen_data import execution

    specs = [
        generate("reduction", 1, 23),
        generate("scan", 1, 273),
        generate("gemm", 1, 393),
        generate("attention", 1, 3),
    ]
    runs = []
    real = execution.run_kernel

    def counted(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(execution, "run_kernel", counted)

    with_memo = _recorded(_run_checked(specs))
    n_with = len(runs)
    runs.clear()
    monkeypatch.setattr(execution, "_fails_as_before", lambda *args: False)
    without = _recorded(_run_checked(specs))
    assert with_memo == without
    # a guess kept after one that failed the reference with the same launch: reduction's and scan's
    assert all(ok for _, ok, *_ in with_memo[0] + with_memo[1])
    assert len(runs) - n_with >= 2 * 20, (n_with, len(runs))  # gemm 393's ragged guesses, at least


def test_the_reference_checks_of_failed_guesses_are_told_apart():
    """bench_produce's breakdown counts the NumPy reference checks of the runs a row keeps as
    row work the floor leaves out; a failed guess's check is inside the size search's time
    (execute.run.failed_size) and is counted apart (REFERENCE_SPAN + ".failed_size"), so
    that neither is counted twice.  reduction 23 has guesses that fail the reference check."""
    from cudagen_data import execution, spans

    spans.take()
    runs = _run_checked([generate("reduction", 1, 23)])
    _, cpu, counts = spans.take()
    reference, in_failed = execution.REFERENCE_SPAN, execution.REFERENCE_SPAN + ".failed_size"
    kept_sizes = 1 + sum(r.ok for _, _, r in runs[0].more_sizes)
    assert runs[0].ok and counts[reference] > kept_sizes  # the kept runs' checks, and failed guesses' too
    assert 0 < cpu[in_failed] < cpu[reference] and cpu[in_failed] <= cpu["execute.run.failed_size"]


_SCAN_GUESS_RUN = """
from cudagen_data import execution
from cudagen_data.generators import generate, ml
from cudagen_data.sizes import other_sizes
from cudagen_data.warp_boundary import batch_module, build_module

spec = generate("scan", 1, 56)
label, _, guard, alternatives = next(o for o in other_sizes(spec, checked=True) if o[0] == "ragged")
with batch_module([(spec.python_source, spec.kernel_name)], optimization_level=execution.CPU_OPT_LEVEL) as (m, k, _):
    assert build_module(m, "cpu") is None
    guess = alternatives[0]
    check = ml.REFERENCE_CHECKS.get(spec.category)
    run = execution.run_kernel(guess, k[0], "cpu", check, execution.draw_inputs(guess, label), None, label, guard)
    print("VERDICT", run.ok, run.reason.value if run.reason else "", run.detail)
"""


def test_a_guess_reading_an_input_it_left_at_its_old_size_reads_sentinels_not_other_memory():
    """A guess that grows a loop bound with the launch, and the array the loop writes, but
    leaves an input the same loop reads at its old size (sizes.alternatives) reads that input
    as far as it writes the other: every guarded buffer reaches as far as the largest one
    (execution.guard_reach).  Sized by its own extent, the 64-element input of scan's
    serial_exclusive_scan was read to element 4,227,135, 16 MiB past its buffer: a segfault
    or not by the process's memory layout (a worker lost in 3 of 9 runs of 2,000 pairs on 16
    workers; 18 of 20 fresh processes here).  Now the guess fails as before, in any process."""
    import subprocess
    import sys

    import numpy as np

    from cudagen_data import execution

    spec = generate("scan", 1, 56)
    assert spec.kernel_name == "serial_exclusive_scan"
    label, _, guard, alternatives = next(o for o in other_sizes(spec, checked=True) if o[0] == "ragged")
    guess = alternatives[0]
    arrays = {a.name: a for a in guess.args if a.kind == "array"}
    assert {n: a.shape for n, a in arrays.items()} == {"result": (16448,), "x": (64,)}
    assert guess.launch_dim == (257,) and guard == 514
    last_read = 256 * 16448 + 16447  # x[lane * length + j]: the last thread's last step
    guards = execution.Guards(guard, reach=execution.guard_reach(guess, guard))
    guards.array(arrays["x"], np.zeros(64, dtype=np.float32), "cpu", True)
    (_, x_buffer, _, _), (_, x_grad, _, _) = guards.tails
    assert x_buffer.size > last_read and x_grad.size > last_read

    run = subprocess.run([sys.executable, "-c", _SCAN_GUESS_RUN], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "VERDICT False out_of_bounds writes past the end of 'result' at this size" in run.stdout
