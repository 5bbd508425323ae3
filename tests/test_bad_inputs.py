"""Every bad input of every command: one ``error: ...`` line, a non-zero exit, no traceback,
nothing written and nothing lost (every file under the test's folder byte for byte as
before, and no new file).

The table is what was tried (issue #26 §2): counts, paths that are files or missing or
unwritable, ratios that do not sum to 1, an arch NVRTC lacks, a dataset folder of another
version or configuration, a folder that is not a dataset.  Most cases run in-process
(typer's CliRunner); the unwritable-path cases run in a child that drops root (tests run
as root, which may write anywhere)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from cudagen_data.cli import app
from cudagen_data.dataset.store import state_check
from cudagen_data.pipeline.config import ProduceConfig
from cudagen_data.pipeline.producer import produce

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

# (id, command line with {placeholders}, text the error line holds, exit code)
CASES = [
    # ---- produce
    ("produce-output-is-a-file", "produce -o {file}", "--output {file}: a file, not a folder", 2),
    ("produce-output-under-a-file", "produce -o {file}/ds", "{file} is a file, not a folder", 2),
    ("produce-workers-negative", "produce -o {new} --workers -3", "--workers -3: must be at least 0", 2),
    ("produce-workers-not-a-number", "produce -o {new} --workers many", "Invalid value for '--workers'", 2),
    ("produce-count-0", "produce -o {new} --count 0", "--count 0: must be at least 1", 2),
    ("produce-count-negative", "produce -o {new} --count -5", "--count -5: must be at least 1", 2),
    ("produce-categories-empty", "produce -o {new} --categories=", "--categories '' names no category", 2),
    ("produce-categories-commas", "produce -o {new} --categories=,", "--categories ',' names no category", 2),
    ("produce-categories-unknown", "produce -o {new} --categories nope", "unknown nope; known: arithmetic", 2),
    ("produce-categories-twice", "produce -o {new} -c arithmetic,arithmetic", "a category is named twice", 2),
    ("produce-seed-negative", "produce -o {new} --seed -1", "--seed -1: must be at least 0", 2),
    ("produce-arch-nvrtc-lacks", "produce -o {new} --arch 52", "--arch 52: not a target Warp's NVRTC supports", 2),
    ("produce-compile-level", "produce -o {new} --compile sass", "--compile 'sass': use frontend or ptx", 2),
    ("produce-batch-size-0", "produce -o {new} --batch-size 0", "--batch-size 0: must be at least 1", 2),
    ("produce-max-chars-0", "produce -o {new} --max-chars 0", "--max-chars 0: must be at least 1", 2),
    ("produce-shard-rows-0", "produce -o {new} --shard-rows 0", "--shard-rows 0: must be at least 1", 2),
    ("produce-ratios-sum", "produce -o {new} --split-ratios 0.5,0.4,0.2", "must sum to 1", 2),
    ("produce-ratios-two", "produce -o {new} --split-ratios 0.5,0.5", "three numbers", 2),
    ("produce-ratios-negative", "produce -o {new} --split-ratios -0.1,0.6,0.5", "finite and >= 0", 2),
    ("produce-ratios-nan", "produce -o {new} --split-ratios nan,0.5,0.5", "finite and >= 0", 2),
    ("produce-ratios-words", "produce -o {new} --split-ratios a,b,c", "three numbers", 2),
    ("produce-executor", "produce -o {new} --executor slurm", "--executor 'slurm': use local or ray", 2),
    ("produce-ray-address-alone", "produce -o {new} --ray-address 1.2.3.4:6379", "needs --executor ray", 2),
    ("produce-ray-address-words", "produce -o {new} --executor ray --ray-address nonsense", "use HOST:PORT", 2),
    ("produce-ray-address-port", "produce -o {new} --executor ray --ray-address h:99999", "use HOST:PORT", 2),
    ("produce-ray-address-refused", "produce -o {new} --executor ray --ray-address 127.0.0.1:1", "nothing answers", 2),
    ("produce-resources-fast", "produce -o {new} --resources --fast", "cannot be combined with --fast", 2),
    ("produce-unknown-option", "produce -o {new} --fats", "No such option: --fats", 2),
    ("produce-other-config", "produce -o {ds} --fast --count 7 -c arithmetic -w 0", "another configuration", 1),
    ("produce-other-version", "produce -o {old_version} --fast --count 6 -c arithmetic -w 0", "warp=0.0.1", 1),
    ("produce-old-state-format", "produce -o {old_format} --fast --count 6 -c arithmetic -w 0", "older", 1),
    ("produce-foreign-folder", "produce -o {foreign} --fast --count 6 -c arithmetic -w 0", "no run state", 1),
    ("produce-torn-state", "produce -o {torn_state} --fast --count 6 -c arithmetic -w 0", "unreadable run state", 1),
    # ---- extract
    ("extract-missing-file", "extract {new}.py", "{new}.py: no such file or folder", 2),
    ("extract-a-folder", "extract {tmp}", "{tmp}: not a file", 2),
    ("extract-not-utf8", "extract {latin1}", "cannot read", 2),
    ("extract-out-is-a-folder", "extract {kernel} --out {tmp}", "--out {tmp}: a folder, not a file", 2),
    ("extract-out-under-a-file", "extract {kernel} --out {file}/x.jsonl", "{file} is a file, not a folder", 2),
    ("extract-arch", "extract {kernel} --arch 12", "--arch 12: not a target", 2),
    ("extract-compile-level", "extract {kernel} --compile fast", "--compile 'fast'", 2),
    # ---- mine
    ("mine-missing-path", "mine {new}.py -o {new}", "{new}.py: no such file or folder", 2),
    ("mine-output-is-a-file", "mine {kernel} -o {file}", "--output {file}: a file, not a folder", 2),
    ("mine-workers-0", "mine {kernel} -o {new} --workers 0", "--workers 0: must be at least 1", 2),
    ("mine-timeout-0", "mine {kernel} -o {new} --timeout 0", "--timeout 0.0: must be more than 0", 2),
    ("mine-timeout-negative", "mine {kernel} -o {new} --timeout -2", "must be more than 0", 2),
    ("mine-arch", "mine {kernel} -o {new} --arch 61", "--arch 61: not a target", 2),
    ("mine-ratios", "mine {kernel} -o {new} --split-ratios 1,1,1", "must sum to 1", 2),
    ("mine-compile-level", "mine {kernel} -o {new} --compile full", "--compile 'full'", 2),
    ("mine-output-foreign", "mine {kernel} -o {foreign} -w 1", "{foreign}: holds files but no cudagen dataset", 1),
    ("mine-output-unfinished-run", "mine {kernel} -o {old_version} -w 1", "produce run that has not finished", 1),
    ("mine-output-other-version", "mine {kernel} -o {v3} -w 1", "row schema version 3 (cudagen-data 0.0.9)", 1),
    # ---- negatives
    ("negatives-missing", "negatives {new}", "{new}: no such file or folder", 2),
    ("negatives-a-file", "negatives {file}", "{file}: not a folder", 2),
    ("negatives-per-row-0", "negatives {ds} --per-row 0", "--per-row 0: must be at least 1", 2),
    ("negatives-kinds", "negatives {ds} --kinds nope", "--kinds: unknown nope", 2),
    ("negatives-kinds-empty", "negatives {ds} --kinds=", "--kinds '' names no kind", 2),
    ("negatives-other-version", "negatives {v3} -w 0", "row schema version 3 (cudagen-data 0.0.9)", 1),
    ("negatives-seed", "negatives {ds} --seed -2", "--seed -2: must be at least 0", 2),
    ("negatives-workers", "negatives {ds} --workers -1", "--workers -1: must be at least 0", 2),
    ("negatives-not-a-dataset", "negatives {tmp}/empty -w 0", "manifest.json", 1),
    # ---- validate
    ("validate-missing", "validate {new}", "{new}: no such file or folder", 2),
    ("validate-workers-negative", "validate {ds} --workers -1", "--workers -1: must be at least 0", 2),
    ("validate-arch", "validate {ds} --arch 99", "--arch 99: not a target", 2),
    ("validate-not-a-dataset", "validate {tmp}/empty", "manifest.json", 1),
    ("validate-a-file", "validate {file}", "{file}: not a dataset folder, nor a .jsonl or .parquet file", 2),
    ("validate-other-version", "validate {v3}", "row schema version 3 (cudagen-data 0.0.9)", 1),
    # ---- stats
    ("stats-missing", "stats {new}", "{new}: no such file or folder", 2),
    ("stats-a-file", "stats {file}", "{file}: not a folder", 2),
    ("stats-not-a-dataset", "stats {tmp}/empty", "stats.json: not found", 1),
    ("stats-other-version", "stats {v3}", "row schema version 3 (cudagen-data 0.0.9)", 1),
    # ---- gpu-validate
    ("gpu-validate-missing", "gpu-validate {new}", "{new}: no such file or folder", 2),
    ("gpu-validate-limit-0", "gpu-validate {ds} --limit 0", "--limit 0: must be at least 1", 2),
    ("gpu-validate-jobs-0", "gpu-validate {ds} --jobs 0", "--jobs 0: must be at least 1", 2),
    ("gpu-validate-device", "gpu-validate {ds} --device gpu0", "--device 'gpu0': use cuda:N", 2),
    ("gpu-validate-report-folder", "gpu-validate {ds} --report {tmp}", "--report {tmp}: a folder, not a file", 2),
    ("gpu-validate-report-under-a-file", "gpu-validate {ds} --report {file}/r.json", "{file} is a file", 2),
    ("gpu-validate-a-file", "gpu-validate {file}", "{file}: not a dataset folder, nor a .jsonl or .parquet", 2),
    ("gpu-validate-not-a-dataset", "gpu-validate {tmp}/empty", "{tmp}/empty/manifest.json: not found", 2),
    ("gpu-validate-other-version", "gpu-validate {v3}", "row schema version 3 (cudagen-data 0.0.9)", 2),
    # ---- eval
    ("eval-missing-predictions", "eval {new}.jsonl --dataset {ds}", "{new}.jsonl: no such file or folder", 2),
    ("eval-missing-dataset", "eval {file} --dataset {new}", "--dataset {new}: no such file or folder", 2),
    ("eval-split", "eval {file} --dataset {ds} --split dev", "--split 'dev': use train or validation or test", 2),
    ("eval-device", "eval {file} --dataset {ds} --device gpu", "--device gpu: use cpu or cuda:N", 2),
    ("eval-seed-negative", "eval {file} --dataset {ds} --seed -4", "--seed -4: must be at least 0", 2),
    ("eval-workers-0", "eval {file} --dataset {ds} --workers 0", "--workers 0: must be at least 1", 2),
    ("eval-fresh-sets-0", "eval {file} --dataset {ds} --fresh-sets 0", "--fresh-sets 0: must be at least 1", 2),
    ("eval-report-folder", "eval {file} --dataset {ds} --report {tmp}", "--report {tmp}: a folder, not a file", 2),
    ("eval-report-under-a-file", "eval {file} --dataset {ds} --report {file}/r.json", "{file} is a file", 2),
    ("eval-workers-negative", "eval {file} --dataset {ds} --workers -1", "--workers -1: must be at least 1", 2),
    ("eval-predictions-a-folder", "eval {tmp} --dataset {ds}", "{tmp}: not a file", 2),
    ("eval-predictions-not-json", "eval {bad_json} --dataset {ds} --split train", "bad.jsonl:2: not a JSON line", 2),
    ("eval-dataset-a-file", "eval {file} --dataset {file}", "--dataset {file}: not a dataset folder, nor a", 2),
    ("eval-dataset-not-a-dataset", "eval {file} --dataset {tmp}/empty", "{tmp}/empty/manifest.json: not found", 2),
    ("eval-dataset-other-version", "eval {file} --dataset {v3}", "row schema version 3 (cudagen-data 0.0.9)", 2),
    # ---- publish
    ("publish-missing", "publish {new} --repo-id a/b --dry-run", "{new}: no such file or folder", 2),
    ("publish-a-file", "publish {file} --repo-id a/b --dry-run", "{file}: not a folder", 2),
    ("publish-repo-id", "publish {ds} --repo-id nope --dry-run", "repo id 'nope': expected ORG/NAME", 1),
    ("publish-not-a-dataset", "publish {tmp}/empty --repo-id a/b --dry-run", "manifest.json", 1),
    ("publish-other-version", "publish {v3} --repo-id a/b --dry-run", "row schema version 3 (cudagen-data 0.0.9)", 1),
    # ---- export
    ("export-missing", "export {new} --out {new}.jsonl", "{new}: no such file or folder", 2),
    ("export-format", "export {ds} --format alpaca --out {new}.jsonl", "--format 'alpaca': use chat or completion", 2),
    ("export-config", "export {ds} --config mined --out {new}.jsonl", "--config 'mined': use default or real", 2),
    ("export-out-folder", "export {ds} --out {tmp}", "--out {tmp}: a folder, not a file", 2),
    ("export-out-under-a-file", "export {ds} --out {file}/x.jsonl", "{file} is a file, not a folder", 2),
    ("export-config-absent", "export {ds} --config real --out {new}.jsonl", "has no 'real' configuration", 1),
    ("export-not-a-dataset", "export {tmp}/empty --out {new}.jsonl", "{tmp}/empty/manifest.json: not found", 1),
    ("export-other-version", "export {v3} --out {new}.jsonl", "row schema version 3 (cudagen-data 0.0.9)", 1),
    # ---- no command
    ("unknown-command", "produse", "No such command 'produse'", 2),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    ds = tmp / "ds"
    produce(ProduceConfig(count=6, categories=("arithmetic",), fast=True), ds, workers=0, progress=False)
    (tmp / "file").write_text("not a dataset\n")
    (tmp / "empty").mkdir()
    (tmp / "kernel.py").write_text(
        "import warp as wp\n\n@wp.kernel\ndef k(a: wp.array(dtype=float)):\n    a[0] = 1.0\n"
    )
    (tmp / "latin1.py").write_bytes("# caf\xe9\n".encode("latin-1"))
    (tmp / "foreign").mkdir()
    (tmp / "foreign" / "README.md").write_text("somebody else's\n")
    for name, edit in (("old_version", _other_warp), ("old_format", _old_format), ("torn_state", _torn)):
        shutil.copytree(ds, tmp / name)
        state = tmp / name / ".cudagen" / "state.json"
        state.write_bytes(edit(state.read_bytes()))
    shutil.copytree(ds, tmp / "v3")  # a finished dataset an older cudagen-data made: rows of schema version 3
    manifest = orjson.loads((tmp / "v3" / "manifest.json").read_bytes())
    manifest["schema_version"] = 3
    manifest["versions"]["cudagen_data"] = "0.0.9"
    (tmp / "v3" / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    first = orjson.loads((ds / "jsonl" / "train.jsonl").read_bytes().splitlines()[0])
    (tmp / "bad.jsonl").write_bytes(orjson.dumps({"id": first["id"], "cuda_forward": ""}) + b"\nnot json\n")
    return tmp


def _other_warp(state: bytes) -> bytes:
    data = orjson.loads(state)
    fp = orjson.loads(data["fingerprint"])
    fp["versions"]["warp"] = "0.0.1"
    data["fingerprint"] = orjson.dumps(fp, option=orjson.OPT_SORT_KEYS).decode()
    data["complete"] = False
    return _signed(data)


def _old_format(state: bytes) -> bytes:
    return _signed({**orjson.loads(state), "format": 1, "complete": False})


def _signed(data: dict) -> bytes:
    """A state as that other version would have written it: its own checksum matches."""
    return orjson.dumps({**data, "check": state_check(data)})


def _torn(state: bytes) -> bytes:
    return state[: len(state) // 2]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _fill(template: str, places: Path) -> list[str]:
    names = {"tmp": places, "new": places / "new", "kernel": places / "kernel.py", "latin1": places / "latin1.py"}
    names.update({n: places / n for n in ("file", "ds", "foreign", "old_version", "old_format", "torn_state", "v3")})
    names["bad_json"] = places / "bad.jsonl"
    return [word.format(**{k: str(v) for k, v in names.items()}) for word in template.split()]


@pytest.mark.parametrize("template, needle, code", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(places, template, needle, code):
    before = snapshot(places)
    res = CliRunner().invoke(app, _fill(template, places))
    lines = res.output.strip().splitlines()
    assert res.exit_code == code, res.output
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert " ".join(_fill(needle, places)) in lines[0] or _fill(needle, places)[0] in lines[0], lines[0]
    assert "Traceback" not in res.output
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), res.exception
    assert snapshot(places) == before, "a bad input changed files"
    assert not (places / "new").exists()


def test_every_option_of_every_command_is_in_the_table():
    """A new option (or command) must get a bad-input case here (or be a flag: no value to get wrong)."""
    import typer.main

    group = typer.main.get_command(app)
    tried = " ".join(c[1] for c in CASES)
    missing = []
    for name, command in group.commands.items():
        if name == "categories":
            continue  # takes nothing
        for param in command.params:
            if getattr(param, "is_flag", False) or param.name == "help":
                continue
            spelled = [o for o in getattr(param, "opts", []) if o.startswith("-")]
            if spelled and not any(
                f"{name} " in c[1] and any(o in c[1].split() or f"{o}=" in c[1] for o in spelled) for c in CASES
            ):
                missing.append(f"{name} {spelled[0]}")
    assert not missing, f"options without a bad-input case: {missing}"
    assert tried


# ---- as a normal user: paths this user may not write (root may write anywhere)


AS_NOBODY = """
import os, pwd, sys
import typer.main
from cudagen_data.cli import app
from cudagen_data.dataset.store import state_check
typer.main.get_command(app).main(["categories"], standalone_mode=False)  # typer's lazy imports, while readable
nobody = pwd.getpwnam("nobody")
os.setgid(nobody.pw_gid)
os.setuid(nobody.pw_uid)  # real and effective: os.access and every open now see a normal user
sys.argv = ["cudagen", *sys.argv[1:]]
app()
"""


@pytest.mark.skipif(
    os.geteuid() != 0, reason="drops root to user nobody: needs root (as a normal user, chmod suffices)"
)
@pytest.mark.parametrize(
    "template, needle",
    [
        ("produce -o {locked}/ds --fast", "--output {locked}/ds: no permission to write in {locked}"),
        ("produce -o {locked} --fast", "--output {locked}: no permission to write in it"),
        ("mine {kernel} -o {locked}/ds", "--output {locked}/ds: no permission to write in {locked}"),
        ("export {ds} --out {locked}/x.jsonl", "--out {locked}/x.jsonl: no permission to write in {locked}"),
        ("extract {kernel} --out {locked}/x.jsonl", "--out {locked}/x.jsonl: no permission to write in {locked}"),
        ("eval {unreadable} --dataset {ds}", "path '{unreadable}' is not readable"),
        ("eval {readable} --dataset {ds} --report {locked}/r.json", "--report {locked}/r.json: no permission to write"),
        ("gpu-validate {ds} --report {locked}/r.json", "--report {locked}/r.json: no permission to write in {locked}"),
        ("negatives {ds} -w 0", "{ds}: no permission to write in it"),  # a dataset folder another user made
    ],
    ids=[
        "produce-new-folder",
        "produce-folder",
        "mine",
        "export",
        "extract",
        "eval-unreadable-predictions",
        "eval-report",
        "gpu-validate-report",
        "negatives-read-only-dataset",
    ],  # fmt: skip
)
def test_unwritable_paths_for_a_normal_user(places, template, needle):
    # The interpreter lives where user nobody cannot read it, so the child starts as root,
    # imports the command line, then drops to nobody before parsing the arguments.
    home = Path(tempfile.mkdtemp(prefix="cudagen-nobody-"))  # pytest's tmp is root's alone (0700)
    try:
        os.chmod(home, 0o755)
        locked = home / "locked"
        locked.mkdir(mode=0o555)  # root's, read-only for others
        os.chmod(locked, 0o555)
        shutil.copy(places / "kernel.py", home / "kernel.py")
        shutil.copytree(places / "ds", home / "ds")
        unreadable = home / "p.jsonl"
        unreadable.write_text("{}\n")
        os.chmod(unreadable, 0o600)
        (home / "r.jsonl").write_text("{}\n")
        names = {"locked": locked, "kernel": home / "kernel.py", "ds": home / "ds", "unreadable": unreadable}
        names["readable"] = home / "r.jsonl"
        args = [w.format(**names) for w in template.split()]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "HOME": str(home)}
        before = snapshot(home)
        res = subprocess.run([sys.executable, "-c", AS_NOBODY, *args], capture_output=True, text=True, env=env,
                             cwd=home, timeout=120)  # fmt: skip
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle.format(**names) in lines[0], lines
        assert snapshot(home) == before
    finally:
        shutil.rmtree(home)


# ---- --ray-address: what answers there is checked before Ray is imported or the folder touched


def _server(answer: bytes | None) -> tuple[socket.socket, int]:
    """A TCP server on a free local port that reads the request and sends ``answer``
    (None: says nothing, keeps the connection open)."""
    server = socket.create_server(("127.0.0.1", 0))
    held = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(65536)
            if answer is None:
                held.append(conn)
            else:
                conn.sendall(answer)
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _h2(headers_block: bytes) -> bytes:
    """An HTTP/2 server's first frames: SETTINGS, then HEADERS of stream 1."""
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    return settings + len(headers_block).to_bytes(3, "big") + b"\x01\x05\x00\x00\x00\x01" + headers_block


RAY_ABSENT = """
import atexit, sys
atexit.register(lambda: print("ray imported" if "ray" in sys.modules else "ray not imported", file=sys.stderr))
from cudagen_data.cli import app
sys.argv = ["cudagen", *sys.argv[1:]]
app()
"""


@pytest.mark.parametrize(
    "answer, needle",
    [
        (b"", "it closed the connection"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "it speaks HTTP/1, not gRPC"),  # e.g. the dashboard's port
        (_h2(b"\x8d"), "it answered HTTP status 404 to a gRPC call"),  # an HTTP/2 proxy or web server
        (None, "it said nothing in 5 s"),
    ],
    ids=["closes", "http1", "http2-404", "silent"],
)
def test_a_ray_address_where_no_ray_head_answers_fails_fast_without_ray(tmp_path, answer, needle):
    server, port = _server(answer)
    out = tmp_path / "ds"
    try:
        t0 = time.monotonic()
        args = ["produce", "-o", str(out), "--fast", "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"]
        res = subprocess.run([sys.executable, "-c", RAY_ABSENT, *args], capture_output=True, text=True, env=ENV,
                             timeout=120)  # fmt: skip
        took = time.monotonic() - t0
    finally:
        server.close()
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: --ray-address 127.0.0.1:{port}: 127.0.0.1:{port} answers, but not as a Ray head node ({needle}); "
        "is the Ray head node running (ray start --head)?",
        "ray not imported",
    ]
    assert took < 20, f"{took:.1f} s to refuse"  # ray.init takes 20 to 40 s on these, and prints its own warnings
    assert not out.exists()


def test_a_grpc_answer_passes_the_ray_address_check():
    """What a Ray head's GCS sends first (HTTP/2 SETTINGS, then :status 200 as HPACK's
    indexed field 8) is taken as a Ray head: the check refuses only what it proves is not one."""
    from cudagen_data.pipeline.ray_executor import check_reachable

    server, port = _server(_h2(b"\x88\x5f\x10application/grpc"))
    try:
        check_reachable(f"127.0.0.1:{port}")
    finally:
        server.close()
