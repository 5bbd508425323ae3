"""Is the CUDA a row records the CUDA that Warp emits, and the CUDA that ran?

Two checks, both byte for byte:

- ``regenerate``: generate the row's CUDA again from ``python_source`` with the
  installed Warp, exactly as the producer did (extract_source, same block_dim and
  arch), and compare preamble hash, device functions, forward and backward.
- ``compiled_matches``: the translation unit Warp actually compiled for the GPU run
  (its ``.cu`` file in Warp's kernel cache) must start with the row's preamble and
  contain its device functions, forward and backward verbatim, so the GPU ran the
  recorded CUDA and not some other rendering of the same kernel.

A difference is *drift* when the installed Warp is not the version that made the row
(the text is expected to change between versions), and a failure otherwise.
"""

from __future__ import annotations

from .. import warp_boundary
from ..canonical import text_hash
from ..contracts.row import Row, is_real_row
from ..extract import DEFAULT_BLOCK_DIM, extract_source
from ..mine.locate import naming_root
from ..mine.locate import regenerate as regenerate_real


def parts(row: Row) -> tuple[tuple[str, str], ...]:
    """(name, recorded text) of the row's CUDA parts besides the preamble; a name is the
    attribute of Warp's generated kernel that holds the same part."""
    return (
        ("device_functions", row.device_functions),
        ("forward", row.cuda_forward),
        ("backward", row.cuda_backward),
    )


def regenerate(row: Row) -> list[str]:
    """The parts of the row's CUDA that the installed Warp renders differently ([] if none)."""
    if is_real_row(row):  # a mined kernel: generated again from its own file
        return regenerate_real(row)
    report = extract_source(row.python_source, block_dim=row.block_dim or DEFAULT_BLOCK_DIM, arch=row.compile.arch)
    kernel = next((k for k in report.kernels if k.name == row.kernel_name), None)
    if kernel is None:
        why = report.errors[0].message if report.errors else f"no kernel named {row.kernel_name!r}"
        return [f"codegen failed: {why}"]
    differs = [name for name, recorded in parts(row) if getattr(kernel, name) != recorded]
    if text_hash(kernel.preamble) != row.preamble_hash:
        differs.insert(0, "preamble")
    return differs


def compiled_matches(text: str, row: Row) -> list[str]:
    """The recorded parts missing from a compiled translation unit ([] if all are there).

    Warp's cache file names this machine's paths in source-location comments; rows name
    them machine-independently, so the file goes through the same post-processing first
    (a mined row's own files relative to the folder it was mined from)."""
    root = naming_root(row) if is_real_row(row) else None
    text = warp_boundary.postprocess_cuda(text, root)
    missing = []
    end = warp_boundary.preamble_length(text)
    if end < 0 or text_hash(text[:end]) != row.preamble_hash:
        missing.append("preamble")
    for name, recorded in parts(row):
        if recorded and recorded not in text:
            missing.append(name)
    return missing
