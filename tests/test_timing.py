"""`cudagen eval --timing` on the CPU: the statistics (medians, speedup, fast_p, geometric
mean), the launch order, the timing size, and the whole timing loop on Warp's CPU backend
(a wall clock in place of CUDA events) with kernels that must be caught: a candidate that
does less after its first timed launch, one that is wrong from the start, one that is
slower.  The GPU checks are tests/gpu/test_timing_gpu.py."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import orjson
import pytest

from cudagen_data import warp_boundary
from cudagen_data.contracts.row import Row
from cudagen_data.eval import (
    EvalInputError,
    EvalReport,
    Score,
    Scorer,
    StageResult,
    evaluate,
    format_report,
    gpu_lock,
    timing,
)
from cudagen_data.eval import pool as eval_pool
from cudagen_data.eval import run as run_module
from cudagen_data.eval.pool import Job, run_inline
from cudagen_data.eval.reference import compute_reference, draw_fresh
from cudagen_data.eval.report import Result
from cudagen_data.eval.speed import (
    CANDIDATE,
    MIN_FLUSH_BYTES,
    REFERENCE,
    UNKNOWN_L2_FLUSH_BYTES,
    KernelTiming,
    TimingResult,
    fast_p,
    flush_bytes,
    geometric_mean,
    partial_at_scale,
    scale_factor,
    scaled_spec,
    schedule,
    slowed_forward,
    timing_summary,
)
from cudagen_data.eval.timing import TimingMismatch, time_candidate
from cudagen_data.execution import warp_dtype
from cudagen_data.extract import extract_kernels, frontend
from cudagen_data.extract.resources import measure_unit
from cudagen_data.numerics.tolerance import check_array
from cudagen_data.spec import DTYPES, ArgSpec, KernelSpec

sys.path.insert(0, str(Path(__file__).parent))
import kernel_rows  # noqa: E402

# ------------------------------------------------------------------ pure


def test_schedule_interleaves_abba_after_warmup():
    s = schedule(warmup=2, timed=4)
    assert len(s) == 12
    assert [t for _, t in s] == [False] * 4 + [True] * 8
    kernels = [k for k, _ in s]
    assert kernels == [CANDIDATE, REFERENCE, REFERENCE, CANDIDATE] * 3
    timed = [k for k, t in s if t]
    assert timed.count(CANDIDATE) == timed.count(REFERENCE) == 4
    # neither kernel always goes first among the timed rounds
    firsts = [timed[i] for i in range(0, len(timed), 2)]
    assert set(firsts) == {CANDIDATE, REFERENCE}
    assert sum(1 for k, t in schedule() if t and k == CANDIDATE) >= 20


def test_kernel_timing_medians_and_speedup():
    t = KernelTiming(candidate_ms=[1.0, 9.0, 2.0, 2.0, 3.0], reference_ms=[4.0, 4.0, 100.0, 3.0, 5.0])
    assert t.candidate_median == 2.0 and t.reference_median == 4.0
    assert t.speedup == 2.0  # one slow outlier on either side changes nothing
    d = t.to_dict()
    assert d["candidate_ms"]["median"] == 2.0 and d["candidate_ms"]["launches"] == 5
    assert d["candidate_ms"]["q1"] <= 2.0 <= d["candidate_ms"]["q3"]


def test_result_speedup_sums_forward_and_backward():
    fwd = KernelTiming([1.0], [2.0])
    bwd = KernelTiming([3.0], [3.0])
    assert TimingResult("s", (1,), fwd).speedup == 2.0
    assert TimingResult("s", (1,), fwd, bwd).speedup == pytest.approx(5.0 / 4.0)


def test_fast_p_counts_only_correct_candidates_faster_than_p():
    speedups = [None, 0.5, 1.0, 1.2, 1.6, 2.5, None, 3.0]
    assert fast_p(speedups, 0.0) == 6 / 8  # fast_0: correct (and timed)
    assert fast_p(speedups, 1.0) == 4 / 8  # strictly faster
    assert fast_p(speedups, 1.5) == 3 / 8
    assert fast_p(speedups, 2.0) == 2 / 8
    assert fast_p([], 1.0) is None
    s = timing_summary(speedups)
    assert (s["fast_0"], s["fast_1"], s["fast_1.5"], s["fast_2"]) == (6 / 8, 4 / 8, 3 / 8, 2 / 8)
    assert s["timed"] == 6 and s["candidates"] == 8
    assert s["geomean_speedup"] == pytest.approx(math.prod([0.5, 1.0, 1.2, 1.6, 2.5, 3.0]) ** (1 / 6))


def test_geometric_mean():
    assert geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    assert geometric_mean([4.0, 1.0, 2.0]) == pytest.approx(2.0)
    assert geometric_mean([]) is None
    assert geometric_mean([None, 3.0]) == pytest.approx(3.0)


def _spec(launch, shapes, tiled=False):
    args = tuple(
        ArgSpec(name, "array", "float32", shape, "out" if name == "y" else "in") for name, shape in shapes.items()
    )
    return KernelSpec("c", "k", "", args, launch, "basic", block_dim=64 if tiled else None)


def test_scale_factor_and_scaled_spec():
    spec = _spec((64,), {"x": (64,), "table": (8,), "y": (64, 3)})
    f = scale_factor(spec, target_threads=1 << 20)
    assert f == (1 << 20) // 64
    big = scaled_spec(spec, f)
    assert big.launch_dim == (1 << 20,)
    shapes = {a.name: a.shape for a in big.args}
    assert shapes == {"x": (1 << 20,), "table": (8,), "y": (1 << 20, 3)}  # the table keeps its size
    # memory cap: 3 arrays of (64 * f, 3) float32 at most 1 MB
    capped = scale_factor(_spec((64,), {"x": (64, 3), "y": (64, 3)}), target_threads=1 << 20, max_bytes=1 << 20)
    assert capped == 512  # 2 * 64 * 512 * 3 * 4 bytes = 786432 <= 1 MB; 1024 would be 1.5 MB
    assert scale_factor(_spec((64,), {"x": (64,)}, tiled=True)) == 1  # tile kernels keep their size
    assert scale_factor(_spec((4,), {"w": (8,)})) == 1  # no array as long as the launch
    assert scaled_spec(spec, 1) is spec
    assert scale_factor(_spec((1 << 23,), {"x": (1 << 23,)})) == 1  # already big


def test_gpu_lock_is_a_no_op_off_the_gpu():
    with gpu_lock.gpu_lock("cpu", exclusive=True):
        pass


def test_gpu_lock_shared_holders_coexist_and_exclusive_waits(tmp_path, monkeypatch):
    import multiprocessing

    monkeypatch.setattr(gpu_lock, "LOCK_DIR", str(tmp_path))
    ctx = multiprocessing.get_context("fork")
    with gpu_lock.gpu_lock("cuda:0", exclusive=False):
        shared = ctx.Process(target=_hold, args=(str(tmp_path), False))
        shared.start()
        shared.join(20)
        assert shared.exitcode == 0  # a second shared holder got in at once
        exclusive = ctx.Process(target=_hold, args=(str(tmp_path), True))
        exclusive.start()
        exclusive.join(1.5)
        assert exclusive.is_alive()  # waits while a shared holder is in
    exclusive.join(20)
    assert exclusive.exitcode == 0


def test_gpu_lock_nested_in_one_process_is_a_no_op_and_never_upgrades(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_lock, "LOCK_DIR", str(tmp_path))
    with gpu_lock.gpu_lock("cuda:0", exclusive=True), gpu_lock.gpu_lock("cuda:0", exclusive=False):
        pass  # a second acquisition in this process would wait for itself at the turnstile
    with gpu_lock.gpu_lock("cuda:0", exclusive=False):
        with pytest.raises(RuntimeError, match="exclusive GPU lock asked while this process holds it shared"):
            with gpu_lock.gpu_lock("cuda:0", exclusive=True):
                pass
    assert not gpu_lock._held  # released on the way out


def _hold(lock_dir: str, exclusive: bool) -> None:
    gpu_lock.LOCK_DIR = lock_dir
    with gpu_lock.gpu_lock("cuda:0", exclusive=exclusive):
        pass


def test_the_run_stage_takes_the_shared_lock_around_each_launch_and_its_sync(monkeypatch):
    taken = []

    @contextlib.contextmanager
    def recording_lock(device, exclusive):
        taken.append(("enter", exclusive))
        yield
        taken.append(("exit", exclusive))

    calls = []
    wp = warp_boundary.warp()
    real_sync = wp.synchronize_device
    monkeypatch.setattr(run_module, "gpu_lock", recording_lock)
    monkeypatch.setattr(wp, "synchronize_device", lambda d=None: (calls.append(len(taken)), real_sync(d))[1])
    row = kernel_rows.make_row_objects(["chain"])[0]
    ref = compute_reference(row, 11, 1)
    s = ref.sets[0]
    with warp_boundary.loaded_source(row.python_source) as loaded:
        got = run_module.run_guarded(s.spec, loaded.module.chain, "cpu", s.inputs, s.output_grads, backward=True)
    assert not got.problems and "x.grad" in got.values
    # forward launch + sync, then backward + sync: each inside its own shared hold
    assert taken == [("enter", False), ("exit", False), ("enter", False), ("exit", False)]
    assert calls == [1, 3]  # each synchronize ran while its hold was taken


# ------------------------------------------------------------------ the loop, on Warp's CPU backend

N = 256

REFERENCE_SRC = """
import warp as wp

@wp.kernel
def k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = wp.sin(x[i]) * 2.0 + x[i]
"""

# the same, 200 times over (what --timing's slowed-candidate check uses, in CUDA)
SLOWED_SRC = """
import warp as wp

@wp.kernel
def k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)
    for r in range(200):
        acc += wp.sin(x[i] + float(r))
    y[i] = wp.sin(x[i]) * 2.0 + x[i] + acc * 0.0
"""

# right at the run stage's sizes; at a size over 4096 threads (the timing's) the upper
# half of the threads return at once: timed launches that do half the work
# (speed.partial_at_scale is the same edit of a CUDA forward)
PARTIAL_AT_SCALE_SRC = """
import warp as wp

@wp.kernel
def k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    n = y.shape[0]
    if n > 4096 and i >= n // 2:
        return
    y[i] = wp.sin(x[i]) * 2.0 + x[i]
"""

# right on its first launch; then the last thread leaves a mark in its input, and a later
# launch that saw it would do nothing: the restore of every array before every launch
# erases the mark, so it gains nothing
MARKS_ITS_INPUT_SRC = """
import warp as wp

@wp.kernel
def k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    n = x.shape[0]
    if x[n - 1] < 1000.0:
        y[i] = wp.sin(x[i]) * 2.0 + x[i]
    if i == n - 1:
        x[i] = x[i] + 10000.0
"""

# the reference's work on the first half only (what a launch that "does less" computes)
HALF_SRC = PARTIAL_AT_SCALE_SRC.replace("n > 4096 and ", "")

WRONG_SRC = REFERENCE_SRC.replace("* 2.0", "* 2.5")

BACKWARD_WRONG_SRC = """
import warp as wp

@wp.func
def f(v: float):
    return wp.sin(v) * 2.0 + v

@wp.func_grad(f)
def adj_f(v: float, adj_ret: float):
    wp.adjoint[v] += adj_ret * 3.0

@wp.kernel
def k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = f(x[i])
"""

SPEC = KernelSpec(
    "c",
    "k",
    REFERENCE_SRC,
    (ArgSpec("x", "array", "float32", (N,), "in", (-2.0, 2.0)), ArgSpec("y", "array", "float32", (N,), "out")),
    (N,),
    "basic",
)
SMALL = timing.Method(warmup=1, timed=5, target_threads=1 << 13, flush_bytes=1 << 16)


@contextlib.contextmanager
def _kernels(*sources):
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(warp_boundary.loaded_source(s)).module.k for s in sources]


def _time(candidate_src, backward=False, method=SMALL):
    with _kernels(REFERENCE_SRC, candidate_src) as (ref, cand):
        return time_candidate(SPEC, ref, cand, "cpu", 7, "row", backward=backward, method=method)


def test_own_kernel_against_itself_passes_and_is_timed():
    result = _time(REFERENCE_SRC, backward=True)
    assert len(result.forward.candidate_ms) == len(result.forward.reference_ms) == 5
    assert result.backward is not None and len(result.backward.candidate_ms) == 5
    assert result.size.startswith("scaled x")  # 256 threads scale up
    assert result.launch_dim[0] == N * scale_factor(SPEC, 1 << 13) == 1 << 13
    assert result.speedup > 0


def test_a_slowed_candidate_is_measured_slower_and_a_faster_one_faster():
    result = _time(SLOWED_SRC)
    assert result.forward.speedup < 0.5, result.to_dict()
    # the other way round: the times are the right kernel's (a swap would show here)
    with _kernels(SLOWED_SRC, REFERENCE_SRC) as (ref, cand):
        spec = dataclasses.replace(SPEC, python_source=SLOWED_SRC)
        faster = time_candidate(spec, ref, cand, "cpu", 7, "row", backward=False, method=SMALL)
    assert faster.forward.speedup > 2.0, faster.to_dict()


def test_a_candidate_that_does_less_at_the_timing_size_fails():
    # the run stage's sizes (256 threads here) never see the skipped half
    with _kernels(PARTIAL_AT_SCALE_SRC) as (k,):
        run = run_module.run_guarded(SPEC, k, "cpu", *draw_fresh(SPEC, np.random.default_rng(0)), backward=False)
    assert not run.problems
    with pytest.raises(TimingMismatch, match=r"timed forward launch 1 of 5: output 'y' differs: \d+ of 8192 values"):
        _time(PARTIAL_AT_SCALE_SRC)


class _LessAfterFirst:
    """A recorded launch whose first launch is the full kernel and every later one does
    half the work: what a CUDA candidate with a ``__device__`` launch counter does
    (tests/gpu/test_timing_gpu.py runs that one); Python kernels keep no state between
    launches, so the test swaps the launch instead."""

    def __init__(self, full, less):
        self.full, self.less, self.launches = full, less, 0

    def launch(self):
        (self.full if self.launches == 0 else self.less).launch()
        self.launches += 1


def test_a_candidate_that_does_less_after_its_first_launch_fails():
    for warmup, first_wrong in ((0, 2), (1, 1)):  # with no warm-up its first timed launch is its right one
        method = dataclasses.replace(SMALL, warmup=warmup)
        with _kernels(REFERENCE_SRC, HALF_SRC) as (ref, half):
            bench = timing.prepare_row(SPEC, ref, "cpu", 7, "row", method=method)
            lazy = _LessAfterFirst(bench.launches(ref)[0], bench.launches(half)[0])
            bench.launches = lambda kernel, lazy=lazy: (lazy, None)
            with pytest.raises(TimingMismatch, match=rf"timed forward launch {first_wrong} of 5: output 'y' differs"):
                timing.time_against(bench, half, backward=False, method=method)


def test_a_candidate_that_marks_its_input_gains_nothing():
    # every launch starts from restored memory (inputs too): each of its launches does the work
    result = _time(MARKS_ITS_INPUT_SRC)
    assert len(result.forward.candidate_ms) == 5


def test_a_wrong_candidate_fails_timing():
    with pytest.raises(TimingMismatch, match="output 'y' differs"):
        _time(WRONG_SRC)


def test_a_wrong_backward_fails_timing_and_a_forward_only_timing_ignores_it():
    with pytest.raises(TimingMismatch, match=r"timed backward launch 1 of 5: input gradient 'x' differs"):
        _time(BACKWARD_WRONG_SRC, backward=True)
    assert _time(BACKWARD_WRONG_SRC, backward=False).backward is None


# one output of each kind the check meets: float32, float16, float64, int32, a float vector
COPY_SRC = """
import warp as wp

@wp.kernel
def k(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float16), c: wp.array(dtype=wp.float64),
      d: wp.array(dtype=wp.int32), e: wp.array(dtype=wp.vec3),
      ya: wp.array(dtype=wp.float32), yb: wp.array(dtype=wp.float16), yc: wp.array(dtype=wp.float64),
      yd: wp.array(dtype=wp.int32), ye: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    ya[i] = a[i]
    yb[i] = b[i]
    yc[i] = c[i]
    yd[i] = d[i]
    ye[i] = e[i]
"""


def test_the_device_check_agrees_with_the_tolerance_model():
    # what the check kernels count (on Warp's CPU backend) against numerics/tolerance.check_array
    # on the same values: results on either side of the tolerance, a NaN result, and
    # reference values that are not finite (check_array's scale is then NaN or infinite)
    wp = warp_boundary.warp()
    n = 64
    dtypes = {"a": "float32", "b": "float16", "c": "float64", "d": "int32", "e": "vec3"}
    args = [ArgSpec(k, "array", t, (n,), "in") for k, t in dtypes.items()]
    args += [ArgSpec("y" + k, "array", t, (n,), "out") for k, t in dtypes.items()]
    spec = KernelSpec("c", "k", COPY_SRC, tuple(args), (n,), "basic")
    rng = np.random.default_rng(3)

    def inputs_with(special: list[float]) -> dict:
        inputs = {}
        for a in args:
            np_dtype, comp = DTYPES[a.dtype]
            shape = (n, *comp)
            if a.role == "out":
                inputs[a.name] = np.zeros(shape, np_dtype)
            elif np_dtype.startswith("int"):
                inputs[a.name] = rng.integers(-50, 50, shape).astype(np_dtype)
            else:
                v = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3, shape)).astype(np_dtype)
                v.reshape(-1)[: len(special)] = special
                inputs[a.name] = v
        return inputs

    verdicts = []
    with _kernels(COPY_SRC) as (k,):
        for special, native64 in (([], False), ([], True), ([np.inf, -np.inf], False), ([np.nan], False)):
            inputs = inputs_with(special)
            bench = timing.RowBench(spec, "s", k, "cpu", inputs, {}, native64, timed=1)
            for j, check in enumerate(bench.checks[False]):
                arg = _arg(spec, check.key)
                want = inputs[arg.name[1:]]
                for trial in range(8):
                    got = want.copy()
                    flat = got.reshape(-1)
                    i = int(rng.integers(len(special), flat.size))
                    if want.dtype.kind != "f":
                        flat[i] += trial % 2
                    elif trial < 5:  # about 0.5, 0.98, 1.02, 3 tolerances away (or exact)
                        finite = want[np.isfinite(want)]
                        rel, abs_ = (1e-9, 1e-9) if native64 and want.dtype == np.float64 else (1e-2, 1e-3)
                        tol = rel * abs(float(flat[i])) + abs_ * float(np.max(np.abs(finite)))
                        factor = (0.5, 0.98, 1.02, 3.0, 0.0)[trial]
                        flat[i] = float(flat[i]) + rng.choice([-1, 1]) * factor * tol
                    elif trial == 5:
                        flat[i] = np.nan  # a NaN where the reference's value is finite
                    elif trial == 6:
                        flat[i] = np.inf
                    else:
                        flat[: len(special)] = 7.0  # finite where the reference's is not
                    wp.copy(bench.work[check.key], wp.array(got, dtype=warp_dtype(arg.dtype), device="cpu"))
                    bench.counters[False].zero_()
                    check.enqueue(j)
                    device_ok = int(bench.counters[False].numpy()[j]) == 0
                    with np.errstate(invalid="ignore"):
                        model = check_array(check.key, "output", got, want, native64=native64)
                    assert device_ok == model.ok, (check.key, special, native64, trial, model.describe())
                    assert check.tolerance == model.tolerance
                    verdicts.append(model.ok)
    assert len(verdicts) == 4 * 5 * 8
    assert 0.2 < sum(verdicts) / len(verdicts) < 0.8  # both verdicts well represented


OOB_SRC = """
import warp as wp

@wp.kernel
def k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i // 4] = x[i]
"""


def test_a_kernel_whose_size_is_not_its_arguments_is_timed_at_the_recorded_size():
    # y has 16 elements whatever the launch: scaled up, it would be written past its end
    spec = KernelSpec(
        "c",
        "k",
        OOB_SRC,
        (ArgSpec("x", "array", "float32", (64,), "in"), ArgSpec("y", "array", "float32", (16,), "out")),
        (64,),
        "basic",
    )
    assert scale_factor(spec, 1 << 12) == 64  # x is as long as the launch
    with _kernels(OOB_SRC) as (k,):
        big, size, inputs, _ = timing.timing_size(spec, k, "cpu", 0, "row", 1 << 12)
    assert big is spec and size == "recorded size (launch dim 64)", size
    assert inputs["x"].shape == (64,)  # the timing inputs are drawn for the size timed
    # read past the end: w has 65 elements whatever the launch
    reads = OOB_SRC.replace("y[i // 4] = x[i]", "y[i] = x[i] + w[i]").replace(
        "y: wp", "w: wp.array(dtype=float), y: wp"
    )
    spec = KernelSpec(
        "c",
        "k",
        reads,
        (
            ArgSpec("x", "array", "float32", (64,), "in"),
            ArgSpec("w", "array", "float32", (65,), "in"),
            ArgSpec("y", "array", "float32", (64,), "out"),
        ),
        (64,),
        "basic",
    )
    with _kernels(reads) as (k,):
        big, size, _, _ = timing.timing_size(spec, k, "cpu", 0, "row", 1 << 12)
    assert big is spec, size


def test_timing_inputs_are_fixed_by_the_seed_and_the_row():
    with _kernels(REFERENCE_SRC) as (k,):
        a = timing.timing_size(SPEC, k, "cpu", 7, "row", 1 << 12)
        b = timing.timing_size(SPEC, k, "cpu", 7, "row", 1 << 12)
        c = timing.timing_size(SPEC, k, "cpu", 8, "row", 1 << 12)
        d = timing.timing_size(SPEC, k, "cpu", 7, "other row", 1 << 12)
    assert a[1] == b[1] == "scaled x16 (launch dim 4096)"
    assert np.array_equal(a[2]["x"], b[2]["x"])
    assert not np.array_equal(a[2]["x"], c[2]["x"]) and not np.array_equal(a[2]["x"], d[2]["x"])


def test_flush_size_comes_from_the_l2():
    assert flush_bytes(50 << 20) == 100 << 20  # H100: twice its L2
    assert flush_bytes(4 << 20) == MIN_FLUSH_BYTES  # small L2: the floor keeps the GPU busy while Python enqueues
    assert flush_bytes(None) == UNKNOWN_L2_FLUSH_BYTES
    assert timing.l2_cache_bytes("cpu") is None


# ------------------------------------------------------------------ score, report, command


def _score(rid: str, ran: bool | None, speedup: float | None) -> Score:
    stages = [StageResult("structure", True), StageResult("compile", True), StageResult("run", ran)]
    timing_dict = None if speedup is None else {"speedup": speedup, "size": "scaled x2"}
    return Score(rid, stages, timing=timing_dict)


def test_score_speedup_only_for_a_candidate_that_passed():
    assert _score("a", True, 1.5).speedup == 1.5
    assert _score("a", False, 1.5).speedup is None  # a timing dict never makes a failed candidate fast
    assert _score("a", True, None).speedup is None
    assert _score("a", True, 2.0).to_dict()["speedup"] == 2.0


def test_report_gives_speedups_fast_p_and_geomean():
    scorer = {"device": "cuda:0", "front_end": "f", "full_compile": "g", "fresh_input_seed": 1, "timing": True}
    rep = EvalReport("ds", "test", scorer, {})
    for i, (ran, s, cat) in enumerate(
        [(True, 2.0, "a"), (True, 0.5, "a"), (False, None, "b"), (True, 1.6, "b"), (True, None, "b")]
    ):
        rep.results.append(Result(i + 1, f"r{i}", cat, "basic", _score(f"r{i}", ran, s)))
    tm = rep.totals()["all"]["timing"]
    assert (tm["fast_0"], tm["fast_1"], tm["fast_1.5"], tm["fast_2"]) == (3 / 5, 2 / 5, 2 / 5, 0.0)
    assert tm["geomean_speedup"] == pytest.approx((2.0 * 0.5 * 1.6) ** (1 / 3))
    assert rep.totals()["category"]["a"]["timing"]["fast_1"] == 0.5
    text = format_report(rep)
    assert "timing (3 of 5 candidates timed" in text and "fast_1 40.0%" in text and "fast_2 0.0%" in text
    results = orjson.loads(rep.to_json())["results"]
    assert [r["speedup"] for r in results] == [2.0, 0.5, None, 1.6, None]
    # without --timing there are no timing figures
    rep.scorer = {**scorer, "timing": False}
    assert "timing" not in rep.totals()["all"] and "fast_" not in format_report(rep)


def test_timing_needs_a_gpu(tmp_path):
    preds = tmp_path / "p.jsonl"
    preds.write_text("")
    with pytest.raises(EvalInputError, match="--timing needs a GPU"):
        evaluate(preds, tmp_path, device="cpu", timing=True)
    with pytest.raises(ValueError, match="timing needs a GPU"):
        Scorer("cpu", timing=True)
    out = subprocess.run(
        [sys.executable, "-m", "cudagen_data.cli", "eval", str(preds), "--dataset", str(tmp_path), "--timing"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["error: --timing needs a GPU: --device cpu (use --device cuda:N)"]


def _arg(spec: KernelSpec, name: str) -> ArgSpec:
    return next(a for a in spec.args if a.name == name)


def test_slowed_forward_compiles_and_keeps_the_kernel():
    kernel = extract_kernels(REFERENCE_SRC)[0]
    slow = slowed_forward(kernel.forward, 64)
    assert slow.startswith(kernel.forward[: kernel.forward.index("{") + 1])
    assert slow.endswith(kernel.forward[kernel.forward.index("{") + 1 :])
    assert "cudagen_r < 64" in slow
    unit = "\n".join((kernel.preamble, kernel.device_functions, slow, kernel.backward))
    assert frontend.frontend_check(unit, arch=86) == (True, "")
    # and the loop survives the optimizer: more instructions than the original's PTX
    fast = measure_unit(kernel.translation_unit(), kernel.forward, "", arch=86)
    slowed = measure_unit(unit, slow, "", arch=86)
    assert slowed.ptx_bytes > fast.ptx_bytes


def test_partial_at_scale_compiles_and_keeps_the_kernel():
    kernel = extract_kernels(REFERENCE_SRC)[0]
    partial = partial_at_scale(kernel.forward, 4096)
    assert "dim.size > 4096" in partial and partial.endswith(kernel.forward[kernel.forward.index("{") + 1 :])
    unit = "\n".join((kernel.preamble, kernel.device_functions, partial, kernel.backward))
    assert frontend.frontend_check(unit, arch=86) == (True, "")


# ------------------------------------------------------------------ the run stage's glue, on the CPU


def _partial_at_scale_source(row: Row) -> str:
    """The row's Python kernel with speed.partial_at_scale's edit: half the work over 4096 threads."""
    skip = "    i = wp.tid()\n    if y.shape[0] > 4096 and i >= y.shape[0] // 2:\n        return\n"
    edited = row.python_source.replace("    i = wp.tid()\n", skip, 1)
    assert edited != row.python_source
    return edited


@pytest.fixture
def cpu_builds(monkeypatch):
    """The run stage's GPU build replaced by a kernel on Warp's CPU backend: the row's own,
    or the Python source the test maps the candidate's text to (the text is not compiled:
    the glue is under test, not the substitution); the timing scaled down to what the CPU
    runs in seconds."""
    sources: dict[str, str] = {}

    @contextlib.contextmanager
    def cpu_kernel(row, forward, backward, device, precompiled_header=False):
        with warp_boundary.loaded_source(sources.get(forward, row.python_source)) as loaded:
            yield getattr(loaded.module, row.kernel_name), "cpu (test)"

    monkeypatch.setattr(run_module, "candidate_kernel", cpu_kernel)
    monkeypatch.setattr(timing, "candidate_kernel", cpu_kernel)
    monkeypatch.setattr(eval_pool, "candidate_kernel", cpu_kernel)  # eval/pool.py imports it by name
    small = timing.Method(warmup=1, timed=3, target_threads=1 << 13, flush_bytes=1 << 12)
    monkeypatch.setattr(timing, "METHOD", small)
    return sources


def test_a_job_with_timing_times_its_passing_candidates(cpu_builds):
    row = kernel_rows.make_row_objects(["chain"])[0]
    fwd, bwd = row.cuda_forward, row.cuda_backward
    lazy = partial_at_scale(fwd, 4096)
    cpu_builds[lazy] = _partial_at_scale_source(row)
    job = Job(row, 11, [(0, fwd, None), (1, fwd, bwd), (2, lazy, None)], fresh_sets=1, timing=True)
    out = run_inline([job], "cpu")
    assert out[0].ok and out[1].ok, (out[0].detail, out[1].detail)
    assert out[0].timing["backward"] is None  # no backward brought: forward only
    assert out[1].timing["backward"]["candidate_ms"]["launches"] == 3
    assert out[0].timing["size"] == out[1].timing["size"]  # probed once for the row
    assert out[0].timing["size"].startswith("scaled x")  # from the largest recorded size
    ref = compute_reference(row, 11, 1)
    assert out[0].timing["launch_dim"][0] % timing.largest_size(ref).launch_dim[0] == 0
    # the row's setup (size, inputs, the reference's results) is paid once, by its first timed candidate
    assert "row_setup" in out[0].timing["cost_s"] and "row_setup" not in out[1].timing["cost_s"]
    assert {"prepare", "lock_wait", "locked", "after"} <= set(out[1].timing["cost_s"])
    # right at every size the run stage judges, half the work at the timing size: fails
    assert not out[2].ok and out[2].timing is None
    assert out[2].detail.startswith("timed launches: timed forward launch 1 of 3: output 'y' differs"), out[2].detail
    untimed = run_inline([Job(row, 11, [(0, fwd, None), (1, lazy, None)], fresh_sets=1)], "cpu")
    assert untimed[0].ok and untimed[0].timing is None
    assert untimed[1].ok  # without timing nothing runs it at a size where it does less


def test_a_row_whose_own_kernel_cannot_be_timed_is_said_so_once(cpu_builds, monkeypatch):
    row = kernel_rows.make_row_objects(["chain"])[0]
    fwd = row.cuda_forward
    calls = []

    def failing(*args, **kw):
        calls.append(1)
        raise MemoryError("out of device memory")

    monkeypatch.setattr(timing, "prepare_row", failing)
    out = run_inline([Job(row, 11, [(0, fwd, None), (1, fwd, None)], fresh_sets=1, timing=True)], "cpu")
    assert out[0].ok and out[1].ok  # the candidates keep their verdict
    note = "not timed: the row's own kernel at the timing size: MemoryError: out of device memory"
    assert note in out[0].notes and note in out[1].notes
    assert calls == [1]  # tried once per row


def test_a_row_whose_own_kernel_breaks_the_context_at_the_timing_size_changes_no_verdict(cpu_builds, monkeypatch):
    # On the H100 (bench_timing, 300 rows): one row's own kernel made an illegal access at
    # the scaled timing size, the context was lost, and the candidate being timed was failed
    # ("left the CUDA context unusable") although it had passed the run stage.  The row's
    # kernel at the timing size is not the candidate: it keeps its verdict, the worker is
    # restarted, and the job's other candidates are not timed again.
    row = kernel_rows.make_row_objects(["chain"])[0]
    fwd = row.cuda_forward
    broken = []
    real_prepare = timing.prepare_row

    def prepare_then_break(*args, **kw):
        bench = real_prepare(*args, **kw)
        broken.append(1)  # as a sticky CUDA error would after the launch
        return bench

    monkeypatch.setattr(timing, "prepare_row", prepare_then_break)
    monkeypatch.setattr(timing, "context_lost", lambda device: bool(broken))
    monkeypatch.setattr(eval_pool, "context_lost", lambda device: bool(broken))
    job = Job(row, 11, [(0, fwd, None), (1, fwd, None)], fresh_sets=1, timing=True)
    messages = list(eval_pool.process_job(job, "cpu", OrderedDict()))
    kinds = [k for k, _ in messages]
    assert kinds == ["reference", "untimed", "outcome", "context_lost"], kinds
    why = "not timed: the row's own kernel at the timing size left the CUDA context unusable"
    assert messages[1][1] == why
    first = messages[2][1]
    assert first.ok and first.timing is None and why in first.notes, first
    # the pool runs the other candidate again on a new worker, untimed, with the reason
    task = eval_pool._JobTask(job, type("P", (), {"results": {}})())
    for kind, payload in messages[:-1]:
        task.on_message(kind, payload)
    (again,) = task.on_lost(False, eval_pool.EXIT_CONTEXT_LOST)
    assert [c[0] for c in again.job_.candidates] == [1] and again.job_.untimed == why
    broken.clear()
    monkeypatch.setattr(timing, "prepare_row", lambda *a, **k: pytest.fail("timed again"))
    out = run_inline([again.job_], "cpu")
    assert out[1].ok and why in out[1].notes and out[1].timing is None
    # a candidate whose own launches break the context still fails (the row's kernel did not)
    monkeypatch.setattr(timing, "prepare_row", real_prepare)
    monkeypatch.setattr(eval_pool, "context_lost", lambda device: True)
    own = [m for k, m in eval_pool.process_job(Job(row, 11, [(0, fwd, None)], fresh_sets=1), "cpu", OrderedDict())
           if k == "outcome"]  # fmt: skip
    assert not own[0].ok and own[0].detail.endswith("left the CUDA context unusable")


def test_a_forward_only_row_is_timed_forward(cpu_builds):
    # its kernel has no backward to record (enable_backward=False): only its forward is timed
    row = kernel_rows.make_row_objects(["forward_only"])[0]
    assert not row.cuda_backward
    out = run_inline([Job(row, 11, [(0, row.cuda_forward, None)], fresh_sets=1, timing=True)], "cpu")
    assert out[0].ok and out[0].timing is not None, (out[0].detail, out[0].notes)
    assert out[0].timing["backward"] is None
