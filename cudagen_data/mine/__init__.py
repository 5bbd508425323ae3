"""`cudagen mine`: real Warp programs -> the dataset's ``real`` configuration.

- :mod:`.discover`: which files, their provenance paths, kernel definitions by AST
- :mod:`.collect`: import a file in a worker; gather its kernels (nested ones replayed)
- :mod:`.argspecs`: arguments from annotations, for a CPU run
- :mod:`.worker`: one file -> CUDA, compile verdict, CPU runs (plain data)
- :mod:`.pool`: worker processes with a time limit per file, crash isolation
- :mod:`.rows`: rows with provenance, dedup, splits
- :mod:`.folder`: the ``real`` configuration in a dataset folder
- :mod:`.run`: :func:`mine_paths`, the whole thing as a call
"""

from .discover import MineError

__all__ = ["MineError"]
