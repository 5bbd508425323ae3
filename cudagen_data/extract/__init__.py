"""Python source -> Warp kernels -> CUDA (forward, backward, device functions) -> compile check."""

from .codegen import (
    DEFAULT_ARCH,
    DEFAULT_BLOCK_DIM,
    ExtractedKernel,
    ExtractError,
    ExtractReport,
    KernelError,
    extract_kernels,
    extract_source,
    generate_cuda,
)
from .nvrtc import CompileResult, batch_translation_unit, compile_units, nvrtc_compile

__all__ = [
    "DEFAULT_ARCH",
    "DEFAULT_BLOCK_DIM",
    "CompileResult",
    "ExtractError",
    "ExtractReport",
    "ExtractedKernel",
    "KernelError",
    "batch_translation_unit",
    "compile_units",
    "extract_kernels",
    "extract_source",
    "generate_cuda",
    "nvrtc_compile",
]
