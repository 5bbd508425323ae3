"""`frontend` and `ptx` give the same verdict (and the same error lines) on generated kernels of
every category and on every kind of broken kernel; the 2,000-kernel run is
benchmarks/bench_compile_agreement.py."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_compile_agreement import BROKEN_KINDS, agreement, generated_kernels, with_broken  # noqa: E402

from cudagen_data.generators import categories  # noqa: E402


@pytest.mark.slow
def test_levels_agree_on_every_category_and_every_broken_kind():
    good = generated_kernels(len(categories()), seed=3)  # one kernel of each category
    assert {label.split("#")[0] for label, _ in good} == set(categories())
    # every broken kind into the forward, backward and device functions of one kernel
    mixed = with_broken(good, every=len(good))
    broken = [item for item in mixed if not item[2]]
    assert len(broken) == 3 * len(BROKEN_KINDS)
    # One broken kernel mixed into a batch of good ones (bisection must find it); the rest of the
    # good ones in one batch, and the other broken ones alone: every broken kernel is compiled on
    # its own in the end anyway, and a batch of broken ones costs ~2 NVRTC calls per kernel to
    # bisect (44 calls per level in batches of 6, ~25 this way: the two levels' verdicts and error
    # lines are compared on every kernel all the same).  Bisection among many: tests/test_extract.py.
    goods = [item for item in mixed if item[2]]
    parts = [(goods[:5] + broken[:1], 6), (goods[5:], len(goods)), (broken[1:], 1)]
    counts: Counter = Counter()
    for part, batch_size in parts:
        _, part_counts, differences = agreement(part, arch=86, batch_size=batch_size)
        assert not differences, differences
        counts += part_counts
    assert counts[("good", "ok", "ok")] == len(good)
    assert counts[("broken", "fails", "fails")] == len(broken)
