"""What mining needs from Warp's internals (``warp._src``), and nothing else.

- a hook that records every ``wp.Kernel`` created while a mined file is imported (a
  module's registry keeps only the last kernel of a name), and the kernels already in
  Warp's module registry;
- which array arguments a kernel reads and writes, as Warp's own code generation marks
  them;
- one CPU module holding kernels of many files for one LLVM build;
- the CUDA Warp generates for a whole module (to check mined text against it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from . import runtime as warp_env

_created: list = []  # kernels created inside importing_mined_file blocks (they live as long as the process)
_recording = 0  # how many importing_mined_file blocks are open
_hooked = False
_name_counts: dict = {}
_config: dict = {}


def install_kernel_hook() -> None:
    """Hook Warp's ``Kernel`` constructor, so that the kernels created inside
    :func:`importing_mined_file` blocks are recorded (idempotent).

    Only those: a kernel recorded stays alive with its module for the whole process, and
    ``cudagen validate -w 0`` of mined rows (or any process that mined in-process) goes on to
    make kernels of its own (re-runs, gradient checks), which must be freed as usual."""
    global _hooked
    if _hooked:
        return
    warp_env.warp()
    from warp._src.context import Kernel

    original = Kernel.__init__

    def recording_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if _recording:
            _created.append(self)

    Kernel.__init__ = recording_init
    _hooked = True
    import warp._src.context as wp_context

    _name_counts.update(wp_context.function_key_counts)
    import warp as wp

    _config.update({k: v for k, v in vars(wp.config).items() if not k.startswith("_") and _plain(v)})


@contextlib.contextmanager
def importing_mined_file() -> Iterator[None]:
    """Record every ``wp.Kernel`` created inside the block (a mined file's import, which may
    import other mined files): :func:`known_kernels` lists them from then on."""
    global _recording
    install_kernel_hook()
    _recording += 1
    try:
        yield
    finally:
        _recording -= 1


def forget_kernels_of(path: str) -> None:
    """Drop the recorded kernels defined in file ``path``: it is about to run again as a new
    module (a loose script is executed at each collection), which makes its kernels anew."""
    real = os.path.realpath(path)
    _created[:] = [k for k in _created if _defined_in(k) != real]


def _defined_in(kernel) -> str | None:
    code = getattr(kernel.func, "__code__", None)
    return None if code is None else os.path.realpath(code.co_filename)


def _plain(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def reset_process_state() -> None:
    """Undo what an earlier file did to Warp's process-wide state, before the next file.

    - ``wp.config``: files set it at import (``wp.config.mode = "debug"`` in one of Warp's
      own tests), and it changes the code Warp generates for every later module;
    - Warp numbers ``@wp.func`` names per process (``helper_0``, ``helper_1``, ...) and the
      number reaches the CUDA: the count restarts at what Warp itself left.
    So a file's kernels come out as when the file is imported alone, whatever a worker
    mined before it.
    """
    import warp as wp
    import warp._src.context as wp_context

    for key, value in _config.items():
        if getattr(wp.config, key, None) != value:
            setattr(wp.config, key, value)
    wp_context.function_key_counts.clear()
    wp_context.function_key_counts.update(_name_counts)


def known_kernels() -> list:
    """Kernels in Warp's module registry, then every kernel recorded by
    :func:`importing_mined_file`."""
    warp_env.warp()
    import warp._src.context as wp_context

    return [k for m in list(wp_context.user_modules.values()) for k in m.kernels.values()] + list(_created)


def array_access(kernel) -> dict[str, tuple[bool, bool]]:
    """{argument name: (read, written)} for the kernel's array arguments.

    Warp tracks this only with ``verify_autograd_array_access`` on, which is part of the
    module hash: so it runs in a throwaway code generation, never the recorded one.
    """
    wp = warp_env.warp()
    from warp._src.context import ModuleBuilder, ModuleHasher

    # CUDA target with an arch, as in the recorded generation (tile builtins need one).
    options = kernel.module.resolve_options(wp.config, 256) | {"verify_autograd_array_access": True, "output_arch": 86}
    with warp_env.quiet_stderr():
        ModuleBuilder(kernel.module, options, ModuleHasher([kernel], options), target="cuda")
    return {a.label: (bool(a.is_read), bool(a.is_write)) for a in kernel.adj.args}


_module_counter = 0


@contextlib.contextmanager
def cpu_module_of(kernels: Sequence, *, optimization_level: int | None, same_options: bool = False) -> Iterator[object]:
    """A fresh Warp module holding these (already created) kernels, for one build.

    An overload of a generic kernel is registered alone (not its parent, whose other
    overloads would be built too).  Each kernel's own module is given back when the
    block ends, and the shared module is released.
    ``same_options``: take the first kernel's module options (``enable_backward``, ...),
    so the module generates that kernel's code as its own module does (GPU re-check).
    """
    global _module_counter
    warp_env.warp()
    from warp._src.context import Module

    _module_counter += 1
    module = Module(f"cudagen_mined_run_{_module_counter}", None)
    if same_options and kernels:
        module.options = dict(kernels[0].module.options)
    if optimization_level is not None:
        module.options["optimization_level"] = optimization_level
    saved = []
    for k in kernels:
        saved.append((k, k.module))
        k.module = module
        module.register_kernel(k)
    try:
        yield module
    finally:
        for k, own in saved:
            k.module = own
        warp_env.release_module(module)
        warp_env.clear_private_cache()


def module_cuda(kernels: Sequence, *, block_dim: int, arch: int) -> str:
    """The CUDA Warp generates when it loads the module of ``kernels`` (all of them)."""
    wp = warp_env.warp()
    from warp._src.context import ModuleBuilder, ModuleHasher

    module = kernels[0].module
    options = module.resolve_options(wp.config, block_dim) | {"output_arch": arch}
    with warp_env.quiet_stderr():
        return ModuleBuilder(module, options, ModuleHasher(list(kernels), options), target="cuda").codegen("cuda")


def is_plain_array_type(t) -> bool:
    """``wp.array`` (or its ``wp.array[...]`` annotation): not indexed or fabric arrays."""
    return type(t).__name__ in ("array", "_ArrayAnnotation")


_LAYOUTS = {
    "array": "",
    "_ArrayAnnotation": "",
    "indexedarray": "indexed",
    "_IndexedArrayAnnotation": "indexed",
    "fabricarray": "fabric",
    "_FabricArrayAnnotation": "fabric",
    "indexedfabricarray": "indexedfabric",
    "_IndexedFabricArrayAnnotation": "indexedfabric",
}


def array_layout(t) -> str | None:
    """The spec layout of an array type ("" plain, "indexed", "fabric", "indexedfabric"),
    None for anything else (fabric arrays of arrays included)."""
    return _LAYOUTS.get(type(t).__name__)


def struct_fields(t) -> list[tuple[str, object]] | None:
    """[(field name, type), ...] of a ``@wp.struct`` type, None if ``t`` is not one."""
    warp_env.warp()
    from warp._src.codegen import Struct

    if not isinstance(t, Struct):
        return None
    return [(name, var.type) for name, var in t.vars.items()]


_FORWARD_LOOP = "for (size_t task_index = 0; task_index < dim->size; ++task_index)"
_REVERSED_LOOP = "for (size_t task_index = dim->size; task_index-- > 0; )"
THREAD_ORDER_OPTION = "cudagen_thread_order"  # a module option: only there so the build hash differs


@contextlib.contextmanager
def reversed_thread_order(module) -> Iterator[None]:
    """Build ``module`` for the CPU with its threads run last to first.

    Warp's CPU backend runs a launch's threads one after another, from 0 up, in a loop of
    its module template.  Outputs that depend on that order (a write at the slot an
    ``atomic_add`` returned, last-writer-wins scatters whose indices collide) come out
    differently when the loop runs backwards, as they may on a GPU.  The template is
    swapped only while the module is built (the build happens inside the block), and an
    extra module option keeps the kernel cache from handing back the usual build.
    """
    warp_env.warp()
    import warp._src.codegen as wp_codegen

    names = ("cpu_module_template_forward", "cpu_module_template_backward")
    saved = {n: getattr(wp_codegen, n) for n in names}
    for n in names:
        if _FORWARD_LOOP not in saved[n]:
            raise RuntimeError(f"Warp's {n} has no sequential thread loop to reverse")
    module.options[THREAD_ORDER_OPTION] = "reversed"
    module.mark_modified()
    try:
        for n in names:
            setattr(wp_codegen, n, saved[n].replace(_FORWARD_LOOP, _REVERSED_LOOP))
        yield
    finally:
        for n, text in saved.items():
            setattr(wp_codegen, n, text)
