"""The six basic generators: the features they claim, determinism, spec limits, codegen,
and CPU execution of a sample (finite, non-constant outputs; finite gradients)."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cudagen_data.generators import generate
from cudagen_data.generators.basic import GENERATORS
from cudagen_data.generators.basic.features import wp_calls
from cudagen_data.spec import DIFFICULTIES, DTYPES

CATEGORIES = ("arithmetic", "vector", "matrix", "control_flow", "math", "atomic")
SEEDS = (0, 1, 7)
PER_SEED = 12  # kernels per (category, seed) for the structural checks
REPO = Path(__file__).resolve().parents[1]

SCALAR_MATH = {
    f"wp.{n}"
    for n in (
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "sinh",
        "cosh",
        "tanh",
        "exp",
        "log",
        "log2",
        "log10",
        "sqrt",
        "cbrt",
        "pow",
        "floor",
        "ceil",
        "round",
        "rint",
        "trunc",
        "frac",
        "min",
        "max",
        "clamp",
        "smoothstep",
        "lerp",
        "erf",
        "erfc",
        "erfinv",
        "erfcinv",
        "abs",
        "sign",
        "step",
        "copysign",
        "degrees",
        "radians",
        "nonzero",
    )
}
VECTOR_OPS = {
    f"wp.{n}"
    for n in (
        "dot",
        "cross",
        "length",
        "length_sq",
        "normalize",
        "cw_mul",
        "cw_div",
        "norm_l1",
        "norm_l2",
        "norm_huber",
        "norm_pseudo_huber",
        "smooth_normalize",
        "quat_rotate",
        "quat_rotate_inv",
        "transform_point",
        "transform_vector",
    )
}
MATRIX_OPS = {
    f"wp.{n}"
    for n in (
        "transpose",
        "determinant",
        "inverse",
        "outer",
        "trace",
        "ddot",
        "diag",
        "get_diag",
        "identity",
        "skew",
        "mul",
        "matrix_from_rows",
        "matrix_from_cols",
        "quat_to_matrix",
    )
}
CASTS = {f"wp.{n}" for n in ("float16", "float32", "float64", "int8", "uint8", "int16", "int32", "uint32", "int64")}
BIT_OPS = (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)


def _sample(category: str) -> list:
    return [generate(category, seed, i) for seed in SEEDS for i in range(PER_SEED)]


@pytest.fixture(scope="module")
def samples() -> dict[str, list]:
    return {c: _sample(c) for c in CATEGORIES}


def _kernel(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _array_params(kernel: ast.FunctionDef) -> set[str]:
    return {
        a.arg for a in kernel.args.args if a.annotation is not None and ast.unparse(a.annotation).startswith("wp.array")
    }


def _nodes(tree: ast.AST) -> list[ast.AST]:
    return list(ast.walk(tree))


# ----------------------------------------------------------------------------- registry
def test_registry_has_the_six_categories_in_order():
    assert tuple(GENERATORS) == CATEGORIES


# ----------------------------------------------------------------------------- features
def test_features_list_exactly_the_builtins_called(samples):
    for category, specs in samples.items():
        for spec in specs:
            called = wp_calls(ast.parse(spec.python_source))
            listed = [f for f in spec.features if f.startswith("wp.") and f != "wp.func"]
            assert listed == called, (category, spec.index)


def test_language_features_are_present_in_the_source(samples):
    checks = {
        "if": ast.If,
        "for": ast.For,
        "while": ast.While,
        "break": ast.Break,
        "continue": ast.Continue,
        "ternary": ast.IfExp,
        "struct": ast.ClassDef,
    }
    seen: Counter[str] = Counter()
    for specs in samples.values():
        for spec in specs:
            nodes = _nodes(ast.parse(spec.python_source))
            for feat, node_type in checks.items():
                has = any(isinstance(n, node_type) for n in nodes)
                assert (feat in spec.features) == has, (spec.category, spec.index, feat)
                seen[feat] += has
            if "wp.func" in spec.features:
                assert "@wp.func" in spec.python_source
    # the sample as a whole exercises every construct
    assert all(seen[f] > 0 for f in checks), seen


def test_arithmetic_uses_casts_and_integer_bit_operations(samples):
    with_cast = with_bits = 0
    for spec in samples["arithmetic"]:
        tree = ast.parse(spec.python_source)
        calls = set(wp_calls(tree))
        nodes = _nodes(tree)
        has_cast = bool(calls & CASTS) or any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("float", "int") for n in nodes
        )
        has_bits = (
            any(isinstance(n, ast.BinOp) and isinstance(n.op, BIT_OPS) for n in nodes)
            or any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Invert) for n in nodes)
            or any(
                c in calls
                for c in (
                    "wp.bit_and",
                    "wp.bit_or",
                    "wp.bit_xor",
                    "wp.lshift",
                    "wp.rshift",
                    "wp.invert",
                    "wp.bit_count",
                )
            )
        )
        assert any(isinstance(n, ast.BinOp) for n in nodes), spec.index
        with_cast += has_cast
        with_bits += has_bits
    n = len(samples["arithmetic"])
    assert with_cast >= 0.8 * n, with_cast
    assert with_bits >= 0.2 * n, with_bits


def test_vector_kernels_use_vector_types_and_operations(samples):
    for spec in samples["vector"]:
        calls = set(wp_calls(ast.parse(spec.python_source)))
        assert any(a.dtype.startswith(("vec", "quat")) for a in spec.args) or any(c.startswith("wp.vec") for c in calls)
        assert calls & (VECTOR_OPS | {"wp.vec2", "wp.vec3", "wp.vec4"}) or ".x" in spec.python_source, spec.index
    ops_used = Counter(c for spec in samples["vector"] for c in wp_calls(ast.parse(spec.python_source)))
    for op in ("wp.dot", "wp.cross", "wp.length", "wp.normalize"):
        assert ops_used[op] > 0, op


def test_matrix_kernels_use_matrix_types_and_operations(samples):
    mat_ops = Counter()
    for spec in samples["matrix"]:
        tree = ast.parse(spec.python_source)
        calls = set(wp_calls(tree))
        uses_mat = "wp.mat" in spec.python_source or calls & MATRIX_OPS
        has_matmul = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult) for n in _nodes(tree))
        assert uses_mat, spec.index
        mat_ops.update(calls & MATRIX_OPS)
        mat_ops["@"] += has_matmul
    for op in ("wp.transpose", "wp.determinant", "wp.inverse", "wp.outer", "@"):
        assert mat_ops[op] > 0, op


def test_control_flow_kernels_branch_or_loop(samples):
    for spec in samples["control_flow"]:
        nodes = _nodes(ast.parse(spec.python_source))
        assert any(isinstance(n, (ast.If, ast.For, ast.While, ast.IfExp)) for n in nodes) or "wp.where" in spec.features


def test_control_flow_branches_nested_in_loops_are_common():
    # a rate, so a sample large enough to measure it: about 24% of kernels (generator 8, 480
    # kernels), 22% (generator 9: kernels whose inputs reach no output are redrawn)
    specs = [generate("control_flow", seed, i) for seed in (0, 1, 7, 11) for i in range(30)]
    deep = sum(
        any(isinstance(n, (ast.For, ast.While)) and any(isinstance(m, ast.If) for m in ast.walk(n)) for n in nodes)
        for nodes in (_nodes(ast.parse(s.python_source)) for s in specs)
    )
    assert deep >= len(specs) // 5


def test_math_kernels_call_scalar_math_builtins(samples):
    used = Counter()
    for spec in samples["math"]:
        calls = set(wp_calls(ast.parse(spec.python_source)))
        assert calls & SCALAR_MATH, spec.index
        used.update(calls & SCALAR_MATH)
    assert len(used) >= 20, sorted(used)


def test_atomic_kernels_accumulate_across_threads(samples):
    kinds = Counter()
    for spec in samples["atomic"]:
        tree = ast.parse(spec.python_source)
        kernel = _kernel(tree, spec.kernel_name)
        arrays = _array_params(kernel)
        atomics = [
            n.func.attr
            for n in ast.walk(kernel)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("atomic_")
        ]
        augs = [
            n
            for n in ast.walk(kernel)
            if isinstance(n, ast.AugAssign)
            and isinstance(n.target, ast.Subscript)
            and isinstance(n.target.value, ast.Name)
            and n.target.value.id in arrays
        ]
        assert atomics or augs, spec.index
        assert "atomic" in spec.features
        kinds.update(atomics)
        kinds["augassign"] += bool(augs)
    for kind in ("atomic_add", "atomic_min", "atomic_max", "augassign"):
        assert kinds[kind] > 0, kinds


# ----------------------------------------------------------------------------- specs
def test_specs_respect_the_size_limits_and_contract(samples):
    for category, specs in samples.items():
        for spec in specs:
            assert spec.python_source.startswith("import warp as wp\n")
            assert f"def {spec.kernel_name}(" in spec.python_source
            assert spec.difficulty in DIFFICULTIES
            assert int(np.prod(spec.launch_dim)) <= 256
            kernel = _kernel(ast.parse(spec.python_source), spec.kernel_name)
            assert [a.arg for a in kernel.args.args] == [a.name for a in spec.args]
            assert any(a.role in ("out", "inout") for a in spec.args)
            for a in spec.args:
                if a.kind == "array":
                    comps = int(np.prod(DTYPES[a.dtype][1])) if DTYPES[a.dtype][1] else 1
                    assert int(np.prod(a.shape)) * comps <= 256, (category, spec.index, a)
                if DTYPES[a.dtype][0].startswith("uint"):
                    assert a.domain[0] >= 0


def test_every_tier_occurs_in_every_category(samples):
    for category, specs in samples.items():
        tiers = Counter(s.difficulty for s in specs)
        assert all(tiers[t] > 0 for t in DIFFICULTIES), (category, tiers)


# ----------------------------------------------------------------------------- determinism
def _digest(triples) -> str:
    h = hashlib.sha256()
    for category, seed, index in triples:
        spec = generate(category, seed, index)
        h.update(repr((spec.python_source, spec.args, spec.launch_dim, spec.difficulty, spec.features)).encode())
    return h.hexdigest()


TRIPLES = [(c, s, i) for c in CATEGORIES for s in (3, 2**40 + 5) for i in (0, 17)]


def test_same_triple_gives_the_same_spec():
    for category, seed, index in TRIPLES[:6]:
        assert generate(category, seed, index) == generate(category, seed, index)
    assert generate("math", 1, 2).python_source != generate("math", 1, 3).python_source


def test_generation_is_identical_in_another_process():
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.test_generators_basic import _digest, TRIPLES\n"
        "print(_digest(TRIPLES))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == _digest(TRIPLES)


# ----------------------------------------------------------------------------- codegen + execution
def test_sample_passes_warp_codegen():
    from cudagen_data.extract import extract_kernels

    for category in CATEGORIES:
        for i in range(4):
            spec = generate(category, 11, i)
            kernels = extract_kernels(spec.python_source)
            assert [k.name for k in kernels] == [spec.kernel_name]
            assert kernels[0].forward
            # a backward exactly where the kernel is not declared forward-only
            assert bool(kernels[0].backward) == ('"enable_backward": False' not in spec.python_source)


def test_sample_runs_on_cpu_with_finite_varying_outputs_and_gradients():
    from cudagen_data.execution import execute_specs

    specs = [generate(category, 5, i) for category in CATEGORIES for i in range(3)]
    with contextlib.redirect_stderr(io.StringIO()):
        results = execute_specs(specs)
    failures = [(s.category, s.index, r.reason, r.detail) for s, r in zip(specs, results, strict=False) if not r.ok]
    assert not failures
    for spec, result in zip(specs, results, strict=False):
        for a in spec.args:
            if a.kind == "array" and a.role != "in":
                out = result.outputs[a.name]
                assert np.all(np.isfinite(out))
        for grad in result.input_grads.values():
            assert np.all(np.isfinite(grad))
        # gradients were really computed for float inputs (unless the kernel is forward-only)
        if (
            "while" not in spec.features
            and "forward_only" not in spec.features
            and any(a.role == "in" and a.kind == "array" and DTYPES[a.dtype][0].startswith("float") for a in spec.args)
        ):
            assert result.input_grads


# ----------------------------------------------------------------------------- the typed core
def _leaf(text: str, t, lo: float, hi: float):
    from cudagen_data.generators.basic.expr import Expr
    from cudagen_data.generators.basic.interval import Interval

    vals = np.linspace(lo, hi, 12).reshape((12,) + (1,) * len(t.shape)) * np.ones(t.shape)
    return Expr(text, t, Interval(lo, hi), vals=vals)


def test_core_rejects_ill_typed_and_ill_posed_operations():
    from cudagen_data.generators.basic import ops
    from cudagen_data.generators.basic.wtypes import F32, F64, I32, mat, vec

    x = _leaf("x", F32, -1.0, 1.0)
    assert ops.add(x, _leaf("y", F64, -1.0, 1.0)) is None  # Warp does not promote float32 + float64
    assert ops.add(x, _leaf("n", I32, 0, 4)) is None
    assert ops.unary("sqrt", x) is None and ops.unary("log", x) is None  # argument may be <= 0
    assert ops.div(x, x) is None and ops.div(_leaf("y", F32, 0.0, 1.0), x) is None  # denominator may be 0
    assert ops.unary("asin", _leaf("z", F32, -2.0, 2.0)) is None
    assert ops.unary("exp", _leaf("big", F32, 0.0, 100.0)) is None  # would overflow float32
    assert ops.sub(x, x) is None  # x - x is a constant
    m = _leaf("m", mat(3), -1.0, 1.0)
    assert ops.inverse(m) is None  # no lower bound on |det|
    dominant = ops.add_diagonal(m, _leaf("c", F32, 4.0, 5.0), style="eye_left")
    assert dominant is not None and ops.inverse(dominant) is not None
    assert ops.normalize(_leaf("v", vec(3), -1.0, 1.0)) is None  # may be the zero vector


def test_core_intervals_contain_the_sample_values():
    from cudagen_data.generators.basic import ops
    from cudagen_data.generators.basic.wtypes import F32

    x = _leaf("x", F32, -2.0, 3.0)
    y = _leaf("y", F32, 0.5, 2.0)
    exprs = [
        ops.mul(x, y),
        ops.div(x, y),
        ops.unary("exp", x),
        ops.unary("sqrt", y),
        ops.unary("tanh", x),
        ops.power(y, _leaf("p", F32, -1.5, 2.5)),
        ops.binary_fn("atan2", x, y),
        ops.unary("floor", x),
    ]
    for e in exprs:
        assert e is not None
        assert np.all(e.vals >= e.iv.lo - 1e-9) and np.all(e.vals <= e.iv.hi + 1e-9), e.text
