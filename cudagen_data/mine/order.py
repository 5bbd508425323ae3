"""Outputs that depend on thread order: found by running the kernel again, threads reversed.

Warp's CPU backend runs a launch's threads one by one, from 0 up; a GPU runs them in no
fixed order.  An output that a kernel writes at the slot ``wp.atomic_add`` returned, or
through indices that collide (last writer wins), or that one thread reads after another
wrote it, is reproducible on the CPU and not on a GPU.  Each executed kernel is built
again with its thread loop reversed (:func:`warp_boundary.mining.reversed_thread_order`)
and run on the recorded inputs: a recorded output or input gradient that comes out
differently is not kept (the row names it in ``provenance.order_dependent``); a kernel
left with no output is not executed.

Float sums accumulated with atomics differ between orders only by rounding: the
comparison allows half the GPU suite's tolerance for mined rows
(:func:`gpu.tolerance.fallback_tolerance`), so such sums stay.
"""

from __future__ import annotations

import numpy as np

from ..contracts.test_vectors import decode_value
from ..gpu.tolerance import fallback_tolerance

SHARE_OF_GPU_TOLERANCE = 0.5
NOT_RUN = "outputs depend on thread order"


def differs(recorded: np.ndarray, other: np.ndarray) -> bool:
    """True when ``other`` (the reversed run) is not ``recorded`` within what a GPU run is allowed."""
    recorded, other = np.asarray(recorded), np.asarray(other)
    if recorded.shape != other.shape:
        return True
    if recorded.dtype.kind != "f":
        return not np.array_equal(recorded, other)
    r, o = recorded.astype(np.float64), other.astype(np.float64)
    if not np.array_equal(np.isfinite(r), np.isfinite(o)):
        return True
    finite = np.isfinite(r)
    tol = SHARE_OF_GPU_TOLERANCE * fallback_tolerance(np.where(finite, r, 0.0))
    return bool(np.any(np.abs(r - o)[finite] > tol[finite]))


def order_dependent(vectors: dict, reversed_vectors: dict | None) -> list[str]:
    """Recorded entries (``outputs.x``, ``input_grads.y``) the reversed run does not reproduce."""
    found = []
    for part in ("outputs", "input_grads"):
        got = (reversed_vectors or {}).get(part, {})
        for name, encoded in vectors.get(part, {}).items():
            if name not in got or differs(decode_value(encoded), decode_value(got[name])):
                found.append(f"{part}.{name}")
    return found


def without(vectors: dict, entries: list[str]) -> dict | None:
    """The test vectors with those entries dropped; None if no output is left."""
    kept = {**vectors, "outputs": dict(vectors["outputs"]), "input_grads": dict(vectors["input_grads"])}
    for entry in entries:
        part, name = entry.split(".", 1)
        kept[part].pop(name, None)
    return kept if kept["outputs"] else None
