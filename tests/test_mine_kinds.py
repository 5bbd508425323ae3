"""`cudagen mine` on tests/mine_tree_kinds: outputs that depend on thread order are not
recorded (found by a run with the threads reversed), the argument kinds mining fills
beyond plain arrays and scalars (structs, indexed and fabric arrays, vector types Warp
has no name for), each checked against NumPy and re-run from its recorded vectors, and
kernels that step outside their arrays (bounds.py: not executed, the same in every run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from cudagen_data.mine.pool import Options
from cudagen_data.mine.run import mine_paths

pytestmark = pytest.mark.slow  # worker processes start Warp

TREE = Path(__file__).parent / "mine_tree_kinds"


@pytest.fixture(scope="module")
def mined():
    return mine_paths([TREE], workers=2, options=Options(timeout_s=120))


@pytest.fixture(scope="module")
def rows(mined) -> dict[str, dict]:
    """The mined rows by qualname, as the dicts a user reads from the dataset's files."""
    return {r.provenance.qualname: r.to_dict() for r in mined.rows}


def vectors(row: dict) -> dict:
    tv = orjson.loads(row["test_vectors"])
    return {
        part: {n: np.asarray(v["data"]) for n, v in tv[part].items()}
        for part in ("inputs", "outputs", "output_grads", "input_grads")
    }


# --------------------------------------------------------------------------- thread order


def test_write_at_atomic_slot_keeps_only_the_count(rows):
    row = rows["write_at_atomic_slot"]
    p = row["provenance"]
    assert p["executed"] and p["order_dependent"] == ["outputs.out", "input_grads.vals"]
    tv = vectors(row)
    assert list(tv["outputs"]) == ["counter"] and tv["input_grads"] == {}
    np.testing.assert_array_equal(tv["outputs"]["counter"], tv["inputs"]["counter"] + np.array([8] + [0] * 7))
    assert row["gradient_check"]["status"] == "unverified" and "thread order" in row["gradient_check"]["reason"]


def test_colliding_scatter_is_not_executed(rows):
    row = rows["colliding_scatter"]
    p = row["provenance"]
    assert not p["executed"] and row["test_vectors"] == ""
    assert p["not_executed_reason"].startswith("outputs depend on thread order: 'out'")
    assert row["gradient_check"]["status"] == "unverified"


def test_permutation_scatter_stays_executed(rows):
    row = rows["permutation_scatter"]
    assert row["provenance"]["executed"] and row["provenance"]["order_dependent"] == []
    tv = vectors(row)
    want = np.zeros(8, dtype=np.float32)
    want[(np.arange(8) * 3 + 1) % 8] = tv["inputs"]["vals"] * 2.0
    np.testing.assert_allclose(tv["outputs"]["out"], want, rtol=1e-6)
    assert row["gradient_check"]["status"] == "verified"


def test_atomic_sums_stay_executed(rows):
    row = rows["atomic_sum"]
    assert row["provenance"]["executed"] and row["provenance"]["order_dependent"] == []
    tv = vectors(row)
    assert sorted(tv["outputs"]) == ["count", "total"]
    np.testing.assert_allclose(
        tv["outputs"]["total"][0], tv["inputs"]["total"][0] + tv["inputs"]["vals"].sum(), rtol=1e-5
    )
    assert tv["outputs"]["count"][0] == tv["inputs"]["count"][0] + 8


def test_mixed_kernel_keeps_its_order_independent_outputs(rows):
    row = rows["slot_and_sum"]
    assert row["provenance"]["executed"] and row["provenance"]["order_dependent"] == ["outputs.order"]
    assert sorted(vectors(row)["outputs"]) == ["counter", "total"]


def test_lost_updates_are_not_kept(rows):
    """Plain read-modify-write stores from several threads: the same sum in any sequential
    order (reversing shows nothing), lost updates on a GPU."""
    row = rows["lost_update"]
    assert row["provenance"]["executed"] and row["provenance"]["order_dependent"] == ["outputs.counter"]
    tv = vectors(row)
    assert list(tv["outputs"]) == ["out"]
    np.testing.assert_allclose(tv["outputs"]["out"], tv["inputs"]["vals"] + 1.0, rtol=1e-6)
    groups = rows["count_groups"]["provenance"]
    assert not groups["executed"] and groups["not_executed_reason"] == (
        "outputs depend on thread order: 'sizes' stored by several threads without an atomic"
    )


def test_lanes_updating_one_row_through_a_view_are_not_kept(rows):
    """Stores through a view of a row, by the 8 lanes of that row: each thread of a row
    changes it again (seen when threads are added along the second dimension)."""
    row = rows["lanes_rewrite_a_row"]
    assert row["provenance"]["order_dependent"] == ["outputs.h"]
    assert list(vectors(row)["outputs"]) == ["out"]


def test_stores_that_do_not_race_are_kept(rows):
    row = rows["same_value_everywhere"]
    assert row["provenance"]["executed"] and row["provenance"]["order_dependent"] == []
    tv = vectors(row)
    assert tv["outputs"]["out"][0] == np.float32(tv["inputs"]["a"][0] * 2.0)
    row = rows["rows_2d"]
    assert row["provenance"]["executed"] and row["provenance"]["order_dependent"] == []
    tv = vectors(row)
    np.testing.assert_allclose(tv["outputs"]["out"], tv["inputs"]["a"].T * 3.0, rtol=1e-6)


def test_shared_stores_read_from_the_forward():
    """The static half: plain stores at an index other than the thread's own."""
    from cudagen_data.mine.order import shared_stores

    forward = """
        builtin_tid2d(var_0, var_1);
        var_4 = wp::load(var_3);
        wp::array_store(var_a, var_4, var_2);
        wp::array_store(var_m, var_1, var_0, var_14);
        wp::array_store(var_n, var_0, var_14);
        var_7 = wp::atomic_add(var_s, var_0, var_6);
        var_9 = &(((var_p).inner).d);
        var_11 = wp::load(var_9);
        wp::array_store(var_11, var_0, var_1, var_7);
        wp::store(&(wp::index(var_v, var_8).component_ref(var_3)), var_1);
        var_20 = wp::view(var_h, var_0);
        wp::array_store(var_20, var_1, var_7);
        var_21 = wp::view(var_g, var_0);
        wp::array_store(var_21, var_5, var_7);
    """
    names = {"a", "m", "n", "s", "p.inner.d", "v", "h", "g"}
    # m[j, i], p.inner.d[i, j] and h[i][j] are each thread's own; n[i] is shared by the threads of a row
    assert shared_stores(forward, names) == {"a", "n", "v", "g"}


def test_reversed_run_skipped_only_where_the_forward_shows_no_order():
    from cudagen_data.mine.order import plainly_independent

    forward = """{
        builtin_tid2d(var_0, var_1);
        var_2 = wp::address(var_a, var_0, var_1);
        var_3 = wp::load(var_2);
        var_4 = wp::address(var_b, var_5, var_0);
        wp::array_store(var_a, var_0, var_1, var_3);
    }"""
    assert plainly_independent(forward, ["a", "b"])  # b is only read, at any index
    assert not plainly_independent(
        forward.replace("wp::address(var_a, var_0, var_1)", "wp::address(var_a, var_1, var_0)"), ["a", "b"]
    )
    assert not plainly_independent(
        forward.replace("var_3 = wp::load(var_2)", "var_3 = helper_0(var_a, var_0)"), ["a", "b"]
    )
    assert not plainly_independent(forward + "var_9 = wp::atomic_add(var_b, var_0, var_3);", ["a", "b"])
    assert plainly_independent(forward.replace("builtin_tid2d(var_0, var_1);", ""), ["a", "b"])  # identical threads
    assert plainly_independent(forward + "// helper(a, i) quoted from the Python source\n", ["a", "b"])
    assert not plainly_independent(forward, ["a", "p.b"])  # struct fields: always run reversed
    aliased = forward.replace(
        "wp::array_store(var_a, var_0, var_1, var_3);", "var_7 = var_a;\n wp::array_store(var_7, var_0, var_1, var_3);"
    )
    assert not plainly_independent(aliased, ["a", "b"])


def test_ordinary_kernel(rows):
    row = rows["ordinary"]
    tv = vectors(row)
    np.testing.assert_allclose(tv["outputs"]["out"], tv["inputs"]["a"] ** 2 + 1.0, rtol=1e-6)
    assert row["provenance"]["order_dependent"] == [] and row["gradient_check"]["status"] == "verified"


def test_reversed_thread_order_really_reverses():
    """The check's reference: the same kernel built with the reversed loop runs threads last to first."""
    from cudagen_data import warp_boundary
    from cudagen_data.warp_boundary import mining as warp_mining

    wp = warp_boundary.warp()
    with warp_boundary.loaded_source(
        "import warp as wp\n\n@wp.kernel\ndef slot(c: wp.array(dtype=int), out: wp.array(dtype=int)):\n"
        "    i = wp.tid()\n    out[wp.atomic_add(c, 0, 1)] = i\n"
    ) as loaded:
        kernel = loaded.kernels()[0]
        got = []
        for reverse in (False, True, False):
            with warp_mining.cpu_module_of([kernel], optimization_level=0) as module:
                if reverse:
                    with warp_mining.reversed_thread_order(module):
                        assert warp_boundary.build_module(module, "cpu") is None
                else:
                    assert warp_boundary.build_module(module, "cpu") is None
                c, out = wp.zeros(1, dtype=int, device="cpu"), wp.zeros(5, dtype=int, device="cpu")
                wp.launch(kernel, dim=5, inputs=[c, out], device="cpu")
                got.append(out.numpy().tolist())
    assert got == [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [0, 1, 2, 3, 4]]  # and the usual order is back after


def test_order_comparison():
    from cudagen_data.mine.order import differs

    assert differs(np.array([1, 2]), np.array([2, 1])) and not differs(np.array([1, 2]), np.array([1, 2]))
    a = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    assert not differs(a, a + np.float32(1e-6))  # rounding of a sum in another order
    assert differs(a, a[::-1].copy())
    assert differs(a, np.array([1.0, -2.0, np.inf], dtype=np.float32))


# --------------------------------------------------------------------------- argument kinds


def test_struct_argument(rows):
    row = rows["through_struct"]
    assert row["provenance"]["executed"]
    specs = {s["name"]: s for s in orjson.loads(row["arg_specs"])}
    assert list(specs) == ["p.src", "p.dst", "p.offset", "p.inner.scale"]
    assert specs["p.src"]["role"] == "in" and specs["p.dst"]["role"] == "inout"  # src was left unchanged
    tv = vectors(row)
    assert list(tv["outputs"]) == ["p.dst"]
    want = tv["inputs"]["p.src"][(np.arange(8) + tv["inputs"]["p.offset"]) % 8] * tv["inputs"]["p.inner.scale"]
    np.testing.assert_allclose(tv["outputs"]["p.dst"], want, rtol=1e-6)


def test_struct_read_only_and_printf_only_are_not_executed(rows):
    assert rows["reads_struct_only"]["provenance"]["not_executed_reason"].startswith("writes no array argument")
    assert rows["prints_only"]["provenance"]["not_executed_reason"].startswith("writes no array argument")
    assert rows["takes_handle"]["provenance"]["not_executed_reason"] == "argument 'mesh': uint64 handle (uint64)"
    assert rows["array_of_structs"]["provenance"]["not_executed_reason"] == "argument 'a': array of structs (Inner)"
    assert not any(
        rows[k]["provenance"]["executed"]
        for k in ("reads_struct_only", "prints_only", "takes_handle", "array_of_structs")
    )


def test_unfillable_arguments_counted_by_kind(mined):
    from cudagen_data.mine.argspecs import unfillable_kind

    assert mined.stats["unfillable_arguments"] == {"uint64 handle": 1, "array of structs": 1}
    assert unfillable_kind("argument 'p': struct with texture (Texture2D)") == "struct with texture"


def test_indexed_and_fabric_arrays(rows):
    tv = vectors(rows["indexed"])
    assert orjson.loads(rows["indexed"]["arg_specs"])[0]["layout"] == "indexed"
    np.testing.assert_allclose(tv["outputs"]["out"], tv["inputs"]["a"][::-1] + 1.0, rtol=1e-6)  # indices in reverse
    tv = vectors(rows["fabric_copy"])
    assert [s["layout"] for s in orjson.loads(rows["fabric_copy"]["arg_specs"])] == ["fabric", "indexedfabric"]
    np.testing.assert_allclose(tv["outputs"]["b"], (tv["inputs"]["a"] * 2.0)[::-1], rtol=1e-6)


def test_vector_types_without_a_name(rows):
    row = rows["custom_vectors"]
    dtypes = [s["dtype"] for s in orjson.loads(row["arg_specs"])]
    assert dtypes == ["vector(5,float32)", "vector(3,int8)", "float32"]
    tv = vectors(row)
    assert tv["inputs"]["a"].shape == (8, 5) and tv["inputs"]["b"].shape == (8, 3)
    np.testing.assert_allclose(tv["outputs"]["out"], tv["inputs"]["a"][:, 4] + tv["inputs"]["b"][:, 2], rtol=1e-6)


def test_parametric_dtypes():
    from cudagen_data.spec import DTYPES, ArgSpec

    assert DTYPES["matrix(2,3,float16)"] == ("float16", (2, 3)) and DTYPES["quaternion(float64)"] == ("float64", (4,))
    assert "vector(0,float32)" not in DTYPES and "vector(3,complex)" not in DTYPES and "vec3" in DTYPES
    with pytest.raises(ValueError, match="unknown dtype"):
        ArgSpec("a", "array", "matrix(2,float32)", (8,))
    with pytest.raises(ValueError, match="unknown layout"):
        ArgSpec("a", "scalar", "float32", (), "in", (0.0, 1.0), "fabric")
    # a plain spec serializes as before (no layout key): synthetic rows' bytes do not change
    assert "layout" not in ArgSpec("a", "array", "float32", (8,)).to_dict()


def test_new_kinds_rerun_from_their_vectors(mined):
    """What validate and the GPU suite do with these rows: found again, re-run on the
    recorded inputs; every recorded output comes out the same."""
    from cudagen_data.mine.recheck import rerun_rows
    from cudagen_data.validate import max_error_beyond

    picked = [r for r in mined.rows if r.provenance.executed]
    assert {r.provenance.qualname for r in picked} >= {
        "through_struct",
        "indexed",
        "fabric_copy",
        "custom_vectors",
        "write_at_atomic_slot",
    }
    for row, rerun in zip(picked, rerun_rows(picked, user_root=TREE.parent), strict=False):
        assert not rerun.error and not rerun.skipped, (row.kernel_name, rerun.error, rerun.skipped)
        for name, want in vectors(row.to_dict())["outputs"].items():
            assert max_error_beyond(rerun.outputs[name], want, 1e-5, 1e-6) is None, (row.kernel_name, name)


# --------------------------------------------------------------------------- out of bounds


OUT_OF_BOUNDS = {
    "reads_past_end": "reads past the end of 'x'",
    "writes_past_end": "writes past the end of 'y'",
    "reads_before_start": "reads before the start of 'x'",
    "reads_index_past_end": "reads past the end of 'idx'",
    "staggered_3d": "reads past the end of 'e'",
    "csr_row_sums": "reads past the end of 'offsets'",
    "branches_past_end": "reads past the end of 'x'",
    "csr_match_count": "reads past the end of 'offsets'",
    "divides_by_before_start": "reads before the start of 'n'",
}


def test_kernels_stepping_outside_their_arrays_are_not_executed(rows, mined):
    """Their module constant GRID (16) is not the made-up arrays' 8: each is not executed
    with its reason (the fences of mine/bounds.py: the run's child faults, the worker names
    the arrays; divides_by_before_start's child dies of SIGFPE instead, dividing by a zero
    read before the start while only the ends are fenced), records no vectors; the kernel
    whose GRID keeps it inside runs."""
    got = {q: rows[q]["provenance"]["not_executed_reason"] for q in OUT_OF_BOUNDS}
    assert got == OUT_OF_BOUNDS
    for q in OUT_OF_BOUNDS:
        assert not rows[q]["provenance"]["executed"] and rows[q]["test_vectors"] == "", q
    inside = rows["stays_inside"]
    assert inside["provenance"]["executed"] and inside["provenance"]["not_executed_reason"] == ""
    tv = vectors(inside)
    x, y = tv["inputs"]["x"], tv["outputs"]["y"]
    np.testing.assert_array_equal(y[:7], np.maximum(x[1:], x[:7]))
    assert mined.stats["not_executed_by_reason"]["reads outside its arrays"] == 8
    assert mined.stats["not_executed_by_reason"]["writes outside its arrays"] == 1


def test_mining_twice_gives_the_same_rows(mined):
    """Reads past the end see guard cells, never heap memory: a second run of the tree
    gives every row byte for byte (timings aside), the out-of-bounds ones included."""
    from cudagen_data.contracts.row import strip_timing

    again = mine_paths([TREE], workers=2, options=Options(timeout_s=120))
    first = [orjson.dumps(strip_timing(r.to_dict())) for r in mined.rows]
    second = [orjson.dumps(strip_timing(r.to_dict())) for r in again.rows]
    assert first == second and mined.splits == again.splits
    assert any(r.provenance.qualname == "staggered_3d" for r in again.rows)
