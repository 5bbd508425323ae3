"""`frontend` and `ptx` give the same verdict (and the same error lines) on generated kernels of
every category and on every kind of broken kernel; the 2,000-kernel run is
benchmarks/bench_compile_agreement.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_compile_agreement import BROKEN_KINDS, agreement, generated_kernels, with_broken  # noqa: E402

from cudagen_data.generators import categories  # noqa: E402


@pytest.mark.slow
def test_levels_agree_on_every_category_and_every_broken_kind():
    good = generated_kernels(len(categories()), seed=3)  # one kernel of each category
    assert {label.split("#")[0] for label, _ in good} == set(categories())
    # every broken kind into the forward, backward and device functions of one kernel,
    # mixed into the same batch as the good ones (bisection must find them)
    mixed = with_broken(good, every=len(good))
    broken = [label for label, _, ok in mixed if not ok]
    assert len(broken) == 3 * len(BROKEN_KINDS)
    seconds, counts, differences = agreement(mixed, arch=86, batch_size=6)
    assert not differences, differences
    assert counts[("good", "ok", "ok")] == len(good)
    assert counts[("broken", "fails", "fails")] == len(broken)
