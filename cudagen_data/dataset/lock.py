"""One writer per dataset folder, and no writer while a reader reads it: an OS lock on a
file in the folder's private state folder.

Every command that writes a dataset folder holds :func:`writer_lock` for as long as it
writes: ``produce`` (both executors: the lock is taken in the driver, in
``pipeline.producer.produce``), ``mine`` (around reading the synthetic rows and writing
``real``), ``negatives`` (``negatives.run.make_negatives``) and any new writer (``publish``
if it ever writes the card...): wrap the whole command in ``with writer_lock(folder):``.
Every command that reads one (``validate``, ``stats``, ``export``, ``eval``,
``gpu-validate``, ``publish``) holds :func:`reader_lock` for as long as it reads.

The lock is ``flock`` on ``.cudagen/lock``: a writer takes it exclusive
(``LOCK_EX | LOCK_NB``), a reader shared (``LOCK_SH | LOCK_NB``).  Nobody waits (a run can
take hours): a second writer gets :class:`FolderBusy` at once, one line naming the folder
and the pid holding it (the writer writes its pid in the file, for the message only); a
writer that finds only readers says a command is reading the folder; a reader that finds
a writer says a run is in progress.  Any number of readers read at once.  The kernel
releases a lock when its holder's descriptor closes, so a holder killed with ``kill -9``
leaves a file with a stale pid in it and no lock: it never blocks the next run.  Worker
processes are spawned, not forked (pipeline/pool.py), and Python opens descriptors
non-inheritable, so no worker keeps the lock after its driver died.

Readers create nothing, so they work on read-only folders; a folder without a lock file
(one no writer of this version wrote, or a single file of rows outside a dataset folder)
is read without a lock.  A writer empties the file when it ends (no pid stays in the folder:
two runs leave the same bytes) and keeps it, except a writer that wrote nothing (it refused a
foreign folder, a bad option): it leaves no trace, deleting the file and the folders it
created while it still holds the lock.  Deleting a lock file lets a process that opened it
before the deletion lock the deleted file afterwards, while another locks a new file of the
same name; so every process that locks the file checks, after ``flock``, that the name
still names the file it locked (same device and inode), and starts over if not.

Within one process the writer lock is re-entrant (``produce`` called from a command that
already holds it), since two flocks of one process on one file would refuse each other;
a reader lock taken while the process holds the writer lock is a no-op.
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
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
_held: dict[Path, int] = {}  # folder -> nesting depth of this process's writer_lock


class FolderBusy(DatasetError):
    """Another process is writing the folder (or, to a writer: reading it)."""


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


def _writing(root: Path, fd: int) -> FolderBusy:
    return FolderBusy(
        f"{root}: another cudagen process (pid {_holder(fd)}) is writing this folder; "
        "wait for it to end (a second writer would corrupt it)"
    )


def _reading(root: Path) -> FolderBusy:
    return FolderBusy(
        f"{root}: a cudagen command (validate, stats, export, eval, gpu-validate or publish) is reading this "
        "folder; wait for it to end, then run this again"
    )


def _names_it(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (not deleted, not replaced)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def _flock(fd: int, operation: int) -> bool:
    """``flock(fd, operation | LOCK_NB)``: False if another process holds a conflicting lock."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _BUSY:
            return False
        raise
    return True


def _open_for_writer(root: Path) -> tuple[int, list[Path]] | None:
    """Create the folder, ``.cudagen/`` and the lock file as needed and open the file;
    returns (fd, the folders this call created), or None if a folder was removed under
    it (a writer that wrote nothing cleaning up: try again)."""
    if root.exists() and not root.is_dir():
        raise DatasetError(f"{root}: not a folder (a file of that name exists); choose another path")
    created = [p for p in (root / STATE_DIR, *(root / STATE_DIR).parents) if not p.exists()]
    try:
        (root / STATE_DIR).mkdir(parents=True, exist_ok=True)
        return os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644), created
    except FileNotFoundError:
        return None
    except (FileExistsError, NotADirectoryError):
        raise DatasetError(f"{root}: a part of this path is a file, not a folder; choose another path") from None
    except PermissionError:
        raise DatasetError(f"{root}: no permission to write here; choose a folder you can write") from None
    except OSError as exc:
        raise DatasetError(f"{root}: cannot create or lock it ({exc.strerror})") from None


_TRIES = 100  # a try starts over when another process deleted the file under it: rare, and never for long


def _lock_for_writer(root: Path) -> tuple[int, list[Path]]:
    """The lock file's fd, locked exclusive, and the folders this writer created (deepest
    first); raises FolderBusy at once if another process holds the lock."""
    created: list[Path] = []
    for _ in range(_TRIES):
        opened = _open_for_writer(root)
        if opened is None:
            continue
        fd, more = opened
        created += [p for p in more if p not in created]
        try:
            if not _flock(fd, fcntl.LOCK_EX):
                if _flock(fd, fcntl.LOCK_SH):  # only readers hold it
                    raise _reading(root)
                raise _writing(root, fd)
        except OSError as exc:
            os.close(fd)
            raise DatasetError(f"{root / LOCK_FILE}: cannot lock it ({exc.strerror})") from None
        except FolderBusy:
            os.close(fd)
            raise
        if _names_it(fd, root / LOCK_FILE):
            return fd, sorted(created, key=lambda p: len(p.parts), reverse=True)
        os.close(fd)  # a writer that wrote nothing deleted the file after we opened it: start over
    raise DatasetError(f"{root / LOCK_FILE}: deleted under this process {_TRIES} times while locking it; try again")


def _entries(root: Path) -> set[str]:
    try:
        return set(os.listdir(root)) - {STATE_DIR}
    except FileNotFoundError:
        return set()


@contextmanager
def writer_lock(root: str | os.PathLike) -> Iterator[None]:
    """Hold the folder's writer lock (creating the folder and ``.cudagen/`` if needed).

    Raises FolderBusy when another process writes or reads the folder, DatasetError when
    the folder cannot be created or the lock file not opened (a path that is a file, no
    write permission)."""
    root = Path(root)
    key = _key(root)
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    fd, created = _lock_for_writer(root)
    try:
        before = _entries(root)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            os.ftruncate(fd, 0)  # no pid left in the folder: two runs leave the same bytes
            _remove_if_unused(root, created, before)
    finally:
        os.close(fd)  # releases the flock


def _remove_if_unused(root: Path, created: list[Path], before: set[str]) -> None:
    """A writer that wrote nothing (it refused a foreign folder, a bad option) leaves no
    trace: the lock file and the folders it created go.  Done while the lock is held; a
    process that opened the file before sees the name gone once it has locked it, and
    starts over (_lock_for_writer, _lock_for_reader)."""
    state_dir = root / STATE_DIR
    if state_dir not in created or _entries(root) != before or os.listdir(state_dir) != ["lock"]:
        return
    (root / LOCK_FILE).unlink()
    for folder in created:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            return  # not empty: something else was written there


def _lock_for_reader(root: Path) -> int | None:
    """The lock file's fd, locked shared; None if there is no lock file.  Raises
    FolderBusy at once if a writer holds it."""
    path = root / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None  # no lock file (or not ours to read): the reader reports what it cannot read
        try:
            if not _flock(fd, fcntl.LOCK_SH):
                raise FolderBusy(
                    f"{root}: a run is in progress (pid {_holder(fd)} is writing it); try again when it has ended"
                )
        except OSError:
            os.close(fd)
            return None  # a file system without flock: read unlocked, as before locks existed
        except FolderBusy:
            os.close(fd)
            raise
        if _names_it(fd, path):
            return fd
        os.close(fd)  # deleted (and maybe made again) after we opened it: start over


@contextmanager
def reader_lock(root: str | os.PathLike) -> Iterator[None]:
    """Hold ``root``'s lock shared while reading it: writers that start meanwhile refuse.

    Raises FolderBusy if a writer holds it.  Creates nothing; a path that is not a folder,
    or has no lock file, is read without a lock."""
    root = Path(root)
    fd = None if not root.is_dir() or _key(root) in _held else _lock_for_reader(root)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def refuse_if_writing(root: str | os.PathLike) -> None:
    """Raise FolderBusy if another process holds ``root``'s writer lock (a probe: holds nothing)."""
    with reader_lock(root):
        pass
