"""The kinds of negative, and the edits that make a candidate of each from a positive row.

Every kind names the stage of ``cudagen eval`` that must reject it.  The edits that the
judge's own tests already use live in eval/mutants.py and are reused here; the kinds that
module lacks are defined here (one place per kind):

=======================  =========  ==========================================================
kind                     stage      the wrong kernel
=======================  =========  ==========================================================
structure                structure  what the structure stage refuses; ``variant``: wrong_name,
                                    wrong_signature, inline_asm, namespace_state (a
                                    ``__device__`` counter, eval/mutants.stale_global),
                                    timer_read (eval/mutants), foreign_kernel (another row's
                                    kernel, verbatim)
compile_error            compile    NVRTC rejects it; ``variant``: undeclared_name (a typo'd
                                    variable), wrong_type (a pointer declared as a value),
                                    missing_cast (an int literal where Warp's float overload
                                    needs a float), wrong_builtin_signature (a builtin called
                                    with an argument missing), undefined_function
                                    (eval/mutants.undefined_call)
operator_swapped         run        eval/mutants
index_off_by_one         run        eval/mutants
bounds_check_dropped     run        eval/mutants (witness: the launch widened to whole blocks)
writes_zeros             run        eval/mutants
memorized_outputs        run        eval/mutants: the recorded outputs from a table
partial_grid             run        eval/mutants' partial-work masks: ``variant`` first_element,
                                    first_half, first_block, all_but_last_element,
                                    all_but_last_block (witness: the same mask in Warp's CPU
                                    kernel function)
skipped_work             run        eval/mutants: no thread works
replayed_outputs         run        eval/mutants: thread 0 replays the recorded outputs
precision_loss           run        ``variant`` accumulator: a loop's float32 accumulator rounded
                                    to half precision at every step; atomic_accumulation: the
                                    value added atomically rounded to half; stored_value: a
                                    stored float32 result rounded to half
race                     run        an ``atomic_add`` into an output turned into a plain
                                    read-modify-write (load, add, store)
wrong_backward           run        the forward is the positive's; the backward drops
                                    (``variant`` dropped) or negates (sign_flipped) the
                                    accumulation into an input's gradient; or eval/mutants'
                                    backward masks (empty: no thread, partial: half)
=======================  =========  ==========================================================

Each candidate carries how it is witnessed on the CPU (``witness``): ``forward`` /
``backward`` (the same edit applied to the function Warp generates for the CPU),
``widened`` (the positive's own CPU kernel on a launch widened to whole GPU blocks),
``race_model`` (the lost-update model of a fully concurrent read-modify-write, see
prove.py), or ``none`` (structure and compile kinds: the stage itself is the proof).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from ..contracts.row import Row, is_real_row
from ..eval import mutants
from ..eval.equivalence import lanes_cut
from ..eval.structure import StructureError, kernel_shape
from ..extract import DEFAULT_BLOCK_DIM

STRUCTURE, COMPILE, RUN = "structure", "compile", "run"

# kind -> stage, in the order they are documented (and counted in stats and the card)
KINDS: dict[str, str] = {
    "structure": STRUCTURE,
    "compile_error": COMPILE,
    "operator_swapped": RUN,
    "index_off_by_one": RUN,
    "bounds_check_dropped": RUN,
    "writes_zeros": RUN,
    "memorized_outputs": RUN,
    "partial_grid": RUN,
    "skipped_work": RUN,
    "replayed_outputs": RUN,
    "precision_loss": RUN,
    "race": RUN,
    "wrong_backward": RUN,
}

KIND_DOCS: dict[str, str] = {
    "structure": "What the structure stage refuses: wrong kernel name or signature, inline asm, a `__device__` "
    "global (state that outlives a launch), a timer read, another row's kernel.",
    "compile_error": "NVRTC rejects it: an undeclared (typo'd) name, a pointer declared as a value, an int literal "
    "where Warp's float overload needs a float, a builtin called with an argument missing, an undefined function.",
    "operator_swapped": "The first `add`/`sub` (else `min`/`max`, `mul`) on the way to a stored value swapped.",
    "index_off_by_one": "The thread index plus one.",
    "bounds_check_dropped": "The grid-stride loop runs once per thread, unchecked: threads past the end write.",
    "writes_zeros": "Every store writes a zero of its type.",
    "memorized_outputs": "The recorded outputs stored from a table: right on the recorded inputs, wrong on fresh ones.",
    "partial_grid": "Only part of the launch does the work (the first element, half, block; all but the last "
    "element or block): eval/mutants.py's thread masks.",
    "skipped_work": "No thread does the work (outputs keep their initial values).",
    "replayed_outputs": "Thread 0 writes the recorded outputs from a table: right on the recorded inputs only.",
    "precision_loss": "A float32 accumulation (or a stored result) rounded to half precision.",
    "race": "An `atomic_add` into an output turned into a plain read-modify-write: concurrent updates are lost.",
    "wrong_backward": "The forward is right; the backward drops or negates the accumulation into an input's "
    "gradient, or (eval/mutants.py) runs on no thread or half of them.",
}

Edit = Callable[[str], str | None]


@dataclass(frozen=True)
class Candidate:
    """A wrong pair made from a positive row, before it is proven wrong."""

    kind: str
    variant: str
    forward: str
    backward: str
    witness: str  # forward, backward, widened, race_model, mask_forward, mask_backward, none
    edit: Edit | None = None  # the text edit (forward or backward) that the CPU witness applies

    @property
    def stage(self) -> str:
        return KINDS[self.kind]


# --------------------------------------------------------------------------- helpers

_FLOAT32_DECL = re.compile(r"^[ \t]*(?:const )?wp::float32[ \t]+(var_\w+)\b", re.M)
_ASSIGN = re.compile(r"^(?P<indent>[ \t]*)wp::assign\((?P<dst>var_\w+), (?P<src>var_\w+)\);", re.M)
_ATOMIC_ADD = re.compile(
    r"^(?P<indent>[ \t]*)(?P<ret>var_\w+) = wp::atomic_add\((?P<arr>var_\w+), (?P<idx>var_\w+), (?P<val>var_\w+)\);",
    re.M,
)
_STORE = re.compile(
    r"^(?P<indent>[ \t]*)wp::array_store\((?P<arr>var_\w+), (?P<idx>var_\w+), (?P<val>var_\w+)\);", re.M
)
_POINTER_DECL = re.compile(r"^(?P<indent>[ \t]*)(?P<type>wp::\w+)\* (?P<var>var_\w+);", re.M)
_FLOAT_BINARY = re.compile(
    r"^(?P<head>[ \t]*(?P<dst>var_\w+) = wp::(?:add|sub|mul|min|max)\()(?P<a>var_\w+), (?P<b>var_\w+)\);", re.M
)
_BUILTIN_CALL = re.compile(
    r"^(?P<head>[ \t]*(?:var_\w+ = )?wp::(?P<fn>array_store|address|atomic_add|load)\()(?P<args>[^;\n]*)\);", re.M
)
_ADJ_ADDRESS = re.compile(r"^(?P<indent>[ \t]*)wp::adj_address\(var_(?P<arr>\w+), [^;\n]*, (?P<adj>adj_\w+)\);\n", re.M)


_BODY_START = re.compile(r"\n[ \t]*// forward\n")


def _body_at(text: str) -> int:
    """Where the function's statements start (after Warp's declarations)."""
    m = _BODY_START.search(text)
    return m.end() if m else text.index("{") + 1


def _float32_vars(text: str) -> set[str]:
    return set(_FLOAT32_DECL.findall(text))


def _out_arrays(row: Row) -> dict[str, str]:
    """name -> role of the row's array arguments."""
    return {a["name"]: a["role"] for a in orjson.loads(row.arg_specs) if a["kind"] == "array"}


def _in_loop(text: str, at: int) -> bool:
    """Whether position ``at`` lies between a ``start_for_N:`` label and its ``end_for_N:``."""
    for m in re.finditer(r"start_(for|while)_(\d+):;", text[:at]):
        if f"end_{m.group(1)}_{m.group(2)}:;" not in text[m.end() : at]:
            return True
    return False


# --------------------------------------------------------------------------- structure


def wrong_name(forward: str) -> str | None:
    """The kernel named without Warp's hash (what a model that forgets the suffix writes)."""
    m = re.search(r'extern "C" __global__ void (\w+?)_([0-9a-f]{8})_cuda_kernel_forward\(', forward)
    if not m:
        return None
    return forward[: m.start(1)] + m.group(1) + "_cuda_kernel_forward(" + forward[m.end() :]


def wrong_signature(forward: str) -> str | None:
    """One parameter's type changed: the first float32 array (or scalar) becomes float64."""
    head_end = forward.find(")")
    head = forward[:head_end]
    for old, new in (("wp::array_t<wp::float32>", "wp::array_t<wp::float64>"), ("wp::float32 var_", "wp::float64 var_"),
                     ("wp::int32 var_", "wp::int64 var_")):  # fmt: skip
        i = head.find(old)
        if i >= 0:
            return forward[:i] + new + forward[i + len(old) :]
    return None


def inline_asm(forward: str) -> str | None:
    brace = forward.find("{")
    if brace < 0:
        return None
    return forward[: brace + 1] + '\n    asm volatile("membar.gl;");' + forward[brace + 1 :]


# --------------------------------------------------------------------------- compile


def undeclared_name(forward: str) -> str | None:
    """A variable used under a typo'd name (``var_12`` -> ``var12``) in one statement."""
    at = _body_at(forward)
    m = re.search(r"^[ \t]*var_\w+ = wp::\w+\((var_(\d+))[,)]", forward[at:], re.M)
    if not m:
        return None
    i = at + m.start(1)
    return forward[:i] + "var" + m.group(2) + forward[i + len(m.group(1)) :]


def wrong_type(forward: str) -> str | None:
    """An address declared as a value (``wp::float32* var_7`` -> ``wp::float32 var_7``)."""
    m = _POINTER_DECL.search(forward)
    if not m:
        return None
    return forward[: m.start()] + f"{m.group('indent')}{m.group('type')} {m.group('var')};" + forward[m.end() :]


def missing_cast(forward: str) -> str | None:
    """A float32 operand replaced by the int literal ``1``: Warp's ``add(T, T)`` cannot deduce T."""
    floats = _float32_vars(forward)
    at = _body_at(forward)
    for m in _FLOAT_BINARY.finditer(forward, at):
        if m.group("a") in floats and m.group("b") in floats:
            return forward[: m.start("b")] + "1" + forward[m.end("b") :]
    return None


def wrong_builtin_signature(forward: str) -> str | None:
    """A builtin called with its last argument missing (``array_store(arr, i)``)."""
    at = _body_at(forward)
    for m in _BUILTIN_CALL.finditer(forward, at):
        args = [a.strip() for a in m.group("args").split(",")]
        if len(args) >= 2 and m.group("fn") in ("array_store", "atomic_add"):
            return forward[: m.start("args")] + ", ".join(args[:-1]) + forward[m.end("args") :]
    for m in _BUILTIN_CALL.finditer(forward, at):
        args = [a.strip() for a in m.group("args").split(",")]
        if len(args) >= 2:
            return forward[: m.start("args")] + ", ".join(args[:-1]) + forward[m.end("args") :]
    return None


# --------------------------------------------------------------------------- run


def _half(var: str) -> str:
    return f"wp::float32(wp::float16({var}))"


def precision_accumulator(forward: str) -> str | None:
    floats = _float32_vars(forward)
    for m in _ASSIGN.finditer(forward, _body_at(forward)):
        if m.group("dst") in floats and m.group("src") in floats and _in_loop(forward, m.start()):
            new = f"{m.group('indent')}wp::assign({m.group('dst')}, {_half(m.group('src'))});"
            return forward[: m.start()] + new + forward[m.end() :]
    return None


def precision_atomic(forward: str, exact: set[str] = frozenset()) -> str | None:
    floats = _float32_vars(forward)
    for m in _ATOMIC_ADD.finditer(forward, _body_at(forward)):
        if m.group("val") in floats and m.group("arr") not in exact:
            return forward[: m.start("val")] + _half(m.group("val")) + forward[m.end("val") :]
    return None


def _exact_in_half(row: Row) -> set[str]:
    """Output arrays whose recorded values are all exact in half precision (rounding them changes nothing)."""
    vectors = orjson.loads(row.test_vectors) if row.test_vectors else {}
    out: set[str] = set()
    for name, value in (vectors.get("outputs") or {}).items():
        data = np.asarray(value["data"], dtype=np.float64)
        with np.errstate(over="ignore"):  # beyond half's range: inf, not equal, so not exact
            exact = np.all(data.astype(np.float16).astype(np.float64) == data)
        if exact:
            out.add(f"var_{name}")
    return out


def precision_store(forward: str, exact: set[str] = frozenset()) -> str | None:
    floats = _float32_vars(forward)
    for m in _STORE.finditer(forward, _body_at(forward)):
        if m.group("val") in floats and m.group("arr") not in exact:
            return forward[: m.start("val")] + _half(m.group("val")) + forward[m.end("val") :]
    return None


def race_edit(row: Row) -> Edit:
    """The atomic_add into an ``out`` array (which starts at zero) made a plain read-modify-write."""
    roles = _out_arrays(row)

    def edit(forward: str) -> str | None:
        for m in _ATOMIC_ADD.finditer(forward, _body_at(forward)):
            if roles.get(m.group("arr")[len("var_") :]) == "out":
                ret, arr, idx, val = m.group("ret", "arr", "idx", "val")
                indent = m.group("indent")
                plain = (f"{indent}{ret} = wp::load(wp::address({arr}, {idx}));  // read\n"
                         f"{indent}wp::array_store({arr}, {idx}, wp::add({ret}, {val}));  // add, write")  # fmt: skip
                return forward[: m.start()] + plain + forward[m.end() :]
        return None

    return edit


def race_model(row: Row) -> Edit:
    """The CPU model of the race's outcome when every thread of a contended element reads
    it before any writes (the lost updates of a fully concurrent read-modify-write): each
    thread stores its own contribution over the zero it read."""
    roles = _out_arrays(row)

    def edit(forward: str) -> str | None:
        for m in _ATOMIC_ADD.finditer(forward, _body_at(forward)):
            if roles.get(m.group("arr")[len("var_") :]) == "out":
                ret, arr, idx, val = m.group("ret", "arr", "idx", "val")
                model = (f"{m.group('indent')}{ret} = decltype({ret}){{}};\n"
                         f"{m.group('indent')}wp::array_store({arr}, {idx}, {val});")  # fmt: skip
                return forward[: m.start()] + model + forward[m.end() :]
        return None

    return edit


def backward_edit(row: Row, variant: str) -> Edit:
    """Drop (``dropped``) or negate (``sign_flipped``) the accumulation into the gradient of
    one float input array: the first (in argument order) whose recorded gradient is not all
    zero, every ``adj_address`` of it in the reverse code."""
    vectors = orjson.loads(row.test_vectors) if row.test_vectors else {}
    graded = [n for n, g in (vectors.get("input_grads") or {}).items() if np.any(np.asarray(g["data"], dtype=float))]

    def edit(backward: str) -> str | None:
        reverse = backward.find("// reverse")
        if reverse < 0:
            return None
        for name in graded:
            found = [m for m in _ADJ_ADDRESS.finditer(backward, reverse) if m.group("arr") == name]
            if not found:
                continue
            out, at = [], 0
            for m in found:
                out.append(backward[at : m.start()])
                if variant == "sign_flipped":
                    adj = m.group("adj")
                    out.append(f"{m.group('indent')}{adj} = wp::neg({adj});\n" + m.group(0))
                at = m.end()
            return "".join(out) + backward[at:]
        return None

    return edit


def covers_whole_blocks(row: Row) -> bool:
    """Every launched thread has work (a tile launch; a size that fills whole blocks): no
    thread runs past the end, so dropping the bounds check changes nothing."""
    return bool(row.block_dim) or int(np.prod(row.launch_dim)) % DEFAULT_BLOCK_DIM == 0


def memorized_edit(row: Row) -> Edit:
    """eval/mutants.memorized_outputs as an edit of any forward text of ``row``."""

    def edit(text: str) -> str | None:
        return mutants.memorized_outputs(dataclasses.replace(row, cuda_forward=text))

    return edit


# --------------------------------------------------------------------------- candidates


def _runnable(row: Row) -> bool:
    """Whether a witness (and eval's run stage) can run the row: it has test vectors and a
    self-contained Python source.  A mined row's source is the kernel's own definition,
    which needs its file to run (``provenance.path``), so mined rows get structure and
    compile negatives only."""
    return bool(row.test_vectors) and not is_real_row(row)


def candidates(row: Row, others: Sequence[Row] = ()) -> list[Candidate]:
    """Every candidate the row allows, one per (kind, variant), in KINDS order.

    Run-stage kinds need a runnable row (:func:`_runnable`); wrong_backward needs a
    backward whose gradient the row verified against finite differences."""
    fwd, bwd = row.cuda_forward, row.cuda_backward or ""
    out: list[Candidate] = []

    def add(kind: str, variant: str, text: str | None, witness: str = "none", edit: Edit | None = None,
            backward: str | None = None) -> None:  # fmt: skip
        if text is None:
            return
        if backward is None and text == fwd:
            return
        if backward is not None and backward == bwd:
            return
        out.append(Candidate(kind, variant, text, backward if backward is not None else bwd, witness, edit))

    for variant, edit in (("wrong_name", wrong_name), ("wrong_signature", wrong_signature), ("inline_asm", inline_asm),
                          ("namespace_state", mutants.stale_global), ("timer_read", mutants.timer_read)):  # fmt: skip
        add("structure", variant, edit(fwd))
    try:
        name = kernel_shape(fwd).name
        for other in others:
            if other.cuda_forward != fwd and kernel_shape(other.cuda_forward).name != name:
                add("structure", "foreign_kernel", other.cuda_forward)
                break
    except StructureError:
        pass
    for variant, edit in (("undeclared_name", undeclared_name), ("wrong_type", wrong_type),
                          ("missing_cast", missing_cast), ("wrong_builtin_signature", wrong_builtin_signature),
                          ("undefined_function", mutants.undefined_call)):  # fmt: skip
        add("compile_error", variant, edit(fwd))
    if not _runnable(row):
        return out
    for kind, edit in mutants.BODY_EDITS.items():
        if kind == "writes_zeros" and row.block_dim:
            # a tile zeroed in place on the CPU is a default tile with no storage: its store
            # crashes the witness's process (Warp 1.19), so tile kernels get no writes_zeros
            continue
        add(kind, "", edit(fwd), "forward", edit)
    if not covers_whole_blocks(row):
        add("bounds_check_dropped", "", mutants.bounds_check_dropped(fwd), "widened")
    memo = memorized_edit(row)
    add("memorized_outputs", "", memo(fwd), "forward", memo)
    partial_candidates(row, add)
    exact = _exact_in_half(row)
    for variant, edit in (("accumulator", precision_accumulator),
                          ("atomic_accumulation", lambda text: precision_atomic(text, exact)),
                          ("stored_value", lambda text: precision_store(text, exact))):  # fmt: skip
        text = edit(fwd)
        if text is not None:
            add("precision_loss", variant, text, "forward", edit)
            break
    add("race", "", race_edit(row)(fwd), "race_model", race_model(row))
    if bwd and row.gradient_check.status == "verified":
        for variant in ("dropped", "sign_flipped"):
            edit = backward_edit(row, variant)
            add("wrong_backward", variant, fwd, "backward", edit, backward=edit(bwd))
    return out


# eval/mutants.py's partial-work masks, as (kind, variant) here
PARTIAL = {
    "partial_first_element": ("partial_grid", "first_element"),
    "partial_first_half": ("partial_grid", "first_half"),
    "partial_first_block": ("partial_grid", "first_block"),
    "partial_all_but_last_element": ("partial_grid", "all_but_last_element"),
    "partial_all_but_last_block": ("partial_grid", "all_but_last_block"),
    "skipped_work": ("skipped_work", ""),
    "backward_empty": ("wrong_backward", "empty"),
    "backward_partial": ("wrong_backward", "partial"),
}


def partial_candidates(row: Row, add: Callable) -> None:
    """eval/mutants.make_partial_mutants, each with its CPU counterpart (the same thread mask
    in Warp's CPU kernel function, or the table replay); a tile kernel's mask that skips
    lanes holding tile elements has none (equivalence.lanes_cut) and is not made."""
    tiled, block = bool(row.block_dim), mutants.block_size(row)
    verified = row.gradient_check.status == "verified"
    for m in mutants.make_partial_mutants(row):
        if m.kind == "replayed_outputs":
            add("replayed_outputs", "", m.forward, "mask_forward", lambda text: mutants.replayed_cpu(row, text))
            continue
        mask = mutants.PARTIAL_MASKS[m.kind]
        if tiled:
            skipped, working = lanes_cut(row, m)
            if skipped and min(skipped) < working:
                continue
        kind, variant = PARTIAL[m.kind]
        if kind == "wrong_backward" and not verified:
            continue
        edit = functools.partial(mutants.masked_cpu, mask=mask, block=block, tiled=tiled)
        add(kind, variant, m.forward, f"mask_{mask.part}", edit, backward=m.backward)
