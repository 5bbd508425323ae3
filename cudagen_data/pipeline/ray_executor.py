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
                    check_reachable(address)  # ray.init would retry an unreachable address for minutes
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


CONNECT_TIMEOUT_S = 10.0  # a TCP connection to the head node
PROBE_TIMEOUT_S = 5.0  # its answer to one HTTP/2 request


def check_reachable(address: str) -> None:
    """Raise ConnectionError, within ~15 s, when no Ray head node can answer at ``address``
    (HOST:PORT; ray://HOST:PORT is only connected to; "auto" is left to Ray): nothing
    listens, or what answers is not a gRPC server (the dashboard's port, a proxy...).
    ray.init would retry for 20 to 40 s, print Ray's own warnings, and a run would have
    started its folder first.  Starts nothing: one TCP connection, on which the first call
    ray.init makes (the GCS's GetClusterId) is sent once (:func:`_speaks_grpc`)."""
    scheme, _, rest = address.rpartition("://")
    host, sep, port = rest.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return  # let Ray resolve it
    host = host.strip("[]")  # [IPv6]:PORT
    try:
        conn = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {address}: {exc.strerror or exc}") from None
    with conn:
        if scheme:
            return  # Ray Client's server speaks another service
        conn.settimeout(PROBE_TIMEOUT_S)
        problem = _speaks_grpc(conn, f"{host}:{port}")
    if problem:
        raise ConnectionError(f"{address} answers, but not as a Ray head node ({problem})")


_GET_CLUSTER_ID = "/ray.rpc.NodeInfoGcsService/GetClusterId"


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _literal(name: str, value: str) -> bytes:
    """An HPACK header field, literal and not indexed, without Huffman coding (RFC 7541 6.2.2)."""
    out = b"\x00"
    for text in (name.encode(), value.encode()):
        assert len(text) < 127  # one-byte length prefix
        out += bytes([len(text)]) + text
    return out


def _speaks_grpc(conn: socket.socket, authority: str) -> str:
    """Send GetClusterId as gRPC over HTTP/2 (RFC 7540) and read the answer's first frames:
    "" unless they prove the other end is no gRPC server (no HTTP/2; an HTTP status other
    than 200, which every gRPC answer has, errors included).  Lenient on purpose: what it
    cannot read (a slow server, an unusual header encoding) is left to ray.init."""
    headers = b"".join(
        _literal(n, v)
        for n, v in ((":method", "POST"), (":scheme", "http"), (":path", _GET_CLUSTER_ID),
                     (":authority", authority), ("content-type", "application/grpc"), ("te", "trailers"))
    )  # fmt: skip
    try:
        conn.sendall(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            + _frame(0x4, 0, 0, b"")  # SETTINGS
            + _frame(0x1, 0x4, 1, headers)  # HEADERS, END_HEADERS
            + _frame(0x0, 0x1, 1, b"\x00\x00\x00\x00\x00")  # DATA, END_STREAM: an empty request message
        )
        data, frames = b"", 0
        while True:
            while len(data) < 9 or len(data) < 9 + int.from_bytes(data[:3], "big"):
                chunk = conn.recv(65536)
                if not chunk:
                    return "it closed the connection" if frames == 0 else ""
                if frames == 0 and not data and chunk.startswith(b"HTTP/"):
                    return "it speaks HTTP/1, not gRPC"
                data += chunk
            size, kind, flags, stream = data[:3], data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
            size = int.from_bytes(size, "big")
            payload, data = data[9 : 9 + size], data[9 + size :]
            if frames == 0 and kind != 0x4:
                return "it does not speak HTTP/2"
            frames += 1
            if kind == 0x7:  # GOAWAY
                return "it ended the connection without answering (HTTP/2 GOAWAY)"
            if kind != 0x1 or stream != 1 or not payload:
                continue  # SETTINGS, WINDOW_UPDATE, PING...
            if flags & 0x8:  # HEADERS, PADDED
                payload = payload[1 : len(payload) - payload[0]]
            if flags & 0x20:  # PRIORITY
                payload = payload[5:]
            status = _STATIC_STATUS.get(payload[:1])  # :status comes first; None: encoded otherwise
            return "" if status in (200, None) else f"it answered HTTP status {status} to a gRPC call"
    except TimeoutError:
        return f"it said nothing in {PROBE_TIMEOUT_S:.0f} s" if frames == 0 else ""
    except OSError as exc:
        return f"the connection broke: {exc.strerror or exc}"


# HPACK's static table entries for :status (RFC 7541 appendix A), as an indexed field's byte
_STATIC_STATUS = {bytes([0x88 + i]): code for i, code in enumerate((200, 204, 206, 304, 400, 404, 500))}
