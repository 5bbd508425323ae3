"""A Warp module that compiles other CUDA in place of parts of what Warp generates.

``cudagen eval`` runs model-written CUDA exactly where Warp's own kernel would run: in
the kernel's module, launched by Warp.  Warp generates the module's CUDA inside
``Module._compile`` (its ``_run_codegen`` step); for one module object that step is
wrapped so that each recorded text, which must occur exactly once, is replaced by the
candidate's.  The module compiles in a kernel cache of its own (``fresh_kernel_cache``):
a cached binary is keyed by the Python kernel's hash, which every candidate for a row
shares, so a shared cache would hand one candidate another's binary.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence

from .runtime import warp


class SubstitutionMissing(Exception):
    """A recorded text is not (exactly once) in the CUDA this Warp generates for the module."""


@contextlib.contextmanager
def substituted_cuda(module, replacements: Sequence[tuple[str, str]]) -> Iterator[None]:
    """While the block runs, ``module`` compiles its generated CUDA with each
    ``(recorded, replacement)`` applied; compiling raises SubstitutionMissing where a
    recorded text is absent."""
    original = module._run_codegen

    def substituted(options, is_cpu):
        source, *rest = original(options, is_cpu)
        for recorded, replacement in replacements:
            if source.count(recorded) != 1:
                raise SubstitutionMissing("the recorded CUDA is not in the module this Warp generates")
            source = source.replace(recorded, replacement, 1)
        return (source, *rest)

    module._run_codegen = substituted  # this module object only
    try:
        yield
    finally:
        del module._run_codegen


@contextlib.contextmanager
def fresh_kernel_cache() -> Iterator[str]:
    """Warp's kernel cache points at a new empty folder for the block (removed after)."""
    wp = warp()
    saved = wp.config.kernel_cache_dir
    folder = tempfile.mkdtemp(prefix="cudagen-eval-", dir=saved)
    wp.config.kernel_cache_dir = folder
    try:
        yield folder
    finally:
        wp.config.kernel_cache_dir = saved
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def edited_cpu_forward(kernel, edit: Callable[[str], str | None]) -> Iterator[list[tuple[str, str]]]:
    """While the block runs, the CPU forward function of ``kernel`` that Warp generates
    for its module is passed through ``edit`` before it compiles (SubstitutionMissing
    where it is absent or ``edit`` leaves it unchanged).  Yields a list that receives
    (generated, edited) for each build.  Use with :func:`fresh_kernel_cache`: the edited
    module has the hash of the unedited one."""
    with edited_cpu_functions(kernel.module, [(kernel, "forward", edit)]) as edits:
        yield edits[0]


@contextlib.contextmanager
def edited_cpu_functions(
    module, edits: Sequence[tuple[object, str, Callable[[str], str | None]]]
) -> Iterator[list[list[tuple[str, str]]]]:
    """:func:`edited_cpu_forward` for many kernels of one module at once (one build):
    ``edits`` holds (kernel, "forward" or "backward", edit).  Yields, per edit, the list
    of (generated, edited) texts of each build."""
    original = module._run_codegen
    done: list[list[tuple[str, str]]] = [[] for _ in edits]

    def edited(options, is_cpu):
        source, *rest = original(options, is_cpu)
        if is_cpu:
            for (kernel, part, edit), record in zip(edits, done, strict=True):
                name = f"{kernel.get_mangled_name()}_cpu_kernel_{part}("  # hashed by now
                at = source.find(name)
                if at < 0:
                    raise SubstitutionMissing(f"the kernel's CPU {part} is not in the module this Warp generates")
                start = source.rfind("\n", 0, at) + 1
                end = source.find("\n}\n", at) + 3  # Warp closes a kernel function at column 0
                text = source[start:end]
                new = edit(text)
                if new is None or new == text:
                    raise SubstitutionMissing(f"the edit does not apply to the kernel's CPU {part}")
                record.append((text, new))
                source = source[:start] + new + source[end:]
        return (source, *rest)

    module._run_codegen = edited  # this module object only
    try:
        yield done
    finally:
        del module._run_codegen
