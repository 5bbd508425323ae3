"""Basic Warp kernel generators: six structurally diverse categories.

All six share one typed program-synthesis core (``wtypes``, ``interval``, ``numeric``,
``expr``, ``ops``, ``exprgen``/``productions``, ``builder``, ``stmts``, ``funcs``,
``frame``); each category module weights it toward its own features and adds motifs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...spec import KernelSpec
from . import arithmetic, atomic, control_flow, math_fns, matrix, vector

GENERATORS: dict[str, Callable[[np.random.Generator], KernelSpec]] = {
    "arithmetic": arithmetic.generate,
    "vector": vector.generate,
    "matrix": matrix.generate,
    "control_flow": control_flow.generate,
    "math": math_fns.generate,
    "atomic": atomic.generate,
}
