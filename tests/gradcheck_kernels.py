"""Kernels with known-wrong Warp 1.19 adjoints, their corrected forms, and kinks.

Each bad kernel is one construct of DESIGN.md "What Warp 1.19 differentiates wrongly";
each good kernel computes the same thing in a form Warp differentiates correctly.
"""

from __future__ import annotations

from cudagen_data.spec import ArgSpec, KernelSpec

HEAD = "import warp as wp\n\n"


def _spec(
    name: str, body: str, args: tuple[ArgSpec, ...], dim: tuple[int, ...], block_dim: int | None = None, index: int = 0
) -> KernelSpec:
    return KernelSpec(
        category="test",
        kernel_name=name,
        python_source=HEAD + body,
        args=args,
        launch_dim=dim,
        difficulty="basic",
        block_dim=block_dim,
        seed=5,
        index=index,
    )


def arr(name, shape, role="in", dtype="float32", domain=(-1.0, 1.0)):
    return ArgSpec(name, "array", dtype, tuple(shape), role, domain)


def scalar(name, dtype, lo, hi=None):
    return ArgSpec(name, "scalar", dtype, (), "in", (lo, lo if hi is None else hi))


BAD = {
    "dynamic_loop": _spec(
        "dyn_loop",
        """@wp.kernel
def dyn_loop(x: wp.array2d(dtype=float), n: int, y: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)
    for j in range(n):
        acc += x[i, j]
    mu = acc / float(n)
    y[i] = mu * mu
""",
        (arr("x", (4, 8)), scalar("n", "int32", 8), arr("y", (4,), "out")),
        (4,),
    ),
    # The trip count depends on the thread: Warp 1.19 drops the loop from the adjoint (the
    # gradient through it is zero).  Only the threads with col % 6 == 5 loop (one column in
    # six), so single-element probes mostly land on right elements: a random direction
    # over all of x catches it (test_gradcheck.py shows both).
    "thread_bound_loop": _spec(
        "split_cells",
        """@wp.kernel
def split_cells(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    col = wp.tid()
    v = x[col]
    acc = float(0.0)
    for j in range(col % 6 - 4):
        acc += v * v
    y[col] = acc * acc + v
""",
        (arr("x", (48,)), arr("y", (48,), "out")),
        (48,),
    ),
    "tile_scan": _spec(
        "scan_k",
        """@wp.kernel
def scan_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_load(x, shape=16)
    s = wp.tile_scan_inclusive(t)
    wp.tile_store(y, s)
""",
        (arr("x", (16,)), arr("y", (16,), "out")),
        (1,),
        block_dim=16,
    ),
    "tile_reduce": _spec(
        "reduce_k",
        """@wp.kernel
def reduce_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_load(x, shape=16)
    s = wp.tile_reduce(wp.add, t)
    wp.tile_store(y, s)
""",
        (arr("x", (16,)), arr("y", (1,), "out")),
        (1,),
        block_dim=16,
    ),
    "tile_max": _spec(
        "max_k",
        """@wp.kernel
def max_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_load(x, shape=16)
    s = wp.tile_max(t)
    wp.tile_store(y, s)
""",
        (arr("x", (16,)), arr("y", (1,), "out")),
        (1,),
        block_dim=16,
    ),
    "frac": _spec(
        "frac_k",
        """@wp.kernel
def frac_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = wp.frac(x[i]) * x[i]
""",
        (arr("x", (8,), domain=(0.1, 0.9)), arr("y", (8,), "out")),
        (8,),
    ),
    "component_write": _spec(
        "comp_k",
        """@wp.kernel
def comp_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    v = wp.vec3(x[i], 2.0 * x[i], 0.5)
    v[2] = x[i] * x[i]
    v[2] = v[2] * x[i]
    y[i] = wp.dot(v, v)
""",
        (arr("x", (8,)), arr("y", (8,), "out")),
        (8,),
    ),
    "atomic_min_inout": _spec(
        "amin_k",
        """@wp.kernel
def amin_k(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_min(acc, 0, x[i] * x[i])
""",
        (arr("x", (8,)), arr("acc", (1,), "inout", domain=(5.0, 6.0))),
        (8,),
    ),
    "read_overwrite": _spec(
        "rw_k",
        """@wp.kernel
def rw_k(a: wp.array(dtype=float), c: wp.array(dtype=float)):
    i = wp.tid()
    c[i] = wp.sin(a[i] + 0.5 * c[i])
""",
        (arr("a", (8,)), arr("c", (8,), "inout")),
        (8,),
    ),
}

GOOD = {
    "static_loop": _spec(
        "static_loop",
        """N = wp.constant(8)

@wp.kernel
def static_loop(x: wp.array2d(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)
    for j in range(N):
        acc += x[i, j]
    mu = acc / float(N)
    y[i] = mu * mu
""",
        (arr("x", (4, 8)), arr("y", (4,), "out")),
        (4,),
    ),
    "dynamic_loop_linear": _spec(
        "dyn_linear",
        """@wp.kernel
def dyn_linear(x: wp.array2d(dtype=float), n: int, y: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)
    for j in range(n):
        acc += wp.sin(x[i, j])
    y[i] = 3.0 * acc
""",
        (arr("x", (4, 8)), scalar("n", "int32", 8), arr("y", (4,), "out")),
        (4,),
    ),
    "tile_sum": _spec(
        "tsum_k",
        """@wp.kernel
def tsum_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_load(x, shape=16)
    s = wp.tile_sum(wp.tile_map(wp.sin, t))
    wp.tile_store(y, s)
""",
        (arr("x", (16,)), arr("y", (1,), "out")),
        (1,),
        block_dim=16,
    ),
    "fresh_vector": _spec(
        "fresh_k",
        """@wp.kernel
def fresh_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    v = wp.vec3(x[i], 2.0 * x[i], 0.5)
    v = wp.vec3(v[0], v[1], x[i] * x[i])
    v = wp.vec3(v[0], v[1], v[2] * x[i])
    y[i] = wp.dot(v, v)
""",
        (arr("x", (8,)), arr("y", (8,), "out")),
        (8,),
    ),
    "atomic_add_inout": _spec(
        "aadd_k",
        """@wp.kernel
def aadd_k(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(acc, 0, x[i] * x[i])
""",
        (arr("x", (8,)), arr("acc", (1,), "inout", domain=(5.0, 6.0))),
        (8,),
    ),
    "separate_output": _spec(
        "sep_k",
        """@wp.kernel
def sep_k(a: wp.array(dtype=float), c: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.sin(a[i] + 0.5 * c[i])
""",
        (arr("a", (8,)), arr("c", (8,)), arr("out", (8,), "out")),
        (8,),
    ),
    "vec_math": _spec(
        "vec_k",
        """@wp.kernel
def vec_k(p: wp.array(dtype=wp.vec3), s: float, y: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.normalize(p[i] + wp.vec3(0.1, 0.2, 0.3)) * s
    y[i] = wp.exp(wp.length(wp.cross(q, p[i]))) + wp.log(1.5 + wp.tanh(q[1]))
""",
        (arr("p", (8,), dtype="vec3"), scalar("s", "float32", 0.5, 2.0), arr("y", (8,), "out")),
        (8,),
    ),
}

# Non-smooth points: never called wrong.
KINKS = {
    "abs_at_zero": _spec(
        "abs_k",
        """@wp.kernel
def abs_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = wp.abs(x[i] * 0.0 + x[i] - x[i]) + wp.abs(x[i])
""",
        (arr("x", (8,), domain=(-1e-9, 1e-9)), arr("y", (8,), "out")),
        (8,),
    ),
    "relu": _spec(
        "relu_k",
        """@wp.kernel
def relu_k(x: wp.array(dtype=float), w: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)
    for j in range(16):
        acc += wp.max(x[j] * w[i], 0.0)
    y[i] = acc
""",
        (arr("x", (16,), domain=(-1e-6, 1e-6)), arr("w", (4,)), arr("y", (4,), "out")),
        (4,),
    ),
    "floor_step": _spec(
        "floor_k",
        """@wp.kernel
def floor_k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = wp.floor(x[i] * 4.0) + x[i]
""",
        (arr("x", (8,), domain=(-2.0, 2.0)), arr("y", (8,), "out")),
        (8,),
    ),
}
