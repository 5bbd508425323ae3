"""What several tests make the same way, made once per test run: by the first test (of any
xdist worker) that asks, under a file lock; the others read it.  Only what is never changed
in place is shared: :func:`once` hands each caller its own copy.

The folder is the run's (``CUDAGEN_TESTS_SHARED``, set by tests/conftest.py for the run and
its workers); outside a pytest run of this suite (the GPU suite run alone, a script) each
process makes its own, once.
"""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import xxhash

ENV = "CUDAGEN_TESTS_SHARED"
_made: dict[str, bytes] = {}


def once(key: str, make: Callable[[], object]) -> object:
    """``make()`` for ``key`` (everything its result depends on), made once per test run;
    a fresh copy for each call (pickled), so a caller may change what it gets."""
    name = xxhash.xxh3_64_hexdigest(key.encode())
    if name not in _made:
        _made[name] = _shared_bytes(name, lambda: pickle.dumps(make(), protocol=pickle.HIGHEST_PROTOCOL))
    return pickle.loads(_made[name])


def _shared_bytes(name: str, make: Callable[[], bytes]) -> bytes:
    folder = os.environ.get(ENV)
    if not folder:
        return make()
    path = Path(folder) / f"{name}.pickle"
    with open(Path(folder) / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process dies
        if path.exists():
            return path.read_bytes()
        data = make()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)  # whole or absent
        return data
