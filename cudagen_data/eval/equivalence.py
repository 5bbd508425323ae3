"""Whether a mutant can be told apart from the row's kernel at all, decided on the CPU.

A judge that tests kernels on inputs cannot reject a mutant that computes the same
results on those inputs: ``x + eps`` swapped for ``x - eps`` within the tolerance, an
operator in index arithmetic that only thread 0 runs, threads past the end of a launch
that the kernel's own ``if`` stops.  Such a mutant is right by the judge's measure, and
a test that expects the judge to reject it tests the mutant, not the judge.  This module
is the independent witness: it runs the mutant's semantics on Warp's CPU backend through
the run stage's own judging (run.judge_kernel, same input sets, guard fills and
tolerance), so a mutant the GPU judge lets pass is either shown equivalent here or is a
hole in the judge.

- Body edits (mutants.BODY_EDITS): the same edit is applied to the forward function Warp
  generates for the CPU, whose statements are the CUDA forward's line for line; the edit
  must change the same lines in both, else the verdict is "unknown".
- bounds_check_dropped: the CPU backend has no threads past the end of a launch, so the
  launch is widened to whole blocks of the GPU's block size.  For a 1-D launch those are
  exactly the GPU's extra threads; for an N-D launch the first dimension grows to cover
  them, a superset (an "equivalent" verdict holds; an "observable" one says so).

On the CPU a write past the end lands in the process's heap, so the arrays get wide
guards (ORACLE_GUARD_ELEMENTS) and :func:`verdicts` runs each mutant in a process of its
own: one that still corrupts the heap costs only its own verdict ("unknown").
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import orjson

from .. import warp_boundary
from ..contracts.row import Row, row_from_dict
from ..execution import CPU_OPT_LEVEL
from ..extract import DEFAULT_BLOCK_DIM
from .mutants import (
    BODY_EDITS,
    PARTIAL_KINDS,
    PARTIAL_MASKS,
    Mutant,
    block_size,
    gpu_threads,
    masked_cpu,
    replayed_cpu,
    tile_lanes,
)
from .reference import Reference, compute_reference
from .run import CandidateBuildFailed, candidate_kernel, judge_kernel, planned_runs, run_guarded
from .shared_scrub import CPU_ARENA_BYTES, SCRUB_WORDS, shared_scrub

ORACLE_GUARD_ELEMENTS = 1 << 16  # per side: far writes of threads past the end stay in the guards
VERDICT_TIMEOUT = 300.0


@dataclass(frozen=True)
class Verdict:
    status: str  # "observable", "equivalent" or "unknown"
    detail: str = ""


def _changed_lines(before: str, after: str) -> list[str]:
    return [ln[1:].strip() for ln in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
            if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]  # fmt: skip


def widened_launch(launch_dim, block_dim: int = DEFAULT_BLOCK_DIM) -> tuple[int, ...]:
    """The launch grown so it covers the GPU's threads past the end (whole blocks)."""
    dims = [int(d) for d in launch_dim]
    total = int(np.prod(dims))
    extra = -(-total // block_dim) * block_dim - total
    inner = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    dims[0] += -(-extra // inner)
    return tuple(dims)


def mutant_verdict(row: Row, mutant: Mutant, ref: Reference) -> Verdict:
    """Can ``mutant`` be told apart from ``row``'s kernel on ``ref``'s input sets?"""
    if mutant.kind in PARTIAL_KINDS:
        return partial_verdict(row, mutant, ref)
    edit = BODY_EDITS.get(mutant.kind)
    if edit is None and mutant.kind != "bounds_check_dropped":
        return Verdict("unknown", f"no CPU counterpart for a {mutant.kind} mutant")
    cuda_change = _changed_lines(row.cuda_forward, mutant.forward)
    spec = ref.spec

    def widened(size_spec):
        return dataclasses.replace(size_spec, launch_dim=widened_launch(size_spec.launch_dim))

    spec_for = widened if edit is None else None
    with warp_boundary.batch_module([(spec.python_source, spec.kernel_name)], optimization_level=CPU_OPT_LEVEL) as (
        module,
        kernels,
        errors,
    ):
        kernel = kernels[0]
        if kernel is None:
            return Verdict("unknown", f"the row's kernel does not load: {errors[0]}")
        with warp_boundary.fresh_kernel_cache():
            if edit is not None:
                try:
                    with warp_boundary.edited_cpu_forward(kernel, edit) as edits:
                        problem = warp_boundary.build_module(module, "cpu")
                except warp_boundary.SubstitutionMissing as exc:
                    return Verdict("unknown", str(exc))
                if problem is None and (not edits or _changed_lines(*edits[-1]) != cuda_change):
                    return Verdict("unknown", "the edit changes other lines in the CPU forward than in the CUDA one")
            else:
                problem = warp_boundary.build_module(module, "cpu")
            if problem is not None:
                return Verdict("unknown", f"the edited kernel does not build on the CPU: {problem}")
            failures = judge_kernel(
                ref, kernel, "cpu", bool(row.cuda_backward), spec_for=spec_for, guard_elements=ORACLE_GUARD_ELEMENTS
            )
    if failures:
        superset = edit is None and len(spec.launch_dim) > 1
        return Verdict(
            "observable", ("(N-D launch: a superset of the GPU's extra threads) " if superset else "") + failures[0]
        )
    return Verdict("equivalent", "its results pass the judge on every input set and guard fill")


def _lanes(values) -> str:
    values = sorted(set(int(v) for v in values))
    return f"{values[0]}..{values[-1]}" if len(values) > 1 else str(values[0])


def _lane_words(values) -> str:
    """``lane 127`` or ``lanes 64..127``."""
    text = _lanes(values)
    return f"lanes {text}" if ".." in text else f"lane {text}"


def _idle(values) -> str:
    """``lane 127 of cut blocks holds no work`` (or ``lanes ... hold``) ``that reaches a result``."""
    verb = "hold" if ".." in _lanes(values) else "holds"
    return f"{_lane_words(values)} of cut blocks {verb} no work that reaches a result"


def lanes_cut(row: Row, mutant: Mutant) -> tuple[list[int], int]:
    """For a tile kernel: (the lanes the mutant skips in blocks where other lanes still
    work, the lanes of a block that hold tile elements).  The CPU runs one task per
    block, so it can only witness whole blocks kept or dropped."""
    mask, block = PARTIAL_MASKS[mutant.kind], block_size(row)
    skipped: list[int] = []
    for threads in gpu_threads(row):
        kept = mask.kept(threads, block).reshape(-1, block)
        mixed = kept[~(kept == kept[:, :1]).all(axis=1)]
        skipped += [int(lane) for lane in np.nonzero(~mixed)[1]]
    text = mutant.backward if mask.part == "backward" else mutant.forward
    return skipped, min(tile_lanes(text), block)


def partial_verdict(row: Row, mutant: Mutant, ref: Reference) -> Verdict:
    """The witness of a partial-work mutant: the same thread mask (or table replay) in
    Warp's CPU kernel function, judged as the run stage judges on the same input sets.

    A tile kernel runs one CPU task per block unless its mask cuts through blocks (some
    lanes of a block work, others skip): then the CPU runs it as the GPU does, a block of
    ``block_dim`` lanes (Warp's cooperative CPU blocks, ``wp.config.enable_cpu_blocks``),
    the same lane mask, and the block's tile memory poisoned before each launch with the
    judge's scrub words (shared_scrub.py; Warp clears the CPU arena to zeros, a value too
    easily right).  Equivalent then means: the lanes it skips do no work that reaches a
    result on these inputs, even where what they did not write reads as poison.  Warp's
    CPU tile copies are element by element (lane ``l`` takes elements ``l``, ``l + B``, ...);
    a GPU copies N-D tiles whose rows are whole 16-byte words as float4 over a quarter of
    the lanes, so a GPU lane may hold less than its CPU lane (:func:`gpu_lane_verdict`
    decides those on the GPU)."""
    tiled = bool(row.block_dim)
    lanes: list[int] = []
    if mutant.kind == "replayed_outputs":
        part = "forward"

        def edit(text):
            return replayed_cpu(row, text)
    else:
        mask, block = PARTIAL_MASKS[mutant.kind], block_size(row)
        part = mask.part
        lanes = lanes_cut(row, mutant)[0] if tiled else []

        def edit(text):
            if lanes:  # lane by lane, as on the GPU
                return masked_cpu(poisoned_tile_memory(text, word.ctypes.data), mask, block, False)
            return masked_cpu(text, mask, block, tiled)

    word = np.zeros(1, dtype=np.uint32)  # the poison word of the run in flight (lane-level runs)
    spec = ref.spec
    backward = bool(row.cuda_backward)
    with warp_boundary.batch_module([(spec.python_source, spec.kernel_name)], optimization_level=CPU_OPT_LEVEL) as (
        module,
        kernels,
        errors,
    ):
        kernel = kernels[0]
        if kernel is None:
            return Verdict("unknown", f"the row's kernel does not load: {errors[0]}")
        with warp_boundary.fresh_kernel_cache():
            if lanes:
                with cooperative_cpu_blocks():
                    problem = _build_edited(module, kernel, part, edit, sorted({s.spec.block_dim for s in ref.sets}))
                    if problem is not None:
                        return Verdict("unknown", problem)

                    def poison(fill: str) -> None:
                        word[0] = SCRUB_WORDS[fill]

                    failures = judge_kernel(ref, kernel, "cpu", backward, guard_elements=ORACLE_GUARD_ELEMENTS,
                                            scrub=poison)  # fmt: skip
            else:
                problem = _build_edited(module, kernel, part, edit, [None])
                if problem is not None:
                    return Verdict("unknown", problem)
                # one CPU lane does all of a block's tile work here: nothing is left to read poison
                failures = judge_kernel(ref, kernel, "cpu", backward, guard_elements=ORACLE_GUARD_ELEMENTS)
    where = f" ({block_size(row)} lanes a block, {_lane_words(lanes)} of cut blocks skipped)" if lanes else ""
    if failures:
        return Verdict("observable", failures[0] + where)
    if lanes:
        why = f"{_idle(lanes)}: passed on every input set"
        return Verdict("equivalent", f"{why} and guard fill with tile memory poisoned{where}{_gpu_copies(row)}")
    return Verdict("equivalent", f"its results pass the judge on every input set and guard fill ({part} edited)")


@contextlib.contextmanager
def cooperative_cpu_blocks():
    """Warp's CPU runs a tile launch as blocks of ``block_dim`` lanes (fibers) meanwhile."""
    wp = warp_boundary.warp()
    saved = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = True
    try:
        yield
    finally:
        wp.config.enable_cpu_blocks = saved


def _build_edited(module, kernel, part: str, edit, block_dims: list[int | None]) -> str | None:
    """Build ``module`` for the CPU with ``kernel``'s ``part`` edited (at each block dim:
    cooperative blocks; None: Warp's one-lane CPU build); why not, or None."""
    try:
        with warp_boundary.edited_cpu_functions(module, [(kernel, part, edit)]):
            for block_dim in block_dims:
                problem = (warp_boundary.build_module(module, "cpu") if block_dim is None
                           else _build_cpu_blocks(module, block_dim))  # fmt: skip
                if problem is not None:
                    return f"the edited kernel does not build on the CPU: {problem}"
    except warp_boundary.SubstitutionMissing as exc:
        return str(exc)
    return None


def _build_cpu_blocks(module, block_dim: int) -> str | None:
    """Build ``module`` for Warp's cooperative CPU blocks of ``block_dim`` lanes; the error, or None."""
    with warp_boundary.captured_stderr():
        try:
            module.load("cpu", block_dim=block_dim)
        except Exception as exc:  # noqa: BLE001 - clang / Warp errors come in many types
            lines = str(exc).strip().splitlines()
            return lines[0] if lines else "build failed"
    return None


_CPU_ARGS_END = re.compile(r"^[ \t]*[^\n]*= _wp_(?:adj_)?args->[\w.]+;\n", re.M)


def poisoned_tile_memory(function_text: str, word_address: int) -> str | None:
    """Warp's CPU kernel function with the block's whole tile arena filled, before anything
    else, with the 32-bit word at ``word_address`` (the witness sets it per run), all lanes
    sharing the work, then a barrier: what a lane does not write reads as poison."""
    ms = list(_CPU_ARGS_END.finditer(function_text))
    if not ms:
        return None
    fill = (
        "    {  // cudagen: the block's tile memory poisoned (eval/equivalence.py), as shared_scrub does on a GPU\n"
        f"        const unsigned int cudagen_word = *(volatile const unsigned int*)0x{word_address:x}ull;\n"
        f"        unsigned int* cudagen_arena = (unsigned int*)wp::tile_shared_storage_t::alloc({CPU_ARENA_BYTES});\n"
        f"        for (int w = WP_TILE_THREAD_IDX; w < {CPU_ARENA_BYTES // 4}; w += WP_TILE_BLOCK_DIM)\n"
        "            cudagen_arena[w] = cudagen_word;\n"
        f"        wp::tile_shared_storage_t::alloc(-{CPU_ARENA_BYTES});\n"
        "        WP_TILE_SYNC();\n"
        "    }\n"
    )
    at = ms[-1].end()
    return function_text[:at] + fill + function_text[at:]


_TILE_TYPE = re.compile(r"tile_shared_t<(?P<t>[\w:]+),\s*wp::tile_layout_strided_t<wp::tile_shape_t<(?P<d>[\d,\s]+)>")


def _gpu_copies(row: Row) -> str:
    """A note where a GPU may hand lanes other tile elements than the CPU does."""
    nd = any(len(m.group("d").split(",")) > 1 for m in _TILE_TYPE.finditer(row.cuda_forward))
    return "; a GPU copies N-D tiles whose rows are whole 16-byte words as float4, over fewer lanes" if nd else ""


def _verdict_in_process(row: Row, mutant: Mutant, seed: int) -> Verdict:
    payload = orjson.dumps(
        {
            "row": row,  # orjson writes a Row's fields as a row dict; _main reads it back as a Row
            "kind": mutant.kind,
            "forward": mutant.forward,
            "stage": mutant.stage,
            "seed": seed,
            "backward": mutant.backward,
        }  # fmt: skip
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__],
            input=payload,
            capture_output=True,
            timeout=VERDICT_TIMEOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    except subprocess.TimeoutExpired:
        return Verdict("unknown", f"no verdict within {VERDICT_TIMEOUT:.0f} s")
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        return Verdict("unknown", f"the CPU run crashed (exit {done.returncode})")
    result = orjson.loads(lines[-1])
    return Verdict(result["status"], result["detail"])


def verdicts(
    items: Sequence[tuple[Row, Mutant]], seed: int, workers: int | None = None, device: str | None = None
) -> list[Verdict]:
    """:func:`mutant_verdict` of each (row, mutant), with the reference of the fresh-input
    ``seed`` (the Scorer's), each in a process of its own, ``workers`` at a time.
    ``device`` (a GPU): a tile kernel's lane cut that the CPU's lanes do not show
    equivalent is then decided on that GPU (:func:`gpu_lane_verdict`), here."""
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        found = list(pool.map(lambda rm: _verdict_in_process(rm[0], rm[1], seed), items))
    if device is None or not device.startswith("cuda"):
        return found
    out = []
    for (row, mutant), v in zip(items, found, strict=True):
        if v.status != "equivalent" and is_lane_cut(row, mutant):
            gpu = gpu_lane_verdict(row, mutant, compute_reference(row, seed), device)
            v = Verdict(gpu.status, f"{gpu.detail} (Warp's CPU lanes: {v.status}: {v.detail[:160]})")
        out.append(v)
    return out


def is_lane_cut(row: Row, mutant: Mutant) -> bool:
    """A tile kernel's partial-work mask that skips some lanes of a block while others work."""
    return bool(row.block_dim) and mutant.kind in PARTIAL_MASKS and bool(lanes_cut(row, mutant)[0])


ROUNDING_ULPS = 16  # a difference this many units in the last place of an output's largest value is rounding


def _bits(a) -> bytes:
    a = np.ascontiguousarray(a)
    return a.tobytes()


def _ulps(a: np.ndarray, b: np.ndarray) -> float:
    """How far ``b`` is from ``a``: inf where their non-finite cells differ, else the largest
    difference in units in the last place of ``a``'s largest magnitude (0 for equal bits)."""
    if a.shape != b.shape:
        return float("inf")
    if _bits(a) == _bits(b):
        return 0.0
    if a.dtype.kind != "f":
        return float("inf")
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb) or _bits(a[~fa]) != _bits(b[~fb]):
        return float("inf")
    if not fa.any():
        return 0.0
    scale = float(np.max(np.abs(a[fa]))) or float(np.finfo(a.dtype).tiny)
    diff = float(np.max(np.abs(a[fa].astype(np.float64) - b[fb].astype(np.float64))))
    return diff / float(np.spacing(a.dtype.type(scale)))


def against_own(own: Sequence[dict[str, np.ndarray]], cand: dict[str, np.ndarray]) -> tuple[str, str, float]:
    """A lane cut's results on one input set against the row's own kernel's runs on it
    (``own[0]`` the reference, the rest its repeats): ("observable", what differs, ulps)
    where an output differs by more than ROUNDING_ULPS (a term left out, poison, a moved
    NaN); ("unknown", why, spread) where the own kernel itself varies by more than that from
    run to run (no reference to decide with); else ("", the largest difference, its ulps)."""
    first, repeats = own[0], own[1:]
    worst = (0.0, "")
    for k, v in first.items():
        if k not in cand:
            return "observable", f"{k!r} is missing", float("inf")
        spread = max((_ulps(v, r.get(k, v[:0])) for r in repeats), default=0.0)
        if spread > ROUNDING_ULPS:
            return "unknown", f"the row's own kernel's {k!r} varies by {spread:.3g} ulps from run to run", spread
        off = _ulps(v, cand[k])
        if off > ROUNDING_ULPS:
            why = f"{k!r} differs from the row's own kernel's by {off:.3g} ulps of its largest value"
            return "observable", f"{why} (the own kernel's run-to-run spread: {spread:.3g})", off
        if off > worst[0]:
            worst = (off, f"{k!r}: {off:.3g} ulps, own spread {spread:.3g}")
    return "", worst[1], worst[0]


def gpu_lane_verdict(row: Row, mutant: Mutant, ref: Reference, device: str) -> Verdict:
    """A tile kernel's lane cut decided on the GPU, where Warp may hand lanes other work
    than on the CPU (float4 copies of N-D tiles over a quarter of the lanes): the mutant
    and the row's own CUDA run every input set and guard fill of ``ref``, shared memory
    poisoned before every launch of both (shared_scrub.py), and their results are compared
    bit for bit.  Equal everywhere: the lanes it skips hold no work that reaches a result
    there (what they did not write reads as poison, and poison shows).

    Bits can differ without work missing: a block whose lanes reduce a tile in another
    order, float atomics that land in another order.  So the own kernel runs three times,
    and a result within ROUNDING_ULPS units in the last place of that output's largest
    value (with the same non-finite cells) is rounding, said so in the verdict, provided
    the own kernel's own runs agree that closely (:func:`against_own`); a lane whose work
    reached a result shows as a term missing from it, far above rounding, or as poison."""
    scrub = shared_scrub(device)
    backward = bool(row.cuda_backward)
    runs = list(planned_runs(ref))

    def results(forward: str, back: str | None, times: int) -> list[list]:
        with candidate_kernel(row, forward, back, device) as (kernel, _):
            return [[run_guarded(s.spec or ref.spec, kernel, device, s.inputs, s.output_grads, backward and wb, fill,
                                 scrub=scrub) for s, fill, wb in runs] for _ in range(times)]  # fmt: skip

    try:
        own = results(row.cuda_forward, None, 3)
        (cand,) = results(mutant.forward, mutant.backward, 1)
    except CandidateBuildFailed as exc:
        return Verdict("unknown", f"no GPU build: {exc}")
    idle = _idle(lanes_cut(row, mutant)[0])
    worst: tuple[float, str] = (0.0, "")
    for k_run, ((s, fill, _), c) in enumerate(zip(runs, cand, strict=True)):
        where = f"{s.label}, guard fill {fill}"
        mine = [o[k_run] for o in own]
        if any(o.problems for o in mine):
            return Verdict("unknown", f"{where}: the row's own kernel fails its own run on the GPU")
        if c.problems:
            return Verdict("observable", f"on the GPU, {where}: {c.problems[0]}")
        status, detail, ulps = against_own([o.values for o in mine], c.values)
        if status:
            return Verdict(status, f"on the GPU, {where}: {detail}, shared memory poisoned")
        if ulps > worst[0]:
            worst = (ulps, f"{detail} at {where}")
    what = "outputs and gradients" if backward else "outputs"
    if worst[0]:
        return Verdict("equivalent", f"on the GPU ({device}): {idle}: its {what} equal the row's own kernel's up to "
                       f"rounding on every input set and guard fill, shared memory poisoned before every launch "
                       f"(largest: {worst[1]}; at most {ROUNDING_ULPS} ulps)")  # fmt: skip
    return Verdict("equivalent", f"on the GPU ({device}): {idle}: its {what} equal the row's own kernel's bit for "
                   "bit on every input set and guard fill, shared memory poisoned before every launch")  # fmt: skip


def _main() -> None:
    job = orjson.loads(sys.stdin.buffer.read())
    row = row_from_dict(job["row"])
    verdict = mutant_verdict(
        row, Mutant(job["kind"], job["forward"], job["stage"], job.get("backward")), compute_reference(row, job["seed"])
    )
    sys.stdout.write(orjson.dumps(dataclasses.asdict(verdict)).decode() + "\n")


if __name__ == "__main__":
    with warp_boundary.quiet_stderr():
        _main()
