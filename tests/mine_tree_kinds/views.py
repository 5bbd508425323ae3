"""Kernels whose arguments are structs, indexed and fabric arrays, or vector types Warp has
no name for (tests/test_mine_kinds.py)."""

import warp as wp

vec5 = wp.types.vector(length=5, dtype=wp.float32)
vec3b = wp.types.vector(length=3, dtype=wp.int8)


@wp.struct
class Inner:
    scale: float


@wp.struct
class Params:
    src: wp.array(dtype=float)
    dst: wp.array(dtype=float)
    offset: int
    inner: Inner


@wp.kernel
def through_struct(p: Params):
    i = wp.tid()
    p.dst[i] = p.src[(i + p.offset) % 8] * p.inner.scale


@wp.kernel
def reads_struct_only(p: Params):
    i = wp.tid()
    wp.printf("%f\n", p.src[i])


@wp.kernel
def indexed(a: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] + 1.0


@wp.kernel
def fabric_copy(a: wp.fabricarray(dtype=wp.vec3), b: wp.indexedfabricarray(dtype=wp.vec3)):
    i = wp.tid()
    b[i] = a[i] * 2.0


@wp.kernel
def custom_vectors(a: wp.array(dtype=vec5), b: wp.array(dtype=vec3b), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i][4] + float(b[i][2])


@wp.kernel
def prints_only(a: wp.array(dtype=float)):
    i = wp.tid()
    wp.printf("%f\n", a[i])


@wp.kernel
def takes_handle(mesh: wp.uint64, out: wp.array(dtype=float)):
    out[wp.tid()] = float(mesh)


@wp.kernel
def array_of_structs(a: wp.array(dtype=Inner), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i].scale
