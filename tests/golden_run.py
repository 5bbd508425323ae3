"""The golden run: a small dataset whose every byte (timing aside) is pinned.

``snapshot(folder)`` turns a produced folder into normalized texts (timing fields zeroed,
checksums of files that hold timing dropped); ``tests/golden/golden.json`` keeps an xxh3
digest of each, a digest per row (so a mismatch names the row) and a few full rows.

Re-bless after a change that is MEANT to change rows (a new field, a generator version,
path normalization...):

    CUDAGEN_BLESS=1 PYTHONPATH=$PWD python -m pytest tests/test_golden.py -q

or ``python tests/golden_run.py --bless``, then commit tests/golden/golden.json with a
message that says why the output changed.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import orjson
import xxhash

GOLDEN = Path(__file__).parent / "golden" / "golden.json"
CATEGORIES = (
    "arithmetic",
    "vector",
    "matrix",
    "control_flow",
    "math",
    "atomic",
    "reduction",
    "scan",
    "stencil",
    "gemm",
    "softmax",
    "norm",
    "linear_act",
    "attention",
    "moe_routing",
)
CONFIG = dict(count=30, categories=CATEGORIES, seed=0, batch_size=16)
# A second, tiny run through a worker process in which slot 2 crashes the worker: it pins
# the crash isolation (bisection down to the slot) and a reject line in rejects.jsonl.
CRASH_CONFIG = dict(count=6, categories=("arithmetic", "math"), seed=0, batch_size=4)
CRASH_SLOTS = "2"
TIMING_ROW_FIELDS = (("metadata", "generation_time_ms"), ("compile", "time_ms"))
TIMING_STATS = ("generation_time_seconds", "pairs_per_second", "stage_seconds")
SPLITS = ("train", "validation", "test")
SAMPLE_ROWS = 3  # full rows kept in the golden file (the first ones of train)


def _strip_row(row: dict) -> dict:
    out = dict(row)
    for outer, inner in TIMING_ROW_FIELDS:
        if isinstance(out.get(outer), dict):
            out[outer] = {**out[outer], inner: 0.0}
    return out


def _digest(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Normalized contents of everything a run writes (name -> bytes)."""
    import pyarrow.parquet as pq

    out: dict[str, bytes] = {}
    for split in SPLITS:
        lines = (folder / "jsonl" / f"{split}.jsonl").read_bytes().splitlines()
        out[f"jsonl/{split}.jsonl"] = b"".join(orjson.dumps(_strip_row(orjson.loads(line))) + b"\n" for line in lines)
    out["rejects.jsonl"] = (folder / "rejects.jsonl").read_bytes()
    manifest = orjson.loads((folder / "manifest.json").read_bytes())
    for f in manifest["files"]:
        if f["path"] != "rejects.jsonl":
            f["xxh3_128"] = None  # these files hold timing fields
    out["manifest.json"] = orjson.dumps(manifest, option=orjson.OPT_INDENT_2)
    stats = orjson.loads((folder / "stats.json").read_bytes())
    for k in TIMING_STATS:
        stats.pop(k, None)
    out["stats.json"] = orjson.dumps(stats, option=orjson.OPT_INDENT_2)
    for path in sorted((folder / "data").glob("*.parquet")):
        table = pq.read_table(path)
        rows = b"".join(orjson.dumps(_strip_row(r)) + b"\n" for r in table.to_pylist())
        meta = pq.ParquetFile(path).metadata
        out[f"data/{path.name}"] = (
            str(table.schema).encode() + b"\n" + f"row_groups={meta.num_row_groups}\n".encode() + rows
        )
    card = (folder / "README.md").read_text()
    card = re.sub(r"\| generation time \| [^|]* \|", "| generation time | T |", card)
    card = re.sub(r"\| throughput \| [^|]* \|", "| throughput | T |", card)
    out["README.md"] = card.encode()
    return out


def golden_of(folder: Path, config: dict = CONFIG) -> dict:
    snap = snapshot(folder)
    rows = {}
    for split in SPLITS:
        for line in snap[f"jsonl/{split}.jsonl"].splitlines():
            row = orjson.loads(line)
            rows[row["id"]] = _digest(line)
    sample = [orjson.loads(line) for line in snap["jsonl/train.jsonl"].splitlines()[:SAMPLE_ROWS]]
    return {
        "config": {**config, "categories": list(config["categories"])},
        "files": {name: _digest(data) for name, data in sorted(snap.items())},
        "row_digests": rows,
        "stats": orjson.loads(snap["stats.json"]),
        "sample_rows": sample,
    }


def make_run(output: Path, workers: int = 0, config: dict = CONFIG) -> Path:
    try:
        from cudagen_data.pipeline import ProduceConfig, produce
    except ImportError:  # before the restructure
        from cudagen_data.pipeline.config import ProduceConfig
        from cudagen_data.pipeline.producer import produce

    produce(ProduceConfig(**config), output, workers=workers, progress=False)
    return output


def make_crash_run(output: Path) -> Path:
    import os

    os.environ["CUDAGEN_TEST_CRASH_SLOTS"] = CRASH_SLOTS  # read by the spawned worker
    try:
        return make_run(output, workers=1, config=CRASH_CONFIG)
    finally:
        del os.environ["CUDAGEN_TEST_CRASH_SLOTS"]


def golden_runs(tmp: Path) -> dict:
    return {
        "all_categories": golden_of(make_run(tmp / "run"), CONFIG),
        "worker_crash": golden_of(make_crash_run(tmp / "crash"), CRASH_CONFIG),
    }


def bless(golden: dict) -> None:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_bytes(orjson.dumps(golden, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        golden = golden_runs(Path(tmp))
    if "--bless" in sys.argv:
        bless(golden)
        print(f"wrote {GOLDEN}")
    else:
        print(orjson.dumps({k: g["files"] for k, g in golden.items()}, option=orjson.OPT_INDENT_2).decode())
