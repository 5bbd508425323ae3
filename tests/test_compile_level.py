"""--compile frontend|ptx: recorded in rows and manifest, part of the fingerprint, re-checked by
validate at each row's level; validate --workers; the first batch is cut fine for progress."""

from __future__ import annotations

import concurrent.futures as cf
import shutil
import subprocess
import sys
import time
import types

import orjson
import pytest

from cudagen_data.dataset.read import iter_rows_from
from cudagen_data.pipeline import ProduceConfig, ProduceError, produce
from cudagen_data.pipeline.scheduler import HELD_PER_WORKER, Scheduler, first_batch_ranges
from cudagen_data.validate import ValidationReport, validate_path, validate_rows

CATS = ("arithmetic", "math", "vector")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "cudagen_data.cli", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def frontend_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("frontend")
    produce(ProduceConfig(count=6, categories=CATS, seed=5, batch_size=6), out, workers=0, progress=False)
    return out


def _rows(out):
    return [orjson.loads(line) for line in (out / "jsonl" / "train.jsonl").read_bytes().splitlines()]


def test_level_is_recorded_in_rows_and_manifest(frontend_run):
    rows = _rows(frontend_run)
    assert rows and all(
        r["compile"]["level"] == "frontend" and r["compile"]["nvrtc_version"] == "13.4.92" for r in rows
    )
    manifest = orjson.loads((frontend_run / "manifest.json").read_bytes())
    compiler = manifest["compiler"]
    assert (
        compiler["level"] == "frontend"
        and compiler["nvrtc_version"] == "13.4.92"
        and compiler["nvrtc_from"] == "nvidia-cuda-nvrtc"
    )
    assert "--fdevice-syntax-only" in compiler["options"] and "--include-path=<warp>/native" in compiler["options"]
    assert "/" + "site-packages" not in (frontend_run / "manifest.json").read_text()
    assert manifest["config"]["compile_level"] == "frontend" and "--compile" not in manifest["command"]
    assert "front end" in (frontend_run / "README.md").read_text()


def test_a_folder_refuses_to_resume_at_the_other_level(frontend_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(frontend_run, copy)
    with pytest.raises(ProduceError, match="compile=frontend.*compile=ptx"):
        produce(
            ProduceConfig(count=6, categories=CATS, seed=5, batch_size=6, compile_level="ptx"),
            copy,
            workers=0,
            progress=False,
        )


def _validate_file(path, workers=0) -> ValidationReport:
    report = ValidationReport()
    manifest = orjson.loads((path.parent / "manifest.json").read_bytes())
    validate_rows(iter_rows_from(path), manifest["preambles"], report, workers=workers)
    return report


def test_validate_rechecks_each_row_at_its_level(frontend_run, tmp_path):
    report = validate_path(frontend_run, workers=0)
    assert report.ok and report.checks_run["nvrtc_frontend"] == report.rows and not report.checks_run["nvrtc_ptx"]

    rows = _rows(frontend_run)
    rows[0]["compile"]["level"] = "ptx"  # as a row of a --compile ptx run
    rows[1]["compile"]["level"] = "bogus"
    broken = rows[2]  # CUDA that does not compile: the front-end check must catch it
    broken["cuda_forward"] = broken["cuda_forward"].replace("{", "{ this_is_not_cuda;", 1)
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    shutil.copy(frontend_run / "manifest.json", tmp_path / "manifest.json")
    report = _validate_file(path)
    assert report.checks_run["nvrtc_ptx"] == 1 and report.checks_run["nvrtc_frontend"] == len(rows) - 2
    failures = {(f.where, f.check): f.message for f in report.failures}
    assert "unknown compile level 'bogus'" in failures[("rows.jsonl:2", "nvrtc")]
    assert 'identifier "this_is_not_cuda" is undefined' in failures[("rows.jsonl:3", "nvrtc")]


def test_validate_with_workers_gives_the_inline_report(frontend_run, tmp_path):
    rows = _rows(frontend_run)
    tv = orjson.loads(rows[-1]["test_vectors"])
    name, value = next(iter(tv["outputs"].items()))
    flat = value["data"]
    while isinstance(flat[0], list):
        flat = flat[0]
    flat[0] += 100.0
    rows[-1]["test_vectors"] = orjson.dumps(tv).decode()
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    shutil.copy(frontend_run / "manifest.json", tmp_path / "manifest.json")
    inline, pooled = _validate_file(path, workers=0), _validate_file(path, workers=2)
    assert inline.failures and inline.failures == pooled.failures
    assert (inline.rows, inline.by_category, inline.checks_run) == (pooled.rows, pooled.by_category, pooled.checks_run)
    assert f"output {name!r} differs" in inline.failures[0].message


def test_validate_workers_on_the_command_line(frontend_run):
    res = cli("validate", str(frontend_run), "--workers", "2", "--no-progress")
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr
    res = cli("validate", str(frontend_run), "--workers", "-1", "--no-progress")
    assert res.returncode == 2 and "--workers -1" in res.stderr and "Traceback" not in res.stderr


def test_bad_level_is_a_one_line_error(tmp_path):
    res = cli("produce", "--compile", "fast", "--output", str(tmp_path / "x"), "--no-progress")
    assert (
        res.returncode == 2 and "--compile 'fast': use frontend or ptx" in res.stderr and "Traceback" not in res.stderr
    )


def test_mismatched_nvrtc_stops_produce_before_any_work(tmp_path):
    code = (
        "import importlib.metadata as m, sys; real = m.version; "
        "m.version = lambda n: '13.5.37' if n == 'nvidia-cuda-nvrtc' else real(n); "
        "from cudagen_data.cli import app; sys.argv = ['cudagen', *sys.argv[1:]]; app()"
    )
    out = tmp_path / "x"
    res = subprocess.run(
        [sys.executable, "-c", code, "produce", "--count", "3", "--output", str(out), "--no-progress"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: the front-end compile check needs NVIDIA's NVRTC 13.4.92, the one Warp bundles: pip install "
        "nvidia-cuda-nvrtc==13.4.92 (found 13.5.37)"
    ]
    assert not out.exists()
    # --compile ptx does not need it
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "produce",
            "--count",
            "1",  # a row compiled at this level is what is asked for
            "--categories",
            "arithmetic",
            "--compile",
            "ptx",
            "--workers",
            "0",
            "--output",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


def planning_scheduler(config: ProduceConfig, *, workers: int, first_batch: int, max_batches: int) -> Scheduler:
    """A Scheduler for its planning alone: no pool (it says it has ``workers``), batches from
    ``first_batch``, nothing accepted yet, each batch cut in one part while work remains."""
    scheduler = Scheduler(config, 0, first_batch, lambda c: 0)
    scheduler.executor = types.SimpleNamespace(workers=workers)
    scheduler.parts, scheduler.max_batches = 1, max_batches
    return scheduler


def test_first_batch_is_cut_fine_then_normal():
    config = ProduceConfig(count=2000, categories=CATS, batch_size=100)
    # one part of 10 slots per worker, then the rest of the batch cut as any batch
    sizes = lambda ranges: [len(r) for r in ranges]  # noqa: E731
    assert sizes(first_batch_ranges(config, 0, 1, 2)) == [10, 10, 80]
    assert sizes(first_batch_ranges(config, 0, 2, 2)) == [10, 10, 40, 40]
    assert sizes(first_batch_ranges(config, 0, 1, 1)) == [10, 90]
    assert [r.start for r in first_batch_ranges(config, 3, 2, 2)] == [300, 310, 320, 360]
    scheduler = planning_scheduler(config, workers=500, first_batch=3, max_batches=5)  # a window of 1,000 units
    scheduler._submit = lambda unit: setattr(unit, "future", cf.Future())
    scheduler.fill()
    sizes = [(u.batch, len(u.slots)) for u in scheduler.units]
    # batch 4: the ~20 batches of work left fit one per worker (500), so it is cut as a
    # run's last batches are (scheduler.tail_parts): in MAX_PARTS parts
    assert sizes == [(3, 10)] * 10 + [(4, 25)] * 4


def test_batches_are_cut_whole_while_work_remains_then_finer_at_the_end():
    from cudagen_data.pipeline.scheduler import MAX_PARTS, plan_parts, tail_parts

    config = ProduceConfig(count=1000, categories=CATS, batch_size=100)
    assert plan_parts(config, 2) == 1  # ten batches for two workers: whole batches
    assert plan_parts(config, 1) == 1
    assert plan_parts(ProduceConfig(count=2000, categories=CATS, batch_size=100), 16) == 2
    # the last batches: whole while the slots left keep every worker busy with whole parts,
    # then parts of about slots_left / workers; never finer than MAX_PARTS, never for one worker
    assert [tail_parts(1, 2, 100, left) for left in (1000, 200, 150, 100, 40, 0)] == [1, 1, 2, 2, 4, 4]
    assert tail_parts(1, 1, 100, 0) == 1
    assert tail_parts(1, 16, 100, 10) == MAX_PARTS
    assert tail_parts(1, 2, 25, 10) == 2  # 25 slots to run: no part under MIN_TAIL_PART (10)
    assert tail_parts(2, 2, 100, 1000) == 2  # never coarser than the run's own cut
    # measured (1,000 pairs, 2 workers): batch 10 ran 67 slots with 69 left; cut by the most
    # any category still needed (3 batches' worth, one category) it was one part of 17.5 s
    assert tail_parts(1, 2, 67, 69) == 2


def test_a_late_batch_is_cut_by_the_slots_it_runs_and_the_slots_left():
    """Near the end most categories are predicted full: a batch runs a third of its slots
    and a few more are needed.  It is cut so that both workers share it (a 67-slot part
    ran 17.5 s on one worker while the other waited, 1,000 pairs on 2 workers)."""
    from cudagen_data.generators import categories
    from cudagen_data.pipeline.scheduler import MIN_TAIL_PART

    config = ProduceConfig(count=1000, categories=categories(), batch_size=100)
    scheduler = planning_scheduler(config, workers=2, first_batch=3, max_batches=5)
    scheduler.first_batch = 0  # batch 3 is a late batch, not the run's first (cut fine anyway)
    short = set(config.categories[:5])  # two rows short each; the other ten full
    scheduler.accepted = lambda c: config.quota(c) - 2 if c in short else config.quota(c)
    scheduler._submit = lambda unit: setattr(unit, "future", cf.Future())
    assert scheduler._slots_left() == 10  # nothing consumed yet: an acceptance of 1
    scheduler.fill()
    # its first part is in flight; the rest wait: that part is expected to fill the quotas
    cut = [u.slots for u in scheduler.units] + [r for _, r in scheduler.queued]
    run = sum(config.slot(s)[0] in short for s in config.batch_slots(3))
    assert run == 35 and len(cut) == run // MIN_TAIL_PART == 3  # not one part of 35 slots to run
    assert [len(r) for r in cut] == [33, 33, 34] and [r.start for r in cut] == [300, 333, 366]
    assert [u.batch for u in scheduler.units] == [3]


def test_a_slow_part_at_the_head_does_not_leave_the_other_workers_idle():
    """Results are consumed in slot order, but a part that finishes while an earlier one
    still runs frees its worker: the scheduler starts the next part at once instead of
    waiting for the head (on 16 workers the wait was half of all worker time)."""
    import threading

    config = ProduceConfig(count=2000, categories=CATS, batch_size=100)
    scheduler = planning_scheduler(config, workers=1, first_batch=3, max_batches=40)  # two parts running at a time
    submitted: list[cf.Future] = []

    def submit(unit):
        unit.future = cf.Future()
        submitted.append(unit.future)

    scheduler._submit = submit
    got = []
    consumer = threading.Thread(target=lambda: got.append(scheduler.next_part()))
    consumer.start()
    deadline = time.monotonic() + 10
    while len(submitted) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(submitted) == 2  # the window: two running parts
    for k in range(1, 5):  # the parts after the head finish one by one; the head still runs
        submitted[k].set_result(f"part {k}")
        while len(submitted) < k + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(submitted) == k + 2, "a finished part's worker was left idle behind the head"
    assert not got  # nothing is consumed out of order
    submitted[0].set_result("part 0")
    consumer.join(timeout=10)
    unit, part = got[0]
    assert part == "part 0" and unit.future is submitted[0]
    assert len(scheduler.units) <= HELD_PER_WORKER * 1  # finished results waiting are bounded
