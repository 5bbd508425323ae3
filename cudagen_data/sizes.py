"""A kernel at other problem sizes: the spec of the same source with a longer launch and arrays.

Each row records its kernel at the generated size and at two more (``test_vectors`` →
``more_sizes``): ``large`` (twice the launch along its first axis) and ``ragged`` (for an
ordinary kernel, more threads than one CUDA block of :data:`BLOCK` and not a multiple of
it, so a GPU runs a partial last block; for a tile kernel, another number of tiles).

How a spec is resized, without asking its generator: the first launch axis grows from
``v`` to ``v'`` and so does every extent tied to it, namely

- the first axis of an array of extent ``r * v`` becomes ``r * v'`` (``r`` rows per thread
  or per tile, or a flattened grid of the whole launch); of an ordinary kernel, any other
  array axis of extent ``v`` becomes ``v'``,
- int scalar arguments fixed to such an extent (domain ``[e, e]``: a size passed by value),
- integers equal to such an extent in ``params`` (what the category's NumPy reference reads).

A resize is a guess, tried under guard: the arrays sit in buffers with a sentinel tail
(execution.run_kernel's ``guard``), and a size whose run writes past an array (or reads
NaN from past one), fails the output checks or the category's reference check is left
out, with the reason in the row's ``size_note``.  A kernel
whose source fixes its size (a tile of the whole launch, ``wp.constant`` extents) is a
fixed-size kernel: :func:`fixed_size_reason` says so before anything runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .spec import ArgSpec, KernelSpec

BLOCK = 256  # threads per block of wp.launch on CUDA (Warp's default)
LARGE, RAGGED = "large", "ragged"


def fixed_size_reason(spec: KernelSpec) -> str:
    """Why ``spec`` runs at its generated size only ("" when it can be resized)."""
    if not spec.launch_dim or spec.launch_dim[0] < 1:
        return "no launch dimension to grow"
    if spec.is_tiled and not any(a.kind == "array" and a.shape[0] % spec.launch_dim[0] == 0 for a in spec.args):
        return "tile kernel whose arrays do not grow with its number of tiles"
    return ""


def size_plan(spec: KernelSpec) -> list[tuple[str, int]]:
    """(label, new first launch extent) of the other sizes."""
    v = int(spec.launch_dim[0])
    rest = 1
    for d in spec.launch_dim[1:]:
        rest *= int(d)
    large = 2 * v
    if spec.is_tiled:
        ragged = v + 1 if v + 1 != large else v + 2
    else:
        ragged = max(v + 1, BLOCK // rest + 1)
        while (ragged * rest) % BLOCK == 0 or ragged == large:
            ragged += 1
    return [(LARGE, large), (RAGGED, ragged)]


def other_sizes(spec: KernelSpec) -> list[tuple[str, KernelSpec, float]]:
    """(label, spec at that size, guard factor) for every other size; [] for a fixed-size kernel.
    The guard factor is how much larger than its new size each array's buffer is while the
    guessed size is tried (execution.run_kernel's out-of-bounds guard)."""
    if fixed_size_reason(spec):
        return []
    threads = _prod(spec.launch_dim)
    out = []
    for label, n in size_plan(spec):
        sized = resized(spec, n)
        out.append((label, sized, 2.0 * _prod(sized.launch_dim) / threads))
    return out


def resized(spec: KernelSpec, n: int) -> KernelSpec:
    """``spec`` with its first launch extent ``n`` and every extent tied to it grown to match."""
    v = int(spec.launch_dim[0])
    if n == v:
        return spec
    rows = _row_map(spec, n)
    others = {} if spec.is_tiled else {v: int(n)}
    args = tuple(_resized_arg(a, rows, others) for a in spec.args)
    params = _resized_params(spec.params, rows) if spec.params else spec.params
    return dataclasses.replace(spec, args=args, launch_dim=(int(n), *spec.launch_dim[1:]), params=params)


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def _row_map(spec: KernelSpec, n: int) -> dict[int, int]:
    """Extents of a first array axis that follow the first launch axis: ``v`` itself, and
    ``r * v`` (``r`` rows per thread or per tile; a flattened grid of the whole launch)."""
    v = int(spec.launch_dim[0])
    ratios = {1} | {a.shape[0] // v for a in spec.args if a.kind == "array" and a.shape[0] % v == 0}
    return {v * r: int(n) * r for r in sorted(ratios)}


def _resized_arg(a: ArgSpec, rows: dict[int, int], others: dict[int, int]) -> ArgSpec:
    if a.kind == "array":
        shape = tuple((rows if k == 0 else others).get(d, d) for k, d in enumerate(a.shape))
        return dataclasses.replace(a, shape=shape) if shape != a.shape else a
    lo, hi = a.domain
    if a.dtype.startswith(("int", "uint")) and lo == hi and int(lo) in rows:
        new = float(rows[int(lo)])
        return dataclasses.replace(a, domain=(new, new))
    return a


def _resized_params(value: Any, extent: dict[int, int]) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return extent.get(value, value)
    if isinstance(value, list | tuple):
        return type(value)(_resized_params(v, extent) for v in value)
    if isinstance(value, dict):
        return {k: _resized_params(v, extent) for k, v in value.items()}
    return value
