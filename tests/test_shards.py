"""Parquet shards streamed during the run: layout, --no-jsonl, crash points inside a commit."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from test_produce import CATS, cli, comparable, parquet_rows_of, rows_of

from cudagen_data.contracts import strip_timing
from cudagen_data.dataset import shards, store
from cudagen_data.dataset.store import DatasetFolder
from cudagen_data.pipeline.config import ProduceConfig
from cudagen_data.pipeline.producer import produce

CONFIG = dict(count=60, categories=CATS, seed=7, fast=True, batch_size=8, shard_rows=9)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    produce(ProduceConfig(**CONFIG), out, workers=0, progress=False)
    return out


def test_shards_hold_every_row_in_order_under_hub_names(reference):
    manifest = orjson.loads((reference / "manifest.json").read_bytes())
    parquet = [f for f in manifest["files"] if f["path"].endswith(".parquet")]
    by_split = parquet_rows_of(reference)
    jsonl = rows_of(reference)
    for split, shard_rows in by_split.items():
        assert [r for shard in shard_rows for r in shard] == jsonl[split]  # same rows, same order, timings included
        assert all(len(s) == 9 for s in shard_rows[:-1]) and 1 <= len(shard_rows[-1]) <= 9
        n = len(shard_rows)
        names = [f["path"] for f in parquet if f["split"] == split]
        assert names == [f"data/{split}-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
    assert len(by_split["train"]) >= 5  # the run crossed several shard boundaries
    for f in parquet:
        assert f["xxh3_128"] == store.file_checksum(reference / f["path"])
    assert sorted(p.name for p in (reference / "data").iterdir()) == sorted(
        os.path.basename(f["path"]) for f in parquet
    )
    assert not list((reference / ".cudagen" / "spool").iterdir()) and not list(
        (reference / ".cudagen" / "shards").iterdir()
    )


def test_no_jsonl_writes_the_same_shards_and_the_tools_read_them(reference, tmp_path):
    out = tmp_path / "nojsonl"
    res = cli(
        "produce",
        "--count",
        "60",
        "--categories",
        ",".join(CATS),
        "--seed",
        "7",
        "--fast",
        "--batch-size",
        "8",
        "--shard-rows",
        "9",
        "--workers",
        "0",
        "--no-jsonl",
        "--no-progress",
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    assert not (out / "jsonl").exists()
    a, b = comparable(reference), comparable(out)
    assert a["shards"] == b["shards"] and a["stats"] == b["stats"] and a["rejects"] == b["rejects"]
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["config"]["jsonl"] is False and "--no-jsonl" in manifest["command"]
    assert not any(f["path"].startswith("jsonl/") for f in manifest["files"])

    res = cli("validate", str(out), "--no-progress")
    assert res.returncode == 0, res.stdout + res.stderr
    res = cli("publish", str(out), "--repo-id", "org/name", "--dry-run")
    assert res.returncode == 0, res.stderr
    for f in manifest["files"]:
        if f["path"].endswith(".parquet"):
            assert f["path"] in res.stdout
    script = (
        "import sys, datasets\nd = datasets.load_dataset(sys.argv[1], cache_dir=sys.argv[2])\n"
        "print({k: v.num_rows for k, v in d.items()})\n"
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    res = subprocess.run(
        [sys.executable, "-c", script, str(out), str(tmp_path / "cache")], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, res.stderr[-2000:]
    stats = orjson.loads((out / "stats.json").read_bytes())
    assert eval(res.stdout.strip().splitlines()[-1]) == {s: n for s, n in stats["by_split"].items() if n}


class Crash(Exception):
    pass


@pytest.mark.parametrize(
    "point", ["before_shard", "after_shard_before_state", "after_state_before_unlink", "in_finish"]
)
def test_a_crash_inside_a_commit_resumes_to_the_same_output(reference, tmp_path, monkeypatch, point):
    """Stop the run at each step of a commit that fills a spool (and inside finish) and
    restart: the folder must come out as the uninterrupted run's."""
    calls = {"n": 0}
    real_close, real_save, real_finish = shards.close_spool, DatasetFolder.save_state, shards.finish

    def close_spool(root, state, split, index):
        calls["n"] += 1
        if point == "before_shard" and calls["n"] == 3:
            raise Crash
        real_close(root, state, split, index)
        if point == "after_shard_before_state" and calls["n"] == 3:
            raise Crash

    def save_state(self, state):
        real_save(self, state)
        if point == "after_state_before_unlink" and calls["n"] == 3:
            calls["n"] += 1
            raise Crash

    def finish(root, state, save):
        out = real_finish(root, state, save)
        if point == "in_finish":
            os.replace(root / out["train"][0]["path"], root / shards.staged_path("train", 0))  # half moved back
            raise Crash
        return out

    monkeypatch.setattr(shards, "close_spool", close_spool)
    monkeypatch.setattr(DatasetFolder, "save_state", save_state)
    monkeypatch.setattr(shards, "finish", finish)
    out = tmp_path / "crashed"
    with pytest.raises(Crash):
        produce(ProduceConfig(**CONFIG), out, workers=0, progress=False)
    monkeypatch.undo()
    result = produce(ProduceConfig(**CONFIG), out, workers=0, progress=False)
    assert result.resumed
    assert comparable(out) == comparable(reference)


def test_an_older_run_state_is_refused_with_one_line(tmp_path):
    out = tmp_path / "old"
    (out / ".cudagen").mkdir(parents=True)
    (out / ".cudagen" / "state.json").write_bytes(
        orjson.dumps(
            {"fingerprint": "x", "next_batch": 3, "sizes": {}, "tally": {}, "preambles": {}, "complete": False}
        )
    )
    res = cli(
        "produce",
        "--count",
        "5",
        "--categories",
        CATS[0],
        "--fast",
        "--workers",
        "0",
        "--no-progress",
        "--output",
        str(out),
    )
    assert res.returncode == 1 and "older cudagen-data" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_no_jsonl_with_worker_processes_gives_the_same_rows(reference, tmp_path):
    out = tmp_path / "b"
    produce(ProduceConfig(**{**CONFIG, "jsonl": False}), out, workers=2, progress=False)
    a = {s: [strip_timing(r) for shard in rs for r in shard] for s, rs in parquet_rows_of(reference).items()}
    b = {s: [strip_timing(r) for shard in rs for r in shard] for s, rs in parquet_rows_of(out).items()}
    assert a == b


def test_a_shard_written_with_the_next_group_decoded_ahead_is_the_plain_writers_bytes(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("i", pa.int64()), ("text", pa.string())])
    groups = [[{"i": g * 10 + j, "text": "x" * (g + j)} for j in range(n)] for g, n in enumerate((3, 1, 4, 2))]
    rows, _ = shards.write_parquet(iter(groups), tmp_path / "a.parquet", schema)
    with pq.ParquetWriter(tmp_path / "b.parquet", schema, compression="zstd") as plain:  # the reference
        for group in groups:
            plain.write_table(pa.Table.from_pylist(group, schema=schema), row_group_size=shards.ROW_GROUP_ROWS)
    assert rows == 10
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert pq.ParquetFile(tmp_path / "a.parquet").metadata.num_row_groups == 4

    def failing():  # a group that does not decode: its error reaches the caller, no file is left
        yield groups[0]
        yield [{"i": "not a number", "text": ""}]

    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        shards.write_parquet(failing(), tmp_path / "c.parquet", schema)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet"]
