"""Kernels at module level, inside functions, from a factory, and in a test method."""

import unittest

import warp as wp

SCALE = wp.constant(2.0)


@wp.kernel
def top_level(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * SCALE


def make_offset_kernel(offset: float):
    @wp.kernel
    def offset_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] + offset

    return offset_kernel


made_by_factory = make_offset_kernel(0.5)


def build_helper_kernel(test=None, device=None):
    # Never called at import: the kernel and its helper exist only when this runs.
    @wp.func
    def cube(x: float):
        return x * x * x

    power = 3

    @wp.kernel
    def helper_kernel(a: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = cube(wp.length(a[i])) + float(power)

    return helper_kernel


class TestNested(unittest.TestCase):
    def test_method(self):
        @wp.kernel
        def in_test_method(a: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
            i, j = wp.tid()
            out[i, j] = wp.sin(a[i, j]) * a[j, i]

        wp.launch(in_test_method, dim=(8, 8), inputs=[None, None])

    def test_needs_argument(self, dtype=None):
        for t in (wp.float32, wp.float64):

            @wp.kernel
            def per_type(a: wp.array(dtype=t)):
                a[0] = a[0]


def int_kernels():
    @wp.kernel
    def divide_by_zero(a: wp.array(dtype=int), out: wp.array(dtype=int)):
        i = wp.tid()
        out[i] = a[i] // (a[i] - a[i])

    @wp.kernel
    def integer_ok(a: wp.array(dtype=int), out: wp.array(dtype=int)):
        i = wp.tid()
        out[i] = a[i] * 3 + 1
