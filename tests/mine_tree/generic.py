from typing import Any

import warp as wp


@wp.kernel
def scale_any(a: wp.array(dtype=Any), s: Any, out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i] * s


wp.overload(scale_any, [wp.array(dtype=wp.float32), wp.float32, wp.array(dtype=wp.float32)])
wp.overload(scale_any, {"a": wp.array(dtype=wp.float64), "s": wp.float64, "out": wp.array(dtype=wp.float64)})


@wp.kernel
def generic_without_overloads(a: wp.array(dtype=Any)):
    i = wp.tid()
    a[i] = a[i] + a[i]
