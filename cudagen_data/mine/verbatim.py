"""Check mined CUDA against Warp's own code generation of the kernel's whole module.

Mining generates each kernel alone (a hasher over that one kernel).  Warp, when it loads
a module, generates all the module's kernels in one translation unit.  The forward and
backward of a mined kernel must appear in that unit verbatim: same mangled names, same
body.  Used by the tests and by ``benchmarks/bench_mine.py --verbatim``.
"""

from __future__ import annotations

from ..contracts.row import RealRow
from ..extract.codegen import DEFAULT_ARCH, DEFAULT_BLOCK_DIM
from ..warp_boundary import mining as warp_mining
from ..warp_boundary import postprocess_cuda
from .collect import collect
from .discover import SourceFile
from .worker import naming_root


def module_cuda_contains(src: SourceFile, rows: list[RealRow], arch: int = DEFAULT_ARCH) -> tuple[int, list[str]]:
    """(rows found verbatim, names of rows not found) for rows mined from ``src``."""
    found = collect(src)
    wanted = {(r.provenance.line, r.provenance.qualname) for r in rows}
    by_module: dict[int, tuple[object, list]] = {}
    for f in found.found:
        if (f.line, f.qualname) in wanted:
            by_module.setdefault(id(f.kernel.module), (f.kernel.module, []))[1].append(f.kernel)
    texts = [
        postprocess_cuda(warp_mining.module_cuda(kernels, block_dim=DEFAULT_BLOCK_DIM, arch=arch), naming_root(src))
        for _, kernels in by_module.values()
    ]
    text = "\n".join(texts)
    missing = []
    for r in rows:
        name = r.provenance.qualname + (f"[{r.provenance.overload}]" if r.provenance.overload else "")
        if r.cuda_forward not in text or (r.cuda_backward and r.cuda_backward not in text):
            missing.append(name)
    return len(rows) - len(missing), missing
