"""`cudagen produce`: balance, dedup, determinism, crash safety, resume, validation, loading."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from procs import in_background, kill_cli_repeatedly

from cudagen_data.contracts import (
    SPLITS,
    TIMING_STATS,
    CompileInfo,
    GradientCheckInfo,
    Metadata,
    Row,
    RunStats,
    strip_timing,
)
from cudagen_data.dataset.store import DatasetFolder
from cudagen_data.generators import categories
from cudagen_data.pipeline.config import ProduceConfig, ProduceError
from cudagen_data.pipeline.producer import consume, produce
from cudagen_data.pipeline.work import CRASH_ENV, BatchResult, SlotOutcome
from cudagen_data.stages import DedupStage

CATS = tuple(c for c in ("arithmetic", "math", "reduction", "vector") if c in categories())[:3]


def rows_of(folder: Path) -> dict[str, list[dict]]:
    return {
        s: [orjson.loads(line) for line in (folder / "jsonl" / f"{s}.jsonl").read_bytes().splitlines()] for s in SPLITS
    }


def parquet_rows_of(folder: Path) -> dict[str, list[list[dict]]]:
    """split -> rows of each Parquet shard the manifest lists, in order."""
    import pyarrow.parquet as pq

    manifest = orjson.loads((folder / "manifest.json").read_bytes())
    out: dict[str, list[list[dict]]] = {}
    for f in manifest["files"]:
        if f["path"].endswith(".parquet"):
            out.setdefault(f["split"], []).append(pq.read_table(folder / f["path"]).to_pylist())
    return out


def comparable(folder: Path) -> dict:
    """Everything a run writes, timing fields aside."""
    stats = orjson.loads((folder / "stats.json").read_bytes())
    for k in TIMING_STATS:
        stats.pop(k)
    manifest = orjson.loads((folder / "manifest.json").read_bytes())
    for f in manifest["files"]:
        f.pop("xxh3_128")  # the files hold timing fields, so their checksums differ
    shards = {s: [[strip_timing(r) for r in shard] for shard in rs] for s, rs in parquet_rows_of(folder).items()}
    rows = (
        {s: [strip_timing(r) for r in rs] for s, rs in rows_of(folder).items()} if (folder / "jsonl").exists() else None
    )
    leftovers = sorted(p.name for d in ("spool", "shards") for p in (folder / ".cudagen" / d).glob("*"))
    return {
        "stats": stats,
        "manifest": manifest,
        "shards": shards,
        "rows": rows,
        "rejects": (folder / "rejects.jsonl").read_bytes(),
        "leftovers": leftovers,
    }


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "cudagen_data.cli", *args], capture_output=True, text=True, **kw)


# ------------------------------------------------------------------ pure logic


def _outcome(slot, cat, py, cu, shape="0" * 16):
    row = Row(
        id=py,
        kernel_name=f"k{slot}",
        category=cat,
        python_source="",
        cuda_forward="",
        cuda_backward="",
        metadata=Metadata("cuda", True, 3, 5, 0.0, 0, 0, slot),
        difficulty="basic",
        features=[],
        device_functions="",
        preamble_hash="",
        arg_specs="[]",
        launch_dim=[1],
        block_dim=None,
        test_vectors="",
        python_hash=py,
        shape_hash=shape,
        cuda_hash=cu,
        compile=CompileInfo(arch=86, level="frontend", nvrtc_version="13.4.92", status="ok", time_ms=0.0),
        warp_version="",
        generator_version="",
        gradient_check=GradientCheckInfo("verified", "", "float64", 4, 0.0),
    )
    return SlotOutcome(slot, cat, row=row)


def test_dedup_keeps_the_earlier_slot_and_counts_both_hashes():
    config = ProduceConfig(count=10, categories=("a",))
    stats = RunStats.new(config.categories, SPLITS)
    dedup = DedupStage(stats.stages["dedup"])
    result = BatchResult(
        0,
        [
            _outcome(0, "a", "p1", "c1"),
            _outcome(1, "a", "p1", "c2"),
            _outcome(2, "a", "p2", "c1"),
            _outcome(3, "a", "p3", "c3"),
        ],
    )
    rows, rejects = consume(config, result, stats, dedup, lambda c: False)
    kept = [r.kernel_name for rs in rows.values() for r in rs]
    assert sorted(kept) == ["k0", "k3"]
    assert [r.reason for r in rejects] == ["duplicate_python", "duplicate_cuda"]
    assert stats.to_stats_json(fast=False)["duplicates_by_hash"] == {"python": 1, "cuda": 1}
    assert stats.stages["dedup"].to_json() == {
        "in": 4,
        "kept": 2,
        "rejected": {"duplicate_cuda": 1, "duplicate_python": 1},
    }


def test_slots_of_full_categories_are_not_counted():
    config = ProduceConfig(count=2, categories=("a", "b"))
    stats = RunStats.new(config.categories, SPLITS)
    result = BatchResult(0, [_outcome(0, "a", "p0", "c0"), _outcome(1, "b", "p1", "c1"), _outcome(2, "a", "p2", "c2")])
    full = lambda c: stats.accepted[c] >= config.quota(c)  # noqa: E731
    consume(config, result, stats, DedupStage(stats.stages["dedup"]), full)
    assert stats.accepted == {"a": 1, "b": 1} and stats.slots == {"a": 1, "b": 1}
    assert stats.stages["generate"].entered == 2


def test_quota_balances_within_one():
    config = ProduceConfig(count=1000, categories=tuple("abcdefg"))
    quotas = [config.quota(c) for c in config.categories]
    assert sum(quotas) == 1000 and max(quotas) - min(quotas) <= 1


# ------------------------------------------------------------------ runs


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    result = produce(ProduceConfig(count=14, categories=CATS, seed=3, batch_size=8), out, workers=0, progress=False)
    return out, result


def test_full_run_is_balanced_and_validated(full_run):
    out, result = full_run
    stats = result.stats
    assert stats["total_pairs"] == 14
    counts = list(stats["by_category"].values())
    assert max(counts) - min(counts) <= 1
    rows = [r for rs in rows_of(out).values() for r in rs]
    assert len(rows) == 14 and len({r["python_hash"] for r in rows}) == 14 and len({r["cuda_hash"] for r in rows}) == 14
    for r in rows:
        assert r["compile"]["status"] == "ok"
        tv = orjson.loads(r["test_vectors"])
        assert tv["outputs"] and set(tv["inputs"]) == {a["name"] for a in orjson.loads(r["arg_specs"])}
    assert stats["compile_pass_rate"] is not None and stats["execution_pass_rate"] is not None


def test_validate_passes_then_catches_a_corrupted_row(full_run, tmp_path):
    import shutil

    out, _ = full_run
    # in-process (-w 0): the verdicts do not depend on workers; validate's pool is tested in test_compile_level.py
    res = cli("validate", str(out), "--no-progress", "-w", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK" in res.stdout

    # Corrupt one recorded output in a copy of the train JSONL: validate must fail on it.
    bad = tmp_path / "bad.jsonl"
    lines = (out / "jsonl" / "train.jsonl").read_bytes().splitlines()
    row = orjson.loads(lines[0])
    tv = orjson.loads(row["test_vectors"])
    name, value = next(iter(tv["outputs"].items()))
    flat = value["data"]
    while isinstance(flat[0], list):
        flat = flat[0]
    flat[0] = flat[0] + 100.0
    row["test_vectors"] = orjson.dumps(tv).decode()
    bad.write_bytes(b"\n".join([orjson.dumps(row)] + lines[1:]) + b"\n")
    shutil.copy(out / "manifest.json", tmp_path / "manifest.json")
    res = cli("validate", str(bad), "--no-progress", "-w", "0")
    assert res.returncode == 1
    assert f"output {name!r} differs" in res.stdout and "bad.jsonl:1" in res.stdout


def test_validate_catches_a_tampered_file(full_run, tmp_path):
    import shutil

    out, _ = full_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = next((copy / "data").glob("train-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-10] + b"x" * 10)
    res = cli("validate", str(copy), "--no-progress")
    assert res.returncode != 0
    assert "checksum" in res.stdout + res.stderr


def test_load_dataset_reads_the_folder(full_run, tmp_path):
    out, result = full_run
    script = (
        "import sys, datasets\n"
        "d = datasets.load_dataset(sys.argv[1], cache_dir=sys.argv[2])\n"
        "print({k: v.num_rows for k, v in d.items()})\n"
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    res = subprocess.run(
        [sys.executable, "-c", script, str(out), str(tmp_path / "cache")], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, res.stderr[-2000:]
    loaded = eval(res.stdout.strip().splitlines()[-1])
    assert loaded == {s: n for s, n in result.stats["by_split"].items() if n}


def test_worker_layout_does_not_change_the_rows(full_run, tmp_path):
    """Full validation with 2 workers (batches cut into parts, speculative skips) writes
    what the in-process run wrote."""
    out = tmp_path / "parts"
    produce(ProduceConfig(count=14, categories=CATS, seed=3, batch_size=8), out, workers=2, progress=False)
    assert comparable(out) == comparable(full_run[0])


def test_a_kernel_that_crashes_its_worker_is_rejected_alone(tmp_path, monkeypatch):
    config = ProduceConfig(count=40, categories=CATS, seed=4, fast=True, batch_size=8)
    produce(config, tmp_path / "ref", workers=0, progress=False)  # the rows are the same with any workers
    monkeypatch.setenv(CRASH_ENV, "13")
    result = produce(config, tmp_path / "crash", workers=2, progress=False)
    rejects = [orjson.loads(line) for line in (tmp_path / "crash" / "rejects.jsonl").read_bytes().splitlines()]
    assert [(r["slot"], r["reason"]) for r in rejects if r["reason"] == "worker_crash"] == [(13, "worker_crash")]
    assert result.stats["total_pairs"] == 40 and result.stats["rejects_by_reason"].get("worker_crash") == 1
    kept = {(r["category"], r["metadata"]["index"]) for rs in rows_of(tmp_path / "crash").values() for r in rs}
    ref = {(r["category"], r["metadata"]["index"]) for rs in rows_of(tmp_path / "ref").values() for r in rs}
    lost = config.slot(13)
    assert lost in ref and lost not in kept
    assert (
        len(ref - kept) == 1 and len(kept - ref) == 1 and next(iter(kept - ref))[0] == lost[0]
    )  # one later kernel of its category instead


def test_a_script_without_a_main_guard_stops_in_one_line_instead_of_rejecting_every_slot(tmp_path):
    """Each spawned worker imports the calling script again.  One that calls produce() at its
    top level killed every worker as it started, and the run rejected slot after slot as
    worker_crash, a fresh process each (found: 1,300 slots in 14 minutes, stopped by hand).
    It now stops at the first dead worker, in a line that says what to do."""
    out = tmp_path / "out"
    script = tmp_path / "make.py"
    script.write_text(
        "from cudagen_data.pipeline.config import ProduceConfig\n"
        "from cudagen_data.pipeline.producer import produce\n"
        "config = ProduceConfig(count=4, categories=('arithmetic',), fast=True)\n"
        f"produce(config, {str(out)!r}, workers=2, progress=False)\n"
    )
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("cudagen_data.pipeline.config.ProduceError: worker processes die as they start"), last
    assert '`if __name__ == "__main__":`' in last
    # each worker said why it died: the same advice, from produce() run as the script was imported
    assert "ProduceError: produce() ran while a worker process started" in res.stderr
    assert b"worker_crash" not in (out / "rejects.jsonl").read_bytes()
    # the same script with the guard makes the dataset
    guarded = tmp_path / "guarded.py"
    body = script.read_text().splitlines()
    guarded.write_text("\n".join(body[:3] + ["if __name__ == '__main__':", "    " + body[3]]) + "\n")
    assert subprocess.run([sys.executable, str(guarded)], capture_output=True, timeout=600).returncode == 0
    assert (
        len((out / "jsonl" / "train.jsonl").read_bytes().splitlines())
        + len((out / "jsonl" / "validation.jsonl").read_bytes().splitlines())
        + len((out / "jsonl" / "test.jsonl").read_bytes().splitlines())
        == 4
    )


def test_a_broken_pool_is_reported_through_the_future_not_by_submit():
    """The producer handles a dead worker where it reads results; a submit that comes after
    the pool broke must not raise (CI once lost a run to exactly that race)."""
    from concurrent.futures.process import BrokenProcessPool

    from cudagen_data.pipeline.pool import ProcessExecutor

    executor = ProcessExecutor(1)
    try:
        with pytest.raises(BrokenProcessPool):
            executor.submit(os._exit, 3).result(timeout=120)
        later = executor.submit(os.getpid)
        with pytest.raises(BrokenProcessPool):
            later.result(timeout=5)
    finally:
        executor.close(kill=True)


def _die_while_sending_a_result():
    """What SIGKILL does to a worker half-way through sending its result: on the pool's result
    pipe, a message header announcing 1 MB and 100 bytes of it; then the worker is gone."""
    import gc
    import multiprocessing.queues
    import struct

    (results,) = [o for o in gc.get_objects() if type(o) is multiprocessing.queues.SimpleQueue]
    os.write(results._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 100)
    os._exit(9)


def test_a_worker_that_dies_while_sending_its_result_breaks_the_pool_instead_of_hanging_it(monkeypatch):
    """Python's process pool alone waits forever for the rest of such a message (a run hung
    when test_faults killed a worker at that moment); the executor's watch breaks the pool
    after STUCK_SECONDS, so the scheduler re-runs the lost parts as for any dead worker."""
    from cudagen_data.pipeline import pool
    from cudagen_data.pipeline.pool import ProcessExecutor, WorkerLost

    monkeypatch.setattr(pool, "STUCK_SECONDS", 1.0)  # the watch reads it as it goes; 5 s of waiting is not the point
    executor = ProcessExecutor(2)
    try:
        with pytest.raises(WorkerLost):
            executor.submit(_die_while_sending_a_result).result(timeout=60)
    finally:
        executor.close(kill=True)


def test_two_runs_same_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    config = ProduceConfig(count=60, categories=CATS, seed=11, fast=True, batch_size=16)
    produce(config, a, workers=0, progress=False)
    produce(config, b, workers=2, progress=False)
    assert comparable(a) == comparable(b)
    card_a, card_b = ((d / "README.md").read_text().splitlines() for d in (a, b))
    timing = ("| generation time |", "| throughput |")
    assert [x for x in card_a if not x.startswith(timing)] == [x for x in card_b if not x.startswith(timing)]
    assert len(card_a) == len(card_b)


def test_kill_9_at_random_moments_then_resume(tmp_path):
    # small shards: kills land between, and inside, commits that roll a spool into a shard.  600 rows: the
    # 8 tries (a 1.5-3.5 s run each, start-up included) got through ~1,200 on the 2-core machine, so ~4 are killed
    args = [
        "produce",
        "--count",
        "600",
        "--categories",
        ",".join(CATS),
        "--seed",
        "5",
        "--fast",
        "--batch-size",
        "8",
        "--shard-rows",
        "50",
        "--workers",
        "1",
        "--no-progress",
    ]
    ref = tmp_path / "ref"  # in-process: the same rows (and recorded command) as the command's, with any workers
    config = ProduceConfig(count=600, categories=CATS, seed=5, fast=True, batch_size=8, shard_rows=50)
    reference = in_background(produce, config, ref, workers=0, progress=False)  # made while the tries run
    out = tmp_path / "killed"
    kills = kill_cli_repeatedly([*args, "--output", str(out)], tries=8, rng=random.Random(1234), wait=(1.5, 3.5))
    assert kills >= 2, "the run finished before it could be killed twice; make it longer"
    res = cli(*args, "--output", str(out))
    assert res.returncode == 0, res.stderr
    reference.result()
    assert comparable(out) == comparable(ref)


def test_torn_jsonl_tail_is_repaired(tmp_path):
    config = ProduceConfig(count=40, categories=CATS, seed=2, fast=True, batch_size=8)
    ref = tmp_path / "ref"
    produce(config, ref, workers=0, progress=False)
    out = tmp_path / "torn"
    stop_after = 2

    class Stop(Exception):
        pass

    def stop(result):
        if result.batch + 1 >= stop_after:
            raise Stop

    with pytest.raises(Stop):
        produce(config, out, workers=0, progress=False, on_batch=stop)
    train = out / "jsonl" / "train.jsonl"
    with open(train, "ab") as f:
        f.write(b'{"id": "half a line')
    result = produce(config, out, workers=0, progress=False)
    assert result.resumed and any("uncommitted bytes" in n for n in result.notes)
    assert comparable(out) == comparable(ref)


def test_config_mismatch_is_refused_and_overwrite_starts_over(tmp_path):
    out = tmp_path / "ds"
    base = [
        "produce",
        "--categories",
        ",".join(CATS),
        "--fast",
        "--workers",
        "0",
        "--no-progress",
        "--output",
        str(out),
    ]
    assert cli(*base, "--count", "12").returncode == 0
    res = cli(*base, "--count", "12", "--seed", "9")
    assert res.returncode == 1
    assert "another configuration" in res.stderr and "--overwrite" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = cli(*base, "--count", "12", "--seed", "9", "--overwrite")
    assert res.returncode == 0
    assert orjson.loads((out / "manifest.json").read_bytes())["config"]["seed"] == 9


def test_complete_folder_is_left_alone(tmp_path):
    config = ProduceConfig(count=10, categories=CATS, fast=True)
    produce(config, tmp_path, workers=0, progress=False)
    before = comparable(tmp_path)
    result = produce(config, tmp_path, workers=0, progress=False)
    assert result.already_complete and comparable(tmp_path) == before


def test_foreign_folder_is_refused(tmp_path):
    (tmp_path / "README.md").write_text("somebody else's")
    with pytest.raises(ProduceError, match="no run state"):
        produce(ProduceConfig(count=5, categories=CATS, fast=True), tmp_path, workers=0, progress=False)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--count", "0"], "--count 0: must be at least 1"),
        (["--categories", "nope"], "unknown nope"),
        (["--arch", "12"], "--arch 12"),
        (["--split-ratios", "0.5,0.5"], "three numbers"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, args, needle):
    res = cli("produce", "--output", str(tmp_path / "x"), "--no-progress", *args)
    assert res.returncode == 2
    assert needle in res.stderr and "Traceback" not in res.stderr


def test_stats_command(full_run):
    out, result = full_run
    res = cli("stats", str(out))
    assert res.returncode == 0 and f"{result.stats['total_pairs']} pairs" in res.stdout
    res = cli("stats", str(out / "nope"))
    assert res.returncode == 2 and "no such file or folder" in res.stderr
    DatasetFolder(out)  # folder object is cheap and side-effect free


def test_refuses_a_run_state_without_stage_counters(tmp_path):
    from cudagen_data.dataset.store import RunState
    from cudagen_data.pipeline.config import fingerprint

    config = ProduceConfig(count=3, categories=CATS, fast=True)
    old_tally = {
        "accepted": {c: 0 for c in CATS},
        "rejects": {},
        "duplicates": {"python": 0, "cuda": 0},
    }  # before issue #15
    DatasetFolder(tmp_path).start(RunState(fingerprint=fingerprint(config).decode(), tally=old_tally))
    with pytest.raises(ProduceError, match="older cudagen-data"):
        produce(config, tmp_path, progress=False)


def test_slots_in_flight_count_at_the_acceptance_rate_seen_so_far():
    """The scheduler stops submitting a category's slots once those in flight are expected to
    fill it.  Counting every slot as a row stopped it too early wherever slots are rejected or
    duplicates (on 16 workers the workers then waited 31% of their time); it now counts them
    at the rate of rows per slot consumed so far (1 before any, MIN_ACCEPTANCE at least)."""
    from cudagen_data.pipeline.scheduler import MIN_ACCEPTANCE, Scheduler

    config = ProduceConfig(count=150, categories=("arithmetic",), fast=True, batch_size=10)
    accepted = {"arithmetic": 0}
    scheduler = Scheduler(config, 0, 0, lambda c: accepted[c])
    try:
        scheduler.inflight["arithmetic"] = 150  # nothing consumed yet: a slot counts as a row
        assert scheduler._predicted_full("arithmetic")
        scheduler.inflight["arithmetic"] = 149
        assert not scheduler._predicted_full("arithmetic")
        # 49 rows from 99 slots (with the prior of one: half): 101 slots in flight give ~50 more, not 101
        accepted["arithmetic"], scheduler.consumed["arithmetic"] = 49, 99
        scheduler.inflight["arithmetic"] = 101
        assert not scheduler._predicted_full("arithmetic")
        scheduler.inflight["arithmetic"] = 202
        assert scheduler._predicted_full("arithmetic")
        # more rows than slots counted (a repair's slots are not): a slot still counts as one row at most
        accepted["arithmetic"], scheduler.consumed["arithmetic"] = 60, 50
        scheduler.inflight["arithmetic"] = 89
        assert not scheduler._predicted_full("arithmetic")
        # a category that stopped yielding rows: its slots still count (it ends at max_batches)
        accepted["arithmetic"], scheduler.consumed["arithmetic"] = 0, 10_000
        scheduler.inflight["arithmetic"] = int(150 / MIN_ACCEPTANCE)
        assert scheduler._predicted_full("arithmetic")
    finally:
        scheduler.close()


def test_the_breakdown_counts_a_part_never_used_as_work_not_as_waiting():
    """bench_produce's breakdown: a part that finished but that the run never used (it was full
    first; the scheduler drops it at its close) is the worker's work, on a line of its own, and
    not time "between parts" (a 16-worker run had shown such parts as waiting for a hand-over)."""
    import concurrent.futures as cf
    from collections import Counter

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_produce
    import produce_timeline

    from cudagen_data.pipeline import producer
    from cudagen_data.pipeline.scheduler import Unit
    from cudagen_data.pipeline.work import PartTiming

    def timing(started: float, ended: float) -> PartTiming:
        return PartTiming(7, started, ended, ended - started, 10, {}, {}, {})

    used, unused, last = timing(1.0, 3.0), timing(3.1, 6.0), timing(6.1, 7.0)
    finished, running = cf.Future(), cf.Future()
    finished.set_result(BatchResult(1, [], timings=[unused]))
    with produce_timeline.recording() as events:
        scheduler = producer.Scheduler(ProduceConfig(count=10, categories=("arithmetic",), fast=True), 0, 0, len)
        scheduler.units.extend(Unit(b, range(0), frozenset(), Counter(), f) for b, f in ((1, finished), (2, running)))
        scheduler.close()
    assert events.discarded == [unused]  # the finished one; the one still running has no timings
    measured = bench_produce.Measured(7.0, {}, 0.0, 0.0, 7.0, 0.0, [BatchResult(0, [], timings=[used, last])], events)
    wall, cpu, _ = bench_produce.lanes(measured)
    assert wall["@discarded"] == cpu["@discarded"] == pytest.approx(2.9)
    assert wall["@between"] == pytest.approx(0.2)  # 3.0 -> 3.1 and 6.0 -> 6.1, not 3.0 -> 6.1


def test_the_floor_compiles_each_kernel_as_the_pipeline_extracted_it():
    """bench_produce's floor NVRTC-checks the CUDA the extract stage emitted: a tile kernel at
    its own block dim (NVRTC checks each block dim in a unit of its own, a cost the pipeline
    pays: a floor emitting every kernel at the default block dim paid one unit per part where
    the pipeline paid up to four), and an extract-stage reject (too long) is emitted, not checked."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_produce

    from cudagen_data.extract import DEFAULT_BLOCK_DIM
    from cudagen_data.stages.base import Item
    from cudagen_data.stages.extract import ExtractStage
    from cudagen_data.stages.generate import GenerateStage

    config = ProduceConfig(count=1, categories=("attention",), seed=1)
    items, _ = GenerateStage(1)([Item(i, "attention", i) for i in range(6)])
    items, rejects = ExtractStage(config.arch)(items)
    assert not rejects and len({it.spec.block_dim for it in items}) > 1  # tile kernels of several block dims
    chunk = [
        bench_produce.FloorItem(it.spec.python_source, it.spec.block_dim or DEFAULT_BLOCK_DIM, i > 0, None, None)
        for i, it in enumerate(items)
    ]
    emitted, compiled = bench_produce.floor_kernels(chunk)
    assert [(k.preamble, k.forward, k.backward) for k in emitted] == [
        (it.kernel.preamble, it.kernel.forward, it.kernel.backward) for it in items
    ]
    assert compiled == emitted[1:]  # the first stands for a reject of the extract stage


def test_each_worker_holds_numpys_blas_to_its_share_of_the_cores():
    """produce's worker processes: NumPy's BLAS uses the process's share of the cores
    (pool.blas_threads); left alone, OpenBLAS starts a thread per core in every worker (16
    workers on 16 cores: 256 threads, a 500-pair run 28% slower)."""
    from threadpoolctl import threadpool_info

    from cudagen_data.pipeline.pool import ProcessExecutor, blas_threads

    cores = len(os.sched_getaffinity(0))
    assert blas_threads(1) == cores and blas_threads(2) == max(1, cores // 2) and blas_threads(4 * cores) == 1
    pool = ProcessExecutor(2)
    try:
        infos = pool.submit(threadpool_info).result()
    finally:
        pool.close()
    assert [i["num_threads"] for i in infos if i["user_api"] == "blas"] == [blas_threads(2)]


def test_the_breakdown_adds_and_takes_away_spans_and_sorts_each_part_by_kind():
    """bench_produce's breakdown: a part is spans added and taken away ("a-b+c": the kept runs'
    CPU time is the runs', less the failed guesses', less the reference checks', plus the
    failed guesses' reference checks, counted in both); every part is of one kind (row work
    the floor leaves out, work both do, the pipeline's own), so that the distance to the floor
    is told apart by kind."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_produce

    found = {"a": 10.0, "b": 3.0, "c": 1.5, "a.b": 100.0}
    assert bench_produce._value("a-b+c", found) == 8.5 and bench_produce._value("a.b-a", found) == 90.0
    assert bench_produce._value("missing-b", found) == -3.0
    kinds = {label: kind for label, _, _, kind in bench_produce.PARTS}
    assert len(kinds) == len(bench_produce.PARTS) and set(kinds.values()) == {"row work", "shared", "own"}
    # what the floor leaves out by definition has no floor part and is row work or the pipeline's own
    assert all(kind != "shared" for _, _, fname, kind in bench_produce.PARTS if fname is None)
    # the box's speed in each phase, from work the same in all: the pipeline's over another's, or None without it
    assert bench_produce.same_work_ratio({"gradcheck.build": 6.0}, {"gradcheck.build": 5.0}) == pytest.approx(1.2)
    assert bench_produce.same_work_ratio({"gradcheck.build": 6.0}, {"generate": 5.0}) is None


def test_the_rows_floor_runs_the_slots_the_run_consumed_and_makes_the_same_rows(tmp_path):
    """bench_produce's rows' floor (the pipeline's worker function on the slots a run consumed,
    one part per batch, no scheduler): it runs every slot the run used (rows and rejects) and
    makes the very rows the run wrote, as its digest comparison says; the digest ignores the
    timing fields alone, so a floor that made other rows would be told apart."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_produce

    config = ProduceConfig(count=8, categories=CATS, seed=1, batch_size=6)
    assert [config.slot_of(*config.slot(s)) for s in range(40)] == list(range(40))  # rows name no slot: derived
    out = tmp_path / "run"
    result = produce(config, out, workers=0, progress=False)
    want = bench_produce.run_rows(out, config)
    by_batch = bench_produce.consumed_slots(out, config, want)
    slots = [s for ss in by_batch.values() for s in ss]
    assert len(slots) == len(set(slots)) == result.stats["kernels_tried"] and len(by_batch) > 1
    assert all(s // config.batch_size == batch for batch, ss in by_batch.items() for s in ss)
    assert len(want) == 8 and set(want) <= set(slots)

    seconds, returned, ran = bench_produce.rows_floor(out, config, 1, want)
    assert ran == len(slots) and seconds > 0 and sum(r["parts"] for r in returned) == len(by_batch)
    made = bench_produce._rows_of(returned)
    assert {slot: made.get(slot) for slot in want} == want
    assert returned[0]["spans"]["execute"] > 0  # its figures are the pipeline's spans
    # its breakdown lanes: a second process that got no part idled the whole floor
    wall, _ = bench_produce.floor_lanes(returned, seconds + 1.0, 2)
    assert wall["@tail"] == pytest.approx(2 * (seconds + 1.0) - returned[0]["wall"])

    row = orjson.loads((out / "jsonl" / "train.jsonl").read_bytes().splitlines()[0])
    timed = {**row, "metadata": {**row["metadata"], "generation_time_ms": 12345.0}}
    assert bench_produce.row_digest(timed) == bench_produce.row_digest(row)
    other = {**row, "test_vectors": row["test_vectors"].replace("1", "2", 1)}
    assert other["test_vectors"] != row["test_vectors"]
    assert bench_produce.row_digest(other) != bench_produce.row_digest(row)
