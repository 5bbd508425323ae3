"""Compile generated CUDA with Warp's bundled NVRTC to PTX: no GPU, no driver, no files.

Many kernels compile as one translation unit (one NVRTC call per batch costs far less
than one per kernel).  Each kernel sits in a namespace of its own there, since two
kernels may both define ``helper_0``.  When a batch fails it is bisected until the
failing kernels are found; a single kernel is always compiled exactly as a row would
rebuild it (preamble + device functions + forward + backward), so the verdict on a
kernel never depends on its neighbours.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .. import warp_env
from .codegen import DEFAULT_ARCH, ExtractedKernel

DEFAULT_OPT_LEVEL = 3  # Warp's own default for CUDA modules


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    log: str
    time_ms: float
    arch: int


def nvrtc_compile(cuda_source: str, *, arch: int = DEFAULT_ARCH, opt_level: int = DEFAULT_OPT_LEVEL) -> tuple[bool, str]:
    """Compile one translation unit to PTX; returns (ok, compiler log)."""
    wp = warp_env.warp()
    from warp._src import build

    runtime = wp._src.context.runtime
    if arch not in runtime.nvrtc_supported_archs:
        supported = ", ".join(str(a) for a in sorted(runtime.nvrtc_supported_archs))
        raise ValueError(f"arch {arch} is not supported by Warp's NVRTC (supported: {supported})")
    include_dir = os.path.join(build.warp_home, "native").encode()
    no_link = (ctypes.c_char_p * 0)(), (ctypes.c_size_t * 0)(), (ctypes.c_int * 0)()
    with warp_env.captured_stderr() as log:
        err = runtime.core.wp_cuda_compile_program(
            cuda_source.encode(), b"cudagen.cu", arch, b"", include_dir, 0, None,
            False, opt_level, False, False, False, True, False, False, False,
            os.devnull.encode(),  # PTX is not kept: the check is whether it compiles
            None, 0, *no_link,
        )  # fmt: skip
    return err == 0, _clean_log(log[0])


def _clean_log(text: str) -> str:
    # Warp's own summary line carries a path on NVIDIA's build machine: keep the error name only.
    lines = []
    for line in text.splitlines():
        if line.startswith("Warp NVRTC compilation error"):
            line = line.split(" (", 1)[0]
        lines.append(line)
    return "\n".join(lines).strip()


def batch_translation_unit(kernels: Sequence[ExtractedKernel]) -> str:
    """One translation unit holding several kernels, each in its own namespace."""
    parts = [kernels[0].preamble]
    for i, k in enumerate(kernels):
        parts.append(f"namespace cudagen_k{i} {{\n{k.device_functions}\n{k.forward}\n{k.backward}\n}}\n")
    return "\n".join(parts)


def compile_units(
    kernels: Sequence[ExtractedKernel], *, arch: int = DEFAULT_ARCH, opt_level: int = DEFAULT_OPT_LEVEL
) -> list[CompileResult]:
    """Compile kernels batched, bisecting failures; one result per kernel, in order."""
    results: list[CompileResult | None] = [None] * len(kernels)
    # Identical kernels share a result (two copies would also clash as extern "C" symbols).
    unique: dict[str, list[int]] = {}
    for i, k in enumerate(kernels):
        unique.setdefault(k.translation_unit(), []).append(i)
    groups: dict[str, list[int]] = {}
    for indices in unique.values():
        groups.setdefault(kernels[indices[0]].preamble, []).append(indices[0])

    def solve(idx: list[int]) -> None:
        t0 = time.perf_counter()
        if len(idx) == 1:
            ok, log = nvrtc_compile(kernels[idx[0]].translation_unit(), arch=arch, opt_level=opt_level)
        else:
            ok, log = nvrtc_compile(batch_translation_unit([kernels[i] for i in idx]), arch=arch, opt_level=opt_level)
        ms = (time.perf_counter() - t0) * 1000.0 / len(idx)
        if ok or len(idx) == 1:
            for i in idx:
                results[i] = CompileResult(ok, "" if ok else log, ms, arch)
            return
        half = len(idx) // 2
        solve(idx[:half])
        solve(idx[half:])

    for idx in groups.values():
        solve(idx)
    for indices in unique.values():
        for i in indices[1:]:
            results[i] = results[indices[0]]
    return results  # type: ignore[return-value]
