"""Processes in tests: a process's descendants, a command killed with -9 again and again, and
work done in a thread while the test waits on other processes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (from /proc; Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_cli_repeatedly(args: list[str], *, tries: int, rng: random.Random, wait: tuple[float, float],
                        started: Callable[[], bool] = lambda: True, start_timeout: float = 60.0) -> int:  # fmt: skip
    """Run ``python -m cudagen_data.cli *args`` up to ``tries`` times, each killed with -9
    (its whole process group) a random ``wait`` seconds after ``started()`` holds; stops
    when a run ends by itself.  Returns how many runs were killed."""
    kills = 0
    for _ in range(tries):
        proc = subprocess.Popen([sys.executable, "-m", "cudagen_data.cli", *args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        t0 = time.time()
        while proc.poll() is None and not started() and time.time() - t0 < start_timeout:
            time.sleep(0.1)
        time.sleep(rng.uniform(*wait))
        if proc.poll() is not None:
            break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
    return kills


class Background:
    """``fn(*args)`` in a thread, started now; :meth:`result` waits for it (and raises what
    it raised).  For a reference run made while the test waits on other processes (Ray's
    start-up and workers, a command killed again and again): the waits cost that thread
    nothing, so the reference's seconds overlap them instead of adding to them."""

    def __init__(self, fn: Callable, *args, **kwargs) -> None:
        self._out: list = []
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs), name="reference", daemon=True)
        self._thread.start()

    def _run(self, fn, args, kwargs) -> None:
        try:
            self._out.append((True, fn(*args, **kwargs)))
        except BaseException as exc:  # noqa: BLE001 - handed to the test by result()
            self._out.append((False, exc))

    def result(self):
        self._thread.join()
        ok, value = self._out[0]
        if not ok:
            raise value
        return value
