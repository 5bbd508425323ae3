"""Outputs that depend on thread order: found by running the kernel again, threads reversed.

Warp's CPU backend runs a launch's threads one by one, from 0 up; a GPU runs them in no
fixed order.  An output that a kernel writes at the slot ``wp.atomic_add`` returned, or
through indices that collide (last writer wins), or that one thread reads after another
wrote it, is reproducible on the CPU and not on a GPU.  Each executed kernel is built
again with its thread loop reversed (:func:`warp_boundary.mining.reversed_thread_order`)
and run on the recorded inputs: a recorded output or input gradient that comes out
differently is not kept (the row names it in ``provenance.order_dependent``); a kernel
left with no output is not executed.

Float sums accumulated with atomics differ between orders only by rounding: the
comparison allows half the GPU suite's tolerance for mined rows
(:func:`numerics.tolerance.fallback_tolerance`), so such sums stay.

Reversing cannot show a lost update: ``c[k] = c[k] + 1`` from several threads sums up in
any sequential order, while a GPU's threads read before others write.  So the forward
CUDA is read for plain (non-atomic) stores whose index is not the thread's own
(:func:`shared_stores`), and for those arrays the run is repeated with 1, 2, ... threads
along each launch dimension in turn (:func:`written_by_several`): an element that more
than one thread changes is written by several threads without an atomic, and its array
is not kept.
"""

from __future__ import annotations

import re

import numpy as np

from ..contracts.test_vectors import decode_value
from ..numerics.tolerance import fallback_tolerance

SHARE_OF_GPU_TOLERANCE = 0.5
NOT_RUN = "outputs depend on thread order"


def differs(recorded: np.ndarray, other: np.ndarray) -> bool:
    """True when ``other`` (the reversed run) is not ``recorded`` within what a GPU run is allowed."""
    recorded, other = np.asarray(recorded), np.asarray(other)
    if recorded.shape != other.shape:
        return True
    if recorded.dtype.kind != "f":
        return not np.array_equal(recorded, other)
    r, o = recorded.astype(np.float64), other.astype(np.float64)
    if not np.array_equal(np.isfinite(r), np.isfinite(o)):
        return True
    finite = np.isfinite(r)
    tol = SHARE_OF_GPU_TOLERANCE * fallback_tolerance(np.where(finite, r, 0.0))
    return bool(np.any(np.abs(r - o)[finite] > tol[finite]))


def order_dependent(vectors: dict, reversed_vectors: dict | None) -> list[str]:
    """Recorded entries (``outputs.x``, ``input_grads.y``) the reversed run does not reproduce."""
    found = []
    for part in ("outputs", "input_grads"):
        got = (reversed_vectors or {}).get(part, {})
        for name, encoded in vectors.get(part, {}).items():
            if name not in got or differs(decode_value(encoded), decode_value(got[name])):
                found.append(f"{part}.{name}")
    return found


def without(vectors: dict, entries: list[str]) -> dict | None:
    """The test vectors with those entries dropped; None if no output is left."""
    kept = {**vectors, "outputs": dict(vectors["outputs"]), "input_grads": dict(vectors["input_grads"])}
    for entry in entries:
        part, name = entry.split(".", 1)
        kept[part].pop(name, None)
    return kept if kept["outputs"] else None


# --------------------------------------------------------------------------- lost updates

_TID = re.compile(r"(var_\w+) = builtin_tid1d\(\)|builtin_tid[234]d\(([^)]*)\)")
_STORE = re.compile(r"wp::array_store\(([^,]+), ([^;]*)\);|wp::store\(&\(wp::index\(([^,]+), ([^)]*)\)")
_REF = re.compile(r"(var_\w+) = &\(([^;]*)\);")
_LOAD = re.compile(r"(var_\w+) = wp::load\((var_\w+)\);")
_VIEW = re.compile(r"(var_\w+) = wp::view\((var_\w+), ([^;]*)\);")


def shared_stores(forward: str, names: set[str]) -> set[str]:
    """Array arguments (or struct field arrays, ``s.f``) of ``names`` that the forward
    stores to without an atomic at an index that is not exactly the thread's own
    (``wp.tid()``): several threads may store to one element."""
    forward = _code(forward)
    tid: list[str] = []
    for m in _TID.finditer(forward):
        tid += [m.group(1)] if m.group(1) else [v.strip() for v in m.group(2).split(",")]
    refs = {m.group(1): m.group(2) for m in _REF.finditer(forward)}
    loads = {m.group(1): m.group(2) for m in _LOAD.finditer(forward)}
    views = {m.group(1): (m.group(2), [a.strip() for a in m.group(3).split(",")]) for m in _VIEW.finditer(forward)}
    found = set()
    for m in _STORE.finditer(forward):
        if m.group(1) is not None:
            target, args = m.group(1).strip(), [a.strip() for a in m.group(2).split(",")][:-1]  # the last is the value
        else:
            target, args = m.group(3).strip(), [a.strip() for a in m.group(4).split(",")]
        for _ in range(4):  # a store into a view (H[b, i][j] = ...) is a store into its array at (b, i, j)
            if target not in views:
                break
            target, args = views[target][0], views[target][1] + args
        name = _argument(target, refs, loads)
        if name in names and sorted(args) != sorted(tid):
            found.add(name)
    return found


def _argument(var: str, refs: dict[str, str], loads: dict[str, str]) -> str:
    """The argument (``a``) or struct field (``s.f``) a CUDA variable holds, "" if unknown."""
    if var in loads and loads[var] in refs:
        var = refs[loads[var]].replace("(", "").replace(")", "")
    return var[4:] if var.startswith("var_") else ""


def written_by_several(states: list[np.ndarray], ndim: int) -> bool:
    """``states``: an array (``ndim`` dimensions, then its dtype's components) before any
    thread ran, then after 1, 2, ... threads (each run from the same inputs).  True if
    some element changes at more than one step."""
    counts = np.zeros(states[0].shape[:ndim], dtype=int)
    for before, after in zip(states, states[1:], strict=False):
        changed = np.asarray(before != after)
        counts += changed.reshape(changed.shape[:ndim] + (-1,)).any(axis=-1) if changed.ndim > ndim else changed
    return bool(np.any(counts > 1))


# --------------------------------------------------------------------------- no run needed

_CALL = re.compile(r"(?<![\w:.>])([A-Za-z_]\w*)\(")
_NOT_CALLS = {
    "builtin_tid1d",
    "builtin_tid2d",
    "builtin_tid3d",
    "builtin_tid4d",
    "static_cast",
    "sizeof",
    "for",
    "if",
    "while",
    "switch",
    "return",
}
_OWN_USE = r"wp::(?:address|index|array_store)\({var}, ([^;]*?)\)"


def plainly_independent(forward: str, arrays: list[str]) -> bool:
    """True when the forward cannot depend on thread order, read off the CUDA text: no
    atomics, no call of a user function (it may take an array), and every array the
    kernel stores to is read and written only at exactly the thread's own index; or no
    ``wp.tid()`` at all (identical threads: reordering them changes nothing, while lost
    updates among them are :func:`shared_stores`' to find).  Such kernels skip the
    reversed run; anything unclear (struct arguments, say) does not."""
    body = _code(forward.split("{", 1)[-1])
    tid: list[str] = []
    for m in _TID.finditer(body):
        tid += [m.group(1)] if m.group(1) else [v.strip() for v in m.group(2).split(",")]
    if not tid:
        return True  # every thread runs the same code on the same data: any order is this order
    if "wp::atomic_" in body or any("." in a for a in arrays):
        return False
    if any(name not in _NOT_CALLS for name in _CALL.findall(body)):
        return False
    targets = {(m.group(1) or m.group(3)).strip() for m in _STORE.finditer(body)}
    if "wp::store(" in body.replace("wp::store(&(wp::index(", "") or targets - {"var_" + a for a in arrays}:
        return False  # a store through something else than an array argument (an alias, a pointer)
    stored = {a for a in arrays if "var_" + a in targets}
    for a in stored:
        var = re.escape("var_" + a)
        uses = len(re.findall(rf"{var}\b", body))
        own = 0
        for m in re.finditer(_OWN_USE.format(var=var), body):
            args = [x.strip() for x in m.group(1).split(",")]
            args = args[:-1] if m.group(0).startswith("wp::array_store") else args
            own += args == tid  # in order: a[j, i] = a[i, j] reads what another thread writes
        if own != uses:
            return False
    return True


def _code(text: str) -> str:
    """CUDA text without its ``//`` comments (Warp quotes the Python source in them)."""
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())
