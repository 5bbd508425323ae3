"""tests/gpu/carry_dataset.py pack: a dataset too large for one device call goes over in parts
that join into the same rows, and a part changed on the way is caught by check."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from fixtures_rows import make_rows, write_folder

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

import carry_dataset  # noqa: E402


def _rows(folder: Path, files: list[str]) -> pa.Table:
    return pa.concat_tables([pq.read_table(folder / f) for f in files])


def test_packed_parts_join_into_the_same_rows_and_a_changed_part_fails_check(tmp_path):
    source = tmp_path / "ds"
    manifest = write_folder(source, make_rows(60), shard_rows=60)
    shards = [f["path"] for f in manifest["files"] if f["path"].startswith("data/")]
    size = sum((source / p).stat().st_size for p in shards)
    part_mib = size / 2.5 / 2**20  # small enough to need several shards and several parts
    assert carry_dataset.pack(source, tmp_path, part_mib) == 0
    parts = sorted(tmp_path.glob(".gpu_carry_[0-9]*"))
    assert len(parts) >= 2
    assert all(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) <= part_mib * 2**20 for p in parts)
    joined = tmp_path / "there"
    for part in parts:  # as the device calls do: cp -r .gpu_carry_N/. /root/carry/
        for f in part.rglob("*"):
            if f.is_file():
                dest = joined / f.relative_to(part)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(f.read_bytes())
    assert carry_dataset.check(joined) == 0
    packed = [f["path"] for f in carry_dataset.orjson.loads((joined / "dataset/manifest.json").read_bytes())["files"]]
    assert len(packed) > len(shards)
    by_split = lambda files, split: [f for f in files if f.split("/")[1].startswith(split)]  # noqa: E731
    for split in ("train", "validation", "test"):  # same rows, same order, split by split
        assert _rows(joined / "dataset", by_split(packed, split)).equals(_rows(source, by_split(shards, split)))
    victim = joined / "dataset" / packed[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    assert carry_dataset.check(joined) == 1
