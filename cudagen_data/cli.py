"""`cudagen`: a thin command line over the library (everything here is callable from Python)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import typer

from .dataset.shards import SHARD_ROWS

app = typer.Typer(
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


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def expected_errors(fn):
    """Expected failures become one line on stderr and a non-zero exit, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
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
        except KeyboardInterrupt:
            typer.echo(
                "\ninterrupted: everything committed so far is kept; run the same command again to resume", err=True
            )
            raise typer.Exit(130) from None

    return wrapper


def _split_list(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


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
    count: int = typer.Option(1000, "--count", "-n", help="Number of pairs to make (balanced across categories)."),
    categories: str | None = typer.Option(
        None, "--categories", "-c", help="Comma-separated categories (default: all; see `cudagen categories`)."
    ),
    seed: int = typer.Option(0, "--seed", help="Root seed: the same seed and version give the same dataset."),
    workers: int = typer.Option(
        os.cpu_count() or 1, "--workers", "-w", help="Worker processes (0 runs in this process)."
    ),
    output: Path = typer.Option(
        DEFAULT_OUTPUT, "--output", "-o", help="Output folder (a Hugging Face dataset folder)."
    ),
    arch: int = typer.Option(86, "--arch", help="CUDA compute capability NVRTC compiles for (e.g. 75, 86, 90)."),
    fast: bool = typer.Option(
        False, "--fast", help="Generate, extract and dedup only: no NVRTC compile, no CPU execution."
    ),
    compile_level: str = typer.Option(
        "frontend",
        "--compile",
        help="NVRTC check: frontend (NVRTC's front end with Warp's options, ~13x faster) or ptx (Warp's full compile).",
    ),
    batch_size: int = typer.Option(
        100, "--batch-size", help="Kernels per batch (one NVRTC unit and one CPU module each)."
    ),
    max_chars: int = typer.Option(
        120_000,
        "--max-chars",
        help="Reject rows longer than this (characters of Python + forward + backward CUDA): too_long.",
    ),
    split_ratios: str = typer.Option("0.98,0.01,0.01", "--split-ratios", help="train,validation,test fractions."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete what an earlier run wrote to --output and start over."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    jsonl: bool = typer.Option(
        True,
        "--jsonl/--no-jsonl",
        help="Also write jsonl/{split}.jsonl (Parquet shards are always written; --no-jsonl for large runs).",
    ),
    shard_rows: int = typer.Option(SHARD_ROWS, "--shard-rows", help="Rows per Parquet shard."),
    resources: bool = typer.Option(
        False,
        "--resources",
        help="Also build each kernel to machine code and record ptxas's registers, spills, shared and local memory "
        "and the PTX size in the `resources` column (slower: a full compile per kernel).",
    ),
    executor: str = typer.Option(
        "local", "--executor", help="local (worker processes here) or ray (Ray tasks; pip install 'cudagen-data[ray]')."
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="Ray cluster to join (e.g. 10.0.0.1:6379); default: start a private local Ray with --workers CPUs.",
    ),
) -> None:
    """Make a dataset of validated Python -> CUDA pairs (resumable: re-run the same command after a crash)."""
    from .generators import categories as all_categories
    from .pipeline.config import ProduceConfig
    from .pipeline.producer import produce as run_produce
    from .publish.splits import validate_ratios

    if executor not in ("local", "ray"):
        _fail(f"--executor {executor!r}: use local or ray", 2)
    if ray_address and executor != "ray":
        _fail("--ray-address needs --executor ray", 2)
    known = all_categories()
    chosen = _split_list(categories) or list(known)
    unknown = [c for c in chosen if c not in known]
    if unknown:
        _fail(f"--categories: unknown {', '.join(unknown)}; known: {', '.join(known)}", 2)
    try:
        ratios = validate_ratios(_split_list(split_ratios))
        config = ProduceConfig(
            count=count,
            categories=tuple(chosen),
            seed=seed,
            arch=arch,
            fast=fast,
            batch_size=batch_size,
            split_ratios=ratios,
            max_chars=max_chars,
            compile_level=compile_level,
            jsonl=jsonl,
            shard_rows=shard_rows,
            resources=resources,
        )
        _check_arch(arch)
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


def _check_arch(arch: int) -> None:
    supported = (75, 80, 86, 87, 88, 89, 90, 100, 103, 107, 110, 120, 121)
    if arch not in supported:
        raise ValueError(f"--arch {arch}: not a target Warp's NVRTC supports ({', '.join(map(str, supported))})")


@app.command()
@expected_errors
def extract(
    file: Path = typer.Argument(..., help="A Python file with @wp.kernel definitions (its main block is not run)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write JSON lines here (default: stdout)."),
    arch: int = typer.Option(86, "--arch", help="CUDA compute capability for the compile check."),
    compile_level: str = typer.Option(
        "frontend",
        "--compile",
        help="NVRTC check: frontend (NVRTC's front end with Warp's options, ~13x faster) or ptx (Warp's full compile).",
    ),
    no_compile: bool = typer.Option(
        False, "--no-compile", help="No NVRTC check at all (rows say compile.status skipped)."
    ),
) -> None:
    """Turn any Warp program into pairs: one JSON line per kernel, compile status included."""
    from .extract.levels import check_level
    from .extract.pairs import extract_file

    try:
        _check_arch(arch)
        check_level(compile_level)
    except ValueError as exc:
        _fail(str(exc), 2)
    if not file.is_file():
        _fail(f"{file}: no such file", 2)
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{file}: cannot read ({exc})", 2)
    rows, errors = extract_file(
        source, arch=arch, compile_check=not no_compile, level=compile_level, root=str(file.resolve().parent)
    )
    import orjson

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
        None, help="Files or folders of Warp programs (default: the installed Warp's examples, tests and library)."
    ),
    output: Path = typer.Option(
        DEFAULT_OUTPUT, "--output", "-o", help="Dataset folder: the rows become its `real` configuration."
    ),
    workers: int = typer.Option(
        os.cpu_count() or 1, "--workers", "-w", help="Worker processes (each file is mined in one)."
    ),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one file may take (import, code generation, runs)."),
    arch: int = typer.Option(86, "--arch", help="CUDA compute capability for the compile check."),
    compile_level: str = typer.Option(
        "frontend",
        "--compile",
        help="NVRTC check: frontend (NVRTC's front end with Warp's options, ~13x faster) or ptx (Warp's full compile).",
    ),
    no_compile: bool = typer.Option(
        False, "--no-compile", help="No NVRTC check at all (rows say compile.status skipped)."
    ),
    run: bool = typer.Option(True, "--run/--no-run", help="Run kernels whose arguments can be filled, on the CPU."),
    split_ratios: str = typer.Option("0.98,0.01,0.01", "--split-ratios", help="train,validation,test fractions."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
) -> None:
    """Mine real Warp programs into pairs: every kernel found, with provenance; a report of those not mined."""
    from .extract.levels import DEFAULT_COMPILE_LEVEL, check_level, compiler_record
    from .mine.discover import find_files
    from .mine.folder import REJECTS_FILE, synthetic_shapes, write_real
    from .mine.pool import Options
    from .mine.run import format_summary, mine_sources
    from .publish.splits import validate_ratios

    try:
        _check_arch(arch)
        check_level(compile_level)
        ratios = validate_ratios(_split_list(split_ratios))
        if timeout <= 0:
            raise ValueError(f"--timeout {timeout}: must be > 0")
    except ValueError as exc:
        _fail(str(exc), 2)
    files = find_files(paths or None)  # a missing path fails here, before anything is written
    compiler = {} if no_compile else compiler_record(arch, compile_level)  # a missing NVRTC fails here too
    shapes = synthetic_shapes(output)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(files), desc="mining", unit="file", file=sys.stderr)
    options = Options(arch=arch, compile_check=not no_compile, compile_level=compile_level, run=run, timeout_s=timeout)
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
    write_real(output, result.rows, result.rejects, result.preambles, result.stats, " ".join(words), compiler)
    typer.echo(format_summary(result.stats, output, REJECTS_FILE))


@app.command()
@expected_errors
def negatives(
    dataset_dir: Path = typer.Argument(
        ..., help="A finished dataset folder (synthetic rows, mined `real` rows, or both)."
    ),
    per_row: int = typer.Option(
        3, "--per-row", "-n", help="Negatives to make per positive row (fewer where it allows fewer)."
    ),
    kinds: str | None = typer.Option(
        None,
        "--kinds",
        help="Comma-separated kinds to make (default: all; listed in the card and `cudagen_data.negatives.KINDS`).",
    ),
    seed: int = typer.Option(
        0, "--seed", help="Seed of the witness's fresh inputs: the same seed gives the same negatives."
    ),
    workers: int = typer.Option(
        os.cpu_count() or 1, "--workers", "-w", help="Worker processes (0 runs in this process)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
) -> None:
    """Add the `negatives` configuration: wrong kernels made from the rows, each proven wrong on the CPU (resumable)."""
    from .negatives import format_summary as negatives_summary
    from .negatives import make_negatives
    from .negatives.run import NegativesError, check_options, read_positives

    if not dataset_dir.is_dir():
        _fail(f"{dataset_dir}: no such dataset folder", 2)
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
    path: Path = typer.Argument(..., help="A dataset folder, or one .jsonl / .parquet file of rows."),
    arch: int | None = typer.Option(
        None, "--arch", help="Recompile for this arch (default: each row's recorded arch)."
    ),
    workers: int = typer.Option(
        os.cpu_count() or 1, "--workers", "-w", help="Worker processes (0 runs in this process)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Re-check every row: schema, hashes, CUDA structure, NVRTC (at the row's level), CPU test vectors, manifest."""
    from .dataset.verify import format_report, validate_path

    if workers < 0:
        _fail(f"--workers {workers}: must be 0 or more", 2)
    if arch is not None:
        try:
            _check_arch(arch)
        except ValueError as exc:
            _fail(str(exc), 2)
    report = validate_path(path, arch=arch, progress=progress, workers=workers)
    typer.echo(format_report(report))
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@expected_errors
def stats(path: Path = typer.Argument(DEFAULT_OUTPUT, help="A finished dataset folder.")) -> None:
    """Print a dataset's statistics."""
    from .dataset.finalize import load_stats
    from .dataset.store import DatasetFolder
    from .mine.folder import CONFIG, REJECTS_FILE
    from .mine.run import format_summary as format_real_summary

    all_stats = load_stats(DatasetFolder(path))
    real = all_stats.pop(CONFIG, None)
    parts = [format_summary(all_stats, path)] if all_stats else []
    if real is not None:
        parts.append(f"configuration '{CONFIG}' (mined):\n" + format_real_summary(real, path, REJECTS_FILE))
    typer.echo("\n\n".join(parts))


@app.command()
def categories() -> None:
    """List the generator categories."""
    from .generators import categories as all_categories

    typer.echo("\n".join(all_categories()))


@app.command("gpu-validate")
def gpu_validate(
    path: Path = typer.Argument(..., help="A dataset folder, or one .jsonl / .parquet file of rows."),
    limit: int | None = typer.Option(None, "--limit", help="Check only the first N rows."),
    device: str = typer.Option("cuda:0", "--device", help="CUDA device to run on."),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", help="Worker processes compiling in parallel (default: CPU cores)."
    ),
    report: Path | None = typer.Option(None, "--report", help="Write the JSON report here."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Prove the recorded CUDA on a GPU: regenerate it byte for byte, run it on its test vectors (GPU_TESTING.md)."""
    from .gpu import run_gpu_validation

    raise typer.Exit(
        run_gpu_validation(path, limit=limit, device=device, jobs=jobs, report_path=report, progress=progress)
    )


@app.command("eval")
def eval_command(
    predictions: Path = typer.Argument(
        ..., help='JSONL: one {"id", "cuda_forward", "cuda_backward" (optional)} per line; several per id for pass@k.'
    ),
    dataset: Path = typer.Option(..., "--dataset", help="A dataset folder (or one .jsonl / .parquet file of rows)."),
    split: str = typer.Option("test", "--split", help="The split the ids belong to."),
    device: str = typer.Option("cpu", "--device", help="cpu (structure + compile) or cuda:N (and run on the GPU)."),
    report: Path | None = typer.Option(None, "--report", help="Write the JSON report here."),
    seed: int | None = typer.Option(
        None, "--seed", help="Seed of the fresh inputs (default: secret, from os.urandom; recorded in the report)."
    ),
    workers: int | None = typer.Option(None, "--workers", "-w", help="GPU worker processes (default: CPU cores)."),
) -> None:
    """Score model-written CUDA against a dataset's rows: structure, NVRTC compile, GPU run (see GPU_TESTING.md)."""
    from .eval import EvalInputError, evaluate, format_report
    from .eval.pool import PoolError

    try:
        rep = evaluate(predictions, dataset, split=split, device=device, seed=seed, workers=workers, report_path=report)
    except (EvalInputError, PoolError) as exc:
        _fail(str(exc), 2)
    typer.echo(format_report(rep))
    if report:
        typer.echo(f"JSON report: {report}")


@app.command()
@expected_errors
def publish(
    path: Path = typer.Argument(..., help="A finished dataset folder."),
    repo_id: str = typer.Option(..., "--repo-id", help="ORG/NAME of the dataset repository on the Hugging Face Hub."),
    private: bool = typer.Option(False, "--private", help="Create the repository as private."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be uploaded, and where; upload nothing."),
) -> None:
    """Upload a dataset folder to the Hugging Face Hub in one commit (stale shards removed)."""
    from .publish.hub import publish as hub_publish

    plan = hub_publish(path, repo_id, private=private, dry_run=dry_run)
    typer.echo(plan.describe())


@app.command()
@expected_errors
def export(
    path: Path = typer.Argument(..., help="A finished dataset folder."),
    fmt: str = typer.Option("chat", "--format", "-f", help="chat (messages) or completion (prompt/completion)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output JSONL file."),
    forward_only: bool = typer.Option(False, "--forward-only", help="Answer with the forward kernel only."),
    config: str = typer.Option(
        "default", "--config", help="Dataset configuration: default (synthetic) or real (mined)."
    ),
) -> None:
    """Write instruction-tuning records (deterministic, documented prompt template)."""
    from .contracts.manifest import CONFIGS
    from .publish.export import export as run_export

    if fmt not in ("chat", "completion"):
        _fail(f"--format {fmt!r}: use chat or completion", 2)
    if config not in CONFIGS:
        _fail(f"--config {config!r}: use {' or '.join(CONFIGS)}", 2)
    n = run_export(path, fmt, out, include_backward=not forward_only, config=config)
    typer.echo(f"{n} records -> {out}")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
