"""The dataset row: one typed record, its Arrow schema and its column documentation.

Each field declares its Arrow type and what it means (:func:`column`); ``ROW_SCHEMA``
and the dataset card's column tables are derived from these declarations, so the code,
the Parquet schema and the card cannot drift apart.  Field order is column order (JSONL
key order included: orjson writes dataclass fields in order).

JSONL and Parquet hold the same columns.  The first seven match the format the project
started from (id, kernel_name, category, python_source, cuda_forward, cuda_backward,
metadata) so older readers keep working.  ``test_vectors`` is described in
:mod:`.test_vectors`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

SCHEMA_VERSION = 4  # bump when a column is added, removed or changes meaning


def column(arrow_type: pa.DataType, doc: str, **kwargs):
    """A dataclass field that is a dataset column: its Arrow type and its meaning."""
    return field(metadata={"arrow": arrow_type, "doc": doc}, **kwargs)


def arrow_struct(cls) -> pa.StructType:
    return pa.struct([(f.name, f.metadata["arrow"]) for f in dataclasses.fields(cls)])


def field_docs(cls) -> dict[str, str]:
    return {f.name: f.metadata["doc"] for f in dataclasses.fields(cls)}


@dataclass
class Metadata:
    device: str = column(pa.string(), "Code-generation target of the CUDA text (`cuda`).")
    has_backward: bool = column(pa.bool_(), "Whether `cuda_backward` is non-empty.")
    forward_lines: int = column(pa.int32(), "Lines in `cuda_forward`.")
    backward_lines: int = column(pa.int32(), "Lines in `cuda_backward`.")
    generation_time_ms: float = column(
        pa.float64(),
        "Wall-clock time spent on this kernel (synthesis, codegen, checks); the only "
        "field besides `compile.time_ms` that differs between two runs with the same seed.",
    )
    seed: int = column(
        pa.int64(), "The run's root seed (`--seed`); with `category` and `index` it determines the kernel."
    )
    batch: int = column(
        pa.int64(), "Index of the batch the kernel was produced in (bookkeeping; does not affect the kernel)."
    )
    index: int = column(
        pa.int64(),
        "Per-category index of the kernel: the generator makes kernel `index` of `category` from the root seed.",
    )


@dataclass
class CompileInfo:
    arch: int = column(pa.int32(), "NVRTC target architecture the CUDA was compiled for (e.g. 86 = `sm_86`).")
    level: str = column(
        pa.string(),
        "How far NVRTC took the kernel: `frontend` (parsing, semantic analysis, template instantiation: "
        "Warp's options plus `--fdevice-syntax-only`) or `ptx` (Warp's full optimizing compile to machine code); "
        "`none` with `--fast`.",
    )
    nvrtc_version: str = column(
        pa.string(),
        "NVRTC version of the check (the one Warp bundles); the options are in `manifest.json` → `compiler`.",
    )
    status: str = column(pa.string(), "Compile result: `ok` (every published row compiled), `skipped` with `--fast`.")
    time_ms: float = column(pa.float64(), "Wall-clock NVRTC compile time attributed to this kernel.")


@dataclass
class GradientCheckInfo:
    status: str = column(
        pa.string(),
        "`verified`: Warp's tape gradient (what `cuda_backward` computes) agrees with finite differences of the "
        "forward at every probe; `forward_only`: the kernel ships no backward (its source says "
        "`enable_backward: False`, or it has a `while` loop); `unverified`: it ships one that could not be "
        "checked (`reason` says why); `unchecked`: made with `--fast`.",
    )
    reason: str = column(pa.string(), "Why the row is forward-only or unverified; empty when verified.")
    precision: str = column(
        pa.string(), "`float64` (the kernel's float64 twin) or `float32` (no twin); empty when no probe ran."
    )
    probes: int = column(
        pa.int32(), "Probes compared: single input elements and one random direction through all float inputs."
    )
    worst_rel_error: float = column(
        pa.float64(), "Largest relative difference between tape and finite differences over the probes."
    )


@dataclass
class ResourceInfo:
    """What NVIDIA's compiler reports when it builds the row's kernels to machine code
    (``cudagen produce --resources``; extract/resources.py)."""

    arch: int = column(pa.int32(), "Real architecture the kernels were built for (`sm_{arch}` CUBIN; the row's arch).")
    ptx_bytes: int = column(
        pa.int64(),
        "Bytes of PTX NVRTC emits for the row's translation unit (forward, backward, device functions). For a few "
        "large tile kernels NVVM numbers virtual registers differently from build to build, so this size can differ "
        "by a few bytes between two builds of the same unit (measured: up to 0.05%); ptxas's figures do not.",
    )
    forward_registers: int = column(pa.int32(), "Registers per thread of the forward (ptxas: `Used N registers`).")
    forward_spill_store_bytes: int = column(pa.int32(), "Bytes of register spill stores in the forward (ptxas).")
    forward_spill_load_bytes: int = column(pa.int32(), "Bytes of register spill loads in the forward (ptxas).")
    forward_shared_bytes: int = column(pa.int32(), "Static shared memory of the forward, in bytes (ptxas: `smem`).")
    forward_local_bytes: int = column(
        pa.int32(), "Local memory (stack frame) per thread of the forward, in bytes (ptxas: `stack frame`)."
    )
    backward_registers: int | None = column(
        pa.int32(), "Registers per thread of the backward; null when the row has no backward."
    )
    backward_spill_store_bytes: int | None = column(pa.int32(), "Bytes of register spill stores in the backward.")
    backward_spill_load_bytes: int | None = column(pa.int32(), "Bytes of register spill loads in the backward.")
    backward_shared_bytes: int | None = column(pa.int32(), "Static shared memory of the backward, in bytes.")
    backward_local_bytes: int | None = column(
        pa.int32(), "Local memory (stack frame) per thread of the backward, in bytes."
    )

    @property
    def spills(self) -> bool:
        """Whether either kernel spills registers to local memory."""
        return any(
            v
            for v in (
                self.forward_spill_store_bytes,
                self.forward_spill_load_bytes,
                self.backward_spill_store_bytes,
                self.backward_spill_load_bytes,
            )
        )


@dataclass
class Row:
    """One published pair."""

    id: str = column(
        pa.string(),
        "Stable row id, derived from the canonical Python hash: the same kernel gets the same id in every run.",
    )
    kernel_name: str = column(pa.string(), "Name of the `@wp.kernel` function.")
    category: str = column(pa.string(), "Generator category the kernel came from.")
    python_source: str = column(
        pa.string(),
        "The complete Python module: `import warp as wp`, any `@wp.func` / `@wp.struct` it uses, and the "
        "`@wp.kernel`. It runs as is.",
    )
    cuda_forward: str = column(pa.string(), 'The forward `extern "C" __global__` function, exactly as Warp emitted it.')
    cuda_backward: str = column(
        pa.string(),
        "The backward (adjoint, reverse-mode) `__global__` function Warp emitted; empty only where Warp emits none.",
    )
    metadata: Metadata = column(arrow_struct(Metadata), "Struct, fields below.")
    difficulty: str = column(
        pa.string(), "Curriculum tier derived from the kernel's structure: `basic`, `intermediate` or `advanced`."
    )
    features: list[str] = column(
        pa.list_(pa.string()),
        "Warp builtins and language features the kernel uses (e.g. `wp.atomic_add`, `while`, `wp.func`).",
    )
    device_functions: str = column(
        pa.string(),
        "CUDA of the `@wp.func` device functions the kernel calls (their forward and adjoint versions) as Warp "
        "emitted them; empty if none.",
    )
    preamble_hash: str = column(
        pa.string(),
        "Key into `manifest.json` → `preambles`: Warp's CUDA preamble for this Warp version. "
        "preamble + `device_functions` + `cuda_forward` + `cuda_backward` is a translation unit that compiles.",
    )
    arg_specs: str = column(
        pa.string(),
        'JSON list of the kernel\'s arguments in order: `{"name", "kind": "array"|"scalar", '
        '"dtype", "shape", "role": "in"|"out"|"inout", "domain": [lo, hi]}` (inputs are drawn '
        "from `domain`; `out` arrays start at zero).",
    )
    launch_dim: list[int] = column(pa.list_(pa.int32()), "The `dim` passed to `wp.launch` (or `wp.launch_tiled`).")
    block_dim: int | None = column(
        pa.int32(), "Block size of a tile kernel (launched with `wp.launch_tiled`); null for ordinary kernels."
    )
    test_vectors: str = column(
        pa.string(),
        "JSON string: inputs, outputs and gradients recorded on Warp's CPU backend at the row's size and at other "
        "sizes (format below); empty with `--fast`.",
    )
    python_hash: str = column(
        pa.string(),
        "Hash of the canonical Python source (formatting and comments normalised); exact duplicates share it.",
    )
    shape_hash: str = column(
        pa.string(),
        "16-hex-digit hash of the kernel's canonical shape (identifiers and numeric literals folded). "
        "The split is a function of it, so kernels that differ only in names or constants never straddle two splits.",
    )
    cuda_hash: str = column(pa.string(), "Hash of the emitted CUDA; used to drop kernels whose CUDA is identical.")
    compile: CompileInfo = column(arrow_struct(CompileInfo), "Struct, fields below.")
    warp_version: str = column(pa.string(), "Version of `warp-lang` that generated the CUDA.")
    generator_version: str = column(pa.string(), "Version of the cudagen-data generator that produced the kernel.")
    gradient_check: GradientCheckInfo = column(
        arrow_struct(GradientCheckInfo),
        'What was verified about the backward (struct, fields below; see "Verified backward").',
    )
    resources: ResourceInfo | None = column(
        arrow_struct(ResourceInfo),
        "What NVIDIA's compiler (NVRTC + ptxas, Warp's options, `-Xptxas -v`) reports building the kernels to "
        "machine code for the row's arch (struct, fields below); null unless made with `cudagen produce --resources`.",
        default=None,
    )
    size_note: str = column(
        pa.string(),
        "Why `test_vectors` lacks some of the other sizes (`fixed size: <reason>` for a kernel that runs at one "
        'size only, else each missing size\'s reason); empty when it holds all three (see "Several sizes per row").',
        default="",
    )
    unused_args: list[str] = column(
        pa.list_(pa.string()),
        "Arguments that reach no output: redrawing one alone (twice, fresh values) changed no output, or its name "
        'does not occur in the kernel\'s body (see "Inputs that matter"); empty for most rows.',
        default_factory=list,
    )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Row:
        return cls(**_row_fields(d))


def _row_fields(d: dict) -> dict:
    """``d``'s values with the row's struct columns as their dataclasses."""
    return {
        **d,
        "metadata": Metadata(**d["metadata"]),
        "compile": CompileInfo(**d["compile"]),
        "gradient_check": GradientCheckInfo(**d["gradient_check"]),
        "resources": ResourceInfo(**d["resources"]) if d.get("resources") else None,
    }


ROW_SCHEMA = pa.schema([(f.name, f.metadata["arrow"]) for f in dataclasses.fields(Row)])
COLUMNS = tuple(ROW_SCHEMA.names)
COLUMN_DOCS = field_docs(Row)
SUBFIELD_DOCS = {
    "metadata": field_docs(Metadata),
    "compile": field_docs(CompileInfo),
    "gradient_check": field_docs(GradientCheckInfo),
    "resources": field_docs(ResourceInfo),
}

# Fields that hold wall-clock timings: the only values that may differ between two runs
# with the same seed and version.
TIMING_FIELDS = (("metadata", "generation_time_ms"), ("compile", "time_ms"))


def strip_timing(row: dict) -> dict:
    """A copy of ``row`` with timing fields zeroed, for byte-for-byte comparisons."""
    out = dict(row)
    for outer, inner in TIMING_FIELDS:
        if isinstance(out.get(outer), dict):
            out[outer] = {**out[outer], inner: 0.0}
    return out


@dataclass
class ExtractMetadata:
    device: str
    has_backward: bool
    forward_lines: int
    backward_lines: int
    generation_time_ms: float
    source_line: int  # line of the kernel's `def` in the user's file


@dataclass
class ExtractCompile:
    arch: int
    status: str  # ok | failed | skipped
    time_ms: float
    log: str


@dataclass
class ExtractRecord:
    """What `cudagen extract` writes per kernel of a user's file: not a dataset row.

    It shares the row's CUDA columns but has no generator fields (category is ``user``;
    no difficulty, arg specs or test vectors: a user's kernel has no input domains),
    keeps the whole file as ``python_source``, the preamble inline, and the compile log.
    """

    id: str
    kernel_name: str
    category: str
    python_source: str
    cuda_forward: str
    cuda_backward: str
    metadata: ExtractMetadata
    device_functions: str
    preamble: str
    cuda_hash: str
    compile: ExtractCompile

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- the "real" configuration


@dataclass
class Provenance:
    """Where a mined kernel came from (`cudagen mine`), and how far mining took it."""

    path: str = column(
        pa.string(),
        "The kernel's file, relative to the mined folder's parent (`warp/tests/test_x.py`); never a machine path.",
    )
    line: int = column(pa.int32(), "Line of the kernel's first decorator in that file.")
    qualname: str = column(
        pa.string(),
        "Python's qualified name of the kernel function (`test_f.<locals>.k` for a kernel defined inside a function).",
    )
    overload: str = column(
        pa.string(), "Warp's type signature of this overload of a generic kernel; empty for ordinary kernels."
    )
    package: str = column(pa.string(), "Distribution the file belongs to (`warp-lang`), or empty for a user's tree.")
    package_version: str = column(pa.string(), "Version of that distribution.")
    license: str = column(pa.string(), "License of the file (Warp: `Apache-2.0`); empty where unknown.")
    executed: bool = column(pa.bool_(), "Whether the kernel ran on Warp's CPU backend with `test_vectors` recorded.")
    not_executed_reason: str = column(
        pa.string(), "Why not, when not (an argument type that cannot be made up, a run that crashed, ...)."
    )
    gradients_checked: bool = column(
        pa.bool_(),
        "Whether the recorded gradients were compared with finite differences (`gradient_check` says the verdict).",
    )
    order_dependent: list[str] = column(
        pa.list_(pa.string()),
        "Outputs and input gradients left out of `test_vectors` (`outputs.x`, `input_grads.y`) because they depend "
        "on thread order: a run with the threads reversed gave other values (a GPU may too).",
    )


@dataclass
class RealRow(Row):
    """One pair of the ``real`` configuration: a kernel mined from a real Warp program.

    Every column of :class:`Row`, meaning the same, with these differences in what they hold:
    ``category`` is ``real``; ``python_source`` is the kernel's own definition as written
    (it needs its file to run: ``provenance`` names it); ``id`` is the canonical Python hash,
    plus ``-`` and 8 hex digits of the overload's signature for an overload of a generic
    kernel; ``shape_hash`` is the definition's canonical shape (overloads share it);
    ``metadata.seed``, ``batch`` and ``index`` are 0; ``test_vectors`` is empty and
    ``launch_dim`` ``[]`` where the kernel was not executed; ``compile.level`` is ``none``
    (status ``skipped``) where no compile check ran; ``gradient_check.status`` is one of
    :data:`REAL_GRADIENT_STATUSES`.
    """

    # keyword-only: it follows Row's columns with defaults (resources)
    provenance: Provenance = column(
        arrow_struct(Provenance), "Where the kernel came from (struct, fields below).", kw_only=True
    )

    @classmethod
    def from_dict(cls, d: dict) -> RealRow:
        return cls(**{**_row_fields(d), "provenance": Provenance(**d["provenance"])})


# gradient_check.status of a real row.  Unlike a synthetic kernel (rejected: adjoint_mismatch),
# a mined kernel whose tape gradient disagrees with finite differences is kept, it is real
# code and its backward is what Warp really generates, with status "mismatch" and the Warp
# construct responsible in gradient_check.reason where known.  No real row is "unchecked"
# (mining has no --fast).
REAL_GRADIENT_STATUSES = ("verified", "forward_only", "unverified", "mismatch")

REAL_ROW_SCHEMA = pa.schema([(f.name, f.metadata["arrow"]) for f in dataclasses.fields(RealRow)])
REAL_COLUMNS = tuple(REAL_ROW_SCHEMA.names)
PROVENANCE_DOCS = field_docs(Provenance)


def is_real_row(row) -> bool:
    """Whether ``row`` (a row dict, as read from JSONL or Parquet, or a Row) is a mined
    kernel of the ``real`` configuration rather than a synthetic one: readers ask this
    instead of looking for a column."""
    if isinstance(row, Row):
        return isinstance(row, RealRow)
    return row.get("provenance") is not None


def row_schema(row) -> pa.Schema:
    """The Arrow schema ``row`` belongs to (:data:`REAL_ROW_SCHEMA` or :data:`ROW_SCHEMA`)."""
    return REAL_ROW_SCHEMA if is_real_row(row) else ROW_SCHEMA


def row_from_dict(d: dict) -> Row:
    """A row dict as its contract: a :class:`RealRow` or a :class:`Row` (TypeError or
    KeyError where its columns do not fit)."""
    return RealRow.from_dict(d) if is_real_row(d) else Row.from_dict(d)


def as_row(row: Row | Mapping) -> Row:
    """``row`` as its contract: a :class:`Row` as it is, a row dict through
    :func:`row_from_dict`.  For the public entry points that take a row from a user, who
    may hold it as a dict (a row of the published dataset loaded with `datasets`:
    eval.score, Scorer.score_many): they convert once on entry and read attributes after
    that.  Everything inside the package takes a Row."""
    return row if isinstance(row, Row) else row_from_dict(row)


ALL_COLUMNS = frozenset(REAL_COLUMNS)


def column_of(record: Mapping | Row, name: str, default=None):
    """Column ``name`` of a record that is not (yet) read as a row: one that may not fit
    the contract (validate checks it first, a report names it by id and category).  Every
    other reader converts the record (:func:`row_from_dict`) and reads attributes.
    ``name`` must be a column of the contract, so a renamed column fails here."""
    if name not in ALL_COLUMNS:
        raise KeyError(f"{name!r} is not a column of the row contract")
    if isinstance(record, Row):
        return getattr(record, name, default)
    return record.get(name, default) if isinstance(record, Mapping) else default
