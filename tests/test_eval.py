"""`cudagen eval` on the CPU: structure and compile stages, the run stage's judging
machinery (guards, fresh inputs, tolerance, constant outputs) with Python candidates on
Warp's CPU backend, metrics, the command and its bad-input paths.  The GPU half (the
candidate's CUDA in Warp's module, run on a GPU) is tests/gpu/test_eval_gpu.py."""

from __future__ import annotations

import dataclasses
import re

import kernel_rows
import numpy as np
import orjson
import pytest
from fixtures_rows import write_folder
from typer.testing import CliRunner

from cudagen_data.cli import app
from cudagen_data.contracts.row import Row
from cudagen_data.eval import Candidate, Scorer, make_mutants, pass_at_k
from cudagen_data.eval.compile import Unit, batch_text, compile_many, front_end_compiler
from cudagen_data.eval.cuda_parse import ParseError, tokenize
from cudagen_data.eval.equivalence import mutant_verdict, verdicts, widened_launch
from cudagen_data.eval.mutants import Mutant, memorized_outputs, operator_swapped, stored_value_vars
from cudagen_data.eval.reference import compute_reference
from cudagen_data.eval.run import (
    GUARD_FILLS,
    Measured,
    guard_value,
    guards_intact,
    judge_kernel,
    judge_set,
    run_guarded,
)
from cudagen_data.eval.structure import StructureError, check_candidate, kernel_shape
from cudagen_data.execution import CPU_OPT_LEVEL, execute_specs
from cudagen_data.warp_boundary import batch_module, build_module

KERNELS = ["chain", "atomic", "argmax"]


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return kernel_rows.make_row_objects(KERNELS)


@pytest.fixture(scope="module")
def dataset(rows, tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval_ds")
    from cudagen_data.extract import extract_source

    manifest = write_folder(folder, [r.to_dict() for r in rows], ratios=(0.0, 0.0, 1.0))
    preamble = extract_source(rows[0].python_source).kernels[0].preamble
    manifest["preambles"] = {rows[0].preamble_hash: preamble}
    (folder / "manifest.json").write_bytes(orjson.dumps(manifest))
    return folder, manifest["preambles"]


@pytest.fixture(scope="module")
def scorer():
    with Scorer("cpu", full_compile=False, seed=1) as s:
        yield s


# --------------------------------------------------------------------------- structure


def test_tokens_ignore_comments_and_strings():
    toks = tokenize("a /* clock64() */ b // __global__ x\n \"clock64()\" 'c'")
    assert [t.text for t in toks] == ["a", "b", '"clock64()"', "'c'"]
    with pytest.raises(ParseError, match="unterminated comment"):
        tokenize("a /* b")
    with pytest.raises(ParseError, match="unterminated string"):
        tokenize('a "b')


def test_the_rows_own_cuda_passes_structure(rows):
    for row in rows:
        check_candidate(row.cuda_forward, kernel_shape(row.cuda_forward), "forward")
        check_candidate(row.cuda_backward, kernel_shape(row.cuda_backward), "backward")


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda f: "__device__ float cache[4];\n" + f, "only function definitions"),
        (lambda f: "__constant__ float k[2] = {1, 2};\n" + f, "outlives a launch"),
        (
            lambda f: "static __device__ float g(float x) { static float s = 0; s += x; return s; }\n" + f,
            "static local",
        ),
        (lambda f: "float host_helper(float x) { return x; }\n" + f, "host code"),
        (lambda f: "__host__ float h(float x) { return x; }\n" + f, "__host__ function"),
        (lambda f: f.replace("{", "{ long long t = clock64();", 1), "clock or timer"),
        (
            lambda f: f.replace(
                "{", '{ unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));', 1
            ),
            "inline assembly",
        ),
        (lambda f: f.replace("{", '{ const char* s = "%globaltimer";', 1), "timer register"),
        (lambda f: f.replace("{", "{ float* p = (float*)malloc(4);", 1), "device heap"),
        (lambda f: "#include <cstdio>\n" + f, "preprocessor"),
        (lambda f: f.replace("{", "{ cudaDeviceSynchronize();", 1), "host code"),
        (lambda f: f.replace("_cuda_kernel_forward(", "_cuda_kernel_forwardX(", 1), "expected"),
        (lambda f: f.replace('extern "C" ', "", 1), 'not extern "C"'),
        (lambda f: f.replace("wp::array_t<wp::float32> var_x", "wp::array_t<wp::float64> var_x", 1), "parameter 2"),
        (lambda f: f + "\n" + f.replace("_forward(", "_forward2(", 1), "2 __global__ kernels"),
        (lambda f: f.rsplit("}", 1)[0], "unclosed"),
    ],
)
def test_structure_rejects(rows, edit, reason):
    row = rows[0]
    with pytest.raises(StructureError, match=reason):
        check_candidate(edit(row.cuda_forward), kernel_shape(row.cuda_forward), "forward")


def test_structure_allows_helpers_pragmas_and_renamed_parameters(rows):
    row = rows[0]
    shape = kernel_shape(row.cuda_forward)
    helper = "static __device__ __forceinline__ float twice(float v) { return v * 2.0f; }\n\n"
    text = helper + row.cuda_forward.replace("var_s", "scale").replace("{", "{\n#pragma unroll 4\n", 1)
    check_candidate(text, shape, "forward")
    check_candidate(row.cuda_forward.replace("{", "{ // clock64() in a comment\n", 1), shape, "forward")


# --------------------------------------------------------------------------- compile


def test_batched_front_end_agrees_with_single_units(rows, dataset):
    """Batching (with error-line attribution) gives each candidate the verdict and log of its own unit."""
    compiler, name, _ = front_end_compiler()
    if "front end" not in name or "unavailable" in name:
        pytest.skip(f"needs the standalone NVRTC front end: {name}")
    _, preambles = dataset
    pre = preambles[rows[0].preamble_hash]
    units = []
    for row in rows:
        units.append(Unit(pre, row.device_functions, row.cuda_forward, row.cuda_backward, 86))
        for m in make_mutants(row):
            if m.stage in ("compile", "run"):
                units.append(Unit(pre, row.device_functions, m.forward, row.cuda_backward, 86))
    batched = compile_many(units, compiler)
    assert sum(not v.ok for v in batched) == len(rows)  # the undefined_call mutants
    # each failing candidate and two passing ones, compiled alone (~0.4 s a unit)
    sample = [i for i, v in enumerate(batched) if not v.ok] + [i for i, v in enumerate(batched) if v.ok][:2]
    for i in sample:
        ok, log = compiler(units[i].text(), 86)
        assert batched[i].ok == ok
        if not ok:
            first_error = [ln for ln in log.splitlines() if ": error" in ln][0]
            assert [ln for ln in batched[i].log.splitlines() if ": error" in ln][
                0
            ] == first_error  # same error, same line


def test_batch_line_ranges_cover_each_candidate(rows, dataset):
    _, preambles = dataset
    pre = preambles[rows[0].preamble_hash]
    units = [Unit(pre, r.device_functions, r.cuda_forward, r.cuda_backward, 86) for r in rows]
    text, ranges = batch_text(units)
    lines = text.split("\n")
    for u, (lo, hi) in zip(units, ranges, strict=False):
        assert "\n".join(lines[lo - 1 : hi]).replace('extern "C" ', "") == u.body().replace('extern "C" ', "")


def test_every_mutant_fails_at_its_stage_and_the_rows_own_cuda_passes(rows, dataset, scorer):
    _, preambles = dataset
    pairs, expected = [], []
    for row in rows:
        pairs.append((row, Candidate(row.id, row.cuda_forward, row.cuda_backward)))
        expected.append(("original", "compile"))
        for m in make_mutants(row, rows):
            pairs.append((row, Candidate(row.id, m.forward)))
            # without a GPU, run-stage mutants get as far as compile
            expected.append((m.kind, {"structure": "none", "compile": "structure", "run": "compile"}[m.stage]))
    kinds = {k for k, _ in expected}
    assert {
        "operator_swapped",
        "index_off_by_one",
        "bounds_check_dropped",
        "writes_zeros",
        "foreign_kernel",
        "stale_global",
        "memorized_outputs",
        "timer_read",
        "undefined_call",
    } <= kinds
    scores = scorer.score_many(pairs, preambles)
    assert [(k, s.reached) for (k, _), s in zip(expected, scores, strict=False)] == expected
    original = scores[0]
    assert original.reward == 0.3 and not original.complete
    assert original.stage("run").ok is None and "no GPU" in original.stage("run").detail


def test_full_compile_on_the_cpu(rows, dataset):
    _, preambles = dataset
    with Scorer("cpu", full_compile=True, seed=1) as s:
        bad = next(m for m in make_mutants(rows[0]) if m.kind == "writes_zeros").forward.replace(
            "decltype", "decltypo", 1
        )
        # a row dict, as `datasets` loads one, is read as a Row on entry
        as_loaded = rows[0].to_dict()
        good, broken = s.score_many(
            [(as_loaded, Candidate(rows[0].id, rows[0].cuda_forward)), (rows[0], Candidate(rows[0].id, bad))],
            preambles,
        )
    assert good.stage("compile").ok and good.reached == "compile"
    assert broken.failed.name == "compile" and "error" in broken.failed.detail


def test_a_backward_for_a_row_without_one_fails_structure(rows, scorer, dataset):
    _, preambles = dataset
    row = dataclasses.replace(rows[0], id="no-backward", cuda_backward="")
    (sc,) = scorer.score_many([(row, Candidate(row.id, row.cuda_forward, rows[0].cuda_backward))], preambles)
    assert sc.failed.name == "structure" and "no backward" in sc.failed.detail


# --------------------------------------------------------------------------- run-stage judging (CPU, Python candidates)


def _judge_python(ref, source: str, outputs_only: bool = False) -> list[str]:
    """Run a Python kernel (a stand-in for a candidate) through the run stage's launch and judge."""
    spec = dataclasses.replace(ref.spec, python_source=source)

    def with_source(size_spec):
        return dataclasses.replace(size_spec, python_source=source)

    with batch_module([(spec.python_source, spec.kernel_name)], optimization_level=CPU_OPT_LEVEL) as (
        module,
        kernels,
        errors,
    ):
        assert kernels[0] is not None, errors
        assert build_module(module, "cpu") is None
        if outputs_only:  # every set's outputs (a stand-in whose own backward would differ)
            return [
                f
                for s in ref.sets
                for f in judge_set(
                    ref, s, run_guarded(with_source(s.spec), kernels[0], "cpu", s.inputs, {}, False), outputs_only=True
                )
            ]
        return judge_kernel(ref, kernels[0], "cpu", True, spec_for=with_source)


@pytest.fixture(scope="module")
def chain_reference(rows):
    return compute_reference(rows[0], seed=12345)


def test_reference_has_recorded_fresh_and_adversarial_inputs(chain_reference, rows):
    ref = chain_reference
    assert ref.twin == "ok" and ref.summary() == {"sets": 19, "recorded": 1, "fresh": 12, "adversarial": 6,
                                                  "sizes": [[64]]}  # fmt: skip
    recorded = ref.sets[0]
    fresh = [s for s in ref.sets if s.kind == "fresh"]
    assert recorded.name == "recorded" and len({s.inputs["x"].tobytes() for s in fresh + [recorded]}) == 13
    assert all(s.cpu32 and s.ref64 and "x.grad" in s.expected for s in fresh)
    again = [s for s in compute_reference(rows[0], seed=12345).sets if s.kind == "fresh"]
    assert all(
        np.array_equal(a.inputs["x"], b.inputs["x"]) for a, b in zip(again, fresh, strict=True)
    )  # the seed decides
    other = [s for s in compute_reference(rows[0], seed=54321, fresh_sets=13).sets if s.kind == "fresh"]
    assert len(other) == 13 and not any(np.array_equal(o.inputs["x"], f.inputs["x"]) for o in other for f in fresh)


def test_run_judging_passes_the_original_and_catches_wrong_kernels(chain_reference):
    src = chain_reference.spec.python_source
    assert _judge_python(chain_reference, src) == []
    oob = _judge_python(chain_reference, src.replace("y[i] =", "y[i + 1] ="))
    assert any("out of bounds of array 'y'" in f for f in oob), oob
    writes_input = _judge_python(chain_reference, src.replace("    y[i] =", "    x[i] = 0.0\n    y[i] ="))
    assert any("input-only array 'x'" in f for f in writes_input), writes_input
    swapped = _judge_python(chain_reference, src.replace("+ wp.tanh", "- wp.tanh"))
    assert any("output 'y' differs" in f for f in swapped)  # on the recorded inputs already: judging stops there


def test_memorized_outputs_never_read_past_their_table(rows):
    # the table holds the row's own size (64 outputs); at a larger size the store past it
    # must not read memory beyond the table (a witness's evidence would then differ run to
    # run): it stores 0 there
    text = memorized_outputs(rows[0])
    n = len(orjson.loads(rows[0].test_vectors)["outputs"]["y"]["data"])
    reads = re.findall(r"cudagen_memo\[(var_\w+)\]", text)
    assert reads and all(f"({v} >= 0 && {v} < {n}) ? cudagen_memo[{v}] : 0.0f" in text for v in reads), text


def test_memorized_outputs_pass_recorded_inputs_but_fail_fresh_ones(chain_reference, rows):
    recorded = orjson.loads(rows[0].test_vectors)["outputs"]["y"]["data"]
    body = "".join(
        f"    if i == {k}:\n        y[i] = wp.float32({float(np.float32(v))!r})\n" for k, v in enumerate(recorded)
    )
    src = chain_reference.spec.python_source
    failures = _judge_python(chain_reference, src[: src.index("    y[i] =")] + body, outputs_only=True)
    assert any(f.startswith("fresh 1 inputs (launch 64): output 'y'") for f in failures), failures
    assert not any(f.startswith("recorded inputs (launch 64): output") for f in failures), (
        failures
    )  # its outputs do match there


def test_constant_output_never_passes_where_the_reference_varies(chain_reference):
    s = dataclasses.replace(
        chain_reference.sets[0], cpu32={}, ref64={}
    )  # fallback: 1% of each value + 0.1% of the largest
    varying = (1.0 + np.linspace(0.0, 1e-4, 64)).astype(np.float32)  # varies by far less than the tolerance
    s = dataclasses.replace(s, expected={"y": varying})
    assert judge_set(chain_reference, s, Measured({"y": varying.copy()})) == []
    failures = judge_set(chain_reference, s, Measured({"y": np.ones(64, np.float32)}))
    assert failures == ["recorded inputs (launch 64): output 'y' is constant where the reference varies"]
    flat = dataclasses.replace(s, expected={"y": np.ones(64, np.float32)})
    assert (
        judge_set(chain_reference, flat, Measured({"y": np.ones(64, np.float32)})) == []
    )  # constant where the reference is


def test_a_candidate_as_far_off_as_the_rows_own_cuda_passes_and_no_further(chain_reference):
    """The judge's calibration (eval/run.py): where the row's own CUDA, run three times on
    a set, misses a float array's tolerance or does not repeat itself (GPU rounding in an
    order the GPU does not fix), a candidate gets OWN_MARGIN times the own kernel's largest
    error on top, with a note; never where the own kernel repeats itself within the
    tolerance, never for a candidate far off, never for integers."""
    base = dataclasses.replace(chain_reference.sets[0], cpu32={}, ref64={})  # fallback: 1% + 0.1% of the largest
    y = (1.0 + np.linspace(0.0, 0.5, 64)).astype(np.float32)
    s = dataclasses.replace(base, expected={"y": y})
    tol = 0.01 * 1.5 + 0.001 * 1.5  # at the largest element

    def off(at: int, by: float) -> np.ndarray:
        v = y.copy()
        v[at] += by
        return v

    calls = []

    def own_runs(*values):
        def own():
            calls.append(1)
            return [Measured({"y": v}) for v in values]

        return own

    near = off(63, 2 * tol)  # twice the tolerance
    assert judge_set(chain_reference, s, Measured({"y": near}))  # fails without calibration
    notes: list[str] = []
    missing = own_runs(*[off(10, 2 * tol)] * 3)  # the own kernel misses too, the same way each run
    assert judge_set(chain_reference, s, Measured({"y": near}), own=missing, notes=notes) == []
    assert len(notes) == 1 and "judged with 4x the row's own CUDA's error" in notes[0], notes
    assert "repeat themselves" in notes[0]
    # runs that differ from each other, all within the tolerance: they lend their error too
    noisy = own_runs(off(10, 0.1 * tol), off(10, 0.6 * tol), y.copy())
    assert judge_set(chain_reference, s, Measured({"y": near}), own=noisy, notes=notes) == []
    assert len(notes) == 2 and "differ from each other" in notes[1], notes
    # an own kernel that repeats itself within the tolerance lends nothing
    assert judge_set(chain_reference, s, Measured({"y": near}), own=own_runs(*[off(10, 0.6 * tol)] * 3))
    # lent only OWN_MARGIN times the own kernel's error: a candidate further off still fails
    assert judge_set(chain_reference, s, Measured({"y": off(63, 20 * tol)}), own=missing)
    # a candidate far off (over CALIBRATE_BELOW times) is not compared with the own kernel at all
    calls.clear()
    assert judge_set(chain_reference, s, Measured({"y": off(63, 100 * tol)}), own=own_runs(off(10, 2 * tol)))
    assert calls == []
    # an own kernel far off itself (over OWN_LIMIT times) lends nothing
    assert judge_set(chain_reference, s, Measured({"y": near}), own=own_runs(*[off(10, 80 * tol)] * 3))

    # an own run with a problem (a guard breached, a launch error) lends nothing
    def broken():
        return [Measured({"y": off(10, 2 * tol)}), Measured(problems=["launch failed"])]

    assert judge_set(chain_reference, s, Measured({"y": near}), own=broken)
    # integers are exact: never calibrated
    n = np.arange(64, dtype=np.int32)
    si = dataclasses.replace(base, expected={"n": n})
    calls.clear()
    assert judge_set(chain_reference, si, Measured({"n": n + 1}), own=own_runs(n + 1))
    assert calls == []
    assert len(notes) == 2


def _sets_bytes(ref) -> list[tuple]:
    return [(s.name, s.size, sorted((k, np.asarray(v).tobytes()) for k, v in s.inputs.items()),
             sorted((k, np.asarray(v).tobytes()) for k, v in s.expected.items()),
             sorted((k, v.tobytes()) for k, v in s.ref64.items())) for s in ref.sets]  # fmt: skip


def _WRONG_AT_LOW_END(src: str) -> str:  # noqa: N802 - reads as the kernel it makes
    """The chain kernel, wrong only where x is the domain's low end (-2): the decisive element of a "low" set."""
    return src.replace("    y[i] =", "    if x[i] <= -2.0:\n        y[i] = 0.0\n        return\n    y[i] =")


def test_a_lazy_reference_computes_each_drawn_set_when_the_judge_first_needs_it(rows, chain_reference):
    """The eval workers' reference (compute_reference(lazy=True)): the recorded sets at
    once; a drawn set when a candidate's judging first reaches it, then kept; in the end
    the very sets, expected values and order of the eager reference (same seed)."""
    lazy = compute_reference(rows[0], seed=12345, lazy=True)
    assert [s.kind for s in lazy.sets] == ["recorded"] and len(lazy.pending) == 18 and lazy._release is not None
    src = lazy.spec.python_source
    swapped = _judge_python(lazy, src.replace("+ wp.tanh", "- wp.tanh"))  # fails on the recorded set
    assert swapped and len(lazy.sets) == 1 and len(lazy.pending) == 18  # it cost no drawn set
    off = _judge_python(lazy, _WRONG_AT_LOW_END(src))  # fails on the first drawn set, the first with x = -2
    assert off and off[0].startswith("adversarial low @ random") and len(lazy.sets) == 2
    assert _judge_python(lazy, src) == []  # the row's own kernel runs every set: all computed, module released
    assert lazy.done and lazy._release is None and lazy.summary() == chain_reference.summary()
    assert _sets_bytes(lazy) == _sets_bytes(chain_reference) and lazy.notes == chain_reference.notes
    assert _judge_python(lazy, _WRONG_AT_LOW_END(src)) == off  # the same verdict from the kept sets


def test_the_run_stage_reports_what_a_candidate_ran_and_times_its_phases(rows):
    """eval/pool.process_job (what a GPU worker runs), with Python kernels on the CPU as
    stand-ins for compiled candidates: the reference is computed once for the job and
    its drawn sets as the first candidate reaches them; a failing candidate reports the
    sets it ran, a passing one all of them; each outcome times reference, build, judging."""
    import contextlib
    from collections import OrderedDict

    from cudagen_data.eval.pool import Job, process_job

    row = rows[0]
    src = row.python_source
    sources = {"own": src, "swapped": src.replace("+ wp.tanh", "- wp.tanh"), "off": _WRONG_AT_LOW_END(src)}

    @contextlib.contextmanager
    def build(row, forward, backward, device, precompiled_header=False):
        with batch_module([(sources[forward], row.kernel_name)], optimization_level=CPU_OPT_LEVEL) as (m, k, _):
            assert build_module(m, "cpu") is None
            yield k[0], "cpu"

    job = Job(row, 12345, [(0, "swapped", None), (1, "off", None), (2, "own", None), (3, "off", None)])
    cache = OrderedDict()
    got = {o.key: o for kind, o in process_job(job, "cpu", cache, build=build) if kind == "outcome"}
    assert [got[k].ok for k in range(4)] == [False, False, True, False], [got[k].detail for k in range(4)]
    assert got[0].input_sets["sets"] == 1 and got[1].input_sets["sets"] == 2  # the recorded set; then the first drawn
    assert got[2].input_sets == {"sets": 19, "recorded": 1, "fresh": 12, "adversarial": 6, "sizes": [[64]]}
    assert got[3].input_sets == got[1].input_sets and got[3].detail == got[1].detail  # the same, from the kept sets
    assert all(set(o.phases) == {"reference", "build", "judge"} for o in got.values())
    assert got[0].phases["reference"] > 0 and got[3].phases["reference"] == 0.0  # the first pays for the reference
    assert got[2].phases["reference"] > 0  # the sets the own kernel was first to reach
    (ref,) = cache.values()
    assert ref.done and len(ref.sets) == 19


def test_guard_cells_are_compared_bit_for_bit():
    for dtype in ("float16", "float32", "float64"):
        a, b = guard_value(dtype, "nan", 0), guard_value(dtype, "nan", 1)
        assert np.isnan(a) and np.isnan(b) and a.tobytes() != b.tobytes()  # each array's NaN is its own
        buf = np.full(10, a, dtype=dtype)
        assert guards_intact(buf, 3, a)
        computed = buf.copy()
        computed[-1] = np.array(np.nan, dtype=dtype) * 2  # a NaN computed from a guard is another NaN
        assert not guards_intact(computed, 3, a)
        copied = buf.copy()
        copied[0] = b  # a value copied from another array's guard
        assert not guards_intact(copied, 3, a)
    assert guard_value("float32", "low", 0) < -1e29 < 1e29 < guard_value("float32", "high", 0)
    assert guard_value("int32", "low", 0) < -(2**30) and guard_value("uint8", "high", 0) == 252
    assert set(GUARD_FILLS) == {"nan", "low", "high"}


def test_a_read_past_the_end_is_caught_by_a_guard_fill(chain_reference):
    """A minimum that reads one past the end only changes where the guard holds a huge
    negative value (NaN loses every comparison): the "low" fill catches it."""
    src = chain_reference.spec.python_source
    reads_past = src.replace(
        "    y[i] =", "    if x[wp.min(i + 1, 64)] < -1.0e20:\n        y[i] = 0.0\n        return\n    y[i] ="
    )
    assert reads_past != src
    failures = _judge_python(chain_reference, reads_past)
    assert failures and all(f.endswith("(guard cells: low)") for f in failures), failures


_FORWARD = """{
    // forward
    var_0 = builtin_tid1d();
    var_2 = wp::mul(var_0, var_1);
    var_3 = wp::address(var_x, var_2);
    var_4 = wp::load(var_3);
    var_6 = wp::mul(var_4, var_5);
    var_8 = wp::add(var_2, var_7);
    var_9 = wp::add(var_6, var_5);
    wp::array_store(var_y, var_8, var_9);
"""


def test_operator_swapped_edits_a_value_on_its_way_to_memory_not_an_index():
    assert stored_value_vars(_FORWARD) == {"var_9", "var_6", "var_5", "var_4"}  # not through wp::address / wp::load
    swapped = operator_swapped(_FORWARD)
    assert "var_9 = wp::sub(var_6, var_5);" in swapped and "var_8 = wp::add(var_2, var_7);" in swapped
    no_value_op = _FORWARD.replace("var_6 = wp::mul", "var_6 = wp::copy").replace("var_9 = wp::add", "var_9 = wp::copy")
    assert "var_8 = wp::sub(var_2, var_7);" in operator_swapped(no_value_op)  # else the first one anywhere


GUARDED = ("""import warp as wp

@wp.kernel
def guarded(x: wp.array(dtype=float), n: int, y: wp.array(dtype=float)):
    i = wp.tid()
    if i < n:
        y[i] = x[i] * 2.0 + 1.0e-9
""", (kernel_rows._arr("x", "float32", (48,)), kernel_rows.ArgSpec("n", "scalar", "int32", domain=(48.0, 48.0)),
      kernel_rows._arr("y", "float32", (48,), "out")), (48,), None)  # fmt: skip


@pytest.fixture(scope="module")
def guarded_row():
    kernel_rows.KERNELS["guarded"] = GUARDED
    try:
        (row,) = kernel_rows.make_row_objects(["guarded"])
    finally:
        del kernel_rows.KERNELS["guarded"]
    return row


def test_equivalent_mutants_are_told_from_observable_ones_on_the_cpu(rows, guarded_row):
    """The witness for mutants the GPU judge lets pass: the same edit on Warp's CPU forward
    (or the launch widened to whole blocks), judged as the run stage judges."""
    chain = next(m for m in make_mutants(rows[0]) if m.kind == "operator_swapped")
    chain_ref = compute_reference(rows[0], seed=5)
    assert mutant_verdict(rows[0], chain, chain_ref).status == "observable"
    by_kind = {m.kind: m for m in make_mutants(guarded_row)}
    ref = compute_reference(guarded_row, seed=5)
    eps = mutant_verdict(guarded_row, by_kind["operator_swapped"], ref)  # x*2 - 1e-9: within any tolerance
    assert eps.status == "equivalent", eps
    assert "wp::sub(" in by_kind["operator_swapped"].forward
    own_if = mutant_verdict(guarded_row, by_kind["bounds_check_dropped"], ref)  # its own `if i < n` stops them
    assert own_if.status == "equivalent", own_if
    writes_zeros, dropped = verdicts(
        [
            (guarded_row, by_kind["writes_zeros"]),
            (rows[0], next(m for m in make_mutants(rows[0]) if m.kind == "bounds_check_dropped")),
        ],
        seed=5,
        workers=2,
    )
    assert writes_zeros.status == "observable" and dropped.status == "observable", (writes_zeros, dropped)
    assert "out of bounds" in dropped.detail
    no_cpu_counterpart = Mutant("timer_read", guarded_row.cuda_forward + "\n", "structure")
    assert mutant_verdict(guarded_row, no_cpu_counterpart, ref).status == "unknown"


SHARED_SUM = ("""import warp as wp

TILE = wp.constant(64)

@wp.kernel
def tile_shared_sum(x: wp.array(dtype=wp.float32), total: wp.array(dtype=wp.float32)):
    i = wp.tid()
    t = wp.tile_load(x, shape=TILE, offset=i * TILE, storage="shared")
    wp.tile_atomic_add(total, wp.tile_sum(t))
""", (kernel_rows._arr("x", "float32", (64,)), kernel_rows._arr("total", "float32", (1,), "out")),
      (1,), 64)  # fmt: skip
# the same, but it never loads its tile: it sums whatever shared memory holds
_LOAD = 'wp.tile_load(x, shape=TILE, offset=i * TILE, storage="shared")'
_LEFTOVER = 'wp.tile_empty(shape=TILE, dtype=wp.float32, storage="shared")'


@pytest.fixture(scope="module")
def shared_sum_row():
    kernel_rows.KERNELS["shared_sum"] = SHARED_SUM
    try:
        (row,) = kernel_rows.make_row_objects(["shared_sum"])
    finally:
        del kernel_rows.KERNELS["shared_sum"]
    return row


def test_the_scrub_poisons_the_shared_memory_a_kernel_never_wrote():
    """eval/shared_scrub.py on the CPU (Warp's tile arena is stack memory at the same
    addresses launch after launch, as a GPU's shared memory is not cleared either)."""
    from cudagen_data.eval.shared_scrub import CANARY_MARKER, SCRUB_WORDS, leftovers, shared_scrub

    assert np.all(leftovers("cpu", blocks=2) == CANARY_MARKER)  # without it: what the last launch left
    scrub = shared_scrub("cpu")
    for fill, word in SCRUB_WORDS.items():
        assert np.all(leftovers("cpu", blocks=2, scrub=scrub, fill=fill) == word), fill
    words = np.array(list(SCRUB_WORDS.values()), dtype=np.uint32)  # nan, low, high in every float width
    for as_float in (words.view(np.float32), words.view(np.float16)[::2], np.repeat(words, 2).view(np.float64)):
        assert np.isnan(as_float[0]) and as_float[1] < -6e4 and as_float[2] > 6e4, as_float


def _two_kernels(src: str, other: str):
    """The row's kernel and ``other`` (renamed to ``other_kernel``) in one CPU module."""
    renamed = other.replace("def tile_shared_sum(", "def other_kernel(")
    return batch_module([(src, "tile_shared_sum"), (renamed, "other_kernel")], optimization_level=CPU_OPT_LEVEL)


def test_a_kernel_that_reads_what_the_last_launch_left_fails_once_the_scrub_runs(shared_sum_row):
    """The hole the scrub closes: a candidate that never loads its tile and sums what shared
    memory holds passes every set where the launch before it was the row's own kernel on
    the same inputs; with the scrub in between (as run_guarded runs it before every
    launch) it reads poison and fails.  And judge_kernel scrubs before every forward and
    backward launch, with the run's guard fill."""
    from cudagen_data.eval.run import planned_runs
    from cudagen_data.eval.shared_scrub import shared_scrub

    ref = compute_reference(shared_sum_row, seed=3)
    src = ref.spec.python_source
    assert _LOAD in src
    with _two_kernels(src, src.replace(_LOAD, _LEFTOVER)) as (module, (own, leftover), errors):
        assert leftover is not None and build_module(module, "cpu") is None, errors

        def judged(scrub) -> list[str]:
            for s, fill, _ in planned_runs(ref):
                run_guarded(s.spec, own, "cpu", s.inputs, {}, False, fill)  # the launch before: right, same inputs
                failures = judge_set(ref, s, run_guarded(s.spec, leftover, "cpu", s.inputs, {}, False, fill,
                                                         scrub=scrub), outputs_only=True)  # fmt: skip
                if failures:
                    return failures
            return []

        assert judged(None) == []  # the hole: right on every set, from leftovers
        failures = judged(shared_scrub("cpu"))
        assert failures and failures[0].startswith("recorded inputs (launch 1): output 'total'"), failures
        calls: list[str] = []
        assert judge_kernel(ref, own, "cpu", True, scrub=calls.append) == []
        launches = [fill for s, fill, grads in planned_runs(ref) for _ in range(2 if grads and s.output_grads else 1)]
        assert calls == launches and {"nan", "low", "high"} <= set(calls)  # forward, then backward where it runs


def test_a_lanes_tile_memory_is_poisoned_in_the_witness(shared_sum_row):
    """The witness of a mask through a tile block (equivalence.partial_verdict) runs Warp's
    cooperative CPU blocks, which zero a block's tile memory; it poisons it first, with the
    word the run's fill names: what no lane writes reads as poison."""
    from cudagen_data.eval.equivalence import cooperative_cpu_blocks, poisoned_tile_memory
    from cudagen_data.eval.shared_scrub import SCRUB_WORDS
    from cudagen_data.warp_boundary import edited_cpu_functions, fresh_kernel_cache, warp

    wp = warp()
    src = shared_sum_row.python_source
    word = np.zeros(1, dtype=np.uint32)
    with _two_kernels(src, src.replace(_LOAD, _LEFTOVER)) as (module, (_, leftover), _), fresh_kernel_cache():
        with cooperative_cpu_blocks():
            with edited_cpu_functions(
                module, [(leftover, "forward", lambda t: poisoned_tile_memory(t, word.ctypes.data))]
            ):
                module.load("cpu", block_dim=64)
            x = wp.array(np.ones(64, np.float32), device="cpu")
            totals = {}
            for fill, w in SCRUB_WORDS.items():
                word[0] = w
                total = wp.zeros(1, dtype=wp.float32, device="cpu")
                wp.launch_tiled(leftover, dim=1, inputs=[x, total], block_dim=64, device="cpu")
                totals[fill] = float(total.numpy()[0])
    assert np.isnan(totals["nan"]) and totals["low"] < -1e37 and totals["high"] > 1e37, totals


def test_widened_launch_covers_the_threads_past_the_end():
    assert widened_launch([48]) == (256,) and widened_launch([256]) == (256,) and widened_launch([300]) == (512,)
    assert widened_launch([3, 16]) == (16, 16) and widened_launch([2, 3, 5]) == (
        18,
        3,
        5,
    )  # 256 - 30 = 226 more threads: 16 more rows of 15


# --------------------------------------------------------------------------- metrics and the command


def test_pass_at_k():
    assert pass_at_k(5, 1, 1) == pytest.approx(0.2)
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)


def _write_predictions(path, items):
    path.write_bytes(b"".join(orjson.dumps(i) + b"\n" for i in items))
    return path


def test_eval_command(rows, dataset, tmp_path):
    folder, _ = dataset
    preds = []
    for row in rows:
        preds.append({"id": row.id, "cuda_forward": row.cuda_forward, "cuda_backward": row.cuda_backward})
        bad = next(m for m in make_mutants(row) if m.kind == "undefined_call")
        preds.append({"id": row.id, "cuda_forward": bad.forward})
    path = _write_predictions(tmp_path / "preds.jsonl", preds)
    report = tmp_path / "report.json"
    res = CliRunner().invoke(app, ["eval", str(path), "--dataset", str(folder), "--report", str(report), "--seed", "7"])
    assert res.exit_code == 0, res.output
    assert "run stage: NOT RUN (no GPU)" in res.output and "compile@1" in res.output
    data = orjson.loads(report.read_bytes())
    assert data["totals"]["all"]["compile@1"] == pytest.approx(0.5)
    assert data["totals"]["all"]["correct@1"] is None
    assert data["totals"]["all"]["rows"] == len(rows) and data["totals"]["all"]["candidates"] == 2 * len(rows)
    assert {r["failed_stage"] for r in data["results"]} == {None, "compile"}
    assert data["scorer"]["fresh_input_seed"] == 7 and set(data["totals"]["category"]) == {"handmade"}
    assert data["stages"]["structure"] == {"in": 6, "kept": 6, "rejected": {}}
    assert data["stages"]["compile"]["in"] == 6 and data["stages"]["compile"]["kept"] == 3
    assert data["stages"]["run"] == {"in": 0, "kept": 0, "rejected": {}}  # no GPU: not entered
    # reproducible: the same seed gives the same report, timings aside
    report2 = tmp_path / "report2.json"
    CliRunner().invoke(app, ["eval", str(path), "--dataset", str(folder), "--report", str(report2), "--seed", "7"])
    assert _untimed(orjson.loads(report2.read_bytes())) == _untimed(data)


def _untimed(d):
    if isinstance(d, dict):
        return {k: _untimed(v) for k, v in d.items() if k not in ("seconds", "candidates_per_second")}
    if isinstance(d, list):
        return [_untimed(v) for v in d]
    return d


@pytest.mark.parametrize(
    ("lines", "args", "message"),
    [
        ([b"{not json"], [], "preds.jsonl:1: not a JSON line"),
        ([b'{"id": "nope", "cuda_forward": "x"}'], [], "preds.jsonl:1: id nope is not in the test split"),
        ([b'{"id": "X"}'], [], "missing or non-string 'cuda_forward'"),
        ([b"[1, 2]"], [], "expected a JSON object"),
        ([], ["--split", "train"], "--split train: "),
        ([], ["--device", "tpu"], "--device tpu: use cpu or cuda:N"),
    ],
)
def test_eval_bad_input(rows, dataset, tmp_path, lines, args, message):
    folder, _ = dataset
    good = orjson.dumps({"id": rows[0].id, "cuda_forward": rows[0].cuda_forward})
    lines = [line.replace(b'"X"', orjson.dumps(rows[0].id)) for line in lines]
    path = tmp_path / "preds.jsonl"
    path.write_bytes(b"\n".join([good] + lines if lines else [good]) + b"\n")
    if lines:
        message = message.replace(":1:", ":2:")
    report = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["eval", str(path), "--dataset", str(folder), "--report", str(report), *args])
    assert res.exit_code == 2, res.output
    out = res.output.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("error: ") and message in out[0], res.output
    assert not report.exists()


def test_eval_missing_dataset(tmp_path):
    path = _write_predictions(tmp_path / "p.jsonl", [{"id": "a", "cuda_forward": ""}])
    res = CliRunner().invoke(app, ["eval", str(path), "--dataset", str(tmp_path / "none")])
    assert res.exit_code == 2 and res.output.startswith("error: --dataset") and "no such file or folder" in res.output


def test_the_candidate_takes_the_place_of_warps_kernel_in_its_module(rows):
    """The run stage's build, compiled to PTX without a GPU: Warp's module holds the candidate."""
    from cudagen_data.eval.run import CandidateBuildFailed, compile_substituted

    row = rows[0]
    swapped = next(m for m in make_mutants(row) if m.kind == "operator_swapped").forward
    text = compile_substituted(row, swapped)
    assert swapped in text and row.cuda_forward not in text and row.cuda_backward in text
    with pytest.raises(CandidateBuildFailed, match="error"):
        compile_substituted(row, swapped.replace("wp::sub(", "wp::sub_nope(", 1))
    with pytest.raises(CandidateBuildFailed, match="drift"):
        compile_substituted(dataclasses.replace(row, cuda_forward=row.cuda_forward.replace("{", "{ ", 1)), swapped)


def test_scorer_refuses_a_device_it_cannot_use():
    from cudagen_data import warp_boundary

    with pytest.raises(ValueError, match="use cpu or cuda:N"):
        Scorer("tpu")
    if warp_boundary.warp().get_cuda_device_count() == 0:
        with pytest.raises(ValueError, match="0 CUDA device"):
            Scorer("cuda:0")


def test_worker_pool_survives_a_crashing_row(rows):
    """A row whose own kernel kills its worker fails alone (not judged); a fresh worker runs the rest."""
    from cudagen_data.eval.pool import Job, WorkerPool

    crashing = dataclasses.replace(
        rows[1], id="crashing", python_source="import os\nos._exit(7)\n" + rows[1].python_source
    )
    pool = WorkerPool("cpu", 1)
    try:
        out = pool.run(
            [
                Job(crashing, 1, [(0, rows[1].cuda_forward, None)]),
                Job(rows[0], 1, [(1, rows[0].cuda_forward, None)]),
            ]
        )
    finally:
        pool.close()
    assert pool.restarts == 1
    assert not out[0].ok and "crashed its worker" in out[0].detail and "code 7" in out[0].detail
    # on the CPU the candidate cannot be built into a CUDA module: the worker says why, it does not die
    assert out[1].stage == "compile" and "recorded CUDA is not in the module" in out[1].detail


def test_worker_pool_kills_a_candidate_that_never_finishes(rows):
    """A worker silent past the time limit is killed; its job's in-flight work fails with the reason."""
    from cudagen_data.eval.pool import Job, WorkerPool

    hanging = dataclasses.replace(
        rows[1], id="hanging", python_source="import time\ntime.sleep(600)\n" + rows[1].python_source
    )
    pool = WorkerPool("cpu", 1, reference_timeout=3.0)
    try:
        out = pool.run([Job(hanging, 1, [(0, rows[1].cuda_forward, None)])])
    finally:
        pool.close()
    assert not out[0].ok and "took over 3 s" in out[0].detail
    assert pool.restarts == 1  # killed and replaced (the crash test shows the next job running on)


def _fake_compiler(calls):
    """Fails a unit for each line holding BAD: with line numbers if ``lines`` else without."""

    def compiler(text, arch, lines=True):
        calls.append(text.count("namespace cudagen_c") or 1)
        bad = [n for n, line in enumerate(text.split("\n"), 1) if "BAD" in line]
        if not bad:
            return True, ""
        return False, "\n".join(
            f"cudagen.cu({n}): error: bad thing" if lines else "error: bad thing somewhere" for n in bad
        )

    return compiler


@pytest.mark.parametrize("with_lines", [True, False])
def test_compile_many_finds_the_failing_units(with_lines):
    units = [
        Unit("// preamble\n", "", f"void k{i}() {{ {'BAD' if i in (3, 17, 18) else ''} }}\n", "", 86) for i in range(40)
    ]
    calls = []
    fake = _fake_compiler(calls)
    verdicts = compile_many(units, lambda t, a: fake(t, a, with_lines), batch=32, front_end=True)
    assert [i for i, v in enumerate(verdicts) if not v.ok] == [3, 17, 18]
    if with_lines:  # attributed by line, renumbered to each unit's own line, no halving
        own_line = units[3].text().split("\n").index("void k3() { BAD }") + 1
        assert verdicts[3].log == f"cudagen.cu({own_line}): error: bad thing" and len(calls) == 2
    else:  # halved down to the failing units
        assert len(calls) > 2 and verdicts[3].log == "error: bad thing somewhere"


def test_rows_sharing_an_id_keep_their_own_kernel_shapes():
    """A row's id is the hash of its canonical Python (names renamed), so a renamed copy of
    a kernel shares it while its CUDA's kernel name (Warp's hash of the exact source) does
    not.  The GPU suite met this (a generated tile reduction and the handmade tile_sum):
    the judge keyed its per-row caches by id and expected one row's kernel name of the
    other's own CUDA."""
    from cudagen_data.canonical import canonical_hashes
    from cudagen_data.eval.score import row_key
    from cudagen_data.extract import extract_source

    (tile,) = kernel_rows.make_row_objects(["tile"])
    renamed_source = tile.python_source.replace("t = ", "tt = ").replace("(t)", "(tt)").replace("total", "acc")
    assert canonical_hashes(renamed_source)[0] == tile.id
    k = extract_source(renamed_source, block_dim=tile.block_dim, arch=tile.compile.arch).kernels[0]
    twin = dataclasses.replace(
        tile,
        python_source=renamed_source,
        cuda_forward=k.forward,
        cuda_backward=k.backward,
        device_functions=k.device_functions,
    )
    assert kernel_shape(twin.cuda_forward).name != kernel_shape(tile.cuda_forward).name
    assert row_key(twin) != row_key(tile)
    pairs = [(r, Candidate(r.id, r.cuda_forward, r.cuda_backward)) for r in (tile, twin, tile)]
    with Scorer("cpu", full_compile=False, seed=1) as s:
        scores = s.score_many(pairs)
    assert [(sc.reached, sc.failed) for sc in scores] == [("compile", None)] * 3, [sc.failed for sc in scores]


@pytest.mark.parametrize("arch", [None, 90])
def test_a_tile_rows_candidate_is_substituted_for_another_arch(arch):
    """The GPU build compiles the row's module for the device (sm_90 on an H100) where the
    row was made for another arch: the kernel Warp names there must still be the recorded
    one, so the candidate replaces it (here: compiled to PTX for that arch, no GPU)."""
    from cudagen_data.eval.run import compile_substituted

    (tile,) = kernel_rows.make_row_objects(["tile"])
    row = tile if arch is None else dataclasses.replace(tile, compile=dataclasses.replace(tile.compile, arch=arch))
    assert arch is None or arch != tile.compile.arch
    candidate = tile.cuda_forward.replace("// forward", "// forward (the candidate's)", 1)
    assert candidate != tile.cuda_forward
    assert "// forward (the candidate's)" in compile_substituted(row, candidate)


def test_mutants_of_tile_and_constant_storing_rows_fail_only_at_their_stage():
    """writes_zeros once assigned a zero to what a store writes; where that is one of
    Warp's constants (`const wp::int32 var_15 = 1;`, the forward_only row's atomic_add of 1)
    the mutant did not compile, so it failed at compile instead of run (GPU suite)."""
    rows = kernel_rows.make_row_objects(["forward_only", "tile"])
    pairs, expected = [], []
    for row in rows:
        for m in make_mutants(row, rows):
            pairs.append((row, Candidate(row.id, m.forward)))
            expected.append(
                (row.kernel_name, m.kind, {"structure": "none", "compile": "structure", "run": "compile"}[m.stage])
            )
    assert ("peak_and_bins", "writes_zeros", "compile") in expected and (
        "tile_sum",
        "writes_zeros",
        "compile",
    ) in expected
    with Scorer("cpu", full_compile=True, seed=1) as s:
        scores = s.score_many(pairs)
    got = [(name, kind, sc.reached) for (name, kind, _), sc in zip(expected, scores, strict=False)]
    assert got == expected, [(e, sc.failed) for e, g, sc in zip(expected, got, scores, strict=False) if e != g]


# --------------------------------------------------------------------------- partial work (issue #23)


@pytest.fixture(scope="module")
def partial_rows() -> dict[str, Row]:
    """The issue's known escapes, and rows of every kind of kernel (plain, atomic, tile, forward-only)."""
    names = [*kernel_rows.ESCAPE_KERNELS, "chain", "atomic", "tile"]
    return dict(zip(names, kernel_rows.make_row_objects(names, sizes=True), strict=True))


# What the CPU witness must say of each partial-work mutant of each row: every one is
# caught, but those the witness shows compute the same results on every input set.
PARTIAL_EXPECTED = {
    # recorded at launches 16, 32 and 257: at 257, the first block's 256 threads fold every
    # element (thread 256's slice is empty), so "first block" changes nothing
    "min_two_level": {"partial_first_element": "observable", "partial_first_half": "observable",
                      "partial_first_block": "equivalent", "partial_all_but_last_element": "observable",
                      "partial_all_but_last_block": "observable", "skipped_work": "observable",
                      "replayed_outputs": "observable"},
    # threads OR 1 << (gid % 16) into one word: the first 16 set all 16 bits.  Its output
    # is the same for every input and every size, so a table of it is right everywhere:
    # the producer rejects such a row (input_blind, below), the judge cannot
    "correct_totals": {"partial_first_element": "observable", "partial_first_half": "equivalent",
                       "partial_first_block": "equivalent", "partial_all_but_last_element": "equivalent",
                       "partial_all_but_last_block": "observable", "skipped_work": "observable",
                       "replayed_outputs": "equivalent"},
    "prefix_scan": {"partial_first_element": "observable", "partial_first_half": "observable",
                    "partial_first_block": "observable", "partial_all_but_last_element": "observable",
                    "partial_all_but_last_block": "observable", "skipped_work": "observable",
                    "backward_empty": "observable", "backward_partial": "observable",
                    "replayed_outputs": "observable"},
    # the last lane of a block holds no tile element: equivalent, and the witness says which lanes
    "tile_idle_lanes": {"partial_first_element": "observable", "partial_first_half": "observable",
                        "partial_first_block": "observable", "partial_all_but_last_element": "equivalent",
                        "partial_all_but_last_block": "observable", "skipped_work": "observable",
                        "backward_empty": "observable", "backward_partial": "observable",
                        "replayed_outputs": "observable"},
    "chain": {"partial_first_element": "observable", "partial_first_half": "observable",
              "partial_first_block": "observable", "partial_all_but_last_element": "observable",
              "partial_all_but_last_block": "observable", "skipped_work": "observable",
              "backward_empty": "observable", "backward_partial": "observable", "replayed_outputs": "observable"},
    "atomic": {"partial_first_element": "observable", "partial_first_half": "observable",
               "partial_first_block": "observable", "partial_all_but_last_element": "observable",
               "partial_all_but_last_block": "observable", "skipped_work": "observable",
               "backward_empty": "observable", "backward_partial": "observable", "replayed_outputs": "observable"},
    # every lane of tile_sum's 32 holds two of its 64 elements: a mask through a block is run
    # lane by lane (Warp's cooperative CPU blocks, tile memory poisoned) and caught
    "tile": {"partial_first_element": "observable", "partial_first_half": "observable",
             "partial_first_block": "observable", "partial_all_but_last_element": "observable",
             "partial_all_but_last_block": "observable", "skipped_work": "observable",
             "backward_empty": "observable", "backward_partial": "observable", "replayed_outputs": "observable"},
}  # fmt: skip


def test_every_partial_work_mutant_is_caught_or_witnessed_equivalent(partial_rows):
    """The partial-work family on the CPU witness (the same thread mask or table replay in
    Warp's CPU kernel, judged as the run stage judges, on the same input sets)."""
    from cudagen_data.eval.mutants import make_partial_mutants

    got, details, refs, mutants = {}, {}, {}, {}
    for name, row in partial_rows.items():
        ref = refs[name] = compute_reference(row, seed=11)
        got[name] = {}
        for m in make_partial_mutants(row):
            v = mutant_verdict(row, m, ref)
            got[name][m.kind], details[(name, m.kind)], mutants[(name, m.kind)] = v.status, v.detail, m
    assert got == PARTIAL_EXPECTED, [
        (k, details[k]) for k in details if got[k[0]][k[1]] != PARTIAL_EXPECTED[k[0]].get(k[1])
    ]
    # the partial min: caught for sure by the decisive element at the last index alone
    low_last = [s for s in refs["min_two_level"].sets if s.name == "adversarial low @ last"]
    only = dataclasses.replace(refs["min_two_level"], sets=low_last)
    for kind in ("partial_first_half", "partial_all_but_last_element", "partial_all_but_last_block"):
        v = mutant_verdict(partial_rows["min_two_level"], mutants[("min_two_level", kind)], only)
        assert v.status == "observable" and v.detail.startswith("adversarial low @ last"), (kind, v)
    # all but the last element of a scan, of an atomic sum: caught on the recorded inputs already
    for name in ("prefix_scan", "atomic"):
        assert details[(name, "partial_all_but_last_element")].startswith("recorded inputs"), name
    # a table of the recorded outputs is caught at the other recorded sizes (or on drawn inputs)
    for name in ("min_two_level", "chain", "atomic", "tile", "tile_idle_lanes"):
        assert partial_rows[name].launch_dim[0] != refs[name].sizes[1][0]
        detail = details[(name, "replayed_outputs")]
        launch = "x".join(map(str, partial_rows[name].launch_dim))
        assert not detail.startswith(f"recorded inputs (launch {launch})"), detail
    assert all(len(refs[name].sizes) == 3 for name in refs)  # every row here has three recorded sizes
    # the input-blind row whose table replay is right everywhere: the producer rejects it
    (blind,) = execute_specs([kernel_rows.kernel_spec("correct_totals")], reference_checks={}, probe_inputs=True)
    assert not blind.ok and blind.reason == "input_blind", (blind.reason, blind.detail)
    idle = details[("tile_idle_lanes", "partial_all_but_last_element")]
    assert idle.startswith("lane 127 of cut blocks holds no work that reaches a result") and "poisoned" in idle, idle
    assert "(32 lanes a block, lane 31 of cut blocks skipped)" in details[("tile", "partial_all_but_last_element")]
    assert "lanes 16..31 of cut blocks skipped" in details[("tile", "backward_partial")]  # its backward, lane by lane


def test_partial_work_mutants_compile_and_keep_the_rows_own_code(partial_rows, dataset):
    """Every partial-work mutant is a candidate that passes structure and NVRTC (the run
    stage is where it must fail); backward mutants keep the row's own forward."""
    from cudagen_data.eval.mutants import PARTIAL_KINDS, make_partial_mutants

    _, preambles = dataset
    pairs, kinds = [], set()
    for row in partial_rows.values():
        for m in make_partial_mutants(row):
            assert m.stage == "run" and (m.backward is None) == (not m.kind.startswith("backward_"))
            if m.backward is not None:
                assert m.forward == row.cuda_forward and m.backward != row.cuda_backward
            pairs.append((row, Candidate(row.id, m.forward, m.backward)))
            kinds.add(m.kind)
    assert kinds == set(PARTIAL_KINDS)
    with Scorer("cpu", full_compile=False, seed=1) as s:
        scores = s.score_many(pairs, preambles)
    assert [sc.reached for sc in scores] == ["compile"] * len(pairs), [sc.failed for sc in scores if sc.failed]


def test_a_partial_candidate_right_on_half_the_inputs_passes_well_under_one_percent():
    """The judge's own draws (reference.py), in NumPy: a min over 256 elements whose
    candidate folds only the first half (right where the minimum lies there: p = 1/2),
    and a sum that drops the last element (right only where it is 0: p = 0)."""
    from cudagen_data.eval.reference import (
        ADVERSARIAL_PLACES,
        ADVERSARIAL_SIDES,
        MIN_RANDOM_DRAWS,
        draw_adversarial,
        draw_fresh,
        draw_rng,
        fresh_per_size,
    )

    spec = kernel_rows.kernel_spec("chain")
    spec = dataclasses.replace(spec, args=(kernel_rows._arr("x", "float32", (256,)),), launch_dim=(16,))
    draws = fresh_per_size(4, 1)
    assert draws == MIN_RANDOM_DRAWS >= 12
    trials, passed_random, passed_all = 1000, 0, 0
    for seed in range(trials):
        random_sets = [draw_fresh(spec, draw_rng(seed, "row", 0, f"fresh {k}", 0))[0]["x"] for k in range(draws)]
        adversarial = [draw_adversarial(spec, draw_rng(seed, "row", 0, f"{s}@{p}", 0), s, p)[0]["x"]
                       for p in ADVERSARIAL_PLACES for s in ADVERSARIAL_SIDES]  # fmt: skip
        right = [x[:128].min() == x.min() for x in random_sets]
        passed_random += all(right)
        passed_all += all(right) and all(x[:128].min() == x.min() for x in adversarial)
    # p**12 = 1/4096 at p = 1/2: expected 0.24 passes in 1,000 trials
    assert passed_random / trials < 0.005 and passed_all == 0, (passed_random, passed_all)
    single = sum(
        draw_fresh(spec, draw_rng(seed, "row", 0, "fresh 1", 0))[0]["x"][:128].min()
        == draw_fresh(spec, draw_rng(seed, "row", 0, "fresh 1", 0))[0]["x"].min()
        for seed in range(trials)
    )
    assert 0.4 < single / trials < 0.6  # one fresh set (the judge before): the partial min passes half the time
    x_last = [draw_adversarial(spec, draw_rng(s, "row", 0, "a", 0), "low", "last")[0]["x"] for s in range(50)]
    assert all(x[-1] == -1.0 and x[:-1].min() >= 0.0 for x in x_last)  # the decisive element, last


INT_MIN = ("""import warp as wp

wp.set_module_options({"enable_backward": False})

@wp.kernel
def int_min_two_level(x: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.int32)):
    t = wp.tid()
    m = int(2147483647)
    for k in range(t, 256, 16):
        m = wp.min(m, x[k])
    wp.atomic_min(out, 0, m)
""", (kernel_rows._arr("x", "int32", (256,), domain=(-1000.0, 1000.0)),
      kernel_rows._arr("out", "int32", (1,), "inout", (5000.0, 5000.0))), (16,), None)  # fmt: skip


@pytest.fixture(scope="module")
def int_min_row():
    kernel_rows.KERNELS["int_min"] = INT_MIN
    try:
        (row,) = kernel_rows.make_row_objects(["int_min"])
    finally:
        del kernel_rows.KERNELS["int_min"]
    return row


def test_integer_inputs_get_adversarial_sets_that_catch_a_partial_min(int_min_row):
    """An integer min over 256 elements, 16 threads each folding a strided slice: the
    candidate that skips the last thread is right wherever the minimum lies in another
    slice (15 times in 16), so the fresh sets alone let it pass about half the time
    ((15/16)**12).  Integer inputs get the adversarial sets too: the decisive minimum at
    the last index lies in the skipped slice, every time."""
    from cudagen_data.eval.mutants import make_partial_mutants
    from cudagen_data.eval.reference import draw_fresh, draw_rng, recorded_sizes, spiked_arrays

    row = int_min_row
    spec = recorded_sizes(row)[0].spec
    assert [a.name for a in spiked_arrays(spec)] == ["x"]  # an integer input; `out` (one value) is not spiked

    def skipped_slice_never_decides(seed: int) -> bool:
        xs = [draw_fresh(spec, draw_rng(seed, str(row.id), 0, f"fresh {k + 1}", 0))[0]["x"] for k in range(12)]
        return all(np.delete(x, np.s_[15::16]).min() == x.min() for x in xs)

    seed = next(s for s in range(200) if skipped_slice_never_decides(s))
    ref = compute_reference(row, seed=seed)
    low_last = next(s for s in ref.sets if s.name == "adversarial low @ last")
    x = low_last.inputs["x"]
    assert x.dtype == np.int32 and x[-1] == -1000 and x[:-1].min() >= 0  # the decisive element, once, last
    assert ref.summary()["adversarial"] == 6
    cut = next(m for m in make_partial_mutants(row) if m.kind == "partial_all_but_last_element")
    without = dataclasses.replace(ref, sets=[s for s in ref.sets if s.kind != "adversarial"])
    assert mutant_verdict(row, cut, without).status == "equivalent"  # the judge without integer spikes: passes
    caught = mutant_verdict(row, cut, ref)
    assert caught.status == "observable" and caught.detail.startswith("adversarial low @"), caught


def test_a_candidate_build_with_the_precompiled_header_leaves_it_to_be_removed(rows):
    """The eval workers build with NVRTC's precompiled header (~3x faster per candidate,
    bench_eval --run-stage-cpu) and the pool removes a killed one's: NVRTC removes it only
    when its process exits normally.  (One folder per process, reused by every build: an
    earlier build of this process may have made it already.)"""
    import os

    from cudagen_data import warp_boundary
    from cudagen_data.eval.run import compile_substituted

    row = rows[0]
    for k in range(2):
        text = compile_substituted(row, row.cuda_forward.replace("// forward", f"// forward {k}"), None, True)
        assert f"// forward {k}" in text
    made = warp_boundary.nvrtc_pch_folders(os.getpid())
    if not made:
        pytest.skip("this NVRTC makes no precompiled-header folder (CUDA < 13: Warp's own temporary folder)")
    assert warp_boundary.remove_nvrtc_pch(os.getpid()) == len(made) and not warp_boundary.nvrtc_pch_folders(os.getpid())


def test_the_worker_pool_removes_its_workers_precompiled_headers(tmp_path):
    """A worker's header folder is gone once the pool closes, even where the worker did
    not remove it itself (killed, or stopped before it could)."""
    import tempfile
    from pathlib import Path

    from cudagen_data import warp_boundary
    from cudagen_data.eval.pool import WorkerPool

    pool = WorkerPool("cpu", 1)
    pid = pool.workers[0].proc.pid
    folder = Path(tempfile.gettempdir()) / f"__nvrtc_auto_pch_{pid}_0"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "header.pch").write_bytes(b"x")
    assert warp_boundary.nvrtc_pch_folders(pid) == [folder]
    pool.workers[0].kill()  # as a timed-out worker is
    pool.close()
    assert not folder.exists()


def test_adversarial_sets_expect_outputs_only(chain_reference):
    """Adversarial sets judge the forward: drawn without output gradients, they expect no
    input gradient (a witness that runs a backward on them must not fail for want of one)."""
    adversarial = [s for s in chain_reference.sets if s.kind == "adversarial"]
    assert len(adversarial) == 6 and all(not s.output_grads for s in adversarial)
    assert all(set(s.expected) == set(s.cpu32) == set(s.ref64) == {"y"} for s in adversarial)
    fresh = [s for s in chain_reference.sets if s.kind == "fresh"]
    assert all(set(s.expected) == {"y", "x.grad"} and s.output_grads for s in fresh)


def test_the_report_states_the_input_sets_and_sizes():
    """How many sets ran, of which kind, at how many sizes: the text and the JSON say it."""
    from cudagen_data.eval.report import EvalReport, Result, format_report
    from cudagen_data.eval.score import Score, StageResult

    report = EvalReport("ds", "test", {"device": "cuda:0", "front_end": "x", "full_compile": "y",
                                       "fresh_input_seed": 9}, {})  # fmt: skip
    for n, sizes in ((33, [[64], [128], [257]]), (19, [[16]])):
        fresh, adversarial = (12, 18) if n == 33 else (12, 6)
        sets = {"sets": n, "recorded": len(sizes), "fresh": fresh, "adversarial": adversarial, "sizes": sizes}
        stages = [StageResult("structure", True), StageResult("compile", True), StageResult("run", True)]
        report.results.append(Result(1, f"r{n}", "c", "d", Score(f"r{n}", stages, input_sets=sets)))
    text = format_report(report)
    assert "run stage: 19-33 input sets per candidate (recorded 1-3, fresh 12, adversarial 6-18) at 1-3 " in text
    assert orjson.loads(report.to_json())["results"][0]["input_sets"]["sizes"] == [[64], [128], [257]]


def test_the_gpu_lane_witness_tells_rounding_from_a_missing_term():
    """equivalence._ulps, which the GPU lane witness uses when a lane cut's results are not
    bit for bit the row's own: a reordered sum differs by a few units in the last place; a
    term left out of it (a lane whose work reached the result), a moved NaN or a changed
    integer is far above ROUNDING_ULPS, so such a mutant is observable, not rounding; and an
    own kernel that does not repeat itself within rounding decides nothing."""
    from cudagen_data.eval.equivalence import ROUNDING_ULPS, _ulps, against_own

    rng = np.random.default_rng(3)
    terms = rng.standard_normal((64, 16)).astype(np.float32)
    own = terms.sum(axis=0)
    reordered = terms[::-1].sum(axis=0)  # every term, another order
    missing = terms[:-1].sum(axis=0)  # one lane's term left out
    assert _ulps(own, own.copy()) == 0.0
    assert 0.0 < _ulps(own, reordered) <= ROUNDING_ULPS
    assert _ulps(own, missing) > 100 * ROUNDING_ULPS
    nan_moved = own.copy()
    nan_moved[0] = np.nan
    assert _ulps(own, nan_moved) == float("inf")
    ints = np.arange(8, dtype=np.int32)
    assert _ulps(ints, ints + np.eye(8, dtype=np.int32)[0]) == float("inf")
    assert _ulps(own, own[:-1]) == float("inf")
    # the verdict's rule (equivalence.against_own), one input set, the own kernel run three times
    steady = [{"out": own}, {"out": own.copy()}, {"out": own.copy()}]
    assert against_own(steady, {"out": own.copy()})[:2] == ("", "")  # bit for bit
    status, _, ulps = against_own(steady, {"out": reordered})
    assert status == "" and 0 < ulps <= ROUNDING_ULPS  # rounding, said with its size
    assert against_own(steady, {"out": missing})[0] == "observable"  # a lane's term left out
    assert against_own(steady, {"out": nan_moved})[0] == "observable"  # poison read where work was skipped
    assert against_own(steady, {})[0] == "observable"  # an output not written at all
    # an own kernel that varies by more than rounding is no reference: not even the missing
    # term is excused as "within its spread"
    noisy = [{"out": own}, {"out": missing}, {"out": own.copy()}]
    assert against_own(noisy, {"out": missing})[0] == "unknown"
    assert against_own([{"out": own}, {"out": own[:-1]}], {"out": own.copy()})[0] == "unknown"
