"""`cudagen extract` on real-world-shaped files, and its error paths."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import orjson
import pytest

PROGRAM = textwrap.dedent(
    '''
    """A typical Warp script: helpers, a class, kernels, and a main block."""
    import numpy as np
    import warp as wp

    DT = wp.constant(0.01)

    def host_helper(n):
        return np.arange(n, dtype=np.float32)

    class Sim:
        def __init__(self, n):
            self.x = wp.array(host_helper(n), dtype=float)

    @wp.func
    def accel(x: float):
        return -x

    @wp.kernel
    def integrate(x: wp.array(dtype=float), v: wp.array(dtype=float)):
        i = wp.tid()
        v[i] = v[i] + accel(x[i]) * DT
        x[i] = x[i] + v[i] * DT

    @wp.kernel
    def reset(x: wp.array(dtype=float)):
        x[wp.tid()] = 0.0

    if __name__ == "__main__":
        sim = Sim(16)
        raise SystemExit("main ran")
    '''
)


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cudagen_data.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_extracts_every_kernel_without_running_main(tmp_path):
    src = tmp_path / "sim.py"
    src.write_text(PROGRAM)
    out = tmp_path / "pairs.jsonl"
    res = run_cli("extract", str(src), "--out", str(out))
    assert res.returncode == 0, res.stderr
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r["kernel_name"] for r in rows] == ["integrate", "reset"]
    for r in rows:
        assert r["compile"]["status"] == "ok" and r["compile"]["arch"] == 86
        assert "_cuda_kernel_forward(" in r["cuda_forward"] and "_cuda_kernel_backward(" in r["cuda_backward"]
        assert r["python_source"] == PROGRAM
        assert str(tmp_path) not in orjson.dumps(r).decode()
    assert "accel_0(" in rows[0]["device_functions"]


def test_stdout_when_no_out(tmp_path):
    src = tmp_path / "sim.py"
    src.write_text(PROGRAM)
    res = run_cli("extract", str(src), "--no-compile")
    assert res.returncode == 0
    assert len(res.stdout.splitlines()) == 2


@pytest.mark.parametrize(
    "body, needle, line_has",
    [
        ("import warp as wp\ndef broken(:\n", "SyntaxError", "def broken"),
        ("import warp as wp\nX = 1\n", "no @wp.kernel found", None),
    ],
)
def test_whole_file_errors(tmp_path, body, needle, line_has):
    src = tmp_path / "bad.py"
    src.write_text(body)
    res = run_cli("extract", str(src))
    assert res.returncode != 0
    assert needle in res.stderr
    assert "Traceback" not in res.stderr
    if line_has:
        line = next(ln for ln in res.stderr.splitlines() if needle in ln)
        lineno = int(line.split(":")[1])
        assert line.startswith(str(src)) and line_has in body.splitlines()[lineno - 1]


def test_partial_failures_keep_the_good_kernels(tmp_path):
    body = PROGRAM + textwrap.dedent(
        """
        import package_that_is_not_installed

        @wp.kernel
        def rejected(x: wp.array(dtype=float)):
            x[wp.tid()] = no_such_function(1.0)
        """
    )
    src = tmp_path / "mixed.py"
    src.write_text(body)
    out = tmp_path / "pairs.jsonl"
    res = run_cli("extract", str(src), "--out", str(out))
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith(str(src))]
    assert len(errors) == 2
    lines = body.splitlines()
    for err in errors:
        lineno = int(err.split(":")[1])
        assert ("package_that_is_not_installed" in lines[lineno - 1]) or ("no_such_function" in lines[lineno - 1])
    assert [orjson.loads(x)["kernel_name"] for x in out.read_bytes().splitlines()] == ["integrate", "reset"]


def test_missing_file_and_bad_arch(tmp_path):
    res = run_cli("extract", str(tmp_path / "nope.py"))
    assert res.returncode == 2 and "no such file" in res.stderr and "Traceback" not in res.stderr
    src = tmp_path / "sim.py"
    src.write_text(PROGRAM)
    res = run_cli("extract", str(src), "--arch", "12")
    assert res.returncode == 2 and "--arch 12" in res.stderr and "Traceback" not in res.stderr


def test_compile_levels_and_a_bad_level(tmp_path):
    src = tmp_path / "sim.py"
    src.write_text(PROGRAM)
    for level in ("frontend", "ptx"):
        res = run_cli("extract", str(src), "--compile", level)
        assert res.returncode == 0, res.stderr
        assert [orjson.loads(line)["compile"]["status"] for line in res.stdout.splitlines()] == ["ok", "ok"]
    res = run_cli("extract", str(src), "--compile", "sass")
    assert res.returncode == 2 and "--compile 'sass'" in res.stderr and "Traceback" not in res.stderr
