"""Batches as Ray tasks: the same ``submit``/``close`` as the local executors, over a cluster.

The driver (the process running ``cudagen produce``) submits batches and commits their
results in slot order, exactly as with local processes; only where a batch runs changes,
so the rows are the same bytes (timing fields aside).

- A task whose worker dies is retried by Ray (``max_retries``): a node lost or a worker
  killed costs time, not rows.  A worker that dies on every try (a kernel crashing native
  code) surfaces as :class:`WorkerCrashed`; the producer then bisects that part down to the
  crashing slot by running halves through :meth:`RayExecutor.run_alone`, as it does with
  local processes, so the same slot is rejected.
- Ray reuses worker processes: Warp is initialised once per worker (``warp_boundary.warp()``
  is once per process), with its private kernel cache per worker process; ``max_calls``
  recycles a worker after as many batches as a local worker runs.
- Without an address a private Ray instance is started on 127.0.0.1 and shut down by
  :meth:`close`; with one, the driver joins that cluster and only disconnects.

Ray is an optional extra (``pip install 'cudagen-data[ray]'``).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import warp_boundary
from ..contracts.reject import error_line
from .config import ProduceError


class WorkerCrashed(BrokenProcessPool):  # = pool.WorkerLost, how every executor reports a dead worker
    """The Ray worker running a task died on every try (not an error the task raised)."""


INSTALL_HINT = "--executor ray needs Ray: pip install 'cudagen-data[ray]'"
TASK_RETRIES = 3  # tries after the first when a worker dies (node lost, killed, OOM)
ISOLATED_RETRIES = 1  # while bisecting a crash, a slot is rejected only if it crashes twice
MAX_CALLS = 200  # batches per worker process before Ray starts a fresh one (as ProcessExecutor)
LOCAL_OBJECT_STORE_BYTES = 256 * 2**20  # results are a few MB in flight: keep /dev/shm free
_RESOURCE_TTL_S = 2.0


LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _import_ray(private: bool):
    if private:
        # A private instance stays on 127.0.0.1: on Linux Ray otherwise advertises the
        # machine's routable address.  Read when ray is imported.
        os.environ.setdefault(LOOPBACK_ONLY_ENV, "0")
    try:
        import ray
    except ImportError:
        raise ProduceError(INSTALL_HINT) from None
    return ray


def _on_worker(fn: Callable, args: tuple) -> tuple[Any, str]:
    """Runs in a Ray worker: ``fn(*args)`` and the id of the node that ran it."""
    import ray

    warp_boundary.warp()  # once per worker process: Ray keeps workers between tasks
    return fn(*args), ray.get_runtime_context().get_node_id()


class RayExecutor:
    """``submit(fn, *args) -> Future`` over Ray tasks; results in the order they are read."""

    crash_loses_pool = False  # a dead worker costs its own task only

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        object_store_memory: int | None = LOCAL_OBJECT_STORE_BYTES,
        task_retries: int | None = None,
    ):
        ray = _import_ray(private=not address)
        self._ray = ray
        self._connected_here = not ray.is_initialized()  # else the caller owns the connection
        if self._connected_here:
            try:
                if address:
                    _check_reachable(address)  # ray.init would retry an unreachable address for minutes
                    ray.init(address=address, log_to_driver=False, logging_level="warning")
                else:
                    ray.init(
                        address="local",
                        num_cpus=num_cpus or os.cpu_count() or 1,
                        object_store_memory=object_store_memory,
                        include_dashboard=False,
                        log_to_driver=False,
                        logging_level="warning",
                    )
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise ProduceError(f"--executor ray: cannot start or reach {where} ({error_line(exc)})") from None
        remote = ray.remote(max_calls=MAX_CALLS)(_on_worker)
        self._task = remote.options(
            num_cpus=1, max_retries=TASK_RETRIES if task_retries is None else task_retries, retry_exceptions=False
        )
        self._isolated = remote.options(num_cpus=1, max_retries=ISOLATED_RETRIES, retry_exceptions=False)
        self._refs: set = set()
        self._workers_at = (0.0, 1)
        self.tasks_by_node: Counter = Counter()  # node id -> tasks it finished (for tests, benchmarks)

    @property
    def workers(self) -> int:
        """CPUs in the cluster now (nodes may join or leave while a run goes on)."""
        at, n = self._workers_at
        if time.monotonic() - at > _RESOURCE_TTL_S:
            n = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
            self._workers_at = (time.monotonic(), n)
        return n

    def submit(self, fn: Callable, *args: Any) -> cf.Future:
        return self._future(self._task.remote(fn, args))

    def run_alone(self, fn: Callable, *args: Any) -> Any:
        """``fn(*args)`` in a task of its own (crash bisection); raises WorkerCrashed."""
        return self._future(self._isolated.remote(fn, args)).result()

    def _future(self, ref) -> cf.Future:
        """A concurrent Future of ``ref`` whose worker deaths read as WorkerCrashed and whose
        errors raised by ``fn`` read as themselves (as with local processes)."""
        ray = self._ray
        self._refs.add(ref)
        out: cf.Future = cf.Future()

        def done(inner: cf.Future) -> None:
            self._refs.discard(ref)
            try:
                result, node = inner.result()
            except ray.exceptions.TaskCancelledError:
                out.cancel() or out.set_exception(cf.CancelledError())
                return
            except (
                ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError,
                ray.exceptions.LocalRayletDiedError,
            ) as exc:
                out.set_exception(WorkerCrashed(error_line(exc)))
                return
            except ray.exceptions.RayTaskError as exc:
                out.set_exception(exc.as_instanceof_cause())
                return
            except BaseException as exc:  # noqa: BLE001 - delivered through the future
                out.set_exception(exc)
                return
            self.tasks_by_node[node] += 1
            out.set_result(result)

        ref.future().add_done_callback(done)
        return out

    def close(self, *, kill: bool = False) -> None:
        ray = self._ray
        if not ray.is_initialized():
            return
        for ref in list(self._refs):
            # Unfinished batches are not committed and will be re-run: stop them, don't wait.
            try:
                ray.cancel(ref, force=kill)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        self._refs.clear()
        if self._connected_here:
            ray.shutdown()  # leaving the cluster ends this job's tasks; a private instance stops


def _check_reachable(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return  # let Ray resolve it

    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {address}: {exc.strerror or exc}") from None
