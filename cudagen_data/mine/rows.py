"""Mined kernels -> rows of the ``real`` configuration: provenance, dedup, splits.

Pure functions over the plain data the workers hand back.  A mined row's
``python_source`` is the kernel's own definition as written in its file (it needs the
file's helpers and constants to run: ``provenance`` says where it lives).  Its
``shape_hash`` is the canonical shape of that definition, the split key; overloads of
one generic kernel share it (same split) but are distinct rows, since their CUDA differs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import orjson
import xxhash

from .. import canonical
from ..contracts.manifest import SPLITS
from ..contracts.reject import RealReject, RejectReason, first_error_line
from ..contracts.row import CompileInfo, GradientCheckInfo, Metadata, Provenance, RealRow
from ..contracts.stats import MINE_STAGES, RunStats, StageCounter
from ..extract.levels import nvrtc_version
from ..generators import GENERATOR_VERSION
from ..publish.splits import DEFAULT_RATIOS, assign_split
from .pool import FileResult
from .worker import Executed, MinedKernel

CATEGORY = "real"
LICENSES = {"warp-lang": "Apache-2.0"}

GRADIENTS_UNCHECKED = (
    "executed, but no gradients were recorded (no float array input and output, a while loop, "
    "or arguments passed as struct fields or indexed/fabric arrays)"
)


def gradient_check(backward: str, vectors: dict | None, checked: GradientCheckInfo | None = None) -> GradientCheckInfo:
    """The gradient_check column of a mined row: the worker's check where it ran (float32
    on the built kernel), else honest about why none ran."""
    if not backward:
        return GradientCheckInfo(
            status="forward_only",
            reason="Warp emitted no backward (the kernel's module turns it off)",
            precision="",
            probes=0,
            worst_rel_error=0.0,
        )
    if vectors and checked is not None:
        return dataclasses.replace(checked)
    reason = GRADIENTS_UNCHECKED if vectors else "not executed: no gradients recorded"
    return GradientCheckInfo(status="unverified", reason=reason, precision="", probes=0, worst_rel_error=0.0)


kernel_shape_hash = canonical.kernel_shape_hash


def new_stats() -> RunStats:
    """Mining's counters: kernels (each overload one) through its stages, rows by split,
    tier and gradient status; stage seconds as the workers report them."""
    stats = RunStats.new((CATEGORY,), SPLITS)
    stats.stages = {name: StageCounter() for name in MINE_STAGES}
    stats.stage_seconds = {}
    return stats


@dataclass
class Dedup:
    """Keeps the first kernel of each (shape, overload) and of each CUDA text."""

    synthetic_shapes: set[str] = field(default_factory=set)
    shapes: dict[tuple[str, str], str] = field(default_factory=dict)
    cuda: dict[str, str] = field(default_factory=dict)

    def check(self, k: MinedKernel, shape: str, cuda_hash: str) -> tuple[RejectReason, str] | None:
        """None if new (and remembered), else why it is a duplicate and of what."""
        where = f"{k.relpath}:{k.line}"
        if shape in self.synthetic_shapes:
            return RejectReason.DUPLICATE_SHAPE, "same shape as a synthetic row"
        key = (shape, k.overload)
        if key in self.shapes:
            return RejectReason.DUPLICATE_SHAPE, f"same shape as {self.shapes[key]}"
        if cuda_hash in self.cuda:
            return RejectReason.DUPLICATE_CUDA, f"same CUDA as {self.cuda[cuda_hash]}"
        self.shapes[key] = where
        self.cuda[cuda_hash] = where
        return None


def build_rows(
    results: list[FileResult],
    *,
    warp_version: str,
    versions: dict[str, str] | None = None,
    licenses: dict[str, str] | None = None,
    synthetic_shapes: set[str] | None = None,
    ratios=DEFAULT_RATIOS,
    stats: RunStats | None = None,
) -> tuple[list[RealRow], list[str], list[dict], dict[str, str]]:
    """(rows, each row's split, rejects, preambles by hash), in a fixed order; ``stats``
    (:func:`new_stats`), if given, counts every kernel at the stage that kept or rejected it.

    Files are taken in path order and kernels in line order, so which of two
    duplicates is kept never depends on which worker finished first.
    """
    stats = stats if stats is not None else new_stats()

    def reject(r: RealReject, path: tuple[str, ...] = MINE_STAGES) -> None:
        stats.count_slot(CATEGORY, path, r.reason)
        rejects.append(dataclasses.asdict(r))

    versions = versions or {"warp-lang": warp_version}
    licenses = {**LICENSES, **(licenses or {})}
    dedup = Dedup(set(synthetic_shapes or ()))
    rows: list[RealRow] = []
    splits: list[str] = []
    rejects: list[dict] = []
    preambles: dict[str, str] = {}
    for res in sorted(results, key=lambda r: r.src.relpath):
        for r in res.rejects:
            reject(r)
        for i, k in enumerate(res.kernels):
            # the stages this kernel passes: compile only where the compile check ran
            path = MINE_STAGES if k.compile_ok is not None else tuple(s for s in MINE_STAGES if s != "compile")
            if k.compile_ok is False:
                detail = first_error_line(k.compile_log)
                reject(RealReject(k.relpath, k.line, _named(k), RejectReason.COMPILE_ERROR, detail), path)
                continue
            python_hash, _ = canonical.canonical_hashes(k.python_source)
            shape = kernel_shape_hash(k.python_source)
            cuda_hash = xxhash.xxh3_64_hexdigest((k.forward + k.backward).encode())
            dup = dedup.check(k, shape, cuda_hash)
            if dup is not None:
                reject(RealReject(k.relpath, k.line, _named(k), *dup), path)
                continue
            preamble_hash = xxhash.xxh3_64_hexdigest(k.preamble.encode())
            preambles[preamble_hash] = k.preamble
            hashes = RowHashes(python_hash, shape, cuda_hash, preamble_hash)
            origin = (versions.get(k.package, ""), licenses.get(k.package, ""))
            row = real_row(k, res.executed.get(i), res.not_run.get(i, ""), hashes, warp_version, *origin)
            split = assign_split(shape, ratios)
            stats.count_slot(CATEGORY, path, None)
            stats.count_row(CATEGORY, k.difficulty, split, row.metadata.forward_lines,
                            row.metadata.backward_lines, row.gradient_check.status)  # fmt: skip
            rows.append(row)
            splits.append(split)
    return rows, splits, rejects, preambles


@dataclass(frozen=True)
class RowHashes:
    """A mined kernel's hashes: its canonical Python, its definition's shape, its CUDA, its preamble."""

    python: str
    shape: str
    cuda: str
    preamble: str


def real_row(
    k: MinedKernel,
    executed: Executed | None,
    file_not_run: str,
    hashes: RowHashes,
    warp_version: str,
    package_version: str,
    package_license: str,
) -> RealRow:
    """The row of mined kernel ``k``: its CPU run (``executed``; ``file_not_run``: why its
    file's runs stopped, if they did), provenance and gradient check."""
    not_run = k.not_run or file_not_run or (executed.not_run if executed else "") or ("" if executed else "not run")
    vectors = executed.test_vectors if executed is not None and executed.test_vectors else None
    specs = executed.arg_specs if executed is not None else k.arg_specs
    checked = executed.gradient_check if executed is not None else None
    grad = gradient_check(k.backward, vectors, checked)
    row_id = hashes.python if not k.overload else f"{hashes.python}-{xxhash.xxh3_64_hexdigest(k.overload.encode())[:8]}"
    return RealRow(
        id=row_id,
        kernel_name=k.kernel_name,
        category=CATEGORY,
        python_source=k.python_source,
        cuda_forward=k.forward,
        cuda_backward=k.backward,
        metadata=Metadata(
            device="cuda",
            has_backward=bool(k.backward),
            forward_lines=k.forward.count("\n"),
            backward_lines=k.backward.count("\n"),
            generation_time_ms=k.generation_ms,
            seed=0,
            batch=0,
            index=0,
        ),
        difficulty=k.difficulty,
        features=list(k.features),
        device_functions=k.device_functions,
        preamble_hash=hashes.preamble,
        arg_specs=orjson.dumps(specs or []).decode(),
        launch_dim=list(k.launch_dim) if vectors else [],
        block_dim=None,
        test_vectors=orjson.dumps(vectors).decode() if vectors else "",
        python_hash=hashes.python,
        shape_hash=hashes.shape,
        cuda_hash=hashes.cuda,
        # at the level mining ran (--compile, as produce's); "none" when not checked
        compile=CompileInfo(
            arch=k.arch,
            level=k.compile_level if k.compile_ok else "none",
            nvrtc_version=nvrtc_version(k.compile_level) if k.compile_ok else "",
            status="ok" if k.compile_ok else "skipped",
            time_ms=k.compile_ms,
        ),
        gradient_check=grad,
        warp_version=warp_version,
        generator_version=GENERATOR_VERSION,
        resources=None,  # not measured for mined kernels (produce --resources only)
        provenance=Provenance(
            path=k.relpath,
            line=k.line,
            qualname=k.qualname,
            overload=k.overload,
            package=k.package,
            package_version=package_version,
            license=package_license,
            executed=vectors is not None,
            not_executed_reason="" if vectors else not_run,
            gradients_checked=grad.probes > 0,
            order_dependent=list(executed.order_dependent) if vectors and executed is not None else [],
        ),
    )


def _named(k: MinedKernel) -> str:
    return f"{k.qualname}[{k.overload}]" if k.overload else k.qualname
