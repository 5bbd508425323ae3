"""Prove candidates wrong on the CPU, at the stage of ``cudagen eval`` that must reject them.

- structure kinds: the structure stage's own check (eval/structure.py) refuses the
  forward; its one-line reason is the evidence.
- compile kinds: they pass the structure stage, and NVRTC (the eval's compile stage:
  its front end where installed, as eval/compile.py runs it) rejects the row's
  translation unit with the candidate in place; the first error is the evidence.
- run kinds: they pass both, and the CPU witness tells them apart from the positive:
  the same edit applied to the function Warp generates for the CPU (its statements are
  the CUDA's line for line; an edit that changes other lines there is not trusted),
  built and judged by the run stage's own judging (eval/run.judge_kernel: the row's
  reference input sets, recorded and fresh, guard fills, the GPU suite's tolerance
  model) with wide guards (eval/equivalence.ORACLE_GUARD_ELEMENTS).  The first failure
  is the evidence.  ``bounds_check_dropped`` runs the positive's own CPU kernel on a launch
  widened to whole GPU blocks (equivalence.widened_launch); ``race`` runs the lost-update
  model of its read-modify-write (kinds.race_model): every thread of a contended element
  reads it before any writes, so each stores its own contribution.  A wrong_backward's
  forward is the positive's; its backward is edited and judged against the row's
  recorded input gradients, which produce verified against central finite differences.

A candidate caught at an earlier stage than its kind's, passed by its stage, or that the
witness cannot tell apart from the positive is not a negative: it is discarded and
counted by kind and reason.  Candidates of many rows are witnessed in one CPU module
(one build), each a renamed copy of its row's Python kernel.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import warp_boundary
from ..eval.compile import Unit, compile_many, front_end_compiler
from ..eval.equivalence import ORACLE_GUARD_ELEMENTS, widened_launch
from ..eval.reference import ReferencePlan, ReferenceUnavailable, plan_reference, reference_from_kernels
from ..eval.run import judge_set, planned_runs, run_guarded
from ..eval.structure import KernelShape, StructureError, check_candidate, kernel_shape
from ..execution import CPU_OPT_LEVEL
from .kinds import COMPILE, RUN, STRUCTURE, Candidate

# candidates per NVRTC call: a call costs ~0.4 s of header parsing however few it holds,
# and errors are attributed to candidates by their lines (eval/compile.py)
COMPILE_BATCH = 128
# Fresh input sets per recorded size in the witness's reference (the judge draws more, with
# its own secret seed): a candidate proven wrong on some sets is wrong; more sets would only
# prove a few more, at the cost of a CPU run of the row's kernel and its twin per set.  The
# judge's adversarial sets are kept (they prove the partial-work kinds).
WITNESS_FRESH_SETS = 2


@dataclass
class Outcome:
    """What became of one candidate."""

    candidate: Candidate
    proven: bool
    evidence: str = ""  # the proof (proven) or why it is not a negative (discarded)
    reason: str = ""  # discarded: passed_its_stage, caught_earlier, indistinguishable, unknown


@dataclass
class RowWork:
    """One positive row and the candidates to prove for it, in order."""

    row: dict
    candidates: list[Candidate]
    outcomes: list[Outcome | None] = field(default_factory=list)

    _shapes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.outcomes = [None] * len(self.candidates)

    def shape(self, part: str) -> KernelShape:
        """The name and signature of the row's forward or backward kernel (parsed once)."""
        if part not in self._shapes:
            self._shapes[part] = kernel_shape(self.row[f"cuda_{part}"])
        return self._shapes[part]


def changed_lines(before: str, after: str) -> list[str]:
    return [ln[1:].strip() for ln in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
            if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]  # fmt: skip


def prove_candidates(
    work: Sequence[RowWork], preambles: dict[str, str], seed: int, picks: Sequence[tuple[int, int]]
) -> None:
    """Decide every (row index, candidate index) of ``picks``; outcomes are set in ``work``."""
    later: list[tuple[int, int]] = []
    for r, c in picks:
        w = work[r]
        cand = w.candidates[c]
        try:
            check_candidate(cand.forward, w.shape("forward"), "forward")
            if cand.backward and cand.backward != w.row["cuda_backward"]:  # the row's own passes
                check_candidate(cand.backward, w.shape("backward"), "backward")
        except StructureError as exc:
            if cand.stage == STRUCTURE:
                w.outcomes[c] = Outcome(cand, True, f"structure stage: {exc}")
            else:
                w.outcomes[c] = Outcome(cand, False, f"structure stage: {exc}", "caught_earlier")
            continue
        if cand.stage == STRUCTURE:
            w.outcomes[c] = Outcome(cand, False, "the structure stage accepts it", "passed_its_stage")
        else:
            later.append((r, c))
    _compile(work, preambles, later)
    _witness(work, seed, [(r, c) for r, c in later if work[r].outcomes[c] is None])


def _compile(work: Sequence[RowWork], preambles: dict[str, str], picks: list[tuple[int, int]]) -> None:
    compiler, name, threadsafe = front_end_compiler()
    units = []
    for r, c in picks:
        row, cand = work[r].row, work[r].candidates[c]
        units.append(Unit(preambles[row["preamble_hash"]], row["device_functions"] or "", cand.forward,
                          cand.backward or "", int(row["compile"]["arch"])))  # fmt: skip
    stage = "NVRTC front end" if threadsafe else "NVRTC"
    verdicts = compile_many(units, compiler, front_end=threadsafe, batch=COMPILE_BATCH)
    for (r, c), verdict in zip(picks, verdicts, strict=True):
        w = work[r]
        cand = w.candidates[c]
        if verdict.ok:
            if cand.stage == COMPILE:
                w.outcomes[c] = Outcome(cand, False, f"{stage} accepts it", "passed_its_stage")
        elif cand.stage == COMPILE:
            w.outcomes[c] = Outcome(cand, True, f"compile stage ({stage}): {first_errors(verdict.log)}")
        else:
            w.outcomes[c] = Outcome(cand, False, f"compile stage: {first_errors(verdict.log)}", "caught_earlier")


def first_errors(log: str, limit: int = 300) -> str:
    """NVRTC's first two error lines (what eval's compile stage reports), on one line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln]
    return " | ".join((errors or lines)[:2])[:limit]


def _renamed(source: str, name: str, new: str) -> str | None:
    """The source with its kernel function renamed (a copy that can share a module)."""
    m = re.search(rf"^def {re.escape(name)}\(", source, re.M)
    return None if m is None else source[: m.start()] + f"def {new}(" + source[m.end() :]


def _witness(work: Sequence[RowWork], seed: int, picks: list[tuple[int, int]]) -> None:
    if not picks:
        return
    rows = sorted({r for r, _ in picks})
    plans: dict[int, ReferencePlan] = {}
    for r in rows:
        try:
            plans[r] = plan_reference(work[r].row)
        except ReferenceUnavailable as exc:
            for rr, c in picks:
                if rr == r:
                    work[r].outcomes[c] = Outcome(work[r].candidates[c], False, f"no CPU reference: {exc}", "unknown")
    picks = [(r, c) for r, c in picks if r in plans]
    if not _witness_group(work, seed, plans, picks):
        for r in sorted(plans):  # one edit broke the shared build: each row in a module of its own
            if not _witness_group(work, seed, {r: plans[r]}, [(rr, c) for rr, c in picks if rr == r]):
                for rr, c in picks:
                    if rr == r and work[r].outcomes[c] is None:
                        work[r].outcomes[c] = Outcome(
                            work[r].candidates[c], False, "the witness module does not build on the CPU", "unknown"
                        )


def _witness_group(work, seed: int, plans: dict[int, ReferencePlan], picks: list[tuple[int, int]]) -> bool:
    """Witness ``picks`` in one CPU module; False where the module does not build."""
    with warp_boundary.open_batch_module(optimization_level=CPU_OPT_LEVEL) as batch, warp_boundary.fresh_kernel_cache():
        kernels: dict[int, tuple] = {}
        # a row's kernels need their adjoints only for a backward witness (the rest judge outputs)
        graded = {r for r, c in picks if _part(work[r].candidates[c]) == "backward"}
        for r, plan in plans.items():
            grads = r in graded
            k32, why = batch.add(plan.spec.python_source, plan.spec.kernel_name, backward=grads)
            k64 = (
                batch.add(plan.twin.python_source, plan.twin.kernel_name, backward=grads)[0]
                if plan.twin is not None
                else None
            )
            if k32 is None:
                for rr, c in picks:
                    if rr == r:
                        why = f"the row's kernel does not load: {why}"
                        work[r].outcomes[c] = Outcome(work[r].candidates[c], False, why, "unknown")
                continue
            kernels[r] = (k32, k64)
        copies: dict[tuple[int, int], object] = {}
        edits = []
        for r, c in picks:
            if r not in kernels:
                continue
            cand, plan = work[r].candidates[c], plans[r]
            if cand.witness == "widened":
                copies[(r, c)] = kernels[r][0]
                continue
            name = f"{plan.spec.kernel_name}_cudagen_w{len(copies)}"
            source = _renamed(plan.spec.python_source, plan.spec.kernel_name, name)
            kernel = batch.add(source, name, backward=_part(cand) == "backward")[0] if source else None
            if kernel is None:
                work[r].outcomes[c] = Outcome(
                    cand, False, "the row's kernel cannot be copied for the witness", "unknown"
                )
                continue
            copies[(r, c)] = kernel
            edits.append(((r, c), (kernel, _part(cand), cand.edit)))
        try:
            with warp_boundary.edited_cpu_functions(batch.module, [e for _, e in edits]) as done:
                problem = warp_boundary.build_module(batch.module, "cpu")
        except warp_boundary.SubstitutionMissing as exc:
            problem = str(exc)
        if problem is not None:
            return False
        refs = {}
        for r, (k32, k64) in kernels.items():
            try:
                draws = {"fresh_sets": WITNESS_FRESH_SETS, "min_random_draws": WITNESS_FRESH_SETS}
                refs[r] = reference_from_kernels(plans[r], seed, k32, k64, **draws, gradients=r in graded)
            except ReferenceUnavailable as exc:
                refs[r] = exc
        edited = {key: record[-1] if record else None for (key, _), record in zip(edits, done, strict=True)}
        for (r, c), kernel in copies.items():
            w, cand = work[r], work[r].candidates[c]
            ref = refs[r]
            if isinstance(ref, ReferenceUnavailable):
                w.outcomes[c] = Outcome(cand, False, f"no CPU reference: {ref}", "unknown")
                continue
            w.outcomes[c] = _judge(w.row, cand, kernel, ref, edited.get((r, c)))
    return True


def _judge(row: dict, cand: Candidate, kernel, ref, cpu_edit: tuple[str, str] | None) -> Outcome:
    def spec_for(size_spec):
        return size_spec

    if cand.witness in ("forward", "backward"):
        recorded = row["cuda_backward"] if cand.witness == "backward" else row["cuda_forward"]
        submitted = cand.backward if cand.witness == "backward" else cand.forward
        if cpu_edit is None or changed_lines(*cpu_edit) != changed_lines(recorded, submitted):
            return Outcome(cand, False, "the edit changes other lines on the CPU than in the CUDA", "unknown")
        how = f"the same edit on Warp's CPU {cand.witness}"
    elif cand.witness.startswith("mask_"):
        what = "table replay" if cand.kind == "replayed_outputs" else "thread mask"
        how = f"the same {what} in Warp's CPU {_part(cand)} (eval/mutants.py)"
    elif cand.witness == "widened":

        def spec_for(size_spec):
            return dataclasses.replace(size_spec, launch_dim=widened_launch(size_spec.launch_dim))

        how = "the positive's CPU kernel on the launch widened to whole GPU blocks"
    else:
        how = "the lost-update model of the read-modify-write on the CPU"
    backward = _part(cand) == "backward"
    failures = _judged(ref, kernel, spec_for, backward)
    if not failures:
        return Outcome(cand, False, "its results pass the judge on every input set", "indistinguishable")
    evidence = f"CPU witness ({how}): {failures[0].replace(': GPU ', ': candidate ')}"
    if backward:
        check = row["gradient_check"]
        evidence += (
            f"; the expected gradient agrees with central finite differences of the forward "
            f"(gradient_check {check['status']}, {check['probes']} probes, worst relative error "
            f"{check['worst_rel_error']:.2g})"
        )
    return Outcome(cand, True, evidence)


def _part(cand: Candidate) -> str:
    """The function of the kernel the witness edits: forward or backward."""
    return "backward" if cand.witness in ("backward", "mask_backward") else "forward"


def _judged(ref, kernel, spec_for, backward: bool) -> list[str]:
    """eval/run.judge_kernel (the same runs: planned_runs), judging outputs only unless the
    witness is of the backward (a forward edit's copy is built without one; its backward
    would be the positive's)."""
    for s, fill, with_backward in planned_runs(ref):
        spec = spec_for(s.spec or ref.spec)
        got = run_guarded(spec, kernel, "cpu", s.inputs, s.output_grads, backward and with_backward, fill,
                          ORACLE_GUARD_ELEMENTS)  # fmt: skip
        failures = judge_set(ref, s, got, outputs_only=not (backward and with_backward))
        if failures:
            return failures if fill == "nan" else [f"{f} (guard cells: {fill})" for f in failures]
    return []


def unified_diff(before: str, after: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), fromfile=f"a/{name}", tofile=f"b/{name}", n=2
        )
    )


__all__ = ["COMPILE", "RUN", "STRUCTURE", "Outcome", "RowWork", "changed_lines", "prove_candidates", "unified_diff"]
