"""The Warp boundary: the only package that imports ``warp._src`` or changes Warp's state.

Warp's private internals (its code generator, module builder, NVRTC entry point, the
global function-name counter, the kernel cache) change between Warp versions.  Keeping
every use of them here means a Warp upgrade is a change to this package only;
``tests/test_structure.py`` fails if any other module imports ``warp._src``.

- :mod:`.runtime`: ``warp()`` (init once, quiet, private kernel cache), ``loaded_source``
  (a source as a throw-away module), ``release_module``, fd-2 capture
- :mod:`.emit`: the CUDA text Warp emits for one kernel, split into its parts, and
  :func:`.emit.postprocess_cuda`, the one place emitted text is rewritten
- :mod:`.nvrtc`: Warp's bundled NVRTC, called with named arguments
- :mod:`.paths`: machine-independent names for source files (``machine_independent_path``:
  what extract and mining record for a user's file), the rule the dataset card states
- :mod:`.modules`: many sources as one Warp module (CPU batch builds), GPU loads with a
  per-call PTX target arch, the compiled-source path in the kernel cache
- :mod:`.substitute`: a module that compiles other CUDA in place of parts of Warp's
  (``cudagen eval``), and a kernel cache of its own for such builds
"""

from .emit import EmittedCuda, emit_cuda, postprocess_cuda, preamble_length
from .modules import (
    BatchModule,
    batch_module,
    build_module,
    compile_module_to_ptx,
    compiled_source_path,
    load_module_on_gpu,
    nvrtc_pch_folders,
    open_batch_module,
    remove_nvrtc_pch,
    runtime_versions,
)
from .nvrtc import NvrtcOptions, nvrtc_compile, nvrtc_supported_archs
from .paths import PATH_RULE, machine_independent_path, scrub_paths
from .runtime import (
    LoadedSource,
    StatementError,
    captured_stderr,
    clear_private_cache,
    loaded_source,
    quiet_stderr,
    release_module,
    source_filename,
    warp,
)
from .substitute import (
    SubstitutionMissing,
    edited_cpu_forward,
    edited_cpu_functions,
    fresh_kernel_cache,
    substituted_cuda,
)

__all__ = [
    "PATH_RULE",
    "BatchModule",
    "EmittedCuda",
    "LoadedSource",
    "NvrtcOptions",
    "StatementError",
    "SubstitutionMissing",
    "batch_module",
    "build_module",
    "captured_stderr",
    "clear_private_cache",
    "compile_module_to_ptx",
    "compiled_source_path",
    "edited_cpu_forward",
    "edited_cpu_functions",
    "emit_cuda",
    "fresh_kernel_cache",
    "load_module_on_gpu",
    "nvrtc_pch_folders",
    "remove_nvrtc_pch",
    "loaded_source",
    "machine_independent_path",
    "nvrtc_compile",
    "nvrtc_supported_archs",
    "open_batch_module",
    "postprocess_cuda",
    "preamble_length",
    "quiet_stderr",
    "release_module",
    "runtime_versions",
    "scrub_paths",
    "source_filename",
    "substituted_cuda",
    "warp",
]
