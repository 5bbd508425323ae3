"""One writer per dataset folder: an OS lock in the folder's private state folder.

Every command that writes a dataset folder holds :func:`writer_lock` for as long as it
writes: ``produce`` (both executors: the lock is taken in the driver, in
``pipeline.producer.produce``), ``mine`` (around reading the synthetic rows and writing
``real``) and any new writer (``negatives``, ``publish`` if it ever writes the card...):
wrap the whole command in ``with writer_lock(folder):``.  A second
writer gets :class:`FolderBusy` at once (one line naming the folder and the pid holding
it); it never waits.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``.cudagen/lock``, which holds the holder's
pid (for the message only: the lock itself is the kernel's).  The kernel releases it when
the holder's file descriptor closes, so a holder killed with ``kill -9`` leaves a file
with a stale pid in it and no lock: it never blocks the next run.  Worker processes are
spawned, not forked (pipeline/pool.py), so none inherits the descriptor and keeps the
lock after its driver died.  The lock file is never deleted (``--overwrite`` keeps it):
deleting a locked file would let a second writer lock a new file of the same name.

Within one process the lock is re-entrant (``produce`` called from a command that
already holds it), since two flocks of one process on one file would refuse each other.

Readers (``validate``, ``stats``, ``export``, ``eval``, ``gpu-validate``, ``publish``) call
:func:`refuse_if_writing` first: while a writer holds the lock they stop with one line
saying a run is in progress (they do not wait: a run can take hours).  They create no
file, so they work on read-only folders.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .files import DatasetError

STATE_DIR = ".cudagen"
LOCK_FILE = f"{STATE_DIR}/lock"
_held: dict[Path, int] = {}  # folder -> nesting depth of this process's writer_lock


class FolderBusy(DatasetError):
    """Another process is writing the folder."""


def _key(root: Path) -> Path:
    return root.resolve()


def _holder(fd: int) -> str:
    """The pid written in the lock file (the holder may not have written it yet)."""
    for _ in range(20):
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        if text:
            return text
        time.sleep(0.025)
    return "unknown"


def _busy(root: Path, fd: int) -> FolderBusy:
    return FolderBusy(
        f"{root}: another cudagen process (pid {_holder(fd)}) is writing this folder; "
        "wait for it to end (a second writer would corrupt it)"
    )


@contextmanager
def writer_lock(root: str | os.PathLike) -> Iterator[None]:
    """Hold the folder's writer lock (creating the folder and ``.cudagen/`` if needed).

    Raises FolderBusy when another process holds it, DatasetError when the folder cannot
    be created or the lock file not opened (a path that is a file, no write permission)."""
    root = Path(root)
    key = _key(root)
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    if root.exists() and not root.is_dir():
        raise DatasetError(f"{root}: not a folder (a file of that name exists); choose another path")
    created = [p for p in (root / STATE_DIR, *(root / STATE_DIR).parents) if not p.exists()]
    try:
        (root / STATE_DIR).mkdir(parents=True, exist_ok=True)
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except (FileExistsError, NotADirectoryError):
        raise DatasetError(f"{root}: a part of this path is a file, not a folder; choose another path") from None
    except PermissionError:
        raise DatasetError(f"{root}: no permission to write here; choose a folder you can write") from None
    except OSError as exc:
        raise DatasetError(f"{root}: cannot create or lock it ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _busy(root, fd) from None
            raise DatasetError(f"{root / LOCK_FILE}: cannot lock it ({exc.strerror})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            os.ftruncate(fd, 0)  # no pid left in the folder: two runs leave the same bytes
            _remove_if_unused(root, created)
    finally:
        os.close(fd)  # releases the flock


def _remove_if_unused(root: Path, created: list[Path]) -> None:
    """A writer that wrote nothing (it refused a foreign folder, a bad option) leaves no
    trace: the lock file and the folders it created go.  Done while the lock is held; a
    process that opens the name afterwards locks a new file, and this one writes no more."""
    state_dir = root / STATE_DIR
    if state_dir not in created or [p.name for p in state_dir.iterdir()] != ["lock"]:
        return
    (root / LOCK_FILE).unlink()
    for folder in created:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            return  # not empty: something else was written there


def refuse_if_writing(root: str | os.PathLike) -> None:
    """Raise FolderBusy if another process holds ``root``'s writer lock (readers call this).

    Creates nothing; a path that is not a folder, or has no lock file, passes."""
    root = Path(root)
    path = root / LOCK_FILE
    if not path.is_file() or _key(root) in _held:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # unreadable: not ours to judge; the reader reports what it cannot read
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise FolderBusy(
                    f"{root}: a run is in progress (pid {_holder(fd)} is writing it); try again when it has ended"
                ) from None
            return
    finally:
        os.close(fd)
