"""Warp's bundled NVRTC, called through Warp's C API with every argument named."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from .paths import scrub_paths
from .runtime import captured_stderr, warp


@dataclass(frozen=True)
class NvrtcOptions:
    """The arguments of ``wp_cuda_compile_program`` (Warp's native/warp.cu), by name.

    Defaults are what Warp itself passes for a CUDA module, except that no output is kept
    (the check is whether the source compiles) and no kernel cache or LTO input is used.
    """

    arch: int
    optimization_level: int = 3
    program_name: bytes = b"cudagen.cu"
    arch_suffix: bytes = b""
    debug: bool = False
    verbose: bool = False
    verify_fp: bool = False
    fast_math: bool = False
    fuse_fp: bool = True
    lineinfo: bool = False
    compile_time_trace: bool = False
    precompiled_headers: bool = False
    output_path: bytes = os.devnull.encode()

    def c_arguments(self, cuda_source: str, include_dir: bytes) -> tuple:
        """The positional C arguments, in the order of Warp's ctypes ``argtypes``."""
        no_ltoirs = (ctypes.c_char_p * 0)(), (ctypes.c_size_t * 0)(), (ctypes.c_int * 0)()
        return (
            cuda_source.encode(),
            self.program_name,
            self.arch,
            self.arch_suffix,
            include_dir,
            0,  # num_cuda_include_dirs
            None,  # cuda_include_dirs
            self.debug,
            self.optimization_level,
            self.verbose,
            self.verify_fp,
            self.fast_math,
            self.fuse_fp,
            self.lineinfo,
            self.compile_time_trace,
            self.precompiled_headers,
            self.output_path,
            None,  # kernel_cache_dir
            0,  # num_ltoirs
            *no_ltoirs,  # ltoirs, ltoir_sizes, ltoir_input_types
        )


def nvrtc_supported_archs() -> set[int]:
    warp()
    from warp._src.context import runtime

    return set(runtime.nvrtc_supported_archs)


def nvrtc_compile(cuda_source: str, options: NvrtcOptions) -> tuple[bool, str]:
    """Compile one translation unit to PTX; returns (ok, compiler log)."""
    warp()
    from warp._src import build
    from warp._src.context import runtime

    if options.arch not in runtime.nvrtc_supported_archs:
        supported = ", ".join(str(a) for a in sorted(runtime.nvrtc_supported_archs))
        raise ValueError(f"arch {options.arch} is not supported by Warp's NVRTC (supported: {supported})")
    include_dir = os.path.join(build.warp_home, "native").encode()
    with captured_stderr() as log:  # NVRTC's log goes to fd 2 from C++
        err = runtime.core.wp_cuda_compile_program(*options.c_arguments(cuda_source, include_dir))
    return err == 0, _clean_log(log[0])


def _clean_log(text: str) -> str:
    # Warp's own summary line carries a path on NVIDIA's build machine: keep the error name only.
    # Headers NVRTC quotes are named from the `warp` package, not from this machine's install.
    text = scrub_paths(text)
    lines = []
    for line in text.splitlines():
        if line.startswith("Warp NVRTC compilation error"):
            line = line.split(" (", 1)[0]
        lines.append(line)
    return "\n".join(lines).strip()
