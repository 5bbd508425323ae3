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
counted by kind and reason.

The witness's cost is Warp's CPU builds (DESIGN.md "Numbers": a module's fixed cost, then
tens of ms per kernel), so a batch of rows shares one :class:`Witness` across its proving
rounds: each round's candidates of every row are renamed copies of their rows' Python
kernels in one module, with the kernels (and float64 twins) of the rows first witnessed
in that round; a row's kernels are built once, and its reference is computed once and
lazily (:meth:`Witness.reference`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import spans, warp_boundary
from ..contracts.row import Row
from ..eval.compile import Unit, compile_many, front_end_compiler
from ..eval.equivalence import ORACLE_GUARD_ELEMENTS, widened_launch
from ..eval.reference import Reference, ReferencePlan, ReferenceUnavailable, plan_reference, reference_from_kernels
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

    row: Row
    candidates: list[Candidate]
    outcomes: list[Outcome | None] = field(default_factory=list)

    _shapes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.outcomes = [None] * len(self.candidates)

    def shape(self, part: str) -> KernelShape:
        """The name and signature of the row's forward or backward kernel (parsed once)."""
        if part not in self._shapes:
            text = self.row.cuda_forward if part == "forward" else self.row.cuda_backward
            self._shapes[part] = kernel_shape(text)
        return self._shapes[part]

    def proven(self) -> int:
        return sum(1 for o in self.outcomes if o is not None and o.proven)


def changed_lines(before: str, after: str) -> list[str]:
    return [ln[1:].strip() for ln in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
            if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]  # fmt: skip


def prove_candidates(
    work: Sequence[RowWork],
    preambles: dict[str, str],
    seed: int,
    picks: Sequence[tuple[int, int]],
    witness: Witness | None = None,
) -> None:
    """Decide every (row index, candidate index) of ``picks``; outcomes are set in ``work``.
    ``witness``: the batch's (kept across rounds, over the same ``work``); None: one for
    this call only."""
    later: list[tuple[int, int]] = []
    with spans.span("negatives.structure"):
        _structure(work, picks, later)
    with spans.span("negatives.compile"):
        _compile(work, preambles, later)
    pending = [(r, c) for r, c in later if work[r].outcomes[c] is None]
    if not pending:
        return
    with spans.span("negatives.witness"):
        if witness is not None:
            witness.prove(work, pending)
        else:
            with Witness(seed) as once:
                once.prove(work, pending)


def _structure(work: Sequence[RowWork], picks: Sequence[tuple[int, int]], later: list[tuple[int, int]]) -> None:
    for r, c in picks:
        w = work[r]
        cand = w.candidates[c]
        try:
            check_candidate(cand.forward, w.shape("forward"), "forward")
            if cand.backward and cand.backward != w.row.cuda_backward:  # the row's own passes
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


def _compile(work: Sequence[RowWork], preambles: dict[str, str], picks: list[tuple[int, int]]) -> None:
    compiler, name, threadsafe = front_end_compiler()
    units = []
    for r, c in picks:
        row, cand = work[r].row, work[r].candidates[c]
        units.append(Unit(preambles[row.preamble_hash], row.device_functions or "", cand.forward, cand.backward or "",
                          int(row.compile.arch)))  # fmt: skip
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


# --------------------------------------------------------------------------- the CPU witness


@dataclass
class _RowKernels:
    k32: object
    k64: object | None  # the float64 twin (None: the row has none)
    graded: bool  # built with adjoints (a backward witness needs them)


Copy = tuple[object, tuple[str, str] | None]  # an edited copy's kernel, and its CPU function (generated, edited)


class Witness:
    """The CPU witness of one batch of rows, kept across its proving rounds (a context manager).

    - A row's kernel and float64 twin are built once, in the module of the first round
      that witnesses the row (again only if a later round first needs their adjoints).
    - A row's reference is computed once and lazily (:meth:`reference`): its recorded
      input sets when its first candidate is judged, the drawn ones (fresh and
      adversarial) only for a candidate that passes every recorded set.  The judge runs
      the sets in the order eval/run.planned_runs gives the whole reference, so the
      first failure, the evidence, is the same.
    - Each round's edited copies share one module with the rows first built in it.  A
      module that does not build (an edit that C++ refuses on the CPU) is split: the
      rows' kernels alone, then the copies halved until those that break a build are
      found; only they are discarded (``unknown``).
    """

    def __init__(self, seed: int, on_judging: Callable[[int | None], None] | None = None):
        self.seed = seed
        self.on_judging = on_judging  # told which row's candidates are being judged (None: none)
        self._stack = contextlib.ExitStack()
        self._plans: dict[int, ReferencePlan | str] = {}  # str: why the row has no reference
        self._kernels: dict[int, _RowKernels | str] = {}  # str: why the row's kernel cannot run
        self._refs: dict[tuple[int, str], Reference | ReferenceUnavailable] = {}
        self._copies = 0  # copies made: each gets a name of its own

    def __enter__(self) -> Witness:
        self._stack.__enter__()
        # every module of the batch in a kernel cache of its own: an edited copy hashes like the unedited one
        self._stack.enter_context(warp_boundary.fresh_kernel_cache())
        return self

    def __exit__(self, *exc) -> bool | None:
        return self._stack.__exit__(*exc)

    # ----------------------------------------------------------------------- one round

    def prove(self, work: Sequence[RowWork], picks: list[tuple[int, int]]) -> None:
        """Witness ``picks`` (candidates that passed the structure and compile stages)."""
        rows = sorted({r for r, _ in picks})
        for r in rows:
            if r not in self._plans:
                try:
                    with spans.span("negatives.witness.plan"):
                        self._plans[r] = plan_reference(work[r].row)
                except ReferenceUnavailable as exc:
                    self._plans[r] = f"no CPU reference: {exc}"
        planned = {r for r in rows if isinstance(self._plans[r], ReferencePlan)}
        graded = {r for r, c in picks if _part(work[r].candidates[c]) == "backward"}
        fresh = [r for r in sorted(planned) if r not in self._kernels or (r in graded and self._ungraded(r))]
        copies = [(r, c) for r, c in picks if r in planned and work[r].candidates[c].witness != "widened"]
        built: dict[tuple[int, int], Copy] = {}
        with spans.span("negatives.witness.build"):
            self._build(work, fresh, graded, copies, built)
        judging = None
        for r, c in picks:
            w, cand = work[r], work[r].candidates[c]
            if w.outcomes[c] is not None:  # its copy could not be made or built
                continue
            if r != judging and self.on_judging is not None:
                self.on_judging(r)  # runs of its kernels and copies follow: a wild write kills the process here
            judging = r
            why = self._plans[r] if r not in planned else self._kernels[r]
            if isinstance(why, str):
                w.outcomes[c] = Outcome(cand, False, why, "unknown")
                continue
            kernel, cpu_edit = built[(r, c)] if cand.witness != "widened" else (why.k32, None)
            with spans.span("negatives.witness.judge"):
                w.outcomes[c] = _judge(w, cand, kernel, lambda phase, r=r: self.reference(r, phase), cpu_edit)
        if judging is not None and self.on_judging is not None:
            self.on_judging(None)

    def _ungraded(self, r: int) -> bool:
        k = self._kernels[r]
        return isinstance(k, _RowKernels) and not k.graded

    def reference(self, r: int, phase: str) -> Reference | ReferenceUnavailable:
        """Row ``r``'s reference sets of one phase: ``recorded`` (every recorded size) or
        ``drawn`` (fresh and adversarial, as reference_from_kernels orders them after the
        recorded ones).  Computed on first use."""
        key = (r, phase)
        if key not in self._refs:
            k, plan = self._kernels[r], self._plans[r]
            if phase == "recorded":
                draws = {"fresh_sets": 0, "adversarial": False, "min_random_draws": 0}
            else:
                draws = {"fresh_sets": WITNESS_FRESH_SETS, "min_random_draws": WITNESS_FRESH_SETS}
            try:
                with spans.span(f"negatives.witness.reference.{phase}"):
                    ref = reference_from_kernels(plan, self.seed, k.k32, k.k64, **draws, gradients=k.graded)
                if phase == "drawn":  # its recorded sets were judged already
                    ref = dataclasses.replace(ref, sets=[s for s in ref.sets if s.kind != "recorded"])
                self._refs[key] = ref
            except ReferenceUnavailable as exc:
                self._refs[key] = exc
        return self._refs[key]

    # ----------------------------------------------------------------------- builds

    def _build(self, work, rows: list[int], graded: set[int], copies: list[tuple[int, int]], built: dict) -> None:
        """Build ``rows``' kernels and the edited ``copies`` in one module; where it does
        not build, split it (see the class docstring)."""
        problem = self._module(work, rows, graded, copies, built)
        if problem is None:
            return

        def row_fails(r: int, why: str) -> None:
            self._kernels[r] = f"the row's kernel does not build on the CPU: {why}"

        def copy_fails(key: tuple[int, int], why: str) -> None:
            cand = work[key[0]].candidates[key[1]]
            work[key[0]].outcomes[key[1]] = Outcome(
                cand, False, f"the edited CPU code does not build: {why}", "unknown"
            )

        copies_problem = problem  # the copies do not build together, unless the rows alone do not
        if rows:
            rows_problem = self._module(work, rows, graded, [], built) if copies else problem
            _bisect(rows, lambda part: self._module(work, part, graded, [], built), rows_problem, row_fails)
            copies_problem = problem if rows_problem is None else None
        runnable = [(r, c) for r, c in copies if isinstance(self._kernels.get(r), _RowKernels)]
        _bisect(runnable, lambda part: self._module(work, [], graded, part, built), copies_problem, copy_fails)

    def _module(self, work, rows: list[int], graded: set[int], copies: list[tuple[int, int]],
                built: dict) -> str | None:  # fmt: skip
        """One module of ``rows``' kernels (and twins) and the edited ``copies``: None once
        it is built (its kernels recorded, kept loaded until the witness ends), or the
        build's error (everything it loaded released)."""
        stack = contextlib.ExitStack()
        batch = stack.enter_context(warp_boundary.open_batch_module(optimization_level=CPU_OPT_LEVEL))
        kernels: dict[int, _RowKernels] = {}
        for r in rows:
            plan, grads = self._plans[r], r in graded
            k32, why = batch.add(plan.spec.python_source, plan.spec.kernel_name, backward=grads)
            if k32 is None:
                self._kernels[r] = f"the row's kernel does not load: {why}"
                continue
            k64 = batch.add(plan.twin.python_source, plan.twin.kernel_name, backward=grads)[0] if plan.twin else None
            kernels[r] = _RowKernels(k32, k64, grads)
        made, edits = {}, []
        for r, c in copies:
            cand, plan = work[r].candidates[c], self._plans[r]
            if work[r].outcomes[c] is not None or isinstance(self._kernels.get(r), str):
                continue
            self._copies += 1
            name = f"{plan.spec.kernel_name}_cudagen_w{self._copies}"
            source = _renamed(plan.spec.python_source, plan.spec.kernel_name, name)
            kernel = batch.add(source, name, backward=_part(cand) == "backward")[0] if source else None
            if kernel is None:
                why = "the row's kernel cannot be copied for the witness"
                work[r].outcomes[c] = Outcome(cand, False, why, "unknown")
                continue
            made[(r, c)] = kernel
            edits.append(((r, c), (kernel, _part(cand), cand.edit)))
        if not kernels and not made:
            stack.close()
            return None
        try:
            with warp_boundary.edited_cpu_functions(batch.module, [e for _, e in edits]) as done:
                problem = warp_boundary.build_module(batch.module, "cpu")
        except warp_boundary.SubstitutionMissing as exc:
            problem = str(exc)
        if problem is not None:
            stack.close()
            return problem
        self._stack.callback(stack.close)
        for r, k in kernels.items():
            self._kernels[r] = k
            self._refs.pop((r, "recorded"), None)
            self._refs.pop((r, "drawn"), None)
        for (key, _), record in zip(edits, done, strict=True):
            built[key] = (made[key], record[-1] if record else None)
        return None


def _bisect(items: list, build: Callable[[list], str | None], problem: str | None,
            give_up: Callable[[object, str], None]) -> None:  # fmt: skip
    """Build ``items`` (``problem``: already known not to build, with this error); where
    they do not build, each half on its own, down to the single items that do not
    (``give_up``)."""
    if not items:
        return
    if problem is None:
        problem = build(items)
    if problem is None:
        return
    if len(items) == 1:
        give_up(items[0], problem)
        return
    half = len(items) // 2
    _bisect(items[:half], build, None, give_up)
    _bisect(items[half:], build, None, give_up)


def _judge(w: RowWork, cand: Candidate, kernel, reference: Callable[[str], Reference | ReferenceUnavailable],
           cpu_edit: tuple[str, str] | None) -> Outcome:  # fmt: skip
    """The witness's verdict on one candidate: judged on the row's recorded sets, then
    (only if it passes them all) on its drawn sets."""
    row = w.row

    def spec_for(size_spec):
        return size_spec

    if cand.witness in ("forward", "backward"):
        recorded = row.cuda_backward if cand.witness == "backward" else row.cuda_forward
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
    failures: list[str] = []
    for phase in ("recorded", "drawn"):
        ref = reference(phase)
        if isinstance(ref, ReferenceUnavailable):
            return Outcome(cand, False, f"no CPU reference: {ref}", "unknown")
        failures = _judged(ref, kernel, spec_for, backward)
        if failures:
            break
    if not failures:
        return Outcome(cand, False, "its results pass the judge on every input set", "indistinguishable")
    evidence = f"CPU witness ({how}): {failures[0].replace(': GPU ', ': candidate ')}"
    if backward:
        check = row.gradient_check
        evidence += (
            f"; the expected gradient agrees with central finite differences of the forward "
            f"(gradient_check {check.status}, {check.probes} probes, worst relative error "
            f"{check.worst_rel_error:.2g})"
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


__all__ = ["COMPILE", "RUN", "STRUCTURE", "Outcome", "RowWork", "Witness", "changed_lines", "prove_candidates",
           "unified_diff"]  # fmt: skip
