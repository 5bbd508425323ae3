"""`--executor ray`: same output as local processes, under worker kills, driver kills and a
node joining.  Every Ray process runs on 127.0.0.1, is started here and stopped here.

On Linux, Ray replaces 127.0.0.1 by the machine's routable address unless
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which keeps every node on loopback but makes `ray start
--address` refuse to add a node; so the second node is added with Ray's own
``ray.cluster_utils.Cluster`` (a separate raylet and object store, as `ray start --address`
starts), and `ray start --head` serves the driver-kill test.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from procs import descendants, in_background, kill_cli_repeatedly
from test_produce import CATS, cli, comparable

from cudagen_data.pipeline.config import ProduceConfig
from cudagen_data.pipeline.producer import produce
from cudagen_data.pipeline.work import CRASH_ENV

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only (see above); read when ray is imported
os.environ.setdefault("RAY_AUTH_MODE", "token")  # drivers joining a `ray start` cluster need it said (Ray 2.60)
# Ray's workers at the suite's own priority: Ray starts them at nice 15, which beside other work
# on the machine stretched this module's runs (its timing assertions too) several times over
os.environ.setdefault("RAY_worker_niceness", "0")
ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'cudagen-data[ray]'")

OBJECT_STORE = 200 * 2**20
RAY_BIN = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def _running_tasks(under: int) -> list[int]:
    """Ray workers below process ``under`` that are running a batch now (Ray titles a
    worker ``ray::<task>`` while it runs one, ``ray::IDLE`` otherwise)."""
    return [p for p in descendants(under) if _title(p).startswith("ray::_on_worker")]


@pytest.fixture(scope="class")
def local_ray():
    """A private Ray instance in this process, 127.0.0.1, 2 CPUs, small object store; one per
    class of tests (a Ray start and stop is ~4 s of this module's time)."""
    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=OBJECT_STORE,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        logging_level="warning",
    )
    try:
        yield
    finally:
        ray.shutdown()


class RayHead:
    """`ray start --head --block` on 127.0.0.1 in its own process group; stop() ends that group only."""

    def __init__(self, port: int, log: Path):
        self.address = f"127.0.0.1:{port}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    RAY_BIN,
                    "start",
                    "--head",
                    "--block",
                    "--node-ip-address",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--num-cpus",
                    "1",
                    "--object-store-memory",
                    str(OBJECT_STORE),
                    "--include-dashboard",
                    "false",
                    "--disable-usage-stats",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 120.0) -> None:
        t0 = time.time()
        while b"Ray runtime started" not in self.log.read_bytes():
            assert self.proc.poll() is None, f"ray start --head failed: {self.log.read_text()[-2000:]}"
            assert time.time() - t0 < timeout, f"ray start --head did not come up: {self.log.read_text()[-2000:]}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # `ray start --block` stops what it started
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # and anything left in its group
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.fixture
def ray_head(tmp_path):
    """A one-CPU head node started with `ray start --head`; yields its address."""
    head = RayHead(_free_port(), tmp_path / "ray-head.log")
    try:
        head.wait_ready()
        yield head.address
    finally:
        head.stop()


@pytest.fixture
def cluster():
    """A one-CPU head node from Ray's cluster utility, to which the test adds a node."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args=dict(num_cpus=1, object_store_memory=OBJECT_STORE, include_dashboard=False)
    )
    try:
        yield cluster
    finally:
        cluster.shutdown()


FAST = dict(categories=CATS, seed=21, fast=True)


class TestOnOneRayInstance:
    """Tests that leave the instance as they found it share it (a Ray start and stop is ~4 s)."""

    def test_a_kernel_that_crashes_its_ray_worker_is_rejected_as_locally(self, local_ray, tmp_path, monkeypatch):
        """Every try of the task dies; the driver bisects to the slot, as with local processes."""
        from cudagen_data.pipeline import ray_executor

        monkeypatch.setenv(CRASH_ENV, "13")  # the local workers inherit it; the Ray tasks get it below
        real_remote = ray.remote  # the tasks' own runtime environment: Ray starts workers of their own for it
        monkeypatch.setattr(ray, "remote", lambda **kw: real_remote(**kw, runtime_env={"env_vars": {CRASH_ENV: "13"}}))
        # fewer tries than in production: every try of a crashing slot costs a Ray worker start
        monkeypatch.setattr(ray_executor, "TASK_RETRIES", 1)
        monkeypatch.setattr(ray_executor, "ISOLATED_RETRIES", 0)
        # batches of 4: the crashing slot is isolated in two halvings (each crash costs a Ray worker's start)
        config = ProduceConfig(count=30, batch_size=4, **FAST)
        produce(config, tmp_path / "local", workers=2, progress=False)
        produce(config, tmp_path / "ray", workers=2, progress=False, executor="ray")
        rejects = [orjson.loads(line) for line in (tmp_path / "ray" / "rejects.jsonl").read_bytes().splitlines()]
        assert [(r["slot"], r["reason"]) for r in rejects if r["reason"] == "worker_crash"] == [(13, "worker_crash")]
        assert comparable(tmp_path / "ray") == comparable(tmp_path / "local")

    def test_ray_writes_what_local_processes_write(self, local_ray, tmp_path):
        config = ProduceConfig(count=60, batch_size=8, shard_rows=16, **FAST)
        produce(config, tmp_path / "local", workers=2, progress=False)
        result = produce(config, tmp_path / "ray", workers=2, progress=False, executor="ray")
        assert comparable(tmp_path / "ray") == comparable(tmp_path / "local")
        assert sum(result.tasks_by_node.values()) >= 60 // 8  # the batches did run as Ray tasks

    def test_a_ray_worker_killed_mid_task_is_retried_and_the_output_is_unchanged(self, local_ray, tmp_path):
        config = ProduceConfig(count=600, batch_size=50, **FAST)
        # the rows are the same with any workers: made here while the Ray run goes on
        reference = in_background(produce, config, tmp_path / "local", workers=0, progress=False)
        killed: list[int] = []
        stop = threading.Event()

        def killer() -> None:
            me = os.getpid()
            while not stop.is_set() and len(killed) < 2:
                running = _running_tasks(me)
                if running:
                    os.kill(running[0], signal.SIGKILL)
                    killed.append(running[0])
                    time.sleep(1.0)
                time.sleep(0.02)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        try:
            produce(config, tmp_path / "ray", workers=2, progress=False, executor="ray")
        finally:
            stop.set()
            thread.join()
        reference.result()
        assert killed, "no Ray worker was caught running a batch"
        assert comparable(tmp_path / "ray") == comparable(tmp_path / "local")


def test_driver_killed_with_9_resumes_on_the_cluster(ray_head, tmp_path):
    address = ray_head
    args = [
        "produce",
        "--count",
        "300",
        "--categories",
        ",".join(CATS),
        "--seed",
        "5",
        "--fast",
        "--batch-size",
        "8",
        "--shard-rows",
        "40",
        "--no-jsonl",
        "--no-progress",
    ]
    # 300 rows: each killed try commits ~20 of them on the 2-core machine (each pays Ray's start-up), so
    # every try is killed with room to spare.  The reference in-process: the same rows (and recorded command)
    # as the command's, with any workers
    ref = ProduceConfig(count=300, categories=CATS, seed=5, fast=True, batch_size=8, shard_rows=40, jsonl=False)
    reference = in_background(produce, ref, tmp_path / "ref", workers=0, progress=False)  # while the tries run
    out = tmp_path / "killed"
    ray_args = [*args, "--executor", "ray", "--ray-address", address, "--output", str(out)]
    # kill only once the driver has committed something (Ray start-up is not the point)
    kills = kill_cli_repeatedly(ray_args, tries=4, rng=random.Random(99), wait=(1.0, 3.0),
                                started=(out / ".cudagen" / "state.json").exists)  # fmt: skip
    assert kills >= 2, "the run finished before it could be killed twice; make it longer"
    res = cli(*ray_args)
    assert res.returncode == 0, res.stderr
    reference.result()
    assert comparable(out) == comparable(tmp_path / "ref")


def test_a_node_started_during_the_run_takes_work(cluster, tmp_path):
    # 75 small tasks: the head node is still busy with them when the second node has started (with 50,
    # the second node once took only one before the run ended)
    config = ProduceConfig(count=600, batch_size=8, **FAST)
    # the rows are the same with any workers: made here while the Ray run goes on
    reference = in_background(produce, config, tmp_path / "local", workers=0, progress=False)
    joined: list = []

    def on_batch(result) -> None:
        if not joined:  # the run is going on the head node alone: add a second node now
            joined.append(cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE))
            cluster.wait_for_nodes()

    result = produce(
        config, tmp_path / "ray", progress=False, executor="ray", ray_address=cluster.address, on_batch=on_batch
    )
    reference.result()
    assert joined
    assert len(result.tasks_by_node) == 2, f"tasks per node: {dict(result.tasks_by_node)}"
    assert min(result.tasks_by_node.values()) >= 2
    assert comparable(tmp_path / "ray") == comparable(tmp_path / "local")


def test_without_ray_one_line_says_how_to_install(tmp_path):
    code = (
        "import sys\nsys.modules['ray'] = None\nfrom cudagen_data.cli import app\n"
        "app(['produce', '--count', '3', '--fast', '--executor', 'ray', '--no-progress', '--output', sys.argv[1]])\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x")], capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stderr.strip() == "error: --executor ray needs Ray: pip install 'cudagen-data[ray]'"


def test_bad_ray_address_is_one_line(tmp_path):
    res = cli(
        "produce",
        "--count",
        "3",
        "--fast",
        "--executor",
        "ray",
        "--ray-address",
        f"127.0.0.1:{_free_port()}",
        "--no-progress",
        "--output",
        str(tmp_path / "x"),
        timeout=120,
    )
    # the address is probed before anything is written or Ray is imported (ray_executor.py)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().startswith("error: --ray-address 127.0.0.1:") and "nothing answers" in res.stderr
    assert not (tmp_path / "x").exists()
