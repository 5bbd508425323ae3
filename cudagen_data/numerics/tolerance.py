"""Is a GPU result close enough to the recorded CPU result?  Per-element tolerances.

A float32 result carries rounding error, and chains of transcendental functions make
that error very uneven (CPU and GPU float32 results differ by up to ~1e-2 relative on
some kernels, by 1e-7 on others), so one fixed tolerance is either too loose for most
kernels or too tight for some.  Instead the error of each output is *measured*:

    e = |cpu32 - ref64|

where cpu32 is a fresh float32 run of the kernel on the CPU and ref64 a run of its
float64 twin (twin.py) on the same inputs.  e is an independent estimate of the float32
rounding error of that computation: it depends neither on the GPU result nor on the
recorded values under test.  The GPU rounds differently (it contracts a*b+c into FMAs,
its transcendental functions differ in the last ulps), so the CPU's error at one element
is only one sample of the error the computation can make: at an element where the CPU
happened to round almost exactly, the GPU may not.  The bound therefore uses the largest
error measured anywhere in the array:

    |gpu - recorded| <= K * max(e) + floor_rel * |ref64_i| + floor_abs * scale

(the floors cover a few ulps of the precision the kernel computes in: float32 for any
kernel with a twin, even where the array itself is float64, because its values passed
through float32 arithmetic; ``scale`` is the largest |value| of the array).  Both failures
of the first H100 run were of this kind: a float64 output computed from float32 exp()
(the GPU was 1 float32 ulp away, the per-element float64 floor was tighter), and sin() of
a float32 intermediate of ~300 (an ulp of the argument moves the result by 3e-5) at an
element where the CPU's own error was 7x smaller than elsewhere in the array.  Integer and
boolean outputs must match exactly, except where the float32 CPU run and the float64
twin pick different integers (a near tie, e.g. an argmax): there either value passes.

Where no twin exists (Warp rejects the rewrite, an argument type without a float64
counterpart, a worker that crashed in the CPU stage) a documented magnitude-scaled
fallback applies (FALLBACK_*), and the report counts how often.  Kernels written
entirely in float64 need no twin: they are compared with float64 floors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

K = 8.0  # GPU float32 error allowed, in units of the measured CPU float32 error

# floor_rel, floor_abs (times the array's largest |value|) per dtype: a few ulps.
FLOORS = {"float16": (4e-3, 4e-3), "float32": (1e-6, 1e-6), "float64": (1e-9, 1e-9)}

# No twin: allow 1% of each value plus 0.1% of the array's largest |value|.  This is
# loose on purpose (float32 chains can differ by ~1e-2 between CPU and GPU); it still
# catches wrong results, which are off by the size of the value itself.
FALLBACK_REL = 1e-2
FALLBACK_ABS = 1e-3

TOLERANCE_KINDS = ("float64_twin", "float64_native", "fallback", "exact")


@dataclass
class ArrayCheck:
    """The verdict on one array of one row."""

    array: str
    kind: str  # "output" or "input gradient"
    tolerance: str  # one of TOLERANCE_KINDS
    ok: bool
    max_abs: float = 0.0  # largest |gpu - recorded|
    max_rel: float = 0.0  # max_abs / the array's largest |recorded value|
    ratio: float = 0.0  # largest error / tolerance over elements (<= 1 passes)
    index: int = -1  # flat index of the worst element
    gpu: float = 0.0  # worst element: GPU value
    recorded: float = 0.0  # worst element: recorded value
    cpu: float | None = None  # worst element: fresh CPU float32 value, where run
    detail: str = ""

    def describe(self) -> str:
        if self.detail:
            return f"{self.kind} {self.array!r}: {self.detail}"
        where = f"element {self.index}: GPU {self.gpu:.7g}, recorded {self.recorded:.7g}"
        if self.cpu is not None:
            where += f", CPU re-run {self.cpu:.7g}"
        return (
            f"{self.kind} {self.array!r} differs ({self.tolerance} tolerance): max abs error {self.max_abs:.3g}, "
            f"rel {self.max_rel:.3g}, {self.ratio:.3g}x the tolerance; worst {where}"
        )


def floors(dtype: np.dtype) -> tuple[float, float]:
    return FLOORS.get(np.dtype(dtype).name, FLOORS["float32"])


def twin_tolerance(cpu32: np.ndarray, ref64: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Per-element tolerance from the measured float32 error (see module docstring)."""
    ref64 = np.asarray(ref64, dtype=np.float64)
    err = np.abs(np.asarray(cpu32, dtype=np.float64) - ref64)
    err = np.where(np.isfinite(err), err, 0.0)
    # a kernel with a twin computes in float32 (or float16): at least float32's floors
    rel, abs_ = (max(a, b) for a, b in zip(floors(dtype), FLOORS["float32"], strict=False))
    scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
    measured = float(np.max(err)) if err.size else 0.0
    return K * measured + rel * np.abs(ref64) + abs_ * scale


def native_tolerance(recorded: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float64 kernels: float64 floors only (no more precise reference exists)."""
    recorded = np.asarray(recorded, dtype=np.float64)
    rel, abs_ = floors(dtype)
    scale = float(np.max(np.abs(recorded))) if recorded.size else 0.0
    return rel * np.abs(recorded) + abs_ * scale


def fallback_tolerance(recorded: np.ndarray) -> np.ndarray:
    recorded = np.asarray(recorded, dtype=np.float64)
    scale = float(np.max(np.abs(recorded))) if recorded.size else 0.0
    return FALLBACK_REL * np.abs(recorded) + FALLBACK_ABS * scale


def check_array(
    name: str,
    kind: str,
    gpu: np.ndarray,
    recorded: np.ndarray,
    *,
    cpu32: np.ndarray | None = None,
    ref64: np.ndarray | None = None,
    native64: bool = False,
    allowance: float = 0.0,
) -> ArrayCheck:
    """Judge one array.  ``cpu32``/``ref64``: the fresh CPU run and its float64 twin
    (both or neither); ``native64``: the kernel has no float32 code at all; ``allowance``:
    an absolute error added to every float element's tolerance (eval/run.py: what the
    row's own CUDA was measured to need on these inputs)."""
    gpu = np.asarray(gpu)
    recorded = np.asarray(recorded)
    is_float = recorded.dtype.kind == "f"
    if gpu.shape != recorded.shape:
        return ArrayCheck(
            name,
            kind,
            "exact",
            False,
            float("inf"),
            float("inf"),
            float("inf"),
            detail=f"shape {gpu.shape} on the GPU, {recorded.shape} recorded",
        )
    if not is_float:
        return _check_exact(name, kind, gpu, recorded, cpu32, ref64)
    if (
        ref64 is not None
        and cpu32 is not None
        and np.shape(ref64) == recorded.shape
        and np.shape(cpu32) == recorded.shape
    ):
        tolerance, tol = "float64_twin", twin_tolerance(cpu32, ref64, recorded.dtype)
    elif native64 and recorded.dtype == np.float64:
        tolerance, tol = "float64_native", native_tolerance(recorded, recorded.dtype)
    else:
        tolerance, tol = "fallback", fallback_tolerance(recorded)
    g = gpu.astype(np.float64).reshape(-1)
    r = recorded.astype(np.float64).reshape(-1)
    t = tol.reshape(-1) + allowance
    check = ArrayCheck(name, kind, tolerance, True)
    if not r.size:
        return check
    finite = np.isfinite(g)
    if not np.all(finite[np.isfinite(r)]):
        i = int(np.argmin(finite))
        return ArrayCheck(
            name,
            kind,
            tolerance,
            False,
            float("inf"),
            float("inf"),
            float("inf"),
            i,
            float(g[i]),
            float(r[i]),
            detail=f"non-finite GPU value {g[i]} at element {i} (recorded {r[i]:.7g})",
        )
    err = np.abs(g - r)
    err = np.where(np.isfinite(r), err, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(t > 0, err / np.where(t > 0, t, 1.0), np.where(err > 0, np.inf, 0.0))
    i = int(np.argmax(ratio))
    scale = float(np.max(np.abs(r[np.isfinite(r)]))) if np.any(np.isfinite(r)) else 0.0
    check.max_abs = float(np.max(err))
    check.max_rel = check.max_abs / scale if scale > 0 else (0.0 if check.max_abs == 0 else float("inf"))
    check.ratio = float(ratio[i])
    check.index, check.gpu, check.recorded = i, float(g[i]), float(r[i])
    if cpu32 is not None:
        check.cpu = float(np.asarray(cpu32, dtype=np.float64).reshape(-1)[i])
    check.ok = check.ratio <= 1.0
    return check


def _check_exact(
    name, kind, gpu: np.ndarray, recorded: np.ndarray, cpu32: np.ndarray | None, ref64: np.ndarray | None
) -> ArrayCheck:
    same = gpu == recorded
    if cpu32 is not None and ref64 is not None and np.shape(cpu32) == np.shape(ref64) == recorded.shape:
        # Where float32 and float64 pick different integers (a near tie, e.g. an argmax),
        # float32 rounding decides; the GPU may land on either side.
        ref64 = np.asarray(ref64).astype(recorded.dtype)
        same |= (np.asarray(cpu32) != ref64) & (gpu == ref64)
    flat = same.reshape(-1)
    check = ArrayCheck(name, kind, "exact", bool(np.all(flat)))
    if not check.ok:
        i = int(np.argmin(flat))
        g, r = gpu.reshape(-1)[i], recorded.reshape(-1)[i]
        check.index, check.gpu, check.recorded = i, float(g), float(r)
        check.max_abs = float(np.max(np.abs(gpu.astype(np.float64) - recorded.astype(np.float64))))
        scale = float(np.max(np.abs(recorded.astype(np.float64))))
        check.max_rel = check.max_abs / scale if scale > 0 else float("inf")
        check.ratio = float("inf")
        check.detail = f"{int(np.sum(~flat))} of {flat.size} values differ; first at element {i}: GPU {g}, recorded {r}"
    return check
