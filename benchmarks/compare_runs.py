"""Are two produced dataset folders the same, byte for byte, timing fields aside?

    python benchmarks/compare_runs.py FOLDER_A FOLDER_B

Normalizes both with the golden run's ``snapshot`` (tests/golden_run.py: timing fields
zeroed, checksums of files that hold timing dropped, the card's timing lines blanked)
and compares every file; for a differing rows file, names the first differing rows.
Exit 0 when identical, 1 when not.  Used to show that a speed change left the rows alone
(issue #28: a 1,000-pair run before and after).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from golden_run import snapshot  # noqa: E402


def differences(a: Path, b: Path) -> list[str]:
    snap_a, snap_b = snapshot(a), snapshot(b)
    found = []
    for name in sorted(set(snap_a) | set(snap_b)):
        da, db = snap_a.get(name), snap_b.get(name)
        if da == db:
            continue
        if da is None or db is None:
            found.append(f"{name}: only in {'B' if da is None else 'A'}")
            continue
        la, lb = da.splitlines(), db.splitlines()
        first = next((i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y), min(len(la), len(lb)))
        found.append(f"{name}: differs ({len(la)} vs {len(lb)} lines; first difference at line {first + 1})")
    return found


def main() -> None:
    if len(sys.argv) != 3:
        print("error: usage: compare_runs.py FOLDER_A FOLDER_B", file=sys.stderr)
        raise SystemExit(2)
    a, b = Path(sys.argv[1]), Path(sys.argv[2])
    for folder in (a, b):
        if not (folder / "stats.json").is_file():
            print(f"error: {folder}: not a finished dataset folder (no stats.json)", file=sys.stderr)
            raise SystemExit(2)
    found = differences(a, b)
    snap = snapshot(a)
    rows = sum(len(snap[f"jsonl/{s}.jsonl"].splitlines()) for s in ("train", "validation", "test"))
    if found:
        print(f"DIFFERENT ({len(found)} files):")
        for line in found:
            print(f"  {line}")
        raise SystemExit(1)
    print(f"IDENTICAL: {len(snap)} files, {rows} rows, timing fields aside")


if __name__ == "__main__":
    main()
