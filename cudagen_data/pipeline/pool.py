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

``PipePool`` is the pool of the GPU suite, eval, mining and negatives, whose workers keep state
(a CUDA context, a CPU reference, an imported file, clang's precompiled header) and stream results as they go; the
policies they differ in (time limits, what a crash costs, recycling) are parameters of the
pool and of each ``PipeTask``.  Produce's executors need none of that: a batch is pure.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import wait
from typing import Any

import threadpoolctl

from .. import spans, warp_boundary
from ..bisect import bisect_failures
from .orphans import die_with_parent, use_private_tmp

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


def blas_threads(workers: int) -> int:
    """The threads NumPy's BLAS may use in each of ``workers`` worker processes: their share
    of this machine's cores (all of them for one worker).  Left alone, each process's
    OpenBLAS starts a thread per core: 16 workers on 16 cores ran 16 x 16 threads, and 500
    pairs took 60.3 s against 47.1 s with one thread each (the 16-core machine; 2,000
    pairs: the same rows either way)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, workers))


def limit_blas_threads(threads: int) -> None:
    """NumPy's BLAS in this process uses at most ``threads`` threads from now on."""
    threadpoolctl.threadpool_limits(limits=threads, user_api="blas")


def init_warp_worker(parent_pid: int, blas: int | None = None) -> None:
    """First thing in a worker that runs Warp (produce's executor, negatives' pipe workers):
    :func:`prepare_worker`, NumPy's BLAS held to ``blas`` threads (:func:`blas_threads`),
    Warp imported and initialised, the time it took noted (spans)."""
    started = time.monotonic()
    # Ctrl-C is the parent's to handle: it commits what is done and stops the workers.
    prepare_worker(parent_pid)
    if blas is not None:
        limit_blas_threads(blas)
    warp_boundary.warp()
    spans.note_worker_init(started)


STUCK_SECONDS = 5.0  # a dead worker still unnoticed by the pool after this long: its reader is stuck


class ProcessExecutor:
    crash_loses_pool = True  # a dead worker breaks the pool: every future fails

    def __init__(self, workers: int, max_tasks_per_child: int | None = None):
        self.workers = workers
        self._pool = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=init_warp_worker,
            initargs=(os.getpid(), blas_threads(workers)),
            max_tasks_per_child=max_tasks_per_child,
        )
        self._closed = threading.Event()
        threading.Thread(target=self._watch, name="pool-watch", daemon=True).start()

    def _watch(self) -> None:
        """Break the pool where Python's own check cannot.  A worker killed while it sends a
        result leaves the pool's reader waiting for the rest of that message, forever: the
        parent holds a write end of the result pipe too, so no end-of-file comes, and the
        reader never looks at the dead worker (the run hung; tests/test_produce.py).  A dead
        worker the pool has not noticed within STUCK_SECONDS means exactly that: the message
        is completed with zero bytes, which do not unpickle, so the reader fails and the pool
        breaks as for any dead worker (every future: WorkerLost; the scheduler re-runs)."""
        pool, dead_since = self._pool, {}
        while not self._closed.wait(0.5):
            if getattr(pool, "_broken", False):
                return
            now = time.monotonic()
            procs = dict(getattr(pool, "_processes", None) or {})
            dead_since = {pid: dead_since.get(pid, now) for pid, p in procs.items() if p.exitcode is not None}
            if any(now - t > STUCK_SECONDS for t in dead_since.values()):
                self._complete_stuck_message(pool)
                return

    @staticmethod
    def _complete_stuck_message(pool) -> None:
        fd = pool._result_queue._writer.fileno()
        os.set_blocking(fd, False)  # the pool is lost anyway: never block here
        give_up = time.monotonic() + 60.0
        while not getattr(pool, "_broken", False) and time.monotonic() < give_up:
            try:
                os.write(fd, bytes(1 << 16))
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                return

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
        self._closed.set()
        if kill:
            # Don't wait for batches in flight: they are not committed and will be re-run.
            for proc in list((getattr(self._pool, "_processes", None) or {}).values()):  # None once shut down
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


class WorkersCannotStart(RuntimeError):
    """A fresh worker process, given nothing to run, died too: the workers' start-up is at
    fault (their environment, the calling script), not a task (one-line message)."""


def _nothing() -> None:
    return None


def check_workers_start() -> None:
    """Raise WorkersCannotStart unless a fresh worker process starts and runs nothing.  Asked
    after a worker died, before blaming a task: a script that calls the pipeline without a
    ``__main__`` guard kills every worker as it starts (each imports the script, which runs
    again), and crash isolation would reject every slot as ``worker_crash``, one fresh
    process each."""
    try:
        run_in_fresh_process(_nothing)
    except WorkerLost:
        raise WorkersCannotStart(
            "worker processes die as they start (a fresh one, given nothing to run, died too)"
        ) from None


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


# ------------------------------------------------------------------ pipe workers
#
# The GPU suite, eval, mining and negatives keep state in their worker processes (a CUDA
# context, a CPU reference, an imported file, a warm CPU compiler) and stream results back, so
# they run on PipePool rather than an executor.  One loop serves all four; the policies they differ in are parameters
# of the pool (size, how long a worker may take to start, when it is recycled) and of each
# task (PipeTask: what a message means, the time limit, what a lost worker costs).

READY, DONE, EXIT = "ready", "done", "exit"


def prepare_worker(parent_pid: int | None = None) -> None:
    """First thing in a pipe worker's process: Ctrl-C is the parent's to handle; with
    ``parent_pid``, die with the parent (a parent killed with -9 must not leave workers
    behind) and keep temporary files in a folder of its own (nor their files)."""
    if parent_pid is not None:
        die_with_parent(parent_pid)
        if sys.platform.startswith("linux"):
            use_private_tmp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def serve(conn, handle: Callable[[Any], Iterable[tuple[str, Any]]]) -> None:
    """A pipe worker's loop, in its process: says ready, then sends every message
    ``handle(job)`` yields for each job received, and (DONE, None) after it; a job of None
    ends the loop.  A handler that yields (EXIT, code) ends the process at once with that
    exit code (nothing more can run in it: a lost CUDA context)."""
    conn.send((READY, None))
    while True:
        job = conn.recv()
        if job is None:
            return
        for kind, payload in handle(job):
            if kind == EXIT:
                conn.close()
                os._exit(payload)
            conn.send((kind, payload))
        conn.send((DONE, None))


class PipeWorker:
    """A spawned process at the other end of a pipe (the target runs :func:`serve`).
    ``target(conn, *args)`` runs in the child; what travels on the pipe is the caller's,
    but ``None`` asks the child to stop."""

    def __init__(self, ctx, target: Callable, *args: Any):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False  # it said READY: it has started and can take work
        self.task: PipeTask | None = None
        self.started = self.heard = time.monotonic()  # heard: its last message (or the hand-over)
        self.weight = 0  # task weight it has run (PipePool's recycle_after)
        self.memo: dict[str, Any] = {}  # what a pool's user keeps per worker (eval: rows it holds)

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

    def drain(self) -> str | None:
        """Take every message waiting: DONE when its task is done, "dead" when the process
        has died, else None (still running).  Others go to its task's ``on_message``."""
        try:
            while self.conn.poll():
                kind, payload = self.conn.recv()
                self.heard = time.monotonic()
                if kind == READY:
                    self.ready = True
                elif kind == DONE:
                    return DONE
                else:
                    self.task.on_message(kind, payload)
        except (EOFError, OSError):
            self.proc.join(timeout=30)  # its exit code names the signal
            return "dead"
        return None if self.proc.is_alive() else "dead"


class PipeTask:
    """One job for a :class:`PipePool`, with its policies: what its messages mean (they
    stream in as the worker sends them), its time limit, and what a lost worker costs."""

    weight = 1  # what it counts toward the pool's recycle_after (mining: files)
    given_at = 0.0  # when the pool handed it to a worker (monotonic; set by the pool)

    def job(self) -> Any:
        """What is sent to the worker."""
        raise NotImplementedError

    def on_message(self, kind: str, payload: Any) -> None:
        """A message the worker sent about this task."""

    def on_done(self) -> None:
        """The worker finished it."""

    def deadline(self, heard: float) -> float | None:
        """When (monotonic) the worker is killed unless it has finished; ``heard``: its last
        message.  None: no time limit."""
        return None

    def on_lost(self, timed_out: bool, exitcode: int | None) -> list[PipeTask]:
        """Its worker died (``exitcode``) or was killed at the deadline: record what that
        costs; returns the tasks to run again (first, in order)."""
        return []


class PoolError(RuntimeError):
    """Worker processes die before doing any work (an environment problem, not a task's)."""


class PipePool:
    """Up to ``size`` pipe workers running ``target(conn, *args)``; :meth:`run` runs tasks.

    Workers are started as tasks need them (or by :meth:`start`), get a task once they say
    ready, and are kept between calls of :meth:`run` until :meth:`close`.  Crash isolation:
    a worker that dies or passes its task's deadline is killed and replaced, and the task
    says what to run again.  ``startup_timeout``: seconds a worker may take to say ready;
    ``startup_deaths``: workers that may die before any is ready, before PoolError;
    ``recycle_after``: task weight after which a worker is replaced (it keeps what it
    imported); ``on_exit(pid)``: clean up after a worker that ended (killed ones run no
    clean-up of their own)."""

    def __init__(
        self,
        target: Callable,
        args: tuple = (),
        *,
        size: int,
        startup_timeout: float | None = None,
        startup_deaths: int = 3,
        recycle_after: int | None = None,
        hint: str = "",
        on_exit: Callable[[int], None] | None = None,
    ):
        self.ctx = multiprocessing.get_context("spawn")  # Warp/LLVM/CUDA threads do not survive a fork
        self.target, self.args = target, args
        self.size = max(1, size)
        self.startup_timeout, self.startup_deaths = startup_timeout, startup_deaths
        self.recycle_after = recycle_after
        self.hint = hint  # appended to PoolError's message
        self.on_exit = on_exit  # called with the pid of every worker that ends (its leftovers)
        self.workers: list[PipeWorker] = []
        self.deaths = 0  # workers that died, or were killed, holding a task
        self._startup_deaths = 0

    def start(self, n: int | None = None) -> None:
        while len(self.workers) < min(self.size, self.size if n is None else n):
            self.workers.append(PipeWorker(self.ctx, self.target, *self.args))

    def run(self, tasks: Iterable[PipeTask], pick: Callable | None = None, ahead: int | None = None
            ) -> Iterator[PipeTask]:  # fmt: skip
        """Run ``tasks`` and those their lost workers give back; yields each task as it ends
        (done, or lost).  ``pick(worker, queue)``: the task an idle worker takes (default:
        the first).  ``ahead``: take ``tasks`` lazily, keeping that many queued (negatives:
        a task is made, its rows ranked, while the workers run the ones before it); None:
        all at once."""
        source = iter(tasks)
        queue: deque[PipeTask] = deque(source if ahead is None else ())

        def top_up() -> None:
            while ahead is not None and len(queue) < ahead and (task := next(source, None)) is not None:
                queue.append(task)

        top_up()
        while queue or any(w.task is not None for w in self.workers):
            for w in [w for w in self.workers if w.task is None and w.ready and not w.proc.is_alive()]:
                self._end(w)  # died idle (between tasks): no task to blame
            waiting = sum(1 for w in self.workers if w.task is None)
            self.start(len(self.workers) + max(0, len(queue) - waiting))
            for w in self.workers:
                if w.task is None and w.ready and queue:
                    task = pick(w, queue) if pick is not None else queue[0]
                    queue.remove(task)
                    task.given_at = w.heard = time.monotonic()
                    w.task = task
                    w.send(task.job())
            top_up()  # while the workers run what they were just given
            watched = [w for w in self.workers if w.task is not None or not w.ready]
            ready = wait([w.conn for w in watched] + [w.proc.sentinel for w in watched], timeout=self._timeout(watched))
            now = time.monotonic()
            for w in watched:
                if w.conn in ready or w.proc.sentinel in ready:
                    status = w.drain()
                elif (limit := self._deadline(w)) is not None and now >= limit:
                    w.proc.kill()
                    w.proc.join(timeout=30)
                    status = "timeout"
                else:
                    continue
                if status == DONE:
                    task, w.task = w.task, None
                    task.on_done()
                    w.weight += task.weight
                    if self.recycle_after is not None and w.weight >= self.recycle_after:
                        self._end(w, stop=True)
                    yield task
                elif status is not None:
                    code = w.proc.exitcode
                    self._end(w)
                    if w.task is None:
                        self._died_starting(w, code)
                        continue
                    self.deaths += 1
                    task = w.task
                    queue.extendleft(reversed(task.on_lost(status == "timeout", code)))
                    yield task

    def _deadline(self, w: PipeWorker) -> float | None:
        if w.task is not None:
            return w.task.deadline(w.heard)
        return None if self.startup_timeout is None else w.started + self.startup_timeout

    def _timeout(self, watched: list[PipeWorker]) -> float | None:
        limits = [t for w in watched if (t := self._deadline(w)) is not None]
        return max(0.0, min(limits) - time.monotonic()) if limits else None

    def _died_starting(self, w: PipeWorker, code: int | None) -> None:
        self._startup_deaths += 1
        if self._startup_deaths >= self.startup_deaths and not any(x.ready for x in self.workers):
            raise PoolError(f"worker processes die while starting ({exit_reason(code)}){self.hint}")

    def _end(self, w: PipeWorker, *, stop: bool = False) -> None:
        self.workers.remove(w)
        w.stop() if stop else w.kill()
        if self.on_exit is not None:
            self.on_exit(w.proc.pid)

    def close(self, *, kill: bool = False) -> None:
        for w in list(self.workers):
            self._end(w, stop=not kill)


def exit_reason(code: int | None) -> str:
    """How a worker process ended, in words (``code``: its exit code)."""
    if code is not None and code < 0:
        try:
            return f"the worker process was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker process was killed by signal {-code}"
    return f"the worker process exited with code {code}"
