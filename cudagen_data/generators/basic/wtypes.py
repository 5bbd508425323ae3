"""The type system of the synthesis core: Warp scalar, vector, matrix and quaternion types.

Warp does no implicit promotion (``float64 * 2.0`` and ``uint32 + 1`` are compile errors),
so every expression carries its exact :class:`WType`, and literals are written in the form
Warp accepts for that type (``2.0`` is float32, ``2`` is int32, anything else is wrapped:
``wp.float64(2.0)``, ``wp.uint32(2)``).
"""

from __future__ import annotations

from dataclasses import dataclass

FLOAT_SCALARS = ("float16", "float32", "float64")
INT_SCALARS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")

# Inclusive value range of each integer scalar (used to keep integer intervals in range).
INT_LIMITS = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}

_VEC_SUFFIX = {"float32": "", "float64": "d", "int32": "i", "float16": "h"}


@dataclass(frozen=True)
class WType:
    """``scalar`` is the component type; ``shape`` is () for scalars, (n,) for vectors,
    (rows, cols) for matrices; ``quat`` marks a quaternion (shape (4,))."""

    scalar: str
    shape: tuple[int, ...] = ()
    quat: bool = False

    # --- classification -------------------------------------------------------------
    @property
    def is_scalar(self) -> bool:
        return not self.shape

    @property
    def is_vector(self) -> bool:
        return len(self.shape) == 1 and not self.quat

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2

    @property
    def is_float(self) -> bool:
        return self.scalar in FLOAT_SCALARS

    @property
    def is_int(self) -> bool:
        return self.scalar in INT_SCALARS

    @property
    def is_bool(self) -> bool:
        return self.scalar == "bool"

    @property
    def is_unsigned(self) -> bool:
        return self.scalar.startswith("uint")

    @property
    def ncomp(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def length(self) -> int:
        """Vector/quaternion length (number of components)."""
        return self.shape[0]

    def component(self) -> WType:
        return WType(self.scalar)

    def with_scalar(self, scalar: str) -> WType:
        return WType(scalar, self.shape, self.quat)

    # --- names ----------------------------------------------------------------------
    @property
    def spec_dtype(self) -> str:
        """The dtype name used in :class:`~cudagen_data.spec.ArgSpec` (``vec3``, ``mat33d``...)."""
        if self.is_scalar:
            return self.scalar
        if self.quat:
            return "quat" if self.scalar == "float32" else "quatd"
        if self.is_vector:
            return f"vec{self.length}{_VEC_SUFFIX[self.scalar]}"
        r, c = self.shape
        return f"mat{r}{c}{_VEC_SUFFIX[self.scalar]}"

    @property
    def ctor(self) -> str:
        """Constructor call name in kernel source (``wp.vec3``, ``wp.float64``...)."""
        if self.is_scalar:
            return f"wp.{self.scalar}"
        return f"wp.{self.spec_dtype}"

    def annotation(self, short: bool) -> str:
        """How the type is written in an annotation; ``short`` picks ``float``/``int`` for
        float32/int32 the way much hand-written Warp code does."""
        if short and self.scalar == "float32" and self.is_scalar:
            return "float"
        if short and self.scalar == "int32" and self.is_scalar:
            return "int"
        return self.ctor

    @property
    def storable(self) -> bool:
        """Whether kernel arrays of this type are allowed in a spec."""
        if self.is_scalar:
            return self.scalar != "bool"
        if self.quat:
            return self.scalar in ("float32", "float64")
        if self.is_vector:
            return self.scalar in ("float32", "float64", "int32") and 2 <= self.length <= 4
        return self.scalar in ("float32", "float64") and self.shape[0] == self.shape[1]

    def __str__(self) -> str:  # for error messages
        return self.spec_dtype


F32 = WType("float32")
F64 = WType("float64")
F16 = WType("float16")
I32 = WType("int32")
U32 = WType("uint32")
I64 = WType("int64")
I16 = WType("int16")
U16 = WType("uint16")
I8 = WType("int8")
U8 = WType("uint8")
BOOL = WType("bool")


def vec(n: int, scalar: str = "float32") -> WType:
    return WType(scalar, (n,))


def mat(n: int, scalar: str = "float32") -> WType:
    return WType(scalar, (n, n))


def quat(scalar: str = "float32") -> WType:
    return WType(scalar, (4,), quat=True)


def format_float(value: float, digits: int = 4) -> str:
    """A short float literal: ``0.25``, ``3.0``, ``1.5e-05``."""
    text = f"{value:.{digits}g}"
    if "e" in text:
        mant, exp = text.split("e")
        text = f"{float(mant)}e{int(exp)}"
    elif "." not in text and "inf" not in text and "nan" not in text:
        text += ".0"
    return text


def literal_value(t: WType, value: float) -> float:
    """The value the literal text of ``value`` actually denotes (after short formatting)."""
    if t.is_float:
        return float(format_float(float(value)))
    if t.is_int:
        return float(int(value))
    return float(bool(value))


def literal(t: WType, value: float) -> str:
    """Source text of a scalar constant of type ``t`` that Warp types as exactly ``t``."""
    if t.is_float:
        text = format_float(float(value))
        return text if t.scalar == "float32" else f"{t.ctor}({text})"
    if t.is_int:
        text = str(int(value))
        return text if t.scalar == "int32" else f"{t.ctor}({text})"
    return "True" if value else "False"
