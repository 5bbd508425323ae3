"""`cudagen eval --timing` on the CPU: the statistics (medians, speedup, fast_p, geometric
mean), the launch order, the timing size, and the whole timing loop on Warp's CPU backend
(a wall clock in place of CUDA events) with kernels that must be caught: a candidate that
does less after its first timed launch, one that is wrong from the start, one that is
slower.  The GPU checks are tests/gpu/test_timing_gpu.py."""

from __future__ import annotations

import contextlib
import functools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from cudagen_data import warp_boundary
from cudagen_data.eval import EvalInputError, EvalReport, Score, Scorer, StageResult, evaluate, format_report, timing
from cudagen_data.eval import run as run_module
from cudagen_data.eval.pool import Job, run_inline
from cudagen_data.eval.reference import compute_reference
from cudagen_data.eval.report import Result
from cudagen_data.eval.speed import (
    CANDIDATE,
    REFERENCE,
    KernelTiming,
    TimingResult,
    fast_p,
    geometric_mean,
    scale_factor,
    scaled_spec,
    schedule,
    slowed_forward,
    timing_summary,
)
from cudagen_data.eval.timing import TimingMismatch, time_candidate
from cudagen_data.extract import extract_kernels, frontend
from cudagen_data.extract.resources import measure_unit
from cudagen_data.spec import ArgSpec, KernelSpec

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


def test_gpu_access_is_a_no_op_off_the_gpu():
    with timing.gpu_access("cpu", exclusive=True), timing.gpu_access("cpu", exclusive=True):
        pass


def test_gpu_lock_shared_holders_coexist_and_exclusive_waits(tmp_path, monkeypatch):
    import multiprocessing

    monkeypatch.setattr(timing, "_LOCK_DIR", str(tmp_path))
    ctx = multiprocessing.get_context("fork")
    with timing.gpu_access("cuda:0", exclusive=False):
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


def _hold(lock_dir: str, exclusive: bool) -> None:
    timing._LOCK_DIR = lock_dir
    with timing.gpu_access("cuda:0", exclusive=exclusive):
        pass


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

# right on its first launch; then the last thread leaves a mark in its input, and every
# later launch sees it and does nothing (a kernel that works less once it has been checked)
LAZY_SRC = """
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


@contextlib.contextmanager
def _kernels(*sources):
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(warp_boundary.loaded_source(s)).module.k for s in sources]


def _time(candidate_src, **kw):
    kw = {"warmup": 1, "timed": 5, "flush_bytes": 1 << 16, "target_threads": 1 << 13, "backward": False, **kw}
    with _kernels(REFERENCE_SRC, candidate_src) as (ref, cand):
        return time_candidate(SPEC, ref, cand, "cpu", 7, "row", **kw)


def test_own_kernel_against_itself_passes_and_is_timed():
    result = _time(REFERENCE_SRC, backward=True)
    assert len(result.forward.candidate_ms) == len(result.forward.reference_ms) == 5
    assert result.backward is not None and len(result.backward.candidate_ms) == 5
    assert result.size.startswith("scaled x")  # 256 threads scale up
    assert result.launch_dim[0] == N * scale_factor(SPEC, 1 << 13) == 1 << 13
    assert result.speedup > 0


def test_a_slowed_candidate_is_measured_slower():
    result = _time(SLOWED_SRC)
    assert result.forward.speedup < 0.5, result.to_dict()


def test_a_candidate_that_does_less_after_its_first_timed_launch_fails():
    # no warm-up: its first timed launch is its right one, every later one is caught
    with pytest.raises(TimingMismatch, match=r"timed forward launch 2 of 5: output 'y' differs"):
        _time(LAZY_SRC, warmup=0)
    # with a warm-up it is wrong from its first timed launch on
    with pytest.raises(TimingMismatch, match=r"timed forward launch 1 of 5"):
        _time(LAZY_SRC, warmup=1)


def test_a_wrong_candidate_fails_timing():
    with pytest.raises(TimingMismatch, match="output 'y' differs"):
        _time(WRONG_SRC)


def test_a_wrong_backward_fails_timing_and_a_forward_only_timing_ignores_it():
    with pytest.raises(TimingMismatch, match=r"timed backward launch 1 of 5: input gradient 'x.grad' differs"):
        _time(BACKWARD_WRONG_SRC, backward=True)
    assert _time(BACKWARD_WRONG_SRC, backward=False).backward is None


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
        big, size = timing.timing_size(spec, k, "cpu", np.random.default_rng(0), 1 << 12)
    assert big is spec and size == "recorded size (launch dim 64)", size
    # read past the end: w has 64 elements whatever the launch
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
        big, size = timing.timing_size(spec, k, "cpu", np.random.default_rng(0), 1 << 12)
    assert big is spec, size


def test_timing_inputs_are_fixed_by_the_seed():
    with _kernels(REFERENCE_SRC) as (k,):
        a = timing.timing_size(SPEC, k, "cpu", timing.probe_rng(7, "row"), 1 << 12)
        b = timing.timing_size(SPEC, k, "cpu", timing.probe_rng(7, "row"), 1 << 12)
    assert a == b and a[1] == "scaled x16 (launch dim 4096)"
    # a size already known for the row is used as given (no probe)
    with _kernels(REFERENCE_SRC, REFERENCE_SRC) as (ref, cand):
        kw = {"warmup": 0, "timed": 1, "flush_bytes": 4, "backward": False}
        probed = time_candidate(SPEC, ref, cand, "cpu", 7, "row", target_threads=1 << 12, **kw)
        given = time_candidate(SPEC, ref, cand, "cpu", 7, "row", sized=a, **kw)
    assert probed.size == given.size == a[1]


def test_same_bits():
    wp = warp_boundary.warp()
    a = wp.array(np.arange(10, dtype=np.float32), device="cpu")
    b = wp.array(np.arange(10, dtype=np.float32), device="cpu")
    assert timing.same_bits(a, b, "cpu")
    c = wp.array(np.arange(10, dtype=np.float32) + (np.arange(10) == 0) * np.float32(1e-30), device="cpu")
    assert not timing.same_bits(a, c, "cpu")  # one tiny difference in one element


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


# ------------------------------------------------------------------ the run stage's glue, on the CPU


@pytest.fixture
def cpu_builds(monkeypatch):
    """The run stage's GPU build replaced by the row's own kernel on Warp's CPU backend (the
    candidate's text is not compiled: the glue is under test, not the substitution), and the
    timing scaled down to what the CPU runs in seconds."""

    @contextlib.contextmanager
    def cpu_kernel(row, forward, backward, device, precompiled_header=False):
        with warp_boundary.loaded_source(row["python_source"]) as loaded:
            yield getattr(loaded.module, row["kernel_name"]), "cpu (test)"

    monkeypatch.setattr(run_module, "candidate_kernel", cpu_kernel)
    monkeypatch.setattr(timing, "candidate_kernel", cpu_kernel)
    small = {"warmup": 1, "timed": 3, "flush_bytes": 1 << 12}
    monkeypatch.setattr(timing, "time_candidate", functools.partial(timing.time_candidate, **small))
    monkeypatch.setattr(timing, "timing_size", functools.partial(timing.timing_size, target_threads=1 << 10))


def test_a_job_with_timing_times_its_passing_candidates(cpu_builds):
    row = kernel_rows.make_rows(["chain"])[0]
    fwd, bwd = row["cuda_forward"], row["cuda_backward"]
    job = Job(row, 11, [(0, fwd, None), (1, fwd, bwd)], fresh_sets=1, timing=True)
    out = run_inline([job], "cpu")
    assert out[0].ok and out[1].ok, (out[0].detail, out[1].detail)
    assert out[0].timing["backward"] is None  # no backward brought: forward only
    assert out[1].timing["backward"]["candidate_ms"]["launches"] == 3
    assert out[0].timing["size"] == out[1].timing["size"]  # probed once for the row
    assert out[0].timing["size"].startswith("scaled x")  # from the largest recorded size
    ref = compute_reference(row, 11, 1)
    assert out[0].timing["launch_dim"][0] % timing.largest_size(ref).launch_dim[0] == 0
    untimed = run_inline([Job(row, 11, [(0, fwd, None)], fresh_sets=1)], "cpu")
    assert untimed[0].ok and untimed[0].timing is None
