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

A killed worker runs no clean-up either, and Warp leaves a temporary folder per worker
(its precompiled CPU header, ~5 MB) besides our kernel cache.  ``use_private_tmp``
puts every temporary file of a worker under one folder named with its pid, and
removes the folders of workers that are gone.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import shutil
import signal
import sys
import tempfile
import threading

from cudagen_data.warp_boundary.runtime import PRIVATE_TMP_PREFIX

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


TMP_PREFIX = PRIVATE_TMP_PREFIX  # folders named with their process id


def use_private_tmp() -> str:
    """Send this process's temporary files (``tempfile``) to a folder of its own, removed
    at exit; first remove such folders left by processes that no longer exist."""
    root = tempfile.gettempdir()
    for entry in os.scandir(root):
        if entry.name.startswith(TMP_PREFIX) and entry.is_dir(follow_symlinks=False):
            pid = entry.name[len(TMP_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not _running(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)
    private = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=root)
    tempfile.tempdir = private
    atexit.register(shutil.rmtree, private, True)
    return private


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a killed worker whose new parent does
    not reap it stays one)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
