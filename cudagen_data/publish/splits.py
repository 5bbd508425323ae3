"""Train/validation/test assignment that cannot leak.

A row's split is a pure function of its ``shape_hash``: the hash of the kernel's
canonical *shape* (identifiers and numeric literals folded).  Two kernels that differ
only in names or constants have the same shape hash and therefore always land in the
same split, so a model is never tested on a renamed copy of a training kernel.

The shape hash is re-hashed with a fixed salt (xxh3-64, a frozen spec) before it is
mapped to [0, 2**64): split membership then does not depend on how the shape hash
itself was produced, and stays the same across versions and machines.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

import xxhash

# train / validation / test: 1,000 pairs give ~50 test and ~50 validation rows (#23; was
# 0.98 / 0.01 / 0.01, which left 7 test rows). The one definition: produce, mine and the CLI read it.
DEFAULT_RATIOS = (0.9, 0.05, 0.05)

_SALT = b"cudagen-data/split/v1:"
_SHAPE_HASH_RE = re.compile(r"[0-9a-fA-F]{16}")
_SPACE = 1 << 64


def validate_ratios(ratios) -> tuple[float, float, float]:
    """Return ``ratios`` as three floats, or raise ValueError saying what is wrong.

    Three finite, non-negative numbers (train, validation, test) summing to 1
    (within 1e-6).  A zero ratio leaves that split empty.
    """
    try:
        values = tuple(float(r) for r in ratios)
    except (TypeError, ValueError):
        raise ValueError(f"split ratios must be three numbers (train, validation, test), got {ratios!r}") from None
    if len(values) != 3:
        raise ValueError(f"split ratios must be three numbers (train, validation, test), got {len(values)}: {ratios!r}")
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"split ratios must be finite and >= 0, got {ratios!r}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"split ratios must sum to 1, got {ratios!r} (sum {sum(values):g})")
    return values


@lru_cache(maxsize=64)
def _thresholds(ratios: tuple[float, float, float]) -> tuple[int, int]:
    # Integer cut points on [0, 2**64): exact, so a zero ratio gives an empty split.
    r_train, r_val, r_test = (Fraction(r) for r in ratios)
    total = r_train + r_val + r_test  # ~1; normalise away float rounding
    cut_train = int(r_train / total * _SPACE)
    cut_val = _SPACE if r_test == 0 else int((r_train + r_val) / total * _SPACE)
    return cut_train, cut_val


def split_point(shape_hash: str) -> int:
    """The position of ``shape_hash`` on [0, 2**64) that decides its split."""
    if not isinstance(shape_hash, str) or not _SHAPE_HASH_RE.fullmatch(shape_hash):
        raise ValueError(f"shape_hash must be 16 hex digits, got {shape_hash!r}")
    return xxhash.xxh3_64_intdigest(_SALT + shape_hash.lower().encode("ascii"))


def assign_split(shape_hash: str, ratios=DEFAULT_RATIOS) -> str:
    """The split ("train", "validation" or "test") of a row with this ``shape_hash``.

    Deterministic: the same hash and ratios give the same split on any machine.
    Raises ValueError for a malformed hash or invalid ratios.
    """
    cut_train, cut_val = _thresholds(validate_ratios(ratios))
    point = split_point(shape_hash)
    if point < cut_train:
        return "train"
    if point < cut_val:
        return "validation"
    return "test"
