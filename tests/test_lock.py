"""One writer per dataset folder (dataset/lock.py): a second writer refuses at once, readers
say a run is in progress, a holder killed with -9 leaves no lock, and two producers started
together into one new folder leave a dataset that validates."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cudagen_data.dataset import lock
from cudagen_data.dataset.lock import LOCK_FILE, FolderBusy, refuse_if_writing, writer_lock
from cudagen_data.dataset.store import DatasetError, DatasetFolder

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "cudagen_data.cli", *args], capture_output=True, text=True, env=ENV, **kw
    )


def _holder(folder: Path) -> subprocess.Popen:
    """A process that takes the folder's writer lock and sleeps (until killed)."""
    code = textwrap.dedent(f"""
        import sys, time
        from cudagen_data.dataset.lock import writer_lock
        with writer_lock({str(folder)!r}):
            print("held", flush=True)
            time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _wait_for_lock(folder: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout and proc.poll() is None:
        try:
            refuse_if_writing(folder)
        except FolderBusy:
            return
        time.sleep(0.05)
    raise AssertionError(f"the writer never took the lock (exit code {proc.poll()})")


def test_second_writer_refuses_naming_the_pid_and_a_killed_holder_leaves_no_lock(tmp_path):
    folder = tmp_path / "ds"
    holder = _holder(folder)
    try:
        with pytest.raises(FolderBusy, match=rf"{folder}: another cudagen process \(pid {holder.pid}\)"):
            with writer_lock(folder):
                pass
        with pytest.raises(FolderBusy, match=rf"a run is in progress \(pid {holder.pid}"):
            refuse_if_writing(folder)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the stale pid is still in the file, but the kernel dropped the lock with the process
    assert (folder / LOCK_FILE).read_text().strip() == str(holder.pid)
    refuse_if_writing(folder)
    with writer_lock(folder):
        assert (folder / LOCK_FILE).read_text().strip() == str(os.getpid())
        with writer_lock(folder):  # re-entrant within a process (produce inside a locked command)
            pass
        refuse_if_writing(folder)  # this process's own lock does not stop its reads


def test_the_lock_file_alone_is_no_dataset_and_overwrite_keeps_it(tmp_path):
    folder = DatasetFolder(tmp_path)
    with writer_lock(tmp_path):
        assert not folder.has_outputs()
        (tmp_path / "stats.json").write_text("{}")
        (tmp_path / ".cudagen" / "state.json").write_text("{}")
        assert folder.has_outputs()
        folder.clear()
        assert not folder.has_outputs() and (tmp_path / LOCK_FILE).is_file()
        assert [p.name for p in (tmp_path / ".cudagen").iterdir()] == ["lock"]


def test_a_path_that_is_a_file_is_one_error(tmp_path):
    f = tmp_path / "f"
    f.write_text("keep me")
    with pytest.raises(DatasetError, match="not a folder"):
        with writer_lock(f):
            pass
    with pytest.raises(DatasetError, match="is a file"):
        with writer_lock(f / "sub"):
            pass
    assert f.read_text() == "keep me"


READERS = [
    ["validate", "{d}", "--no-progress"],
    ["stats", "{d}"],
    ["export", "{d}", "--out", "{d}/../x.jsonl"],
    ["eval", "{d}/../p.jsonl", "--dataset", "{d}"],
    ["gpu-validate", "{d}", "--no-progress"],
    ["publish", "{d}", "--repo-id", "a/b", "--dry-run"],
]


@pytest.mark.parametrize(
    "args", [["negatives", "{d}", "--no-progress", "-w", "0"], ["mine", "{d}/../p.py", "-o", "{d}", "--no-progress"]]
)
def test_other_writers_refuse_too(tmp_path, args):
    from typer.testing import CliRunner

    from cudagen_data.cli import app

    folder = tmp_path / "ds"
    (tmp_path / "p.py").write_text("import warp as wp\n")
    holder = _holder(folder)
    try:
        res = CliRunner().invoke(app, [a.format(d=folder) for a in args])
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines()[-1] == (
        f"error: {folder}: another cudagen process (pid {holder.pid}) is writing this folder; "
        "wait for it to end (a second writer would corrupt it)"
    )


@pytest.mark.parametrize("args", READERS, ids=lambda a: a[0])
def test_readers_say_a_run_is_in_progress(tmp_path, args):
    from typer.testing import CliRunner

    from cudagen_data.cli import app

    folder = tmp_path / "ds"
    (tmp_path / "p.jsonl").write_text('{"id": "x", "cuda_forward": ""}\n')
    holder = _holder(folder)
    try:
        res = CliRunner().invoke(app, [a.format(d=folder) for a in args])
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert res.exit_code == 1 and res.exception is None or isinstance(res.exception, SystemExit)
    assert res.output.strip().splitlines() == [
        f"error: {folder}: a run is in progress (pid {holder.pid} is writing it); try again when it has ended"
    ]
    assert not (tmp_path / "x.jsonl").exists()


PRODUCE = ["produce", "--count", "300", "--categories", "arithmetic", "--fast", "--workers", "0", "--no-progress"]


def test_two_producers_into_one_new_folder(tmp_path):
    out = tmp_path / "ds"
    first = subprocess.Popen([sys.executable, "-m", "cudagen_data.cli", *PRODUCE, "--output", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
    try:
        _wait_for_lock(out, first)
        t0 = time.time()
        second = cli(*PRODUCE, "--output", str(out))
        took = time.time() - t0
        still_running = first.poll() is None
        out_first, err_first = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 1, second.stderr
    lines = second.stderr.strip().splitlines()
    assert lines == [
        f"error: {out}: another cudagen process (pid {first.pid}) is writing this folder; "
        "wait for it to end (a second writer would corrupt it)"
    ]
    assert still_running, "the second producer should refuse while the first one runs"
    assert took < 30, f"the second producer took {took:.1f} s to refuse"
    assert first.returncode == 0, err_first
    assert "300 pairs in" in out_first
    res = cli("validate", str(out), "--no-progress", "--workers", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert len((out / "jsonl" / "train.jsonl").read_bytes().splitlines()) == 300 - sum(
        len((out / "jsonl" / f"{s}.jsonl").read_bytes().splitlines()) for s in ("validation", "test")
    )


def test_a_producer_killed_with_9_leaves_no_lock(tmp_path):
    out = tmp_path / "ds"
    # killed as soon as it holds the lock: fewer rows than PRODUCE's (the run that resumes makes them all)
    produce = [*PRODUCE[:2], "60", *PRODUCE[3:]]
    first = subprocess.Popen([sys.executable, "-m", "cudagen_data.cli", *produce, "--output", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)  # fmt: skip
    _wait_for_lock(out, first)
    assert first.poll() is None
    first.send_signal(signal.SIGKILL)
    first.wait()
    res = cli(*produce, "--output", str(out))
    assert res.returncode == 0, res.stderr
    res = cli("validate", str(out), "--no-progress", "--workers", "0")
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_writer_that_wrote_nothing_leaves_nothing(tmp_path):
    new = tmp_path / "a" / "b"
    with writer_lock(new):
        assert (new / LOCK_FILE).is_file()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "README.md").write_text("somebody else's")
    with writer_lock(tmp_path):
        pass
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]
    # one that wrote (mine into a new folder writes nothing under .cudagen/) keeps the file, empty,
    # so that readers of the folder have a lock to hold
    with writer_lock(new):
        (new / "manifest.json").write_text("{}")
    assert (new / LOCK_FILE).read_bytes() == b""


# ---- a lock file deleted between a process's open and its flock (issue #26 audit)

STEPPED = """
import sys
from cudagen_data.dataset.lock import FolderBusy, writer_lock
try:
    with writer_lock(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.readline()  # holds until told
except FolderBusy as exc:
    print(f"busy: {exc}", flush=True)
"""


def _stepped(folder: Path) -> tuple[subprocess.Popen, str]:
    """A writer in another process: (process, its first line: "held" or "busy: ...")."""
    proc = subprocess.Popen([sys.executable, "-c", STEPPED, str(folder)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
    return proc, proc.stdout.readline().strip()


def _release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=30)


def _deleted_before_flock(monkeypatch, folder: Path, then_start_c: bool) -> dict:
    """Make this process's next flock run after A (a writer that wrote nothing to the new
    ``folder``, so deletes the lock file and the folders as it ends) has ended: this
    process has then opened a file that no name leads to any more.  With ``then_start_c``,
    C (another writer) locks a new file of the same name before the flock.  Returns
    {"c": C's process and first line} once the flock has run."""
    a, line = _stepped(folder)
    assert line == "held"
    real_flock, seen = lock.fcntl.flock, {}

    def flock(fd, operation):
        if not seen:
            seen["opened"] = os.fstat(fd).st_ino
            _release(a)
            assert not (folder / LOCK_FILE).exists(), "A should have deleted its lock file"
            if then_start_c:
                seen["c"] = _stepped(folder)
                assert seen["c"][1] == "held"
                assert os.stat(folder / LOCK_FILE).st_ino != seen["opened"]
        return real_flock(fd, operation)

    monkeypatch.setattr(lock.fcntl, "flock", flock)
    return seen


def test_a_writer_that_locked_a_deleted_file_starts_over_and_the_next_writer_refuses(tmp_path, monkeypatch):
    """B opens the lock file, A deletes it, B locks the deleted file: B must lock the file
    the name leads to now, so that C, which makes a new one, is refused."""
    folder = tmp_path / "ds"
    _deleted_before_flock(monkeypatch, folder, then_start_c=False)
    with writer_lock(folder):  # B
        monkeypatch.undo()
        c, line = _stepped(folder)
        _release(c)
        assert line == (
            f"busy: {folder}: another cudagen process (pid {os.getpid()}) is writing this folder; "
            "wait for it to end (a second writer would corrupt it)"
        ), "two writers held the folder at once"
    assert list(tmp_path.iterdir()) == []  # B wrote nothing: it leaves nothing, as A did


@pytest.mark.parametrize("b", ["writer", "reader"])
def test_a_process_that_locked_a_deleted_file_sees_the_new_holder(tmp_path, monkeypatch, b):
    """B opens the lock file, A deletes it, C locks a new file of that name, then B locks
    the deleted file: B must find C, as if it had opened the new file."""
    folder = tmp_path / "ds"
    seen = _deleted_before_flock(monkeypatch, folder, then_start_c=True)
    try:
        with pytest.raises(FolderBusy) as refused:
            with writer_lock(folder) if b == "writer" else lock.reader_lock(folder):
                pass
    finally:
        if "c" in seen:
            _release(seen["c"][0])
    c_pid = seen["c"][0].pid
    assert f"{folder}: " in str(refused.value) and f"pid {c_pid}" in str(refused.value)


# ---- readers hold the lock shared for as long as they read

READ_BY = {  # command -> (module, name) of what it calls while it holds the folder (cli.py)
    "validate": ("cudagen_data.validate", "validate_path"),
    "stats": ("cudagen_data.pipeline.finalize", "load_stats"),
    "export": ("cudagen_data.publish.export", "export"),
    "eval": ("cudagen_data.eval", "evaluate"),
    "gpu-validate": ("cudagen_data.gpu", "run_gpu_validation"),
    "publish": ("cudagen_data.publish.hub", "publish"),
}
READING = (
    "{d}: a cudagen command (validate, stats, export, eval, gpu-validate or publish) is reading this folder; "
    "wait for it to end, then run this again"
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    from cudagen_data.pipeline.config import ProduceConfig
    from cudagen_data.pipeline.producer import produce

    tmp = tmp_path_factory.mktemp("readers")
    produce(ProduceConfig(count=6, categories=("arithmetic",), fast=True), tmp / "ds", workers=0, progress=False)
    (tmp / "p.jsonl").write_text('{"id": "x", "cuda_forward": ""}\n')
    return tmp / "ds"


@pytest.mark.parametrize("args", READERS, ids=lambda a: a[0])
def test_a_writer_that_starts_while_a_reader_reads_refuses(finished, monkeypatch, args):
    """Each reader command holds the lock while it reads: a writer started from inside
    what it calls is refused, in one line saying a command reads the folder."""
    import importlib

    import typer
    from typer.testing import CliRunner

    from cudagen_data.cli import app

    seen = []

    def read_and_start_a_writer(*_, **__):
        writer = subprocess.run([sys.executable, "-c", STEPPED, str(finished)], stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, env=ENV, timeout=60)  # fmt: skip
        seen.append(writer.stdout.strip())
        raise typer.Exit(0)

    module, name = READ_BY[args[0]]
    monkeypatch.setattr(importlib.import_module(module), name, read_and_start_a_writer)
    res = CliRunner().invoke(app, [a.format(d=finished) for a in args])
    assert res.exit_code == 0, res.output
    assert seen == ["busy: " + READING.format(d=finished)], "the writer was not refused while the reader read"
    with writer_lock(finished):  # the reader let go when it ended
        pass


def test_produce_into_a_folder_being_read_is_one_line_and_changes_nothing(finished):
    before = {p: p.read_bytes() for p in finished.rglob("*") if p.is_file()}
    with lock.reader_lock(finished):
        with lock.reader_lock(finished):  # readers share it
            res = cli("validate", str(finished), "--no-progress", "-w", "0")  # and so do other processes' readers
            assert res.returncode == 0, res.stdout + res.stderr
            res = cli(*PRODUCE, "--output", str(finished))
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().splitlines() == ["error: " + READING.format(d=finished)]
    assert {p: p.read_bytes() for p in finished.rglob("*") if p.is_file()} == before
