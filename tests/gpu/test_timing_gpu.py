"""`cudagen eval --timing` on a GPU: the rows' own kernels against themselves time within
a few percent of 1.0, a deliberately slowed copy of each is measured slower, a candidate
that does less on its timed launches (once it has been checked, or only at the timing
size) fails them, and ``score()`` returns the speedup.  Needs a CUDA device (timing has no
dry run: its CPU counterpart is tests/test_timing.py, and benchmarks/bench_timing.py
--device cpu runs the whole path with the CPU standing in).  The 300-row and
1,000-candidate figures are benchmarks/bench_timing.py's."""

from __future__ import annotations

import dataclasses
import statistics

import kernel_rows
import orjson
import pytest
from conftest import JOBS

from cudagen_data.eval import Candidate, Scorer, score
from cudagen_data.eval.mutants import stale_global
from cudagen_data.eval.reference import compute_reference
from cudagen_data.eval.run import candidate_kernel
from cudagen_data.eval.speed import TIMED_LAUNCHES, partial_at_scale, slowed_forward
from cudagen_data.eval.timing import METHOD, TimingMismatch, largest_size, time_candidate
from cudagen_data.gpu.recheck import dataset_rows

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu(cuda_device):
    if cuda_device == "cpu":
        pytest.skip("timing needs a GPU (no dry run: see tests/test_timing.py and bench_timing.py --device cpu)")
    return cuda_device


@pytest.fixture(scope="module")
def rows(gpu, request):
    produced_dataset = request.getfixturevalue("produced_dataset")
    produced = [row for _, row in dataset_rows(produced_dataset)]
    preambles = orjson.loads((produced_dataset / "manifest.json").read_bytes())["preambles"]
    return produced + kernel_rows.make_row_objects(list(kernel_rows.KERNELS)), preambles


@pytest.fixture(scope="module")
def scorer(gpu):
    with Scorer(gpu, workers=JOBS, timing=True) as s:
        yield s


@pytest.fixture(scope="module")
def chain_row(gpu):
    """An elementwise row timed at a scaled size (tests/kernel_rows.py: no dataset to produce)."""
    return kernel_rows.make_row_objects(["chain"])[0]


def test_own_kernels_against_themselves_time_near_one(scorer, rows):
    all_rows, preambles = rows
    pairs = [(r, Candidate(r.id, r.cuda_forward, r.cuda_backward or None)) for r in all_rows]
    scores = scorer.score_many(pairs, preambles)
    assert all(s.reached == "run" for s in scores), [s.failed.detail for s in scores if s.failed]
    speedups = [s.speedup for s in scores if s.speedup is not None]
    assert len(speedups) >= 0.95 * len(scores), [s.notes for s in scores if s.speedup is None]
    deviation = statistics.median(abs(s - 1.0) for s in speedups)
    q = statistics.quantiles(speedups, n=20)
    locked = sum(s.timing["cost_s"].get("locked", 0.0) for s in scores if s.timing)
    print(f"own vs own: {len(speedups)} timed; median |speedup - 1| {deviation:.4f}; p5 {q[0]:.3f}, p95 {q[-1]:.3f}; "
          f"exclusive GPU {locked:.1f} s in all")  # fmt: skip
    assert deviation <= 0.05
    sizes = [s.timing["size"] for s in scores if s.timing]
    assert any(size.startswith("scaled") for size in sizes)  # most rows take their size from their arguments
    assert sum(s.timing["backward"] is not None for s in scores if s.timing) > 0  # backwards timed too


def test_a_slowed_copy_is_measured_slower(scorer, rows):
    all_rows, preambles = rows
    pairs = [(r, Candidate(r.id, slowed_forward(r.cuda_forward))) for r in all_rows]
    scores = scorer.score_many(pairs, preambles)
    assert all(s.reached == "run" for s in scores), [s.failed.detail for s in scores if s.failed]
    speedups = [s.speedup for s in scores if s.speedup is not None]
    slower = sum(1 for s in speedups if s < 1.0) / len(speedups)
    median = statistics.median(speedups)
    print(f"slowed: {len(speedups)} timed, {slower:.1%} measured slower; median speedup {median:.3f}")
    assert slower >= 0.95


def test_a_candidate_that_does_less_at_the_timing_size_fails_its_timed_launches(scorer, chain_row, gpu):
    # right at every size the run stage judges (its launches are smaller), half the work at
    # the timing size: it passes the run stage without timing and fails its timed launches
    row, preambles = chain_row, None
    own = scorer.score_many([(row, Candidate(row.id, row.cuda_forward))], preambles)[0]
    assert own.timing["size"].startswith("scaled") and own.timing["launch_dim"][0] > 1 << 16, own.timing
    cand = Candidate(row.id, partial_at_scale(row.cuda_forward))
    with Scorer(gpu, workers=1, timing=False) as plain:
        assert plain.score_many([(row, cand)], preambles)[0].reached == "run"
    got = scorer.score_many([(row, cand)], preambles)[0]
    assert got.reached == "compile" and got.speedup is None, got.to_dict()
    assert got.failed.detail.startswith(f"timed launches: timed forward launch 1 of {TIMED_LAUNCHES}: output")


def test_a_candidate_that_does_less_once_checked_fails_its_timed_launches(gpu, chain_row):
    # a __device__ counter lets every launch after the first return at once (the structure
    # stage forbids __device__ globals; here timing alone must catch it)
    row = chain_row
    lazy = stale_global(row.cuda_forward)
    ref = compute_reference(row, seed=5)
    with (
        candidate_kernel(row, row.cuda_forward, None, gpu) as (own, _),
        candidate_kernel(row, lazy, None, gpu) as (cand, _),
    ):
        no_warmup = dataclasses.replace(METHOD, warmup=0)  # its first timed launch is its first, right one
        with pytest.raises(TimingMismatch, match=f"timed forward launch 2 of {TIMED_LAUNCHES}: output"):
            time_candidate(largest_size(ref), own, cand, gpu, 5, row.id, backward=False, method=no_warmup)
    with (
        candidate_kernel(row, row.cuda_forward, None, gpu) as (own, _),
        candidate_kernel(row, lazy, None, gpu) as (cand, _),
    ):
        with pytest.raises(TimingMismatch, match=f"timed forward launch 1 of {TIMED_LAUNCHES}: output"):
            time_candidate(largest_size(ref), own, cand, gpu, 5, row.id, backward=False)
        result = time_candidate(largest_size(ref), own, own, gpu, 5, row.id, backward=False)
    assert abs(result.speedup - 1.0) < 0.2


def test_score_returns_the_speedup(gpu, chain_row):
    row = chain_row
    fast = score(row, Candidate(row.id, row.cuda_forward), device=gpu, timing=True)
    slow = score(row, slowed_forward(row.cuda_forward), device=gpu, timing=True)
    assert isinstance(fast.speedup, float) and fast.speedup == fast.timing["speedup"]
    assert slow.speedup < fast.speedup, (fast.timing, slow.timing)
