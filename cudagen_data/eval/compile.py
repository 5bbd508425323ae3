"""Stage 2: the candidate in the row's translation unit, through NVRTC.

A candidate's unit is the row's rebuild recipe with the candidate in place of Warp's
kernel: manifest preamble + the row's device functions + the candidate's forward + the
candidate's backward (or the row's, where the candidate gives none).  It goes through
NVRTC's front end (parse, semantic analysis, template instantiation), then, where no GPU
build follows, the full compile to PTX for the row's arch.

NVRTC spends ~0.4 s parsing Warp's ``builtin.h`` for every unit, so candidates are
checked many to a unit, each in a namespace of its own (``extern "C"`` dropped there so
two candidates for one row do not clash).  A failing batch is split by NVRTC's own error
lines (each candidate owns a known line range; its log lines are renumbered to its own
unit); where errors name no candidate's lines, it is halved (bisect.py).  A lone candidate is
always compiled as exactly its own unit.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..bisect import bisect_failures
from ..extract import frontend
from ..extract.nvrtc import nvrtc_compile

BATCH = 32  # candidates per NVRTC call
Compiler = Callable[[str, int], tuple[bool, str]]  # (unit text, arch) -> (ok, log)


def _warp_full(source: str, arch: int) -> tuple[bool, str]:
    return nvrtc_compile(source, arch=arch)


def front_end_compiler() -> tuple[Compiler, str, bool]:
    """(compile, what it is, thread-safe).  NVRTC's front end where the standalone NVRTC of
    Warp's version is installed; else Warp's bundled NVRTC (a full compile: slower, same verdict)."""
    try:
        frontend.nvrtc_info(86)
    except frontend.NvrtcUnavailable as exc:
        return _warp_full, f"Warp's bundled NVRTC (full compile; front end unavailable: {exc})", False
    return (
        (lambda source, arch: frontend.frontend_check(source, arch=arch)),
        "NVRTC front end (--fdevice-syntax-only)",
        True,
    )


FULL_COMPILER: Compiler = _warp_full
FULL_NAME = "Warp's bundled NVRTC, full compile to PTX (-O3)"


@dataclass(frozen=True)
class Unit:
    """One candidate's translation unit, in parts."""

    preamble: str
    device_functions: str
    forward: str
    backward: str
    arch: int

    def text(self) -> str:
        return "\n".join((self.preamble, self.device_functions, self.forward, self.backward))

    def body(self) -> str:
        return "\n".join((self.device_functions, self.forward, self.backward))


@dataclass(frozen=True)
class Verdict:
    ok: bool
    log: str = ""
    seconds: float = 0.0  # this candidate's share of the compile time


_EXTERN_C = re.compile(r'\bextern\s*"C"\s*')
_STOPPED = re.compile(r"catastrophic|compilation terminated|error limit|too many errors", re.IGNORECASE)
_LOG_LINE = re.compile(r"cudagen\.cu\((\d+)\)|line (\d+) of cudagen\.cu")


def _lines(text: str) -> int:
    return text.count("\n")


def batch_text(units: Sequence[Unit]) -> tuple[str, list[tuple[int, int]]]:
    """One unit holding every candidate in its own namespace; per candidate, the 1-based
    line range its body occupies."""
    parts = [units[0].preamble]
    line = _lines(units[0].preamble) + 2  # the join's newline, then the namespace line
    ranges = []
    for i, u in enumerate(units):
        body = _EXTERN_C.sub("", u.body())
        parts.append(f"namespace cudagen_c{i} {{\n{body}\n}}")
        start = line + 1
        end = start + _lines(body)
        ranges.append((start, end))
        line = end + 2  # the closing brace, the join's newline, the next namespace line
    return "\n".join(parts), ranges


def compile_many(
    units: Sequence[Unit], compiler: Compiler, *, threads: int = 1, batch: int = BATCH, front_end: bool = False
) -> list[Verdict]:
    """Compile every unit (batched, split on failure); one verdict per unit, in order.
    ``front_end``: the compiler is NVRTC's front end (see the comment in ``attempt``)."""
    verdicts: list[Verdict | None] = [None] * len(units)
    unique: dict[tuple[str, int], list[int]] = {}
    for i, u in enumerate(units):
        unique.setdefault((u.text(), u.arch), []).append(i)
    groups: dict[tuple[str, int], list[int]] = {}
    for idx in unique.values():
        u = units[idx[0]]
        groups.setdefault((u.preamble, u.arch), []).append(idx[0])
    jobs = [g[i : i + batch] for g in groups.values() for i in range(0, len(g), batch)]

    def attempt(idx: Sequence[int]) -> list[Verdict] | None:
        t0 = time.perf_counter()
        if len(idx) == 1:
            u = units[idx[0]]
            ok, log = compiler(u.text(), u.arch)
            return [Verdict(ok, "" if ok else log, time.perf_counter() - t0)]
        text, ranges = batch_text([units[i] for i in idx])
        ok, log = compiler(text, units[idx[0]].arch)
        share = (time.perf_counter() - t0) / len(idx)
        if ok:
            return [Verdict(True, "", share)] * len(idx)
        owned = _attribute(log, ranges, [units[i] for i in idx])
        if not owned:
            return None  # an error outside every candidate's lines: halve (bisect.py)
        out = [Verdict(False, owned[slot], share) if slot in owned else None for slot in range(len(idx))]
        rest = [slot for slot in range(len(idx)) if slot not in owned]
        if front_end and not _STOPPED.search(log):
            # The front end reports every error of a unit unless it gave up early; no
            # error on a candidate's lines means that candidate is clean.  (A full
            # compile stops before code generation on any error: there the rest is
            # compiled again.)
            clean = [Verdict(True, "", share)] * len(rest)
        else:
            clean = bisect_failures([idx[slot] for slot in rest], attempt)
        for slot, v in zip(rest, clean, strict=False):
            out[slot] = v
        return out

    def solve(idx: list[int]) -> None:
        for i, v in zip(idx, bisect_failures(idx, attempt), strict=False):
            verdicts[i] = v

    if threads > 1 and len(jobs) > 1:
        with ThreadPoolExecutor(min(threads, len(jobs))) as pool:
            list(pool.map(solve, jobs))
    else:
        for job in jobs:
            solve(job)
    for idx in unique.values():
        for i in idx[1:]:
            verdicts[i] = verdicts[idx[0]]
    return verdicts  # type: ignore[return-value]


def _attribute(log: str, ranges: list[tuple[int, int]], units: list[Unit]) -> dict[int, str]:
    """Slot -> its error messages (renumbered to its own unit), for errors on its lines.
    Empty when any error lies outside every candidate (then the caller halves)."""
    owned: dict[int, list[str]] = {}
    blocks = _error_blocks(log)
    for block in blocks:
        lines = [int(a or b) for a, b in _LOG_LINE.findall(block)]
        slots = {s for n in lines for s, (lo, hi) in enumerate(ranges) if lo <= n <= hi}
        if len(slots) != 1:
            return {}
        slot = slots.pop()
        offset = ranges[slot][0] - (_lines(units[slot].preamble) + 2)
        owned.setdefault(slot, []).append(_LOG_LINE.sub(lambda m, offset=offset: _renumber(m, offset), block))
    return {s: "\n".join(b) for s, b in owned.items()}


def _renumber(m: re.Match, offset: int) -> str:
    if m.group(1):
        return f"cudagen.cu({int(m.group(1)) - offset})"
    return f"line {int(m.group(2)) - offset} of cudagen.cu"


def _error_blocks(log: str) -> list[str]:
    """NVRTC's log cut into one block per diagnostic (an ``error`` line and its notes)."""
    blocks: list[str] = []
    for line in log.splitlines():
        if (
            not line.strip()
            or re.match(r"\d+ errors? detected", line.strip())
            or line.startswith("Warp NVRTC compilation error")
        ):
            continue
        if ": error" in line or ": warning" in line or not blocks:
            blocks.append(line)
        else:
            blocks[-1] += "\n" + line
    return [b for b in blocks if ": error" in b or "error" in b.lower()]


def default_threads() -> int:
    return os.cpu_count() or 1
