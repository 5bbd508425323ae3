"""``cudagen negatives``: wrong kernels made from a dataset's rows, each proven wrong on the CPU.

- :func:`make_negatives` ``(dataset_dir, *, per_row, kinds, seed, workers) -> NegativesResult``
  (run.py): adds the ``negatives`` configuration to a dataset folder
- kinds.py: the kinds (``KINDS``: kind -> stage) and the edits that make candidates
- prove.py: the proof of each candidate at its stage (structure rule, NVRTC, CPU witness)
- batch.py: one batch of rows in a worker (candidates proven in rounds, negative rows, counts)
- pool.py: the worker processes (pipeline.pool.PipePool): batches in order, a crashing witness isolated to its row
"""

from .kinds import KIND_DOCS, KINDS, Candidate, candidates
from .prove import Outcome, RowWork, prove_candidates
from .run import NegativesError, NegativesResult, format_summary, make_negatives

__all__ = ["KINDS", "KIND_DOCS", "Candidate", "NegativesError", "NegativesResult", "Outcome", "RowWork", "candidates",
           "format_summary", "make_negatives", "prove_candidates"]  # fmt: skip
