"""Warp's process-global state: init, config, the private kernel cache, loading sources.

This module initialises Warp, loads Python source text as a module (through linecache,
never a temporary file) and removes every trace of it again, so that a long-running
worker neither grows nor lets one kernel's state change another kernel's output.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import linecache
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

import xxhash

from ..contracts.reject import error_line

_initialised = False


def warp():
    """Import and initialise Warp once per process (quietly, CPU only is fine)."""
    global _initialised
    import warp as wp

    if not _initialised:
        wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module build timings
        if "WARP_CACHE_PATH" not in os.environ:
            # Every module we build is used once: keep the binaries in a private folder
            # that is emptied after each batch, not in the user's ~/.cache (GBs per run).
            wp.config.kernel_cache_dir = _private_cache()
        # Tile GEMMs through libmathdx would link opaque LTO blobs; keep the CUDA self-contained.
        wp.config.enable_mathdx_gemm = False
        with quiet_stderr():
            wp.init()
        if os.environ.get(CPU_PCH_ENV):
            _share_cpu_pch(wp, os.environ[CPU_PCH_ENV])
        _initialised = True
    return wp


# A folder where processes share Warp's CPU precompiled header (clang's, of Warp's
# builtin.h: ~1.5 s of CPU and ~5 MB, built by every process at its first CPU build, in a
# temporary folder of Warp's per process and thread).  Set, the first process to build one
# leaves a copy there and later processes start from it.  The test suite shares one per run.
CPU_PCH_ENV = "CUDAGEN_CPU_PCH_DIR"


def _share_cpu_pch(wp, shared: str) -> None:
    """Wrap Warp's CPU build so that it first copies into Warp's precompiled-header folder
    the headers other processes left in ``shared`` (for this Warp version and installation:
    a header names the files it was built from), and afterwards leaves there the ones it
    made.  A header is a cache of the same build: the object code and the rows are the
    same with it or without it (tests/test_cpu_build.py)."""
    build = wp._src.build
    folder = os.path.join(shared, f"warp-{wp.config.version}-{xxhash.xxh3_64_hexdigest(build.warp_home.encode())}")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:  # a folder this process cannot make: it builds its own header, as without the variable
        return
    original = build.build_cpu

    def build_cpu(*args, pch_dir=None, **kwargs):
        if pch_dir:
            _copy_missing(folder, pch_dir)
        original(*args, pch_dir=pch_dir, **kwargs)
        if pch_dir:
            _copy_missing(pch_dir, folder)

    build.build_cpu = build_cpu


def _copy_missing(source: str, target: str) -> None:
    """Copy the ``.pch`` files of ``source`` that ``target`` lacks, each whole or not at all
    (written beside, then renamed: another process may be reading ``target``).  A cache: a
    copy that fails (a folder gone, a full disk) costs a rebuild, never the build."""
    try:
        have = set(os.listdir(target))
        entries = [e for e in os.scandir(source) if e.name.endswith(".pch") and e.name not in have]
    except OSError:
        return
    for entry in entries:
        part = os.path.join(target, f".{entry.name}.{os.getpid()}.part")
        try:
            shutil.copyfile(entry.path, part)
            os.replace(part, os.path.join(target, entry.name))
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(part)


PRIVATE_TMP_PREFIX = "cudagen-worker-"  # + pid: a folder of one process's temporary files
_cache_dir: str | None = None


def _private_cache() -> str:
    global _cache_dir

    # named like a private temporary folder (pipeline/orphans.py): if this process is killed,
    # the next worker that starts removes it
    _cache_dir = tempfile.mkdtemp(prefix=f"{PRIVATE_TMP_PREFIX}{os.getpid()}-warp-cache-")
    atexit.register(shutil.rmtree, _cache_dir, True)
    return _cache_dir


def clear_private_cache() -> None:
    """Delete the binaries of modules built so far (a no-op with WARP_CACHE_PATH set)."""
    if _cache_dir is None:
        return
    import warp as wp

    for entry in os.scandir(wp.config.kernel_cache_dir):  # Warp adds a version folder
        if entry.is_dir() and entry.name.startswith("wp_"):
            shutil.rmtree(entry.path, ignore_errors=True)


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence C-level stderr (Warp prints driver notices there) for the block."""
    with captured_stderr():
        yield


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Capture what native code writes to file descriptor 2 during the block.

    NVRTC's compile log is printed by Warp's C++ code straight to fd 2, which
    ``sys.stderr`` redirection cannot see.  The captured text is appended to the
    yielded list when the block ends.
    """
    out: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            out.append(sink.read().decode("utf-8", "replace"))


def source_filename(source: str) -> str:
    """The pseudo file name a source is loaded under.

    Warp writes it into the generated CUDA (as ``// <file>:<line>`` comments), so it is
    derived from the text alone: the same source gives the same CUDA on any machine.
    """
    return f"<cudagen:{xxhash.xxh3_64_hexdigest(source.encode())}>"


@dataclass
class StatementError:
    """A top-level statement of a loaded source that raised."""

    line: int
    message: str


@dataclass
class LoadedSource:
    module: types.ModuleType
    filename: str
    errors: list[StatementError] = field(default_factory=list)

    def kernels(self) -> list:
        """The ``@wp.kernel`` objects the source defined, in source order."""
        wp = warp()
        found = [v for v in vars(self.module).values() if isinstance(v, wp.Kernel)]
        return sorted(found, key=lambda k: getattr(k.adj, "fun_lineno", 0))


_load_counter = 0


@contextlib.contextmanager
def loaded_source(source: str, *, fresh_function_names: bool = True) -> Iterator[LoadedSource]:
    """Execute ``source`` as a fresh module; remove it from every registry afterwards.

    Top-level statements run one by one, so a statement that fails (an import that is
    not installed, say) is recorded and the rest still run: kernels that do not depend
    on it still come out.  ``__name__`` is not ``"__main__"``, so a script's main block
    does not run.  Raises ``SyntaxError`` if the source does not parse.

    ``fresh_function_names`` restarts Warp's global counter of ``@wp.func`` names, whose
    value otherwise leaks into the generated code (``helper_0`` vs ``helper_7``).  Turn
    it off only when several sources must share one Warp module, where names must stay
    unique (CPU batch execution).
    """
    global _load_counter
    wp = warp()
    import warp._src.context as wp_context  # the global @wp.func name counter, user module registry

    tree = ast.parse(source)
    filename = source_filename(source)
    _load_counter += 1
    # The Python module name becomes the Warp module name; Warp hashes and emits names by
    # content, so this counter never reaches the generated code.
    module_name = f"cudagen_src_{_load_counter}"
    module = types.ModuleType(module_name)
    module.__file__ = filename
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sys.modules[module_name] = module
    loaded = LoadedSource(module=module, filename=filename)
    if fresh_function_names:
        wp_context.function_key_counts.clear()
    try:
        for stmt in tree.body:
            code = compile(ast.Module(body=[stmt], type_ignores=[]), filename, "exec")
            try:
                exec(code, module.__dict__)
            except Exception as exc:  # noqa: BLE001 - user code may raise anything
                loaded.errors.append(StatementError(stmt.lineno, error_line(exc)))
        yield loaded
    finally:
        sys.modules.pop(module_name, None)
        linecache.cache.pop(filename, None)
        warp_module = wp_context.user_modules.pop(module_name, None)
        if warp_module is not None:
            release_module(warp_module)
        module.__dict__.clear()
        del wp


def release_module(module) -> None:
    """Unload a Warp module we are done with and cut it out of Warp's module graph.

    Warp records each module in the ``dependents`` set of every module it references
    (``warp.math``, say, which lives for the whole process), so a module dropped from
    every registry still stays reachable with all its kernels and their code-generation
    state: about 10 MB of a worker's memory per 100 kernels executed, never returned.
    """
    module.unload()
    module._detach_references()  # Warp's own unlink from the modules it references
    for dep in tuple(module.dependents):  # and from modules that reference it, if any remain
        dep.references.discard(module)
    module.dependents.clear()


def unregister_kernel(module, kernel) -> None:
    """Remove a kernel from a module it was registered in (the inverse of register_kernel)."""
    module._live_kernels.discard(kernel)
    if module.kernels.get(kernel.key) is kernel:
        del module.kernels[kernel.key]
    module.mark_modified()
