"""Typed expressions: source text plus everything the generator knows about its value.

An :class:`Expr` is immutable.  Besides its Warp type and value interval it records
facts the builders need to keep code well-posed and outputs non-degenerate:

- ``varying``: the value differs between threads (it reads thread-indexed data).  A value
  that is the same in every thread (literals, scalar parameters) written to an output
  array would make the output constant, which the executor rejects.
- ``min_norm``: a lower bound on a vector's length, so ``wp.normalize`` never sees ~0.
- ``unit``: a unit vector / unit quaternion / rotation matrix: ``wp.length`` of it, or
  ``wp.determinant`` of it, is a constant.
- ``det_lo``: a lower bound on ``|det|`` of a matrix, so ``wp.inverse`` is well-conditioned.
- ``collapsed``: somewhere inside, an operation turned values that depend on the inputs
  into one that does not (``c % wp.max(b, 1)`` with ``c`` a multiple of ``b``; a cast
  that truncates a narrow range to one integer; ``wp.where`` whose condition never
  changes, ``wp.max`` whose one side always wins): the inputs it read reach nothing
  (issue #23), so the generator does not emit it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import numeric
from .interval import Interval
from .wtypes import WType, literal, literal_value

# Python operator precedence, loosest to tightest (what ast.unparse uses).
PREC_TERNARY = 0
PREC_OR = 1
PREC_AND = 2
PREC_NOT = 3
PREC_CMP = 4
PREC_BOR = 5
PREC_BXOR = 6
PREC_BAND = 7
PREC_SHIFT = 8
PREC_ADD = 9
PREC_MUL = 10
PREC_UNARY = 11
PREC_POW = 12
PREC_ATOM = 13

BINOP_PREC = {
    "or": PREC_OR,
    "and": PREC_AND,
    "<": PREC_CMP,
    "<=": PREC_CMP,
    ">": PREC_CMP,
    ">=": PREC_CMP,
    "==": PREC_CMP,
    "!=": PREC_CMP,
    "|": PREC_BOR,
    "^": PREC_BXOR,
    "&": PREC_BAND,
    "<<": PREC_SHIFT,
    ">>": PREC_SHIFT,
    "+": PREC_ADD,
    "-": PREC_ADD,
    "*": PREC_MUL,
    "/": PREC_MUL,
    "//": PREC_MUL,
    "%": PREC_MUL,
    "@": PREC_MUL,
    "**": PREC_POW,
}


@dataclass(frozen=True)
class Expr:
    text: str
    type: WType
    iv: Interval
    prec: int = PREC_ATOM
    varying_hint: bool | None = None  # overrides the sample-based answer (see ``varying``)
    size: int = 1
    literal: bool = False
    min_norm: float = 0.0
    unit: bool = False
    det_lo: float = 0.0
    op: str = ""  # the production that built it (to avoid e.g. a cast of a cast)
    collapsed: bool = False
    # values on the sample threads (see numeric.py); None only for text-only helpers
    vals: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def varying(self) -> bool:
        """Whether the value differs between threads: read off the sample values (computed
        on first use and cached), unless a hint was given."""
        if self.varying_hint is not None:
            return self.varying_hint
        cached = self.__dict__.get("_varying")
        if cached is None:
            cached = numeric.is_varying(self.vals)
            object.__setattr__(self, "_varying", cached)
        return cached

    @property
    def live(self) -> bool:
        """Whether the value differs anywhere among the samples (threads or worlds)."""
        cached = self.__dict__.get("_live")
        if cached is None:
            cached = self.varying or numeric.is_live(self.vals)
            object.__setattr__(self, "_live", cached)
        return cached

    def with_(self, **changes) -> Expr:
        return replace(self, **changes)

    def wrap(self, min_prec: int) -> str:
        """The text, parenthesised if it binds looser than ``min_prec``."""
        return self.text if self.prec >= min_prec else f"({self.text})"


def const(t: WType, value: float) -> Expr:
    """A literal of type ``t`` (vectors/matrices: broadcast constructor)."""
    comp = t.component()
    value = literal_value(comp, value)  # what the printed literal means, not what was asked
    text = literal(comp, value)
    if not t.is_scalar:
        text = f"{t.ctor}({text})"
    prec = PREC_UNARY if text.startswith("-") else PREC_ATOM
    v = float(value)
    if comp.is_float and comp.scalar == "float32":
        v = float(np.float32(v))
    return Expr(text, t, Interval.point(float(value)), prec=prec, literal=True, vals=numeric.const_vals(v, t.shape))


def binop_text(op: str, a: Expr, b: Expr) -> str:
    p = BINOP_PREC[op]
    if op == "**":  # right-associative
        return f"{a.wrap(p + 1)} ** {b.wrap(p)}"
    if p == PREC_CMP:  # avoid Python's comparison chaining
        return f"{a.wrap(p + 1)} {op} {b.wrap(p + 1)}"
    return f"{a.wrap(p)} {op} {b.wrap(p + 1)}"


def call_text(fn: str, *args: Expr | str) -> str:
    parts = [a if isinstance(a, str) else a.text for a in args]
    return f"{fn}({', '.join(parts)})"


def combine(text: str, t: WType, iv: Interval, *parts: Expr, prec: int = PREC_ATOM, vals=None, **facts) -> Expr:
    """An expression built from ``parts``: size summed, a literal (compile-time constant)
    if every part is, varying if its sample values differ between threads."""
    hint = None if vals is not None else any(p.varying for p in parts)
    collapsed = facts.pop("collapsed", False) or any(p.collapsed for p in parts)
    e = Expr(
        text,
        t,
        iv,
        prec=prec,
        varying_hint=hint,
        size=1 + sum(p.size for p in parts),
        literal=bool(parts) and all(p.literal for p in parts),
        vals=vals,
        collapsed=collapsed,
        **facts,
    )
    if not collapsed and vals is not None and not e.live and any(p.live for p in parts):
        e = replace(e, collapsed=True)  # inputs went in, a constant came out
    return e
