"""Mined kernels that step outside their arrays: found before they run, not executed.

A mined kernel's arguments are made up (:data:`.argspecs.EXTENT` per dimension), so a
kernel whose indices come from its file (a module constant grid size, a neighbour
``i + 1`` its program keeps inside a larger grid) can step outside them.  Unguarded, its
reads see whatever the heap holds there (rows that change from one mining run to the
next, test vectors no GPU reproduces) and its writes corrupt the run's heap.  So before
a kernel's CPU run is recorded:

- it is launched with each array fenced (:func:`launch_fenced`, in worker.run_isolated's
  child): the array ends (then, in a second launch, starts) exactly where :data:`FENCE`
  bytes of memory nobody may touch begin, so the first access past the end (before the
  start) is a fault that ends the child.  Every such access is caught, whether or not
  it changes an output: a loop ``range(offsets[v], offsets[v + 1])`` read one past the
  end whose body happens to change nothing for the value found there still reads memory
  a GPU holds otherwise (two guard fills compared would miss it).
- where it faults, :func:`outside` (from a process that must live on) fences one side of
  one array at a time, each launch in a child: read-only (a fault there is a write),
  then not even readable: "writes past the end of 'y'", "reads past the end of 'e_x',
  'e_z'".  Every array sits between zeros of its own, so what a kernel reads outside in
  these launches is the same in every run.
- the recorded run itself is made in :class:`execution.Guards` buffers, whose cells
  are compared bit for bit after the forward and after the backward (a write the fences
  did not see: the backward's).

Not caught: an access farther than :data:`FENCE` bytes from its array.  Off the CPU
(the GPU suite re-running recorded vectors) nothing is fenced or guarded: the buffers
are host memory, and the vectors passed here.
"""

from __future__ import annotations

import ctypes
import faulthandler
import mmap
import os
import resource
import signal
from collections.abc import Callable

import numpy as np

from .. import execution as execute
from .. import warp_boundary as warp_env
from ..spec import ArgSpec, KernelSpec
from . import values

SIDES = {"tail": "past the end of", "head": "before the start of"}
FENCE = 1 << 24  # bytes of fenced memory on the fenced side of an array
# A fenced child of outside() ends on its own even where the process that waits for it
# was killed (at worker.RUN_TIMEOUT_S): the kernel may loop forever.
FENCE_TIMEOUT_S = 20
_PROT_NONE, _PROT_READ = 0, mmap.PROT_READ


def guards(device: str) -> execute.Guards | None:
    """Guard cells for the recorded run on ``device`` (None off the CPU)."""
    return execute.Guards(1.0) if device == "cpu" else None


def launch_fenced(spec: KernelSpec, kernel, inputs: dict) -> None:
    """The forward on ``inputs`` with every array fenced at its end, then again at its
    start.  A kernel that steps outside ends THIS process (SIGSEGV; SIGFPE where it
    divides by a zero read on the side not fenced): call it in a process of its own
    (worker.run_isolated's child, which the worker then asks :func:`outside`)."""
    _quiet_faults()
    for side in SIDES:
        _launch(spec, kernel, inputs, Fences(side, lambda name: True))


def outside(spec: KernelSpec, kernel, inputs: dict) -> str:
    """Why a kernel is not run on ``inputs`` ("" when it stays inside its arrays, or where
    it faults as well with nothing fenced: its own crash, which its run reports): the
    sides of the arrays it writes, else reads, outside of.  Each launch in a child."""
    if not any(faults(spec, kernel, inputs, side, None, _PROT_NONE) for side in SIDES):
        return ""
    if faults(spec, kernel, inputs, "tail", "", _PROT_NONE):  # "": no array fenced, zeros all around
        return ""
    for verb, prot in (("writes", _PROT_READ), ("reads", _PROT_NONE)):
        named = _named(spec, lambda name, side, prot=prot: faults(spec, kernel, inputs, side, name, prot))
        if named:
            return f"{verb} {named}"
    return "reads or writes outside its arrays (only with every array fenced)"


def _named(spec: KernelSpec, hit: Callable[[str, str], bool]) -> str:
    """``past the end of 'x', 'y' and before the start of 'z'`` for the sides of the
    arrays where ``hit(name, side)`` ("" where none)."""
    found = {side: [repr(a.name) for a in spec.args if a.kind == "array" and hit(a.name, side)] for side in SIDES}
    return " and ".join(f"{SIDES[side]} {', '.join(names)}" for side, names in found.items() if names)


def faults(spec: KernelSpec, kernel, inputs: dict, side: str, only: str | None, prot: int) -> bool:
    """Whether the forward on ``inputs`` faults in a fence, launched in a child process
    with fences on ``side`` of array ``only`` (None: every array) of protection ``prot``.
    A child that ends by another signal (SIGFPE: the kernel's own, which its run then
    reports) is no fault; RuntimeError where the fences could not be made."""
    pid = os.fork()
    if pid == 0:  # child: a fault ends it with SIGSEGV
        code = _NOT_FENCED
        try:
            _quiet_faults()
            signal.alarm(FENCE_TIMEOUT_S)
            _launch(spec, kernel, inputs, Fences(side, lambda name: only is None or name == only, prot))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _NOT_FENCED:
        raise RuntimeError("the arrays could not be fenced")
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGSEGV, signal.SIGBUS)


_NOT_FENCED = 3  # the fenced child's exit code where making the fences or the launch raised


def _quiet_faults() -> None:
    """In a process a fence fault may end: the fault is an answer, not a crash to report
    (Python's fault handler) nor to dump (a core file)."""
    faulthandler.disable()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _launch(spec: KernelSpec, kernel, inputs: dict, fences: Fences) -> None:
    made = {a.name: values.warp_value(a, inputs[a.name], "cpu", False, fences) for a in spec.args}
    execute.launch(spec, kernel, values.launch_values(kernel, spec.args, {n: m[0] for n, m in made.items()}), "cpu")


class Fences:
    """Arrays for :func:`values.warp_value`, each the only data of a mapping with
    :data:`FENCE` bytes of zeros on either side.  An array ``fenced(name)`` is placed
    against its ``side`` ("tail": it ends where that side's zeros begin; "head": it starts
    where they end) and those zeros get protection ``prot`` (the other arrays' stay
    zeros).  Whatever a kernel reaches within the zeros is the same in every run.  The
    mappings live as long as this object."""

    def __init__(self, side: str, fenced: Callable[[str], bool], prot: int = _PROT_NONE) -> None:
        self.side, self.fenced, self.prot = side, fenced, prot
        self.maps: list[mmap.mmap] = []
        self._libc = ctypes.CDLL(None, use_errno=True)

    def array(self, arg: ArgSpec, value, device: str, requires_grad: bool):
        if arg.kind != "array":
            return execute.to_warp(arg, value, device, requires_grad)
        flat = np.ascontiguousarray(value).reshape(-1)
        pages = max(1, -(-flat.nbytes // mmap.PAGESIZE)) * mmap.PAGESIZE
        whole = mmap.mmap(-1, FENCE + pages + FENCE, flags=mmap.MAP_PRIVATE)
        self.maps.append(whole)
        start = FENCE + pages - flat.nbytes if self.side == "tail" else FENCE
        np.frombuffer(whole, dtype=flat.dtype, count=flat.size, offset=start)[:] = flat
        base = ctypes.addressof(ctypes.c_char.from_buffer(whole))
        if self.fenced(arg.name):
            fence = base + FENCE + pages if self.side == "tail" else base
            if self._libc.mprotect(ctypes.c_void_p(fence), ctypes.c_size_t(FENCE), self.prot) != 0:
                raise OSError(ctypes.get_errno(), "mprotect failed")
        wp = warp_env.warp()
        return wp.array(ptr=base + start, dtype=execute.warp_dtype(arg.dtype), shape=tuple(arg.shape), device=device)
