"""The pure half of ``cudagen eval --timing`` (eval/timing.py runs the launches): the timing
size, the launch order, medians and speedups, fast_p and the geometric mean speedup.

fast_p is KernelBench's: the share of candidates that are correct *and* more than p times
as fast as the reference; a candidate that failed, or was not timed, counts in the
denominator and never in the numerator.  fast_0 is then the share correct and timed.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..spec import DTYPES, ArgSpec, KernelSpec

WARMUP_LAUNCHES = 3
TIMED_LAUNCHES = 21  # odd: the median is one launch's time
L2_FLUSH_MULTIPLE = 2  # the L2 flush writes twice the device's L2 (H100, H200: 50 MB of L2; B200: 126 MB)
MIN_FLUSH_BYTES = 32 << 20  # at least: the flush also keeps the GPU busy while Python enqueues the launch
UNKNOWN_L2_FLUSH_BYTES = 256 << 20  # where the driver does not say (larger than any GPU's L2)
TARGET_THREADS = 1 << 22
MAX_SCALED_BYTES = 256 << 20  # arrays of one kernel at the scaled size
FAST_P = (0.0, 1.0, 1.5, 2.0)


# --------------------------------------------------------------------------- sizes (pure)


def _nbytes(arg: ArgSpec) -> int:
    np_dtype, comp = DTYPES[arg.dtype]
    return int(np.prod(tuple(arg.shape) + comp, dtype=np.int64)) * np.dtype(np_dtype).itemsize


def scalable_args(spec: KernelSpec) -> list[str]:
    """Arrays whose first dimension is the first launch dimension: the ones a bigger
    launch needs bigger (plain arrays only)."""
    n0 = spec.launch_dim[0]
    return [a.name for a in spec.args if a.kind == "array" and not a.layout and a.shape[0] == n0]


def scale_factor(spec: KernelSpec, target_threads: int = TARGET_THREADS, max_bytes: int = MAX_SCALED_BYTES) -> int:
    """The power of two the first launch dimension (and the arrays as long as it) is
    multiplied by for timing: the smallest reaching ``target_threads``, halved until the
    arrays fit in ``max_bytes``; 1 for tile kernels and kernels with no such array."""
    if spec.is_tiled or not scalable_args(spec):
        return 1
    threads = math.prod(spec.launch_dim)
    factor = 1
    while threads * factor < target_threads:
        factor *= 2
    while factor > 1 and sum(_nbytes(a) for a in scaled_spec(spec, factor).args) > max_bytes:
        factor //= 2
    return factor


def scaled_spec(spec: KernelSpec, factor: int) -> KernelSpec:
    if factor == 1:
        return spec
    names = set(scalable_args(spec))
    args = tuple(
        dataclasses.replace(a, shape=(a.shape[0] * factor, *a.shape[1:])) if a.name in names else a for a in spec.args
    )
    return dataclasses.replace(spec, args=args, launch_dim=(spec.launch_dim[0] * factor, *spec.launch_dim[1:]))


# --------------------------------------------------------------------------- statistics (pure)


CANDIDATE, REFERENCE = "candidate", "reference"


def schedule(warmup: int = WARMUP_LAUNCHES, timed: int = TIMED_LAUNCHES) -> list[tuple[str, bool]]:
    """(kernel, timed) in launch order: warm-up rounds, then timed rounds; each round
    launches both kernels, in ABBA order so neither always goes first (clock drift and
    thermal state fall on both)."""
    out = []
    for r in range(warmup + timed):
        pair = (CANDIDATE, REFERENCE) if r % 2 == 0 else (REFERENCE, CANDIDATE)
        out += [(k, r >= warmup) for k in pair]
    return out


@dataclass
class KernelTiming:
    """One kernel pair's timed launches (milliseconds)."""

    candidate_ms: list[float]
    reference_ms: list[float]

    @property
    def candidate_median(self) -> float:
        return statistics.median(self.candidate_ms)

    @property
    def reference_median(self) -> float:
        return statistics.median(self.reference_ms)

    @property
    def speedup(self) -> float:
        return self.reference_median / self.candidate_median

    def to_dict(self) -> dict:
        def spread(ms):
            q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
            return {"median": statistics.median(ms), "q1": q[0], "q3": q[2], "min": min(ms), "launches": len(ms)}

        return {"speedup": self.speedup, "candidate_ms": spread(self.candidate_ms),
                "reference_ms": spread(self.reference_ms)}  # fmt: skip


@dataclass
class TimingResult:
    size: str  # what was timed: "recorded size" or "scaled x64 (launch dim ...)"
    launch_dim: tuple[int, ...]
    forward: KernelTiming
    backward: KernelTiming | None = None
    notes: list[str] = field(default_factory=list)
    cost_s: dict[str, float] = field(default_factory=dict)  # where the timing's own time went (timing.measure)

    @property
    def speedup(self) -> float:
        """Reference time / candidate time over what was timed (forward + backward where both ran)."""
        parts = [self.forward] + ([self.backward] if self.backward else [])
        return sum(p.reference_median for p in parts) / sum(p.candidate_median for p in parts)

    def to_dict(self) -> dict:
        return {"speedup": self.speedup, "size": self.size, "launch_dim": list(self.launch_dim),
                "forward": self.forward.to_dict(), "backward": self.backward.to_dict() if self.backward else None,
                "notes": self.notes, "cost_s": self.cost_s}  # fmt: skip


def fast_p(speedups: Sequence[float | None], p: float) -> float | None:
    """KernelBench's fast_p: the share of candidates that are correct and more than ``p``
    times as fast as the reference (``None``: not correct, or not timed)."""
    if not speedups:
        return None
    return sum(1 for s in speedups if s is not None and s > p) / len(speedups)


def geometric_mean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def timing_summary(speedups: Sequence[float | None]) -> dict:
    """Per dataset (or group): fast_p for every p of FAST_P, the geometric mean speedup of
    the timed candidates, and how many were timed."""
    timed = [s for s in speedups if s is not None]
    out = {f"fast_{p:g}": fast_p(speedups, p) for p in FAST_P}
    out |= {"geomean_speedup": geometric_mean(timed), "timed": len(timed), "candidates": len(speedups)}
    return out


SLOW_ITERATIONS = 512


def slowed_forward(forward: str, iterations: int = SLOW_ITERATIONS) -> str:
    """The same kernel made slower, results unchanged (what shows that timing sees a slower
    candidate): each thread first runs a redundant loop of ``iterations`` dependent updates
    of a ``volatile`` local, which the compiler may not remove (every access is a memory
    access) and which writes nothing the kernel returns."""
    brace = forward.index("{")
    loop = (
        "\n    { volatile float cudagen_redundant = 0.0f;"
        f" for (int cudagen_r = 0; cudagen_r < {iterations}; ++cudagen_r)"
        " cudagen_redundant = cudagen_redundant * 0.5f + 1.0f; }"
    )
    return forward[: brace + 1] + loop + forward[brace + 1 :]


def flush_bytes(l2_bytes: int | None) -> int:
    """The L2 flush buffer's size for a device with ``l2_bytes`` of L2 (None: unknown)."""
    if not l2_bytes:
        return UNKNOWN_L2_FLUSH_BYTES
    return max(L2_FLUSH_MULTIPLE * l2_bytes, MIN_FLUSH_BYTES)


def partial_at_scale(forward: str, threads: int = 1 << 16) -> str:
    """A wrong kernel timing must catch: the same forward, but launched on more than
    ``threads`` threads (the timing size; the run stage's sizes are smaller) the threads of
    the upper half return at once, so the timed launches do half the work and would be
    about twice as fast.  Passes the run stage; fails its timed launches."""
    brace = forward.index("{")
    skip = (
        f"\n    if (dim.size > {threads} && static_cast<size_t>(blockDim.x) * static_cast<size_t>(blockIdx.x)"
        " + static_cast<size_t>(threadIdx.x) >= dim.size / 2) return;"
    )
    return forward[: brace + 1] + skip + forward[brace + 1 :]
