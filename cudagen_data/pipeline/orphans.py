"""Worker processes that die with their parent.

A parent killed with SIGKILL runs no clean-up, and a worker busy in a compile never
notices that its pool is gone: it lives on with parent pid 1, holding hundreds of MB.
``die_with_parent`` (called first thing in a worker) makes that impossible:

- on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker the moment
  the thread that started it ends (a pool's workers are started by the parent's main or
  manager thread, both of which live as long as the pool);
- everywhere, a daemon thread that checks every half second whether the parent pid
  changed and ends the process if so (native compiles release the GIL, so it runs
  during one).

The parent may also die between starting a worker and the worker's call to prctl;
both paths compare against the pid the parent passed, so that case is caught too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.5


def die_with_parent(parent_pid: int) -> None:
    """End this process when ``parent_pid`` is no longer its parent."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)  # the parent died before prctl took effect
    threading.Thread(target=_watch, args=(parent_pid,), name="die-with-parent", daemon=True).start()


def _watch(parent_pid: int) -> None:
    event = threading.Event()
    while not event.wait(POLL_SECONDS):
        if os.getppid() != parent_pid:
            os._exit(1)
