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

import dataclasses
import difflib
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import orjson

from .. import warp_boundary
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
from .run import judge_kernel

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


def mutant_verdict(row: dict, mutant: Mutant, ref: Reference) -> Verdict:
    """Can ``mutant`` be told apart from ``row``'s kernel on ``ref``'s input sets?"""
    if mutant.kind in PARTIAL_KINDS:
        return partial_verdict(row, mutant, ref)
    edit = BODY_EDITS.get(mutant.kind)
    if edit is None and mutant.kind != "bounds_check_dropped":
        return Verdict("unknown", f"no CPU counterpart for a {mutant.kind} mutant")
    cuda_change = _changed_lines(row["cuda_forward"], mutant.forward)
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
                ref, kernel, "cpu", bool(row["cuda_backward"]), spec_for=spec_for, guard_elements=ORACLE_GUARD_ELEMENTS
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


def lanes_cut(row: dict, mutant: Mutant) -> tuple[list[int], int]:
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


def partial_verdict(row: dict, mutant: Mutant, ref: Reference) -> Verdict:
    """The witness of a partial-work mutant: the same thread mask (or table replay) in
    Warp's CPU kernel function, judged as the run stage judges on the same input sets.
    A tile kernel's mask that cuts through blocks is first reduced to whole blocks: where
    the lanes it skips hold no tile element (lanes at or past the largest tile's element
    count; Warp spreads a tile over lanes 0, 1, ... in turn), a cut block computes what
    the whole block would, and the CPU witness runs the block-level mask (a block works
    when its lane 0 does); else there is no CPU counterpart and the GPU must reject it."""
    tiled, note = bool(row["block_dim"]), ""
    if mutant.kind == "replayed_outputs":
        part = "forward"

        def edit(text):
            return replayed_cpu(row, text)
    else:
        mask, block = PARTIAL_MASKS[mutant.kind], block_size(row)
        part = mask.part
        if tiled:
            skipped, working = lanes_cut(row, mutant)
            if skipped and min(skipped) < working:
                why = f"skips lanes {_lanes(skipped)} of blocks whose other lanes work; lanes below {working} hold"
                return Verdict("unknown", why + " tile elements: no CPU counterpart; the GPU must reject it")
            if skipped:
                note = (f"; the lanes it skips of cut blocks ({_lanes(skipped)}) hold no tile element "
                        f"(the largest tile has {working}), so those blocks ran whole")  # fmt: skip

        def edit(text):
            return masked_cpu(text, mask, block, tiled)

    spec = ref.spec
    with warp_boundary.batch_module([(spec.python_source, spec.kernel_name)], optimization_level=CPU_OPT_LEVEL) as (
        module,
        kernels,
        errors,
    ):
        kernel = kernels[0]
        if kernel is None:
            return Verdict("unknown", f"the row's kernel does not load: {errors[0]}")
        with warp_boundary.fresh_kernel_cache():
            try:
                with warp_boundary.edited_cpu_functions(module, [(kernel, part, edit)]):
                    problem = warp_boundary.build_module(module, "cpu")
            except warp_boundary.SubstitutionMissing as exc:
                return Verdict("unknown", str(exc))
            if problem is not None:
                return Verdict("unknown", f"the edited kernel does not build on the CPU: {problem}")
            backward = bool(row["cuda_backward"])
            failures = judge_kernel(ref, kernel, "cpu", backward, guard_elements=ORACLE_GUARD_ELEMENTS)
    if failures:
        return Verdict("observable", failures[0] + note)
    return Verdict("equivalent", f"its results pass the judge on every input set and guard fill ({part} edited){note}")


def _verdict_in_process(row: dict, mutant: Mutant, seed: int) -> Verdict:
    payload = orjson.dumps(
        {
            "row": row,
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


def verdicts(items: Sequence[tuple[dict, Mutant]], seed: int, workers: int | None = None) -> list[Verdict]:
    """:func:`mutant_verdict` of each (row, mutant), with the reference of the fresh-input
    ``seed`` (the Scorer's), each in a process of its own, ``workers`` at a time."""
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda rm: _verdict_in_process(rm[0], rm[1], seed), items))


def _main() -> None:
    job = orjson.loads(sys.stdin.buffer.read())
    row = job["row"]
    verdict = mutant_verdict(
        row, Mutant(job["kind"], job["forward"], job["stage"], job.get("backward")), compute_reference(row, job["seed"])
    )
    sys.stdout.write(orjson.dumps(dataclasses.asdict(verdict)).decode() + "\n")


if __name__ == "__main__":
    with warp_boundary.quiet_stderr():
        _main()
