"""Re-check dataset rows from scratch: schema, hashes, CUDA structure, NVRTC, test vectors.

Used by ``cudagen validate``.  Nothing is trusted from the producer: every row is
recompiled (preamble from the manifest + device functions + forward + backward) and
re-run on the CPU with its recorded inputs, and the outputs and input gradients are
compared with the recorded ones.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from . import canonical
from .contracts.manifest import CONFIGS, MANIFEST_FILE, Manifest, ManifestError
from .contracts.read import recorded_run, row_to_spec
from .contracts.row import (
    COLUMNS,
    REAL_COLUMNS,
    REAL_GRADIENT_STATUSES,
    REAL_ROW_SCHEMA,
    ROW_SCHEMA,
    Row,
    column_of,
    is_real_row,
    row_from_dict,
)
from .contracts.test_vectors import TestVectors
from .dataset import store
from .dataset.read import UNREADABLE, iter_rows_from
from .execution import SizedRun, execute_specs, forward_only_reason
from .extract import ExtractedKernel, compile_units, extract_source
from .extract.levels import COMPILE_LEVELS
from .extract.resources import ResourceError, measure_unit
from .gradcheck import STATUSES, Point, check_gradients, check_own_build, summary_reason
from .mine.recheck import rerun_rows
from .pipeline.pool import WorkerLost, make_executor, run_isolated
from .spec import KernelSpec

CHUNK = 100  # rows compiled and executed together
_GLOBAL_RE = re.compile(r'extern "C" [^\n]*__global__ void [^\n]*?(\w+)_cuda_kernel_(forward|backward)\(')


@dataclass
class RowFailure:
    where: str  # "file:row"
    row_id: str
    category: str
    check: str
    message: str


@dataclass
class ValidationReport:
    rows: int = 0
    by_category: Counter = field(default_factory=Counter)
    failures: list[RowFailure] = field(default_factory=list)
    file_problems: list[str] = field(default_factory=list)
    checks_run: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.file_problems and self.rows > 0

    def merge(self, other: ValidationReport) -> None:
        self.rows += other.rows
        self.by_category.update(other.by_category)
        self.failures += other.failures
        self.file_problems += other.file_problems
        self.checks_run.update(other.checks_run)


def gradcheck_point(spec: KernelSpec, vectors: TestVectors):
    """The gradient check's point for a row: every recorded size."""
    return Point.of_vectors(spec, vectors)


def check_schema(row: dict) -> list[str]:
    """A record's columns against the row contract's schema (the record as read from its
    file: the one check that reads a row before it is a :class:`Row`)."""
    problems = []
    # A mined row (cudagen mine) has the "real" configuration's columns.
    columns, schema = (REAL_COLUMNS, REAL_ROW_SCHEMA) if is_real_row(row) else (COLUMNS, ROW_SCHEMA)
    missing = [c for c in columns if c not in row]
    extra = [c for c in row if c not in columns]
    if missing:
        problems.append(f"missing columns: {', '.join(missing)}")
    if extra:
        problems.append(f"unknown columns: {', '.join(extra)}")
    if not problems:
        try:
            pa.Table.from_pylist([row], schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            problems.append(f"does not fit the schema: {str(exc).splitlines()[0]}")
    return problems


def check_hashes(row: Row) -> list[str]:
    problems = []
    src = row.python_source
    python_hash, shape_hash = canonical.canonical_hashes(src)  # one parse for both
    if python_hash != row.python_hash:
        problems.append("python_hash does not match python_source")
    real = is_real_row(row)  # a mined kernel: its id adds the overload; its shape is its def's
    if row.id != row.python_hash and not (real and row.id.startswith(row.python_hash + "-")):
        problems.append("id is not the python hash")
    if (canonical.kernel_shape_hash(src) if real else shape_hash) != row.shape_hash:
        problems.append("shape_hash does not match python_source")
    if canonical.cuda_hash(row.cuda_forward, row.cuda_backward) != row.cuda_hash:
        problems.append("cuda_hash does not match cuda_forward + cuda_backward")
    return problems


def check_cuda_structure(row: Row) -> list[str]:
    problems = []
    for column, kind, text, lines in (
        ("cuda_forward", "forward", row.cuda_forward, row.metadata.forward_lines),
        ("cuda_backward", "backward", row.cuda_backward, row.metadata.backward_lines),
    ):
        if kind == "backward" and not text:
            if row.metadata.has_backward:
                problems.append("has_backward is true but cuda_backward is empty")
            continue
        m = _GLOBAL_RE.search(text)
        if not m or m.group(2) != kind:
            problems.append(f"{column} is not a Warp {kind} __global__ function")
        if text.count("{") != text.count("}"):
            problems.append(f"{column} has unbalanced braces")
        if lines != text.count("\n"):
            problems.append(f"metadata.{kind}_lines does not match {column}")
    return problems


# NVVM numbers the virtual registers of some large tile kernels differently from one build
# of the same unit to the next (2 of 1,000 rows: 21-76 bytes of ~160-210 KB, 0.01-0.05%);
# ptxas's figures for them do not move.  So the PTX size is checked to this fraction.
PTX_BYTES_TOLERANCE = 0.005


def check_resources(row: Row, preamble: str) -> list[str]:
    """The row's ``resources`` against a fresh build of its translation unit for the arch
    it records: ptxas's figures exactly (any difference is a wrong or edited figure), the
    PTX size to ``PTX_BYTES_TOLERANCE``."""
    recorded = row.resources
    unit = "\n".join((preamble, row.device_functions, row.cuda_forward, row.cuda_backward))
    try:
        fresh = dataclasses.asdict(measure_unit(unit, row.cuda_forward, row.cuda_backward, arch=recorded.arch))
    except (ResourceError, ValueError) as exc:
        return [f"not rebuilt: {exc}"]
    return [
        f"resources.{name} is {getattr(recorded, name)!r}, the compiler reports {value!r}"
        for name, value in fresh.items()
        if getattr(recorded, name) != value
        and not (name == "ptx_bytes" and abs(recorded.ptx_bytes - value) <= PTX_BYTES_TOLERANCE * value)
    ]


def max_error_beyond(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> float | None:
    """None if close; else the worst absolute error (inf for a shape or finiteness mismatch)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape or not np.all(np.isfinite(actual)):
        return float("inf")
    scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
    err = np.abs(actual - expected)
    if np.all(err <= atol * scale + rtol * np.abs(expected)):
        return None
    return float(np.max(err))


def validate_rows(
    located_rows: Iterable[tuple[str, dict]],
    preambles: dict[str, str],
    report: ValidationReport,
    *,
    arch: int | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    progress=None,
    workers: int = 0,
    total: int | None = None,
) -> None:
    """Check rows into ``report``, in chunks that are compiled and executed together.

    ``workers`` processes check chunks side by side (0: all in this process), with the
    producer's worker pool; results are merged in row order, so the report does not
    depend on the number of workers.  A row that crashes a worker is found by bisection
    and fails alone.  ``total`` (rows expected) sizes the chunks so every worker has work.
    """
    executor = make_executor(workers)
    window = max(1, 2 * executor.workers)
    pending: deque[tuple[list, dict, Future]] = deque()

    def submit(chunk: list) -> None:
        hashes = {column_of(record, "preamble_hash") for _, record in chunk}
        needed = {h: preambles[h] for h in hashes if h in preambles}
        pending.append((chunk, needed, executor.submit(check_rows, needed, arch, rtol, atol, chunk)))

    def take() -> None:
        nonlocal executor
        chunk, needed, future = pending.popleft()
        try:
            parts = future.result()
        except WorkerLost:
            # A row crashed a worker (every future of the pool is lost): find it alone, then
            # go on with a new pool.
            executor.close(kill=True)
            parts = run_isolated(check_rows, chunk, _crashed, needed, arch, rtol, atol)
            executor = make_executor(workers)
            for _ in range(len(pending)):
                submit(pending.popleft()[0])
        for part in parts:
            report.merge(part)
        if progress is not None:
            progress.update(len(chunk))

    try:
        for chunk in _chunks(located_rows, chunk_sizes(total, executor.workers)):
            submit(chunk)
            while len(pending) >= window:
                take()
        while pending:
            take()
    finally:
        executor.close(kill=True)


def check_gradient_declaration(row: Row) -> list[str]:
    """A row's gradient_check agrees with its backward: forward-only rows ship none and say
    so in their source; every other row ships one."""
    status = row.gradient_check.status
    if is_real_row(row):  # a mined kernel: its module (not its def) may turn the backward off
        if (status == "forward_only") != (not row.cuda_backward) or status not in REAL_GRADIENT_STATUSES:
            return [
                f"gradient_check.status {status!r} does not fit a mined kernel "
                f"with{'out' if not row.cuda_backward else ''} a backward"
            ]
        return []
    declared = forward_only_reason(row.python_source)
    if status not in STATUSES or status == "mismatch":
        return [f"gradient_check.status {status!r} is not a row status"]
    if status == "forward_only" and not declared:
        return ["forward-only, but the source declares no enable_backward=False (nor has a while loop)"]
    if declared and status != "forward_only":
        return [f"the source is forward-only ({declared}), but gradient_check.status is {status!r}"]
    if status != "forward_only" and not row.cuda_backward:
        return ["no cuda_backward, but the row is not forward-only"]
    if "enable_backward" in (declared or "") and row.cuda_backward:
        return ["declared forward-only, but cuda_backward is not empty"]
    if status == "verified" and row.test_vectors:
        try:
            vacuous = TestVectors.from_json(row.test_vectors).input_grads_all_zero()
        except (KeyError, ValueError, TypeError, orjson.JSONDecodeError):
            return []  # unreadable vectors are reported by the re-run
        if vacuous:
            return ["verified, but its input gradients are zero everywhere on every size (a vacuous backward)"]
    return []


FIRST_CHUNK = 10  # the first chunks are small: the progress bar moves within seconds


def chunk_sizes(total: int | None, workers: int) -> Iterator[int]:
    """Rows per chunk: a few small ones first, then CHUNK, or less when ``total`` rows would
    leave a worker idle."""
    size = CHUNK if total is None else max(FIRST_CHUNK, min(CHUNK, -(-total // (3 * max(1, workers)))))
    for _ in range(max(1, workers)):
        yield min(FIRST_CHUNK, size)
    while True:
        yield size


def _chunks(located_rows: Iterable[tuple[str, dict]], sizes: Iterator[int]) -> Iterator[list]:
    chunk: list = []
    size = next(sizes)
    for item in located_rows:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk, size = [], next(sizes)
    if chunk:
        yield chunk


def _crashed(item: tuple[str, dict]) -> ValidationReport:
    where, record = item
    part = ValidationReport(rows=1)
    part.by_category[column_of(record, "category", "?")] += 1
    part.failures.append(_failure(where, record, "crash", "the worker process died checking this row alone"))
    return part


def _failure(where: str, record: dict, check: str, message: str) -> RowFailure:
    """A failure of the record at ``where``, named by the id and category it says it has."""
    return RowFailure(where, str(column_of(record, "id", "?")), str(column_of(record, "category", "?")), check, message)


class _ChunkCheck:
    """A worker's check of one chunk: its (location, record) pairs and one report per record."""

    def __init__(self, chunk: list[tuple[str, dict]]):
        self.chunk = chunk
        self.reports = [ValidationReport(rows=1) for _ in chunk]

    def ran(self, i: int, check: str) -> None:
        self.reports[i].checks_run[check] += 1

    def fail(self, i: int, check: str, message: str) -> None:
        where, record = self.chunk[i]
        self.reports[i].failures.append(_failure(where, record, check, message))


@dataclass
class _Runnable:
    """A row that passed the checks of its text: it is compiled and run again."""

    i: int  # its index in the chunk
    row: Row
    preamble: str
    level: str  # the compile level it records


def check_rows(
    preambles: dict[str, str], arch: int | None, rtol: float, atol: float, chunk: list[tuple[str, dict]]
) -> list[ValidationReport]:
    """Check a chunk of (location, record); one report per row, in order (what a worker runs)."""
    c = _ChunkCheck(chunk)
    runnable = [r for i in range(len(chunk)) if (r := _read_and_check_text(c, i, preambles)) is not None]
    _recompile(c, runnable, arch)
    # a row with a resources column: rebuilt to machine code, ptxas must report the same figures
    for r in runnable:
        if r.row.resources is not None:
            c.ran(r.i, "resources")
            for p in check_resources(r.row, r.preamble):
                c.fail(r.i, "resources", p)
    with_vectors = [r for r in runnable if r.row.test_vectors]
    real = [r for r in with_vectors if is_real_row(r.row)]
    if real:
        _rerun_real(c, real, rtol, atol)
    _rerun_synthetic(c, [r for r in with_vectors if not is_real_row(r.row)], rtol, atol)
    return c.reports


def _read_and_check_text(c: _ChunkCheck, i: int, preambles: dict[str, str]) -> _Runnable | None:
    """Record ``i`` against the schema, then, read as a row, its hashes, CUDA structure,
    compile level, preamble and gradient declaration; the row if it can be compiled and run."""
    record = c.chunk[i][1]
    c.reports[i].by_category[column_of(record, "category", "?")] += 1
    if not isinstance(record, dict) or UNREADABLE in record:
        c.fail(i, "schema", "not a JSON line" if isinstance(record, dict) else "not a JSON object")
        return None
    problems = check_schema(record)
    c.ran(i, "schema")
    if not problems:
        try:
            row = row_from_dict(record)
        except (TypeError, KeyError) as exc:  # a struct column with fields missing or unknown
            problems = [f"does not fit the row contract ({type(exc).__name__}: {exc})"]
    if problems:
        for p in problems:
            c.fail(i, "schema", p)
        return None
    for check, fn in (("hashes", check_hashes), ("cuda_structure", check_cuda_structure)):
        c.ran(i, check)
        for p in fn(row):
            c.fail(i, check, p)
    level = row.compile.level or "ptx"  # rows made before levels: the full compile
    if row.compile.status == "ok" and level not in COMPILE_LEVELS:
        c.fail(i, "nvrtc", f"unknown compile level {level!r}")
        return None
    preamble = preambles.get(row.preamble_hash)
    if preamble is None:
        # A lone file: regenerate the preamble from the source itself.
        rep = extract_source(row.python_source, block_dim=row.block_dim or 256)
        preamble = rep.kernels[0].preamble if rep.kernels else None
        if preamble is None or canonical.text_hash(preamble) != row.preamble_hash:
            c.fail(i, "preamble", f"preamble {row.preamble_hash} not in the manifest and not reproducible")
            return None
    c.ran(i, "gradient_declaration")
    for p in check_gradient_declaration(row):
        c.fail(i, "gradient_check", p)
    return _Runnable(i, row, preamble, level)


def _recompile(c: _ChunkCheck, runnable: list[_Runnable], arch: int | None) -> None:
    """NVRTC again, each row at its own level and arch (a row skipped by --fast is not)."""
    groups: dict[tuple[int, str], list[_Runnable]] = {}
    for r in runnable:
        if r.row.compile.status == "ok":
            groups.setdefault((arch or r.row.compile.arch, r.level), []).append(r)
    for (group_arch, level), members in groups.items():
        kernels = [
            ExtractedKernel(
                r.row.kernel_name,
                "",
                0,
                r.preamble,
                r.row.device_functions,
                r.row.cuda_forward,
                r.row.cuda_backward,
                r.row.block_dim or 256,
            )
            for r in members
        ]
        for r, res in zip(members, compile_units(kernels, arch=group_arch, level=level), strict=False):
            c.ran(r.i, f"nvrtc_{level}")
            if not res.ok:
                c.fail(r.i, "nvrtc", (res.log.splitlines() or ["compile failed"])[0])


@dataclass
class _Rerun:
    """A synthetic row's recorded run, ready to run again: every recorded size (the row's
    own first, the others on the same build: execute_specs' ``more``)."""

    i: int
    spec: KernelSpec
    given: tuple[dict, dict]  # the row's own size: (inputs, output gradients)
    recorded: list[tuple[str, dict, dict]]  # each size: (label, outputs, input gradients)
    more: list[SizedRun]
    point: Point  # where the gradient check probes
    wants_check: bool  # the row says its backward is verified


def _planned_rerun(c: _ChunkCheck, r: _Runnable) -> _Rerun | None:
    try:
        vectors = TestVectors.from_json(r.row.test_vectors)
        spec = row_to_spec(r.row)
        sets = [(v, v.decoded()) for v in vectors.sets()]
        sized = [SizedRun(v.size, v.sized_spec(spec), (d["inputs"], d["output_grads"])) for v, d in sets[1:]]
        point = gradcheck_point(spec, vectors)
    except (KeyError, ValueError, TypeError, orjson.JSONDecodeError) as exc:
        c.fail(r.i, "test_vectors", f"unreadable test vectors: {exc}")
        return None
    own = sets[0][1]
    return _Rerun(
        r.i,
        spec,
        (own["inputs"], own["output_grads"]),
        [(v.size, d["outputs"], d["input_grads"]) for v, d in sets],
        sized,
        point,
        r.row.gradient_check.status == "verified",
    )


def _rerun_synthetic(c: _ChunkCheck, runnable: list[_Runnable], rtol: float, atol: float) -> None:
    """Every recorded set (every size) run again, each against its own recorded values;
    then the gradient check again, from scratch, where the row says its backward is verified."""
    reruns = [p for r in runnable if (p := _planned_rerun(c, r)) is not None]
    if not reruns:
        return
    own = {}  # a row checked on the kernel its re-run built (no float64 twin), as produce does

    def check_own(k: int, kernel, run) -> None:
        if reruns[k].wants_check:
            own[k] = check_own_build(reruns[k].spec, kernel, reruns[k].point)

    runs = execute_specs(
        [p.spec for p in reruns],
        reference_checks={},
        given=[p.given for p in reruns],
        more=[p.more for p in reruns],
        on_run=check_own,
    )
    for p, run in zip(reruns, runs, strict=False):
        _compare_sizes(c, p, run, rtol, atol)
    _recheck_gradients(c, reruns, own)


def _compare_sizes(c: _ChunkCheck, p: _Rerun, run, rtol: float, atol: float) -> None:
    """A re-run's outputs and input gradients at each recorded size against the recorded ones."""
    i, sets = p.i, p.recorded
    c.ran(i, "cpu_execution")
    if not run.ok:
        c.fail(i, "cpu_execution", f"{run.reason}: {run.detail}")
        return
    reruns = [(sets[0][0], run), *((label, r) for label, _, r in run.more_sizes)]
    for (size, outputs, in_grads), (_, rerun) in zip(sets, reruns, strict=True):
        if size != sets[0][0]:
            c.ran(i, "cpu_execution_other_sizes")

        def fail_at(m: str, size: str = size, own: str = sets[0][0]) -> None:
            c.fail(i, "cpu_execution", m if size == own else f"size {size}: {m}")

        if not rerun.ok:
            fail_at(f"{rerun.reason}: {rerun.detail}")
            continue
        _compare_with_recorded(fail_at, outputs, in_grads, rerun.outputs, rerun.input_grads, rtol, atol)


def _recheck_gradients(c: _ChunkCheck, reruns: list[_Rerun], own: dict) -> None:
    """The gradient check again where the row records a verified backward: on the re-run's
    own build where it made one (``own``), else batched from scratch."""
    verified = [k for k, p in enumerate(reruns) if p.wants_check]
    if not verified:
        return
    todo = [k for k in verified if own.get(k) is None]
    found = dict(
        zip(todo, check_gradients([reruns[k].spec for k in todo], [reruns[k].point for k in todo]), strict=False)
    )
    for k in verified:
        check = own.get(k) or found[k]
        c.ran(reruns[k].i, "gradient_check")
        if check.status != "verified":
            c.fail(
                reruns[k].i,
                "gradient_check",
                f"recorded verified, re-check says {check.status}: {summary_reason(check)}",
            )


def _compare_with_recorded(
    fail, outputs: dict, in_grads: dict, got_outputs: dict, got_grads: dict, rtol: float, atol: float
) -> None:
    """Report (through ``fail(message)``) every recorded output or input gradient that a re-run
    did not produce or produced differently."""
    for kind, want, got in (("output", outputs, got_outputs), ("input gradient", in_grads, got_grads)):
        for name, expected in want.items():
            if name not in got:
                fail(f"{kind} {name!r} was not produced")
                continue
            err = max_error_beyond(got[name], expected, rtol, atol)
            if err is not None:
                fail(f"{kind} {name!r} differs from the recorded one (max abs error {err:.3g})")


def _rerun_real(c: _ChunkCheck, runnable: list[_Runnable], rtol: float, atol: float) -> None:
    """Mined rows: found again through their provenance and re-run on their test vectors."""
    reruns = rerun_rows([r.row for r in runnable])
    for r, rerun in zip(runnable, reruns, strict=False):
        i, row = r.i, r.row
        if rerun.skipped:
            c.ran(i, "cpu_execution_skipped")
            continue
        c.ran(i, "cpu_execution")
        if rerun.error:
            c.fail(i, "cpu_execution", rerun.error)
            continue
        _, outputs, _, in_grads = recorded_run(row)
        fail = functools.partial(c.fail, i, "cpu_execution")
        _compare_with_recorded(fail, outputs, in_grads, rerun.outputs, rerun.input_grads, rtol, atol)
        recorded_status = row.gradient_check.status
        if rerun.gradient_check is not None:
            c.ran(i, "gradient_check")
            if rerun.gradient_check.status != recorded_status:
                c.fail(
                    i,
                    "gradient_check",
                    f"recorded {recorded_status}, re-check says "
                    f"{rerun.gradient_check.status}: {rerun.gradient_check.reason}",
                )


def validate_path(
    path: str | Path, *, arch: int | None = None, progress: bool = False, workers: int = 0
) -> ValidationReport:
    """Validate a dataset folder (against its manifest) or a single .jsonl/.parquet file,
    with ``workers`` processes (0: in this process)."""
    path = Path(path)
    report = ValidationReport()
    preambles: dict[str, str] = {}
    if path.is_dir():
        try:
            manifest = Manifest.read(path)
        except ManifestError as exc:
            raise store.DatasetError(str(exc)) from None
        preambles = manifest.preambles
        for f in manifest.files:
            p = path / f.path
            if not p.exists():
                report.file_problems.append(f"{f.path}: listed in the manifest but missing")
                continue
            if store.file_checksum(p) != f.xxh3_128:
                report.file_problems.append(f"{f.path}: checksum differs from the manifest")
            n = _count_rows(p)
            if n is None:
                report.file_problems.append(f"{f.path}: unreadable (corrupted?)")
            elif n != f.rows:
                report.file_problems.append(f"{f.path}: {n} rows, manifest says {f.rows}")
        # the rows of each row configuration; a negatives shard's files are checked above (its rows are wrong kernels)
        targets = [
            path / f.path
            for f in manifest.files
            if f.is_parquet and f.config in CONFIGS and _count_rows(path / f.path) is not None
        ]
    elif path.exists():
        targets = [path]
        folder = next((p for p in path.parents if (p / MANIFEST_FILE).exists()), None)
        if folder is not None:
            try:
                preambles = Manifest.read(folder).preambles
            except ManifestError as exc:
                raise store.DatasetError(str(exc)) from None
    else:
        raise store.DatasetError(f"{path}: no such file or folder")

    total = sum(_count_rows(t) or 0 for t in targets)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="row", desc="validate", dynamic_ncols=True)
    try:
        rows = itertools.chain.from_iterable(iter_rows_from(t) for t in targets if t.exists())
        validate_rows(rows, preambles, report, arch=arch, progress=bar, workers=workers, total=total)
    finally:
        if bar is not None:
            bar.close()
    return report


def _count_rows(p: Path) -> int | None:
    """Rows in a .parquet or .jsonl file; None if missing or unreadable."""
    try:
        if p.suffix == ".parquet":
            return pq.ParquetFile(p).metadata.num_rows
        with open(p, "rb") as f:
            return sum(1 for _ in f)
    except (OSError, pa.ArrowException):
        return None


def format_report(report: ValidationReport, limit: int = 20) -> str:
    lines = [f"{report.rows} rows checked: " + ", ".join(f"{k} {v}" for k, v in sorted(report.checks_run.items()))]
    for cat, n in sorted(report.by_category.items()):
        bad = sum(1 for f in report.failures if f.category == cat)
        lines.append(f"  {cat}: {n} rows, {bad} failing checks")
    for p in report.file_problems:
        lines.append(f"  FILE {p}")
    for f in report.failures[:limit]:
        lines.append(f"  FAIL {f.where} [{f.category} {f.row_id}] {f.check}: {f.message}")
    if len(report.failures) > limit:
        lines.append(f"  ... and {len(report.failures) - limit} more failures")
    if report.rows == 0:
        lines.append("  no rows found")
    lines.append("OK" if report.ok else "FAILED")
    return "\n".join(lines)
