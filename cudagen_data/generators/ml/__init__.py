"""ML kernel families (issue #7): reductions, scans, stencils, GEMM, softmax, norms,
fused linear + activation, attention and MoE routing.

``GENERATORS`` maps category -> generator; ``REFERENCE_CHECKS`` maps category -> a
function (spec, inputs, outputs) -> None on match, or an error message on mismatch.
``inputs`` holds every argument as launched (arrays as numpy, scalars as Python
numbers); ``outputs`` holds every out/inout array after the launch.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...spec import KernelSpec
from . import attention, gemm, linear_act, moe_routing, norm, reduction, scan, softmax, stencil

# in the category order of issue #7
_FAMILIES = (reduction, scan, stencil, gemm, softmax, norm, linear_act, attention, moe_routing)

GENERATORS: dict[str, Callable[[np.random.Generator], KernelSpec]] = {m.CATEGORY: m.generate for m in _FAMILIES}
REFERENCE_CHECKS: dict[str, Callable[[KernelSpec, dict, dict], str | None]] = {m.CATEGORY: m.check for m in _FAMILIES}
