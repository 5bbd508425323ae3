"""Kernels whose outputs do or do not depend on the order threads run in (tests/test_mine_kinds.py)."""

import warp as wp


@wp.kernel
def write_at_atomic_slot(vals: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
    i = wp.tid()
    slot = wp.atomic_add(counter, 0, 1)  # the slot depends on which thread came first
    out[slot % 8] = vals[i]


@wp.kernel
def colliding_scatter(idx: wp.array(dtype=int), vals: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[idx[i]] = vals[i]  # 8 threads, indices drawn in 1..7: some collide, the last writer wins


@wp.kernel
def permutation_scatter(vals: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[(i * 3 + 1) % out.shape[0]] = vals[i] * 2.0  # a permutation: no two threads share a slot


@wp.kernel
def atomic_sum(vals: wp.array(dtype=float), total: wp.array(dtype=float), count: wp.array(dtype=int)):
    i = wp.tid()
    wp.atomic_add(total, 0, vals[i])  # a sum: the same in any order, up to rounding
    wp.atomic_add(count, 0, 1)


@wp.kernel
def slot_and_sum(
    vals: wp.array(dtype=float), counter: wp.array(dtype=int), order: wp.array(dtype=int), total: wp.array(dtype=float)
):
    i = wp.tid()
    order[wp.atomic_add(counter, 0, 1) % 8] = i  # depends on thread order
    wp.atomic_add(total, 0, vals[i])  # does not


@wp.kernel
def ordinary(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * a[i] + 1.0


@wp.kernel
def lost_update(vals: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
    i = wp.tid()
    counter[0] = counter[0] + 1  # not atomic: a GPU loses updates; the CPU's sequential threads do not
    out[i] = vals[i] + 1.0


@wp.kernel
def count_groups(colors: wp.array(dtype=int), sizes: wp.array(dtype=int)):
    # meant for one thread (as warp's coloring.count_color_group_sizes): run with 8, each counts everything
    for n in range(colors.shape[0]):
        c = colors[n]
        sizes[c] = sizes[c] + 1


@wp.kernel
def same_value_everywhere(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    out[0] = a[0] * 2.0  # every thread stores the same value: any order gives it


@wp.kernel
def rows_2d(a: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[j, i] = a[i, j] * 3.0  # a transpose: each element stored by one thread, not the thread's own index


@wp.kernel
def lanes_rewrite_a_row(h: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    # as warp's _gmres_solve_least_squares: every lane of a row updates the row in place
    row, _lane = wp.tid()
    r = h[row]
    for j in range(h.shape[1]):
        r[j] = r[j] * 0.5 + 1.0
    out[row] = 2.0
