"""Processes in tests: a process's descendants, a command killed with -9 again and again, and
work done in a thread while the test waits on other processes."""

from __future__ import annotations

import concurrent.futures as cf
import os
import random
import signal
import subprocess
import sys
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


def in_background(fn: Callable, *args, **kwargs) -> cf.Future:
    """``fn(*args, **kwargs)`` started now in a thread of its own; the future's ``result()``
    waits for it (and raises what it raised).  For a reference run made while the test waits
    on other processes (Ray's start-up and workers, a command killed again and again): the
    waits cost that thread nothing, so the reference's seconds overlap them instead of adding
    to them."""
    pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference")
    future = pool.submit(fn, *args, **kwargs)
    pool.shutdown(wait=False)  # the thread ends once fn returns
    return future
