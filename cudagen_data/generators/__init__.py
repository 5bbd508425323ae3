"""Kernel generators: (category, seed, index) -> KernelSpec, deterministically.

Each category module exposes ``generate(rng: numpy.random.Generator) -> KernelSpec``;
this registry seeds the generator from (seed, category, index) and fills in
``category``, ``seed`` and ``index``.  The same triple gives the same kernel on any
machine (NumPy's SeedSequence and PCG64 are platform independent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import xxhash

from ..spec import KernelSpec
from .differentiable import THREAD_BOUND, adjoint_hazard, declare_forward_only, forward_only_cause

# Bump when a change to any generator changes what it emits for a given seed, or when the
# rows change otherwise (3: machine-independent paths in the CUDA and in logs, issue #18;
# 4: kernels stay inside what Warp differentiates correctly, issue #12; 5: fewer
# forward-only atomic kernels; 6: moe top-k selection loops not unrolled; 7: no by-value scalar
# argument that the kernel never reads, sizes read from array shapes, issue #23; 8: no backward
# through a loop whose trip count depends on the thread, tile_scan_max/min forward-only, issue #26;
# 9: basic kernels whose every input reaches an output (no dead stores, self-cancelling updates,
# collapsed expressions or idempotent loop bodies; atomic extremes and bit masks over a few
# threads each), stencil extents from the arrays (issue #23)).
GENERATOR_VERSION = "9"

REDRAWS = 8  # draws after the first while a kernel's adjoint would be wrong

GeneratorFn = Callable[[np.random.Generator], KernelSpec]


def _registry() -> dict[str, GeneratorFn]:
    from . import basic, ml  # on first use: importers of difficulty or GENERATOR_VERSION alone skip them

    return {**basic.GENERATORS, **ml.GENERATORS}


_REGISTRY: dict[str, GeneratorFn] | None = None


def registry() -> dict[str, GeneratorFn]:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _registry()
    return _REGISTRY


def categories() -> tuple[str, ...]:
    """All category names, in a fixed order (basic categories first)."""
    return tuple(registry())


def category_rng(seed: int, category: str, index: int) -> np.random.Generator:
    category_code = xxhash.xxh32_intdigest(category.encode())
    return np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, category_code, int(index)])


def generate(category: str, seed: int, index: int) -> KernelSpec:
    """The kernel of ``category`` at (seed, index)."""
    try:
        fn = registry()[category]
    except KeyError:
        raise ValueError(f"unknown category {category!r}; known: {', '.join(categories())}") from None
    rng = category_rng(seed, category, index)
    spec = fn(rng)
    # Stay inside what Warp differentiates correctly: draw again (same rng stream) while
    # the kernel has a construct whose Warp adjoint is wrong.  The prediction is
    # conservative (some kernels it flags differentiate correctly), so a kernel still
    # flagged after REDRAWS is kept: the gradient check decides, and rejects what is wrong.
    cause = forward_only_cause(spec)
    hazard = None if cause else adjoint_hazard(spec)  # once per draw: the check walks the whole tree
    for _ in range(REDRAWS):
        if cause or not hazard:
            break
        spec = fn(rng)
        cause = forward_only_cause(spec)
        hazard = None if cause else adjoint_hazard(spec)
    if hazard == THREAD_BOUND:
        cause = THREAD_BOUND  # never shipped with a backward: Warp's is wrong (issue #26)
    if cause:
        spec = declare_forward_only(spec, cause)
    return dataclasses.replace(spec, category=category, seed=int(seed), index=int(index))
