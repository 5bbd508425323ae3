"""One GPU, many worker processes: who may launch while a timing runs.

A lock per GPU across processes (a file lock in the temp folder): the run stage takes it
shared around each launch and its synchronize (run.run_guarded), a timing takes it
exclusively around its launch loop (timing.py), so no other worker's kernel runs while
kernels are timed, and a timing waits for one launch in flight, not for a whole judge.
A turnstile (taken briefly by everyone, held by a waiting timing) keeps a stream of
shared holders from starving a timing.

Never nested across kinds within a process: a process holding it shared that asked for
it again would wait at the turnstile behind a waiting timing that waits for it (a
deadlock), so a nested request of a lock this process already holds is a no-op, and an
exclusive request inside a shared hold is an error.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator

LOCK_DIR = tempfile.gettempdir()
_held: dict[tuple[int, str], bool] = {}  # (pid, device) -> held exclusively (pid: a forked child holds nothing)


@contextlib.contextmanager
def gpu_lock(device: str, exclusive: bool) -> Iterator[None]:
    """Hold ``device``'s lock (shared or exclusive) for the block; nothing off the GPU."""
    if not device.startswith("cuda"):
        yield
        return
    key = (os.getpid(), device)
    if key in _held:
        if exclusive and not _held[key]:
            raise RuntimeError(f"{device}: exclusive GPU lock asked while this process holds it shared")
        yield
        return
    tag = device.replace(":", "_")
    gate_path = os.path.join(LOCK_DIR, f"cudagen-eval-{tag}-{os.getuid()}.gate")
    lock_path = os.path.join(LOCK_DIR, f"cudagen-eval-{tag}-{os.getuid()}.lock")
    with open(gate_path, "a") as gate, open(lock_path, "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        _held[key] = exclusive
        try:
            yield
        finally:
            del _held[key]
            fcntl.flock(lock, fcntl.LOCK_UN)
