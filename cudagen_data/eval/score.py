"""Score candidates against dataset rows: the ladder structure -> compile -> run.

    >>> with Scorer(device="cuda:0") as scorer:          # workers stay up between calls
    ...     scores = scorer.score_many([(row, Candidate(row.id, text))], preambles)
    >>> score(row, Candidate(row.id, text), device="cpu", preamble=p).reward

A row is a :class:`~cudagen_data.contracts.row.Row` (``cudagen eval`` reads them so), or a
row dict, as the published dataset loads with `datasets` (read as a Row on entry).

A candidate stops at the first stage it fails.  ``Score.reward`` is a scalar for RL:
0 (structure failed), 0.1 (structure passed, compile failed), 0.3 (compiled; on a GPU:
ran wrong), 1.0 (ran and matched on a GPU).  Without a GPU the ladder ends after compile
(``Score.complete`` is False, the run stage says why).

Many candidates at once are much faster than one at a time: NVRTC checks up to 32
candidates per call (compile.py) and one CPU reference per row serves every candidate
for it (reference.py).  The seed of the fresh inputs is secret per Scorer (os.urandom)
unless one is given; reports record it.
"""

from __future__ import annotations

import atexit
import os
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from .. import warp_boundary
from ..canonical import text_hash
from ..contracts.row import Row, as_row
from ..extract import DEFAULT_BLOCK_DIM, extract_source
from .compile import FULL_COMPILER, FULL_NAME, Unit, Verdict, compile_many, default_threads, front_end_compiler
from .pool import Job, Outcome, WorkerPool, run_inline
from .reference import ADVERSARIAL_PLACES, ADVERSARIAL_SIDES, DEFAULT_FRESH_SETS, MIN_RANDOM_DRAWS
from .structure import KernelShape, StructureError, check_candidate, kernel_shape, row_key

STAGES = ("structure", "compile", "run")
REWARD = {"none": 0.0, "structure": 0.1, "compile": 0.3, "run": 1.0}


@dataclass(frozen=True)
class Candidate:
    """Model-written CUDA for one row: its forward kernel, and optionally its backward."""

    row_id: str
    forward: str
    backward: str | None = None


@dataclass
class StageResult:
    name: str
    ok: bool | None  # None: not run (an earlier stage failed, or no GPU)
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Score:
    row_id: str
    stages: list[StageResult]
    notes: list[str] = field(default_factory=list)
    input_sets: dict = field(default_factory=dict)  # the run stage's sets, by kind, and sizes (reference.py)
    timing: dict | None = None  # with timing: eval/timing.py's TimingResult.to_dict() of a passing candidate

    @property
    def speedup(self) -> float | None:
        """The row's own kernel's time / the candidate's (``Scorer(timing=True)`` on a GPU);
        None where the candidate was not timed (it failed, or timing was off)."""
        return self.timing["speedup"] if self.timing and self.reached == "run" else None

    @property
    def reached(self) -> str:
        """The last stage passed ("none" if structure failed)."""
        passed = [s.name for s in self.stages if s.ok]
        return passed[-1] if passed else "none"

    @property
    def failed(self) -> StageResult | None:
        return next((s for s in self.stages if s.ok is False), None)

    @property
    def reward(self) -> float:
        return REWARD[self.reached]

    @property
    def complete(self) -> bool:
        """Every stage ran, or one failed: the verdict is final."""
        return self.failed is not None or all(s.ok for s in self.stages)

    def stage(self, name: str) -> StageResult:
        return next(s for s in self.stages if s.name == name)

    def to_dict(self) -> dict:
        return {"row_id": self.row_id, "reached": self.reached, "reward": self.reward, "complete": self.complete,
                "stages": [asdict(s) for s in self.stages], "notes": self.notes,
                "input_sets": self.input_sets, "speedup": self.speedup, "timing": self.timing}  # fmt: skip


class RowProblem(Exception):
    """A dataset row the judge cannot use (one line; not the candidate's fault)."""


def preamble_for(row: Row, preambles: dict[str, str] | None) -> str:
    """The row's preamble from the manifest, else regenerated from its source (checked by hash)."""
    if preambles and row.preamble_hash in preambles:
        return preambles[row.preamble_hash]

    rep = extract_source(row.python_source, block_dim=row.block_dim or DEFAULT_BLOCK_DIM, arch=row.compile.arch)
    pre = rep.kernels[0].preamble if rep.kernels else None
    if pre is None or text_hash(pre) != row.preamble_hash:
        raise RowProblem(f"row {row.id}: preamble {row.preamble_hash} is not in the manifest and not reproducible")
    return pre


class Scorer:
    """Scores candidates; on a CUDA device it keeps worker processes between calls."""

    def __init__(self, device: str = "cpu", *, workers: int | None = None, seed: int | None = None,
                 full_compile: bool = True, isolate: bool = True, candidate_timeout: float | None = None,
                 fresh_sets: int = DEFAULT_FRESH_SETS, timing: bool = False):  # fmt: skip
        if device != "cpu" and not device.startswith("cuda"):
            raise ValueError(f"device {device!r}: use cpu or cuda:N")
        if device.startswith("cuda"):
            count = warp_boundary.warp().get_cuda_device_count()
            index = int(device.split(":", 1)[1]) if ":" in device else 0
            if not 0 <= index < count:
                raise ValueError(f"device {device!r}: this machine has {count} CUDA device(s)")
        if fresh_sets < 1:
            raise ValueError(f"fresh_sets {fresh_sets}: at least 1 fresh input set per size")
        if timing and not device.startswith("cuda"):
            raise ValueError("timing needs a GPU: use device cuda:N")
        self.timing = timing  # time every candidate that passes against the row's own kernel (eval/timing.py)
        self.device = device
        self.fresh_sets = fresh_sets
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little")
        self.full_compile = full_compile
        self.front_end, self.front_end_name, self._threadsafe = front_end_compiler()
        if self.gpu and not self._threadsafe:
            # Without the standalone front end, the GPU build (a full compile) is the compile check.
            self.front_end, self.front_end_name = (
                None,
                f"no front-end pass ({self.front_end_name}); the GPU build decides",
            )
        self.threads = default_threads() if self._threadsafe else 1
        self._shapes: dict[str, tuple[KernelShape, KernelShape | None]] = {}
        self._preambles: dict[str, str] = {}  # regenerated where no manifest gave them
        self._pool = None
        self._inline_cache: OrderedDict = OrderedDict()
        self._workers = workers if workers is not None else (os.cpu_count() or 1)
        self._isolate = isolate
        self._pool_options = {"candidate_timeout": candidate_timeout} if candidate_timeout else {}

    @property
    def gpu(self) -> bool:
        return self.device.startswith("cuda")

    def describe(self) -> dict:
        return {
            "device": self.device,
            "front_end": self.front_end_name,
            "full_compile": (
                "GPU build (Warp, for the device)" if self.gpu else FULL_NAME if self.full_compile else "skipped"
            ),
            "fresh_input_seed": self.seed,
            "input_sets": judge_sets(self.fresh_sets),
            "timing": self.timing,
        }

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # ------------------------------------------------------------------ stages

    def _shape(self, row: Row) -> tuple[KernelShape, KernelShape | None]:
        rid, key = str(row.id), row_key(row)
        if key not in self._shapes:
            try:
                fwd = kernel_shape(row.cuda_forward)
                bwd = kernel_shape(row.cuda_backward) if row.cuda_backward else None
            except StructureError as exc:
                raise RowProblem(f"row {rid}: its own CUDA: {exc}") from None
            self._shapes[key] = (fwd, bwd)
        return self._shapes[key]

    def _preamble(self, row: Row, preambles: dict[str, str] | None) -> str:
        h = row.preamble_hash
        if preambles and h in preambles:
            return preambles[h]
        if h not in self._preambles:
            self._preambles[h] = preamble_for(row, None)
        return self._preambles[h]

    def _structure(self, row: Row, cand: Candidate) -> StageResult:
        t0 = time.perf_counter()
        fwd_shape, bwd_shape = self._shape(row)
        try:
            check_candidate(cand.forward, fwd_shape, "forward")
            if cand.backward is not None:
                if bwd_shape is None:
                    raise StructureError("backward: this row's kernel has no backward")
                check_candidate(cand.backward, bwd_shape, "backward")
        except StructureError as exc:
            return StageResult("structure", False, str(exc), time.perf_counter() - t0)
        return StageResult("structure", True, "", time.perf_counter() - t0)

    def score_many(
        self, pairs: Sequence[tuple[Row | Mapping, Candidate]], preambles: dict[str, str] | None = None
    ) -> list[Score]:
        """One Score per (row, candidate), in order.  Raises RowProblem for an unusable row."""
        if self.gpu and self._isolate and self._pool is None:
            self._pool = WorkerPool(
                self.device, self._workers, **self._pool_options
            )  # workers start while the CPU stages run
        pairs = [(as_row(row), cand) for row, cand in pairs]
        scores = [Score(str(row.id), [self._structure(row, cand)]) for row, cand in pairs]
        units, owners = [], []
        for i, ((row, cand), sc) in enumerate(zip(pairs, scores, strict=False)):
            if sc.stages[0].ok:
                backward = cand.backward if cand.backward is not None else row.cuda_backward
                units.append(
                    Unit(
                        self._preamble(row, preambles),
                        row.device_functions,
                        cand.forward,
                        backward,
                        int(row.compile.arch),
                    )
                )
                owners.append(i)
        if self.front_end is not None:
            front = compile_many(units, self.front_end, threads=self.threads, front_end=self._threadsafe)
        else:
            front = [Verdict(True, "", 0.0) for _ in units]
        full = {}
        if not self.gpu and self.full_compile:
            passed = [k for k, v in enumerate(front) if v.ok]
            for k, v in zip(passed, compile_many([units[k] for k in passed], FULL_COMPILER), strict=False):
                full[k] = v
        to_run = []
        for k, i in enumerate(owners):
            f = front[k]
            if not f.ok:
                scores[i].stages.append(StageResult("compile", False, f"NVRTC front end: {_short(f.log)}", f.seconds))
                continue
            if k in full:
                v = full[k]
                detail = "" if v.ok else f"NVRTC full compile: {_short(v.log)}"
                scores[i].stages.append(StageResult("compile", v.ok, detail, f.seconds + v.seconds))
                continue
            if self.gpu:
                to_run.append(i)  # the GPU build completes the compile stage
                scores[i].stages.append(StageResult("compile", None, "front end passed", f.seconds))
            else:
                scores[i].stages.append(
                    StageResult("compile", True, "front end only (full compile skipped)", f.seconds)
                )
        if self.gpu and to_run:
            self._run(pairs, scores, to_run)
        for sc in scores:
            names = [s.name for s in sc.stages]
            for name in STAGES[len(names) :]:
                why = (
                    "an earlier stage failed"
                    if sc.failed
                    else ("no GPU: run with --device cuda:0" if name == "run" else "")
                )
                sc.stages.append(StageResult(name, None, why))
        return scores

    def _run(self, pairs: list[tuple[Row, Candidate]], scores: list[Score], to_run: list[int]) -> None:
        by_row: dict[str, Job] = {}
        for i in to_run:
            row, cand = pairs[i]
            key = row_key(row)
            if key not in by_row:
                by_row[key] = Job(row, self.seed, [], self.fresh_sets, self.timing)
            by_row[key].candidates.append((i, cand.forward, cand.backward))
        jobs = list(by_row.values())
        if self._isolate:
            if self._pool is None:
                self._pool = WorkerPool(self.device, self._workers, **self._pool_options)
            results = self._pool.run(jobs)
        else:
            results = run_inline(jobs, self.device, self._inline_cache)
        for i in to_run:
            o = results.get(i) or Outcome(i, "run", False, "no result from the worker pool (internal error)")
            compile_stage = scores[i].stages[1]
            compile_stage.seconds += o.seconds if o.stage == "compile" else 0.0
            if o.stage == "compile":
                compile_stage.ok, compile_stage.detail = False, o.detail
                continue
            compile_stage.ok, compile_stage.detail = True, f"GPU build {o.build}"
            detail = o.detail if not o.ok else f"passed {_sets_line(o.input_sets)}"
            scores[i].stages.append(StageResult("run", o.ok, detail, o.seconds))
            scores[i].notes += o.notes
            scores[i].input_sets = o.input_sets
            scores[i].timing = o.timing


def judge_sets(fresh_sets: int) -> dict:
    """What the run stage runs each candidate on (the report's scorer section)."""
    return {"sizes": "every recorded size", "recorded": 1, "fresh_per_size": fresh_sets,
            "min_random_draws": MIN_RANDOM_DRAWS,
            "adversarial_per_size": [f"{side} @ {place}" for place in ADVERSARIAL_PLACES for side in ADVERSARIAL_SIDES],
            "guard_fills": "recorded: nan, low, high; drawn sets: one each, in turn"}  # fmt: skip


def _sets_line(summary: dict) -> str:
    if not summary:
        return "the input sets"
    sizes = ", ".join("x".join(map(str, d)) for d in summary["sizes"])
    return (f"{summary['sets']} input sets (recorded {summary['recorded']}, fresh {summary['fresh']}, "
            f"adversarial {summary['adversarial']}) at launch {sizes}")  # fmt: skip


def _short(log: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln]
    text = " | ".join((errors or lines)[:2])
    return text[:limit]


_default: dict[tuple[str, bool], Scorer] = {}


def score(
    row: Row | Mapping,
    candidate: Candidate | str,
    *,
    device: str = "cpu",
    preamble: str | None = None,
    timing: bool = False,
) -> Score:
    """Score one candidate (a Candidate, or forward text).  Keeps one Scorer per device
    for the process, so repeated calls reuse its workers and per-row references.
    ``timing`` (a GPU): a passing candidate is timed against the row's own kernel;
    ``Score.speedup`` is then the reward's speed term (eval/timing.py)."""
    row = as_row(row)
    if isinstance(candidate, str):
        candidate = Candidate(str(row.id), candidate)
    scorer = _default.get((device, timing))
    if scorer is None:
        scorer = _default[(device, timing)] = Scorer(device, timing=timing)
        atexit.register(scorer.close)
    preambles = {row.preamble_hash: preamble} if preamble is not None else None
    return scorer.score_many([(row, candidate)], preambles)[0]
