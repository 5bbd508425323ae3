"""Fused linear layer + activation: y = act(x @ W^T + b) (nn.Linear layout) or act(x @ W + b).

Activations: GELU (tanh approximation and erf), SiLU, ReLU, leaky ReLU, tanh, sigmoid;
inline or as a @wp.func; optional residual add and output scale.  Plain and tiled forms
come from the shared ``_matmul`` builder.
"""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from . import _activations as acts
from . import _matmul
from ._common import Names, choice, coin, make_spec, pick_float

CATEGORY = "linear_act"


def generate(rng: np.random.Generator) -> KernelSpec:
    names = Names(rng)
    tiled = coin(rng, 0.35)
    ft = pick_float(rng, 0.3)
    act = choice(rng, acts.ACTIVATIONS, [0.14, 0.08, 0.12, 0.08, 0.2, 0.22, 0.16])
    if tiled:
        tm, tn = choice(rng, [2, 4, 8]), choice(rng, [4, 8])
        tk = choice(rng, [4, 8, 16])
        combos = [
            (gb, gn, gk)
            for gb in (1, 2, 4)
            for gn in (1, 2, 3)
            for gk in (1, 2, 4)
            if tm * gb * tk * gk <= 256 and tk * gk * tn * gn <= 256
        ]
        gb, gn, gk = choice(rng, combos)
        batch, n_out, k_in = tm * gb, tn * gn, tk * gk
        strategy = "tile"
    else:
        tm = tn = tk = 8
        batch = choice(rng, [2, 4, 8, 16])
        n_out = choice(rng, [4, 8, 12, 16])
        k_in = choice(rng, [k for k in (4, 8, 16, 32) if batch * k <= 256 and k * n_out <= 256])
        strategies = list(_matmul.PLAIN_STRATEGIES)
        if ft.is64:
            strategies.remove("mixed")
        strategy = choice(rng, strategies)
    cfg = _matmul.MatmulConfig(
        M=batch,
        N=n_out,
        K=k_in,
        ft=ft,
        strategy=strategy,
        a_trans=coin(rng, 0.1),
        b_trans=coin(rng, 0.7),
        alpha=coin(rng, 0.15),
        beta=False,
        bias=choice(rng, ["col", "none"], [0.8, 0.2]),
        act=act,
        slope=choice(rng, [0.01, 0.1, 0.2]),
        residual=coin(rng, 0.2),
        tm=tm,
        tn=tn,
        tk=tk,
        a_names=("x", "inp", "features", "hidden", "activations"),
        b_names=("w", "weight", "W", "proj", "w_fc"),
        c_names=("y", "out", "output", "h_out", "act_out"),
        bias_names=("b", "bias", "b_fc"),
    )
    act = cfg.act  # the config may have swapped ReLU for leaky ReLU
    kname_options = [
        f"linear_{act}",
        f"fc_{act}",
        f"dense_{act}",
        f"fused_linear_{act}",
        "linear_act_tiled" if tiled else "linear_act",
        f"mlp_{act}",
    ]
    kname, source, args, launch, block_dim, params = _matmul.build(rng, cfg, names, kname_options)
    return make_spec(CATEGORY, kname, source, args, launch, params, block_dim=block_dim, algorithmic=1)


check = _matmul.check
