"""Activation functions: Warp source text (inline or as a @wp.func) and NumPy references."""

from __future__ import annotations

import math

import numpy as np

from ._common import FloatType, choice

ACTIVATIONS = ("relu", "leaky_relu", "tanh", "sigmoid", "silu", "gelu_tanh", "gelu_erf")

# sup |f'(x)|: how much an activation can amplify an error in its input (for tolerances)
SLOPE_BOUND = {
    "relu": 1.0,
    "leaky_relu": 1.0,
    "tanh": 1.0,
    "sigmoid": 0.25,
    "silu": 1.1,
    "gelu_tanh": 1.13,
    "gelu_erf": 1.13,
    None: 1.0,
}

SQRT_2_OVER_PI = 0.7978845608028654
INV_SQRT2 = 0.7071067811865476


def expr(act: str, v: str, ft: FloatType, rng: np.random.Generator, slope: float = 0.01) -> str:
    """An inline expression of ``act`` applied to the simple name ``v``."""
    L = ft.lit
    if act == "relu":
        return choice(rng, [f"wp.max({v}, {L(0.0)})", f"wp.where({v} > {L(0.0)}, {v}, {L(0.0)})"])
    if act == "leaky_relu":
        return choice(rng, [f"wp.where({v} > {L(0.0)}, {v}, {L(slope)} * {v})", f"wp.max({v}, {L(slope)} * {v})"])
    if act == "tanh":
        return f"wp.tanh({v})"
    if act == "sigmoid":
        return f"{L(1.0)} / ({L(1.0)} + wp.exp(-{v}))"
    if act == "silu":
        return choice(rng, [f"{v} / ({L(1.0)} + wp.exp(-{v}))", f"{v} * ({L(1.0)} / ({L(1.0)} + wp.exp(-{v})))"])
    if act == "gelu_tanh":
        inner = choice(rng, [f"{v} + {L(0.044715)} * {v} * {v} * {v}", f"{v} * ({L(1.0)} + {L(0.044715)} * {v} * {v})"])
        return f"{L(0.5)} * {v} * ({L(1.0)} + wp.tanh({L(SQRT_2_OVER_PI)} * ({inner})))"
    if act == "gelu_erf":
        return choice(
            rng,
            [
                f"{L(0.5)} * {v} * ({L(1.0)} + wp.erf({v} * {L(INV_SQRT2)}))",
                f"{v} * {L(0.5)} * ({L(1.0)} + wp.erf({v} / {L(math.sqrt(2.0))}))",
            ],
        )
    raise ValueError(act)


def func(act: str, name: str, ft: FloatType, rng: np.random.Generator, slope: float = 0.01) -> str:
    """A @wp.func ``name(x)`` computing ``act``; some written with branches or temporaries."""
    L = ft.lit
    arg = choice(rng, ["x", "v", "z"])
    body: list[str]
    if act == "relu" and rng.random() < 0.4:
        body = [f"if {arg} > {L(0.0)}:", f"    return {arg}", f"return {L(0.0)}"]
    elif act == "leaky_relu" and rng.random() < 0.4:
        body = [f"if {arg} < {L(0.0)}:", f"    return {L(slope)} * {arg}", f"return {arg}"]
    elif act in ("silu", "sigmoid") and rng.random() < 0.5:
        s = choice(rng, ["s", "sig", "gate"])
        body = [f"{s} = {L(1.0)} / ({L(1.0)} + wp.exp(-{arg}))", f"return {arg + ' * ' + s if act == 'silu' else s}"]
    elif act == "gelu_tanh" and rng.random() < 0.5:
        u = choice(rng, ["u", "inner", "t"])
        body = [
            f"{u} = {L(SQRT_2_OVER_PI)} * ({arg} + {L(0.044715)} * {arg} * {arg} * {arg})",
            f"return {L(0.5)} * {arg} * ({L(1.0)} + wp.tanh({u}))",
        ]
    else:
        body = [f"return {expr(act, arg, ft, rng, slope)}"]
    return f"@wp.func\ndef {name}({arg}: {ft.ann}):\n" + "".join(f"    {line}\n" for line in body)


def numpy(act: str | None, x: np.ndarray, slope: float = 0.01) -> np.ndarray:
    if act is None:
        return x
    if act == "relu":
        return np.maximum(x, 0.0)
    if act == "leaky_relu":
        return np.where(x > 0.0, x, slope * x)
    if act == "tanh":
        return np.tanh(x)
    if act == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if act == "silu":
        return x / (1.0 + np.exp(-x))
    if act == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    if act == "gelu_erf":
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x * INV_SQRT2))
    raise ValueError(act)
