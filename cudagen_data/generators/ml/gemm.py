"""General matrix multiply: C = alpha * op(A) @ op(B) (+ bias) (+ beta * C) with optional activation.

Plain loop versions (thread per element / row, unrolled k, dot-product helper, float64
accumulation) and tiled versions (wp.tile_load / tile_matmul / tile_store); operands may
be stored transposed.  The kernel text comes from the shared ``_matmul`` builder.
"""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from . import _matmul
from ._common import Names, choice, coin, make_spec, pick_float

CATEGORY = "gemm"


def generate(rng: np.random.Generator) -> KernelSpec:
    names = Names(rng)
    tiled = coin(rng, 0.4)
    ft = pick_float(rng, 0.3)
    if tiled:
        tm, tn = choice(rng, [4, 8]), choice(rng, [4, 8])
        tk = choice(rng, [4, 8, 16])
        # tile counts chosen together so every operand stays <= 256 elements
        combos = [
            (gm, gn, gk)
            for gm in (1, 2, 3, 4)
            for gn in (1, 2, 3, 4)
            for gk in (1, 2, 3, 4)
            if tm * gm * tk * gk <= 256 and tk * gk * tn * gn <= 256 and tm * gm * tn * gn <= 256
        ]
        gm, gn, gk = choice(rng, combos)
        M, N, K = tm * gm, tn * gn, tk * gk
        strategy = "tile"
    else:
        tm = tn = tk = 8
        M, N = choice(rng, [4, 6, 8, 12, 16]), choice(rng, [4, 6, 8, 12, 16])
        K = choice(rng, [k for k in (4, 8, 12, 16, 24, 32) if M * k <= 256 and k * N <= 256])
        strategies = list(_matmul.PLAIN_STRATEGIES)
        if ft.is64:
            strategies.remove("mixed")
        strategy = choice(rng, strategies)
    epilogue = {
        "alpha": coin(rng, 0.35),
        "beta": coin(rng, 0.25),
        "bias": choice(rng, ["none", "col", "row"], [0.55, 0.3, 0.15]),
        "act": choice(
            rng, [None, "relu", "gelu_tanh", "silu", "tanh", "leaky_relu"], [0.6, 0.1, 0.1, 0.08, 0.06, 0.06]
        ),
        "residual": coin(rng, 0.1),
    }
    cfg = _matmul.MatmulConfig(
        M=M,
        N=N,
        K=K,
        ft=ft,
        strategy=strategy,
        a_trans=coin(rng, 0.25),
        b_trans=coin(rng, 0.3),
        tm=tm,
        tn=tn,
        tk=tk,
        slope=choice(rng, [0.01, 0.1, 0.2]),
        **epilogue,
    )
    fused = cfg.bias != "none" or cfg.act or cfg.beta
    kname_options = [
        f"gemm_{strategy}",
        "matmul",
        "sgemm" if not ft.is64 else "dgemm",
        "gemm_tiled" if tiled else "gemm_naive",
        "gemm_fused" if fused else "gemm",
        "mm_kernel",
    ]
    kname, source, args, launch, block_dim, params = _matmul.build(rng, cfg, names, kname_options)
    points = (1 if fused else 0) + (1 if cfg.a_trans or cfg.b_trans else 0)
    return make_spec(CATEGORY, kname, source, args, launch, params, block_dim=block_dim, algorithmic=points)


check = _matmul.check
