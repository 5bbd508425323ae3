"""Python source -> the CUDA C++ that Warp emits for each of its kernels.

The Warp side (generating one kernel alone, splitting the module text) is
:func:`cudagen_data.warp_boundary.emit_cuda`; this module turns a source into kernels
and reports what went wrong with the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import canonical, defaults, warp_boundary

DEFAULT_ARCH = defaults.ARCH
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

    @property
    def cuda_hash(self) -> str:
        """The hash rows carry as ``cuda_hash`` (dedup on CUDA text)."""
        return canonical.cuda_hash(self.forward, self.backward)

    @property
    def forward_lines(self) -> int:
        return self.forward.count("\n")

    @property
    def backward_lines(self) -> int:
        return self.backward.count("\n")


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
    source: str, *, block_dim: int = DEFAULT_BLOCK_DIM, arch: int = DEFAULT_ARCH, root: str | None = None
) -> ExtractReport:
    """Every kernel of ``source`` that Warp can generate, plus what went wrong with the rest.

    A syntax error is reported as one error; a failing top-level statement (a missing
    import, say) is reported and the kernels that do not need it still come out; a
    kernel Warp rejects is reported with its line.  Paths in the CUDA and in messages are
    machine-independent; ``root`` is the folder a user's files are named relative to.
    """
    report = ExtractReport()
    try:
        with warp_boundary.loaded_source(source) as loaded:
            report.errors.extend(
                KernelError(e.line, None, warp_boundary.scrub_paths(e.message, root)) for e in loaded.errors
            )
            for kernel in loaded.kernels():
                try:
                    report.kernels.append(generate_cuda(kernel, block_dim=block_dim, arch=arch, root=root))
                except Exception as exc:  # noqa: BLE001 - Warp raises many types for bad kernels
                    report.errors.append(_kernel_error(kernel, exc, loaded.filename, root))
    except SyntaxError as exc:
        report.errors.append(KernelError(exc.lineno or 0, None, f"SyntaxError: {exc.msg}"))
    return report


def extract_kernels(
    source: str, *, block_dim: int = DEFAULT_BLOCK_DIM, arch: int = DEFAULT_ARCH
) -> list[ExtractedKernel]:
    """Like :func:`extract_source`, but any problem (or no kernel at all) raises ExtractError."""
    report = extract_source(source, block_dim=block_dim, arch=arch)
    if report.errors:
        err = report.errors[0]
        raise ExtractError(f"line {err.line}: {err.message}")
    if not report.kernels:
        raise ExtractError("no @wp.kernel found")
    return report.kernels


def generate_cuda(
    kernel, *, block_dim: int = DEFAULT_BLOCK_DIM, arch: int = DEFAULT_ARCH, root: str | None = None
) -> ExtractedKernel:
    """Generate CUDA for one Warp kernel object, alone in its own module."""
    emitted = warp_boundary.emit_cuda(kernel, block_dim=block_dim, arch=arch, root=root)
    return ExtractedKernel(
        name=kernel.key,
        mangled_name=emitted.mangled_name,
        line=_def_line(kernel),
        preamble=emitted.preamble,
        device_functions=emitted.device_functions,
        forward=emitted.forward,
        backward=emitted.backward,
        block_dim=block_dim,
    )


def _def_line(kernel) -> int:
    """The line of the kernel's ``def`` (Warp's fun_lineno is the decorator's)."""
    return int(getattr(kernel.adj, "fun_def_lineno", None) or getattr(kernel.adj, "fun_lineno", 0) or 0)


def _kernel_error(kernel, exc: BaseException, filename: str, root: str | None = None) -> KernelError:
    """One line naming the kernel and the source line where Warp gave up."""
    # KeyError's str() is the repr of its argument: take the argument itself.
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    line = _def_line(kernel)
    found = re.findall(re.escape(filename) + r":(\d+)", text)
    if found:
        line = int(found[-1])
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    first = warp_boundary.scrub_paths(first.replace(filename, "<source>"), root)
    return KernelError(line, kernel.key, f"{type(exc).__name__}: {first}")
