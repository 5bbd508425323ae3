"""Category "matrix": mat-vec and mat-mat products, transpose, determinant, inverse of
well-conditioned matrices, outer products, rotations."""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from . import ops
from .expr import Expr, const
from .frame import Frame, generate_checked, pick, standard_frame
from .interval import Interval
from .productions import quat_unit, well_conditioned
from .stmts import Profile
from .wtypes import F32, I32, mat, quat, vec

M22, M33, M44, M33D = mat(2), mat(3), mat(4), mat(3, "float64")
V2, V3, V4 = vec(2), vec(3), vec(4)

PROFILE = Profile(
    families={
        "mat": 4.0,
        "mat_vec": 3.0,
        "mat_reduce": 2.0,
        "arith": 2.5,
        "vec": 1.0,
        "vec_reduce": 1.0,
        "quat": 0.6,
        "cast": 0.2,
        "helper": 0.12,
        "trig": 0.2,
        "minmax": 0.2,
        "select": 0.2,
    },
    local_types=((M33, 3.0), (M22, 1.5), (M44, 1.0), (V3, 2.0), (F32, 2.0), (V2, 0.6), (V4, 0.5), (M33D, 0.3)),
    stmts={
        "let": 4.0,
        "update": 2.0,
        "elem": 1.0,
        "if": 0.6,
        "for": 0.5,
        "helper": 0.4,
        "neighbour": 0.3,
        "early_return": 0.15,
    },
    size={"basic": (1, 2, 2, 1), "intermediate": (2, 3, 2, 2), "advanced": (3, 4, 2, 2)},
)

IN_POOL = (M33, M33, M22, M44, V3, V3, F32, M33D, quat())
OUT_POOL = (M33, M33, V3, V3, F32, M22, M44, V2)
NOUNS = (
    "matrices",
    "frames",
    "rotations",
    "transforms",
    "tensors",
    "jacobians",
    "inertia",
    "basis",
    "stress",
    "covariance",
    "bodies",
    "cameras",
    "joints",
    "strain",
)


REQUIRED = (
    " @ ",
    "wp.mul(",
    "wp.transpose(",
    "wp.determinant(",
    "wp.inverse(",
    "wp.outer(",
    "wp.trace(",
    "wp.ddot(",
    "wp.diag(",
    "wp.get_diag(",
    "wp.skew(",
    "wp.quat_to_matrix(",
    "wp.matrix_from_",
)


def _rotate_points(f: Frame) -> None:
    """R = quat_to_matrix(q); p' = R @ p + t (rigid transform of a point)."""
    kb, g = f.kb, f.gen
    q = quat_unit(g, quat(), 1)
    r = ops.quat_to_matrix(q)
    if r is None:
        return
    rv = kb.declare("local_mat", r)
    p = g.fit_mag(g.gen(V3, 1), 20.0)
    moved = ops.add(ops.matmul(rv, p, style=g.pick(["op", "op", "call"])), g.fit_mag(g.gen(V3, 0), 20.0))
    if moved is not None:
        kb.declare("local_vec", moved)


def _similarity(f: Frame) -> None:
    """R @ M @ transpose(R): a tensor expressed in a rotated frame."""
    kb, g = f.kb, f.gen
    q = quat_unit(g, quat(), 1)
    r = ops.quat_to_matrix(q)
    m = g.fit_mag(g.gen(M33, 1), 10.0)
    if r is None:
        return
    rv = kb.declare("local_mat", r)
    out = ops.matmul(ops.matmul(rv, m), ops.transpose(rv))
    if out is not None:
        kb.declare("local_mat", out)


def _solve(f: Frame) -> None:
    """x = inverse(A) @ b with A made diagonally dominant (so it is well-conditioned)."""
    kb, g = f.kb, f.gen
    t = pick(f.rng, (M22, M33, M33, M44))
    a = well_conditioned(g, t, 1)
    if a is None:
        return
    av = kb.declare("local_mat", a)
    inv = ops.inverse(av)
    b = g.fit_mag(g.gen(vec(t.shape[0]), 1), 10.0)
    x = ops.matmul(inv, b)
    if x is not None:
        kb.declare("local_vec", x)


def _covariance(f: Frame) -> None:
    """Accumulate outer products of neighbour differences (a local covariance)."""
    kb, g = f.kb, f.gen
    pts = [a for a in kb.args if a.kind == "array" and a.role == "in" and a.type == V3 and a.ndim == 1]
    if not pts:
        return
    a = pick(f.rng, pts)

    cov = kb.declare("local_mat", const(M33, 0.0), mutable=True)
    here = kb.element(a)
    k = int(pick(f.rng, (2, 3, 4)))
    lv = kb.names.fresh("loop")

    mid = np.full(kb.n_samples, float(k // 2))
    loop_var = Expr(lv, I32, Interval(1, k), vals=mid + 1, op="loopvar", literal=True)  # constant range
    kb.begin_loop(f"for {lv} in range(1, {k + 1}):", k, np.array([k]), loop_var, mutable=(cov.text,))
    n = a.shape[0]
    i, iv = kb.tid[0], kb.tid_exprs[0].vals
    other = kb.element(a, f"({i} + {lv}) % {a.name}.shape[0]", (np.fmod(iv + mid + 1, n),))
    d = kb.declare("local_vec", g.fit_mag(ops.sub(other, here) or other, 10.0))
    kb.update(cov.text, "+=", ops.outer(d, d))  # |d| <= 10 per entry: k terms stay in range
    kb.end_loop()


MOTIFS = (_rotate_points, _similarity, _solve, _covariance)


def _build(rng: np.random.Generator) -> Frame:
    f = standard_frame(
        rng,
        "matrix",
        PROFILE,
        IN_POOL,
        OUT_POOL,
        dims=(1, 1, 1, 2, 2, 3),
        n_in=(1, 3),
        n_out=(1, 2),
        param_pool=(F32, F32, M33),
        n_params=(0, 0, 1, 1),
        first_in=pick(rng, (M33, V3, M22)),
        nouns=NOUNS,
    )
    f.require_any(REQUIRED)
    if rng.random() < 0.5:
        pick(rng, MOTIFS)(f)
    f.body.body()
    f.write_outputs()
    return f


def generate(rng: np.random.Generator) -> KernelSpec:
    return generate_checked(rng, _build)
