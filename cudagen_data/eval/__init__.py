"""Score model-written CUDA against a dataset's rows (``cudagen eval``; an RL reward).

- :func:`score` ``(row, candidate, *, device, preamble) -> Score``; :class:`Scorer` for many
  candidates at once (workers and per-row references kept between calls)
- :func:`evaluate` ``(predictions, dataset, *, split, device, seed, workers, report_path) -> EvalReport``
- :func:`format_report`; :func:`make_mutants` (wrong kernels made from right ones, for tests and benchmarks)

The ladder: structure.py (stage 1), compile.py (stage 2: NVRTC front end, then the full
compile), run.py + reference.py (stage 3, GPU only: the candidate in place of Warp's
kernel, recorded and fresh inputs, the GPU suite's tolerance model); pool.py isolates
the run stage in worker processes.
"""

from .command import EvalInputError, evaluate
from .mutants import Mutant, make_mutants
from .report import EvalReport, format_report, pass_at_k
from .score import REWARD, STAGES, Candidate, Score, Scorer, StageResult, score

__all__ = ["REWARD", "STAGES", "Candidate", "EvalInputError", "EvalReport", "Mutant", "Score", "Scorer", "StageResult",
           "evaluate", "format_report", "make_mutants", "pass_at_k", "score"]  # fmt: skip
