"""Compile generated CUDA with Warp's bundled NVRTC to PTX: no GPU, no driver, no files.

Many kernels compile as one translation unit (one NVRTC call per batch costs far less
than one per kernel).  Each kernel sits in a namespace of its own there, since two
kernels may both define ``helper_0``.  When a batch fails it is bisected until the
failing kernels are found; a single kernel is always compiled exactly as a row would
rebuild it (preamble + device functions + forward + backward), so the verdict on a
kernel never depends on its neighbours.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from .. import warp_boundary
from ..bisect import bisect_failures
from .codegen import DEFAULT_ARCH, ExtractedKernel
from .levels import compile_check

DEFAULT_OPT_LEVEL = 3  # Warp's own default for CUDA modules


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    log: str
    time_ms: float
    arch: int


def nvrtc_compile(
    cuda_source: str, *, arch: int = DEFAULT_ARCH, opt_level: int = DEFAULT_OPT_LEVEL
) -> tuple[bool, str]:
    """Compile one translation unit to PTX; returns (ok, compiler log)."""
    return warp_boundary.nvrtc_compile(cuda_source, warp_boundary.NvrtcOptions(arch=arch, optimization_level=opt_level))


def batch_translation_unit(kernels: Sequence[ExtractedKernel]) -> str:
    """One translation unit holding several kernels, each in its own namespace."""
    parts = [kernels[0].preamble]
    for i, k in enumerate(kernels):
        parts.append(f"namespace cudagen_k{i} {{\n{k.device_functions}\n{k.forward}\n{k.backward}\n}}\n")
    return "\n".join(parts)


def compile_units(
    kernels: Sequence[ExtractedKernel], *, arch: int = DEFAULT_ARCH, level: str = "ptx"
) -> list[CompileResult]:
    """Compile kernels batched at ``level`` (extract/levels.py), bisecting failures; one
    result per kernel, in order."""
    results: list[CompileResult | None] = [None] * len(kernels)
    # Identical kernels share a result (two copies would also clash as extern "C" symbols).
    unique: dict[str, list[int]] = {}
    for i, k in enumerate(kernels):
        unique.setdefault(k.translation_unit(), []).append(i)
    groups: dict[str, list[int]] = {}
    for indices in unique.values():
        groups.setdefault(kernels[indices[0]].preamble, []).append(indices[0])

    def attempt(idx: Sequence[int]) -> list[CompileResult] | None:
        t0 = time.perf_counter()
        if len(idx) == 1:
            ok, log = compile_check(kernels[idx[0]].translation_unit(), arch=arch, level=level)
        else:
            ok, log = compile_check(batch_translation_unit([kernels[i] for i in idx]), arch=arch, level=level)
        if not ok and len(idx) > 1:
            return None  # bisect: only the kernels that fail alone are rejected
        ms = (time.perf_counter() - t0) * 1000.0 / len(idx)
        return [CompileResult(ok, "" if ok else log, ms, arch) for _ in idx]

    for idx in groups.values():
        for i, result in zip(idx, bisect_failures(idx, attempt), strict=False):
            results[i] = result
    for indices in unique.values():
        for i in indices[1:]:
            results[i] = results[indices[0]]
    return results  # type: ignore[return-value]
