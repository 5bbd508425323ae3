"""The same dataset from two installations at different paths is the same bytes.

Two environments are built the cheap, honest way: the installed ``warp`` package (its
Python files, headers and native libraries; its test and example folders left out) and
this project's ``cudagen_data`` are copied into two different prefixes, and the producer
runs in a subprocess per prefix with ``PYTHONPATH`` pointing at that copy, a different
working directory, ``HOME`` and ``TMPDIR``.  The interpreter and the other libraries
(NumPy, PyArrow ...) are shared: they write no paths into the data.  The test checks that
each run really imported Warp and the project from its own copy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

CATEGORIES = ("vector", "matrix", "atomic", "arithmetic", "math")
SEED = 6  # its first batch holds kernels that call Warp's library functions (warp/_src/math.py; generator 9)
LIBRARY_COMMENT = re.compile(r"// \S*warp/_src/\w+\.py:\d+")
# Values that measure time, wherever they occur (rows, stats, run state): zeroed before comparing.
TIMING_KEYS = frozenset(
    {"generation_time_ms", "time_ms", "generation_time_seconds", "pairs_per_second", "stage_seconds", "elapsed_seconds"}
)
CARD_TIMING_ROWS = ("| generation time |", "| throughput |")

DRIVER = """
import sys, orjson
import warp, cudagen_data
from cudagen_data.pipeline.config import ProduceConfig
from cudagen_data.pipeline.producer import produce
out, where = sys.argv[1], sys.argv[2]
with open(where, "wb") as f:
    f.write(orjson.dumps({"warp": warp.__file__, "cudagen_data": cudagen_data.__file__}))
config = ProduceConfig(count=10, categories=tuple(sys.argv[3].split(",")), seed=int(sys.argv[4]), batch_size=20)
produce(config, out, workers=0, progress=False)
"""


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # the 350 MB of native libraries: a hard link is a real file at the new path
    except OSError:  # another file system: copy the sources and headers, link the big binaries
        if os.path.getsize(src) > 2**20:
            os.symlink(src, dst)
        else:
            shutil.copy2(src, dst)


def make_environment(prefix: Path) -> Path:
    """A folder holding copies of ``warp`` (with its dist-info) and ``cudagen_data``."""
    import warp

    import cudagen_data

    site = prefix / "lib" / "site-packages"
    site.mkdir(parents=True)
    warp_dir = Path(warp.__file__).parent
    shutil.copytree(
        warp_dir,
        site / "warp",
        copy_function=_link_or_copy,
        ignore=shutil.ignore_patterns("tests", "examples", "__pycache__"),
    )
    for info in warp_dir.parent.glob("warp_lang-*.dist-info"):
        shutil.copytree(info, site / info.name)
    shutil.copytree(
        Path(cudagen_data.__file__).parent, site / "cudagen_data", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("home", "tmp", "work"):
        (prefix / name).mkdir()
    return site


def produce_in(prefix: Path) -> tuple[Path, dict]:
    site = make_environment(prefix)
    out = prefix / "work" / "dataset"
    where = prefix / "imported.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WARP_CACHE_PATH")}
    env.update(PYTHONPATH=str(site), HOME=str(prefix / "home"), TMPDIR=str(prefix / "tmp"))
    res = subprocess.run([sys.executable, "-c", DRIVER, str(out), str(where), ",".join(CATEGORIES), str(SEED)],
                         cwd=prefix / "work", env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return out, orjson.loads(where.read_bytes())


def _zero_timing(value):
    if isinstance(value, dict):
        return {k: (0 if k in TIMING_KEYS else _zero_timing(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_zero_timing(v) for v in value]
    return value


def comparable_files(folder: Path) -> dict[str, bytes]:
    """Every file of a dataset folder as bytes, timing values zeroed (and checksums of files
    holding timing values dropped)."""
    import pyarrow.parquet as pq

    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        data = path.read_bytes()
        if path.suffix == ".parquet":
            data = orjson.dumps(_zero_timing(pq.read_table(path).to_pylist()))
        elif path.suffix == ".jsonl":
            data = b"\n".join(orjson.dumps(_zero_timing(orjson.loads(line))) for line in data.splitlines())
        elif path.suffix == ".json":
            obj = _zero_timing(orjson.loads(data))
            for f in obj.get("files", []) if rel == "manifest.json" else []:
                f.pop("xxh3_128")
            if rel == ".cudagen/state.json":
                obj.pop("sizes")  # committed byte lengths of the JSONL files, which hold timing values
                obj.pop("digests")  # xxh3 of those JSONL bytes
                obj.pop("check")  # the state's checksum of itself, which covers the two above
                for shards in obj["shards"].values():
                    for shard in shards:
                        shard.pop("xxh3_128")  # checksums of Parquet shards, which hold timing values
            data = orjson.dumps(obj)
        elif rel == "README.md":
            data = b"\n".join(line for line in data.splitlines() if not line.decode().startswith(CARD_TIMING_ROWS))
        out[rel] = data
    return out


@pytest.mark.slow
def test_two_installations_at_different_paths_make_the_same_bytes(tmp_path):
    out_a, imported_a = produce_in(tmp_path / "env_a")
    out_b, imported_b = produce_in(tmp_path / "env_b_at_another_path")

    # each run used its own copy of Warp and of the project
    for prefix, imported in ((tmp_path / "env_a", imported_a), (tmp_path / "env_b_at_another_path", imported_b)):
        for name, file in imported.items():
            assert Path(file).is_relative_to(prefix / "lib" / "site-packages" / name), (name, file)

    rows = [orjson.loads(line) for p in (out_a / "jsonl").glob("*.jsonl") for line in p.read_bytes().splitlines()]
    assert len(rows) == 10
    assert any(LIBRARY_COMMENT.search(r["device_functions"]) for r in rows)  # the case that used to differ

    files_a, files_b = comparable_files(out_a), comparable_files(out_b)
    assert sorted(files_a) == sorted(files_b)
    differ = [rel for rel in files_a if files_a[rel] != files_b[rel]]
    assert not differ, f"differ between the two installations: {differ}"
