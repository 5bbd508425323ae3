"""The worker pool: executors that run batches, and crash isolation by bisection.

Executors know nothing of what a batch does.
``InlineExecutor`` runs in the calling process (notebooks, tests, ``--workers 0``).
``ProcessExecutor`` runs a pool of worker processes (spawned, not forked: Warp and
LLVM hold threads and global state that a fork would copy half-way).  Both hand back
results in submission order through futures.  ``RayExecutor`` (ray_executor.py) runs the
same two methods over a Ray cluster; ``make_executor`` picks one.

An executor also says what a dead worker costs (``crash_loses_pool``: a process pool
loses every future, a Ray cluster only the dead task's) and how to run a group of slots
on its own while bisecting a crash (``run_alone``).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import spans
from ..bisect import bisect_failures

# How an executor reports that a worker died running a task: the task's future fails with
# this (or a subclass).  The scheduler then re-runs the task with crash isolation.  Every
# executor (a cluster one included) must report a dead worker this way.
WorkerLost = BrokenProcessPool


class InlineExecutor:
    workers = 1
    crash_loses_pool = True  # the crash takes this very process

    def submit(self, fn: Callable, *args: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - delivered through the future
            future.set_exception(exc)
        return future

    def close(self, *, kill: bool = False) -> None:
        pass


def _worker_init(parent_pid: int) -> None:
    started = time.monotonic()
    from .orphans import die_with_parent, use_private_tmp

    die_with_parent(parent_pid)  # a parent killed with -9 must not leave workers behind
    if sys.platform.startswith("linux"):
        use_private_tmp()  # nor their temporary files (Warp's precompiled header, kernel cache)
    # Ctrl-C is the parent's to handle: it commits what is done and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from .. import warp_boundary

    warp_boundary.warp()
    spans.note_worker_init(started)


class ProcessExecutor:
    crash_loses_pool = True  # a dead worker breaks the pool: every future fails

    def __init__(self, workers: int, max_tasks_per_child: int | None = None):
        self.workers = workers
        self._pool = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init,
            initargs=(os.getpid(),),
            max_tasks_per_child=max_tasks_per_child,
        )

    def submit(self, fn: Callable, *args: Any) -> cf.Future:
        try:
            return self._pool.submit(fn, *args)
        except BrokenProcessPool as exc:
            # A worker died before this submit: report it through the future like any other
            # failure, so the caller handles a crash in one place (when it reads results).
            future: cf.Future = cf.Future()
            future.set_exception(exc)
            return future

    def close(self, *, kill: bool = False) -> None:
        if kill:
            # Don't wait for batches in flight: they are not committed and will be re-run.
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.terminate()
        self._pool.shutdown(wait=not kill, cancel_futures=True)


EXECUTORS = ("local", "ray")
MAX_TASKS_PER_WORKER = 200  # recycling a worker now and then bounds what Warp/LLVM keep per module


def make_executor(workers: int, kind: str = "local", ray_address: str | None = None):
    """``kind`` "local": ``workers`` processes here (0: this process); "ray": Ray tasks on the
    cluster at ``ray_address``, or on a private local Ray with ``workers`` CPUs."""
    if kind == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(ray_address, num_cpus=workers if workers > 0 else None)
    if kind != "local":
        raise ValueError(f"--executor {kind!r}: use one of {', '.join(EXECUTORS)}")
    return InlineExecutor() if workers <= 0 else ProcessExecutor(workers, max_tasks_per_child=MAX_TASKS_PER_WORKER)


def run_in_fresh_process(fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` in a process of its own; raises WorkerLost if that process dies."""
    solo = make_executor(1)
    try:
        return solo.submit(fn, *args).result()
    finally:
        solo.close(kill=True)


def run_isolated(
    fn: Callable, items: Sequence, crashed: Callable[[Any], Any], *args: Any, run_alone: Callable = run_in_fresh_process
) -> list:
    """``fn(*args, items)`` on its own (``run_alone``: a fresh process, or a Ray task), for
    items that crashed a worker.

    ``fn`` returns one result per item.  On a crash, halve and retry (:mod:`..bisect`)
    down to single items, so only an item that crashes its process alone gets
    ``crashed(item)`` as its result; every other item gets what ``fn`` gives it.
    """

    def attempt(group: Sequence) -> list | None:
        try:
            return run_alone(fn, *args, list(group))
        except WorkerLost:
            return [crashed(group[0])] if len(group) == 1 else None

    return bisect_failures(list(items), attempt)


class PipeWorker:
    """A spawned process at the other end of a pipe: the worker handle of the pools that
    keep a CUDA context or an import per process (the GPU suite's, eval's, mining's).
    ``target(conn, *args)`` runs in the child; what travels on the pipe is the caller's,
    but ``None`` asks the child to stop."""

    def __init__(self, ctx, target: Callable, *args: Any):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()

    def send(self, message: Any) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            pass  # it died: the caller's loop sees its sentinel

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()

    def stop(self) -> None:
        self.send(None)
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.kill()

    def exit_reason(self) -> str:
        return exit_reason(self.proc.exitcode)


def exit_reason(code: int | None) -> str:
    """How a worker process ended, in words (``code``: its exit code)."""
    if code is not None and code < 0:
        try:
            return f"the worker process was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker process was killed by signal {-code}"
    return f"the worker process exited with code {code}"
