"""The CUDA text Warp emits for one kernel, generated alone and split into its parts.

Each kernel is generated in a module of its own (a hasher over that one kernel), so a
kernel's CUDA never depends on what else its file defines.  The module text is split
into the preamble (Warp's header, constant for a Warp version and block size), the
device functions and structs the kernel uses, and the forward and backward
``__global__`` functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from .paths import normalize_generated_text
from .runtime import warp


@dataclass(frozen=True)
class EmittedCuda:
    """What Warp emitted for one kernel (texts already through :func:`postprocess_cuda`)."""

    mangled_name: str
    preamble: str
    device_functions: str
    forward: str
    backward: str


def postprocess_cuda(text: str, root: str | None = None) -> str:
    """The one place where CUDA text Warp emitted is rewritten before anything keeps it.

    Warp writes the absolute path of a function's source file into the CUDA
    (``// /abs/.../site-packages/warp/_src/math.py:0`` above library device functions,
    ``#line`` directives with line info on): these become machine-independent
    (``// warp/_src/math.py:0``; a user's file relative to ``root``; see :mod:`.paths`), so
    extract, the producer, mining and the GPU re-check (of regenerated text and of the
    ``.cu`` file Warp compiled) all see the same text on any machine.
    """
    return normalize_generated_text(text, root)


def emit_cuda(kernel, *, block_dim: int, arch: int, root: str | None = None) -> EmittedCuda:
    """Generate CUDA for one Warp kernel object, alone in its own module (``root``: the
    folder a user's source files are named relative to, see :func:`postprocess_cuda`)."""
    wp = warp()
    from warp._src import codegen
    from warp._src.context import ModuleBuilder, ModuleHasher

    # Resolved exactly as Module.load resolves them, so the text is what Warp compiles when
    # the kernel is launched (in 1.19: the grid-stride launch form, WP_NO_BFLOAT16 ...).
    options = kernel.module.resolve_options(wp.config, block_dim) | {"output_arch": arch}
    builder = ModuleBuilder(kernel.module, options, ModuleHasher([kernel], options), target="cuda")
    text = postprocess_cuda(builder.codegen("cuda"), root)

    header_end = preamble_length(text)
    preamble, body = text[:header_end], text[header_end:]
    forward_start = _line_start(body, body.index(codegen.cuda_kernel_forward_name(kernel) + "("))
    backward_name = codegen.cuda_kernel_backward_name(kernel) + "("
    backward_at = body.find(backward_name, forward_start)
    backward_start = _line_start(body, backward_at) if backward_at >= 0 else len(body)
    return EmittedCuda(
        mangled_name=kernel.get_mangled_name(),
        preamble=preamble,
        device_functions=_trim(body[:forward_start]),
        forward=_trim(body[forward_start:backward_start]),
        backward=_trim(body[backward_start:]),
    )


def preamble_length(text: str) -> int:
    """Length of Warp's preamble at the start of a module's CUDA text (-1 if it has none).

    The preamble ends with Warp's cast macros, the last fixed text before module code."""
    warp()
    from warp._src import codegen

    end = text.find(codegen.codegen_cast_macros)
    return -1 if end < 0 else end + len(codegen.codegen_cast_macros)


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


def _trim(part: str) -> str:
    part = part.strip("\n")
    return part + "\n" if part else ""
