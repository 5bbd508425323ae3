"""Is a kernel's backward right?  Warp's tape gradient against finite differences.

For every row that ships a backward, the seeded scalar loss ``L = sum(output * seed)``
(the seeds are the row's recorded output gradients) is differentiated two ways at the
row's recorded inputs: by Warp's tape (the adjoint that ``cuda_backward`` computes) and by
central finite differences of the forward, on *probes*: single elements of every float
array input (in and in/out; components of vectors count as elements), one random
direction through all elements of each such input, and one through all of them at once.
The directions catch an adjoint that is wrong at a few elements only (a loop whose trip
count depends on the thread, wrong for the threads that iterate twice or more), which
a handful of single elements can miss (tests/test_gradcheck.py shows one).

Precision.  The check runs on the kernel's float64 twin (``numerics/twin.py``) where Warp
accepts it: the twin is the row's own source with its float types widened, so Warp
generates the *same adjoint code* for it (same statements, same replay rules, same
builtin adjoints) and a wrong adjoint is wrong in both.  tests/test_gradcheck.py checks
that claim on each known-bad construct.  Float64 makes finite differences precise
(steps 1e-3..1e-5, tolerance 1e-3).  A kernel without a twin is checked in float32 with
steps 3e-2..3e-3 and a tolerance of 5e-2; the row records which.

Kinks.  Each probe is differenced with three step sizes, plus one-sided differences at
the smallest.  If those disagree with each other the loss is not smooth at the probe
(``abs``, ``relu``, ``floor``, a branch, a clamp...): the probe says nothing about the
adjoint, so another element (or direction) is drawn, and a row where every probe is
non-smooth is reported ``unverified``, never called wrong.

By-value float scalars are inputs too, but Warp's backward keeps their adjoints in
kernel-local variables (nothing the shipped backward returns), so there is nothing to
compare: only arrays are probed.

All kernels of a batch are built as one Warp CPU module, like execution.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from . import sizes, spans, warp_boundary
from .contracts.test_vectors import TestVectors
from .execution import (
    CPU_OPT_LEVEL,
    ExecutionResult,
    OptimizedBuild,
    call_name,
    forward_only_reason,
    launch,
    to_warp,
)
from .numerics.twin import NativeFloat64, TwinUnavailable, twin_spec, widen_all
from .spec import ArgSpec, KernelSpec, is_float_dtype

# mismatch: never in a synthetic row (rejected: adjoint_mismatch); a real row keeps it
# (contracts.row.REAL_GRADIENT_STATUSES)
STATUSES = ("verified", "forward_only", "unverified", "unchecked", "mismatch")


@dataclass(frozen=True)
class Precision:
    name: str  # "float64" | "float32"
    steps: tuple[float, float, float]  # relative step sizes, largest first
    kink_step: float  # relative step of the one-sided differences that find a kink at the point
    tol: float  # tape vs finite differences, relative (and how far estimates may disagree)
    floor: float  # relative to the kernel's gradient scale: differences below it are noise


FLOAT64 = Precision("float64", (1e-3, 1e-4, 1e-5), 1e-7, 1e-3, 1e-6)
FLOAT32 = Precision("float32", (3e-2, 1e-2, 3e-3), 1e-3, 5e-2, 1e-3)

ELEMENT_PROBES = 3  # per float array input: its largest tape gradient, then random elements
MAX_ELEMENT_PROBES = 9  # per kernel
RETRIES = 3  # extra draws per probe that lands on a non-smooth point
DIRECTIONS = True  # the random-direction probes (tests switch them off to show what elements alone miss)


@dataclass(frozen=True)
class GradientCheck:
    """What was verified about a row's backward (the row's ``gradient_check`` field)."""

    status: str  # one of STATUSES
    reason: str = ""  # why forward_only / unverified / mismatch
    precision: str = ""  # "float64" or "float32" where probes ran
    probes: int = 0  # smooth probes compared
    worst_rel_error: float = 0.0
    non_smooth: int = 0  # probes skipped as non-smooth points
    construct: str = ""  # mismatch: the Warp construct responsible, where known

    def to_row(self) -> dict:
        return {
            "status": self.status,
            "reason": self.reason,
            "precision": self.precision,
            "probes": self.probes,
            "worst_rel_error": float(self.worst_rel_error),
        }


# --------------------------------------------------------------------------- forward-only


def probed_args(spec: KernelSpec) -> list[ArgSpec]:
    """The inputs whose gradients the tape returns: float arrays read by the kernel."""
    return [a for a in spec.args if a.kind == "array" and a.role != "out" and is_float_dtype(a.dtype)]


def seeded_args(spec: KernelSpec) -> list[ArgSpec]:
    return [a for a in spec.args if a.kind == "array" and a.role != "in" and is_float_dtype(a.dtype)]


# --------------------------------------------------------------------------- blame


_NO_ADJOINT = (
    "tile_scan_inclusive",
    "tile_scan_exclusive",
    "tile_scan_max_inclusive",
    "tile_scan_min_inclusive",
    "tile_reduce",
    "tile_max",
    "tile_min",
    "tile_full",
    "tile_argmax",
    "tile_argmin",
    "frac",
)


def suspect_constructs(spec: KernelSpec) -> str:
    """The Warp constructs in the source that Warp 1.19 is known to differentiate wrongly
    (DESIGN.md), '; '-joined; "" when none is present."""
    tree = ast.parse(spec.python_source)
    roles = {a.name: a.role for a in spec.args}
    arrays = {a.name for a in spec.args if a.kind == "array"}
    consts = _module_constants(tree)
    found: list[str] = []

    def add(what: str) -> None:
        if what not in found:
            found.append(what)

    written: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and call_name(node.iter.func) == "range":
            if not all(_static(arg, consts) for arg in node.iter.args):
                add("dynamic for loop (bounds not known at code generation)")
        elif isinstance(node, ast.Call):
            name = call_name(node.func)
            if name in _NO_ADJOINT:
                add(f"wp.{name} (no adjoint)")
            elif (
                name in ("atomic_min", "atomic_max")
                and node.args
                and isinstance(node.args[0], ast.Name)
                and roles.get(node.args[0].id) == "inout"
            ):
                add(f"wp.{name} into in/out array {node.args[0].id!r}")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in ("x", "y", "z", "w"):
                    add("vector component write")
                elif isinstance(t, ast.Subscript):
                    base = t.value
                    while isinstance(base, ast.Subscript):
                        base = base.value
                    if isinstance(base, ast.Name) and base.id not in arrays:
                        add("vector/matrix component write")
                    elif isinstance(base, ast.Name):
                        written.add(base.id)
                        if isinstance(node, ast.AugAssign):
                            read.add(base.id)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            base = node.value
            while isinstance(base, ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                read.add(base.id)
    for name in sorted(written & read):
        if roles.get(name) in ("out", "inout"):
            add(f"reads output array {name!r} that the kernel overwrites")
    return "; ".join(found)


def _module_constants(tree: ast.Module) -> set[str]:
    names = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Call, ast.Constant)):
            if isinstance(stmt.value, ast.Constant) or call_name(stmt.value.func) == "constant":
                names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return names


def _static(node: ast.AST, consts: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in consts
    if isinstance(node, ast.UnaryOp):
        return _static(node.operand, consts)
    if isinstance(node, ast.BinOp):
        return _static(node.left, consts) and _static(node.right, consts)
    return False


# --------------------------------------------------------------------------- plans


@dataclass
class _Plan:
    pos: int
    spec: KernelSpec  # the kernel actually probed (the twin, or the row's own)
    precision: Precision
    inputs: dict
    seeds: dict
    fallback: str = ""  # why no float64 twin, where it fell back to float32


@dataclass(frozen=True)
class Point:
    """Where a gradient is checked: a row's recorded inputs and output seeds (NumPy
    values / numbers by argument name, in the row's own float32 precision)."""

    inputs: dict
    output_grads: dict
    # the row's other sizes: (the spec at that size, its inputs, its output seeds); each is
    # checked too, on the same build (a verified row is verified at every recorded size)
    sizes: tuple[tuple[KernelSpec, dict, dict], ...] = ()

    @classmethod
    def of(cls, run: ExecutionResult) -> Point:
        sizes = tuple((s, r.inputs, r.output_grads) for _, s, r in run.more_sizes if r.ok)
        return cls(run.inputs, run.output_grads, sizes)

    @classmethod
    def of_vectors(cls, spec: KernelSpec, vectors: TestVectors) -> Point:
        """The point of a row's test vectors, every set (``spec``: the row's, at its own size)."""
        sets = vectors.sets()
        decoded = [v.decoded() for v in sets]
        sizes = tuple(
            (v.sized_spec(spec), d["inputs"], d["output_grads"]) for v, d in zip(sets[1:], decoded[1:], strict=True)
        )
        return cls(decoded[0]["inputs"], decoded[0]["output_grads"], sizes)


def _plan(pos: int, spec: KernelSpec, run: Point) -> _Plan:
    try:
        twin = twin_spec(spec)
    except NativeFloat64:
        return _Plan(pos, spec, FLOAT64, run.inputs, run.output_grads)
    except (TwinUnavailable, SyntaxError) as exc:
        return _float32_plan(pos, spec, run, str(exc))
    return _Plan(pos, twin, FLOAT64, widen_all(run.inputs, spec.args), widen_all(run.output_grads, spec.args))


def _float32_plan(pos: int, spec: KernelSpec, run: Point, why: str) -> _Plan:
    return _Plan(pos, spec, FLOAT32, run.inputs, run.output_grads, fallback=why)


def probe_rng(spec: KernelSpec) -> np.random.Generator:
    return np.random.default_rng(
        [spec.seed & 0xFFFFFFFFFFFFFFFF, xxhash.xxh32_intdigest(spec.category.encode()), spec.index, 13]
    )


# --------------------------------------------------------------------------- the check


def check_gradients(
    specs: Sequence[KernelSpec], points: Sequence[Point | ExecutionResult], *, device: str = "cpu"
) -> list[GradientCheck]:
    """One GradientCheck per spec, at its point: the recorded inputs and output seeds of
    its successful float32 execution (a Point, or the ExecutionResult itself)."""
    runs = [p if isinstance(p, Point) else Point.of(p) for p in points]
    results: list[GradientCheck | None] = [None] * len(specs)
    plans: list[_Plan] = []
    for pos, (spec, run) in enumerate(zip(specs, runs, strict=False)):
        why = forward_only_reason(spec.python_source)
        if why:
            results[pos] = GradientCheck("forward_only", why)
        elif not probed_args(spec):
            results[pos] = GradientCheck("unverified", "no float array input to differentiate")
        elif not seeded_args(spec):
            results[pos] = GradientCheck("unverified", "no float output array to seed")
        else:
            plans.append(_plan(pos, spec, run))
    originals = {p.pos: (specs[p.pos], runs[p.pos]) for p in plans}

    def fall_back(p: _Plan, why: str) -> _Plan | None:
        """The float32 plan for a twin Warp rejects; None (and unverified) for the rest."""
        if p.spec is not originals[p.pos][0]:
            return _float32_plan(p.pos, *originals[p.pos], why)
        results[p.pos] = GradientCheck("unverified", f"the kernel does not build for the check: {why[:120]}")
        return None

    def solve(group: list[_Plan]) -> None:
        with warp_boundary.open_batch_module(optimization_level=CPU_OPT_LEVEL) as batch:
            live: list[tuple[_Plan, object]] = []
            pending = list(group)
            while pending:  # a rejected twin is swapped for the float32 kernel in this module
                p = pending.pop(0)
                kernel, error = batch.add(p.spec.python_source, p.spec.kernel_name)
                if kernel is not None:
                    live.append((p, kernel))
                elif (q := fall_back(p, error)) is not None:
                    pending.append(q)
            while live:
                with spans.span("gradcheck.build"):
                    error = _build(batch.module, device)
                if error is None:
                    with spans.span("gradcheck.probe"):
                        for p, kernel in live:
                            with contextlib.ExitStack() as stack:
                                faster = OptimizedBuild(p.spec, stack, device, backward=True)  # built if asked
                                results[p.pos] = _check_sizes(p, kernel, device, *originals[p.pos], faster)
                    return
                culprit = _blamed(live, error)
                if culprit is None:
                    break
                batch.drop(culprit[1])
                live.remove(culprit)
                q = fall_back(culprit[0], _last_line(error))
                if q is not None:
                    kernel, why = batch.add(q.spec.python_source, q.spec.kernel_name)
                    if kernel is not None:
                        live.append((q, kernel))
                    else:
                        results[q.pos] = GradientCheck(
                            "unverified", f"the kernel does not load for the check: {why[:120]}"
                        )
            if not live:
                return
        # A build error no source is named in (a C++ compile error, say): split the batch.
        plans_left = [p for p, _ in live]
        if len(plans_left) == 1:
            (p,) = plans_left
            q = fall_back(p, "the CPU build failed")
            if q is not None:
                solve([q])
            return
        half = len(plans_left) // 2
        solve(plans_left[:half])
        solve(plans_left[half:])

    if plans:
        solve(plans)
    return results  # type: ignore[return-value]


def check_own_build(spec: KernelSpec, kernel, point: Point, *, device: str = "cpu") -> GradientCheck | None:
    """What :func:`check_gradients` says about ``spec`` at ``point``, for a row that is
    checked on its own kernel (no float64 twin: the kernel is float64 already, or Warp
    has no float64 version of a builtin it uses), with ``kernel``: that kernel, built
    from the same source (the execution's build).  None for every other row (a twin to
    build, or nothing to build: left to :func:`check_gradients`).  The same code runs on
    the same inputs, so the same check comes out (tests/test_gradcheck_rows.py)."""
    if forward_only_reason(spec.python_source) or not probed_args(spec) or not seeded_args(spec):
        return None
    plan = _plan(0, spec, point)
    if plan.spec is not spec:
        return None
    with contextlib.ExitStack() as stack:  # the optimized build, if a size asks for it, lives while the check runs
        return _check_sizes(plan, kernel, device, spec, point, OptimizedBuild(spec, stack, device, backward=True))


# A size whose check is predicted to take longer than this (the first size's check CPU
# time times sizes.work_growth) is checked on an OptimizedBuild of the kernel checked (the
# row's own, or its float64 twin): a float64 gemm's check at 257 x 257 x 257 took 48 s at
# CPU_OPT_LEVEL on the 2-core machine, the one part that bounded a 16-worker run (#28).
COSTLY_CHECK_SECONDS = 1.0


def _check_sizes(
    plan: _Plan, kernel, device: str, original: KernelSpec, point: Point, faster: OptimizedBuild | None = None
) -> GradientCheck:
    """:func:`_check_one` at the point's own size, then at each of its other sizes on the
    same kernel: verified where every size verifies (or, past the first, has only
    non-smooth probes); the first size's verdict otherwise, or the first mismatch.
    ``faster``: the same source built for speed, for the sizes predicted to be costly
    (same code, same bits: what the check records does not depend on which build ran it)."""
    cpu0 = time.process_time()
    first = _check_one(plan, kernel, device, original)
    seconds = time.process_time() - cpu0
    if first.status != "verified" or not point.sizes:
        return first
    checks = [first]
    for sized, inputs, seeds in point.sizes:
        if plan.spec is original:
            q = _Plan(plan.pos, sized, plan.precision, inputs, seeds, plan.fallback)
        else:
            q = _Plan(plan.pos, twin_spec(sized), FLOAT64, widen_all(inputs, sized.args), widen_all(seeds, sized.args))
        on = kernel
        if (
            faster is not None
            and seconds * sizes.work_growth(original, sized, point.inputs, inputs) > COSTLY_CHECK_SECONDS
        ):
            on = faster.kernel or kernel
        check = _check_one(q, on, device, sized)
        if check.status == "mismatch":
            size = "x".join(str(d) for d in sized.launch_dim)
            return dataclasses.replace(check, reason=f"at launch {size}: {check.reason}")
        checks.append(check)
    return dataclasses.replace(
        first,
        probes=sum(c.probes for c in checks),
        worst_rel_error=max(c.worst_rel_error for c in checks),
        non_smooth=sum(c.non_smooth for c in checks),
    )


def check_built(spec: KernelSpec, kernel, point: Point, *, device: str = "cpu") -> GradientCheck:
    """The check of one kernel that is already built (e.g. a mined kernel, which needs
    its own file to load, so no standalone float64 twin can be made): in float32, with
    that precision's steps and tolerance, same probes and kink handling as
    :func:`check_gradients`.  ``spec`` describes the kernel's arguments; ``point`` holds
    its recorded float32 inputs and output seeds.  A disagreeing adjoint comes back as
    ``mismatch`` (the caller decides what a mismatch means for its row)."""
    why = forward_only_reason(spec.python_source)
    if why:
        return GradientCheck("forward_only", why)
    if not probed_args(spec):
        return GradientCheck("unverified", "no float array input to differentiate")
    if not seeded_args(spec):
        return GradientCheck("unverified", "no float output array to seed")
    return _check_one(_float32_plan(0, spec, point, "already built: no float64 twin"), kernel, device, spec)


def _build(module, device: str) -> str | None:
    return warp_boundary.build_module(module, device)


def _blamed(live: list[tuple[_Plan, object]], error: str) -> tuple[_Plan, object] | None:
    """The kernel a code-generation error names: Warp cites the source's pseudo file name."""
    files = re.findall(r"<cudagen:[0-9a-f]+>", error)
    for name in files:
        for item in live:
            if warp_boundary.source_filename(item[0].spec.python_source) == name:
                return item
    return None


def _last_line(error: str) -> str:
    lines = [ln.strip().lstrip(";") for ln in error.splitlines() if ln.strip()]
    return lines[-1] if lines else "code generation failed"


class _Runner:
    """Launches one kernel again and again on perturbed copies of its inputs."""

    def __init__(self, spec: KernelSpec, kernel, device: str, inputs: dict, seeds: dict):
        self.spec, self.kernel, self.device = spec, kernel, device
        self.inputs = inputs
        self.seeds = seeds
        self.args = [
            to_warp(a, inputs[a.name], device, a.kind == "array" and is_float_dtype(a.dtype)) for a in spec.args
        ]
        self.views = {a.name: w.numpy() for a, w in zip(spec.args, self.args, strict=False) if a.kind == "array"}
        self.seeded = seeded_args(spec)
        self.seed_vec = np.concatenate([np.asarray(seeds[a.name], dtype=np.float64).ravel() for a in self.seeded])
        self._forward = None  # the recorded forward launch, on self.args (made at the first use)

    def _reset(self, shift: dict[str, np.ndarray] | None = None) -> None:
        for a in self.spec.args:
            if a.kind != "array":
                continue
            view = self.views[a.name]
            if a.role == "out":
                view[...] = 0
            else:
                base = self.inputs[a.name]
                view[...] = base if shift is None or a.name not in shift else (base + shift[a.name]).astype(view.dtype)

    def outputs(self, shift: dict[str, np.ndarray] | None = None) -> np.ndarray:
        self._reset(shift)
        if self._forward is None:
            self._forward = launch(self.spec, self.kernel, self.args, self.device, record=True)
        self._forward.launch()
        return np.concatenate([self.views[a.name].astype(np.float64).ravel() for a in self.seeded])

    def tape_gradients(self) -> dict[str, np.ndarray]:
        wp = warp_boundary.warp()
        self._reset()
        tape = wp.Tape()
        with tape:
            launch(self.spec, self.kernel, self.args, self.device)
        by_name = {a.name: w for a, w in zip(self.spec.args, self.args, strict=False)}
        try:
            tape.backward(
                grads={by_name[a.name]: to_warp(a, self.seeds[a.name], self.device, False) for a in self.seeded}
            )
            return {a.name: by_name[a.name].grad.numpy().astype(np.float64).copy() for a in probed_args(self.spec)}
        finally:
            tape.zero()
            tape.reset()


@dataclass
class _Probe:
    tape: float  # directional derivative by the tape
    fd: float | None  # central difference; None: not smooth here
    floor: float  # absolute scale below which a difference is noise
    noise: float = 0.0  # the finite difference's rounding noise


def _check_one(plan: _Plan, kernel, device: str, original: KernelSpec) -> GradientCheck:
    prec = plan.precision
    try:
        runner = _Runner(plan.spec, kernel, device, plan.inputs, plan.seeds)
        grads = runner.tape_gradients()
        base = runner.outputs()
    except Exception as exc:  # noqa: BLE001
        return GradientCheck("unverified", f"the check could not run the kernel: {type(exc).__name__}")
    if not all(np.all(np.isfinite(g)) for g in grads.values()):
        return GradientCheck("unverified", "non-finite tape gradient in the check's precision", prec.name)
    rng = probe_rng(original)
    args = probed_args(plan.spec)
    gmax = max(float(np.max(np.abs(g))) if g.size else 0.0 for g in grads.values())
    probes: list[_Probe] = []
    non_smooth = 0

    def element_probe(arg: ArgSpec, flat: int) -> _Probe:
        x = float(np.asarray(plan.inputs[arg.name]).ravel()[flat])
        unit = np.zeros(np.asarray(plan.inputs[arg.name]).size)
        unit[flat] = 1.0
        shape = np.asarray(plan.inputs[arg.name]).shape
        fd = _difference(runner, base, {arg.name: unit.reshape(shape)}, max(1.0, abs(x)), prec)
        tape = float(grads[arg.name].ravel()[flat])
        return _Probe(tape, fd[0], 0.0, fd[1]) if fd else _Probe(tape, None, 0.0)

    def direction_probe(names: list[str]) -> _Probe:
        d = {n: rng.standard_normal(np.asarray(plan.inputs[n]).shape) for n in names}
        top = max(float(np.max(np.abs(v))) for v in d.values())
        d = {n: v / top for n, v in d.items()}
        scale = max(1.0, max(float(np.max(np.abs(np.asarray(plan.inputs[n])))) for n in names))
        terms = sum(float(np.sum(np.abs(grads[n] * v))) for n, v in d.items())
        tape = float(sum(np.sum(grads[n] * v) for n, v in d.items()))
        fd = _difference(runner, base, d, scale, prec)
        return _Probe(tape, fd[0], terms, fd[1]) if fd else _Probe(tape, None, terms)

    try:
        budget = MAX_ELEMENT_PROBES
        for arg in args:
            size = np.asarray(plan.inputs[arg.name]).size
            g = np.abs(grads[arg.name]).ravel()
            picks = [int(np.argmax(g))] if g.size and g.max() > 0 else []
            for k in range(min(ELEMENT_PROBES, budget)):
                for attempt in range(1 + RETRIES):
                    flat = picks[k] if k < len(picks) and attempt == 0 else int(rng.integers(size))
                    probe = element_probe(arg, flat)
                    if probe.fd is not None:
                        probes.append(probe)
                        break
                    non_smooth += 1
                budget -= 1
        # each input's elements at once, then all inputs at once (the same, for one input)
        groups = [[a.name] for a in args] + ([[a.name for a in args]] if len(args) > 1 else [])
        for names in groups if DIRECTIONS else []:
            for _ in range(1 + RETRIES):
                probe = direction_probe(names)
                if probe.fd is not None:
                    probes.append(probe)
                    break
                non_smooth += 1
    except Exception as exc:  # noqa: BLE001
        return GradientCheck("unverified", f"the check could not run the kernel: {type(exc).__name__}", prec.name)

    if not probes:
        return GradientCheck("unverified", "not smooth at any probe", prec.name, 0, 0.0, non_smooth)
    scale = max(gmax, max(abs(p.fd) for p in probes))
    worst = 0.0
    for p in probes:
        floor = prec.floor * max(scale, p.floor) + 2 * p.noise + 1e-300
        err = abs(p.tape - p.fd) / (max(abs(p.tape), abs(p.fd)) + floor)
        worst = max(worst, err)
    worst = float(f"{worst:.3g}")
    if worst > prec.tol:
        construct = suspect_constructs(original)
        reason = f"tape gradient differs from finite differences (relative error {worst:.3g}, {prec.name})"
        return GradientCheck("mismatch", reason, prec.name, len(probes), worst, non_smooth, construct or "unknown")
    return GradientCheck("verified", "", prec.name, len(probes), worst, non_smooth)


def _difference(
    runner: _Runner, base: np.ndarray, direction: dict[str, np.ndarray], scale: float, prec: Precision
) -> tuple[float, float] | None:
    """(d/dt L(x + t * direction) at t=0, its rounding noise) by central differences, or
    None where the loss is not smooth at x: the central estimates at the three steps
    disagree, or the one-sided ones at a tiny step do (a kink exactly at x)."""
    seed = runner.seed_vec
    eps = float(np.finfo(np.float64 if prec is FLOAT64 else np.float32).eps)
    central, noise = [], 0.0
    for step in prec.steps:
        h = step * scale
        plus = runner.outputs({n: h * v for n, v in direction.items()})
        minus = runner.outputs({n: -h * v for n, v in direction.items()})
        central.append(float(np.dot(plus - minus, seed)) / (2 * h))
        changed = (plus != base) | (minus != base)
        noise = max(noise, 4 * eps * float(np.sum(np.abs(base[changed] * seed[changed]))) / h)
    h = prec.kink_step * scale
    plus = runner.outputs({n: h * v for n, v in direction.items()})
    minus = runner.outputs({n: -h * v for n, v in direction.items()})
    changed = (plus != base) | (minus != base)
    kink_noise = 4 * eps * float(np.sum(np.abs(base[changed] * seed[changed]))) / h
    one_sided = (float(np.dot(plus - base, seed)) / h, float(np.dot(base - minus, seed)) / h)
    if not all(np.isfinite([*central, *one_sided])):
        return None
    size = max(abs(c) for c in central)
    if max(central) - min(central) > prec.tol * size + 2 * noise:
        return None
    if abs(one_sided[0] - one_sided[1]) > prec.tol * size + 2 * kink_noise:
        return None
    return central[-1] if prec is FLOAT64 else central[1], noise


def summary_reason(check: GradientCheck) -> str:
    """The one-line detail of an adjoint_mismatch reject."""
    construct = f"; construct: {check.construct}" if check.construct else ""
    return f"{check.reason}{construct}"


__all__ = [
    "GradientCheck",
    "check_built",
    "check_own_build",
    "check_gradients",
    "forward_only_reason",
    "suspect_constructs",
    "summary_reason",
    "STATUSES",
]
