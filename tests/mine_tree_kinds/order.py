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
def slot_and_sum(vals: wp.array(dtype=float), counter: wp.array(dtype=int), order: wp.array(dtype=int), total: wp.array(dtype=float)):
    i = wp.tid()
    order[wp.atomic_add(counter, 0, 1) % 8] = i  # depends on thread order
    wp.atomic_add(total, 0, vals[i])  # does not


@wp.kernel
def ordinary(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * a[i] + 1.0
