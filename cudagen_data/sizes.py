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
out, with the reason in the row's ``size_note``.  A guess whose run
:func:`work_growth` predicts to be costly is first tried on an optimized build of the
kernel, which fails it in a fraction of the time (execution._Judge: a failure there is
the verdict, the two builds recording the same bits; a pass runs again on the row's own
build), so which size is kept does not change.  A kernel
whose source fixes its size is a fixed-size kernel: :func:`fixed_size_reason` says so
before anything runs (the row's ``size_note`` is then ``fixed size: <reason>``).

What a generator declares in ``params`` (the two keys below are read here, nowhere else):

- ``params[FIXED_SIZE]``: why the kernel runs at one size only, where its source fixes
  the extent of the launch's first axis (a ``wp.constant`` grid extent: the generator
  knows which of its constants is that extent; a constant's value alone would not tell);
- ``params[LAUNCH_STEP]``: the first launch extent must be a multiple of this (a linear
  launch over a flattened grid covers whole rows); the other sizes are chosen so.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from typing import Any

from .astwalk import walk
from .spec import ArgSpec, KernelSpec

BLOCK = 256  # threads per block of wp.launch on CUDA (Warp's default)
LARGE, RAGGED = "large", "ragged"
FIXED_SIZE = "fixed_size"  # params key: why the source fixes the kernel's size
LAUNCH_STEP = "launch_step"  # params key: the first launch extent is a multiple of this
_DECLARED = (FIXED_SIZE, LAUNCH_STEP)


def fixed_size_reason(spec: KernelSpec) -> str:
    """Why ``spec`` runs at its generated size only ("" when it can be resized)."""
    if not spec.launch_dim or spec.launch_dim[0] < 1:
        return "no launch dimension to grow"
    if spec.params and spec.params.get(FIXED_SIZE):
        return str(spec.params[FIXED_SIZE])
    if spec.is_tiled and not any(a.kind == "array" and a.shape[0] % spec.launch_dim[0] == 0 for a in spec.args):
        return "tile kernel whose arrays do not grow with its number of tiles"
    return ""


def size_plan(spec: KernelSpec) -> list[tuple[str, int]]:
    """(label, new first launch extent) of the other sizes."""
    v = int(spec.launch_dim[0])
    step = int(spec.params.get(LAUNCH_STEP, 1)) if spec.params else 1
    rest = 1
    for d in spec.launch_dim[1:]:
        rest *= int(d)
    large = 2 * v
    if spec.is_tiled:
        ragged = v + 1 if v + 1 != large else v + 2
    else:
        ragged = max(v + 1, BLOCK // rest + 1)
        ragged = -(-ragged // step) * step
        while (ragged * rest) % BLOCK == 0 or ragged == large:
            ragged += step
    return [(LARGE, large), (RAGGED, ragged)]


def other_sizes(spec: KernelSpec, checked: bool = False) -> list[tuple[str, KernelSpec, float, list[KernelSpec]]]:
    """(label, spec at that size, guard factor, other guesses) for every other size; [] for
    a fixed-size kernel.  The guard factor is how much larger than its new size each
    array's buffer is while a guessed size is tried (execution.run_kernel's out-of-bounds
    guard).  ``checked``: the category has a NumPy reference, so :func:`alternatives` are
    offered (tried in order where the first guess fails)."""
    if fixed_size_reason(spec):
        return []
    out = []
    for label, n in size_plan(spec):
        sized = resized(spec, n)
        out.append((label, sized, guard_factor(spec, sized), alternatives(spec, n) if checked else []))
    return out


def guard_factor(spec: KernelSpec, sized: KernelSpec) -> float:
    """How much larger than ``sized``'s own arrays their buffers are while that size of
    ``spec`` runs under guard (execution.Guards): twice the launch's growth."""
    return 2.0 * _prod(sized.launch_dim) / _prod(spec.launch_dim)


MAX_ALTERNATIVES = 32  # other guesses tried per size, at most (each one launch)


def alternatives(spec: KernelSpec, n: int) -> list[KernelSpec]:
    """Other guesses at first launch extent ``n``, tried in order where :func:`resized`'s
    fails; only for a category whose NumPy reference checks each run (a guess that passes
    it is a correct run of the kernel at those shapes, whatever the guess was).  The
    arrays the kernel writes whose first axis follows the launch (``r * v``) always grow;
    each guess grows a subset of the inputs whose first axis does, and a subset of the
    integer parameters equal to such an extent (fewest changes first); lists in ``params``
    (``view``, ``grid``) have their first element grown only."""
    v = int(spec.launch_dim[0])
    tied = [a for a in spec.args if a.kind == "array" and a.shape[0] % v == 0]
    outs = [a for a in tied if a.role != "in"]
    ins = [a for a in tied if a.role == "in"][:4]
    extent_all = {v * (a.shape[0] // v): n * (a.shape[0] // v) for a in tied} | {v: n}
    keys = [k for k, val in spec.params.items() if type(val) is int and val in extent_all and k not in _DECLARED][:4]
    combos = sorted(
        ((am, pm) for am in range(2 ** len(ins)) for pm in range(2 ** len(keys))),
        key=lambda c: (bin(c[0]).count("1") + bin(c[1]).count("1"), c),
    )
    seen = {_key(resized(spec, n))}
    out = []
    for am, pm in combos:
        grown = {a.name: a.shape[0] // v for a in outs} | {
            a.name: a.shape[0] // v for k, a in enumerate(ins) if am >> k & 1
        }
        extent = {v * r: n * r for r in grown.values()} | {v: n}
        chosen = {k for j, k in enumerate(keys) if pm >> j & 1}
        params = {k: _first_grown(k, val, chosen, extent) for k, val in spec.params.items()}
        args = tuple(
            dataclasses.replace(a, shape=(n * grown[a.name], *a.shape[1:]))
            if a.name in grown
            else (_resized_arg(a, extent, {}) if a.kind == "scalar" else a)
            for a in spec.args
        )
        alt = dataclasses.replace(spec, args=args, launch_dim=(int(n), *spec.launch_dim[1:]), params=params)
        if _key(alt) not in seen:
            seen.add(_key(alt))
            out.append(alt)
            if len(out) >= MAX_ALTERNATIVES:
                break
    return out


def work_growth(
    spec: KernelSpec, sized: KernelSpec, values: dict | None = None, sized_values: dict | None = None
) -> float:
    """Roughly how many times more CPU a run of ``sized`` takes than one of ``spec``: the
    launch's growth times the growth of every argument that bounds a ``for ... in
    range(...)`` loop of the source (an int scalar, or an array's extent ``a.shape[k]``).
    A scalar's value is its domain's top unless ``values`` / ``sized_values`` (inputs by
    argument name) give it: a recorded size keeps its size arguments in its inputs, not in
    its spec (TestVectors.sized_spec).  An estimate, not a verdict: it picks how a run is
    first tried or which build runs a check (execution._run_size, gradcheck._check_sizes),
    never what a row keeps.  A size that grows a scalar bound with the launch (``n_experts``
    equal to the token count) is ~launch-squared work."""
    before, after = _bound_values(spec, values), _bound_values(sized, sized_values)
    growth = _prod(sized.launch_dim) / max(1, _prod(spec.launch_dim))
    for key, value in before.items():
        if value > 0 and after.get(key, value) > value:
            growth *= after[key] / value
    return growth


def _bound_values(spec: KernelSpec, values: dict | None = None) -> dict[tuple[str, int], float]:
    """The value, in ``spec`` (or ``values``), of each argument a loop bound of its source reads."""
    bounds = _loop_bounds(spec.python_source)
    out = {}
    for a in spec.args:
        if a.kind == "array":
            out.update({(a.name, k): float(d) for k, d in enumerate(a.shape) if (a.name, k) in bounds})
        elif (a.name, -1) in bounds and a.dtype.startswith(("int", "uint")):
            given = values.get(a.name) if values is not None else None
            out[(a.name, -1)] = float(a.domain[1] if given is None else given)
    return out


@functools.lru_cache(maxsize=256)
def _loop_bounds(source: str) -> frozenset[tuple[str, int]]:
    """(name, axis) of every ``name.shape[axis]`` and (name, -1) of every bare name that a
    ``range(...)`` loop bound of ``source`` reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    found = set()
    for loop in walk(tree):
        if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)):
            continue
        if not (isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range"):
            continue
        for node in (n for arg in loop.iter.args for n in walk(arg)):
            if isinstance(node, ast.Name):
                found.add((node.id, -1))
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "shape"
                and isinstance(node.value.value, ast.Name)
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, int)
            ):
                found.add((node.value.value.id, node.slice.value))
    return frozenset(found)


def _first_grown(key: str, value: Any, chosen: set[str], extent: dict[int, int]) -> Any:
    if key in _DECLARED:
        return value
    if type(value) is int:
        return extent.get(value, value) if key in chosen else value
    if isinstance(value, list) and value and type(value[0]) is int:
        return [extent.get(value[0], value[0]), *value[1:]]
    return value


def _key(spec: KernelSpec):
    return (spec.args, spec.launch_dim, repr(sorted(spec.params.items())))


def resized(spec: KernelSpec, n: int) -> KernelSpec:
    """``spec`` with its first launch extent ``n`` and every extent tied to it grown to match."""
    v = int(spec.launch_dim[0])
    if n == v:
        return spec
    rows = _row_map(spec, n)
    others = {} if spec.is_tiled else {v: int(n)}
    args = tuple(_resized_arg(a, rows, others) for a in spec.args)
    params = (
        {k: (val if k in _DECLARED else _resized_params(val, rows)) for k, val in spec.params.items()}
        if spec.params
        else spec.params
    )
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
