"""Re-run ``real`` rows on the CPU from their recorded test vectors (``cudagen validate``).

A mined row's source needs its file: the kernel is found again through its provenance
(:mod:`.locate`), built on this machine's Warp, and launched on the recorded inputs and
output gradients.  Rows whose file cannot be found here (a user's tree) are reported as
not re-run, never as passed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from .. import execution, warp_boundary
from ..contracts.reject import RejectReason
from ..contracts.row import GradientCheckInfo, RealRow
from ..contracts.test_vectors import TestVectors
from ..warp_boundary import mining as warp_mining
from .discover import MineError
from .locate import kernel_of
from .worker import MinedKernel, run_one


@dataclass
class Rerun:
    outputs: dict[str, np.ndarray] | None = None
    input_grads: dict[str, np.ndarray] | None = None
    error: str = ""  # the run failed
    skipped: str = ""  # the row could not be re-run here (why)
    gradient_check: GradientCheckInfo | None = None  # the check again, where the row records one that ran


def rerun_rows(rows: list[RealRow], user_root=None) -> list[Rerun]:
    """One Rerun per row (each row must have test vectors); ``user_root``: the folder a
    user's tree was mined under (the installed Warp's rows need none)."""
    out: list[Rerun] = []
    kernels, picked = [], []
    for i, row in enumerate(rows):
        try:
            kernels.append(kernel_of(row, user_root))
            picked.append(i)
            out.append(Rerun())
        except MineError as exc:
            out.append(Rerun(skipped=str(exc)))
    if not picked:
        return out
    with warp_mining.cpu_module_of(kernels, optimization_level=execution.CPU_OPT_LEVEL) as module:
        error = execution_build(module)
        for i, kernel in zip(picked, kernels, strict=False):
            if error is not None:
                out[i] = Rerun(error=f"CPU build failed: {error.split(' | ')[0]}")
                continue
            run, check = run_row(rows[i], kernel, "cpu", with_check=True)
            out[i] = (
                Rerun(outputs=run.outputs, input_grads=run.input_grads, gradient_check=check)
                if run.ok
                else Rerun(error=run.detail)
            )
    return out


def run_row(row: RealRow, kernel, device: str, *, with_check: bool = False):
    """Run a real row's (built) kernel on its recorded inputs and output gradients.

    Unlike a synthetic row, a constant output is no failure here: real kernels fill,
    count and copy.  ``with_check``: also the gradient check again where the row's
    records one that ran (verified or mismatch), and return (result, its check or None)."""
    dec = TestVectors.from_json(row.test_vectors).decoded()
    recheck = with_check and row.gradient_check.status in ("verified", "mismatch")
    done = run_one(
        _as_mined(row), kernel, 0, given=(dec["inputs"], dec["output_grads"]), device=device, check_gradients=recheck
    )
    if done.test_vectors is None:
        result = execution.ExecutionResult(False, RejectReason.LAUNCH_ERROR, done.not_run)
    else:
        got = TestVectors(**done.test_vectors).decoded()
        result = execution.ExecutionResult(
            True,
            inputs=dec["inputs"],
            outputs=got["outputs"],
            output_grads=dec["output_grads"],
            input_grads=got["input_grads"],
        )
    return (result, done.gradient_check) if with_check else result


def execution_build(module) -> str | None:
    return warp_boundary.build_module(module, "cpu")


def _as_mined(row: RealRow) -> MinedKernel:
    prov = row.provenance
    launch_dim = TestVectors.from_json(row.test_vectors).launch_dim
    return MinedKernel(
        relpath=prov.path, package=prov.package, line=prov.line, qualname=prov.qualname,
        kernel_name=row.kernel_name, overload=prov.overload, python_source=row.python_source,
        preamble="", device_functions=row.device_functions, forward=row.cuda_forward,
        backward=row.cuda_backward, generation_ms=0.0, features=list(row.features),
        difficulty=row.difficulty, arg_specs=orjson.loads(row.arg_specs), launch_dim=list(launch_dim),
    )  # fmt: skip
