"""Real dataset rows from a few hand-written Warp kernels, made with the producer's own
steps (extract -> CPU run at every size -> test vectors -> build_row), independent of the
generators.

The kernels cover what the GPU suite must handle: float32 transcendental chains with a
@wp.func, a scalar argument and a float module constant; vec3 / mat33 / quat types;
an integer output (argmax); atomics; a tile kernel; a float64 kernel; float16; a forward-only kernel.
"""

from __future__ import annotations

import shared

from cudagen_data.canonical import text_hash
from cudagen_data.contracts.row import Row
from cudagen_data.execution import SizedRun, execute_specs, size_note, test_vectors
from cudagen_data.extract import extract_source
from cudagen_data.gradcheck import check_gradients
from cudagen_data.pipeline.config import ProduceConfig, versions
from cudagen_data.pipeline.work import build_row
from cudagen_data.sizes import fixed_size_reason, other_sizes
from cudagen_data.spec import ArgSpec, KernelSpec


def _arr(name, dtype, shape, role="in", domain=(-1.0, 1.0)):
    return ArgSpec(name, "array", dtype, shape, role, domain)


KERNELS: dict[str, tuple[str, tuple[ArgSpec, ...], tuple[int, ...], int | None]] = {
    "chain": (
        """import warp as wp

SCALE = wp.constant(1.5)

@wp.func
def bump(v: float):
    return wp.exp(wp.sin(v) * 2.0) / (1.0 + wp.sqrt(wp.abs(v)))

@wp.kernel
def chain(x: wp.array(dtype=float), s: float, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = bump(x[i] * s) * SCALE + wp.tanh(x[i]) - 0.25
""",
        (
            _arr("x", "float32", (64,), domain=(-2.0, 2.0)),
            ArgSpec("s", "scalar", "float32", domain=(0.5, 1.5)),
            _arr("y", "float32", (64,), "out"),
        ),
        (64,),
        None,
    ),
    "geometry": (
        """import warp as wp

@wp.kernel
def geometry(
    v: wp.array(dtype=wp.vec3),
    a: wp.array(dtype=wp.float32),
    m: wp.array(dtype=wp.mat33),
    q_out: wp.array(dtype=wp.quat),
    out: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    axis = wp.normalize(v[i] + wp.vec3(0.1, 0.2, 0.3))
    q = wp.quat_from_axis_angle(axis, a[i])
    q_out[i] = q
    out[i] = wp.quat_rotate(q, v[i]) + m[i] * v[i] * 0.5
""",
        (
            _arr("v", "vec3", (16,)),
            _arr("a", "float32", (16,), domain=(-3.0, 3.0)),
            _arr("m", "mat33", (16,)),
            _arr("q_out", "quat", (16,), "out"),
            _arr("out", "vec3", (16,), "out"),
        ),
        (16,),
        None,
    ),
    "argmax": (
        """import warp as wp

@wp.kernel
def argmax_rows(x: wp.array2d(dtype=float), idx: wp.array(dtype=int), best: wp.array(dtype=float)):
    r = wp.tid()
    b = x[r, 0]
    k = int(0)
    for j in range(1, 8):
        if x[r, j] > b:
            b = x[r, j]
            k = j
    idx[r] = k
    best[r] = b * 2.0
""",
        (_arr("x", "float32", (6, 8)), _arr("idx", "int32", (6,), "out"), _arr("best", "float32", (6,), "out")),
        (6,),
        None,
    ),
    "atomic": (
        """import warp as wp

@wp.kernel
def atomic_sum(x: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    r, c = wp.tid()
    wp.atomic_add(out, r, x[r, c] * x[r, c] + 0.1)
""",
        (_arr("x", "float32", (8, 32), domain=(-2.0, 2.0)), _arr("out", "float32", (8,), "out")),
        (8, 32),
        None,
    ),
    "tile": (
        """import warp as wp

TILE = wp.constant(64)

@wp.kernel
def tile_sum(x: wp.array(dtype=wp.float32), total: wp.array(dtype=wp.float32)):
    i = wp.tid()
    t = wp.tile_load(x, shape=TILE, offset=i * TILE)
    s = wp.tile_sum(t)
    wp.tile_atomic_add(total, s)
""",
        (_arr("x", "float32", (256,)), _arr("total", "float32", (1,), "out")),
        (4,),
        32,
    ),
    "float64": (
        """import warp as wp

@wp.kernel
def f64_kernel(x: wp.array(dtype=wp.float64), y: wp.array(dtype=wp.float64)):
    i = wp.tid()
    y[i] = wp.exp(x[i]) * wp.float64(0.5) + wp.cos(x[i])
""",
        (_arr("x", "float64", (32,)), _arr("y", "float64", (32,), "out")),
        (32,),
        None,
    ),
    "float16": (
        """import warp as wp

@wp.kernel
def half_kernel(x: wp.array(dtype=wp.float16), y: wp.array(dtype=wp.float16)):
    i = wp.tid()
    y[i] = x[i] * wp.float16(1.5) + wp.float16(0.25)
""",
        (_arr("x", "float16", (32,)), _arr("y", "float16", (32,), "out")),
        (32,),
        None,
    ),
    # not differentiable by nature (a max accumulator, integer counts): a forward-only row,
    # no cuda_backward
    "forward_only": (
        """import warp as wp

wp.set_module_options({"enable_backward": False})

@wp.kernel
def peak_and_bins(x: wp.array(dtype=float), peak: wp.array(dtype=float), bins: wp.array(dtype=int)):
    i = wp.tid()
    wp.atomic_max(peak, 0, x[i] * 2.0)
    wp.atomic_add(bins, int(wp.floor((x[i] + 1.0) * 2.0)), 1)
""",
        (
            _arr("x", "float32", (32,), domain=(-1.0, 0.99)),
            _arr("peak", "float32", (1,), "inout", (-5.0, -5.0)),
            _arr("bins", "int32", (4,), "out"),
        ),
        (32,),
        None,
    ),
}

# The judge's known escapes (issue #23), as rows: partial-work mutants of these must fail
# or be witnessed equivalent (tests/test_eval.py, tests/gpu/test_eval_gpu.py).
ESCAPE_KERNELS: dict[str, tuple[str, tuple[ArgSpec, ...], tuple[int, ...], int | None]] = {
    # a two-level min reduction: 16 threads each fold a strided slice, then atomic_min
    "min_two_level": ("""import warp as wp

wp.set_module_options({"enable_backward": False})

@wp.kernel
def min_two_level(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    t = wp.tid()
    m = float(1.0e30)
    for k in range(t, 256, 16):
        m = wp.min(m, x[k])
    wp.atomic_min(out, 0, m)
""", (_arr("x", "float32", (256,)), _arr("out", "float32", (1,), "inout", (5.0, 5.0))),
        (16,), None),
    # outputs that ignore the inputs (u and gain reach nothing stored)
    "correct_totals": ("""import warp as wp

wp.set_module_options({"enable_backward": False})

@wp.kernel
def correct_totals(u: wp.array(dtype=float), gain: float, counter: wp.array(dtype=int)):
    gid = wp.tid()
    ratio = u[gid] * gain
    wp.atomic_or(counter, 0, 1 << (gid % 16))
""", (_arr("u", "float32", (40,)), ArgSpec("gain", "scalar", "float32"),
      _arr("counter", "int32", (1,), "out")), (40,), None),
    # an inclusive prefix sum, one thread per output: "all but the last element" drops the
    # total, the one output a reduction-minded check would look at
    "prefix_scan": ("""import warp as wp

@wp.kernel
def prefix_scan(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    s = float(0.0)
    for k in range(i + 1):
        s = s + x[k]
    y[i] = s
""", (_arr("x", "float32", (40,)), _arr("y", "float32", (40,), "out")), (40,), None),
    # a tile of 64 elements on 128 lanes: lanes 64..127 hold no tile element
    "tile_idle_lanes": ("""import warp as wp

TILE = wp.constant(64)

@wp.kernel
def tile_idle(x: wp.array(dtype=wp.float32), total: wp.array(dtype=wp.float32)):
    i = wp.tid()
    t = wp.tile_load(x, shape=TILE, offset=i * TILE)
    wp.tile_atomic_add(total, wp.tile_sum(t))
""", (_arr("x", "float32", (256,)), _arr("total", "float32", (1,), "out")), (4,), 128),
}  # fmt: skip

CATEGORY = "handmade"

# Two generated kernels (generator 8, seed 0) whose float32 results differed from the CPU's on
# the first H100 run: test_gpu_cli checks the float64 twin's tolerance covers those differences.
# Pinned here (signatures wrapped to the line length), with their generator coordinates (the
# inputs are drawn from them), since later generators make other kernels at these indices.
H100_TWIN_KERNELS: dict[tuple[str, int], tuple[str, tuple[ArgSpec, ...], tuple[int, ...]]] = {
    ("math", 14): (
        """import warp as wp


@wp.kernel
def count_response_kernel(
    b: wp.array3d(dtype=wp.float64),
    data: wp.array(dtype=float, ndim=3),
    dt: wp.float64,
    sink: wp.array3d(dtype=float),
    y_out: wp.array3d(dtype=wp.float64),
):
    ix, iy, iz = wp.tid()
    span = b[ix, iy, iz]
    h = data[ix, iy, iz]
    h -= wp.sqrt(wp.abs(h) + 1.3)
    angle = wp.smoothstep(0.2, 2.0, wp.exp(data[ix, iy, iz]))
    lane = -2 + (ix + iz)
    sink[ix, iy, iz] = float(span) + h + float(dt)
    y_out[ix, iy, iz] = wp.float64(angle) - wp.float64(lane)
""",
        (
            _arr("b", "float64", (8, 8, 3), domain=(-0.5, 0.5)),
            _arr("data", "float32", (8, 8, 3), domain=(-2.0, 2.0)),
            ArgSpec("dt", "scalar", "float64", domain=(0.1, 1.0)),
            _arr("sink", "float32", (8, 8, 3), "out", (0.0, 0.0)),
            _arr("y_out", "float64", (8, 8, 3), "out", (0.0, 0.0)),
        ),
        (8, 8, 3),
    ),
    ("matrix", 56): (
        """import warp as wp


@wp.func
def shade(w: wp.vec4) -> wp.vec4:
    p = w / -3.5
    return p


@wp.func
def limit_fn(c: wp.vec3, u: wp.mat22) -> wp.vec3:
    accel_v = wp.vec4(2.7)
    if u[0][0] > 5.31:
        u += wp.mat22(2.7)
        f = float(1.62)
        accel_v += wp.vec4(f)
    else:
        c += c / 1.4
        accel_v = wp.vec4(accel_v[0], 2.0, accel_v[2], accel_v[3])
    if 3 <= 2:
        return wp.mat33(-1.88) @ (c * 0.3)
    return wp.vec3(u[1, 0]) + wp.vec3(accel_v[0], accel_v.y, accel_v[2])


@wp.kernel
def encode_covariance(
    stress: wp.array(dtype=wp.mat22), amp: wp.mat33, sink: wp.array(dtype=float), out: wp.array(dtype=wp.mat33)
):
    i = wp.tid()
    R = wp.mat44(2.0) + wp.diag(wp.vec4(8.67))
    q_pos = shade(wp.mat44(-2.61) @ (0.6 * wp.vec4(float(i))))
    R = wp.outer(0.7 * q_pos, 0.7 * q_pos)
    refl = limit_fn(
        wp.vec3(wp.vec3d(wp.float64(i), wp.float64(i), wp.float64(i))), wp.identity(n=2, dtype=float) * float(i)
    )
    sink[i] = R[3, 1] * 0.5 + stress[i][0, 0] + wp.determinant(amp)
    out[i] = wp.outer(0.4 * refl, amp @ wp.vec3(0.34))
""",
        (
            _arr("stress", "mat22", (16,), domain=(-0.5, 0.5)),
            ArgSpec("amp", "scalar", "mat33", domain=(-1.0, 1.0)),
            _arr("sink", "float32", (16,), "out", (0.0, 0.0)),
            _arr("out", "mat33", (16,), "out", (0.0, 0.0)),
        ),
        (16,),
    ),
}  # fmt: skip


def h100_twin_spec(category: str, index: int) -> KernelSpec:
    """A pinned generated kernel at its generator coordinates (seed 0)."""
    source, args, launch_dim = H100_TWIN_KERNELS[(category, index)]
    kernel_name = source.split("@wp.kernel\ndef ", 1)[1].split("(", 1)[0]
    return KernelSpec(category, kernel_name, source, args, launch_dim, "intermediate", seed=0, index=index)


def kernel_spec(name: str, index: int = 0) -> KernelSpec:
    source, args, launch_dim, block_dim = {**KERNELS, **ESCAPE_KERNELS}[name]
    kernel_name = source.split("@wp.kernel\ndef ", 1)[1].split("(", 1)[0]
    return KernelSpec(CATEGORY, kernel_name, source, args, launch_dim, "basic", block_dim=block_dim, index=index)


def make_rows(names: list[str], sizes: bool = False) -> list[dict]:
    """Rows for the named kernels, exactly as the producer would write them (row dicts, as
    JSONL holds them); ``sizes``: with the producer's other sizes too (sizes.py: large,
    ragged), where a kernel has them."""
    return [row.to_dict() for row in make_row_objects(names, sizes)]


def make_row_objects(names: list[str], sizes: bool = False) -> list[Row]:
    """:func:`make_rows` as the contract's :class:`Row` objects (what the judge and
    negatives take)."""
    return row_objects_of([kernel_spec(n, i) for i, n in enumerate(names)], sizes)


def rows_of(specs: list[KernelSpec], sizes: bool = False) -> list[dict]:
    """Rows for ``specs``, as the producer would write them (see make_rows)."""
    return [row.to_dict() for row in row_objects_of(specs, sizes)]


def row_objects_of(specs: list[KernelSpec], sizes: bool = False) -> list[Row]:
    """:func:`rows_of` as :class:`Row` objects.  Made once per test run for the same specs
    (tests/shared.py: the same rows, each caller its own copy)."""
    return shared.once(f"kernel_rows.row_objects_of {sizes} {list(specs)!r}", lambda: _row_objects_of(specs, sizes))


def _row_objects_of(specs: list[KernelSpec], sizes: bool) -> list[Row]:
    config = ProduceConfig(count=len(specs), categories=tuple(dict.fromkeys(s.category for s in specs)))
    more = [[SizedRun(label, sized, guard=guard) for label, sized, guard, _ in other_sizes(spec)] for spec in specs]
    runs = execute_specs(specs, reference_checks={}, more=more if sizes else None)
    checks = check_gradients(specs, runs)
    rows = []
    for spec, run, check in zip(specs, runs, checks, strict=False):
        assert run.ok, f"{spec.kernel_name}: {run.reason} {run.detail}"
        kernel = extract_source(spec.python_source, block_dim=spec.block_dim or 256, arch=config.arch).kernels[0]
        rows.append(
            build_row(
                config,
                0,
                spec,
                kernel,
                text_hash(kernel.preamble),
                test_vectors(spec, run),
                "ok",
                0.0,
                0.0,
                versions()["warp"],
                check,
                size_note=size_note(run, fixed_size_reason(spec)),
            )
        )
    return rows


def with_source(row: dict, source: str) -> dict:
    """A copy of ``row`` whose kernel source is replaced (same name and signature)."""
    return {**row, "python_source": source}
