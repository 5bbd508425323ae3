"""The GPU validation report: per-row verdicts, totals, the worst errors, timings; as
text for a person and as JSON for a file.

Vocabulary (GPU_TESTING.md explains it to a reader):

- *failure*: something is wrong with the row or with the GPU: a result outside its
  tolerance, a kernel that does not build or run, CUDA text that differs although
  the installed Warp is the version that made the row.
- *drift*: the CUDA text differs and the installed Warp is *not* the version that made
  the row.  Expected when Warp changes; not a failure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from ..numerics.tolerance import FALLBACK_ABS, FALLBACK_REL, FLOORS, ArrayCheck, K


@dataclass
class RowVerdict:
    pos: int
    row_id: str
    category: str
    kernel_name: str
    warp_version: str
    failures: list[tuple[str, str]] = field(default_factory=list)  # (check, message)
    drift: list[str] = field(default_factory=list)
    arrays: list[ArrayCheck] = field(default_factory=list)
    tolerance: str = ""  # the loosest tolerance any float array of the row was judged with
    twin: str = ""  # "ok", or why the row had no float64 twin
    build: str = ""
    ran: bool = False  # executed on the device (forward and backward)
    cuda_regenerated: str = ""  # "identical", "drift", "differs" or "" (not checked)
    cuda_compiled: str = ""  # the same for the compiled translation unit; "n/a" on a dry run

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass
class GpuReport:
    path: str
    device: str
    environment: dict = field(default_factory=dict)
    rows: list[RowVerdict] = field(default_factory=list)
    seconds: float = 0.0
    stage_seconds: dict = field(default_factory=dict)  # summed over workers
    jobs: int = 0
    worker_restarts: int = 0

    # ------------------------------------------------------------------ totals
    @property
    def failed(self) -> list[RowVerdict]:
        return [r for r in self.rows if not r.ok]

    @property
    def drifted(self) -> list[RowVerdict]:
        return [r for r in self.rows if r.drift]

    @property
    def ran(self) -> int:
        return sum(r.ran for r in self.rows)

    @property
    def ok(self) -> bool:
        """No failures, and at least one row actually ran.  Drift alone is not a failure."""
        return bool(self.rows) and not self.failed and self.ran > 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def by_category(self) -> dict[str, dict[str, int]]:
        out: dict[str, Counter] = {}
        for r in self.rows:
            c = out.setdefault(r.category, Counter())
            c["rows"] += 1
            c["passed"] += r.ok
            c["failed"] += not r.ok
            c["drift"] += bool(r.drift)
            c["ran"] += r.ran
        return {k: dict(v) for k, v in sorted(out.items())}

    def tolerance_counts(self) -> dict[str, int]:
        return dict(Counter(r.tolerance or "none" for r in self.rows))

    def twin_unavailable(self) -> dict[str, int]:
        """Why rows had no float64 twin (first 80 characters of the reason)."""
        return dict(Counter(r.twin[:80] for r in self.rows if r.twin not in ("ok", "")).most_common())

    def worst(self, n: int = 10) -> list[tuple[RowVerdict, ArrayCheck]]:
        """The n arrays closest to (or furthest beyond) their tolerance."""
        pairs = [(r, a) for r in self.rows for a in r.arrays if a.tolerance != "exact" or not a.ok]
        pairs.sort(key=lambda p: (p[1].ok, -p[1].ratio))
        return pairs[:n]

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "device": self.device,
            "environment": self.environment,
            "ok": self.ok,
            "rows": len(self.rows),
            "ran": self.ran,
            "passed": len(self.rows) - len(self.failed),
            "failed": len(self.failed),
            "drift": len(self.drifted),
            "seconds": round(self.seconds, 3),
            "rows_per_second": round(len(self.rows) / self.seconds, 2) if self.seconds else None,
            "jobs": self.jobs,
            "worker_restarts": self.worker_restarts,
            "stage_seconds_summed_over_workers": {k: round(v, 3) for k, v in sorted(self.stage_seconds.items())},
            "by_category": self.by_category(),
            "cuda_text": {
                "regenerated": dict(Counter(r.cuda_regenerated or "not checked" for r in self.rows)),
                "compiled": dict(Counter(r.cuda_compiled or "not checked" for r in self.rows)),
                "builds": dict(Counter(r.build for r in self.rows if r.build)),
            },
            "tolerance": {
                "rows_by_kind": self.tolerance_counts(),
                "twin_unavailable": self.twin_unavailable(),
                "settings": {"K": K, "floors": FLOORS, "fallback_rel": FALLBACK_REL, "fallback_abs": FALLBACK_ABS},
            },
            "worst": [_array_dict(r, a) for r, a in self.worst(20)],
            "failures": [
                {
                    "row_id": r.row_id,
                    "category": r.category,
                    "kernel_name": r.kernel_name,
                    "check": check,
                    "message": msg,
                }
                for r in self.failed
                for check, msg in r.failures
            ],
            "drift_rows": [
                {"row_id": r.row_id, "warp_version": r.warp_version, "parts": r.drift} for r in self.drifted
            ],
        }

    def write_json(self, path) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def _array_dict(r: RowVerdict, a: ArrayCheck) -> dict:
    d = {"row_id": r.row_id, "category": r.category, "kernel_name": r.kernel_name}
    d.update({k: v for k, v in asdict(a).items() if v is not None})
    for k in ("max_abs", "max_rel", "ratio"):
        if d[k] == float("inf"):
            d[k] = "inf"  # JSON has no infinity
    return d


def format_gpu_report(report: GpuReport, limit: int = 15) -> str:
    """One screen: verdict per category, CUDA text, tolerances, worst errors, failures, time."""
    env = report.environment
    lines = [f"GPU validation of {report.path}"]
    if report.device == "cpu":
        lines.append(
            f"  DRY RUN on the CPU (Warp {env.get('warp', '?')}): CUDA compiled to PTX and text-checked, not run; "
            "kernels ran on Warp's CPU backend"
        )
    else:
        lines.append(
            f"  device: {report.device} ({env.get('device_name', '?')}, sm_{env.get('device_arch', '?')}); "
            f"Warp {env.get('warp', '?')}, CUDA driver {env.get('cuda_driver', '?')}, toolkit "
            f"{env.get('cuda_toolkit', '?')}"
        )
    cats = report.by_category()
    width = max([len(c) for c in cats] + [8])
    lines.append("  " + "category".ljust(width) + "   rows  passed  failed  drift")
    for cat, c in cats.items():
        lines.append(
            f"  {cat.ljust(width)}  {c['rows']:5d}  {c['passed']:6d}  {c['failed']:6d}  {c.get('drift', 0):5d}"
        )
    d = report.to_dict()
    lines.append(f"  CUDA regenerated from python_source: {_counts(d['cuda_text']['regenerated'])}")
    lines.append(
        f"  CUDA compiled for the run vs recorded: {_counts(d['cuda_text']['compiled'])}; builds: "
        f"{_counts(d['cuda_text']['builds'])}"
    )
    lines.append(f"  tolerance used (loosest per row): {_counts(d['tolerance']['rows_by_kind'])}")
    for why, n in list(report.twin_unavailable().items())[:4]:
        lines.append(f"    no float64 twin ({n}): {why}")
    worst = report.worst(5)
    if worst:
        lines.append("  closest to tolerance (ratio = error / tolerance; > 1 fails):")
        for r, a in worst:
            lines.append(
                f"    {r.row_id[:16]} {r.category}/{r.kernel_name} {a.kind} {a.array!r}: abs {a.max_abs:.3g}, rel "
                f"{a.max_rel:.3g}, ratio {a.ratio:.3g} ({a.tolerance})"
            )
    fails = d["failures"]
    for f in fails[:limit]:
        lines.append(f"  FAIL {f['row_id'][:16]} [{f['category']}/{f['kernel_name']}] {f['check']}: {f['message']}")
    if len(fails) > limit:
        lines.append(f"  ... and {len(fails) - limit} more failures (see the JSON report)")
    if report.drifted:
        versions = Counter(r.warp_version for r in report.drifted)
        lines.append(
            f"  DRIFT {len(report.drifted)} rows: made with Warp {', '.join(versions)}, CUDA text differs under Warp "
            f"{env.get('warp', '?')} (not a failure)"
        )
    if report.worker_restarts:
        lines.append(
            f"  worker processes restarted after a crash or a lost CUDA context: {report.worker_restarts} (the rows "
            "at fault are reported)"
        )
    rate = f", {len(report.rows) / report.seconds:.1f} rows/s" if report.seconds else ""
    lines.append(
        f"  time: {report.seconds:.1f} s for {len(report.rows)} rows on {report.jobs or 1} worker(s){rate}; ran "
        f"{report.ran}"
    )
    verdict = "OK" if report.ok else "FAILED"
    if report.ok and report.drifted:
        verdict = "OK (with drift)"
    if not report.rows:
        verdict = "FAILED: no rows found"
    elif report.ran == 0 and not report.failed:
        verdict = "FAILED: no row had test vectors to run"
    lines.append(
        f"{verdict}: {len(report.rows) - len(report.failed)}/{len(report.rows)} rows passed, {len(report.failed)} "
        f"failed, {len(report.drifted)} drift"
    )
    return "\n".join(lines)


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"
