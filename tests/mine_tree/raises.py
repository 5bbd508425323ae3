import warp as wp


@wp.kernel
def never_mined(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = 1.0


raise RuntimeError("this file fails on import")
