"""Stage 1: does a candidate's CUDA have the shape of the kernel the row asks for?

A candidate (one ``cuda_forward`` text, optionally one ``cuda_backward``) passes when,
read as tokens (comments gone, string literals opaque; cuda_parse.py):

- it defines exactly one ``__global__`` function: ``extern "C" __global__ void`` with the
  row's kernel name and the row's parameter types, in order (names may differ);
- everything else at namespace scope is a device function definition (``__device__``,
  Warp's ``CUDA_CALLABLE``, ``__forceinline__`` ...): no host code (host-only functions,
  ``main``, CUDA runtime / driver API calls, ``<<<...>>>`` launches), no variables,
  types or namespaces at namespace scope (``__device__``/``__constant__``/``__managed__``
  globals are state that outlives a launch);
- no state that outlives a launch inside functions either: no ``static`` locals (except
  ``static __shared__`` and ``static constexpr``), no device heap (``malloc``, ``new``);
- no inline assembly, no clock or timer reads (``clock``, ``clock64``, ``globaltimer``,
  ``%clock`` ...), no preprocessor directives other than ``#pragma unroll``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..canonical import text_hash
from ..contracts.row import Row
from .cuda_parse import Function, ParseError, Token, function, tokenize, top_level_items

TIMERS = frozenset(
    {
        "clock",
        "clock64",
        "__clock",
        "__clock64",
        "globaltimer",
        "__globaltimer",
        "__builtin_readcyclecounter",
        "__rdtsc",
        "__rdtscp",
        "__nanosleep",
        "cudaEventRecord",
        "cudaEventElapsedTime",
    }
)
ASM = frozenset({"asm", "__asm", "__asm__"})
HEAP = frozenset({"malloc", "free", "new", "delete", "__nv_aligned_device_malloc", "cudaMalloc"})
DEVICE_QUALIFIERS = frozenset({"__device__", "CUDA_CALLABLE", "CUDA_CALLABLE_DEVICE"})
_TIMER_TEXT = re.compile(r"%(clock|clock64|globaltimer|globaltimer_lo|globaltimer_hi)\b")
_HOST_API = re.compile(r"^(cuda|cu|nvrtc|cublas|cudnn)[A-Z]\w*$")
_PRAGMA_OK = re.compile(r"#\s*pragma\s+(unroll(\s+\d+)?|nounroll)\s*$")


class StructureError(Exception):
    """Why a candidate fails the structure stage (one line)."""


@dataclass(frozen=True)
class KernelShape:
    """What a row's kernel looks like: its name and parameter types."""

    name: str
    param_types: tuple[str, ...]

    def describe(self) -> str:
        return f'extern "C" __global__ void {self.name}({", ".join(self.param_types)})'


@functools.lru_cache(maxsize=256)
def kernel_shape(cuda_text: str) -> KernelShape:
    """The one ``__global__`` function of a (recorded) kernel text.  Cached (a frozen result
    of the text alone): negatives read each row's shape for its own candidates and again for
    the row before it, whose ``foreign_kernel`` candidate copies it; tokenizing was ~40% of
    making a row's candidates."""
    kernels = [f for f in _functions(cuda_text) if f.is_kernel]
    if len(kernels) != 1:
        raise StructureError(f"the recorded text defines {len(kernels)} __global__ functions, expected 1")
    return KernelShape(kernels[0].name, tuple(kernels[0].param_types()))


def check_candidate(text: str, expected: KernelShape, part: str) -> None:
    """Raise StructureError (one line, prefixed with ``part``) unless ``text`` passes."""
    try:
        _check(text, expected)
    except ParseError as exc:
        raise StructureError(f"{part}: cannot be read as CUDA: {exc}") from None
    except StructureError as exc:
        raise StructureError(f"{part}: {exc}") from None


def _functions(text: str) -> list[Function]:
    try:
        items = top_level_items(tokenize(text))
    except ParseError as exc:
        raise StructureError(f"cannot be read as CUDA: {exc}") from None
    return [function(i) for i in items if i.is_function]


def _check(text: str, expected: KernelShape) -> None:
    tokens = tokenize(text)
    _check_tokens(tokens)
    items = top_level_items(tokens)
    kernels = []
    for item in items:
        if not item.is_function:
            if all(t.text == ";" for t in item.head):
                continue
            words = " ".join(t.text for t in item.head[:6])
            raise StructureError(
                f"line {item.line}: only function definitions may stand at namespace scope (found `{words} ...`): "
                "globals outlive a launch"
            )
        fn = function(item)
        if not fn.name:
            raise StructureError(f"line {fn.line}: a function definition without a name")
        if fn.is_kernel:
            kernels.append(fn)
        else:
            _check_device_function(fn)
        _check_body(fn)
    if not kernels:
        raise StructureError(f"no __global__ kernel; expected {expected.describe()}")
    if len(kernels) > 1:
        names = ", ".join(k.name for k in kernels)
        raise StructureError(f"defines {len(kernels)} __global__ kernels ({names}); expected exactly {expected.name}")
    k = kernels[0]
    if k.name != expected.name:
        raise StructureError(f"line {k.line}: kernel is named {k.name}, expected {expected.name}")
    if not k.extern_c:
        raise StructureError(f'line {k.line}: kernel {k.name} is not extern "C"')
    if "void" not in k.qualifiers:
        raise StructureError(f"line {k.line}: kernel {k.name} must return void")
    got = tuple(k.param_types())
    if got != expected.param_types:
        if len(got) != len(expected.param_types):
            raise StructureError(
                f"line {k.line}: kernel takes {len(got)} parameters, the row's kernel {len(expected.param_types)}"
            )
        i = next(i for i, (a, b) in enumerate(zip(got, expected.param_types, strict=False)) if a != b)
        raise StructureError(
            f"line {k.line}: parameter {i + 1} is `{got[i]}`, the row's kernel has `{expected.param_types[i]}`"
        )


def _check_tokens(tokens: list[Token]) -> None:
    for t in tokens:
        if t.kind == "pp":
            if not _PRAGMA_OK.match(" ".join(t.text.split())):
                raise StructureError(
                    f"line {t.line}: preprocessor directive `{t.text.strip()[:40]}` (only #pragma unroll is allowed)"
                )
        elif t.kind == "ident":
            if t.text in ASM:
                raise StructureError(f"line {t.line}: inline assembly (`{t.text}`)")
            if t.text in TIMERS:
                raise StructureError(f"line {t.line}: reads a clock or timer (`{t.text}`)")
            if t.text in HEAP:
                raise StructureError(f"line {t.line}: device heap (`{t.text}`): an allocation outlives the launch")
            if t.text == "main" or _HOST_API.match(t.text):
                raise StructureError(f"line {t.line}: host code (`{t.text}`)")
            if t.text in ("__managed__", "__constant__"):
                raise StructureError(f"line {t.line}: `{t.text}` memory outlives a launch")
        elif t.kind == "string" and _TIMER_TEXT.search(t.text):
            raise StructureError(
                f"line {t.line}: names a timer register in a string ({_TIMER_TEXT.search(t.text).group(0)})"
            )
        elif t.kind == "punct" and t.text == "<<<":
            raise StructureError(f"line {t.line}: kernel launch syntax `<<<...>>>` (host code or dynamic parallelism)")


def _check_device_function(fn: Function) -> None:
    q = set(fn.qualifiers)
    if "__host__" in q and not q & DEVICE_QUALIFIERS:
        raise StructureError(f"line {fn.line}: {fn.name} is a __host__ function (host code)")
    if not q & DEVICE_QUALIFIERS:
        raise StructureError(f"line {fn.line}: {fn.name} has no __device__ qualifier (host code)")
    if "extern" in q:
        raise StructureError(f'line {fn.line}: {fn.name}: only the kernel may be extern "C"')


def _check_body(fn: Function) -> None:
    body = fn.body
    for i, t in enumerate(body):
        if t.kind != "ident":
            continue
        nxt = body[i + 1].text if i + 1 < len(body) else ""
        if t.text == "static" and nxt not in ("__shared__", "constexpr"):
            raise StructureError(f"line {t.line}: a static local in {fn.name} outlives the launch")
        if t.text == "extern" and nxt != "__shared__":
            raise StructureError(f"line {t.line}: an extern declaration in {fn.name}")
        if t.text in ("__device__", "__global__"):
            raise StructureError(f"line {t.line}: `{t.text}` inside {fn.name}")


def row_key(row: Row) -> str:
    """What the judge's per-row caches are keyed by: the row's id AND what it recorded.

    A row's id is the hash of its canonical Python (names renamed), so two rows whose
    kernels differ only in naming share an id while their CUDA (whose kernel name carries
    Warp's hash of the exact source and options) differs: keyed by id alone, one row's
    kernel name and signature would be expected of the other's candidates."""
    parts = (row.python_source, row.cuda_forward, row.cuda_backward or "", row.device_functions or "",
             str(row.block_dim), str(row.compile.arch), row.preamble_hash)  # fmt: skip
    return f"{row.id}:{text_hash(chr(0).join(parts))}"
