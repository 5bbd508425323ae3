"""Why a kernel was left out, and which stage says so.

Every reason is listed once here, with the stage that owns it (the only stage that may
emit it).  A run's counters (:mod:`.stats`) credit a rejected slot to its reason's
stage, so adding a reason is adding one line here.  Both sources of rows use them: the
synthetic generators (:class:`Reject`, in ``rejects.jsonl``) and ``cudagen mine``
(:class:`RealReject`, in ``rejects_real.jsonl``), whose kernels pass the same extract,
compile and dedup stages after a stage of their own, ``collect``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class RejectReason(str, Enum):
    """A reject reason; its value is what rejects.jsonl and stats.json hold."""

    def __new__(cls, value: str, stage: str):
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.stage = stage
        return obj

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    GENERATOR_ERROR = ("generator_error", "generate")
    CODEGEN_ERROR = ("codegen_error", "extract")
    # python_source + cuda_forward + cuda_backward longer than --max-chars
    TOO_LONG = ("too_long", "extract")
    COMPILE_ERROR = ("compile_error", "compile")
    LOAD_ERROR = ("load_error", "execute")
    BUILD_ERROR = ("build_error", "execute")
    LAUNCH_ERROR = ("launch_error", "execute")
    NAN_OUTPUT = ("nan_output", "execute")
    CONSTANT_OUTPUT = ("constant_output", "execute")
    REFERENCE_MISMATCH = ("reference_mismatch", "execute")
    BACKWARD_ERROR = ("backward_error", "execute")
    NAN_GRADIENT = ("nan_gradient", "execute")
    # a run at another size (sizes.py) wrote outside its arrays: that size is left out of the
    # row (a row is never rejected for it: only its generated size must pass)
    OUT_OF_BOUNDS = ("out_of_bounds", "execute")
    # outputs unchanged when every input is drawn afresh (inputs_matter.py): a table of the
    # recorded outputs would pass any judge
    INPUT_BLIND = ("input_blind", "execute")
    EXECUTION_ERROR = ("execution_error", "execute")
    # The worker died running the slot alone.  Charged to execution: native code running
    # a kernel is what crashes a worker (in --fast, to the last stage the slot reached).
    WORKER_CRASH = ("worker_crash", "execute")
    # Warp's tape gradient (what cuda_backward computes) disagrees with finite differences
    ADJOINT_MISMATCH = ("adjoint_mismatch", "gradcheck")
    # a backward whose input gradients are zero everywhere on every recorded size: 0 = 0
    # verifies nothing about an adjoint
    VACUOUS_BACKWARD = ("vacuous_backward", "gradcheck")
    DUPLICATE_PYTHON = ("duplicate_python", "dedup")
    DUPLICATE_CUDA = ("duplicate_cuda", "dedup")
    # A mined kernel with the canonical shape of an earlier one (same overload) or of a synthetic row.
    DUPLICATE_SHAPE = ("duplicate_shape", "dedup")
    # cudagen mine's own stage, collect (mine/collect.py): a file imported, its kernels gathered.
    NEEDS_GPU = ("needs_gpu", "collect")  # the file's import wants a CUDA device
    MISSING_DEPENDENCY = ("missing_dependency", "collect")
    SYNTAX_ERROR = ("syntax_error", "collect")
    IMPORT_ERROR = ("import_error", "collect")
    NOT_REPLAYABLE = ("not_replayable", "collect")  # a kernel defined in a function: its definition failed alone
    NOT_CREATED = ("not_created", "collect")  # the definition never ran at import
    GENERIC_NO_OVERLOADS = ("generic_no_overloads", "collect")
    # The file's worker hung or died.  Charged to collect: running a file's top-level code is
    # what hangs or crashes a mining worker (a lone file's compile check is charged here too).
    TIMEOUT = ("timeout", "collect")
    CRASH = ("crash", "collect")
    MINING_ERROR = ("mining_error", "collect")  # the worker raised: a bug of ours, not of the file


@dataclass
class Reject:
    """One line of rejects.jsonl (field order is key order)."""

    slot: int
    category: str
    index: int | None
    kernel_name: str | None
    reason: RejectReason
    detail: str
    log: str = ""
    python_source: str | None = None

    @classmethod
    def of(cls, slot: int, category: str, spec, reason: RejectReason, detail: str, log: str = "") -> Reject:
        """A reject for ``slot``; ``spec`` (a KernelSpec, or None before one exists) names the kernel."""
        return cls(
            slot=slot,
            category=category,
            index=spec.index if spec else None,
            kernel_name=spec.kernel_name if spec else None,
            reason=reason,
            detail=detail,
            log=log,
            python_source=spec.python_source if spec else None,
        )


@dataclass
class RealReject:
    """One line of rejects_real.jsonl: a kernel of a real program (``cudagen mine``) that did
    not become a row (field order is key order).  Where a synthetic kernel has a slot and an
    index, a mined one has its file and line; ``kernel`` names it (``qualname[overload]``
    for an overload), and is "" with ``line`` 0 for a whole file whose kernels are not known."""

    path: str
    line: int
    kernel: str
    reason: RejectReason
    detail: str

    def __post_init__(self) -> None:
        self.reason = RejectReason(self.reason)  # a reason not declared above fails here, not in a reader


REJECTS_FILE = "rejects.jsonl"  # the synthetic rows' rejects (Reject)
REAL_REJECTS_FILE = "rejects_real.jsonl"  # the real configuration's (RealReject)


def error_line(exc: BaseException) -> str:
    """An exception in one line, as reject messages and reports word it: its type and the
    first non-blank line of its message."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def first_error_line(text: str) -> str:
    """The first line of a compiler's output that names an error, else its first line ("" if none)."""
    text = text.strip()
    errors = [ln.strip() for ln in text.splitlines() if "error" in ln.lower()]
    return errors[0] if errors else (text.splitlines()[0].strip() if text else "")


def compiler_log_line(log: list[str]) -> str:
    """`` | <first error line>`` of a compiler's captured output ("" if it said nothing)."""
    first = first_error_line("".join(log))
    return f" | {first}" if first else ""
