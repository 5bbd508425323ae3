"""Wrong kernels made from right ones: the judge's own test material.

Each mutant edits a row's recorded ``cuda_forward`` (text in, text out) the way a model
might get it wrong, and names the stage of the ladder that must reject it:

==========================  ==========  =====================================================
kind                        stage       edit
==========================  ==========  =====================================================
operator_swapped            run         first ``wp::add``/``sub`` on the way to a stored value
                                        swapped (else min/max, mul->div; else anywhere)
index_off_by_one            run         the thread index + 1
bounds_check_dropped        run         the grid-stride loop runs once per thread, unchecked
writes_zeros                run         every store / atomic writes a zero of its type
memorized_outputs           run         stores the row's recorded outputs from a table: right
                                        on the recorded inputs, wrong on fresh ones
foreign_kernel              structure   another row's forward, verbatim
stale_global                structure   a ``__device__`` counter: after the first launch,
                                        return at once and leave the last results in place
timer_read                  structure   reads ``clock64()``
undefined_call              compile     calls a function no header defines
==========================  ==========  =====================================================

A mutant that does not apply to a row (no operator to swap, say), or that cannot differ
from the row's kernel (bounds_check_dropped where the launch covers whole blocks, so no
thread runs past the end), is not made.  Whether a mutant that is made can be told apart
on a row's inputs at all is decided separately, on the CPU (equivalence.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from ..extract import DEFAULT_BLOCK_DIM
from .structure import StructureError, kernel_shape


@dataclass(frozen=True)
class Mutant:
    kind: str
    forward: str
    stage: str  # the stage that must reject it: structure, compile or run


_SWAPS = (("wp::add(", "wp::sub("), ("wp::sub(", "wp::add("), ("wp::min(", "wp::max("), ("wp::max(", "wp::min("),
          ("wp::mul(", "wp::div("))  # fmt: skip
_LOOP = re.compile(r"for \(size_t _idx = (?P<start>[^;]*);\s*_idx < dim\.size;\s*_idx \+= [^\n]*\)[ \t]*(?=\n)")
_GUARD = re.compile(r"\n[ \t]*if \(_idx >= dim\.size\) return;")
_TID = re.compile(r"(?P<stmt>(?P<var>var_\w+) = builtin_tid1d\(\);|builtin_tid\dd\((?P<first>var_\w+)[^;]*\);)")
_STORE = re.compile(
    r"(wp::(?:array_store|atomic_\w+|tile_store|tile_atomic_add)(?:<[^;()]*>)?\([^;]*?,\s*)(var_\w+)\);"
)
_CONST_DECL = re.compile(r"^[ \t]*const [^;=\n]*?\b(var_\w+) =", re.M)
_BODY_START = re.compile(r"\n[ \t]*// forward\n")


_DEF = re.compile(r"^[ \t]*(var_\w+) = ([^;\n]*);", re.M)
_VAR = re.compile(r"\bvar_\w+")
# a value read through these depends on memory, not on the variables that address it
_ADDRESSING = ("wp::address(", "wp::view(", "wp::index(", "wp::load(", "wp::tile_load", "&(")


def stored_value_vars(forward: str) -> set[str]:
    """The variables a stored (or atomically written) value is computed from, following
    Warp's ``var_a = f(var_b, ...)`` statements back, but not through array addressing:
    the values on the way to memory, not index arithmetic."""
    defs: dict[str, set[str]] = {}
    for m in _DEF.finditer(forward):
        rhs = m.group(2)
        deps = set() if rhs.lstrip().startswith(_ADDRESSING) else set(_VAR.findall(rhs))
        defs.setdefault(m.group(1), set()).update(deps)
    todo = [m.group(2) for m in _STORE.finditer(forward)]
    seen: set[str] = set()
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(defs.get(v, ()))
    return seen


def _body_at(text: str) -> int:
    """Where the forward's statements start (after Warp's declarations)."""
    m = _BODY_START.search(text)
    return m.end() if m else text.index("{") + 1


def operator_swapped(forward: str) -> str | None:
    """Swap the first operator (in _SWAPS order) whose result reaches a stored value; where
    none does, the first one anywhere in the body."""
    at = _body_at(forward)
    values = stored_value_vars(forward)
    for old, new in _SWAPS:
        for m in re.finditer(rf"(var_\w+) = {re.escape(old)}", forward[at:]):
            if m.group(1) in values:
                i = at + m.end() - len(old)
                return forward[:i] + new + forward[i + len(old) :]
    for old, new in _SWAPS:
        i = forward.find(old, at)
        if i >= 0:
            return forward[:i] + new + forward[i + len(old) :]
    return None


def index_off_by_one(forward: str) -> str | None:
    m = _TID.search(forward)
    if not m:
        return None
    var = m.group("var") or m.group("first")
    return forward[: m.end()] + f" {var} = {var} + 1;" + forward[m.end() :]


def bounds_check_dropped(forward: str) -> str | None:
    m = _LOOP.search(forward)
    if m:
        start = m.group("start").strip()
        return forward[: m.start()] + f"for (size_t _idx = {start}, _once = 0; _once < 1; ++_once)" + forward[m.end() :]
    if _GUARD.search(forward):
        return _GUARD.sub("", forward, count=1)
    return None


def writes_zeros(forward: str) -> str | None:
    at = _body_at(forward)
    head, body = forward[:at], forward[at:]
    constants = set(_CONST_DECL.findall(forward))

    def zero(m: re.Match) -> str:
        var = m.group(2)
        # a constant (Warp declares literals `const T var = 1;`) cannot be assigned: pass a zero of its type;
        # anything else is zeroed in place (a tile passed by reference cannot be a temporary)
        value = f"decltype({var}){{}}" if var in constants else f"({var} = decltype({var}){{}})"
        return f"{m.group(1)}{value});"

    new, n = _STORE.subn(zero, body)
    return head + new if n else None


def memorized_outputs(row: dict) -> str | None:
    """A kernel that writes the recorded outputs back from a table (1-D float32 output only)."""
    forward = row["cuda_forward"]
    outs = [a for a in orjson.loads(row["arg_specs"]) if a["kind"] == "array" and a["role"] != "in"]
    if len(outs) != 1 or outs[0]["dtype"] != "float32" or len(outs[0]["shape"]) != 1 or not row["test_vectors"]:
        return None
    name = outs[0]["name"]
    stores = re.findall(rf"wp::array_store\(var_{name}, (var_\w+), (var_\w+)\);", forward)
    if len(stores) != 1:
        return None
    index, value = stores[0]
    recorded = orjson.loads(row["test_vectors"])["outputs"][name]["data"]
    table = ", ".join(f"{float(np.float32(v)).hex()}f" for v in recorded)
    memo = f"const wp::float32 cudagen_memo[{len(recorded)}] = {{{table}}};\n        "
    store = f"wp::array_store(var_{name}, {index}, {value});"
    at = forward.index(store)
    line_start = forward.rfind("\n", 0, at) + 1
    indent = forward[line_start:at]
    return (
        forward[:at]
        + memo.replace("\n        ", "\n" + indent)
        + f"wp::array_store(var_{name}, {index}, cudagen_memo[{index}]);"
        + forward[at + len(store) :]
    )


def _covers_whole_blocks(row: dict) -> bool:
    """True where every launched thread has work (tile launches; sizes that fill whole blocks)."""
    if row.get("block_dim"):
        return True
    return int(np.prod(row["launch_dim"])) % DEFAULT_BLOCK_DIM == 0


def stale_global(forward: str) -> str | None:
    brace = forward.find("{")
    if brace < 0:
        return None
    counter = "cudagen_launches"
    return (
        f"__device__ int {counter} = 0;\n\n" + forward[: brace + 1]
        + f"\n    if (atomicAdd(&{counter}, 1) >= (int)(gridDim.x * blockDim.x)) return;"
        + "  // reuse the last launch's results"
        + forward[brace + 1 :]
    )  # fmt: skip


def timer_read(forward: str) -> str | None:
    brace = forward.find("{")
    return (
        forward[: brace + 1] + "\n    long long cudagen_t0 = clock64(); (void)cudagen_t0;" + forward[brace + 1 :]
        if brace >= 0
        else None
    )


def undefined_call(forward: str) -> str | None:
    at = _body_at(forward)
    i = forward.find("wp::", at)
    while i >= 0 and not re.match(r"wp::\w+\(", forward[i:]):
        i = forward.find("wp::", i + 4)
    if i < 0:
        return None
    j = forward.index("(", i)
    return forward[:j] + "_cudagen_undefined" + forward[j:]


def make_mutants(row: dict, others: Sequence[dict] = ()) -> list[Mutant]:
    """Every mutant that applies to ``row``; ``others``: rows whose kernels may be copied."""
    fwd = row["cuda_forward"]
    name = kernel_shape(fwd).name
    out = []
    for kind, stage, text in (
        ("operator_swapped", "run", operator_swapped(fwd)),
        ("index_off_by_one", "run", index_off_by_one(fwd)),
        ("bounds_check_dropped", "run", None if _covers_whole_blocks(row) else bounds_check_dropped(fwd)),
        ("writes_zeros", "run", writes_zeros(fwd)),
        ("memorized_outputs", "run", memorized_outputs(row)),
        ("stale_global", "structure", stale_global(fwd)),
        ("timer_read", "structure", timer_read(fwd)),
        ("undefined_call", "compile", undefined_call(fwd)),
    ):
        if text is not None and text != fwd:
            out.append(Mutant(kind, text, stage))
    for other in others:
        if other["cuda_forward"] != fwd:
            try:
                if kernel_shape(other["cuda_forward"]).name != name:
                    out.append(Mutant("foreign_kernel", other["cuda_forward"], "structure"))
                    break
            except StructureError:
                continue
    return out


# The mutants that edit the statements of the forward body, which Warp generates alike for
# CUDA and the CPU: equivalence.py applies the same edit to the CPU forward.
BODY_EDITS = {"operator_swapped": operator_swapped, "index_off_by_one": index_off_by_one, "writes_zeros": writes_zeros}
