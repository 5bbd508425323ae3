"""Warp modules built from our sources: CPU batch builds, GPU loads, the kernel cache."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from .. import spans
from .runtime import captured_stderr, clear_private_cache, loaded_source, release_module, unregister_kernel, warp

_batch_counter = 0
# Warp calls clang's cc1 directly, so two things the clang driver turns off in release
# builds stay on for our CPU check builds: verifying the LLVM IR after every pass and
# keeping IR value names.  Neither changes the machine code; together they are ~20% of a
# CPU module build (tests/test_cpu_build.py: same outputs and gradients, bit for bit).
CPU_CHECK_FLAGS = "-disable-llvm-verifier -discard-value-names"


class BatchModule:
    """One Warp module that the kernels of many sources are gathered into (one CPU build).

    Kernels can be added, and taken out again before the next build (the gradient check
    swaps a float64 twin that Warp rejects for the row's own kernel in place).
    """

    def __init__(self, stack: contextlib.ExitStack, optimization_level: int):
        global _batch_counter
        wp = warp()
        from warp._src.context import Module

        _batch_counter += 1
        self.module = Module(f"cudagen_batch_{_batch_counter}", None)
        self.module.options["optimization_level"] = optimization_level
        if CPU_CHECK_FLAGS:  # the module option replaces Warp's global flags: keep them
            self.module.options["cpu_compiler_flags"] = (
                f"{wp.config.cpu_compiler_flags or '-march=native'} {CPU_CHECK_FLAGS}"
            )
        self._stack = stack

    def add(self, source: str, kernel_name: str, *, backward: bool = True) -> tuple[object | None, str]:
        """Load ``source`` and register its kernel ``kernel_name``: (kernel, "") or
        (None, why not).  ``backward=False`` builds no adjoint for it (a forward-only
        kernel's own module options are lost when it joins the shared module)."""
        wp = warp()
        try:
            # Shared module: @wp.func names must stay unique across the batch.
            loaded = self._stack.enter_context(loaded_source(source, fresh_function_names=False))
        except SyntaxError as exc:
            return None, f"SyntaxError: {exc.msg} (line {exc.lineno})"
        kernel = getattr(loaded.module, kernel_name, None)
        if not isinstance(kernel, wp.Kernel):
            return None, loaded.errors[0].message if loaded.errors else f"no kernel named {kernel_name!r}"
        kernel.module = self.module
        if not backward:
            kernel.options["enable_backward"] = False
        self.module.register_kernel(kernel)
        return kernel, ""

    def drop(self, kernel) -> None:
        """Take a kernel out again (one whose code generation failed), before the next build."""
        unregister_kernel(self.module, kernel)


@contextlib.contextmanager
def open_batch_module(*, optimization_level: int) -> Iterator[BatchModule]:
    """An empty :class:`BatchModule`; it and every source loaded into it are released
    when the block ends."""
    with contextlib.ExitStack() as stack:
        batch = BatchModule(stack, optimization_level)
        try:
            yield batch
        finally:
            release_module(batch.module)
            clear_private_cache()


@contextlib.contextmanager
def batch_module(
    sources: Sequence[tuple[str, str]], *, optimization_level: int, backward: Sequence[bool] | None = None
) -> Iterator[tuple[object, list, list[str]]]:
    """Load each ``(python_source, kernel_name)`` and gather its kernel into one Warp module.

    Yields ``(module, kernels, errors)``: the kernel object per source (None where the
    source failed to load or has no kernel of that name, the reason in ``errors``).
    ``backward[i]`` False: no adjoint for source i.  Everything is released when the
    block ends.
    """
    with open_batch_module(optimization_level=optimization_level) as batch:
        added = [
            batch.add(src, name, backward=backward[i] if backward is not None else True)
            for i, (src, name) in enumerate(sources)
        ]
        yield batch.module, [k for k, _ in added], [e for _, e in added]


@contextlib.contextmanager
def _without_cuda_pch(module, block_dim: int | None = None, enabled: bool = False) -> Iterator[None]:
    """Warp's precompiled headers off for one CUDA build of ``module``.

    For a CUDA build, NVRTC (CUDA 13+) writes a ~76 MB precompiled header of Warp's
    headers into /tmp/__nvrtc_auto_pch_<pid>_<n>/ and removes it only when the process
    exits normally (a killed process leaves it); a process that builds one module needs
    none.  The CPU build's clang header is shared by every module (reused), so it stays
    on: this wraps CUDA builds only.  Warp folds ``config.use_precompiled_headers`` into
    a module variant's options when it hashes it, and ``Module.load`` reuses those;
    a variant hashed with the header on is dropped, to be hashed again inside.
    (``Module._compile`` re-reads the config and rehashes by itself.)

    ``enabled``: on instead, for a process that builds many modules (one header, reused
    by every later module of the process): the eval and GPU-suite workers, whose pools
    remove a dead worker's header (``remove_nvrtc_pch``), and the GPU suite's dry run.
    Measured for one process: the dry run's NVRTC ~2x less CPU, the GPU suite's builds ~5x
    faster on an H200; 16 GPU-suite workers at once gained nothing (CUDA_STATE.md).
    Never after this process removed its own header: NVRTC then fails every build
    ("invalid PCH directory"), so they go without.
    """
    wp = warp()
    enabled = enabled and not _pch_removed
    if block_dim is None:
        block_dim = module.options["block_dim"]
    cached = module.resolved_options.get(block_dim)
    if cached is not None and bool(cached.get("use_precompiled_headers")) != enabled:
        module.hashers.pop(block_dim, None)
        module.resolved_options.pop(block_dim, None)
    saved = wp.config.use_precompiled_headers
    wp.config.use_precompiled_headers = enabled
    try:
        yield
    finally:
        wp.config.use_precompiled_headers = saved


_cpu_builds = 0  # CPU builds this process made: the first also builds clang's precompiled header


def build_module(module, device: str) -> str | None:
    """Build ``module`` for ``device``; the first line of the error, or None."""
    global _cpu_builds
    is_cpu = warp().get_device(device).is_cpu
    with captured_stderr() as log:
        try:
            if is_cpu:
                _cpu_builds += 1
                with spans.span("first_cpu_build" if _cpu_builds == 1 else "cpu_build"):
                    module.load(device, block_dim=1)
            else:
                with _without_cuda_pch(module):
                    module.load(device)
            return None
        except Exception as exc:  # noqa: BLE001
            message = str(exc).strip().splitlines()
    return (message[0] if message else "build failed") + (
        f" | {log[0].strip().splitlines()[0]}" if log and log[0].strip() else ""
    )


def load_module_on_gpu(module, device: str, *, block_dim: int, ptx_arch: int, precompiled_header: bool = False) -> str:
    """Compile and load ``module`` on a CUDA device; returns how it was built ("ptx sm_86").

    Where Warp emits PTX for this driver it targets ``ptx_arch``.  Warp reads that from
    its global config at load time, so it is set for this call only and restored.
    ``precompiled_header``: NVRTC's precompiled header on (the caller removes it with
    :func:`remove_nvrtc_pch` when its process is done).
    """
    wp = warp()
    dev = wp.get_device(device)
    saved = wp.config.ptx_target_arch
    wp.config.ptx_target_arch = ptx_arch
    try:
        with _without_cuda_pch(module, block_dim, enabled=precompiled_header):
            module.load(dev, block_dim=block_dim)
        return f"{dev.get_cuda_output_format()} sm_{dev.get_cuda_compile_arch()}"
    finally:
        wp.config.ptx_target_arch = saved


def compile_module_to_ptx(module, arch: int, folder: str, precompiled_header: bool = False) -> str:
    """Compile a module's CUDA to PTX in ``folder`` the way a GPU load would (no GPU
    needed); returns the translation unit Warp compiled.  ``precompiled_header``: as
    for :func:`load_module_on_gpu`."""
    with _without_cuda_pch(module, enabled=precompiled_header):
        module._compile(None, folder, f"module.sm{arch}.ptx", arch, use_ptx=True)
    return next(Path(folder).glob("*.cu")).read_text(encoding="utf-8")


def compiled_source_path(module, block_dim: int) -> str:
    """Where Warp's kernel cache keeps the source it compiled for this module variant."""
    wp = warp()
    ident = module.get_module_identifier(block_dim)
    return os.path.join(wp.config.kernel_cache_dir, ident, ident + ".cu")


def runtime_versions() -> dict[str, int | None]:
    """The CUDA driver and toolkit versions Warp found (None without a driver)."""
    warp()
    from warp._src.context import runtime

    return {"driver": runtime.driver_version, "toolkit": runtime.toolkit_version}


def nvrtc_pch_folders(pid: int) -> list[Path]:
    """The precompiled-header folders NVRTC (CUDA 13+) made for process ``pid``."""
    places = {Path(tempfile.gettempdir()), Path("/tmp")}
    return sorted(f for d in places for f in d.glob(f"__nvrtc_auto_pch_{pid}_*") if f.is_dir())


_pch_removed = False  # this process removed its own NVRTC header: its later CUDA builds go without


def remove_nvrtc_pch(pid: int) -> int:
    """Remove NVRTC's precompiled-header folders of process ``pid``; how many there were.
    This process's own: its later CUDA builds are made without one (NVRTC would fail them)."""
    global _pch_removed
    found = nvrtc_pch_folders(pid)
    for folder in found:
        shutil.rmtree(folder, ignore_errors=True)
    if found and pid == os.getpid():
        _pch_removed = True
    return len(found)
