"""Totals of an eval run: stage reached per candidate, compile@1 / correct@1 / pass@k by
category and difficulty, a one-screen table and the JSON report.

pass@k is the unbiased estimator of Chen et al. (2021): for a row with n candidates of
which c are correct, 1 - C(n-c, k) / C(n, k), averaged over the rows with n >= k.
compile@1 and correct@1 are pass@1 with "compiled" and "ran correctly" as success.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from math import comb

import orjson

from ..contracts import StageCounter
from .score import STAGES, Score
from .speed import FAST_P, timing_summary

KS = (1, 5, 10, 25, 100)


@dataclass
class Result:
    """One scored prediction."""

    line: int  # 1-based line of the predictions file
    row_id: str
    category: str
    difficulty: str
    score: Score

    def to_dict(self) -> dict:
        failed = self.score.failed
        return {"line": self.line, "id": self.row_id, "category": self.category, "difficulty": self.difficulty,
                "reached": self.score.reached, "reward": self.score.reward,
                "failed_stage": failed.name if failed else None, "reason": failed.detail if failed else "",
                "stages": self.score.to_dict()["stages"], "notes": self.score.notes,
                "input_sets": self.score.input_sets, "speedup": self.score.speedup,
                "timing": self.score.timing}  # fmt: skip


def pass_at_k(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _passed(r: Result, stage: str) -> bool:
    s = r.score.stage(stage)
    return bool(s.ok)


def metrics(results: list[Result], gpu: bool, timing: bool = False) -> dict:
    """compile@1, correct@1 (None without a GPU) and pass@k over rows; with ``timing``,
    fast_p and the geometric mean speedup over candidates (eval/speed.py)."""
    by_row: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_row[r.row_id].append(r)
    out: dict = {"rows": len(by_row), "candidates": len(results)}
    if not by_row:
        return out
    if timing:
        out["timing"] = timing_summary([r.score.speedup for r in results])
    for name, stage in (("structure@1", "structure"), ("compile@1", "compile"), ("correct@1", "run")):
        if stage == "run" and not gpu:
            out[name] = None
            continue
        out[name] = sum(sum(_passed(r, stage) for r in rs) / len(rs) for rs in by_row.values()) / len(by_row)
    if gpu:
        for k in KS:
            eligible = [rs for rs in by_row.values() if len(rs) >= k]
            if eligible and (k == 1 or any(len(rs) > 1 for rs in eligible)):
                out[f"pass@{k}"] = sum(
                    pass_at_k(len(rs), sum(_passed(r, "run") for r in rs), k) for rs in eligible
                ) / len(eligible)
                out[f"pass@{k}_rows"] = len(eligible)
    return out


@dataclass
class EvalReport:
    dataset: str
    split: str
    scorer: dict  # device, front end, full compile, fresh-input seed
    environment: dict
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def gpu(self) -> bool:
        return str(self.scorer.get("device", "")).startswith("cuda")

    @property
    def timing(self) -> bool:
        return bool(self.scorer.get("timing"))

    def totals(self) -> dict:
        groups = {"all": metrics(self.results, self.gpu, self.timing)}
        for key in ("category", "difficulty"):
            values = sorted({getattr(r, key) for r in self.results})
            groups[key] = {
                v: metrics([r for r in self.results if getattr(r, key) == v], self.gpu, self.timing) for v in values
            }
        return groups

    def reached(self) -> Counter:
        return Counter(r.score.reached for r in self.results)

    def stage_counters(self) -> dict[str, StageCounter]:
        """Per stage: candidates that entered it, passed it, and failed it by reason
        (the producer's stage/counter pattern, contracts/stats.py)."""
        out = {s: StageCounter() for s in STAGES}
        for r in self.results:
            for st in r.score.stages:
                if st.ok is True:
                    out[st.name].keep()
                elif st.ok is False:
                    out[st.name].reject(_reason_kind(st.detail))
        return out

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "dataset": self.dataset,
                "split": self.split,
                "scorer": self.scorer,
                "environment": self.environment,
                "run_stage": "done" if self.gpu else "not run: no GPU (the ladder stops after compile)",
                "totals": self.totals(),
                "reached": dict(self.reached()),
                "stages": {k: v.to_json() for k, v in self.stage_counters().items()},
                "seconds": self.seconds,
                "candidates_per_second": len(self.results) / self.seconds if self.seconds else None,
                "results": [r.to_dict() for r in self.results],
            },
            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS,
        )


def _reason_kind(detail: str) -> str:
    """A failure reason without its specifics, for counting
    (``forward: line 7: reads a clock or timer (`clock64`)`` -> ``reads a clock or timer``)."""
    text = re.sub(r"^(forward|backward): ", "", detail.split(";")[0])
    text = re.sub(r"^line \d+: ", "", text)
    m = re.search(r"error: (.*)", text)
    if m:  # a compiler diagnostic: its message, names elided
        head = text.split(":", 1)[0]
        text = f"{head}: {m.group(1)}"
    text = re.sub(r'"[^"]*"', '"..."', text)
    text = re.sub(r"\b\w+_[0-9a-f]{8}_cuda_kernel_(forward|backward)\b", "<kernel>", text)
    text = re.sub(r"`[^`]*`", "`...`", text)
    return text.split(" (")[0].strip()[:70] or "failed"


def _span(values) -> str:
    """``3`` or ``19-33``: the range of some counts."""
    values = sorted(set(values))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _pct(v) -> str:
    return "   n/a" if v is None else f"{100 * v:5.1f}%"


def format_report(rep: EvalReport, limit: int = 8) -> str:
    t = rep.totals()
    a = t["all"]
    n = len(rep.results)
    lines = [
        f"cudagen eval: {n} candidates for {a.get('rows', 0)} rows of {rep.dataset} (split {rep.split}) on "
        f"{rep.scorer['device']}",
        f"  compile: {rep.scorer['front_end']}; then {rep.scorer['full_compile']}",
        f"  fresh inputs drawn with seed {rep.scorer['fresh_input_seed']} (secret until this report)",
    ]
    ran = [r.score.input_sets for r in rep.results if r.score.input_sets]
    if ran:
        lines.append(f"  run stage: {_span(d['sets'] for d in ran)} input sets per candidate (recorded "
                     f"{_span(d['recorded'] for d in ran)}, fresh {_span(d['fresh'] for d in ran)}, adversarial "
                     f"{_span(d['adversarial'] for d in ran)}) at {_span(len(d['sizes']) for d in ran)} recorded "
                     "sizes per row; per result in the JSON report (input_sets)")  # fmt: skip
    if not rep.gpu:
        lines.append(
            "  run stage: NOT RUN (no GPU): the ladder stops after compile; correct@1 and pass@k need --device cuda:0"
        )
    ks = [k for k in KS if f"pass@{k}" in a]
    head = f"  {'group':<22}{'rows':>6}{'cands':>7}{'struct@1':>10}{'compile@1':>10}{'correct@1':>10}" + "".join(
        f"{'pass@' + str(k):>9}" for k in ks
    )
    lines.append(head)

    def row(label, m):
        if not m.get("rows"):
            return
        lines.append(
            "  "
            f"{label:<22}{m['rows']:>6}{m['candidates']:>7}{_pct(m.get('structure@1')):>10}{_pct(m.get('compile@1')):>10}"
            f"{_pct(m.get('correct@1')):>10}" + "".join(f"{_pct(m.get(f'pass@{k}')):>9}" for k in ks)
        )

    row("all", a)
    for key in ("category", "difficulty"):
        for v, m in t[key].items():
            row(f"{key[:4]}:{v}", m)
    if rep.timing and a.get("timing"):
        tm = a["timing"]
        geo = f"{tm['geomean_speedup']:.3f}x" if tm["geomean_speedup"] else "n/a"
        lines.append(
            f"  timing ({tm['timed']} of {tm['candidates']} candidates timed against the row's own kernel): "
            + ", ".join(f"fast_{p:g} {_pct(tm[f'fast_{p:g}']).strip()}" for p in FAST_P)
            + f"; geometric mean speedup {geo}"
        )
        for v, m in t["category"].items():
            if m.get("timing") and m["timing"]["timed"]:
                g = m["timing"]["geomean_speedup"]
                lines.append(f"    {v:<20} fast_1 {_pct(m['timing']['fast_1']).strip():>6}, geomean {g:.3f}x")
    reached = rep.reached()
    lines.append("  stage reached: " + ", ".join(f"{s} {reached.get(s, 0)}" for s in ("none",) + STAGES))
    for stage, counter in rep.stage_counters().items():
        if counter.rejected:
            top = ", ".join(f"{why} {c}" for why, c in sorted(counter.rejected.items(), key=lambda kv: -kv[1])[:3])
            lines.append(f"  failed at {stage} ({counter.entered - counter.kept} of {counter.entered}): {top}")
    shown = [r for r in rep.results if r.score.failed][:limit]
    for r in shown:
        f = r.score.failed
        lines.append(f"  FAIL line {r.line} {r.row_id} [{r.category}] {f.name}: {f.detail[:160]}")
    failed = sum(1 for r in rep.results if r.score.failed)
    if failed > len(shown):
        lines.append(f"  ... {failed - len(shown)} more failures in the JSON report")
    rate = f", {n / rep.seconds:.1f} candidates/s" if rep.seconds else ""
    lines.append(f"  time: {rep.seconds:.1f} s{rate}")
    return "\n".join(lines)
