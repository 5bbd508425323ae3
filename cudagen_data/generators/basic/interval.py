"""Interval arithmetic: a sound over-approximation of the values an expression can take.

The synthesis core keeps one interval per expression (for vectors and matrices it bounds
every component).  It is what lets the generator emit only well-posed code: ``wp.sqrt``
and ``wp.log`` see positive arguments, denominators stay away from zero, ``wp.exp`` never
overflows, integers never wrap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    @staticmethod
    def point(v: float) -> Interval:
        return Interval(v, v)

    @property
    def mag(self) -> float:
        """Largest absolute value."""
        return max(abs(self.lo), abs(self.hi))

    @property
    def mig(self) -> float:
        """Smallest absolute value (0 when the interval contains 0)."""
        if self.lo <= 0.0 <= self.hi:
            return 0.0
        return min(abs(self.lo), abs(self.hi))

    @property
    def width(self) -> float:
        return self.hi - self.lo

    def within(self, lo: float, hi: float) -> bool:
        return lo <= self.lo and self.hi <= hi

    def contains(self, other: Interval) -> bool:
        return self.lo <= other.lo and other.hi <= self.hi

    def finite(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    # --- arithmetic -----------------------------------------------------------------
    def __add__(self, o: Interval) -> Interval:
        return Interval(self.lo + o.lo, self.hi + o.hi)

    def __sub__(self, o: Interval) -> Interval:
        return Interval(self.lo - o.hi, self.hi - o.lo)

    def __neg__(self) -> Interval:
        return Interval(-self.hi, -self.lo)

    def __mul__(self, o: Interval) -> Interval:
        ps = (self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi)
        return Interval(min(ps), max(ps))

    def scale(self, k: float) -> Interval:
        return self * Interval.point(k)

    def shift(self, k: float) -> Interval:
        return Interval(self.lo + k, self.hi + k)

    def recip(self) -> Interval:
        """1/x; only meaningful when 0 is not in the interval."""
        if self.mig == 0.0:
            return Interval(-math.inf, math.inf)
        return Interval(1.0 / self.hi, 1.0 / self.lo)

    def __truediv__(self, o: Interval) -> Interval:
        return self * o.recip()

    def union(self, o: Interval) -> Interval:
        return Interval(min(self.lo, o.lo), max(self.hi, o.hi))

    def abs(self) -> Interval:
        return Interval(self.mig, self.mag)

    def square(self) -> Interval:
        a = self.abs()
        return Interval(a.lo * a.lo, a.hi * a.hi)

    def clamp(self, lo: float, hi: float) -> Interval:
        return Interval(min(max(self.lo, lo), hi), max(min(self.hi, hi), lo))

    def min_with(self, o: Interval) -> Interval:
        return Interval(min(self.lo, o.lo), min(self.hi, o.hi))

    def max_with(self, o: Interval) -> Interval:
        return Interval(max(self.lo, o.lo), max(self.hi, o.hi))


def monotone(fn: Callable[[float], float], iv: Interval, increasing: bool = True) -> Interval:
    """Image of a monotone function."""
    a, b = fn(iv.lo), fn(iv.hi)
    return Interval(a, b) if increasing else Interval(b, a)


def periodic_bound(iv: Interval, fn: Callable[[float], float], period: float, lo: float, hi: float) -> Interval:
    """Image of sin/cos-like functions: exact on short intervals, the full range otherwise."""
    if iv.width >= period / 2:
        return Interval(lo, hi)
    samples = [fn(iv.lo + iv.width * k / 16.0) for k in range(17)]
    return Interval(max(lo, min(samples) - 0.05), min(hi, max(samples) + 0.05))


def sum_of(ivs: list[Interval]) -> Interval:
    total = Interval.point(0.0)
    for iv in ivs:
        total = total + iv
    return total
