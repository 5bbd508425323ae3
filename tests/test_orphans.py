"""No worker outlives a producer killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import descendants

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie holds no memory and runs nothing


def _workers_busy(pid: int) -> set[int]:
    """The producer's worker processes once at least two are running Python with Warp."""
    workers = set()
    for child in descendants(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"multiprocessing" in cmdline and b"spawn_main" in cmdline:
            workers.add(child)
    return workers


def test_workers_die_with_a_killed_producer(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "TMPDIR": str(tmp)}
    cmd = [
        sys.executable,
        "-m",
        "cudagen_data.cli",
        "produce",
        "--count",
        "3000",
        "--workers",
        "2",
        "--output",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    everything: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        workers: set[int] = set()
        while time.monotonic() < deadline and len(workers) < 2:
            assert proc.poll() is None, "the producer ended before its workers started"
            time.sleep(0.2)
            workers = _workers_busy(proc.pid)
        assert len(workers) >= 2, "no workers appeared"
        time.sleep(3.0)  # let them get into real work (codegen, compiles)
        everything = descendants(proc.pid)
        assert workers <= everything
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in everything):
            time.sleep(0.1)
        survivors = sorted(p for p in everything if _alive(p))
        assert not survivors, f"processes outlived the killed producer: {survivors}"
        # what the killed workers left on disk is removed by the next worker that starts
        left = [p.name for p in tmp.iterdir() if p.name.startswith("cudagen-worker-")]
        assert len(left) >= 2 and any((tmp / name).iterdir() for name in left)
        code = "from cudagen_data.pipeline.orphans import use_private_tmp; print(use_private_tmp())"
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert Path(out).parent == tmp
        remaining = sorted(p.name for p in tmp.iterdir())
        assert remaining == [], f"stale worker folders were not removed: {remaining}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in everything:  # a failed run must not leave its orphans behind either
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
