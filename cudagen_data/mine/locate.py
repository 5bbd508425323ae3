"""Find the live Warp kernel a ``real`` row was mined from, on this machine.

A mined row's ``python_source`` is the kernel's definition only; it needs its file to
run.  Rows from an installed package (``provenance.package == "warp-lang"``) name their
file relative to the package's parent folder (``warp/tests/test_x.py``), so any machine
with the same package version can import that file again and collect the same kernel
(nested ones replayed), which is what the GPU suite re-generates and runs.  Rows mined
from a user's tree can be located when that tree's parent folder is given.
"""

from __future__ import annotations

from pathlib import Path

import xxhash

from ..contracts.row import RealRow
from ..extract.codegen import generate_cuda
from .collect import collect
from .discover import MineError, SourceFile, installed_warp_root
from .worker import naming_root as file_naming_root


def source_file_of(row: RealRow, user_root: str | Path | None = None) -> SourceFile:
    """The :class:`SourceFile` a row came from, or MineError saying why it cannot be found."""
    prov = row.provenance
    rel = prov.path
    if prov.package == "warp-lang":
        base = installed_warp_root().parent
        package = "warp-lang"
    elif user_root is not None:
        base = Path(user_root).resolve()
        package = prov.package
    else:
        raise MineError(f"{rel}: mined from a user's tree; its folder is not known here")
    path = base / rel
    if not path.is_file():
        raise MineError(f"{rel}: not found under {base.name or base}")
    root = base / rel.split("/")[0]
    return SourceFile(str(path), str(root), rel, package)


def kernel_of(row: RealRow, user_root: str | Path | None = None):
    """The ``wp.Kernel`` (the overload, for a generic kernel) the row was mined from."""
    prov = row.provenance
    found = collect(source_file_of(row, user_root))
    if found.import_error:
        raise MineError(f"{prov.path}: {found.import_error}")
    for f in found.found:
        if f.line == prov.line and f.qualname == prov.qualname:
            if prov.overload:
                kernel = f.kernel.overloads.get(prov.overload)
                if kernel is None:
                    continue
                return kernel
            return f.kernel
    raise MineError(f"{prov.path}:{prov.line}: kernel {prov.qualname} not found")


def regenerate(row: RealRow) -> list[str] | None:
    """Parts of a real row's CUDA that this machine's Warp generates differently ([] if
    none); None when the row's file is not here (a user's tree): not checked."""
    try:
        src = source_file_of(row)
        kernel = kernel_of(row)
    except MineError as exc:
        if row.provenance.package != "warp-lang":
            return None
        return [f"codegen failed: {exc}"]
    emitted = generate_cuda(kernel, arch=row.compile.arch, root=file_naming_root(src))
    differs = [
        name
        for name, recorded in (
            ("device_functions", row.device_functions),
            ("forward", row.cuda_forward),
            ("backward", row.cuda_backward),
        )
        if getattr(emitted, name) != recorded
    ]
    if xxhash.xxh3_64_hexdigest(emitted.preamble.encode()) != row.preamble_hash:
        differs.insert(0, "preamble")
    return differs


def naming_root(row: RealRow) -> str | None:
    """The folder this machine names the row's file relative to (None if not found here)."""
    try:
        return file_naming_root(source_file_of(row))
    except MineError:
        return None
