"""Kernels that step outside the arrays mining makes up for them (8 per dimension) because
their sizes come from a module constant, as in warp/examples/core/example_fdtd_3d.py
(tests/test_mine_kinds.py): each must be not executed with its reason, the same in every
run, and the kernel that stays inside must run."""

import warp as wp

GRID = wp.constant(16)


@wp.kernel
def reads_past_end(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    if i < GRID - 1:
        y[i] = x[i + 1] - x[i]  # x[8]: one past the end


@wp.kernel
def writes_past_end(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    if i < GRID - 1:
        y[i + 1] = x[i] * 2.0  # y[8]: one past the end


@wp.kernel
def reads_before_start(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i - GRID] * 3.0  # i - 16: Warp wraps once by 8, still 8 before the start


@wp.kernel
def reads_index_past_end(idx: wp.array(dtype=int), x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    if i < GRID - 1:
        y[i] = x[idx[i + 1] % 8]  # an index read past the end: an integer guard cell


@wp.kernel
def staggered_3d(e: wp.array3d(dtype=float), h: wp.array3d(dtype=float)):
    i, j, k = wp.tid()
    if j <= GRID - 2:
        h[i, j, k] = e[i, j + 1, k] - e[i, j, k]  # example_fdtd_3d's update_h: past the end at i = 7, j = 7


@wp.kernel
def stays_inside(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    if i < GRID - 9:  # i < 7: x[i + 1] stays inside
        y[i] = wp.max(x[i + 1], x[i])


@wp.kernel
def csr_row_sums(offsets: wp.array(dtype=int), x: wp.array(dtype=float), y: wp.array(dtype=float)):
    v = wp.tid()
    s = float(0.0)  # noqa: UP018 - Warp: a variable the loop changes is declared dynamic
    for j in range(offsets[v], offsets[v + 1]):  # offsets[8] past the end: a loop bound, read into no sum
        s += x[j]
    y[v] = s


@wp.kernel
def branches_past_end(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i]
    if i < GRID - 1:
        if x[i + 1] < -0.25:  # x[8]: a NaN and a positive value there leave y alone, a negative one does not
            y[i] = 0.0


@wp.kernel
def csr_match_count(offsets: wp.array(dtype=int), cols: wp.array(dtype=int), y: wp.array(dtype=int)):
    v = wp.tid()
    n = int(0)  # noqa: UP018 - Warp: a variable the loop changes is declared dynamic
    for j in range(offsets[v], offsets[v + 1]):  # offsets[8] past the end; no fill makes the body count
        if cols[j] == v + 100:
            n += 1
    y[v] = offsets[v] * 2 + n


@wp.kernel
def divides_by_before_start(n: wp.array(dtype=int), y: wp.array(dtype=int)):
    i = wp.tid()
    y[i] = 64 // n[i - GRID]  # 8 before the start: with the array's end fenced, a zero there (SIGFPE)
