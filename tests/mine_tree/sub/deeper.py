import warp as wp


@wp.struct
class Particle:
    x: wp.vec3
    m: float


@wp.kernel
def rejected_by_warp(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = undefined_name(i)  # noqa: F821 - Warp rejects it at code generation


@wp.kernel
def takes_struct(p: Particle, out: wp.array(dtype=float)):
    out[0] = p.m * wp.length(p.x)
