"""One kernel whose adjoint is right, one whose adjoint Warp 1.19 gets wrong: a dynamic
loop whose carried value is used non-linearly after the loop (the backward does not
replay the loop, so ``mu`` sees ``acc``'s initial value)."""

import warp as wp


@wp.kernel
def smooth_cubic(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.sin(a[i]) * a[i] * a[i]


@wp.kernel
def row_mean_squared(a: wp.array2d(dtype=float), n: int, out: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)  # noqa: UP018 - Warp needs float() to declare a variable a dynamic loop mutates
    for j in range(n):
        acc = acc + a[i, j]
    mu = acc / float(n)
    out[i] = mu * mu
