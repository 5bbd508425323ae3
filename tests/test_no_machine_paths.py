"""No output names the machine that made it: every file of a produce run, and `cudagen extract`.

Warp writes the absolute path of a library function's source file above its CUDA
(`// /home/me/.venv/.../warp/_src/math.py:0` for `wp.norm_l1`), NVRTC's logs name the
headers it read from the installed Warp, and exception messages quote files.  The run
below uses library functions (vector, matrix, atomic kernels) and carries one forced
compile failure (a log quoting Warp's headers) and one codegen reject, then every file
it wrote (rows, Parquet content, manifest, stats, rejects with compiler logs, card,
private state) is searched for this machine's directories.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import orjson
import pytest

from cudagen_data.pipeline.config import ProduceConfig
from cudagen_data.pipeline.producer import produce
from cudagen_data.stages import compile as compile_stage
from cudagen_data.stages import generate as generate_stage

# Categories whose kernels may call Warp's own library functions (`wp.norm_l1` ...), and two others.
CATEGORIES = ("vector", "matrix", "atomic", "arithmetic", "math")
SEED = 1
# Whether a generated kernel calls a library function depends on the generator's version,
# so every vector and matrix kernel of the run is given one (unused: outputs unchanged).
LIBRARY_CALL = "    lib_norm = wp.norm_l1(wp.vec3(1.0, -2.0, 3.0))\n"
LIBRARY_COMMENT = re.compile(r"// \S*warp/_src/\w+\.py:\d+")


def with_library_call(source: str) -> str:
    """``source`` with LIBRARY_CALL as the first statement of its kernel."""
    head, sep, rest = source.partition("@wp.kernel\n")
    signature_end = rest.index("):\n") + 3
    return head + sep + rest[:signature_end] + LIBRARY_CALL + rest[signature_end:]


def machine_strings(*extra: str | os.PathLike) -> dict[str, str]:
    """What names this machine, by what it is: home, virtualenv, base Python, Warp's folder,
    the temporary folder, the working directory, the host name, plus ``extra`` folders."""
    import warp

    found = {
        "home": os.path.expanduser("~"),
        "sys.prefix": sys.prefix,
        "sys.base_prefix": sys.base_prefix,
        "warp package": os.path.dirname(warp.__file__),
        "temp dir": tempfile.gettempdir(),
        "cwd": os.getcwd(),
    }
    for i, path in enumerate(extra):
        found[f"output {i}"] = str(path)
    for name, value in list(found.items()):
        real = os.path.realpath(value)
        if real != value:
            found[name + " (resolved)"] = real
    host = socket.gethostname().split(".")[0]
    # A short or generic host name ("vm", "localhost") is a word that legitimately occurs in
    # CUDA text and logs; searching for it would only find false positives.
    if len(host) >= 4 and host.lower() not in ("localhost", "ubuntu", "debian"):
        found["hostname"] = host
    return {k: v for k, v in found.items() if v and v not in ("/", "~")}


def _pattern(value: str) -> re.Pattern:
    # A path as a whole path component: "/tmp" matches "/tmp/x" and "/tmp", not "/tmpfs".
    return re.compile(re.escape(value) + r"(?![\w.-])")


def file_texts(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` as text; Parquet files as the JSON of their rows."""
    import pyarrow.parquet as pq

    texts = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if path.suffix == ".parquet":
            texts[rel] = orjson.dumps(pq.read_table(path).to_pylist()).decode()
        else:
            texts[rel] = path.read_bytes().decode("utf-8", "replace")
    return texts


def leaks(texts: dict[str, str], needles: dict[str, str]) -> list[str]:
    out = []
    for rel, text in texts.items():
        for name, value in needles.items():
            m = _pattern(value).search(text)
            if m:
                out.append(f"{rel}: {name} {value!r} in ...{text[max(0, m.start() - 60) : m.end() + 40]!r}...")
    return out


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """A small dataset with library device functions (every vector and matrix kernel calls
    ``wp.norm_l1``), a compile failure and a codegen reject."""
    out = tmp_path_factory.mktemp("machine_paths") / "dataset"
    mp = pytest.MonkeyPatch()
    real_generate, real_compile = generate_stage.generate, compile_stage.compile_units

    def generate(category, seed, index):
        spec = real_generate(category, seed, index)
        if category in ("vector", "matrix"):
            spec = dataclasses.replace(spec, python_source=with_library_call(spec.python_source))
        if (category, index) == ("arithmetic", 0):  # Warp's codegen rejects this kernel
            spec = dataclasses.replace(
                spec, python_source=spec.python_source.replace("wp.tid()", "wp.tid() + wp.norm_l1(1.0)", 1)
            )
        return spec

    broken = []

    def compile_units(kernels, **kw):
        kernels = list(kernels)
        if not broken:  # NVRTC rejects the first kernel; its log lists candidates in Warp's headers
            k = kernels[0]
            body = k.forward.index("{\n") + 2
            kernels[0] = dataclasses.replace(k, forward=k.forward[:body] + "    wp::length(dim);\n" + k.forward[body:])
            broken.append(k.name)
        return real_compile(kernels, **kw)

    mp.setattr(generate_stage, "generate", generate)
    mp.setattr(compile_stage, "compile_units", compile_units)
    try:
        produce(
            ProduceConfig(count=15, categories=CATEGORIES, seed=SEED, batch_size=20), out, workers=0, progress=False
        )
    finally:
        mp.undo()
    return out


def test_the_run_exercises_every_path_source(produced):
    """The run below is only meaningful if it holds what used to leak: library device
    functions with source comments, a compiler log quoting headers, a codegen reject."""
    rows = [orjson.loads(line) for p in (produced / "jsonl").glob("*.jsonl") for line in p.read_bytes().splitlines()]
    assert len(rows) == 15
    with_library = {r["category"] for r in rows if LIBRARY_COMMENT.search(r["device_functions"])}
    assert {"vector", "matrix"} <= with_library, with_library
    rejects = [orjson.loads(line) for line in (produced / "rejects.jsonl").read_bytes().splitlines()]
    reasons = {r["reason"] for r in rejects}
    assert {"compile_error", "codegen_error"} <= reasons, reasons
    log = next(r["log"] for r in rejects if r["reason"] == "compile_error")
    assert re.search(r"warp/native/\w+\.h\(\d+\)", log), log[:2000]  # the header, named from the package


def test_no_output_file_names_this_machine(produced):
    texts = file_texts(produced)
    assert {"README.md", "manifest.json", "stats.json", "rejects.jsonl", ".cudagen/state.json"} <= set(texts)
    assert any(rel.endswith(".parquet") for rel in texts)
    found = leaks(texts, machine_strings(produced, produced.parent))
    assert not found, "\n".join(found)


USER_PROGRAM = textwrap.dedent(
    """
    import warp as wp

    @wp.func
    def scaled(v: wp.vec3, s: float):
        return v * s

    @wp.kernel
    def norms(a: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = wp.norm_l1(scaled(a[i], 2.0))
    """
)


def test_extract_output_names_no_machine_path(tmp_path):
    src = tmp_path / "project" / "sim.py"
    src.parent.mkdir()
    src.write_text(USER_PROGRAM)
    out = tmp_path / "pairs.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "cudagen_data.cli", "extract", str(src), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    row = orjson.loads(text.splitlines()[0])
    assert "// warp/_src/math.py:" in row["device_functions"]
    found = leaks({"pairs.jsonl": text}, machine_strings(tmp_path, src.parent))
    assert not found, "\n".join(found)


# ----------------------------------------------------------------- the rule itself


def test_machine_independent_path_rule(tmp_path):
    from cudagen_data.warp_boundary import paths as source_paths

    warp_dir = source_paths.warp_package_dir()
    assert source_paths.machine_independent_path(os.path.join(warp_dir, "_src", "math.py")) == "warp/_src/math.py"
    user = tmp_path / "repo" / "pkg" / "helpers.py"
    user.parent.mkdir(parents=True)
    user.write_text("")
    assert source_paths.machine_independent_path(str(user), tmp_path / "repo") == "pkg/helpers.py"
    assert source_paths.machine_independent_path(str(user)) == "helpers.py"  # no root given: its name alone
    assert source_paths.machine_independent_path(orjson.__file__) == "orjson/__init__.py"  # an import path
    assert source_paths.machine_independent_path("<cudagen:0123>") == "<cudagen:0123>"
    assert source_paths.machine_independent_path("pkg/x.py") == "pkg/x.py"


def test_normalize_rewrites_location_comments_only():
    from cudagen_data.warp_boundary import paths as source_paths

    warp_dir = source_paths.warp_package_dir()
    text = (
        f"// {warp_dir}/_src/math.py:0\nstatic CUDA_CALLABLE float f()\n"
        "{\n    // x = a / b   <L 3>\n    return 1.0f / 2.0f;\n}\n"
        f'#line 7 "{warp_dir}/_src/math.py"\n'
    )
    assert source_paths.normalize_generated_text(text) == (
        "// warp/_src/math.py:0\nstatic CUDA_CALLABLE float f()\n{\n    // x = a / b   <L 3>\n    return 1.0f / "
        '2.0f;\n}\n#line 7 "warp/_src/math.py"\n'
    )


def test_scrub_keeps_what_is_not_a_path_on_this_machine():
    from cudagen_data.warp_boundary import paths as source_paths

    warp_dir = source_paths.warp_package_dir()
    log = f"{warp_dir}/native/vec.h(1082): note: candidate\n  return a /b; see /no/such/file.h(3)"
    assert (
        source_paths.scrub_paths(log)
        == "warp/native/vec.h(1082): note: candidate\n  return a /b; see /no/such/file.h(3)"
    )


def test_gpu_compiled_text_check_sees_through_machine_paths(produced):
    """The GPU suite compares the recorded CUDA with the .cu file Warp compiled, which names
    this machine's paths: the comparison must hold for an untouched row."""
    from cudagen_data.contracts.row import row_from_dict
    from cudagen_data.gpu.cuda_text import compiled_matches
    from cudagen_data.warp_boundary import paths as source_paths

    rows = [orjson.loads(line) for p in (produced / "jsonl").glob("*.jsonl") for line in p.read_bytes().splitlines()]
    row = next(r for r in rows if LIBRARY_COMMENT.search(r["device_functions"]))
    manifest = orjson.loads((produced / "manifest.json").read_bytes())
    warp_dir = source_paths.warp_package_dir()
    as_warp_writes_it = row["device_functions"].replace("// warp/", f"// {os.path.dirname(warp_dir)}/warp/")
    assert as_warp_writes_it != row["device_functions"]
    unit = "\n".join(
        (manifest["preambles"][row["preamble_hash"]], as_warp_writes_it, row["cuda_forward"], row["cuda_backward"])
    )
    typed = row_from_dict(row)
    assert compiled_matches(unit, typed) == []
    assert compiled_matches(unit.replace("var_0", "var_x"), typed) != []  # and it still catches a real difference


def test_a_users_own_function_file_is_named_from_the_root_given(tmp_path, monkeypatch):
    """A `@wp.func` imported from a user's file: its comment names the file relative to the
    root given (a repository), else relative to the import path, never absolutely."""
    from cudagen_data.extract import extract_source

    pkg = tmp_path / "repo" / "src" / "userpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("import warp as wp\n\n\n@wp.func\ndef twice(x: float):\n    return 2.0 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path / "repo" / "src"))
    source = (
        "import warp as wp\nfrom userpkg.helpers import twice\n\n\n"
        "@wp.kernel\ndef k(a: wp.array(dtype=float)):\n    i = wp.tid()\n    a[i] = twice(a[i])\n"
    )
    try:
        with_root = extract_source(source, root=str(tmp_path / "repo")).kernels[0].device_functions
        without = extract_source(source).kernels[0].device_functions
    finally:
        sys.modules.pop("userpkg.helpers", None)
        sys.modules.pop("userpkg", None)
    assert "// src/userpkg/helpers.py:4\n" in with_root, with_root[:300]
    assert "// userpkg/helpers.py:4\n" in without, without[:300]
    assert str(tmp_path) not in with_root + without
