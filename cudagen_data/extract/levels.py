"""Compile-check levels: how far NVRTC takes a kernel before the verdict.

- ``frontend`` (default): NVIDIA's standalone NVRTC of Warp's build, Warp's options plus
  ``--fdevice-syntax-only`` (extract/frontend.py): parsing, semantic analysis, template
  instantiation.  ~13x faster than ``ptx``; the same verdict on every generated kernel
  and every kind of broken kernel we inject (benchmarks/bench_compile_agreement.py,
  tests/test_compile_agreement.py).  What it cannot see is what only the optimizer,
  ptxas or the linker finds: an extern ``__device__`` function declared and never
  defined, a kernel over the target's shared-memory or parameter limits.  Warp's
  code generator emits neither (its builtins are header-only, every ``@wp.func`` is
  emitted with the kernel); the GPU suite still builds every kernel in full.
- ``ptx``: Warp's own full compile (its bundled NVRTC, optimization level 3, to the
  target's machine code), what Warp does when it loads a module on a GPU.

What a dataset records about its level (``compiler_record``) holds no machine path.
"""

from __future__ import annotations

import functools

from .. import defaults, warp_boundary
from . import frontend
from .resources import resource_options

COMPILE_LEVELS = ("frontend", "ptx")
DEFAULT_COMPILE_LEVEL = defaults.COMPILE_LEVEL
_RECORDED_INCLUDE_DIR = "<warp>/native"  # Warp's headers, wherever Warp is installed
DEFAULT_ARCH_FOR_INFO = 86  # any supported arch: the version does not depend on it


def check_level(level: str) -> str:
    if level not in COMPILE_LEVELS:
        raise ValueError(f"--compile {level!r}: use {' or '.join(COMPILE_LEVELS)}")
    return level


def compile_check(cuda_source: str, *, arch: int, level: str) -> tuple[bool, str]:
    """(ok, log) of one translation unit at ``level``."""
    if check_level(level) == "frontend":
        return frontend.frontend_check(cuda_source, arch=arch)
    return warp_boundary.nvrtc_compile(cuda_source, warp_boundary.NvrtcOptions(arch=arch))


@functools.cache
def nvrtc_version(level: str) -> str:
    """The NVRTC version a ``level`` check runs (a row records it)."""
    if check_level(level) == "frontend":
        return frontend.nvrtc_info(DEFAULT_ARCH_FOR_INFO).version
    return frontend.required_version()


def compiler_record(arch: int, level: str, resources: bool = False) -> dict:
    """Level, NVRTC version and options, for rows and manifests (with ``resources``, the
    options of the build that measured them, too).

    For ``frontend`` this loads the standalone NVRTC, so a missing or mismatched one
    fails here, before any work (``frontend.NvrtcUnavailable``, one line)."""
    if check_level(level) == "frontend":
        version = frontend.nvrtc_info(arch).version
        options = frontend.warp_options(arch, include_dir=_RECORDED_INCLUDE_DIR) + [frontend.SYNTAX_ONLY]
        source = frontend.NVRTC_PACKAGE
    else:
        version = frontend.required_version()  # the build linked into warp.so
        options = frontend.warp_options(arch, include_dir=_RECORDED_INCLUDE_DIR)
        source = "warp-lang (bundled)"
    record = {"level": level, "nvrtc_version": version, "nvrtc_from": source, "options": options}
    if resources:
        record["resources"] = {"nvrtc_from": frontend.NVRTC_PACKAGE, "options": resource_options(arch)}
    return record
