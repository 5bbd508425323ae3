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

A function that takes a row takes a :class:`~cudagen_data.contracts.row.Row`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from ..contracts.row import Row
from ..contracts.test_vectors import TestVectors
from ..extract import DEFAULT_BLOCK_DIM
from ..spec import DTYPES
from .structure import StructureError, kernel_shape


@dataclass(frozen=True)
class Mutant:
    kind: str
    forward: str
    stage: str  # the stage that must reject it: structure, compile or run
    backward: str | None = None  # the candidate's backward (partial-work mutants of the backward only)


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


def memorized_outputs(row: Row) -> str | None:
    """A kernel that writes the recorded outputs (of the row's own size) back from a table
    (1-D float32 output only): right on the recorded inputs at that size.  Past the table
    (a larger size) it stores 0, so what it stores never depends on memory beyond the
    table (a witness's evidence is the same in every run).  The table and its store are a
    block of their own: Warp's loops are gotos, and C++ (clang, building the CPU witness)
    refuses a goto that jumps past the table's initialisation into its scope."""
    forward = row.cuda_forward
    outs = [a for a in orjson.loads(row.arg_specs) if a["kind"] == "array" and a["role"] != "in"]
    if len(outs) != 1 or outs[0]["dtype"] != "float32" or len(outs[0]["shape"]) != 1 or not row.test_vectors:
        return None
    name = outs[0]["name"]
    stores = re.findall(rf"wp::array_store\(var_{name}, (var_\w+), (var_\w+)\);", forward)
    if len(stores) != 1:
        return None
    index, value = stores[0]
    recorded = TestVectors.from_json(row.test_vectors).outputs[name]["data"]
    n = len(recorded)
    table = ", ".join(f"{float(np.float32(v)).hex()}f" for v in recorded)
    store = f"wp::array_store(var_{name}, {index}, {value});"
    at = forward.index(store)
    indent = forward[forward.rfind("\n", 0, at) + 1 : at]
    memo = (
        f"{{ const wp::float32 cudagen_memo[{n}] = {{{table}}};\n{indent}"
        f"wp::array_store(var_{name}, {index}, ({index} >= 0 && {index} < {n}) ? cudagen_memo[{index}] : 0.0f); }}"
    )
    return forward[:at] + memo + forward[at + len(store) :]


def _covers_whole_blocks(row: Row) -> bool:
    """True where every launched thread has work (tile launches; sizes that fill whole blocks)."""
    if row.block_dim:
        return True
    return int(np.prod(row.launch_dim)) % DEFAULT_BLOCK_DIM == 0


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


def make_mutants(row: Row, others: Sequence[Row] = ()) -> list[Mutant]:
    """Every mutant that applies to ``row``; ``others``: rows whose kernels may be copied."""
    fwd = row.cuda_forward
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
        if other.cuda_forward != fwd:
            try:
                if kernel_shape(other.cuda_forward).name != name:
                    out.append(Mutant("foreign_kernel", other.cuda_forward, "structure"))
                    break
            except StructureError:
                continue
    return out


# The mutants that edit the statements of the forward body, which Warp generates alike for
# CUDA and the CPU: equivalence.py applies the same edit to the CPU forward.
BODY_EDITS = {"operator_swapped": operator_swapped, "index_off_by_one": index_off_by_one, "writes_zeros": writes_zeros}


# --------------------------------------------------------------------------- partial work
#
# A second family, kept apart from the operator/index mutants above: kernels that do only
# part of the job, the reward hacks a policy finds first (issue #23).  Each keeps the
# row's own code and stops some threads before their work (a ThreadMask), or replaces
# the work with a table of the recorded outputs:
#
# ==============================  =========================================================
# kind                            the threads that still work (I: thread, N: threads, B: block)
# ==============================  =========================================================
# partial_first_element           I < 1
# partial_first_half              I < N / 2
# partial_first_block             I < B
# partial_all_but_last_element    I + 1 < N
# partial_all_but_last_block      I < (N - 1) / B * B
# skipped_work                    none
# replayed_outputs                none; thread 0 writes the recorded outputs (first size) from a table
# backward_empty                  right forward; no thread runs the backward
# backward_partial                right forward; the backward's first half of the threads
# ==============================  =========================================================
#
# I is Warp's flat thread index (``_idx`` in CUDA, ``task_index`` on the CPU), B the GPU
# block size (the row's block_dim for tile kernels, else Warp's default): literals, so
# "the first block" means the same threads on the GPU and on the CPU.  A mask that keeps
# every thread at every recorded size is not made.  equivalence.py applies the same mask
# to Warp's CPU forward (or backward) for the witness; for a tile kernel the CPU runs one
# task per block, so a mask that cuts through blocks (lanes) is witnessed by which lanes
# hold tile elements instead (``tile_lanes``).


@dataclass(frozen=True)
class ThreadMask:
    keep: str  # C condition on {i}, {n}, {b}
    kept_np: Callable[[np.ndarray, int, int], np.ndarray]  # the same condition in NumPy
    part: str = "forward"  # the function it edits: forward or backward

    def c(self, i: str, n: str, b: str) -> str:
        return self.keep.format(i=i, n=n, b=b)

    def kept(self, threads: int, block: int) -> np.ndarray:
        """Which of ``threads`` threads do their work."""
        i = np.arange(threads, dtype=np.int64)
        return np.broadcast_to(self.kept_np(i, threads, block), (threads,))


PARTIAL_MASKS = {
    "partial_first_element": ThreadMask("{i} < 1", lambda i, n, b: i < 1),
    "partial_first_half": ThreadMask("{i} < {n} / 2", lambda i, n, b: i < n // 2),
    "partial_first_block": ThreadMask("{i} < {b}", lambda i, n, b: i < b),
    "partial_all_but_last_element": ThreadMask("{i} + 1 < {n}", lambda i, n, b: i + 1 < n),
    "partial_all_but_last_block": ThreadMask("{i} < ({n} - 1) / {b} * {b}", lambda i, n, b: i < (n - 1) // b * b),
    "skipped_work": ThreadMask("false", lambda i, n, b: i < 0),
    "backward_empty": ThreadMask("false", lambda i, n, b: i < 0, "backward"),
    "backward_partial": ThreadMask("{i} < {n} / 2", lambda i, n, b: i < n // 2, "backward"),
}
PARTIAL_KINDS = (*PARTIAL_MASKS, "replayed_outputs")
REPLAY_LIMIT = 1 << 14  # scalars of recorded outputs a replay table holds at most

_LOOP_BODY = re.compile(r"for \(size_t _idx = [^;]*;\s*_idx < dim\.size;\s*_idx \+= [^\n]*\)[ \t]*\n[ \t]*\{\n")
_CPU_ARGS = re.compile(r"^[ \t]*[^\n]*= _wp_(?:adj_)?args->[\w.]+;\n", re.M)
_TILE_SHAPE = re.compile(r"tile_shape_t<([\d,\s]+)>")


def block_size(row: Row) -> int:
    return int(row.block_dim or DEFAULT_BLOCK_DIM)


def gpu_threads(row: Row) -> list[int]:
    """Threads a GPU launch of the row runs, per recorded size (tile kernels: blocks x lanes)."""
    if not row.test_vectors:
        sets = [(row.launch_dim, row.block_dim)]
    else:
        sets = [(s.launch_dim, s.block_dim) for s in TestVectors.from_json(row.test_vectors).sets()]
    return [int(np.prod(launch)) * (int(block) if block else 1) for launch, block in sets]


def masked_cuda(kernel_text: str, mask: ThreadMask, block: int) -> str | None:
    """The CUDA kernel with its threads masked at the top of the grid-stride loop body."""
    m = _LOOP_BODY.search(kernel_text)
    if not m:
        return None
    guard = f"        if (!({mask.c('_idx', 'dim.size', f'(size_t){block}')})) continue;  // partial work\n"
    return kernel_text[: m.end()] + guard + kernel_text[m.end() :]


def masked_cpu(function_text: str, mask: ThreadMask, block: int, tiled: bool) -> str | None:
    """The same mask in Warp's CPU kernel function (one task per thread; for a tile kernel,
    one task per block: the mask must then keep or drop whole blocks)."""
    ms = list(_CPU_ARGS.finditer(function_text))
    if not ms:
        return None
    if tiled:
        cond = mask.c(f"(task_index * {block})", f"(dim.size * {block})", f"(size_t){block}")
    else:
        cond = mask.c("task_index", "dim.size", f"(size_t){block}")
    at = ms[-1].end()
    return function_text[:at] + f"    if (!({cond})) return;  // partial work\n" + function_text[at:]


def _replay_table(arg: dict, value: np.ndarray) -> tuple[str, str, int] | None:
    """(C unsigned type, table literal, scalars) of an output's recorded value, as raw bits."""
    np_dtype, comp = DTYPES[arg["dtype"]]
    data = np.ascontiguousarray(np.asarray(value, dtype=np_dtype)).reshape(-1)
    if data.size > REPLAY_LIMIT:
        return None
    size = data.dtype.itemsize
    ctype = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}[size]
    bits = data.view(f"uint{8 * size}")
    suffix = "ull" if size == 8 else "u"
    return ctype, ", ".join(f"0x{int(b):x}{suffix}" for b in bits), int(data.size)


def replay_code(row: Row, first: str) -> str | None:
    """C statements: where ``first`` holds, write every output's recorded value (first
    size) from a table of raw bits, as many scalars as the array holds."""
    outputs = TestVectors.from_json(row.test_vectors).decoded()["outputs"]
    args = [a for a in orjson.loads(row.arg_specs) if a["kind"] == "array" and a["role"] != "in"]
    writes = []
    for a in args:
        if a["name"] not in outputs:
            continue
        table = _replay_table(a, outputs[a["name"]])
        if table is None:
            return None
        ctype, literal, n = table
        comps = int(np.prod(DTYPES[a["dtype"]][1], dtype=np.int64))
        held = " * ".join([f"(size_t)var_{a['name']}.shape[{d}]" for d in range(len(a["shape"]))] + [str(comps)])
        store = f"(({ctype}*)var_{a['name']}.data)[k] = cudagen_table[k];"
        writes.append(
            f"{{ const {ctype} cudagen_table[{n}] = {{{literal}}};\n"
            f"          for (size_t k = 0; k < {n} && k < {held}; ++k) {store} }}"
        )
    if not writes:
        return None
    return f"if ({first}) {{\n          " + "\n          ".join(writes) + "\n        }\n"


def replayed_outputs(row: Row) -> str | None:
    """The forward with the work replaced by a replay of the recorded outputs (thread 0)."""
    code = replay_code(row, "_idx == 0")
    m = _LOOP_BODY.search(row.cuda_forward)
    if code is None or not m:
        return None
    fwd = row.cuda_forward
    return fwd[: m.end()] + "        " + code + "        continue;  // replayed\n" + fwd[m.end() :]


def replayed_cpu(row: Row, function_text: str) -> str | None:
    code = replay_code(row, "task_index == 0")
    ms = list(_CPU_ARGS.finditer(function_text))
    if code is None or not ms:
        return None
    at = ms[-1].end()
    return function_text[:at] + "    " + code + "    return;  // replayed\n" + function_text[at:]


def tile_lanes(kernel_text: str) -> int:
    """Lanes of a block that hold tile elements: the largest tile's element count (Warp
    spreads a tile's elements over lanes 0, 1, ... in turn)."""
    counts = [int(np.prod([int(d) for d in m.group(1).split(",")])) for m in _TILE_SHAPE.finditer(kernel_text)]
    return max(counts, default=0)


def make_partial_mutants(row: Row) -> list[Mutant]:
    """Every partial-work mutant that applies to ``row`` (all run-stage mutants)."""
    block, threads = block_size(row), gpu_threads(row)
    out = []
    for kind, mask in PARTIAL_MASKS.items():
        if not any(not mask.kept(n, block).all() for n in threads):
            continue  # keeps every thread at every size: no mutant
        if mask.part == "backward":
            if not row.cuda_backward:
                continue
            text = masked_cuda(row.cuda_backward, mask, block)
            if text is not None:
                out.append(Mutant(kind, row.cuda_forward, "run", backward=text))
            continue
        text = masked_cuda(row.cuda_forward, mask, block)
        if text is not None:
            out.append(Mutant(kind, text, "run"))
    replay = replayed_outputs(row) if row.test_vectors else None
    if replay is not None:
        out.append(Mutant("replayed_outputs", replay, "run"))
    return out
