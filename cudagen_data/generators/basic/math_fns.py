"""Category "math": scalar math builtins (trig, exp/log, pow, sqrt, rounding, min/max/clamp,
smoothstep, erf...) and the formulas built from them (activations, kernels, polynomials)."""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from .frame import Frame, generate_checked, standard_frame
from .stmts import Profile
from .wtypes import F32, F64, I32

PROFILE = Profile(
    families={
        "trig": 4.0,
        "explog": 4.0,
        "special": 2.5,
        "round": 1.5,
        "minmax": 1.5,
        "arith": 3.0,
        "formula": 2.0,
        "select": 0.5,
        "cast": 0.3,
        "helper": 0.12,
        "intdiv": 0.2,
    },
    local_types=((F32, 5.0), (F64, 1.5), (I32, 0.3)),
    stmts={"let": 4.5, "update": 2.5, "if": 0.5, "for": 0.3, "helper": 0.5, "neighbour": 0.4, "early_return": 0.1},
)

IN_POOL = (F32, F32, F32, F64)
OUT_POOL = (F32, F32, F32, F64)
NOUNS = (
    "signal",
    "field",
    "activations",
    "weights",
    "spectrum",
    "samples",
    "phase",
    "density",
    "energy",
    "heights",
    "response",
    "intensity",
    "curve",
    "angles",
    "logits",
    "temperatures",
)


REQUIRED = tuple(
    f"wp.{n}("
    for n in (
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "sinh",
        "cosh",
        "tanh",
        "exp",
        "log",
        "log2",
        "log10",
        "sqrt",
        "cbrt",
        "pow",
        "floor",
        "ceil",
        "round",
        "rint",
        "trunc",
        "frac",
        "smoothstep",
        "erf",
        "erfc",
        "erfinv",
        "erfcinv",
        "step",
        "copysign",
        "degrees",
        "radians",
    )
) + (" ** ",)


def _build(rng: np.random.Generator) -> Frame:
    f = standard_frame(
        rng,
        "math",
        PROFILE,
        IN_POOL,
        OUT_POOL,
        dims=(1, 1, 1, 1, 2, 3),
        n_in=(1, 3),
        n_out=(1, 2),
        param_pool=(F32, F32, F64),
        n_params=(0, 0, 1, 1, 2),
        nouns=NOUNS,
    )
    f.require_any(REQUIRED)
    f.body.body()
    f.write_outputs()
    return f


def generate(rng: np.random.Generator) -> KernelSpec:
    return generate_checked(rng, _build)
