"""Category "vector": construction, dot, cross, length, normalize, components, component-wise ops."""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from . import ops
from .expr import const
from .frame import Frame, generate_checked, pick, standard_frame
from .productions import nonzero_vec
from .stmts import Profile
from .structs import struct_motif
from .wtypes import F32, F64, quat, vec

V2, V3, V4, V3D = vec(2), vec(3), vec(4), vec(3, "float64")

PROFILE = Profile(
    families={
        "vec": 4.0,
        "vec_reduce": 3.0,
        "arith": 3.0,
        "quat": 0.8,
        "minmax": 0.6,
        "trig": 0.4,
        "explog": 0.4,
        "select": 0.4,
        "mat_vec": 0.3,
        "special": 0.6,
        "formula": 0.2,
        "helper": 0.12,
        "cast": 0.3,
    },
    local_types=((V3, 4.0), (F32, 3.0), (V2, 1.2), (V4, 1.0), (V3D, 0.4), (F64, 0.2), (quat(), 0.3)),
    stmts={
        "let": 4.0,
        "update": 2.5,
        "elem": 1.0,
        "if": 0.8,
        "for": 0.5,
        "neighbour": 0.8,
        "helper": 0.5,
        "early_return": 0.2,
        "while": 0.1,
    },
)

IN_POOL = (V3, V3, V3, V2, V4, F32, F32, V3D, quat())
OUT_POOL = (V3, V3, F32, F32, V2, V4, V3D)
NOUNS = (
    "points",
    "particles",
    "normals",
    "rays",
    "velocities",
    "forces",
    "springs",
    "colors",
    "directions",
    "frames",
    "positions",
    "vertices",
    "tangents",
    "bodies",
    "samples",
    "offsets",
)


# a vector kernel must do vector math, not only move vectors around
REQUIRED = (
    "wp.dot(",
    "wp.cross(",
    "wp.length",
    "wp.normalize(",
    "wp.cw_",
    "wp.norm_",
    "wp.smooth_normalize(",
    "wp.quat_rotate",
    "wp.transform_",
    "wp.lerp(",
)


def _orthonormal_frame(f: Frame) -> None:
    """t, b completing a unit normal n to an orthonormal basis (the usual up-vector trick)."""
    kb, g = f.kb, f.gen
    n = ops.normalize(nonzero_vec(g, g.gen(V3, 1)))
    if n is None:
        return
    n = kb.declare("local_vec", n)
    flip = ops.comparison("<", ops.unary("abs", ops.component(n, 1, style="attr")), const(F32, 0.9))
    up = ops.where(
        flip,
        ops.vec_ctor(V3, [const(F32, 0.0), const(F32, 1.0), const(F32, 0.0)]),
        ops.vec_ctor(V3, [const(F32, 1.0), const(F32, 0.0), const(F32, 0.0)]),
    )
    c = ops.cross(n, up)
    if c is None:
        return
    # |n x up| >= sqrt(1 - 0.9^2) because the up vector is never near-parallel to n
    t = ops.normalize(c.with_(min_norm=0.43))
    t = kb.declare("local_vec", t)
    b = ops.cross(n, t)
    if b is not None:
        kb.declare("local_vec", b.with_(unit=True, min_norm=1.0))


def _spring(f: Frame) -> None:
    """Hooke force from the next point: k * (|d| - rest) * d / |d|."""
    kb, g = f.kb, f.gen
    pts = [a for a in kb.args if a.kind == "array" and a.role == "in" and a.type == V3 and a.ndim == 1]
    if not pts:
        return
    a = pick(f.rng, pts)
    n = a.shape[0]
    i, iv = kb.tid[0], kb.tid_exprs[0].vals
    if f.rng.random() < 0.5:
        other = kb.element(a, f"({i} + 1) % {a.name}.shape[0]", (np.fmod(iv + 1, n),))
    else:
        other = kb.element(a, f"wp.min({i} + 1, {a.name}.shape[0] - 1)", (np.minimum(iv + 1, n - 1),))
    here = kb.element(a)
    d = ops.sub(other, here)
    if d is None:
        return
    d = kb.declare("local_vec", d)
    length = ops.vec_norm("length", d)
    if length is None:
        return
    eps = g.lit(F32, 1e-4, 1e-2)
    dist = kb.declare("local", ops.add(length, eps))
    rest = g.lit(F32, 0.1, 1.0)
    k = g.lit(F32, 0.5, 20.0)
    mag = ops.mul(k, ops.sub(dist, rest))
    force = ops.mul(ops.div(mag, dist.with_(min_norm=eps.iv.lo)), d)
    if force is not None:
        kb.declare("local_vec", force)


def _integrate(f: Frame) -> None:
    """Semi-implicit Euler: v += a * dt; x += v * dt."""
    kb, g = f.kb, f.gen
    vecs = [a for a in kb.args if a.kind == "array" and a.role == "in" and a.type == V3 and tuple(a.shape) == kb.launch]
    if len(vecs) < 1:
        return
    dt = kb.scalar_params(F32)
    dt = dt[0] if dt else kb.add_scalar("param", F32, (0.01, 0.1))[1]
    vel = kb.declare("local_vec", g.fit_mag(g.gen(V3, 1), 20.0), mutable=False)
    acc = g.fit_mag(g.gen(V3, 1), 20.0)
    kb.update(vel.text, "+=", ops.mul(acc, g.fit_mag(dt, 1.0)))
    pos = kb.declare("local_vec", kb.element(vecs[0]))
    step = ops.mul(kb.vars[vel.text].expr, g.fit_mag(dt, 1.0))
    if step is not None:
        kb.update(pos.text, "+=", step)


MOTIFS = (_orthonormal_frame, _spring, _integrate)


def _build(rng: np.random.Generator) -> Frame:
    f = standard_frame(
        rng,
        "vector",
        PROFILE,
        IN_POOL,
        OUT_POOL,
        dims=(1, 1, 1, 2, 2, 3),
        n_in=(1, 3),
        n_out=(1, 2),
        param_pool=(F32, F32, V3),
        n_params=(0, 0, 1, 1, 2),
        first_in=V3,
        nouns=NOUNS,
    )
    f.require_any(REQUIRED)
    r = rng.random()
    if r < 0.45:
        pick(rng, MOTIFS)(f)
    elif r < 0.6:
        struct_motif(f)
    f.body.body()
    f.write_outputs()
    return f


def generate(rng: np.random.Generator) -> KernelSpec:
    return generate_checked(rng, _build)
