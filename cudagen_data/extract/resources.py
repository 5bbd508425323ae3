"""What each kernel uses, as NVIDIA's compiler reports it (``cudagen produce --resources``).

The row's translation unit (preamble + device functions + forward + backward) is built
to machine code for a real arch (``sm_{arch}`` CUBIN) by NVIDIA's standalone NVRTC of
Warp's build (extract/frontend.py), with Warp's own options plus ``--ptxas-options=-v``.
ptxas then writes, per entry function, into NVRTC's program log::

    ptxas info    : Compiling entry function 'k_cuda_kernel_forward' for 'sm_86'
    ptxas info    : Function properties for k_cuda_kernel_forward
    ptxas         .     32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 26 registers, used 0 barriers, 32 bytes cumulative stack size, 1024 bytes smem, ...

These lines are the measurement; nothing here reads PTX or machine code.  The PTX size is
NVRTC's own (``nvrtcGetPTXSize``).  Each row is built alone, exactly as ``cudagen validate``
rebuilds it, so its figures never depend on the kernels it was produced with (ptxas is
deterministic: the same unit, options and version give the same report).

What it cannot see: dynamic shared memory (a launch parameter; Warp's tile kernels take
theirs statically), and what the driver's JIT would do for another arch than the row's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..contracts.row import ResourceInfo
from . import frontend
from .codegen import ExtractedKernel

PTXAS_VERBOSE = "--ptxas-options=-v"
RESOURCE_OPTIONS = (PTXAS_VERBOSE,)  # added to Warp's options (frontend.warp_options)

_ENTRY_RE = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for 'sm_(\d+)'")
_PROPERTIES_RE = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"ptxas info\s*: Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_GLOBAL_NAME_RE = re.compile(r"__global__\s+void\s+(\w+)\s*\(")


class ResourceError(Exception):
    """The full compile failed, or ptxas did not report on a kernel (one line)."""


@dataclass(frozen=True)
class FunctionUsage:
    """ptxas's report on one entry function."""

    arch: int
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    local_bytes: int  # the stack frame: per-thread local memory


def parse_ptxas_report(log: str) -> dict[str, FunctionUsage]:
    """Entry function name -> its usage, from ptxas's ``-v`` lines in a compile log.

    A function's stack-frame line follows its "Function properties" line; its "Used N
    registers" line follows its "Compiling entry function" line.  Entries missing either
    are left out (the caller says which kernel has no report)."""
    entry: tuple[str, int] | None = None
    properties_for: str | None = None
    frames: dict[str, tuple[int, int, int]] = {}
    used: dict[str, tuple[int, int, int]] = {}  # name -> (arch, registers, smem)
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            entry = (m.group(1), int(m.group(2)))
        elif m := _PROPERTIES_RE.search(line):
            properties_for = m.group(1)
        elif (m := _FRAME_RE.search(line)) and properties_for is not None:
            frames[properties_for] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            properties_for = None
        elif (m := _USED_RE.search(line)) and entry is not None:
            smem = _SMEM_RE.search(line)
            used[entry[0]] = (entry[1], int(m.group(1)), int(smem.group(1)) if smem else 0)
            entry = None
    return {
        name: FunctionUsage(arch, regs, frames[name][1], frames[name][2], smem, frames[name][0])
        for name, (arch, regs, smem) in used.items()
        if name in frames
    }


def entry_name(cuda_function: str) -> str | None:
    """The name of the ``__global__`` function in a row's ``cuda_forward`` / ``cuda_backward``."""
    m = _GLOBAL_NAME_RE.search(cuda_function)
    return m.group(1) if m else None


def measure_unit(
    translation_unit: str, forward: str, backward: str, *, arch: int, extra_options: tuple[str, ...] = ()
) -> ResourceInfo:
    """Build ``translation_unit`` for ``sm_{arch}`` and read ptxas's report on its forward
    (and backward, when ``backward`` is not empty).  ``extra_options`` are for tests
    (``--maxrregcount=N`` forces spills); rows are measured with Warp's options only."""
    ok, log, ptx_bytes = frontend.full_build(
        translation_unit, arch=arch, extra_options=RESOURCE_OPTIONS + tuple(extra_options)
    )
    if not ok:
        first = next((ln for ln in log.splitlines() if "error" in ln), log.splitlines()[0] if log else "")
        raise ResourceError(f"the full compile failed: {first}")
    report = parse_ptxas_report(log)
    usage = {}
    for kind, text in (("forward", forward), ("backward", backward)):
        if not text:
            continue
        name = entry_name(text)
        if name is None or name not in report:
            raise ResourceError(f"ptxas reported nothing on the {kind} ({name or 'no __global__ function'})")
        if report[name].arch != arch:
            raise ResourceError(f"ptxas built the {kind} for sm_{report[name].arch}, not sm_{arch}")
        usage[kind] = report[name]
    fwd, bwd = usage["forward"], usage.get("backward")
    return ResourceInfo(
        arch=arch,
        ptx_bytes=ptx_bytes,
        forward_registers=fwd.registers,
        forward_spill_store_bytes=fwd.spill_store_bytes,
        forward_spill_load_bytes=fwd.spill_load_bytes,
        forward_shared_bytes=fwd.shared_bytes,
        forward_local_bytes=fwd.local_bytes,
        backward_registers=bwd.registers if bwd else None,
        backward_spill_store_bytes=bwd.spill_store_bytes if bwd else None,
        backward_spill_load_bytes=bwd.spill_load_bytes if bwd else None,
        backward_shared_bytes=bwd.shared_bytes if bwd else None,
        backward_local_bytes=bwd.local_bytes if bwd else None,
    )


def measure_kernel(kernel: ExtractedKernel, *, arch: int) -> ResourceInfo:
    """A generated kernel's resources, built alone (as its row rebuilds it)."""
    return measure_unit(kernel.translation_unit(), kernel.forward, kernel.backward, arch=arch)


def resource_options(arch: int) -> list[str]:
    """The options of a resources build, as a manifest records them (no machine path)."""
    return frontend.warp_options(arch, include_dir="<warp>/native") + list(RESOURCE_OPTIONS)
