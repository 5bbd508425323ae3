"""The compile check at the speed of NVRTC's front end.

Warp compiles a module with the NVRTC it links statically; three quarters of that
time is LibNVVM optimizing and emitting code that a compile *check* throws away.
This module runs NVIDIA's standalone NVRTC of the same build (PyPI
``nvidia-cuda-nvrtc``, pinned to the version Warp bundles) through ctypes, with
Warp's exact options plus ``--fdevice-syntax-only``: parsing, semantic analysis and
template instantiation, no optimizer, no code generation (~13x faster on a
30-kernel unit).  It needs neither a GPU nor a driver, and imports nothing of Warp.

    >>> ok, log = frontend_check(cuda_source, arch=86)

``cuda_source`` is a whole translation unit as Warp compiles it (its preamble, which
includes ``builtin.h`` from Warp's ``native`` folder, then the kernels).  ``log`` is
NVRTC's program log ("" when it compiles), e.g.
``cudagen.cu(61): error: identifier "this_is_not_cuda" is undefined`` (paths into
Warp's headers are written ``warp/native/...``, never this machine's).

An arch NVRTC does not support raises ``ValueError``.  A missing NVRTC, or one of
another version than Warp's, raises
:class:`NvrtcUnavailable` with a one-line message naming what to install.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

NVRTC_PACKAGE = "nvidia-cuda-nvrtc"
# The NVRTC each Warp release links (its warp.so says "Cuda compilation tools, release
# 13.4, V13.4.92"); the standalone library must be the same build to give the same verdict.
WARP_NVRTC_VERSIONS = {"1.19.0": "13.4.92"}
PROGRAM_NAME = "cudagen.cu"  # what compile logs call the unit (Warp's check uses the same)
SYNTAX_ONLY = "--fdevice-syntax-only"

# Warp's optimization level for CUDA modules; NVRTC parses this option even when it does
# not optimize, so it is passed as Warp passes it.
WARP_OPT_LEVEL = 3


class NvrtcUnavailable(RuntimeError):
    """The standalone NVRTC is missing or not the version Warp bundles (one-line message)."""


@dataclass(frozen=True)
class NvrtcInfo:
    """What a row or manifest records about the compiler that checked it."""

    package: str
    version: str
    options: tuple[str, ...]  # for the arch asked; the include path is Warp's native folder


def warp_options(
    arch: int, *, include_dir: str, opt_level: int = WARP_OPT_LEVEL, precompiled_headers: bool = False
) -> list[str]:
    """Warp 1.19's NVRTC options for a CUDA module (wp_cuda_compile_program and
    append_common_nvrtc_compile_options in warp/native/warp.cu: CUBIN output, not debug,
    no verify_fp, no fast math, fused multiply-add, no line info, mathdx built in).

    ``precompiled_headers`` (``-pch``, Warp's ``wp.config.use_precompiled_headers``) is off:
    it would check a one-kernel unit in ~80 ms instead of ~550 ms, but NVRTC 13 writes a
    ~76 MB header file per process and preamble into /tmp/__nvrtc_auto_pch_<pid>_<n>/,
    never removes it, and names it in the compile log."""
    ofast = {0: "mid", 1: "mid", 2: "min"}.get(opt_level, "0")  # NVRTC 13.1+ maps level 0 to "mid" too
    return [
        f"--gpu-architecture=sm_{arch}",
        f"--include-path={include_dir}",
        *(["-pch"] if precompiled_headers else []),
        "--std=c++17",
        f"--Ofast-compile={ofast}",
        "--define-macro=NDEBUG",
        "--undefine-macro=WP_VERIFY_FP",
        "--define-macro=WP_ENABLE_MATHDX=1",
        "--fmad=true",
        "--device-as-default-execution-space",
        "--extra-device-vectorization",
        "--restrict",
        "--diag-suppress=177,550",
    ]


def warp_include_dir() -> str:
    """Warp's ``native`` folder (the headers the generated CUDA includes), found without
    importing Warp."""
    spec = importlib.util.find_spec("warp")
    if spec is None or not spec.submodule_search_locations:
        raise NvrtcUnavailable("warp-lang is not installed (the compile check needs its CUDA headers)")
    return os.path.join(list(spec.submodule_search_locations)[0], "native")


def frontend_options(arch: int) -> list[str]:
    """Warp's options for ``arch`` plus the front-end-only switch."""
    return warp_options(arch, include_dir=warp_include_dir()) + [SYNTAX_ONLY]


class _Nvrtc:
    """The loaded library (one per process)."""

    def __init__(self) -> None:
        version = required_version()
        try:
            found = importlib.metadata.version(NVRTC_PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            raise NvrtcUnavailable(f"{_need(version)} (not installed)") from None
        if found != version:
            raise NvrtcUnavailable(f"{_need(version)} (found {found})")
        lib_dir = _library_dir()
        path = os.path.join(lib_dir, "libnvrtc.so.13")
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as exc:
            raise NvrtcUnavailable(f"{_need(version)} ({path}: {exc})") from None
        lib = self.lib
        p = ctypes.c_void_p
        lib.nvrtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
        lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(p), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, p, p]
        lib.nvrtcCompileProgram.argtypes = [p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.nvrtcGetProgramLogSize.argtypes = [p, ctypes.POINTER(ctypes.c_size_t)]
        lib.nvrtcGetProgramLog.argtypes = [p, ctypes.c_char_p]
        lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(p)]
        lib.nvrtcGetPTXSize.argtypes = [p, ctypes.POINTER(ctypes.c_size_t)]
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        if f"{major.value}.{minor.value}" != ".".join(version.split(".")[:2]):
            raise NvrtcUnavailable(f"{_need(version)} ({path} is NVRTC {major.value}.{minor.value})")
        self.version = version
        self.include_dir = warp_include_dir()
        count = ctypes.c_int()
        lib.nvrtcGetNumSupportedArchs(ctypes.byref(count))
        archs = (ctypes.c_int * count.value)()
        lib.nvrtcGetSupportedArchs(archs)
        self.supported_archs = frozenset(archs)

    def options(self, arch: int, extra: Sequence[str] = (SYNTAX_ONLY,)) -> list[str]:
        if arch not in self.supported_archs:
            supported = ", ".join(str(a) for a in sorted(self.supported_archs))
            raise ValueError(f"arch {arch} is not supported by NVRTC {self.version} (supported: {supported})")
        return warp_options(arch, include_dir=self.include_dir) + list(extra)

    def compile(self, source: str, options: Sequence[str]) -> tuple[bool, str]:
        lib = self.lib
        prog = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), PROGRAM_NAME.encode(), 0, None, None))
        try:
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            res = lib.nvrtcCompileProgram(prog, len(options), opts)
            if res == 0:
                return True, ""
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)))
            buf = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetProgramLog(prog, buf))
            log = buf.value.decode("utf-8", "replace").strip()
            # Notes point into Warp's headers by absolute path: keep the log free of this machine.
            log = log.replace(self.include_dir + os.sep, "warp/native/")
            return False, log or lib.nvrtcGetErrorString(res).decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def build(self, source: str, options: Sequence[str]) -> tuple[bool, str, int]:
        """A compile that keeps its log on success too (ptxas's ``-v`` report is in it);
        (ok, log, PTX bytes: 0 when it failed)."""
        lib = self.lib
        prog = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), PROGRAM_NAME.encode(), 0, None, None))
        try:
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            res = lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)))
            buf = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetProgramLog(prog, buf))
            log = buf.value.decode("utf-8", "replace").strip().replace(self.include_dir + os.sep, "warp/native/")
            if res != 0:
                return False, log or lib.nvrtcGetErrorString(res).decode(), 0
            ptx = ctypes.c_size_t()
            self._check(lib.nvrtcGetPTXSize(prog, ctypes.byref(ptx)))
            return True, log, ptx.value - 1  # the size counts the terminating NUL
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _check(self, res: int) -> None:
        if res != 0:
            raise RuntimeError(f"NVRTC: {self.lib.nvrtcGetErrorString(res).decode()}")


def required_version() -> str:
    """The NVRTC version of the installed Warp."""
    try:
        warp_version = importlib.metadata.version("warp-lang")
    except importlib.metadata.PackageNotFoundError:
        raise NvrtcUnavailable("warp-lang is not installed (the compile check mirrors its NVRTC)") from None
    version = WARP_NVRTC_VERSIONS.get(warp_version)
    if version is None:
        known = ", ".join(f"warp-lang {w} (NVRTC {v})" for w, v in WARP_NVRTC_VERSIONS.items())
        raise NvrtcUnavailable(
            f"warp-lang {warp_version}: its NVRTC version is not known to this check (known: {known}); use --compile "
            "ptx"
        )
    return version


def _need(version: str) -> str:
    return (
        f"the front-end compile check needs NVIDIA's NVRTC {version}, the one Warp bundles: "
        f"pip install {NVRTC_PACKAGE}=={version}"
    )


def _library_dir() -> str:
    # Found through the installed distribution, not the ``nvidia`` package: other NVIDIA
    # wheels (PyTorch's CUDA 12 ones) may own an ``nvidia`` package earlier on the path.
    candidate = str(importlib.metadata.distribution(NVRTC_PACKAGE).locate_file("nvidia/cu13/lib"))
    if os.path.isdir(candidate):
        return candidate
    raise NvrtcUnavailable(f"{_need(required_version())} (its library folder nvidia/cu13/lib is missing)")


_loaded: _Nvrtc | None = None
_lock = threading.Lock()


def _nvrtc() -> _Nvrtc:
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _Nvrtc()
        return _loaded


def nvrtc_info(arch: int) -> NvrtcInfo:
    """Package, version and options of the front-end check for ``arch`` (loads the library,
    so a missing or mismatched NVRTC fails here, before any work)."""
    lib = _nvrtc()
    return NvrtcInfo(NVRTC_PACKAGE, lib.version, tuple(lib.options(arch)))


def full_build(cuda_source: str, *, arch: int, extra_options: Sequence[str]) -> tuple[bool, str, int]:
    """Compile one translation unit to machine code for ``sm_{arch}`` with Warp's options
    plus ``extra_options`` (no front-end switch: NVVM and ptxas run); (ok, program log, PTX bytes)."""
    lib = _nvrtc()
    return lib.build(cuda_source, lib.options(arch, extra_options))


def frontend_check(cuda_source: str, *, arch: int) -> tuple[bool, str]:
    """Parse and type-check one CUDA translation unit as Warp would compile it; (ok, log)."""
    lib = _nvrtc()
    return lib.compile(cuda_source, lib.options(arch))
