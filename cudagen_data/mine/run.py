"""`cudagen mine` as a library call: files -> workers -> rows, rejects and figures."""

from __future__ import annotations

import ast
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..contracts.reject import RealReject
from ..contracts.row import RealRow
from ..contracts.stats import RunStats
from .argspecs import unfillable_kind
from .discover import SourceFile, find_files, kernel_defs
from .pool import FileResult, Options, mine_files
from .rows import CATEGORY, build_rows, new_stats

DEFAULT_OPTIONS = Options()  # frozen: one shared default is safe


@dataclass
class MineResult:
    rows: list[RealRow]
    splits: list[str]  # each row's split, in the order of ``rows``
    rejects: list[dict]
    preambles: dict[str, str]
    stats: dict = field(default_factory=dict)
    files: list[FileResult] = field(default_factory=list)

    def by_split(self) -> dict[str, list[RealRow]]:
        """The rows of each split (what :func:`.folder.write_real` writes), in order."""
        out: dict[str, list[RealRow]] = {}
        for row, split in zip(self.rows, self.splits, strict=True):
            out.setdefault(split, []).append(row)
        return out


def mine_paths(
    paths: list[str | os.PathLike] | None,
    *,
    workers: int = 2,
    options: Options = DEFAULT_OPTIONS,
    synthetic_shapes: set[str] | None = None,
    ratios=None,
    progress=None,
) -> MineResult:
    """Mine ``paths`` (the installed Warp with none); see the package docstring."""
    return mine_sources(
        find_files(paths),
        workers=workers,
        options=options,
        synthetic_shapes=synthetic_shapes,
        ratios=ratios,
        progress=progress,
    )


def mine_sources(
    files: list[SourceFile],
    *,
    workers: int = 2,
    options: Options = DEFAULT_OPTIONS,
    synthetic_shapes: set[str] | None = None,
    ratios=None,
    progress=None,
) -> MineResult:
    """Mine these files (as :func:`.discover.find_files` lists them)."""
    import warp

    started = time.perf_counter()
    results: list[FileResult] = []
    for res in mine_files(files, options, workers=max(1, workers)):
        results.append(res)
        if progress is not None:
            progress(res)
    for res in results:
        _expand_file_rejects(res)
    kwargs = {} if ratios is None else {"ratios": ratios}
    counts = new_stats()
    rows, splits, rejects, preambles = build_rows(
        results, warp_version=warp.__version__, synthetic_shapes=synthetic_shapes, stats=counts, **kwargs
    )
    for res in results:
        counts.add_seconds(res.stage_seconds)
    counts.elapsed_seconds = time.perf_counter() - started
    stats = compute_stats(files, results, rows, counts)
    return MineResult(rows, splits, rejects, preambles, stats, results)


def _expand_file_rejects(res: FileResult) -> None:
    """A file-level failure (timeout, crash) becomes one reject per kernel it declares."""
    file_level = [r for r in res.rejects if r.kernel == "" and r.line == 0]
    if not file_level:
        return
    try:
        defs = kernel_defs(ast.parse(Path(res.src.path).read_text(encoding="utf-8", errors="replace")))
    except SyntaxError:
        defs = []
    covered = {k.line for k in res.kernels} | {r.line for r in res.rejects if r.kernel}
    kept = [r for r in res.rejects if r not in file_level]
    for r in file_level:
        missing = [d for d in defs if d.line not in covered]
        kept += [RealReject(r.path, d.line, d.qualname, r.reason, r.detail) for d in missing] or (
            [r] if not defs else []
        )
    res.rejects = kept


def compute_stats(files: list[SourceFile], results: list[FileResult], rows: list[RealRow], counts: RunStats) -> dict:
    """stats.json → ``real``: the run's counters (kernels through mining's stages, rows by
    split and gradient status, seconds) and what the rows say about their runs."""
    declared = 0
    for src in files:
        try:
            declared += len(kernel_defs(ast.parse(Path(src.path).read_text(encoding="utf-8", errors="replace"))))
        except SyntaxError:
            pass
    compiled = counts.stages["compile"]
    executed = sum(1 for row in rows if row.provenance.executed)
    not_run = Counter(_reason_class(row.provenance.not_executed_reason) for row in rows if not row.provenance.executed)
    return {
        "files": len(files),
        "kernel_definitions": declared,
        "kernels_generated": counts.stages["extract"].kept,  # overloads count one each
        "compile_checked": compiled.entered,
        "compile_passed": compiled.kept,
        "compile_pass_rate": compiled.pass_rate(),
        "compile_levels": dict(
            sorted(Counter(k.compile_level for r in results for k in r.kernels if k.compile_ok is not None).items())
        ),
        "rows": counts.accepted[CATEGORY],
        "executed": executed,
        "executed_rate": round(executed / len(rows), 4) if rows else None,
        "by_split": {split: n for split, n in sorted(counts.by_split.items()) if n},
        "rejects_by_reason": counts.rejects_by_reason(),
        "stages": {name: counter.to_json() for name, counter in counts.stages.items()},
        "not_executed_by_reason": dict(sorted(not_run.items())),
        "unfillable_arguments": dict(
            Counter(
                unfillable_kind(row.provenance.not_executed_reason)
                for row in rows
                if row.provenance.not_executed_reason.startswith("argument ")
            ).most_common()
        ),
        # executed rows that keep only part of their outputs/gradients: the rest depend on thread order
        "executed_partly_order_dependent": sum(1 for row in rows if row.provenance.order_dependent),
        # rows by gradient_check.status; "mismatch": the adjoint disagrees with finite
        # differences (the row is kept, it is real code: filter on the status)
        "gradient_check": dict(sorted(counts.gradient_check.get(CATEGORY, {}).items())),
        "adjoint_mismatch_constructs": dict(
            sorted(
                Counter(
                    _construct(row.gradient_check.reason) for row in rows if row.gradient_check.status == "mismatch"
                ).items()
            )
        ),
        "seconds": round(counts.elapsed_seconds, 3),  # timing: differs between runs
        "stage_seconds": {k: round(v, 3) for k, v in sorted(counts.stage_seconds.items())},  # worker time, summed
    }


def _construct(reason: str) -> str:
    """The Warp construct a mismatch's reason names ("unknown" where none)."""
    return reason.split("; construct: ", 1)[1] if "; construct: " in reason else "unknown"


def _reason_class(text: str) -> str:
    """A short class for a not-executed reason (the full text stays in the row)."""
    if text.startswith("argument "):
        return "argument type cannot be filled"
    if text.startswith(("reads past the end", "reads before the start", "reads or writes outside")):
        return "reads outside its arrays"  # found by bounds.py
    if text.startswith(("writes past the end", "writes before the start")):
        return "writes outside its arrays"
    for prefix in (
        "outputs depend on thread order",
        "writes no array",
        "tile kernel",
        "run crashed",
        "run hung",
        "runs stopped",
        "CPU build failed",
        "run failed",
        "output ",
        "gradient of",
        "array access",
    ):
        if text.startswith(prefix):
            return prefix
    return text or "unknown"


def format_summary(stats: dict, output, rejects_file: str) -> str:
    """What `cudagen mine` prints at the end."""
    lines = [
        f"{stats['files']} files, {stats['kernel_definitions']} kernel definitions, "
        f"{stats['kernels_generated']} kernels generated (overloads count one each)",
        f"compile check ({', '.join(stats.get('compile_levels') or {}) or 'none'}): "
        f"{stats['compile_passed']}/{stats['compile_checked']} passed",
        f"rows: {stats['rows']} ({', '.join(f'{k} {v}' for k, v in stats['by_split'].items())}), "
        f"executed with test vectors: {stats['executed']}",
        f"gradient check: {', '.join(f'{k} {v}' for k, v in stats.get('gradient_check', {}).items()) or 'none'}",
        f"not mined: {sum(stats['rejects_by_reason'].values())} "
        f"({', '.join(f'{k} {v}' for k, v in stats['rejects_by_reason'].items())}) -> {Path(output) / rejects_file}",
        f"time: {stats['seconds']:.1f} s -> {output} (configuration 'real')",
    ]
    return "\n".join(lines)
