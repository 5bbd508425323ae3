"""What a candidate's results are compared with: per row, two input sets and their
reference results, computed on the CPU from the row's original Python kernel.

- ``recorded``: the row's recorded inputs and output gradients; the expected values are
  the recorded outputs and input gradients.
- ``fresh``: inputs drawn from the row's argument specifications with the eval run's
  secret seed (a candidate cannot have seen them); the expected values come from running
  the original Python kernel on Warp's CPU backend.

For both, the float32 kernel and its float64 twin (gpu/twin.py) run on the CPU, so the
GPU suite's tolerance model (gpu/tolerance.py) measures each array's float32 error.
One CPU build per row serves every candidate of that row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xxhash

from .. import warp_boundary
from ..dataset.verify import recorded_run, row_to_spec
from ..execution import CPU_OPT_LEVEL, draw_value, run_kernel
from ..gpu.twin import NativeFloat64, TwinUnavailable, widen_all
from ..gpu.worker import checked_twin
from ..spec import DTYPES, KernelSpec, is_float_dtype

FRESH_TRIES = 3  # fresh draws tried before the fresh check is given up for a row (reported)


class ReferenceUnavailable(Exception):
    """The row's own kernel cannot be run on the CPU (one line; not the candidate's fault)."""


@dataclass
class InputSet:
    name: str  # "recorded" or "fresh"
    inputs: dict
    output_grads: dict
    expected: dict[str, np.ndarray]  # outputs and input gradients ("<name>.grad")
    cpu32: dict[str, np.ndarray] = field(default_factory=dict)  # empty: no twin
    ref64: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Reference:
    spec: KernelSpec
    sets: list[InputSet]
    twin: str = "ok"  # or why there is none
    native64: bool = False
    notes: list[str] = field(default_factory=list)


def grad_key(name: str) -> str:
    return f"{name}.grad"


def fresh_rng(seed: int, row_id: str, attempt: int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, xxhash.xxh64_intdigest(row_id.encode()), attempt])


def draw_fresh(spec: KernelSpec, rng: np.random.Generator) -> tuple[dict, dict]:
    inputs = {a.name: draw_value(a, rng) for a in spec.args}
    grads = {}
    for a in spec.args:
        if a.kind == "array" and is_float_dtype(a.dtype) and a.role != "in":
            np_dtype, comp = DTYPES[a.dtype]
            grads[a.name] = rng.uniform(-1.0, 1.0, size=tuple(a.shape) + comp).astype(np_dtype)
    return inputs, grads


def _flat(run) -> dict[str, np.ndarray]:
    return {**run.outputs, **{grad_key(n): g for n, g in run.input_grads.items()}}


@dataclass
class ReferencePlan:
    """What a row's reference needs built: its kernel and, where Warp makes one, the float64 twin."""

    row: dict
    spec: KernelSpec
    twin: KernelSpec | None
    recorded: tuple  # (inputs, outputs, output_grads, input_grads) as verify.recorded_run returns them
    twin_status: str = "ok"
    native64: bool = False

    def sources(self) -> list[tuple[str, str]]:
        """(python_source, kernel_name) of the kernels to build: the row's, then the twin's."""
        return [(s.python_source, s.kernel_name) for s in [self.spec] + ([self.twin] if self.twin is not None else [])]


def plan_reference(row: dict) -> ReferencePlan:
    """Read the row's spec and recorded run, and make its twin; raises ReferenceUnavailable."""
    try:
        spec = row_to_spec(row)
        recorded = recorded_run(row)
    except (KeyError, ValueError, TypeError) as exc:
        raise ReferenceUnavailable(f"unreadable test vectors or arg specs: {type(exc).__name__}: {exc}") from None
    plan = ReferencePlan(row, spec, None, recorded)
    try:
        plan.twin = checked_twin(spec)
    except NativeFloat64 as exc:
        plan.twin_status, plan.native64 = str(exc), True
    except TwinUnavailable as exc:
        plan.twin_status = str(exc)
    return plan


def compute_reference(row: dict, seed: int) -> Reference:
    """Both input sets with their expected values; raises ReferenceUnavailable."""
    plan = plan_reference(row)
    with warp_boundary.batch_module(plan.sources(), optimization_level=CPU_OPT_LEVEL) as (module, kernels, errors):
        if kernels[0] is None:
            raise ReferenceUnavailable(f"the row's Python kernel does not load: {errors[0]}")
        problem = warp_boundary.build_module(module, "cpu")
        if problem is not None:
            raise ReferenceUnavailable(f"the row's Python kernel does not build on the CPU: {problem}")
        return reference_from_kernels(plan, seed, kernels[0], kernels[1] if plan.twin is not None else None)


def reference_from_kernels(plan: ReferencePlan, seed: int, k32, k64) -> Reference:
    """The input sets of ``plan``'s row, run on its built kernel ``k32`` (and twin ``k64``, or None)."""
    row, spec, twin = plan.row, plan.spec, plan.twin
    inputs, outputs, out_grads, in_grads = plan.recorded
    ref = Reference(spec, [], plan.twin_status, plan.native64)

    def measured(given_inputs, given_grads, name, expected=None):
        run32 = run_kernel(spec, k32, "cpu", None, given_inputs, given_grads)
        if not run32.ok:
            return None, f"{run32.reason}: {run32.detail}"
        s = InputSet(name, given_inputs, given_grads, expected if expected is not None else _flat(run32))
        if k64 is not None:
            run64 = run_kernel(
                twin, k64, "cpu", None, widen_all(given_inputs, spec.args), widen_all(given_grads, spec.args)
            )
            if run64.ok:
                s.cpu32, s.ref64 = _flat(run32), _flat(run64)
            else:
                ref.notes.append(f"{name}: the float64 twin failed on the CPU ({run64.reason})")
        return s, ""

    expected = {**outputs, **{grad_key(n): g for n, g in in_grads.items()}}
    s, why = measured(inputs, out_grads, "recorded", {k: np.asarray(v) for k, v in expected.items()})
    if s is None:
        raise ReferenceUnavailable(f"the row's kernel fails on its own recorded inputs ({why})")
    ref.sets.append(s)
    for attempt in range(FRESH_TRIES):
        fresh_inputs, fresh_grads = draw_fresh(spec, fresh_rng(seed, str(row["id"]), attempt))
        s, why = measured(fresh_inputs, fresh_grads, "fresh")
        if s is not None:
            ref.sets.append(s)
            break
    else:
        ref.notes.append(
            f"no fresh inputs on which the row's kernel passes its own checks ({why}); recorded inputs only"
        )
    return ref
