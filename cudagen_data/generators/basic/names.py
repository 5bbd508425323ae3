"""Identifier choice: varied, readable names, unique within one generated module."""

from __future__ import annotations

import builtins
import keyword

import numpy as np

# Names a generated identifier must never shadow.
RESERVED = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {"wp", "warp", "np", "math"}

# Pools by role.  The generator picks by role so names say what things are.
POOLS: dict[str, tuple[str, ...]] = {
    "tid1": ("i", "tid", "idx", "gid", "k", "t", "n", "e", "p", "elem"),
    "tid2": (("i", "j"), ("row", "col"), ("y", "x"), ("r", "c"), ("u", "v"), ("ti", "tj"), ("a", "b")),
    "tid3": (("i", "j", "k"), ("x", "y", "z"), ("ix", "iy", "iz"), ("b", "r", "c"), ("u", "v", "w")),
    "in_scalar": ("values", "src", "data", "xs", "inp", "signal", "samples", "weights", "field", "a", "b", "x", "y", "u", "v",
                  "heights", "temps", "rates", "mass", "density", "phase", "coeffs", "scores", "levels", "depth"),
    "in_int": ("counts", "labels", "ids", "keys", "flags", "codes", "bins", "steps", "seeds", "offsets", "indices", "lengths"),
    "in_vec": ("points", "positions", "pos", "vel", "velocities", "normals", "dirs", "forces", "colors", "axes", "offsets",
               "targets", "origins", "tangents", "verts", "centers", "accel", "spins"),
    "in_mat": ("mats", "xforms", "rotations", "frames", "jacobians", "stress", "inertia", "basis", "tensors", "covs", "A", "B"),
    "in_quat": ("rots", "orientations", "quats", "attitudes", "spins_q"),
    "out": ("out", "result", "dst", "output", "res", "y_out", "values_out", "buf", "target", "sink", "outputs", "dest"),
    "accum": ("total", "acc", "accum", "hist", "sums", "counter", "bins_out", "tally", "running", "agg"),
    "param": ("scale", "alpha", "beta", "gamma", "offset", "gain", "bias", "dt", "eps", "k", "factor", "shift", "lam", "mu",
              "sigma", "tau", "omega", "amp", "freq", "strength", "limit", "thresh", "rate", "decay"),
    "param_int": ("n_iter", "count", "stride", "period", "mask", "shift_bits", "steps", "base", "modulus", "rounds"),
    "local": ("x", "y", "z", "v", "w", "s", "t", "h", "q", "r", "d", "m", "u", "tmp", "val", "a", "b", "c", "f", "g", "p",
              "lhs", "rhs", "term", "base", "mix", "blend", "delta", "diff", "ratio", "prod", "frac_part", "energy",
              "weight", "angle", "theta", "phi", "dist", "mag", "norm_v", "proj", "score", "level", "bias_v", "coef",
              "residual", "expo", "lo", "hi", "mid", "span", "gain_v", "step_v", "phase_v", "arg", "core", "edge"),
    "local_int": ("n", "m", "cnt", "idx2", "bits", "code", "key", "h", "mask_v", "lane", "bucket", "slot", "ofs", "sh",
                  "word", "parity", "hash_v", "num", "rem", "quot"),
    "local_vec": ("v", "d", "dir", "p", "q_pos", "nrm", "tangent", "axis", "offset_v", "delta_v", "vel_v", "f",
                  "force", "accel_v", "mid", "ctr", "ray", "edge", "bisector", "refl", "proj_v", "perp", "up", "fwd"),
    "local_mat": ("M", "R", "A", "B", "J", "K", "S", "T", "rot", "basis_m", "frame", "Minv", "cov", "H", "P", "W", "E"),
    "local_quat": ("q", "rot_q", "qa", "qb", "spin", "orient", "qr"),
    "loop": ("k", "j", "s", "it", "step", "m", "l", "jj", "kk", "pass_i"),
    "func": ("apply", "blend", "shade", "response", "transfer", "activation", "falloff", "weigh", "kernel_fn", "profile",
             "warp_fn", "remap", "envelope", "soft_limit", "lookup", "mix_fn", "penalty", "attenuate", "shape_fn", "evaluate",
             "combine", "project_fn", "rotate_fn", "decay_fn", "bump", "bias_fn", "wave", "potential", "impulse", "limit_fn"),
    "fparam": ("x", "y", "a", "b", "t", "s", "v", "w", "u", "p", "q", "r", "h", "k", "d", "m", "z", "c"),
}

VERBS = ("compute", "apply", "update", "eval", "accumulate", "transform", "blend", "integrate", "scatter", "gather",
         "reduce", "normalize", "project", "reflect", "rotate", "filter", "smooth", "mix", "score", "map", "warp",
         "shade", "step", "advance", "relax", "resolve", "encode", "decode", "hash", "count", "bin", "clip", "fold",
         "combine", "estimate", "solve", "sample", "remap", "pack", "split", "limit", "propagate", "correct", "measure")
NOUNS = ("values", "field", "forces", "energy", "weights", "signal", "points", "particles", "grid", "matrix", "frames",
         "rotations", "bits", "keys", "histogram", "density", "pressure", "velocity", "positions", "normals", "colors",
         "stencil", "kernel", "cells", "nodes", "edges", "springs", "heights", "samples", "scores", "phase", "spectrum",
         "tensor", "basis", "mask", "codes", "hashes", "ranges", "blocks", "rays", "lights", "charges", "bodies", "stress")


class NameAllocator:
    """Hands out identifiers unique within one generated module."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set(RESERVED)

    def take(self, name: str) -> str:
        """Reserve ``name`` (or ``name`` with a numeric suffix if taken)."""
        base, k = name, 1
        while name in self.used:
            k += 1
            name = f"{base}{k}"
        self.used.add(name)
        return name

    def fresh(self, role: str) -> str:
        pool = POOLS[role]
        order = self.rng.permutation(len(pool))
        for j in order:
            cand = pool[int(j)]
            if isinstance(cand, str) and cand not in self.used:
                return self.take(cand)
        return self.take(pool[int(order[0])])

    def fresh_group(self, role: str) -> tuple[str, ...]:
        """A tuple of names from a pool of tuples (e.g. 2-D thread indices)."""
        pool = POOLS[role]
        order = self.rng.permutation(len(pool))
        for j in order:
            group = pool[int(j)]
            if not any(g in self.used for g in group):
                return tuple(self.take(g) for g in group)
        return tuple(self.take(g) for g in pool[int(order[0])])

    def kernel_name(self, nouns: tuple[str, ...] = NOUNS) -> str:
        verb = VERBS[int(self.rng.integers(len(VERBS)))]
        noun = nouns[int(self.rng.integers(len(nouns)))]
        name = f"{verb}_{noun}"
        if self.rng.random() < 0.3:
            name += ("_kernel", "_k", "_op", "_pass", "_step")[int(self.rng.integers(5))]
        return self.take(name)
