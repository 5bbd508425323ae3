"""ML kernel families (issue #7): generation, compile, CPU execution, NumPy references.

A few generated kernels per category go through the real pipeline (extract -> NVRTC,
CPU run -> reference check); for every family a deliberately wrong kernel must fail its
NumPy check.  Everything heavy runs once per module (one NVRTC batch, one CPU build).
"""

from __future__ import annotations

import ast
import math
from collections import Counter

import numpy as np
import pytest

from cudagen_data import canonical
from cudagen_data.execution import execute_specs, forward_only_reason
from cudagen_data.extract import DEFAULT_BLOCK_DIM, compile_units, extract_kernels
from cudagen_data.generators import categories, generate
from cudagen_data.generators.ml import GENERATORS, REFERENCE_CHECKS
from cudagen_data.spec import DIFFICULTIES, DTYPES, ArgSpec, KernelSpec

ML = ("reduction", "scan", "stencil", "gemm", "softmax", "norm", "linear_act", "attention", "moe_routing")
PIPELINE_SEED = 20240607
PER_CATEGORY = 2


def test_registry_order_and_checks():
    assert tuple(GENERATORS) == ML
    assert set(REFERENCE_CHECKS) == set(ML)
    assert set(ML) <= set(categories())


@pytest.mark.parametrize("category", ML)
def test_specs_are_well_formed_and_varied(category):
    """Cheap structural checks over many seeds: limits the executor relies on, labels, variety."""
    specs = [generate(category, 3, i) for i in range(150)]
    for s in specs:
        assert s.category == category and s.difficulty in DIFFICULTIES
        tree = ast.parse(s.python_source)
        assert s.python_source.startswith("import warp as wp")
        kernels = [
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and any(ast.unparse(d) == "wp.kernel" for d in n.decorator_list)
        ]
        assert [k.name for k in kernels] == [s.kernel_name]
        assert [a.arg for a in kernels[0].args.args] == [a.name for a in s.args]
        assert math.prod(s.launch_dim) <= 256
        for a in s.args:
            assert math.prod(a.shape) * math.prod(DTYPES[a.dtype][1] or (1,)) <= 1024
        assert any(a.role in ("out", "inout") for a in s.args)
        if s.is_tiled:
            assert "wp.tile_load" in s.features and s.block_dim in (32, 64, 128)
            if "wp.tile_matmul" in s.features:
                assert "wp.config.enable_mathdx_gemm = False" in s.python_source
        else:
            assert not any(f.startswith("wp.tile") for f in s.features)
    # same (seed, index) -> same kernel
    assert generate(category, 3, 7) == specs[7]
    shapes = {canonical.shape_hash(s.python_source) for s in specs}
    assert len(shapes) >= 0.8 * len(specs), f"{category}: {len(shapes)} distinct shapes of {len(specs)}"
    tiers = Counter(s.difficulty for s in specs)
    assert len(tiers) >= 2, f"{category}: a single difficulty tier {dict(tiers)}"


# --------------------------------------------------------------------------- real pipeline


@pytest.fixture(scope="module")
def pipeline_specs():
    return [generate(c, PIPELINE_SEED, i) for c in ML for i in range(PER_CATEGORY)]


@pytest.mark.slow
def test_generated_kernels_compile_with_nvrtc(pipeline_specs):
    extracted = []
    for s in pipeline_specs:
        kernels = extract_kernels(s.python_source, block_dim=s.block_dim or DEFAULT_BLOCK_DIM)
        kernel = next(k for k in kernels if k.name == s.kernel_name)
        # a kernel that declares itself forward-only (no adjoint in Warp 1.19) ships no backward
        assert kernel.forward and bool(kernel.backward) != bool(forward_only_reason(s.python_source)), s.kernel_name
        extracted.append(kernel)
    results = compile_units(extracted)
    failed = [
        (s.category, s.kernel_name, r.log[:200]) for s, r in zip(pipeline_specs, results, strict=False) if not r.ok
    ]
    assert not failed


@pytest.mark.slow
def test_generated_kernels_run_and_match_numpy(pipeline_specs):
    results = execute_specs(pipeline_specs, reference_checks={})
    for s, r in zip(pipeline_specs, results, strict=False):
        assert r.ok, f"{s.category}/{s.kernel_name}: {r.reason} {r.detail}"
        if forward_only_reason(s.python_source):
            assert not r.input_grads, f"{s.category}/{s.kernel_name}: forward-only, yet gradients recorded"
        else:
            assert r.input_grads, f"{s.category}/{s.kernel_name}: no input gradients recorded"
        message = REFERENCE_CHECKS[s.category](s, r.inputs, r.outputs)
        assert message is None, f"{s.category}/{s.kernel_name}: {message}"


# --------------------------------------------------------------------------- wrong kernels

F32 = "float32"


def _a(name, shape, role="in", dtype=F32, domain=(-1.0, 1.0)):
    return ArgSpec(name, "array", dtype, shape, role, domain)


def _spec(category, name, body, args, launch, params, block_dim=None, header="import warp as wp\n\n"):
    return KernelSpec(
        category=category,
        kernel_name=name,
        python_source=header + body,
        args=tuple(args),
        launch_dim=launch,
        difficulty="basic",
        block_dim=block_dim,
        params=params,
    )


def _wrong_kernels() -> dict[str, KernelSpec]:
    """One buggy kernel per family, described by the params its family's check expects."""
    w = {}
    w["reduction"] = _spec(
        "reduction",
        "row_sum_skips_first",
        """@wp.kernel
def row_sum_skips_first(x: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    r = wp.tid()
    acc = float(0.0)
    for j in range(1, x.shape[1]):  # bug: element 0 is never added
        acc += x[r, j]
    out[r] = acc
""",
        [_a("x", (4, 16)), _a("out", (4,), "out")],
        (4,),
        {"op": "sum", "axis": 1, "view": [4, 16], "x": "x", "value_out": "out", "index_out": None, "init": False},
    )
    w["scan"] = _spec(
        "scan",
        "exclusive_scan_inclusive_bug",
        """@wp.kernel
def exclusive_scan_inclusive_bug(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    r = wp.tid()
    acc = float(0.0)
    for j in range(x.shape[1]):
        acc += x[r, j]
        out[r, j] = acc  # bug: exclusive scan must store before adding
""",
        [_a("x", (4, 16)), _a("out", (4, 16), "out")],
        (4,),
        {
            "op": "sum",
            "mode": "exclusive",
            "reverse": False,
            "axis": 1,
            "view": [4, 16],
            "term": "x",
            "x": "x",
            "w": None,
            "alpha": None,
            "out": "out",
            "strategy": "serial",
        },
    )
    lap_terms = [[[0, 0], -4.0], [[-1, 0], 1.0], [[1, 0], 1.0], [[0, -1], 1.0], [[0, 1], 1.0]]
    w["stencil"] = _spec(
        "stencil",
        "laplace_clamps_instead_of_wrapping",
        """@wp.kernel
def laplace_clamps_instead_of_wrapping(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    n = x.shape[0]
    m = x.shape[1]
    # bug: the spec says periodic boundaries, the kernel clamps
    out[i, j] = (x[wp.clamp(i - 1, 0, n - 1), j] + x[wp.clamp(i + 1, 0, n - 1), j]
                 + x[i, wp.clamp(j - 1, 0, m - 1)] + x[i, wp.clamp(j + 1, 0, m - 1)] - 4.0 * x[i, j])
""",
        [_a("x", (8, 8)), _a("out", (8, 8), "out")],
        (8, 8),
        {
            "dims": 2,
            "grid": [8, 8],
            "boundary": "wrap",
            "op": "laplace",
            "radius": 1,
            "update": "direct",
            "x": "x",
            "out": "out",
            "w": None,
            "alpha": None,
            "terms": lap_terms,
        },
    )
    w["gemm"] = _spec(
        "gemm",
        "gemm_transposed_b_bug",
        """@wp.kernel
def gemm_transposed_b_bug(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float), c: wp.array2d(dtype=float)):
    i, j = wp.tid()
    acc = float(0.0)
    for k in range(a.shape[1]):
        acc += a[i, k] * b[j, k]  # bug: B is (K, N), indexed as if transposed
    c[i, j] = acc
""",
        [_a("a", (8, 8)), _a("b", (8, 8)), _a("c", (8, 8), "out")],
        (8, 8),
        {
            "M": 8,
            "N": 8,
            "K": 8,
            "a": "a",
            "b": "b",
            "c": "c",
            "a_trans": False,
            "b_trans": False,
            "alpha": None,
            "beta": None,
            "bias": None,
            "bias_kind": "none",
            "act": None,
            "slope": 0.01,
            "residual": None,
            "strategy": "elem",
        },
    )
    w["softmax"] = _spec(
        "softmax",
        "softmax_without_max",
        """@wp.kernel
def softmax_without_max(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    r = wp.tid()
    s = float(0.0)
    for j in range(x.shape[1]):
        s += wp.exp(x[r, j])  # bug: no max subtraction, exp overflows float32
    for j in range(x.shape[1]):
        out[r, j] = wp.exp(x[r, j]) / s
""",
        [_a("x", (4, 16), domain=(-100.0, 100.0)), _a("out", (4, 16), "out")],
        (4,),
        {
            "op": "softmax",
            "temperature": None,
            "inv_temperature": False,
            "axis": 1,
            "view": [4, 16],
            "x": "x",
            "out": "out",
            "stats": {},
            "strategy": "three_pass",
        },
    )
    w["norm"] = _spec(
        "norm",
        "layernorm_unbiased_var",
        """@wp.kernel
def layernorm_unbiased_var(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    r = wp.tid()
    n = x.shape[1]
    s = float(0.0)
    for j in range(n):
        s += x[r, j]
    mean = s / float(n)
    v = float(0.0)
    for j in range(n):
        v += (x[r, j] - mean) * (x[r, j] - mean)
    rstd = 1.0 / wp.sqrt(v / float(n - 1) + 1.0e-5)  # bug: layer norm uses the biased variance
    for j in range(n):
        out[r, j] = (x[r, j] - mean) * rstd
""",
        [_a("x", (4, 8)), _a("out", (4, 8), "out")],
        (4,),
        {
            "variant": "layernorm",
            "eps": 1e-5,
            "eps_arg": None,
            "weight": None,
            "bias": None,
            "view": [4, 8],
            "x": "x",
            "out": "out",
            "mean_out": None,
            "rstd_out": None,
            "strategy": "two_pass",
        },
    )
    w["linear_act"] = _spec(
        "linear_act",
        "linear_gelu_sigmoid_approx",
        """@wp.kernel
def linear_gelu_sigmoid_approx(x: wp.array2d(dtype=float), w: wp.array2d(dtype=float), b: wp.array(dtype=float),
                               y: wp.array2d(dtype=float)):
    i, j = wp.tid()
    acc = b[j]
    for k in range(x.shape[1]):
        acc += x[i, k] * w[j, k]
    # bug: x * sigmoid(1.702 x) is not the erf GELU the spec promises
    y[i, j] = acc / (1.0 + wp.exp(-1.702 * acc))
""",
        [_a("x", (4, 16), domain=(-2.0, 2.0)), _a("w", (8, 16)), _a("b", (8,)), _a("y", (4, 8), "out")],
        (4, 8),
        {
            "M": 4,
            "N": 8,
            "K": 16,
            "a": "x",
            "b": "w",
            "c": "y",
            "a_trans": False,
            "b_trans": True,
            "alpha": None,
            "beta": None,
            "bias": "b",
            "bias_kind": "col",
            "act": "gelu_erf",
            "slope": 0.01,
            "residual": None,
            "strategy": "elem",
        },
    )
    w["attention"] = _spec(
        "attention",
        "attention_mask_missing",
        """@wp.kernel
def attention_mask_missing(q: wp.array2d(dtype=float), k: wp.array2d(dtype=float), v: wp.array2d(dtype=float),
                           out: wp.array2d(dtype=float)):
    i, d = wp.tid()
    s0 = float(0.0)
    for c in range(q.shape[1]):
        s0 += q[i, c] * k[0, c]
    s0 = s0 * 0.5
    m = s0
    for j in range(1, k.shape[0]):  # bug: a causal head must stop at key i
        s = float(0.0)
        for c in range(q.shape[1]):
            s += q[i, c] * k[j, c]
        m = wp.max(m, s * 0.5)
    l = wp.exp(s0 - m)
    acc = l * v[0, d]
    for j in range(1, k.shape[0]):
        s = float(0.0)
        for c in range(q.shape[1]):
            s += q[i, c] * k[j, c]
        p = wp.exp(s * 0.5 - m)
        l += p
        acc += p * v[j, d]
    out[i, d] = acc / l
""",
        [_a("q", (8, 4)), _a("k", (8, 4)), _a("v", (8, 4)), _a("out", (8, 4), "out")],
        (8, 4),
        {
            "S": 8,
            "Skv": 8,
            "D": 4,
            "Dv": 4,
            "causal": True,
            "scale": 0.5,
            "q": "q",
            "k": "k",
            "v": "v",
            "out": "out",
            "probs": None,
            "strategy": "two_pass",
        },
    )
    w["moe_routing"] = _spec(
        "moe_routing",
        "topk_gate_over_all_experts",
        """@wp.kernel
def topk_gate_over_all_experts(logits: wp.array2d(dtype=float), idx: wp.array2d(dtype=int),
                               gates: wp.array2d(dtype=float)):
    t = wp.tid()
    prev = float(1.0e30)
    for s in range(2):
        best = float(-1.0e30)
        bi = int(-1)
        for e in range(logits.shape[1]):
            v = logits[t, e]
            if v < prev and v > best:
                best = v
                bi = e
        idx[t, s] = bi
        prev = best
    m = logits[t, idx[t, 0]]
    z = float(0.0)
    for e in range(logits.shape[1]):
        z += wp.exp(logits[t, e] - m)  # bug: normalises over every expert, not the selected two
    for s in range(2):
        gates[t, s] = wp.exp(logits[t, idx[t, s]] - m) / z
""",
        [_a("logits", (8, 6), domain=(-3.0, 3.0)), _a("idx", (8, 2), "out", "int32"), _a("gates", (8, 2), "out")],
        (8,),
        {
            "T": 8,
            "E": 6,
            "k": 2,
            "logits": "logits",
            "router": None,
            "idx": "idx",
            "weights": "gates",
            "dense": None,
            "load": None,
            "scale": None,
            "strategy": "threshold/topk_softmax",
        },
    )
    return w


@pytest.fixture(scope="module")
def wrong_results():
    wrong = _wrong_kernels()
    results = execute_specs(list(wrong.values()), reference_checks={})
    return {c: (wrong[c], r) for c, r in zip(wrong, results, strict=False)}


@pytest.mark.slow
@pytest.mark.parametrize("category", ML)
def test_wrong_kernel_fails_its_numpy_check(category, wrong_results):
    spec, result = wrong_results[category]
    assert result.outputs, f"{category}: the wrong kernel did not run: {result.reason} {result.detail}"
    message = REFERENCE_CHECKS[category](spec, result.inputs, result.outputs)
    assert message, f"{category}: the reference check accepted a wrong kernel"
    # the same check accepts the right answer for these inputs (the kernel, not the check, is wrong)
    if category == "reduction":
        fixed = {"out": result.inputs["x"].astype(np.float64).sum(axis=1).astype(np.float32)}
        assert REFERENCE_CHECKS[category](spec, result.inputs, fixed) is None


def test_checks_accept_reference_and_reject_small_perturbations():
    """The tolerance separates float32 rounding from a real error (a 1% bias on one element)."""
    spec = generate("norm", 5, 0)
    rng = np.random.default_rng(0)
    p = spec.params
    inputs = {}
    for a in spec.args:
        if a.kind == "scalar":
            inputs[a.name] = a.domain[0] if a.dtype.startswith("int") else float(a.domain[0])
        else:
            inputs[a.name] = rng.uniform(*a.domain, size=a.shape).astype(DTYPES[a.dtype][0])
    x = inputs[p["x"]].astype(np.float64).reshape(p["view"])
    eps = float(inputs[p["eps_arg"]]) if p["eps_arg"] else p["eps"]
    xc = x - x.mean(axis=1, keepdims=True) if p["variant"] == "layernorm" else x
    var = (xc * xc).mean(axis=1, keepdims=True)
    y = xc / np.sqrt(var + eps)
    if p["weight"]:
        y = y * inputs[p["weight"]].astype(np.float64)
    if p["bias"]:
        y = y + inputs[p["bias"]].astype(np.float64)
    np_dtype = DTYPES[next(a.dtype for a in spec.args if a.name == p["out"])][0]  # as the kernel would store
    outputs = {p["out"]: y.astype(np_dtype).reshape(inputs[p["out"]].shape)}
    if p["mean_out"]:
        outputs[p["mean_out"]] = x.mean(axis=1).astype(np_dtype)
    if p["rstd_out"]:
        outputs[p["rstd_out"]] = (1.0 / np.sqrt(var[:, 0] + eps)).astype(np_dtype)
    check = REFERENCE_CHECKS["norm"]
    assert check(spec, inputs, outputs) is None
    bad = {k: v.copy() for k, v in outputs.items()}
    bad[p["out"]].reshape(-1)[3] *= 1.01
    assert check(spec, inputs, bad) is not None
