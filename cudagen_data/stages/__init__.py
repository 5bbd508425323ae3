"""The pipeline's steps.  Read this package and :mod:`cudagen_data.contracts` first.

A slot (category, per-category index) becomes a row by passing, in order::

    generate  (category, seed, index) -> KernelSpec           rejects: generator_error
    extract   KernelSpec -> ExtractedKernel (Warp codegen)    rejects: codegen_error, too_long
    compile   NVRTC, one translation unit per batch           rejects: compile_error
    execute   Warp CPU backend, forward + backward            rejects: load_error ... nan_gradient
    gradcheck tape gradient vs finite differences             rejects: adjoint_mismatch
    dedup     (in the producer, in slot order)                rejects: duplicate_python, duplicate_cuda

Each step is a :class:`Stage`: it takes a list of items, returns the kept items and
the rejects, and times itself.  ``--fast`` runs generate and extract only.  A worker
runs the first five on a part of a batch (:func:`cudagen_data.pipeline.work.run_batch`);
the producer runs dedup.

Counting: :class:`cudagen_data.contracts.RunStats` keeps one
:class:`~cudagen_data.contracts.StageCounter` per stage (in, kept, rejected by reason).
The worker stages' counters are filled when the producer consumes a slot, not in the
worker: a worker may run slots that the producer then discards, because their category
filled up meanwhile, and whether those ran depends on timing.  A consumed slot passed
every stage before the one owning its reject reason (:class:`RejectReason` names it).
"""

from .base import Item, Stage
from .compile import CompileStage
from .dedup import DedupStage
from .execute import ExecuteStage
from .extract import ExtractStage
from .generate import GenerateStage
from .gradcheck import GradientCheckStage

__all__ = [
    "CompileStage",
    "DedupStage",
    "ExecuteStage",
    "ExtractStage",
    "GenerateStage",
    "GradientCheckStage",
    "Item",
    "Stage",
]
