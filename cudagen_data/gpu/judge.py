"""Turn what the workers measured for one row into its verdict (failures, drift, checks)."""

from __future__ import annotations

import numpy as np

from ..contracts.row import Row
from ..contracts.test_vectors import TestVectors
from ..dataset.read import NotARow
from ..numerics.tolerance import check_array
from .report import RowVerdict
from .worker import DeviceOutcome, ReferenceOutcome, grad_key

# Loosest first: a row is labelled with the loosest tolerance any of its arrays needed.
_LOOSENESS = ("fallback", "float64_native", "float64_twin", "exact")


def judge(
    pos: int,
    row: Row | NotARow,
    device: DeviceOutcome | None,
    reference: ReferenceOutcome | None,
    crashes: dict[str, str],
    warp_version: str,
) -> RowVerdict:
    """``crashes`` maps a stage ("device", "reference") to why its worker died on this row;
    a record that is not a row fails its schema check."""
    v = RowVerdict(pos, str(row.id), str(row.category), str(row.kernel_name), str(row.warp_version))
    if isinstance(row, NotARow):
        v.failures.append(("schema", row.problem))
        return v
    if device is None:
        v.failures.append(("gpu_run", f"{crashes.get('device', 'no result')} while building or running this kernel"))
        return v
    same_warp = v.warp_version == warp_version
    v.cuda_regenerated = _text_check(
        v,
        device.regen_differs,
        same_warp,
        "cuda_regenerate",
        "CUDA regenerated from python_source differs from the recorded text in: ",
    )
    v.cuda_compiled = _text_check(
        v,
        device.compiled_missing,
        same_warp,
        "cuda_compiled",
        "the CUDA compiled for the run does not contain the recorded text of: ",
    )
    v.build = device.build
    if device.error is not None:
        v.failures.append(device.error)
        return v
    if not device.has_vectors:
        v.twin = "no test vectors"
        return v
    v.ran = True
    if reference is not None:
        v.twin = reference.twin
    else:
        v.twin = f"CPU reference stage crashed ({crashes.get('reference', 'no result')})"
    twin_ok = reference is not None and reference.twin == "ok"
    native64 = reference is not None and reference.native64
    sets = TestVectors.from_json(row.test_vectors).sets()
    own = sets[0].decoded()
    _compare(v, own["outputs"], own["input_grads"], device.outputs, device.input_grads, reference if twin_ok else None,
             native64, "")  # fmt: skip
    for k, vset in enumerate(sets[1:]):
        if k >= len(device.more_sizes):
            v.failures.append(("gpu_run", f"size {vset.size}: not run on the device"))
            continue
        _, outputs, grads, error = device.more_sizes[k]
        if error is not None:
            v.failures.append(error)
            continue
        refs = reference.more_sizes[k] if twin_ok and k < len(reference.more_sizes) else None
        d = vset.decoded()
        _compare(v, d["outputs"], d["input_grads"], outputs, grads, refs, native64, f"size {vset.size}: ")
    used = {a.tolerance for a in v.arrays} or {"exact"}
    v.tolerance = next(t for t in _LOOSENESS if t in used)
    return v


def _compare(
    v: RowVerdict,
    outputs: dict,
    input_grads: dict,
    got_outputs: dict,
    got_grads: dict,
    reference,
    native64: bool,
    prefix: str,
) -> None:
    """Check one recorded set against what the device produced; ``reference``: a
    ReferenceOutcome (the row's own size) or a (cpu32, ref64) pair (another size), or None."""
    if isinstance(reference, ReferenceOutcome):
        cpu32, ref64 = reference.cpu32, reference.ref64
    else:
        cpu32, ref64 = reference if reference is not None else ({}, {})
    for kind, recorded, got, key in (
        ("output", outputs, got_outputs, lambda n: n),
        ("input gradient", input_grads, got_grads, grad_key),
    ):
        for name, expected in recorded.items():
            what = "outputs" if kind == "output" else "gradients"
            if name not in got:
                v.failures.append((what, f"{prefix}{kind} {name!r} was not produced on the device"))
                continue
            check = check_array(
                name, kind, got[name], np.asarray(expected),
                cpu32=cpu32.get(key(name)) if reference is not None else None,
                ref64=ref64.get(key(name)) if reference is not None else None,
                native64=native64,
            )  # fmt: skip
            v.arrays.append(check)
            if not check.ok:
                v.failures.append((what, prefix + check.describe()))


def _text_check(v: RowVerdict, differs: list[str] | None, same_warp: bool, check: str, message: str) -> str:
    if differs is None:
        return ""
    if not differs:
        return "identical"
    if same_warp:
        v.failures.append((check, message + ", ".join(differs)))
        return "differs"
    v.drift.append(f"{check}: {', '.join(differs)}")
    return "drift"
