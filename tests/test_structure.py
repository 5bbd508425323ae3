"""Structure rules of the package (issue #15): one Warp boundary, contracts that own their
formats, stages that own their reasons, one bisection."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

import cudagen_data
from cudagen_data.bisect import bisect_failures, halves
from cudagen_data.contracts import (
    ROW_SCHEMA,
    SPLITS,
    FileEntry,
    Manifest,
    ManifestError,
    Reject,
    RejectReason,
    Row,
    RunStats,
)
from cudagen_data.contracts.row import ALL_COLUMNS, COLUMN_DOCS, SUBFIELD_DOCS
from cudagen_data.mine.collect import CollectStage  # mining's own stage
from cudagen_data.stages import CompileStage, ExecuteStage, ExtractStage, GenerateStage, GradientCheckStage
from cudagen_data.stages.dedup import DedupStage

PACKAGE = Path(cudagen_data.__file__).parent
BOUNDARY = PACKAGE / "warp_boundary"


def _imports_warp_internals(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("warp._src")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("warp._src") or (
                node.module == "warp" and any(a.name == "_src" for a in node.names)
            ):
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr == "_src":
            found.append(f"line {node.lineno}: attribute ._src")
    return found


def test_only_the_warp_boundary_touches_warp_internals():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if BOUNDARY in path.parents:
            continue
        offenders += [f"{path.relative_to(PACKAGE.parent)}: {hit}" for hit in _imports_warp_internals(path)]
    assert not offenders, "warp._src used outside cudagen_data/warp_boundary/:\n" + "\n".join(offenders)


def test_the_scan_sees_every_form_of_import(tmp_path):
    # The check above must be able to fail: each form of reaching warp._src is caught.
    for text in (
        "import warp._src.context",
        "from warp._src import codegen",
        "from warp import _src",
        "import warp as wp\nx = wp._src.context",
    ):
        p = tmp_path / "m.py"
        p.write_text(text)
        assert _imports_warp_internals(p), text
    assert _imports_warp_internals(BOUNDARY / "emit.py")  # the boundary itself does use them


def test_row_schema_is_derived_from_the_row_contract():
    names = [f.name for f in dataclasses.fields(Row)]
    assert names == ROW_SCHEMA.names
    assert set(COLUMN_DOCS) == set(names) and all(COLUMN_DOCS.values())
    for f in ROW_SCHEMA:
        if pa.types.is_struct(f.type):
            assert [c.name for c in f.type] == list(SUBFIELD_DOCS[f.name]) and all(SUBFIELD_DOCS[f.name].values())
    # the card's corrected meaning of seed / index (issue #15)
    assert "root seed" in SUBFIELD_DOCS["metadata"]["seed"] and "Per-category" in SUBFIELD_DOCS["metadata"]["index"]


def test_row_serializes_in_column_order():
    from test_produce import _outcome  # a minimal Row

    row = _outcome(3, "a", "p", "c").row
    assert list(orjson.loads(orjson.dumps(row))) == ROW_SCHEMA.names
    assert orjson.dumps(row) == orjson.dumps(row.to_dict())
    assert Row.from_dict(row.to_dict()) == row
    pa.Table.from_pylist([row.to_dict()], schema=ROW_SCHEMA)  # the Arrow schema accepts it


def test_every_reason_has_one_owning_stage():
    stages = {
        s.name: s
        for s in (GenerateStage, ExtractStage, CompileStage, ExecuteStage, GradientCheckStage, DedupStage, CollectStage)
    }
    for reason in RejectReason:
        assert reason.stage in stages, reason
    owned = [r for s in stages.values() for r in s.reasons]
    assert sorted(owned, key=str) == sorted(RejectReason, key=str)  # each reason in exactly one stage
    assert RejectReason.EXECUTION_ERROR in ExecuteStage.reasons
    assert f"{RejectReason.NAN_OUTPUT}" == "nan_output" and orjson.dumps(RejectReason.NAN_OUTPUT) == b'"nan_output"'


def test_pass_rates_come_from_stage_counters():
    stats = RunStats.new(("a",), SPLITS)
    path = ("generate", "extract", "compile", "execute")
    for _ in range(6):
        stats.count_slot("a", path, None)
    stats.count_slot("a", path, RejectReason.CODEGEN_ERROR)
    stats.count_slot("a", path, RejectReason.COMPILE_ERROR)
    stats.count_slot("a", path, RejectReason.EXECUTION_ERROR)  # the reason the old subtraction forgot
    stats.count_slot("a", path, RejectReason.WORKER_CRASH)
    out = stats.to_stats_json(fast=False)
    assert out["kernels_tried"] == 10
    assert out["stages"]["compile"] == {"in": 9, "kept": 8, "rejected": {"compile_error": 1}}
    assert out["compile_pass_rate"] == round(8 / 9, 4)
    assert out["execution_pass_rate"] == round(6 / 8, 4)
    assert RunStats.from_json(orjson.loads(orjson.dumps(stats.to_json()))) == stats
    fast = RunStats.new(("a",), SPLITS)
    fast.count_slot("a", ("generate", "extract"), RejectReason.WORKER_CRASH)  # charged to the last stage run
    assert fast.stages["extract"].rejected == {"worker_crash": 1}


def test_manifest_parser_names_the_problem(tmp_path):
    good = Manifest(
        config={},
        versions={},
        command="c",
        preambles={},
        files=[FileEntry("data/train-00000-of-00001.parquet", "train", 3, "ab")],
    )
    assert Manifest.from_dict(orjson.loads(orjson.dumps(good.to_dict()))) == good
    with pytest.raises(ManifestError, match="not found"):
        Manifest.read(tmp_path)
    for bad, match in [
        ({**good.to_dict(), "format": "x"}, "'format'"),
        ({**good.to_dict(), "files": [{"path": "../x.parquet", "split": "train", "rows": 1}]}, "relative"),
        ({**good.to_dict(), "files": [{"path": "d/a.parquet", "split": "dev", "rows": 1}]}, "not one of"),
        ({**good.to_dict(), "files": [{"path": "d/a.parquet", "split": "train", "rows": -1}]}, "not a count"),
    ]:
        with pytest.raises(ManifestError, match=match):
            Manifest.from_dict(bad)


def test_bisection_isolates_exactly_the_failing_items():
    calls = []

    def attempt(group):
        calls.append(list(group))
        if any(x in (3, 8) for x in group) and len(group) > 1:
            return None
        return [("bad" if x in (3, 8) else "ok", x) for x in group]

    out = bisect_failures(list(range(10)), attempt)
    assert out == [("bad" if x in (3, 8) else "ok", x) for x in range(10)]
    assert calls[0] == list(range(10)) and [3] in calls and [8] in calls
    assert halves([1, 2, 3]) == ([1], [2, 3])
    with pytest.raises(ValueError):
        bisect_failures([1], lambda g: None)


def test_dedup_reject_matches_the_reject_contract():
    from test_produce import _outcome

    dedup = DedupStage()
    first, second = _outcome(0, "a", "p", "c").row, _outcome(1, "a", "p", "d").row
    assert dedup.check(first, 0) is None
    reject = dedup.check(second, 1)
    assert isinstance(reject, Reject) and reject.reason is RejectReason.DUPLICATE_PYTHON
    assert list(orjson.loads(orjson.dumps(reject))) == [
        "slot",
        "category",
        "index",
        "kernel_name",
        "reason",
        "detail",
        "log",
        "python_source",
    ]


def _import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> modules of ``package`` it imports (anywhere in the file, under TYPE_CHECKING too:
    a cycle of type annotations is still two modules a reader cannot read apart)."""
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pkg = ".".join(parts[:-1])
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
                deps.add(target)
                deps |= {f"{target}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[mod] = {d for d in deps if d.startswith(package)}
    modules = set(graph)
    return {m: {d for d in deps if d in modules and d != m} for m, deps in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                found.append(stack[stack.index(d) :] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_package_has_no_import_cycles():
    # lazy (function-level) imports count: they were how generators/basic hid two cycles
    graph = _import_graph(PACKAGE, "cudagen_data")
    # a package's __init__ importing its submodules is not a cycle of the synthesis code
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    assert not _cycles(graph), _cycles(graph)
    assert _cycles({"a": {"b"}, "b": {"a"}})  # the check can fail


def test_nvrtc_named_arguments_match_warps_c_signature():
    # A Warp upgrade that changes wp_cuda_compile_program's arguments must fail here, not
    # in a silent mis-call: the named options map onto exactly Warp's ctypes argtypes.
    from cudagen_data import warp_boundary

    warp_boundary.warp()
    from warp._src.context import runtime  # tests may look inside Warp; the package may not

    argtypes = runtime.core.wp_cuda_compile_program.argtypes
    args = warp_boundary.NvrtcOptions(arch=86).c_arguments("int x;", b"/inc")
    assert len(args) == len(argtypes)
    ok, log = warp_boundary.nvrtc_compile(
        'extern "C" __global__ void k(float* y) { y[0] = 1.0f; }', warp_boundary.NvrtcOptions(arch=86)
    )
    assert ok, log
    ok, log = warp_boundary.nvrtc_compile(
        "__global__ void k() { undefined_name; }", warp_boundary.NvrtcOptions(arch=86)
    )
    assert not ok and "undefined_name" in log


def test_no_module_imports_another_modules_private_names():
    # Shared helpers are public (KernelBuilder.var_expr, ops.fits_type, ...); a private name
    # used from another file is a helper whose owner does not know it is shared.
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("cudagen_data")):
                base = path.parent
                for _ in range(max(node.level - 1, 0)):
                    base = base.parent
                target = base.joinpath(*(node.module or "").split(".")) if node.module else base
                for a in node.names:
                    private = a.name.startswith("_") and not a.name.startswith("__")
                    is_module = (target / f"{a.name}.py").exists() or (target / a.name).is_dir()
                    if private and not is_module:
                        offenders.append(
                            f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {a.name} from {node.module}"
                        )
    assert not offenders, "\n".join(offenders)


def test_a_stage_may_only_reject_with_its_own_reasons():
    from cudagen_data.stages import Item, Stage

    class Leaky(Stage):
        name = "compile"

        def process(self, items):
            return [], [items[0].reject(RejectReason.NAN_OUTPUT, "owned by execute")]

    with pytest.raises(AssertionError, match="does not own"):
        Leaky()([Item(0, "a", 0)])

    class Fine(Stage):
        name = "compile"

        def process(self, items):
            return items[1:], [items[0].reject(RejectReason.COMPILE_ERROR, "x")]

    kept, rejects = Fine()([Item(0, "a", 0), Item(1, "a", 0)])
    assert [i.slot for i in kept] == [1] and rejects[0].reason == "compile_error" and rejects[0].slot == 0


# --- Layers (issue #25): folders import only folders below them -------------------------
#
# Bottom to top (README.md, Layout): astwalk, bisect, spec | canonical | contracts |
# warp_boundary | numerics | extract | generators | execution | gradcheck | dataset | stages |
# publish | pipeline | mine | validate | gpu | eval | negatives | cli.  A top-level module
# (gradcheck.py, validate.py, ...) counts as a folder of its own.

# Imports deferred into a function body for a reason other than a cycle.  Third-party
# packages (matched by prefix), each with its reason:
DEFERRED_PACKAGES = {
    "warp": "Warp loads only when a command builds or runs a kernel (warp_boundary loads it; "
    "`cudagen --help`, publish and the CPU-only paths never do)",
    "ray": "optional dependency (`pip install 'cudagen-data[ray]'`), only for --executor ray",
    "datasets": "heavy, only where a dataset is loaded back with Hugging Face datasets",
    "huggingface_hub": "only `cudagen publish --push` talks to the Hub",
    "pyarrow.parquet": "only the functions that read or write Parquet; the CLI at start-up and the "
    "worker processes import the same modules without it (+0.1 s each)",
    "pyarrow.compute": "as pyarrow.parquet (+0.15 s)",
    "tqdm": "progress bars are the driver's; worker processes import the same modules (+0.2 s each)",
}
# Modules of this package imported inside a function, by the file that does it:
DEFERRED_IN_FILE = {
    "cudagen_data/cli.py": "each command imports its library when it runs: `cudagen --help` and a bad "
    "option answer in 0.4 s instead of ~1.3 s (numpy, the command's modules)",
    "cudagen_data/generators/__init__.py": "the 15 categories load on first use of the registry: importers "
    "of generators.difficulty or GENERATOR_VERSION alone (mine workers) skip them (+0.33 s per process)",
    "cudagen_data/pipeline/__init__.py": "PEP 562 __getattr__: `from cudagen_data.pipeline import produce` "
    "without loading the producer in worker processes that import pipeline.pool",
}
# Modules of this package imported inside a function because of an optional dependency, by module:
DEFERRED_MODULES = {
    "cudagen_data.pipeline.ray_executor": "the --executor ray path only (Ray is optional); at the top of "
    "pipeline/pool.py it would load pipeline.config into every worker process of every pool",
}


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _folder(module: str) -> str:
    """cudagen_data.gpu.worker -> gpu; cudagen_data.gradcheck -> gradcheck."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _folder_graph(root: Path) -> dict[str, set[str]]:
    """folder -> folders it imports (deferred and TYPE_CHECKING imports count)."""
    graph: dict[str, set[str]] = {}
    for module, deps in _import_graph(root, root.name).items():
        src = _folder(module)
        graph.setdefault(src, set())
        graph[src] |= {_folder(d) for d in deps if d != root.name and _folder(d) != src}
    return graph


def _deferred_imports(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, imported module) for each import inside a function body."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = _module_name(root, path)
        pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if node.level else []
                    targets = [".".join(base + ([node.module] if node.module else []))]
                else:
                    continue
                rel = f"{root.name}/{path.relative_to(root).as_posix()}"
                found += [(rel, node.lineno, t) for t in targets]
    return sorted(set(found))


def _deferred_offenders(root: Path) -> list[str]:
    """Deferred imports with no listed reason."""
    offenders = []
    for rel, line, target in _deferred_imports(root):
        if any(target == p or target.startswith(p + ".") for p in (*DEFERRED_PACKAGES, *DEFERRED_MODULES)):
            continue
        if target.split(".")[0] != root.name:
            offenders.append(f"{rel}:{line}: import {target} (standard library or a light package: at the top)")
            continue
        if rel in DEFERRED_IN_FILE:
            continue
        offenders.append(f"{rel}:{line}: import {target}")
    return offenders


def test_folders_import_only_layers_below():
    graph = _folder_graph(PACKAGE)
    cycles = _cycles(graph)
    assert not cycles, "import cycles between folders (a folder must import only layers below it):\n" + "\n".join(
        " -> ".join(c) for c in cycles
    )


def test_no_import_is_deferred_into_a_function_without_a_reason():
    offenders = _deferred_offenders(PACKAGE)
    assert not offenders, (
        "imports inside functions (move them to the top; if a cycle forced it, fix the layering; "
        "an optional or heavy dependency goes in DEFERRED_PACKAGES or DEFERRED_MODULES with its reason):\n"
        + "\n".join(offenders)
    )
    deferred = {target for _, _, target in _deferred_imports(PACKAGE)}
    assert set(DEFERRED_MODULES) <= deferred, "DEFERRED_MODULES entries that no function imports"


def test_the_layer_checks_can_fail(tmp_path):
    # A tree with a cycle between two folders (through a deferred import), a deferred import
    # of a sibling folder, and one of the standard library; and a clean one.
    pkg = tmp_path / "pkg"
    for rel, text in {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from ..high import b\n    return b\n",
        "high/__init__.py": "",
        "high/b.py": "from ..low import a\n",
        "top.py": "import typing\n\nif typing.TYPE_CHECKING:\n    from .high import b\n\n\ndef g():\n    import os\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    graph = _folder_graph(pkg)
    assert graph["low"] == {"high"} and graph["high"] == {"low"} and graph["top"] == {"high"}
    assert _cycles(graph)
    offenders = _deferred_offenders(pkg)
    assert [o.split(": import ")[1].split(" ")[0] for o in offenders] == ["pkg.high", "os"]
    (pkg / "low/a.py").write_text("def f():\n    import warp\n    return warp\n")  # a listed package
    (pkg / "top.py").write_text("")
    assert not _cycles(_folder_graph(pkg)) and _deferred_offenders(pkg) == []


# --- Readers go through the row contract (issue #25, part 3) ------------------------------
#
# A row is read once at the boundary (dataset/read.py, DatasetFolder.iter_rows, the
# public entry points that take a row dict from a user: contracts.row.as_row) and by
# attribute after that, so a renamed column fails in contracts/ only.  The scan below
# finds a column's name used as a string key (``x["cuda_forward"]``, ``x.get("id")``,
# ``"provenance" in x``, or an f-string that can spell one: ``x[f"cuda_{part}"]``)
# anywhere outside contracts/.

# Not rows: dicts and tables whose keys share a name with a column, by (file, receiver).
NOT_ROWS = {
    ("cudagen_data/cli.py", "stats"): "stats.json's figures",
    ("cudagen_data/dataset/lengths.py", "table"): "columns of an Arrow table, read by name for columnar sums",
    ("cudagen_data/eval/command.py", "obj"): "a predictions line (its own format: id, cuda_forward, cuda_backward)",
    ("cudagen_data/eval/report.py", "t"): "the report's totals by category and difficulty",
    ("cudagen_data/eval/run.py", "module.options"): "Warp's module options",
    ("cudagen_data/eval/shared_scrub.py", "kernel.module.options"): "Warp's module options",
    ("cudagen_data/eval/shared_scrub.py", "self.kernel.module.options"): "Warp's module options",
    ("cudagen_data/extract/levels.py", "record"): "the compiler record of the manifest",
    ("cudagen_data/gpu/report.py", "f"): "a failure of the GPU report's JSON",
    ("cudagen_data/gpu/worker.py", "module.options"): "Warp's module options",
    ("cudagen_data/mine/run.py", "counts.stages"): "RunStats' stage counters",
    ("cudagen_data/mine/run.py", "stats"): "stats.json's figures",
    ("cudagen_data/mine/worker.py", "seconds"): "stage seconds",
    ("cudagen_data/pipeline/config.py", "d"): "a ProduceConfig as a dict (manifest.json's config)",
    ("cudagen_data/publish/card.py", "stats"): "stats.json's figures",
    ("cudagen_data/publish/card.py", "d"): "stats.json's unused-argument figures",
    ("cudagen_data/publish/card_real.py", "stats"): "stats.json's figures",
    ("cudagen_data/warp_boundary/modules.py", "module.options"): "Warp's module options",
}


def _column_key(key: ast.expr) -> str | None:
    """``key`` as written where it names a row column: a string constant that is one, or an
    f-string whose literal parts can spell one (``f"cuda_{part}"``; not one of no literal
    text, ``f"{name}"``, which says nothing of what it reads)."""
    if isinstance(key, ast.Constant):
        return ast.unparse(key) if key.value in ALL_COLUMNS else None
    if not isinstance(key, ast.JoinedStr) or not any(isinstance(v, ast.Constant) for v in key.values):
        return None
    pattern = "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".*" for v in key.values)
    return ast.unparse(key) if any(re.fullmatch(pattern, c) for c in ALL_COLUMNS) else None


def _column_key_reads(root: Path) -> list[tuple[str, int, str, str]]:
    """(file, line, receiver, key as written) for each string-key use of a row column's name."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = f"{root.name}/{path.relative_to(root).as_posix()}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            key = receiver = None
            if isinstance(node, ast.Subscript):
                key, receiver = node.slice, node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if node.func.attr in ("get", "pop", "setdefault"):
                    key, receiver = node.args[0], node.func.value
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In | ast.NotIn):
                key, receiver = node.left, node.comparators[0]
            column = _column_key(key) if key is not None else None
            if column is not None:
                found.append((rel, node.lineno, ast.unparse(receiver), column))
    return found


def _row_key_offenders(root: Path) -> list[str]:
    """String-key reads of row columns that no entry allows."""
    return [
        f"{rel}:{line}: {receiver}[{column}]"
        for rel, line, receiver, column in _column_key_reads(root)
        if not rel.startswith(f"{root.name}/contracts/") and (rel, receiver) not in NOT_ROWS
    ]


def test_rows_are_read_through_the_contract():
    offenders = _row_key_offenders(PACKAGE)
    assert not offenders, (
        "row columns read by string key (read the row as a Row where it comes in: dataset.read.read_rows_from, "
        "contracts.row.row_from_dict / as_row; then use attributes):\n" + "\n".join(offenders)
    )
    used = {(rel, receiver) for rel, _, receiver, _ in _column_key_reads(PACKAGE)}
    assert not set(NOT_ROWS) - used, f"NOT_ROWS entries that match nothing: {sorted(set(NOT_ROWS) - used)}"


def test_the_row_key_scan_can_fail(tmp_path):
    pkg = tmp_path / "cudagen_data"
    (pkg / "contracts").mkdir(parents=True)
    (pkg / "contracts/row.py").write_text('def f(d):\n    return d["metadata"]\n')  # the contract itself may
    (pkg / "reader.py").write_text(
        "def f(row, r, stats, out):\n"
        '    a = row["cuda_forward"]\n'  # a subscript
        '    b = r.get("provenance")\n'  # .get on a row under another name
        '    c = "python_hash" in out\n'  # a column used as a type switch
        '    d = row["kernel_name"].upper()\n'
        '    e = stats["rows"], r.get("not_a_column"), row.cuda_forward\n'  # not a column; an attribute
        '    g = row[f"cuda_{part}"]\n'  # an f-string that spells cuda_forward, cuda_backward, cuda_hash
        '    h = stats[f"pass@{k}"], r.get(f"{name}"), r[f"x_{part}"]\n'  # spells no column; says nothing
        "    return a, b, c, d, e, g, h\n"
    )
    offenders = _row_key_offenders(pkg)
    assert [o.split(": ", 1)[1] for o in offenders] == [
        "row['cuda_forward']",
        "r['provenance']",
        "out['python_hash']",
        "row[f'cuda_{part}']",
        "row['kernel_name']",
    ]
