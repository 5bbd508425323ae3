"""Category "arithmetic": integer and float operators, casts between precisions, bit operations."""

from __future__ import annotations

import numpy as np

from ...spec import KernelSpec
from .expr import Expr
from .frame import Frame, ensure_float_io, generate_checked, launch_shape, pick
from .interval import Interval
from .stmts import Profile
from .wtypes import F32, F64, I8, I16, I32, I64, U8, U32

PROFILE = Profile(
    families={
        "arith": 4.0,
        "cast": 2.0,
        "intdiv": 1.5,
        "bits": 2.0,
        "minmax": 1.0,
        "round": 0.7,
        "select": 0.5,
        "explog": 0.3,
        "trig": 0.2,
        "helper": 0.12,
    },
    local_types=((F32, 3.0), (I32, 2.5), (F64, 1.2), (U32, 0.8), (I64, 0.3), (I16, 0.15), (I8, 0.1), (U8, 0.1)),
    stmts={"let": 4.0, "update": 3.0, "if": 0.6, "for": 0.4, "neighbour": 0.8, "helper": 0.4, "early_return": 0.2},
)

IO_TYPES = (F32, F32, F32, I32, I32, F64, U32, I64)


# arithmetic kernels convert between precisions / integer and float types
REQUIRED = (
    "float(",
    "int(",
    "wp.float32(",
    "wp.float64(",
    "wp.int32(",
    "wp.uint32(",
    "wp.int64(",
    "wp.float16(",
    "wp.int8(",
    "wp.uint8(",
    "wp.int16(",
)

OPERATORS = (" + ", " - ", " * ", " / ", " // ", " % ", " & ", " | ", " ^ ", " << ", " >> ", " += ", " -= ", " *= ")


def _hash_motif(f: Frame) -> None:
    """An integer hash with wrap-around uint32 arithmetic (well defined), masked to a range."""
    kb, g = f.kb, f.gen
    src = g.varying_leaf(I32)
    if src is None:
        return
    src = g.fit_nonneg(src)
    h = kb.names.fresh("local_int")
    kb.emit(f"{h} = wp.uint32({src.text})")
    x = kb.full(src.vals).astype(np.uint64) & 0xFFFFFFFF
    mult = int(pick(f.rng, (0x27D4EB2D, 0x45D9F3B, 0x2C1B3C6D, 0x297A2D39)))
    add = int(f.rng.integers(1, 1 << 16))
    steps = [
        (f"{h} = ({h} ^ wp.uint32(61)) ^ ({h} >> wp.uint32(16))", lambda v: (v ^ 61) ^ (v >> 16)),
        (f"{h} *= wp.uint32(9)", lambda v: v * 9),
        (f"{h} = {h} ^ ({h} >> wp.uint32(4))", lambda v: v ^ (v >> 4)),
        (f"{h} *= wp.uint32({hex(mult)})", lambda v: v * mult),
        (f"{h} = {h} ^ ({h} >> wp.uint32(15))", lambda v: v ^ (v >> 15)),
        (f"{h} += wp.uint32({add})", lambda v: v + add),
        (f"{h} = ({h} << wp.uint32(3)) | ({h} >> wp.uint32(29))", lambda v: (v << 3) | (v >> 29)),
    ]
    order = sorted(int(j) for j in f.rng.permutation(len(steps))[: int(f.rng.integers(2, 6))])
    for k in order:
        text, fn = steps[k]
        kb.emit(text)
        x = fn(x) & 0xFFFFFFFF
    mask = int(pick(f.rng, (255, 1023, 4095, 65535)))
    vals = (x & mask).astype(float)
    masked = Expr(f"{h} & wp.uint32({mask})", U32, Interval(0, mask), prec=7, size=3, vals=vals)
    kb.declare("local_int", masked)


def _build(rng: np.random.Generator) -> Frame:
    f = Frame(rng, "arithmetic", PROFILE)
    dims = int(pick(rng, (1, 1, 1, 2, 2, 3)))
    n_in = int(rng.integers(1, 4))
    n_out = int(rng.integers(1, 3))
    in_types = [pick(rng, IO_TYPES) for _ in range(n_in)]
    out_types = [pick(rng, IO_TYPES) for _ in range(n_out)]
    if rng.random() < 0.9:
        ensure_float_io(in_types, out_types)  # else no gradient: a forward-only row
    f.start(launch_shape(rng, dims, f.max_threads_for(in_types + out_types)))
    for t in in_types:
        f.add_input(t)
    for _ in range(int(pick(rng, (0, 0, 1, 1, 2)))):
        f.add_param(pick(rng, (F32, F32, I32, F64)))
    for t in out_types:
        f.add_output(t)
    f.open()
    f.load_inputs()
    f.require_any(REQUIRED)
    f.require_any(OPERATORS)
    if rng.random() < 0.15:
        _hash_motif(f)
    f.body.body()
    f.write_outputs()
    return f


def generate(rng: np.random.Generator) -> KernelSpec:
    return generate_checked(rng, _build)
