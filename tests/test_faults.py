"""Faults injected into a running ``cudagen produce`` (issue #26 §3), and what the user gets.

Each fault: what the command prints, its exit code, and that the same command (or, for a
damaged private folder, ``--overwrite``) then makes a dataset that ``cudagen validate``
passes and that is byte for byte the one an undisturbed run makes (timing fields aside).
The README's "Reliability" table is this module in words.

Tested elsewhere and kept there: ``kill -9`` of the driver at random moments, then resume
(test_produce.py::test_kill_9_at_random_moments_then_resume); no worker outlives a driver
killed with -9 (test_orphans.py); a kernel that kills its worker is rejected alone, the
rest unchanged (test_produce.py::test_a_kernel_that_crashes_its_worker_is_rejected_alone,
test_ray.py for Ray workers); a second writer (test_lock.py).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from procs import descendants
from test_produce import comparable

from cudagen_data.pipeline.config import ProduceConfig
from cudagen_data.pipeline.producer import produce
from cudagen_data.validate import format_report, validate_path

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, sets rlimits")

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
# 10 batches of 5 rows: the signal tests signal after the second commit (from inside the run, no
# race), the damaged-folder tests stop after the sixth, the full-disk ones fail by the fourth; a
# train shard every 12 rows (the second is turned mid-run).  Every test here runs it 2-3 times,
# in a fresh process: the fewest rows that keep those moments apart.
CONFIG = ProduceConfig(count=50, categories=("arithmetic",), seed=7, fast=True, batch_size=5, shard_rows=12)
ARGS = [
    "produce", "--count", "50", "--categories", "arithmetic", "--seed", "7", "--fast", "--batch-size", "5",
    "--shard-rows", "12", "--no-progress",
]  # fmt: skip
RESUME_LINE = "everything committed so far is kept; run the same command again to resume"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "ds"
    produce(CONFIG, out, workers=0, progress=False)
    return {**comparable(out), "files": files_of(out)}


def files_of(folder: Path) -> list[str]:
    """Every file's path in the folder: a fault must leave none behind (a temporary file...)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "cudagen_data.cli", *args], capture_output=True, text=True, env=ENV, **kw
    )


def start(out: Path, *extra: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cudagen_data.cli", *ARGS, "--output", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, **kw)  # fmt: skip


# The run holds still after its N-th commit until the test says go (a file appears), or for two
# minutes: the test then looks at, or kills, the workers of a run that is certainly still going
# (on a busy machine, the test, polling, may see a commit late: a run of 160 rows once ended
# before the test had seen its second commit).  With a signal named, the run is sent that
# signal (to its process group or to itself) right after its M-th commit: the moment the tests
# below signalled it at, without the race.
PAUSED = """
import os, signal, sys, time
from cudagen_data.dataset.store import DatasetFolder
after, go, signal_at, name, to_group = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
commit, commits = DatasetFolder.commit, 0

def held_commit(self, *args, **kwargs):
    global commits
    commit(self, *args, **kwargs)
    commits += 1
    if commits == signal_at:
        os.killpg(0, signal.Signals[name]) if to_group == "1" else os.kill(os.getpid(), signal.Signals[name])
    t0 = time.time()
    while commits == after and not os.path.exists(go) and time.time() - t0 < 120:
        time.sleep(0.05)

DatasetFolder.commit = held_commit
from cudagen_data.cli import app
sys.argv = ["cudagen", *sys.argv[6:]]
app()
"""


def start_paused(out: Path, after: int, go: Path, *extra: str, signal_at: int = 0, sig=signal.SIGINT,
                 to_group: bool = False, **kw) -> subprocess.Popen:  # fmt: skip
    """:func:`start`, holding still after its ``after``-th commit until file ``go`` exists
    (and, with ``signal_at``, sent ``sig`` right after that commit)."""
    wrapper = [PAUSED, str(after), str(go), str(signal_at), sig.name, "1" if to_group else "0"]
    return subprocess.Popen([sys.executable, "-c", *wrapper, *ARGS, "--output", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=_ctrl_c_as_in_a_terminal, **kw)  # fmt: skip


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT at its default in the command, as a shell gives it: a pytest-xdist worker ignores
    SIGINT, and a child inherits that (Python then installs no KeyboardInterrupt handler), so
    under xdist the run went on after Ctrl-C and exited 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def committed_batches(out: Path) -> int:
    try:
        return orjson.loads((out / ".cudagen" / "state.json").read_bytes())["next_batch"]
    except (OSError, orjson.JSONDecodeError, KeyError):
        return 0


def wait_for_commits(out: Path, proc: subprocess.Popen, batches: int = 2, timeout: float = 120) -> None:
    t0 = time.time()
    while committed_batches(out) < batches:
        assert proc.poll() is None, f"the run ended before its {batches}th commit: {proc.communicate()}"
        assert time.time() - t0 < timeout, "no commit in time"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def assert_valid(out: Path) -> None:
    """`cudagen validate` passes on the folder: its library call, in this process (the command's
    own exit codes: test_produce.py; a process here costs more than the check)."""
    report = validate_path(out, arch=None, progress=False, workers=0)
    assert report.ok, format_report(report)


def resumed_and_valid(out: Path, reference: dict, *extra: str) -> None:
    """The same command finishes the run; validate passes; the rows are the undisturbed run's."""
    res = cli(*ARGS, "--output", str(out), "-w", "0", *extra)
    assert res.returncode == 0, res.stderr
    assert_valid(out)
    assert {**comparable(out), "files": files_of(out)} == reference


# ------------------------------------------------------------------ signals


@pytest.mark.parametrize(
    "sig, to_group, code, word",
    [(signal.SIGINT, True, 130, "interrupted"), (signal.SIGTERM, False, 143, "terminated")],
    ids=["SIGINT-to-the-terminal's-group", "SIGTERM-to-the-driver"],
)
def test_a_signal_stops_the_run_cleanly_and_it_resumes(tmp_path, reference, sig, to_group, code, word):
    out = tmp_path / "ds"
    # held after its first commit while the test notes its workers, then signalled after its second
    # (to the group, as the terminal's Ctrl-C does, or to the driver alone, as `kill PID` does)
    proc = start_paused(out, 1, tmp_path / "go", "--workers", "2", signal_at=2, sig=sig, to_group=to_group,
                        start_new_session=True)  # fmt: skip
    wait_for_commits(out, proc, batches=1)
    family = descendants(proc.pid)
    assert family, "the run should have worker processes"
    (tmp_path / "go").touch()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"{word}: {RESUME_LINE}"
    t0 = time.time()
    while any(alive(p) for p in family) and time.time() - t0 < 20:
        time.sleep(0.1)
    assert not any(alive(p) for p in family), "worker processes outlived the stopped run"
    resumed_and_valid(out, reference)


def test_a_worker_killed_with_9_changes_nothing(tmp_path, reference):
    # (killed while it sends a result, the pool breaks after pool.STUCK_SECONDS: test_produce.py)
    out = tmp_path / "ds"
    proc = start_paused(out, 1, tmp_path / "go", "--workers", "2", start_new_session=True)
    wait_for_commits(out, proc, batches=1)
    workers = [p for p in descendants(proc.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert workers
    os.kill(workers[0], signal.SIGKILL)
    (tmp_path / "go").touch()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert_valid(out)
    assert {**comparable(out), "files": files_of(out)} == reference


# ------------------------------------------------------------------ a full disk


def _file_size_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("jsonl", ["--jsonl", "--no-jsonl"])
def test_a_full_disk_is_one_line_and_the_next_run_resumes(tmp_path, reference, jsonl):
    """A file-size limit (RLIMIT_FSIZE) makes the write that crosses it fail as a full disk
    does: with --jsonl it hits the JSONL file, with --no-jsonl a shard's spool."""
    out = tmp_path / "ds"
    # a batch of 5 rows: ~50-85 KB (the JSONL file and a shard's spool of 12 rows cross the limit mid-run)
    proc = start(out, jsonl, "--workers", "0", preexec_fn=_file_size_limit(120_000))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: {out}/") and "cannot write (File too large)" in lines[0], lines[0]
    assert lines[0].endswith("make room (or fix permissions) and run the same command again to resume")
    assert committed_batches(out) >= 1, lines  # it failed mid-run, with batches committed before
    if jsonl == "--jsonl":
        resumed_and_valid(out, reference)
    else:
        res = cli(*ARGS, "--output", str(out), "-w", "0", jsonl)
        assert res.returncode == 0, res.stderr
        assert_valid(out)
        ref = {**reference, "rows": None}  # no JSONL files
        ref["manifest"] = {**reference["manifest"], "config": {**reference["manifest"]["config"], "jsonl": False}}
        ref["manifest"]["files"] = [f for f in reference["manifest"]["files"] if not f["path"].startswith("jsonl/")]
        ref["manifest"]["command"] = reference["manifest"]["command"] + " --no-jsonl"
        got = comparable(out)
        assert got["shards"] == ref["shards"] and got["rejects"] == ref["rejects"] and got["stats"] == ref["stats"]


# The disk fills up during one chosen write: the child lowers its file-size limit around the
# N-th call of the function that makes that file, so that write (and no other) fails as a full
# disk makes it fail, with the operating system's error, inside the real writer code (pyarrow's
# for a shard).
AT_NTH_CALL = """
import resource, signal, sys
from cudagen_data.dataset import shards
from cudagen_data.dataset.store import DatasetFolder
where, nth, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
calls = 0

def full_disk_at_nth_call(fn):
    def call(*args, **kwargs):
        global calls
        calls += 1
        if calls != nth:
            return fn(*args, **kwargs)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            return fn(*args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    return call

if where == "shard":
    shards.write_parquet = full_disk_at_nth_call(shards.write_parquet)
else:
    DatasetFolder.save_state = full_disk_at_nth_call(DatasetFolder.save_state)
from cudagen_data.cli import app
sys.argv = ["cudagen", *sys.argv[4:]]
app()
"""
FULL_DISK_LINE = (
    "error: {path}: cannot write (File too large); what was committed is kept: make room (or fix permissions) "
    "and run the same command again to resume"
)


def run_with_full_disk_at(where: str, nth: int, out: Path, args: list[str], limit: int = 1000):
    return subprocess.run([sys.executable, "-c", AT_NTH_CALL, where, str(nth), str(limit), *args, "--output", str(out)],
                          capture_output=True, text=True, env=ENV, timeout=600)  # fmt: skip


@pytest.mark.parametrize(
    "where, nth, path",
    [
        ("shard", 2, ".cudagen/shards/train-00001.parquet"),  # the second shard, turned from its spool mid-run
        ("state", 4, ".cudagen/state.json"),  # the commit of the third batch
    ],
    ids=["parquet-shard", "state-file"],
)
def test_a_full_disk_while_a_shard_or_the_state_is_written(tmp_path, reference, where, nth, path):
    out = tmp_path / "ds"
    res = run_with_full_disk_at(where, nth, out, [*ARGS, "-w", "0"])
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().splitlines() == [FULL_DISK_LINE.format(path=out / path)], res.stderr
    assert committed_batches(out) >= 1
    assert not [p for p in out.rglob("*.tmp")], "a half-written file was left"
    resumed_and_valid(out, reference)


REAL_ARGS = [
    "produce", "--count", "4", "--categories", "arithmetic", "--seed", "3", "--batch-size", "2", "--shard-rows", "1",
    "--no-progress", "-w", "0",
]  # fmt: skip


def test_a_full_disk_in_a_real_run(tmp_path):
    """Without --fast (compiled, run, gradients checked: rows hold test vectors): the second
    shard's write fails; the same command resumes to the bytes of an undisturbed run."""
    ref = tmp_path / "ref"
    produce(ProduceConfig(count=4, categories=("arithmetic",), seed=3, batch_size=2, shard_rows=1), ref, workers=0,
            progress=False)  # fmt: skip
    out = tmp_path / "ds"
    res = run_with_full_disk_at("shard", 2, out, REAL_ARGS)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().splitlines() == [
        FULL_DISK_LINE.format(path=out / ".cudagen/shards/train-00001.parquet")
    ], res.stderr
    res = cli(*REAL_ARGS, "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert_valid(out)
    assert comparable(out) == comparable(ref) and files_of(out) == files_of(ref)


def test_a_full_disk_in_negatives_is_one_line_and_it_resumes(tmp_path):
    """Every other writer's full disk is one line too (cli.expected_errors); negatives
    resumes to the negatives an undisturbed run makes."""
    import pyarrow.parquet as pq

    config = ProduceConfig(count=6, categories=("arithmetic",), fast=True)
    for name in ("ref", "ds"):
        produce(config, tmp_path / name, workers=0, progress=False)
    args = ["negatives", "-w", "0", "--no-progress"]
    assert cli(*args, str(tmp_path / "ref")).returncode == 0
    out = tmp_path / "ds"
    res = subprocess.run([sys.executable, "-c", AT_NTH_CALL, "shard", "1", "1000", *args, str(out)],
                         capture_output=True, text=True, env=ENV, timeout=600)  # fmt: skip
    assert res.returncode == 1, res.stderr
    (shard,) = [line.split(": cannot write")[0].removeprefix("error: ") for line in res.stderr.splitlines()]
    assert shard.startswith(f"{out}/.cudagen/negatives/shards/") and shard.endswith(".parquet"), res.stderr
    assert res.stderr.strip().endswith("cannot write (File too large); make room, then run the same command again")
    assert not [p for p in out.rglob("*.tmp")]
    res = cli(*args, str(out))
    assert res.returncode == 0, res.stderr
    assert_valid(out)

    def negatives(folder: Path) -> dict:
        return {p.name: pq.read_table(p).to_pylist() for p in sorted((folder / "data" / "negatives").glob("*"))}

    assert negatives(out) == negatives(tmp_path / "ref") and files_of(out) == files_of(tmp_path / "ref")


# ------------------------------------------------------------------ a damaged private folder


class _Stop(Exception):
    pass


def _partial_run(out: Path, batches: int) -> None:
    """A run stopped after ``batches`` commits (state, spools and staged shards on disk)."""

    def stop(_):
        if committed_batches(out) >= batches:
            raise _Stop

    with pytest.raises(_Stop):
        produce(CONFIG, out, workers=0, progress=False, on_batch=stop)


def _flip(folder: Path, rel: str, at: int) -> str:
    path = folder / rel
    data = bytearray(path.read_bytes())
    data[at] = ord("7") if data[at] != ord("7") else ord("3")
    path.write_bytes(bytes(data))
    return rel


def _delete(folder: Path, rel: str) -> str:
    (folder / rel).unlink()
    return rel


def _spool(folder: Path) -> str:
    """The open train spool (the one a resume appends to)."""
    (path,) = (folder / ".cudagen/spool").glob("train-*.jsonl")
    return str(path.relative_to(folder))


def _cut(folder: Path, rel: str) -> str:
    path = folder / rel
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return rel


def _edit_state(folder: Path) -> str:
    """A change that keeps the file valid JSON: one batch more than was committed."""
    path = folder / ".cudagen/state.json"
    text = path.read_text()
    n = orjson.loads(text)["next_batch"]
    path.write_text(text.replace(f'"next_batch": {n},', f'"next_batch": {n + 1},'))
    return ".cudagen/state.json"


DAMAGE = {
    # name: (damage: folder -> the file damaged, words in the error)
    "state-truncated": (lambda d: _cut(d, ".cudagen/state.json"), "unreadable run state"),
    "state-edited": (_edit_state, "does not match its checksum"),
    "spool-truncated": (lambda d: _cut(d, _spool(d)), "shorter than its committed size"),
    "spool-byte-changed": (lambda d: _flip(d, _spool(d), 200), "committed bytes differ"),
    "jsonl-byte-changed": (lambda d: _flip(d, "jsonl/train.jsonl", 300), "committed bytes differ"),
    "shard-byte-changed": (lambda d: _flip(d, ".cudagen/shards/train-00000.parquet", 100), "checksum differs"),
    "shard-deleted": (lambda d: _delete(d, ".cudagen/shards/train-00000.parquet"), "is missing"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_private_file_is_named_and_never_becomes_rows(tmp_path, reference, damage):
    out = tmp_path / "ds"
    _partial_run(out, batches=6)  # 30 rows: two shards staged per split-train, a spool open
    hurt, words = DAMAGE[damage]
    rel = hurt(out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "lock"}
    res = cli(*ARGS, "--output", str(out), "-w", "0")
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith(f"error: {out / rel}: ") and words in lines[0], lines[0]
    assert lines[0].endswith("use --overwrite to start over") or lines[0].endswith("use --overwrite"), lines[0]
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "lock"}
    assert after == before, "the refused resume changed files"
    resumed_and_valid(out, reference, "--overwrite")


# ------------------------------------------------------------------ a read-only folder, as a normal user

AS_NOBODY = """
import os, pwd, sys
import typer.main
from cudagen_data.cli import app
typer.main.get_command(app).main(["categories"], standalone_mode=False)  # typer's lazy imports, while readable
nobody = pwd.getpwnam("nobody")
os.setgid(nobody.pw_gid)
os.setuid(nobody.pw_uid)
sys.argv = ["cudagen", *sys.argv[1:]]
app()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="drops root to user nobody: needs root")
def test_a_read_only_folder_for_a_normal_user(reference):
    """A half-made dataset the user may not write (made by another user, or read-only):
    one line, exit 2, nothing touched; once writable, the same command finishes it."""
    import shutil
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="cudagen-nobody-"))  # pytest's tmp is root's alone (0700)
    try:
        os.chmod(home, 0o755)
        out = home / "ds"
        _partial_run(out, batches=3)
        files = [p for p in out.rglob("*")]
        for p in [out, *files]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        before = {p: p.read_bytes() for p in files if p.is_file()}
        res = subprocess.run([sys.executable, "-c", AS_NOBODY, *ARGS, "--output", str(out), "-w", "0"],
                             capture_output=True, text=True, env={**ENV, "HOME": str(home)}, timeout=120)  # fmt: skip
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().splitlines() == [f"error: --output {out}: no permission to write in it"]
        assert {p: p.read_bytes() for p in files if p.is_file()} == before
        for p in [out, *files]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        resumed_and_valid(out, reference)
    finally:
        shutil.rmtree(home)
