"""The golden run: a small dataset made before the restructure (issue #15) must come out
byte for byte the same (timing fields aside; see tests/golden_run.py for what is
normalized).

When a change is MEANT to change the output (a new row field, a generator version, CUDA
path normalization, a corrected card text), re-bless and commit the new golden file,
saying in the commit message why the output changed:

    CUDAGEN_BLESS=1 PYTHONPATH=$PWD python -m pytest tests/test_golden.py -q
    # or: PYTHONPATH=$PWD python tests/golden_run.py --bless

A failure names every file that differs and, for the JSONL files, the row ids.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))
import golden_run  # noqa: E402


def _differences(want: dict, got: dict) -> list[str]:
    assert got["config"] == want["config"], "the golden run's config changed: re-bless on purpose"
    problems = [
        f"{name}: differs"
        for name in sorted(set(want["files"]) | set(got["files"]))
        if want["files"].get(name) != got["files"].get(name)
    ]
    rows = [
        f"row {rid}: {'missing' if rid not in got['row_digests'] else 'differs'}"
        for rid, d in want["row_digests"].items()
        if got["row_digests"].get(rid) != d
    ]
    rows += [f"row {rid}: new" for rid in got["row_digests"] if rid not in want["row_digests"]]
    if problems or rows:
        stats = [
            f"stats.json {k}: {want['stats'].get(k)!r} -> {got['stats'].get(k)!r}"
            for k in sorted(set(want["stats"]) | set(got["stats"]))
            if want["stats"].get(k) != got["stats"].get(k)
        ]
        return problems + rows + stats
    assert got["sample_rows"] == want["sample_rows"]
    return []


def test_golden_runs_are_unchanged(tmp_path):
    got = golden_run.golden_runs(tmp_path)
    if os.environ.get("CUDAGEN_BLESS") == "1":
        golden_run.bless(got)
        return
    want = orjson.loads(golden_run.GOLDEN.read_bytes())
    assert sorted(got) == sorted(want)
    problems = [f"{run}: {p}" for run in sorted(want) for p in _differences(want[run], got[run])]
    assert not problems, "golden run changed (set CUDAGEN_BLESS=1 to accept on purpose):\n" + "\n".join(problems)
    assert got["worker_crash"]["stats"]["rejects_by_reason"] == {"worker_crash": 1}  # the crash path ran
