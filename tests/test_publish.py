"""Tests of cudagen_data.publish: splits, dataset card, exports, Hub upload plan.

Nothing here touches the network or $HOME: ``load_dataset`` runs in a subprocess with
the Hub offline and HOME/HF_HOME in a temporary directory; publishing goes through a
fake HfApi.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import fixtures_rows
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from cudagen_data.contracts import SPLITS
from cudagen_data.contracts.row import COLUMNS, ROW_SCHEMA
from cudagen_data.publish import PublishError, card, export, hub
from cudagen_data.publish.splits import assign_split, split_point, validate_ratios

N_ROWS = 200
RATIOS = (0.8, 0.1, 0.1)  # wide test splits so a small fixture fills all three


@pytest.fixture(scope="module")
def rows():
    return fixtures_rows.make_rows(N_ROWS)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("ds") / "out"
    fixtures_rows.write_folder(path, rows, ratios=RATIOS)
    return path


def _manifest(folder: Path) -> dict:
    return orjson.loads((folder / "manifest.json").read_bytes())


def _shards(manifest: dict) -> list[dict]:
    """The manifest's Parquet entries (it also lists the JSONL files and rejects.jsonl)."""
    return [f for f in manifest["files"] if f["path"].endswith(".parquet")]


def _split_files(manifest: dict) -> dict[str, list[str]]:
    out = defaultdict(list)
    for f in _shards(manifest):
        out[f["split"]].append(f["path"])
    return dict(out)


def _front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    head, _, _ = text[4:].partition("\n---\n")
    return yaml.safe_load(head)


# ----------------------------------------------------------------------------- splits


def test_split_names():
    assert SPLITS == ("train", "validation", "test")


def test_assign_split_is_pinned_across_versions():
    # Split membership must never change for a given hash: a change would move kernels
    # between train and test of datasets already published.
    assert split_point("0000000000000000") == 10333013738508426659
    assert split_point("deadbeefcafef00d") == 1968811861126465485
    assert assign_split("0123456789abcdef", (0.5, 0.25, 0.25)) == "test"
    assert assign_split("0123456789ABCDEF", (0.5, 0.25, 0.25)) == "test"  # case-insensitive


@pytest.mark.parametrize("ratios", [(0.98, 0.01, 0.01), (0.8, 0.1, 0.1), (0.5, 0.3, 0.2)])
def test_ratios_hold_over_random_hashes(ratios):
    rng = random.Random(1234)
    n = 20_000
    counts = Counter(assign_split(f"{rng.getrandbits(64):016x}", ratios) for _ in range(n))
    for split, ratio in zip(SPLITS, ratios, strict=False):
        sigma = (n * ratio * (1 - ratio)) ** 0.5
        assert abs(counts[split] - n * ratio) < 5 * sigma + 1, (split, counts)


def test_zero_ratio_gives_empty_split():
    rng = random.Random(5)
    hashes = [f"{rng.getrandbits(64):016x}" for _ in range(3000)]
    assert {assign_split(h, (1.0, 0.0, 0.0)) for h in hashes} == {"train"}
    assert "validation" not in {assign_split(h, (0.9, 0.0, 0.1)) for h in hashes}
    assert "test" not in {assign_split(h, (0.9, 0.1, 0.0)) for h in hashes}


@pytest.mark.parametrize(
    "ratios, message",
    [
        ((0.9, 0.1), "three numbers"),
        ((0.9, 0.05, 0.1), "sum to 1"),
        ((1.1, -0.05, -0.05), ">= 0"),
        ((float("nan"), 0.5, 0.5), "finite"),
        (("a", "b", "c"), "three numbers"),
        (None, "three numbers"),
    ],
)
def test_invalid_ratios_raise(ratios, message):
    with pytest.raises(ValueError, match=message):
        validate_ratios(ratios)
    with pytest.raises(ValueError):
        assign_split("0123456789abcdef", ratios)


@pytest.mark.parametrize("bad", ["", "0123", "0123456789abcdefg", "0123456789abcdeg", 12345, None])
def test_invalid_shape_hash_raises(bad):
    with pytest.raises(ValueError, match="16 hex digits"):
        assign_split(bad)


def test_same_shape_never_straddles_splits(folder):
    # Rows that share a shape hash (same kernel up to names/constants) land in one split.
    shapes_by_split = defaultdict(set)
    for f in _shards(_manifest(folder)):
        table = pq.read_table(folder / f["path"], columns=["shape_hash"])
        shapes_by_split[f["split"]] |= set(table.column("shape_hash").to_pylist())
    assert set(shapes_by_split) == set(SPLITS)
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not shapes_by_split[a] & shapes_by_split[b], (a, b)
    # and the fixture really has shapes shared by several rows, so this tested something
    counts = Counter(r["shape_hash"] for r in fixtures_rows.make_rows(N_ROWS))
    assert max(counts.values()) > 1


# ----------------------------------------------------------------------------- card


def test_card_yaml_header(folder):
    header = _front_matter((folder / "README.md").read_text(encoding="utf-8"))
    manifest = _manifest(folder)
    assert header["license"] == "apache-2.0"
    assert {"cuda", "warp", "code", "gpu"} <= set(header["tags"])
    assert set(header["task_categories"]) <= {"text-generation", "translation", "text2text-generation"}
    assert header["size_categories"] == ["n<1K"]
    (config,) = header["configs"]
    assert config["config_name"] == "default"
    assert {d["split"]: d["path"] for d in config["data_files"]} == _split_files(manifest)
    expected_rows = {s: sum(f["rows"] for f in _shards(manifest) if f["split"] == s) for s in SPLITS}
    assert {s["name"]: s["num_examples"] for s in header["dataset_info"]["splits"]} == expected_rows
    assert sum(expected_rows.values()) == N_ROWS


def test_card_features_round_trip_through_datasets(folder):
    from datasets import Features
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCardData

    card_data = DatasetCardData(**_front_matter((folder / "README.md").read_text(encoding="utf-8")))
    infos = DatasetInfosDict.from_dataset_card_data(card_data)
    features = infos["default"].features
    assert features == Features.from_arrow_schema(ROW_SCHEMA)
    assert features.arrow_schema.equals(ROW_SCHEMA)
    assert {s: infos["default"].splits[s].num_examples for s in SPLITS} == {
        s: n for s, n in orjson.loads((folder / "stats.json").read_bytes())["by_split"].items()
    }
    configs = MetadataConfigs.from_dataset_card_data(card_data)
    assert configs.get_default_config_name() == "default"


@pytest.mark.parametrize(
    "n, bucket",
    [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (99_999, "10K<n<100K"), (1_000_000, "1M<n<10M"), (10**13, "n>1T")],
)
def test_size_category(n, bucket):
    assert card.size_category(n) == bucket


def test_every_column_is_documented():
    assert set(card.COLUMN_DOCS) == set(COLUMNS)
    assert all(card.COLUMN_DOCS[c].strip() for c in COLUMNS)
    for field in ROW_SCHEMA:
        if pa.types.is_struct(field.type):
            assert set(card.SUBFIELD_DOCS[field.name]) == {c.name for c in field.type}


def test_card_body(folder):
    text = (folder / "README.md").read_text(encoding="utf-8")
    body = text.split("\n---\n", 1)[1]
    for column in COLUMNS:
        assert f"| `{column}` |" in body
    for sub in ("metadata.generation_time_ms", "compile.arch", "metadata.has_backward"):
        assert f"`{sub}`" in body
    assert "warp-lang==1.19.0" in body
    assert "cudagen produce --count 200 --seed 7" in body
    assert 'load_dataset("ORG/NAME")' in body
    assert '"output_grads"' in body and '"input_grads"' in body  # test-vector format
    assert export.SYSTEM_PROMPT in body and export.USER_TEMPLATE in body
    assert "| `arithmetic` | 80 | 40.0% |" in body
    assert "| NVRTC compile pass rate | 99.5% |" in body  # 200 rows, 1 compile_error (fixtures_rows)
    assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b", text), "no dates in the card"


def test_card_tables_are_well_formed(folder):
    # Every row of a Markdown table has as many cells as its header ("|" in a cell is escaped).
    text = (folder / "README.md").read_text(encoding="utf-8")
    n_tables = 0
    for block in re.findall(r"(?:^\|.*\|\n)+", text, flags=re.M):
        lines = block.strip("\n").split("\n")
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in lines}
        assert len(widths) == 1, lines
        n_tables += 1
    assert n_tables >= 6


def test_card_repo_id_and_num_bytes(folder):
    manifest = _manifest(folder)
    stats = orjson.loads((folder / "stats.json").read_bytes())
    files = _split_files(manifest)
    sizes = card.split_num_bytes(folder, files)
    assert all(v > 0 for v in sizes.values())
    text = card.render_card(manifest, stats, ROW_SCHEMA, files, repo_id="my-org/warp-cuda", num_bytes=sizes)
    assert 'load_dataset("my-org/warp-cuda")' in text
    assert {s["name"]: s["num_bytes"] for s in _front_matter(text)["dataset_info"]["splits"]} == sizes


def test_card_rejects_inconsistent_counts(folder):
    manifest = _manifest(folder)
    stats = orjson.loads((folder / "stats.json").read_bytes())
    stats["by_split"]["train"] += 1
    with pytest.raises(PublishError, match="by_split"):
        card.render_card(manifest, stats, ROW_SCHEMA, _split_files(manifest))
    with pytest.raises(PublishError, match="no data files"):
        card.render_card(manifest, {}, ROW_SCHEMA, {"train": []})
    with pytest.raises(PublishError, match="relative"):
        card.render_card(manifest, {}, ROW_SCHEMA, {"train": ["/abs/train.parquet"]})


def test_empty_split_is_left_out(folder):
    manifest = _manifest(folder)
    files = _split_files(manifest)
    files["test"] = []
    stats = orjson.loads((folder / "stats.json").read_bytes())
    header = _front_matter(card.render_card(manifest, stats, ROW_SCHEMA, files))
    assert [d["split"] for d in header["configs"][0]["data_files"]] == ["train", "validation"]
    assert [s["name"] for s in header["dataset_info"]["splits"]] == ["train", "validation"]


def test_public_command_hides_absolute_paths():
    cmd = card.public_command("cudagen produce --count 10 --seed 3 --out /home/alice/runs/x --log=~/x.log --fast")
    assert cmd == "cudagen produce --count 10 --seed 3 --out OUT_DIR --log=OUT_DIR --fast"
    assert card.public_command("cudagen produce --count 5 --seed 1") == "cudagen produce --count 5 --seed 1"


def test_load_dataset_reads_every_split(folder, tmp_path):
    # In a subprocess: offline hub, HOME and all HF caches inside tmp_path.
    script = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from datasets import Features, load_dataset
from cudagen_data.contracts.row import ROW_SCHEMA
ds = load_dataset({str(folder)!r}, cache_dir={str(tmp_path / "cache")!r})
expected = Features.from_arrow_schema(ROW_SCHEMA)
print(json.dumps({{s: {{"rows": d.num_rows, "features_ok": d.features == expected,
                  "first_id": d[0]["id"], "first_meta": d[0]["metadata"]}} for s, d in ds.items()}}))
"""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))},
        "HOME": str(tmp_path / "home"),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    manifest = _manifest(folder)
    assert list(result) == list(SPLITS)
    for split in SPLITS:
        files = [f for f in _shards(manifest) if f["split"] == split]
        assert result[split]["rows"] == sum(f["rows"] for f in files)
        assert result[split]["features_ok"] is True
        first = pq.read_table(folder / files[0]["path"]).slice(0, 1).to_pylist()[0]
        assert result[split]["first_id"] == first["id"]
        assert result[split]["first_meta"] == first["metadata"]
    assert any((tmp_path / "cache").iterdir())  # the Arrow cache went where it was told


# ----------------------------------------------------------------------------- export


def _read_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _rows_in_export_order(folder: Path) -> list[tuple[str, dict]]:
    manifest = _manifest(folder)
    files = sorted(_shards(manifest), key=lambda f: (SPLITS.index(f["split"]), f["path"]))
    return [(f["split"], r) for f in files for r in pq.read_table(folder / f["path"]).to_pylist()]


def test_export_chat(folder, tmp_path):
    out = tmp_path / "chat.jsonl"
    assert export.export(folder, "chat", out) == N_ROWS
    records = _read_jsonl(out)
    expected = _rows_in_export_order(folder)
    assert [(r["split"], r["id"]) for r in records] == [(s, row["id"]) for s, row in expected]
    assert [r["split"] for r in records] == sorted((r["split"] for r in records), key=SPLITS.index)
    for record, (_split, row) in zip(records, expected, strict=False):
        assert set(record) == {"id", "split", "messages"}
        assert record["split"] == assign_split(row["shape_hash"], RATIOS)
        system, user, assistant = record["messages"]
        assert (system["role"], user["role"], assistant["role"]) == ("system", "user", "assistant")
        assert system["content"] == export.SYSTEM_PROMPT
        assert user["content"].startswith("Translate this NVIDIA Warp kernel to the CUDA C++ that Warp generates")
        assert f"```python\n{row['python_source'].rstrip()}\n```" in user["content"]
        answer = assistant["content"]
        assert answer.startswith("```cuda\n") and answer.endswith("\n```")
        assert row["cuda_forward"].strip("\n") in answer
        if row["cuda_backward"]:
            assert row["cuda_backward"].strip("\n") in answer
            assert answer.index("cuda_kernel_forward") < answer.index("cuda_kernel_backward")
            assert "backward (adjoint) kernel" in user["content"]
        else:
            # a forward-only row: the prompt (outside the source, which says enable_backward: False)
            # asks for no backward
            prompt = user["content"].replace(f"```python\n{row['python_source'].rstrip()}\n```", "")
            assert "cuda_kernel_backward" not in answer and "backward" not in prompt
        if row["device_functions"]:
            assert answer.index("static CUDA_CALLABLE") < answer.index("cuda_kernel_forward")
            assert "preceded by the device functions" in user["content"]
        else:
            assert "CUDA_CALLABLE" not in answer and "device functions" not in user["content"]
    # the fixture covers all four cases above
    assert any(not r["cuda_backward"] for _, r in expected) and any(r["device_functions"] for _, r in expected)


def test_export_completion_matches_chat(folder, tmp_path):
    assert export.export(folder, "completion", tmp_path / "c.jsonl") == N_ROWS
    assert export.export(folder, "chat", tmp_path / "chat.jsonl") == N_ROWS
    completions = _read_jsonl(tmp_path / "c.jsonl")
    chats = _read_jsonl(tmp_path / "chat.jsonl")
    for comp, chat in zip(completions, chats, strict=False):
        assert set(comp) == {"id", "split", "prompt", "completion"}
        assert (comp["id"], comp["split"]) == (chat["id"], chat["split"])
        user, assistant = chat["messages"][1]["content"], chat["messages"][2]["content"]
        assert comp["prompt"].endswith("\n\n```cuda\n") and comp["completion"].endswith("\n```")
        assert comp["prompt"] + comp["completion"] == user + "\n\n" + assistant


def test_export_forward_only(folder, tmp_path):
    out = tmp_path / "fwd.jsonl"
    assert export.export(folder, "chat", out, include_backward=False) == N_ROWS
    for record in _read_jsonl(out):
        assert "cuda_kernel_backward" not in record["messages"][2]["content"]
        prompt = record["messages"][1]["content"]
        prompt = (
            prompt[: prompt.find("```python")] + prompt[prompt.rfind("```") :]
        )  # the source may say enable_backward
        assert "backward" not in prompt


@pytest.mark.parametrize("fmt", ["chat", "completion"])
def test_export_is_deterministic(folder, tmp_path, fmt):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    export.export(folder, fmt, a)
    export.export(folder, fmt, b)
    data = a.read_bytes()
    assert data == b.read_bytes() and len(data) > 0
    first = data.split(b"\n", 1)[0]
    keys = json.loads(first, object_pairs_hook=lambda pairs: [k for k, _ in pairs])
    assert keys == sorted(keys)  # orjson OPT_SORT_KEYS
    assert data.endswith(b"\n") and data.count(b"\n") == N_ROWS


def test_export_errors(folder, tmp_path):
    with pytest.raises(PublishError, match="manifest.json"):
        export.export(tmp_path, "chat", tmp_path / "x.jsonl")
    with pytest.raises(PublishError, match="not one of"):
        export.export(folder, "alpaca", tmp_path / "x.jsonl")
    with pytest.raises(PublishError, match="not a directory"):
        export.export(tmp_path / "nope", "chat", tmp_path / "x.jsonl")

    broken = tmp_path / "broken"
    fixtures_rows.write_folder(broken, fixtures_rows.make_rows(30), ratios=RATIOS)
    manifest = _manifest(broken)
    victim = manifest["files"][0]["path"]
    (broken / victim).unlink()
    with pytest.raises(PublishError, match=re.escape(victim)):
        export.export(broken, "chat", tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "x.jsonl.tmp").exists()

    fixtures_rows.write_folder(broken, fixtures_rows.make_rows(30), ratios=RATIOS)
    manifest["files"][0]["rows"] += 1
    (broken / "manifest.json").write_bytes(orjson.dumps(manifest))
    with pytest.raises(PublishError, match="manifest.json says"):
        export.export(broken, "completion", tmp_path / "x.jsonl")


# ----------------------------------------------------------------------------- hub


def test_plan_upload(folder):
    plan = hub.plan_upload(folder)
    shards = [
        f["path"] for f in sorted(_shards(_manifest(folder)), key=lambda f: (SPLITS.index(f["split"]), f["path"]))
    ]
    assert plan.paths == ["README.md", "manifest.json", "stats.json", *shards]
    assert not any(p.startswith(("jsonl/", ".cudagen/")) or p == "rejects.jsonl" for p in plan.paths)
    assert {item.split(":")[0] for item in plan.left_out} == {"jsonl/", ".cudagen/", "rejects.jsonl"}
    assert plan.rows == orjson.loads((folder / "stats.json").read_bytes())["by_split"]
    assert all(f.size == (folder / f.path).stat().st_size for f in plan.files)
    assert "rejects.jsonl" in hub.plan_upload(folder, include_rejects=True).paths


def test_dry_run_touches_no_network(folder, monkeypatch):
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("dry run must not create an HfApi")

    monkeypatch.setattr(huggingface_hub, "HfApi", no_network)
    plan = hub.publish(folder, "my-org/warp-cuda", private=True, dry_run=True)
    assert plan.dry_run and plan.repo_id == "my-org/warp-cuda" and plan.private
    text = plan.describe()
    assert "Would upload" in text and "https://huggingface.co/datasets/my-org/warp-cuda" in text
    assert "private" in text
    for path in plan.paths:
        assert path in text
    assert "jsonl/" in text and ".cudagen/" in text  # says what is left out


@pytest.mark.parametrize("repo_id", ["my-org/warp-cuda", "Org_1/data.set", "a/b"])
def test_valid_repo_ids(repo_id):
    assert hub.validate_repo_id(repo_id) == repo_id


@pytest.mark.parametrize(
    "repo_id",
    [
        "warp-cuda",
        "a/b/c",
        "org/na me",
        "org/-x",
        "org/x.",
        "org/x--y",
        "org/x..y",
        "org/x.git",
        "/x",
        "x/",
        "",
        None,
        7,
    ],
)
def test_invalid_repo_ids(repo_id, folder):
    with pytest.raises(PublishError, match="repo id"):
        hub.validate_repo_id(repo_id)
    with pytest.raises(PublishError, match="repo id"):
        hub.publish(folder, repo_id, dry_run=True)


def test_build_operations(folder):
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    plan = hub.plan_upload(folder)
    existing = [
        "README.md",
        ".gitattributes",
        "notes.txt",
        "jsonl/train.jsonl",
        plan.paths[-1],  # a shard still in the plan: replaced, not deleted
        "data/train-00099-of-00100.parquet",  # stale shard of an earlier, larger upload
        "data/old/extra.parquet",
    ]
    ops = hub.build_operations(plan, existing)
    adds = [op for op in ops if isinstance(op, CommitOperationAdd)]
    deletes = [op for op in ops if isinstance(op, CommitOperationDelete)]
    assert [op.path_in_repo for op in adds] == plan.paths
    assert all(Path(op.path_or_fileobj) == folder / op.path_in_repo for op in adds)
    assert [op.path_in_repo for op in deletes] == ["data/old/extra.parquet", "data/train-00099-of-00100.parquet"]
    assert len(ops) == len(adds) + len(deletes)
    assert [op.path_in_repo for op in hub.build_operations(plan, []) if isinstance(op, CommitOperationDelete)] == []


def test_publish_with_fake_api(folder):
    calls = []

    class FakeApi:
        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw))

        def list_repo_files(self, repo_id, **kw):
            calls.append(("list_repo_files", repo_id, kw))
            return ["README.md", "data/test-00001-of-00002.parquet"]

        def create_commit(self, repo_id, operations, **kw):
            calls.append(("create_commit", repo_id, [type(op).__name__ for op in operations], kw))

            class Info:
                commit_url = "https://huggingface.co/datasets/org/name/commit/abc"

            return Info()

    plan = hub.publish(folder, "org/name", private=True, api=FakeApi())
    assert [c[0] for c in calls] == ["create_repo", "list_repo_files", "create_commit"]
    assert calls[0][2] == {"repo_type": "dataset", "private": True, "exist_ok": True}
    assert calls[1][2] == {"repo_type": "dataset"}
    kinds = calls[2][2]
    assert kinds.count("CommitOperationAdd") == len(plan.files) and kinds.count("CommitOperationDelete") == 1
    assert calls[2][3]["repo_type"] == "dataset" and "200 rows" in calls[2][3]["commit_message"]
    assert not plan.dry_run and plan.deleted == ("data/test-00001-of-00002.parquet",)
    assert "Uploaded" in plan.describe() and "data/test-00001-of-00002.parquet" in plan.describe()


def _copy_folder(rows, path: Path, **kw) -> Path:
    fixtures_rows.write_folder(path, rows, ratios=RATIOS, **kw)
    return path


def test_plan_refuses_stale_and_corrupt_shards(rows, tmp_path):
    path = _copy_folder(rows[:60], tmp_path / "a")
    (path / "data" / "train-00009-of-00010.parquet").write_bytes(b"old")
    with pytest.raises(PublishError, match="train-00009-of-00010.parquet: Parquet file not listed"):
        hub.plan_upload(path)

    path = _copy_folder(rows[:60], tmp_path / "b")
    manifest = _manifest(path)
    manifest["files"][0]["xxh3_128"] = "0" * 32
    (path / "manifest.json").write_bytes(orjson.dumps(manifest))
    with pytest.raises(PublishError, match="checksum"):
        hub.plan_upload(path)
    assert hub.plan_upload(path, verify=False).paths  # checksum check is what failed

    path = _copy_folder(rows[:60], tmp_path / "c")
    (path / "README.md").unlink()
    with pytest.raises(PublishError, match="README.md"):
        hub.plan_upload(path)


def test_plan_refuses_private_paths(rows, tmp_path, monkeypatch):
    # An absolute path in the command: the card hides it, the manifest does not.
    path = tmp_path / "p"
    _copy_folder(rows[:60], path, command=f"cudagen produce --count 60 --out {path}")
    assert str(path) not in (path / "README.md").read_text(encoding="utf-8")
    with pytest.raises(PublishError, match="manifest.json: contains a local path"):
        hub.plan_upload(path)

    # A path inside the data (Warp writes source paths into CUDA comments).
    leaky = [dict(r) for r in rows[:60]]
    leaky[3]["cuda_forward"] = f"// {Path.home()}/kernels/k.py:3\n" + leaky[3]["cuda_forward"]
    path = _copy_folder(leaky, tmp_path / "q")
    with pytest.raises(PublishError, match="column 'cuda_forward' contains a local path"):
        hub.plan_upload(path)
    assert hub.plan_upload(path, check_private=False).paths

    # The host name in a metadata file.
    path = _copy_folder(rows[:60], tmp_path / "r")
    monkeypatch.setattr(hub, "hostname", lambda: "buildbox-17")
    (path / "stats.json").write_bytes(orjson.dumps({"host": "buildbox-17.example.org"}))
    with pytest.raises(PublishError, match="host name"):
        hub.plan_upload(path)


# ----------------------------------------------------------------------------- privacy


def test_no_personal_paths_in_written_files(folder, tmp_path):
    export.export(folder, "chat", tmp_path / "chat.jsonl")
    export.export(folder, "completion", tmp_path / "comp.jsonl")
    plan = hub.publish(folder, "org/name", dry_run=True)
    texts = {
        "README.md": (folder / "README.md").read_text(encoding="utf-8"),
        "chat.jsonl": (tmp_path / "chat.jsonl").read_text(encoding="utf-8"),
        "comp.jsonl": (tmp_path / "comp.jsonl").read_text(encoding="utf-8"),
        "describe": plan.describe().replace(str(folder), ""),  # describe may show the folder the user gave
    }
    needles = [str(folder), str(tmp_path), str(Path.home()), os.environ.get("USER", "") and f"/{os.environ['USER']}/"]
    host = socket.gethostname().split(".")[0]
    for name, text in texts.items():
        for needle in filter(None, needles):
            assert needle not in text, (name, needle)
        if host and host != "localhost":
            assert not re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", text, re.I), (name, host)


def test_card_features_written_without_datasets_match_datasets():
    from datasets import Features

    from cudagen_data.publish.card import features_yaml

    assert features_yaml(ROW_SCHEMA) == Features.from_arrow_schema(ROW_SCHEMA)._to_yaml_list()
