"""`cudagen`: a thin command line over the library (everything here is callable from Python)."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import signal
import sys
import threading
from pathlib import Path

import orjson
import typer

from . import defaults
from .publish.splits import DEFAULT_RATIOS

# the click that typer runs on (typer >= 0.2x vendors its own copy)
_click_errors = sys.modules[typer.BadParameter.__module__]


class _OneLineErrors(typer.core.TyperGroup):
    """Usage errors (an unknown option, a value that is not a number, a callback's
    BadParameter) as one ``error: ...`` line and exit code 2, like every other error."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except getattr(_click_errors, "NoArgsIsHelpError", ()) as exc:
            typer.echo(exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except _click_errors.ClickException as exc:
            typer.echo(f"error: {_one_line(exc)}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _one_line(exc) -> str:
    """A callback's BadParameter says ``VALUE: what is wrong``: the option's name goes first
    (an argument's value names itself); click's own usage errors keep their text and say
    where the help is."""
    param = getattr(exc, "param", None)
    if isinstance(exc, typer.BadParameter) and param is not None and exc.message.startswith(_CHECKED):
        text = exc.message.removeprefix(_CHECKED)
        if getattr(param, "param_type_name", "") == "option":
            text = f"{max(param.opts, key=len)} {text}"
    else:
        ctx = getattr(exc, "ctx", None)
        text = exc.format_message() + (f" (see {ctx.command_path} --help)" if ctx is not None else "")
    return " ".join(text.split())


_CHECKED = "\x00"  # marks the messages of this module's checks (below)


def _bad(message: str) -> typer.BadParameter:
    return typer.BadParameter(_CHECKED + message)


app = typer.Typer(
    cls=_OneLineErrors,
    name="cudagen",
    help=(
        "Make Python -> CUDA training pairs from NVIDIA Warp kernels: generated, compiled with NVRTC, run, "
        "deduplicated."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEFAULT_OUTPUT = Path("data/production")
_DEFAULT_RATIOS_TEXT = ",".join(str(r) for r in DEFAULT_RATIOS)  # --split-ratios default: publish/splits.py


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler stopping the job, ``kill PID``): stopped like Ctrl-C, so that
    the same clean-up runs (workers shut down, the last commit kept)."""


def _terminate(signum, frame) -> None:
    raise Terminated


FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def expected_errors(fn):
    """Expected failures become one line on stderr and a non-zero exit, never a traceback.
    SIGINT (exit 130) and SIGTERM (exit 143) stop the command cleanly: what was committed
    is kept and the same command resumes."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
        try:
            return _run(*args, **kwargs)
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, previous)

    def _run(*args, **kwargs):
        from .contracts.manifest import ManifestError
        from .dataset.store import DatasetError
        from .extract import ExtractError
        from .extract.frontend import NvrtcUnavailable
        from .mine import MineError
        from .pipeline.config import ProduceError
        from .publish import PublishError

        try:
            return fn(*args, **kwargs)
        except (
            ProduceError,
            DatasetError,
            ExtractError,
            PublishError,
            ManifestError,
            MineError,
            NvrtcUnavailable,
        ) as exc:
            _fail(str(exc))
        except OSError as exc:  # produce says more (ProduceError); this is every other command's full disk
            if exc.errno not in FULL_DISK_ERRNOS:
                raise
            _fail(f"{exc.filename or 'a file'}: cannot write ({os.strerror(exc.errno)}); make room, then run the "
                  "same command again")  # fmt: skip
        except KeyboardInterrupt as exc:
            what = "terminated" if isinstance(exc, Terminated) else "interrupted"
            typer.echo(f"\n{what}: everything committed so far is kept; run the same command again to resume", err=True)
            raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None

    return wrapper


@contextlib.contextmanager
def _reading(path: Path):
    """Readers hold the folder's lock shared while they read (dataset/lock.py): they stop in
    one line while another process writes it, and a writer that starts meanwhile refuses.
    A file of rows is guarded by the dataset folder above it, if it is in one."""
    from .dataset.lock import LOCK_FILE, FolderBusy, reader_lock

    folder = path if path.is_dir() else next((p for p in path.resolve().parents if (p / LOCK_FILE).is_file()), path)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(reader_lock(folder))
        except FolderBusy as exc:
            _fail(str(exc))
        yield


def _dataset_folder_or_fail(path: Path, code: int) -> None:
    """Before anything slow (a GPU check, workers): a folder must hold a readable manifest of
    this row schema version; one line naming the file if not."""
    from .contracts.manifest import Manifest, ManifestError

    if path.is_dir():
        try:
            Manifest.read(path)
        except ManifestError as exc:
            _fail(str(exc), code)


def _split_list(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


# ------------------------------------------------------------------ option checks
# One place per kind of option value; typer calls them while parsing, so a bad value is
# one `error: Invalid value for '--x': ...` line (exit 2) before anything is done.


def _at_least(minimum: int | float, *, strict: bool = False):
    def check(value):
        if value is not None and (value <= minimum if strict else value < minimum):
            raise _bad(f"{value}: must be {'more than' if strict else 'at least'} {minimum}")
        return value

    return check


def _arch(value: int | None) -> int | None:
    if value is None:
        return value
    from . import warp_boundary  # loads Warp: the commands with --arch compile anyway

    supported = sorted(warp_boundary.nvrtc_supported_archs())
    if value not in supported:
        raise _bad(f"{value}: not a target Warp's NVRTC supports ({', '.join(map(str, supported))})")
    return value


def _compile_level(value: str) -> str:
    from .extract.levels import COMPILE_LEVELS

    if value not in COMPILE_LEVELS:
        raise _bad(f"{value!r}: use {' or '.join(COMPILE_LEVELS)}")
    return value


def _ratios(value: str) -> str:
    from .publish.splits import validate_ratios

    try:
        validate_ratios(_split_list(value))
    except ValueError as exc:
        raise _bad(f"{value}: {exc}") from None
    return value


def _categories(value: str | None) -> str | None:
    if value is None:
        return None
    from .generators import categories as all_categories

    known, chosen = all_categories(), _split_list(value)
    if not chosen:
        raise _bad(f"{value!r} names no category; leave the option out for all ({', '.join(known)})")
    unknown = [c for c in chosen if c not in known]
    if unknown:
        raise _bad(f"{value}: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    if len(set(chosen)) != len(chosen):
        raise _bad(f"{value!r}: a category is named twice")
    return value


def _one_of(*choices: str):
    def check(value: str) -> str:
        if value not in choices:
            raise _bad(f"{value!r}: use {' or '.join(choices)}")
        return value

    return check


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except PermissionError:
        raise _bad(f"{path}: no permission to reach it") from None


def _writable_parent(path: Path) -> None:
    """The nearest existing folder above ``path`` must be a folder this user may write."""
    for parent in path.absolute().parents:
        if _exists(parent):
            if not parent.is_dir():
                raise _bad(f"{path}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise _bad(f"{path}: no permission to write in {parent}")
            return


def _output_folder(value: Path) -> Path:
    """A folder to write: an existing folder, or a new one in a folder we may write."""
    if _exists(value):
        if not value.is_dir():
            raise _bad(f"{value}: a file, not a folder")
        if not os.access(value, os.W_OK | os.X_OK):
            raise _bad(f"{value}: no permission to write in it")
        return value
    _writable_parent(value)
    return value


def _output_file(value: Path | None) -> Path | None:
    """A file to write (replaced if it exists)."""
    if value is None:
        return None
    if _exists(value) and value.is_dir():
        raise _bad(f"{value}: a folder, not a file")
    if value.exists() and not os.access(value, os.W_OK):
        raise _bad(f"{value}: no permission to write it")
    _writable_parent(value)
    return value


def _input_path(kind: str):
    """``kind``: file, folder or any (a dataset folder or one file of rows)."""

    def check(value: Path | None) -> Path | None:
        if value is None:
            return None
        if not _exists(value):
            raise _bad(f"{value}: no such file or folder")
        if kind == "file" and not value.is_file():
            raise _bad(f"{value}: not a file")
        if kind == "folder" and not value.is_dir():
            raise _bad(f"{value}: not a folder")
        if not os.access(value, os.R_OK):
            raise _bad(f"{value}: no permission to read it")
        return value

    return check


ROW_FILE_SUFFIXES = (".jsonl", ".parquet")


def _rows_path(value: Path) -> Path:
    """A dataset folder, or one file of rows (.jsonl or .parquet)."""
    _input_path("any")(value)
    if value.is_file() and value.suffix not in ROW_FILE_SUFFIXES:
        raise _bad(f"{value}: not a dataset folder, nor a .jsonl or .parquet file of rows")
    return value


def _writable_input_folder(value: Path) -> Path:
    """An existing folder that the command adds to."""
    _input_path("folder")(value)
    if not os.access(value, os.W_OK | os.X_OK):
        raise _bad(f"{value}: no permission to write in it")
    return value


def _kinds(value: str | None) -> str | None:
    """Negative kinds; which exist is checked with the other options (negatives.run.check_options)."""
    if value is not None and not _split_list(value):
        raise _bad(f"{value!r} names no kind; leave the option out for all")
    return value


_RAY_ADDRESS = re.compile(r"(?:ray://)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(\d{1,5})")


def _ray_address(value: str | None) -> str | None:
    if value is None or value == "auto":
        return value
    m = _RAY_ADDRESS.fullmatch(value)
    if m is None or not 1 <= int(m.group(1)) <= 65535:
        raise _bad(f"{value!r}: use HOST:PORT of the Ray head node (e.g. 10.0.0.1:6379), ray://HOST:PORT, or auto")
    return value


def _input_paths(values: list[Path] | None) -> list[Path] | None:
    for value in values or []:
        _input_path("any")(value)
    return values


def _cuda_device(value: str) -> str:
    if not re.fullmatch(r"cuda(:\d+)?", value):
        raise _bad(f"{value!r}: use cuda:N (cuda:0 is the first GPU)")
    return value


def _eval_device(value: str) -> str:
    if value != "cpu" and not re.fullmatch(r"cuda(:\d+)?", value):
        raise _bad(f"{value}: use cpu or cuda:N (cuda:0 is the first GPU)")
    return value


_INPUT_FILE = _input_path("file")
_INPUT_FOLDER = _input_path("folder")
_INPUT_ANY = _input_path("any")
_AT_LEAST_1 = _at_least(1)
_AT_LEAST_0 = _at_least(0)
_MORE_THAN_0 = _at_least(0, strict=True)
_EXECUTORS = _one_of("local", "ray")
_SPLITS = _one_of("train", "validation", "test")
_EXPORT_FORMATS = _one_of("chat", "completion")
_DATASET_CONFIGS = _one_of("default", "real")
WORKERS_HELP = "Worker processes (0: run in this process, no workers; default: one per CPU core)."


def format_summary(stats: dict, output: Path | str) -> str:
    """One screen: what was made, what was rejected and why, how fast."""
    lines = [f"{stats['total_pairs']} pairs in {output}"]
    width = max((len(c) for c in stats["by_category"]), default=8)
    lines.append(
        "  category".ljust(width + 4)
        + "pairs  "
        + "  ".join(t[:5].rjust(5) for t in ("basic", "intermediate", "advanced"))
    )
    for cat, n in stats["by_category"].items():
        tiers = stats.get("by_category_difficulty", {}).get(cat, {})
        lines.append(
            f"  {cat.ljust(width)}  {n:5d}  "
            + "  ".join(f"{tiers.get(t, 0):5d}" for t in ("basic", "intermediate", "advanced"))
        )
    lines.append("  splits: " + ", ".join(f"{s} {n}" for s, n in stats["by_split"].items()))
    lines.append(f"  lines: forward {stats['avg_forward_lines']}, backward {stats['avg_backward_lines']} (average)")
    rates = []
    if stats.get("compile_pass_rate") is not None:
        rates.append(f"compile {stats['compile_pass_rate']:.1%}")
    if stats.get("execution_pass_rate") is not None:
        rates.append(f"execution {stats['execution_pass_rate']:.1%}")
    lines.append(
        f"  tried {stats['kernels_tried']} kernels"
        + (f"; pass rates: {', '.join(rates)}" if rates else " (--fast: no compile or execution)")
    )
    grad = stats.get("gradient_check") or {}
    if grad.get("by_status"):
        lines.append(
            "  backward: "
            + ", ".join(f"{s} {n}" for s, n in grad["by_status"].items())
            + (f" ({grad['verified_rate']:.1%} verified)" if grad.get("verified_rate") is not None else "")
        )
    rejects = stats["rejects_by_reason"]
    if rejects:
        lines.append("  rejects: " + ", ".join(f"{r} {n}" for r, n in rejects.items()))
    if stats.get("pairs_per_second"):
        lines.append(f"  time: {stats['generation_time_seconds']:.1f} s, {stats['pairs_per_second']:.1f} pairs/s")
    return "\n".join(lines)


@app.command()
@expected_errors
def produce(
    count: int = typer.Option(
        1000, "--count", "-n", callback=_AT_LEAST_1, help="Number of pairs to make (balanced across categories)."
    ),
    categories: str | None = typer.Option(
        None,
        "--categories",
        "-c",
        callback=_categories,
        help="Comma-separated categories (default: all; see `cudagen categories`).",
    ),
    seed: int = typer.Option(
        0, "--seed", callback=_AT_LEAST_0, help="Root seed: the same seed and version give the same dataset."
    ),
    workers: int = typer.Option(os.cpu_count() or 1, "--workers", "-w", callback=_AT_LEAST_0, help=WORKERS_HELP),
    output: Path = typer.Option(
        DEFAULT_OUTPUT, "--output", "-o", callback=_output_folder, help="Output folder (a Hugging Face dataset folder)."
    ),
    arch: int = typer.Option(
        defaults.ARCH, "--arch", callback=_arch, help="CUDA compute capability NVRTC compiles for (e.g. 75, 86, 90)."
    ),
    fast: bool = typer.Option(
        False, "--fast", help="Generate, extract and dedup only: no NVRTC compile, no CPU execution."
    ),
    compile_level: str = typer.Option(
        defaults.COMPILE_LEVEL,
        "--compile",
        callback=_compile_level,
        help="NVRTC check: frontend (NVRTC's front end with Warp's options, ~13x faster) or ptx (Warp's full compile).",
    ),
    batch_size: int = typer.Option(
        defaults.BATCH_SIZE,
        "--batch-size",
        callback=_AT_LEAST_1,
        help="Kernels per batch (one NVRTC unit and one CPU module each).",
    ),
    max_chars: int = typer.Option(
        defaults.MAX_CHARS,
        "--max-chars",
        callback=_AT_LEAST_1,
        help="Reject rows longer than this (characters of Python + forward + backward CUDA): too_long.",
    ),
    split_ratios: str = typer.Option(
        _DEFAULT_RATIOS_TEXT, "--split-ratios", callback=_ratios, help="train,validation,test fractions (sum 1)."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete what an earlier run wrote to --output and start over."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    jsonl: bool = typer.Option(
        True,
        "--jsonl/--no-jsonl",
        help="Also write jsonl/{split}.jsonl (Parquet shards are always written; --no-jsonl for large runs).",
    ),
    shard_rows: int = typer.Option(
        defaults.SHARD_ROWS, "--shard-rows", callback=_AT_LEAST_1, help="Rows per Parquet shard."
    ),
    resources: bool = typer.Option(
        False,
        "--resources",
        help="Also build each kernel to machine code and record ptxas's registers, spills, shared and local memory "
        "and the PTX size in the `resources` column (slower: a full compile per kernel).",
    ),
    executor: str = typer.Option(
        "local",
        "--executor",
        callback=_EXECUTORS,
        help="local (worker processes here) or ray (Ray tasks; pip install 'cudagen-data[ray]').",
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        callback=_ray_address,
        help="Ray cluster to join (e.g. 10.0.0.1:6379); default: start a private local Ray with --workers CPUs.",
    ),
) -> None:
    """Make a dataset of validated Python -> CUDA pairs (resumable: re-run the same command after a crash)."""
    from .generators import categories as all_categories
    from .pipeline.config import ProduceConfig
    from .pipeline.producer import produce as run_produce
    from .publish.splits import validate_ratios

    if ray_address and executor != "ray":
        _fail("--ray-address needs --executor ray", 2)
    if ray_address:  # before the folder is touched; ray.init would retry an unreachable address for minutes
        from .pipeline.ray_executor import check_reachable

        try:
            check_reachable(ray_address)
        except ConnectionError as exc:
            _fail(f"--ray-address {ray_address}: {exc}; is the Ray head node running (ray start --head)?", 2)
    try:  # every value was checked by its option's callback; what is left is how options combine
        config = ProduceConfig(
            count=count,
            categories=tuple(_split_list(categories) or all_categories()),
            seed=seed,
            arch=arch,
            fast=fast,
            batch_size=batch_size,
            split_ratios=validate_ratios(_split_list(split_ratios)),
            max_chars=max_chars,
            compile_level=compile_level,
            jsonl=jsonl,
            shard_rows=shard_rows,
            resources=resources,
        )
    except ValueError as exc:
        _fail(str(exc), 2)
    result = run_produce(
        config,
        output,
        workers=workers,
        overwrite=overwrite,
        progress=progress,
        executor=executor,
        ray_address=ray_address,
    )
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    if result.already_complete:
        typer.echo(
            f"{output} is already complete for this configuration; nothing to do (--overwrite starts over).", err=True
        )
    typer.echo(format_summary(result.stats, output))


@app.command()
@expected_errors
def extract(
    file: Path = typer.Argument(
        ...,
        callback=_INPUT_FILE,
        help="A Python file with @wp.kernel definitions (its main block is not run).",
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", callback=_output_file, help="Write JSON lines here (default: stdout)."
    ),
    arch: int = typer.Option(
        defaults.ARCH, "--arch", callback=_arch, help="CUDA compute capability for the compile check."
    ),
    compile_level: str = typer.Option(
        defaults.COMPILE_LEVEL,
        "--compile",
        callback=_compile_level,
        help="NVRTC check: frontend (NVRTC's front end with Warp's options, ~13x faster) or ptx (Warp's full compile).",
    ),
    no_compile: bool = typer.Option(
        False, "--no-compile", help="No NVRTC check at all (rows say compile.status skipped)."
    ),
) -> None:
    """Turn any Warp program into pairs: one JSON line per kernel, compile status included."""
    from .extract.pairs import extract_file

    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{file}: cannot read ({exc})", 2)
    rows, errors = extract_file(
        source, arch=arch, compile_check=not no_compile, level=compile_level, root=str(file.resolve().parent)
    )

    data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, out)
    for e in errors:
        typer.echo(f"{file}:{e.line}: {e.message}", err=True)
    failed = sum(1 for r in rows if r.compile.status == "failed")
    typer.echo(
        f"{len(rows)} kernels extracted, {failed} failed to compile, {len(errors)} errors"
        + (f" -> {out}" if out else ""),
        err=True,
    )
    if errors or failed or not rows:
        if not rows and not errors:
            typer.echo(f"{file}: no @wp.kernel found", err=True)
        raise typer.Exit(1)


@app.command()
@expected_errors
def mine(
    paths: list[Path] | None = typer.Argument(
        None,
        callback=_input_paths,
        help="Files or folders of Warp programs (default: the installed Warp's examples, tests and library).",
    ),
    output: Path = typer.Option(
        DEFAULT_OUTPUT,
        "--output",
        "-o",
        callback=_output_folder,
        help="Dataset folder: the rows become its `real` configuration.",
    ),
    workers: int = typer.Option(
        os.cpu_count() or 1,
        "--workers",
        "-w",
        callback=_AT_LEAST_1,
        help="Worker processes (each file is mined in one; default: one per CPU core).",
    ),
    timeout: float = typer.Option(
        60.0,
        "--timeout",
        callback=_MORE_THAN_0,
        help="Seconds one file may take (import, code generation, runs).",
    ),
    arch: int = typer.Option(
        defaults.ARCH, "--arch", callback=_arch, help="CUDA compute capability for the compile check."
    ),
    compile_level: str = typer.Option(
        defaults.COMPILE_LEVEL,
        "--compile",
        callback=_compile_level,
        help="NVRTC check: frontend (NVRTC's front end with Warp's options, ~13x faster) or ptx (Warp's full compile).",
    ),
    no_compile: bool = typer.Option(
        False, "--no-compile", help="No NVRTC check at all (rows say compile.status skipped)."
    ),
    run: bool = typer.Option(True, "--run/--no-run", help="Run kernels whose arguments can be filled, on the CPU."),
    split_ratios: str = typer.Option(
        _DEFAULT_RATIOS_TEXT, "--split-ratios", callback=_ratios, help="train,validation,test fractions (sum 1)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
) -> None:
    """Mine real Warp programs into pairs: every kernel found, with provenance; a report of those not mined."""
    from .dataset.lock import writer_lock
    from .extract.levels import compiler_record
    from .mine.discover import find_files
    from .mine.folder import check_output
    from .mine.pool import Options
    from .publish.splits import validate_ratios

    ratios = validate_ratios(_split_list(split_ratios))
    options = Options(arch=arch, compile_check=not no_compile, compile_level=compile_level, run=run, timeout_s=timeout)
    files = find_files(paths or None)  # a missing path fails here, before anything is written
    compiler = {} if no_compile else compiler_record(arch, compile_level)  # a missing NVRTC fails here too
    with writer_lock(output):  # from reading the synthetic rows to writing `real`: one writer
        check_output(output)  # before minutes of mining: a folder mine must not add to
        _mine_locked(files, output, paths, workers, options, ratios, compiler, no_compile, compile_level, progress)


def _mine_locked(files, output, paths, workers, options, ratios, compiler, no_compile, compile_level, progress) -> None:
    from .contracts.reject import REAL_REJECTS_FILE
    from .extract.levels import DEFAULT_COMPILE_LEVEL
    from .mine.folder import synthetic_shapes, write_real
    from .mine.run import format_summary, mine_sources

    shapes = synthetic_shapes(output)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(files), desc="mining", unit="file", file=sys.stderr)
    result = mine_sources(
        files,
        workers=workers,
        options=options,
        synthetic_shapes=shapes,
        ratios=ratios,
        progress=(lambda res: bar.update(1)) if bar is not None else None,
    )
    if bar is not None:
        bar.close()
    # Recorded in the manifest, which is published: the mined folders by name, no machine path.
    words = ["cudagen", "mine", *[p.resolve().name for p in paths or []], "--output", "OUT_DIR"]
    if no_compile:
        words.append("--no-compile")
    elif compile_level != DEFAULT_COMPILE_LEVEL:
        words += ["--compile", compile_level]
    write_real(output, result.by_split(), result.rejects, result.preambles, result.stats, " ".join(words), compiler)
    typer.echo(format_summary(result.stats, output, REAL_REJECTS_FILE))


@app.command()
@expected_errors
def negatives(
    dataset_dir: Path = typer.Argument(
        ...,
        callback=_writable_input_folder,
        help="A finished dataset folder (synthetic rows, mined `real` rows, or both).",
    ),
    per_row: int = typer.Option(
        3,
        "--per-row",
        "-n",
        callback=_AT_LEAST_1,
        help="Negatives to make per positive row (fewer where it allows fewer).",
    ),
    kinds: str | None = typer.Option(
        None,
        "--kinds",
        callback=_kinds,
        help="Comma-separated kinds to make (default: all; listed in the card and `cudagen_data.negatives.KINDS`).",
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        callback=_AT_LEAST_0,
        help="Seed of the witness's fresh inputs: the same seed gives the same negatives.",
    ),
    workers: int = typer.Option(os.cpu_count() or 1, "--workers", "-w", callback=_AT_LEAST_0, help=WORKERS_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
) -> None:
    """Add the `negatives` configuration: wrong kernels made from the rows, each proven wrong on the CPU (resumable)."""
    from .negatives import format_summary as negatives_summary
    from .negatives import make_negatives
    from .negatives.run import NegativesError, check_options, read_positives

    try:
        check_options(per_row, _split_list(kinds), workers)
    except NegativesError as exc:
        _fail(str(exc), 2)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(read_positives(dataset_dir)[1]), desc="negatives", unit="row", file=sys.stderr)
    result = make_negatives(
        dataset_dir,
        per_row=per_row,
        kinds=_split_list(kinds),
        seed=seed,
        workers=workers,
        progress=bar.update if bar is not None else None,
    )
    if bar is not None:
        bar.close()
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    if result.already_complete:
        typer.echo(f"{dataset_dir}: negatives already complete for these options; nothing to do.", err=True)
    typer.echo(negatives_summary(result.stats, dataset_dir))


@app.command()
@expected_errors
def validate(
    path: Path = typer.Argument(
        ..., callback=_rows_path, help="A dataset folder, or one .jsonl / .parquet file of rows."
    ),
    arch: int | None = typer.Option(
        None, "--arch", callback=_arch, help="Recompile for this arch (default: each row's recorded arch)."
    ),
    workers: int = typer.Option(os.cpu_count() or 1, "--workers", "-w", callback=_AT_LEAST_0, help=WORKERS_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Re-check every row: schema, hashes, CUDA structure, NVRTC (at the row's level), CPU test vectors, manifest."""
    from .validate import format_report, validate_path

    with _reading(path):
        report = validate_path(path, arch=arch, progress=progress, workers=workers)
    typer.echo(format_report(report))
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@expected_errors
def stats(
    path: Path = typer.Argument(DEFAULT_OUTPUT, callback=_INPUT_FOLDER, help="A finished dataset folder."),
) -> None:
    """Print a dataset's statistics."""
    from .contracts.manifest import MANIFEST_FILE, Manifest
    from .contracts.reject import REAL_REJECTS_FILE
    from .dataset.store import DatasetFolder
    from .mine.folder import CONFIG
    from .mine.run import format_summary as format_real_summary
    from .pipeline.finalize import load_stats

    with _reading(path):
        if (path / MANIFEST_FILE).is_file():
            Manifest.read(path)  # a folder of another row schema: one line (ManifestError)
        all_stats = load_stats(DatasetFolder(path))
    real = all_stats.pop(CONFIG, None)
    parts = [format_summary(all_stats, path)] if all_stats else []
    if real is not None:
        parts.append(f"configuration '{CONFIG}' (mined):\n" + format_real_summary(real, path, REAL_REJECTS_FILE))
    typer.echo("\n\n".join(parts))


@app.command()
def categories() -> None:
    """List the generator categories."""
    from .generators import categories as all_categories

    typer.echo("\n".join(all_categories()))


@app.command("gpu-validate")
def gpu_validate(
    path: Path = typer.Argument(
        ..., callback=_rows_path, help="A dataset folder, or one .jsonl / .parquet file of rows."
    ),
    limit: int | None = typer.Option(None, "--limit", callback=_AT_LEAST_1, help="Check only the first N rows."),
    device: str = typer.Option("cuda:0", "--device", callback=_cuda_device, help="CUDA device to run on (cuda:N)."),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", callback=_AT_LEAST_1, help="Worker processes compiling in parallel (default: CPU cores)."
    ),
    report: Path | None = typer.Option(None, "--report", callback=_output_file, help="Write the JSON report here."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Prove the recorded CUDA on a GPU: regenerate it byte for byte, run it on its test vectors (GPU_TESTING.md)."""
    from .gpu import run_gpu_validation

    with _reading(path):
        _dataset_folder_or_fail(path, 2)  # before the GPU is looked for
        code = run_gpu_validation(path, limit=limit, device=device, jobs=jobs, report_path=report, progress=progress)
    raise typer.Exit(code)


@app.command("eval")
def eval_command(
    predictions: Path = typer.Argument(
        ...,
        callback=_INPUT_FILE,
        help='JSONL: one {"id", "cuda_forward", "cuda_backward" (optional)} per line; several per id for pass@k.',
    ),
    dataset: Path = typer.Option(
        ...,
        "--dataset",
        callback=_rows_path,
        help="A dataset folder (or one .jsonl / .parquet file of rows).",
    ),
    split: str = typer.Option("test", "--split", callback=_SPLITS, help="The split the ids belong to."),
    device: str = typer.Option(
        "cpu", "--device", callback=_eval_device, help="cpu (structure + compile) or cuda:N (and run on the GPU)."
    ),
    report: Path | None = typer.Option(None, "--report", callback=_output_file, help="Write the JSON report here."),
    seed: int | None = typer.Option(
        None,
        "--seed",
        callback=_AT_LEAST_0,
        help="Seed of the fresh inputs (default: secret, from os.urandom; recorded in the report).",
    ),
    workers: int | None = typer.Option(
        None, "--workers", "-w", callback=_AT_LEAST_1, help="GPU worker processes (default: CPU cores)."
    ),
    fresh_sets: int = typer.Option(
        4,
        "--fresh-sets",
        callback=_AT_LEAST_1,
        help="Fresh random input sets per recorded size (at least 12 per row in all).",
    ),
    timing: bool = typer.Option(
        False,
        "--timing",
        help="GPU only: time every candidate that passes against the row's own kernel (speedup, fast_p).",
    ),
) -> None:
    """Score model-written CUDA against a dataset's rows: structure, NVRTC compile, GPU run (see GPU_TESTING.md)."""
    from .eval import EvalInputError, evaluate, format_report
    from .eval.pool import PoolError

    with _reading(dataset):
        try:
            rep = evaluate(predictions, dataset, split=split, device=device, seed=seed, workers=workers,
                           report_path=report, fresh_sets=fresh_sets, timing=timing)  # fmt: skip
        except (EvalInputError, PoolError) as exc:
            _fail(str(exc), 2)
    typer.echo(format_report(rep))
    if report:
        typer.echo(f"JSON report: {report}")


@app.command()
@expected_errors
def publish(
    path: Path = typer.Argument(..., callback=_INPUT_FOLDER, help="A finished dataset folder."),
    repo_id: str = typer.Option(..., "--repo-id", help="ORG/NAME of the dataset repository on the Hugging Face Hub."),
    private: bool = typer.Option(False, "--private", help="Create the repository as private."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be uploaded, and where; upload nothing."),
) -> None:
    """Upload a dataset folder to the Hugging Face Hub in one commit (stale shards removed)."""
    from .publish.hub import publish as hub_publish

    # publish only reads the folder; were it to write (the card), it would hold writer_lock instead
    with _reading(path):
        _dataset_folder_or_fail(path, 1)
        plan = hub_publish(path, repo_id, private=private, dry_run=dry_run)
    typer.echo(plan.describe())


@app.command()
@expected_errors
def export(
    path: Path = typer.Argument(..., callback=_INPUT_FOLDER, help="A finished dataset folder."),
    fmt: str = typer.Option(
        "chat",
        "--format",
        "-f",
        callback=_EXPORT_FORMATS,
        help="chat (messages) or completion (prompt/completion).",
    ),
    out: Path = typer.Option(..., "--out", "-o", callback=_output_file, help="Output JSONL file."),
    forward_only: bool = typer.Option(False, "--forward-only", help="Answer with the forward kernel only."),
    config: str = typer.Option(
        "default",
        "--config",
        callback=_DATASET_CONFIGS,
        help="Dataset configuration: default (synthetic) or real (mined).",
    ),
) -> None:
    """Write instruction-tuning records (deterministic, documented prompt template)."""
    from .publish.export import export as run_export

    with _reading(path):
        _dataset_folder_or_fail(path, 1)
        n = run_export(path, fmt, out, include_backward=not forward_only, config=config)
    typer.echo(f"{n} records -> {out}")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
