"""Python source -> the CUDA C++ that Warp emits for each of its kernels.

Each kernel is generated in a module of its own (a hasher over that one kernel), so a
kernel's CUDA never depends on what else the file defines.  The generated module text is
split into the parts a dataset row keeps: the preamble (Warp's header, constant for a
Warp version and block size), the device functions and structs the kernel uses, and the
forward and backward ``__global__`` functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import warp_env

DEFAULT_ARCH = 86  # Ampere PTX: NVRTC-valid, and loadable by the driver on every newer GPU
DEFAULT_BLOCK_DIM = 256


class ExtractError(Exception):
    """A source, or one of its kernels, could not be turned into CUDA."""


@dataclass(frozen=True)
class ExtractedKernel:
    name: str
    mangled_name: str
    line: int
    preamble: str
    device_functions: str
    forward: str
    backward: str
    block_dim: int = DEFAULT_BLOCK_DIM

    def translation_unit(self) -> str:
        """Preamble + device functions + forward + backward: a module NVRTC compiles."""
        return "\n".join((self.preamble, self.device_functions, self.forward, self.backward))


@dataclass(frozen=True)
class KernelError:
    line: int
    kernel: str | None
    message: str


@dataclass
class ExtractReport:
    kernels: list[ExtractedKernel] = field(default_factory=list)
    errors: list[KernelError] = field(default_factory=list)


def extract_source(
    source: str, *, block_dim: int = DEFAULT_BLOCK_DIM, arch: int = DEFAULT_ARCH
) -> ExtractReport:
    """Every kernel of ``source`` that Warp can generate, plus what went wrong with the rest.

    A syntax error is reported as one error; a failing top-level statement (a missing
    import, say) is reported and the kernels that do not need it still come out; a
    kernel Warp rejects is reported with its line.
    """
    report = ExtractReport()
    try:
        with warp_env.loaded_source(source) as loaded:
            report.errors.extend(KernelError(e.line, None, e.message) for e in loaded.errors)
            for kernel in loaded.kernels():
                try:
                    report.kernels.append(generate_cuda(kernel, block_dim=block_dim, arch=arch))
                except Exception as exc:  # noqa: BLE001 - Warp raises many types for bad kernels
                    report.errors.append(_kernel_error(kernel, exc, loaded.filename))
    except SyntaxError as exc:
        report.errors.append(KernelError(exc.lineno or 0, None, f"SyntaxError: {exc.msg}"))
    return report


def extract_kernels(source: str, *, block_dim: int = DEFAULT_BLOCK_DIM, arch: int = DEFAULT_ARCH) -> list[ExtractedKernel]:
    """Like :func:`extract_source`, but any problem (or no kernel at all) raises ExtractError."""
    report = extract_source(source, block_dim=block_dim, arch=arch)
    if report.errors:
        err = report.errors[0]
        raise ExtractError(f"line {err.line}: {err.message}")
    if not report.kernels:
        raise ExtractError("no @wp.kernel found")
    return report.kernels


def generate_cuda(kernel, *, block_dim: int = DEFAULT_BLOCK_DIM, arch: int = DEFAULT_ARCH) -> ExtractedKernel:
    """Generate CUDA for one Warp kernel object, alone in its own module."""
    wp = warp_env.warp()
    from warp._src import codegen
    from warp._src.context import ModuleBuilder, ModuleHasher

    # Resolved exactly as Module.load resolves them, so the text is what Warp compiles when
    # the kernel is launched (in 1.19: the grid-stride launch form, WP_NO_BFLOAT16 ...).
    options = kernel.module.resolve_options(wp.config, block_dim) | {"output_arch": arch}
    builder = ModuleBuilder(kernel.module, options, ModuleHasher([kernel], options), target="cuda")
    text = builder.codegen("cuda")

    header_end = text.index(codegen.codegen_cast_macros) + len(codegen.codegen_cast_macros)
    preamble, body = text[:header_end], text[header_end:]
    forward_start = _line_start(body, body.index(codegen.cuda_kernel_forward_name(kernel) + "("))
    backward_name = codegen.cuda_kernel_backward_name(kernel) + "("
    backward_at = body.find(backward_name, forward_start)
    backward_start = _line_start(body, backward_at) if backward_at >= 0 else len(body)
    return ExtractedKernel(
        name=kernel.key,
        mangled_name=kernel.get_mangled_name(),
        line=_def_line(kernel),
        preamble=preamble,
        device_functions=_trim(body[:forward_start]),
        forward=_trim(body[forward_start:backward_start]),
        backward=_trim(body[backward_start:]),
        block_dim=block_dim,
    )


def _def_line(kernel) -> int:
    """The line of the kernel's ``def`` (Warp's fun_lineno is the decorator's)."""
    return int(getattr(kernel.adj, "fun_def_lineno", None) or getattr(kernel.adj, "fun_lineno", 0) or 0)


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


def _trim(part: str) -> str:
    part = part.strip("\n")
    return part + "\n" if part else ""


def _kernel_error(kernel, exc: BaseException, filename: str) -> KernelError:
    """One line naming the kernel and the source line where Warp gave up."""
    # KeyError's str() is the repr of its argument: take the argument itself.
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    line = _def_line(kernel)
    found = re.findall(re.escape(filename) + r":(\d+)", text)
    if found:
        line = int(found[-1])
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    first = first.replace(filename, "<source>")
    return KernelError(line, kernel.key, f"{type(exc).__name__}: {first}")
