"""Basic generators emit no argument that reaches no output (issue #23, unused_args).

Each check is run on the wrong thing it must catch:

- liveness.py (the generators' static check, Frame.outputs_ok): a dead store, a local
  read only by dead code, a helper that ignores a parameter, an extent read through
  ``.shape``; and it agrees with the runtime judge (inputs_matter.py) on a real run;
- Expr.collapsed: ``c % wp.max(b, 1)`` with ``c`` a multiple of ``b``, a ``wp.where`` whose
  condition never changes, a ``wp.max`` whose one side always wins, a sum that cancels;
  a production that builds one is refused;
- updates: ``x += x * -1.0`` (self-cancelling), ``x = e`` over a value nothing read (a dead
  store), ``for s in range(rounds): arg = q`` (an idempotent loop body);
- probe worlds (numeric.PROBES): an input whose redraw changes no output on the sample
  threads (``a[i] + 0.0 * b[i]``, which no static check sees) makes the generator redraw;
- generated kernels of every basic category have none of these.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re

import numpy as np
import pytest

from cudagen_data.execution import execute_specs
from cudagen_data.generators import generate
from cudagen_data.generators.basic import arithmetic, ops
from cudagen_data.generators.basic import numeric as nm
from cudagen_data.generators.basic.builder import KernelBuilder
from cudagen_data.generators.basic.expr import Expr, const
from cudagen_data.generators.basic.exprgen import ExprGen
from cudagen_data.generators.basic.frame import standard_frame
from cudagen_data.generators.basic.interval import Interval
from cudagen_data.generators.basic.liveness import live_arguments
from cudagen_data.generators.basic.stmts import _cancels
from cudagen_data.generators.basic.wtypes import F32, I32
from cudagen_data.spec import ArgSpec, KernelSpec

CATEGORIES = ("arithmetic", "vector", "matrix", "control_flow", "math", "atomic")


def _live(body: str, outputs=("out",), helpers: str = "") -> set[str]:
    src = f"import warp as wp\n{helpers}\n@wp.kernel\ndef k(x: wp.array(dtype=float)):\n{body}"
    return live_arguments(src, "k", set(outputs))


# ----------------------------------------------------------------------------- liveness


def test_a_dead_store_kills_what_the_first_value_read():
    live = _live("    i = wp.tid()\n    d = scores[i]\n    d = p[i]\n    out[i] = d\n")
    assert "p" in live and "scores" not in live


def test_a_local_read_only_by_dead_code_is_dead():
    live = _live("    i = wp.tid()\n    a = x[i]\n    b = a * 2.0\n    out[i] = y[i]\n")
    assert "y" in live and "x" not in live and "a" not in live


def test_updates_read_the_old_value_and_conditions_and_trip_counts_count():
    live = _live(
        "    i = wp.tid()\n"
        "    acc = x[i]\n"
        "    for s in range(rounds):\n"
        "        if z[i] > 0.5:\n"
        "            break\n"
        "        acc += w[i]\n"
        "    if c[i] > 0.0:\n"
        "        out[i] = acc\n"
    )
    assert {"x", "rounds", "z", "w", "c"} <= live


def test_a_helper_reads_only_the_parameters_that_reach_its_return():
    helpers = "@wp.func\ndef f(a: float, b: float) -> float:\n    t = b * 2.0\n    return a + 1.0\n"
    live = _live("    i = wp.tid()\n    out[i] = f(x[i], q[i])\n", helpers=helpers)
    assert "x" in live and "q" not in live


def test_an_extent_read_through_shape_is_not_a_read_of_the_values():
    live = _live("    i = wp.tid()\n    out[i] = float(x.shape[0]) + y[i]\n")
    assert "y" in live and "x" not in live


def test_atomics_and_element_updates_write_outputs():
    live = _live("    i = wp.tid()\n    wp.atomic_add(acc, 0, v[i])\n    out[i] += u[i]\n", outputs=("acc", "out"))
    assert {"v", "u"} <= live


def test_the_static_verdict_agrees_with_the_runtime_judge():
    """A kernel whose argument ``scores`` is overwritten before it is read: the static check
    calls it dead, and running the kernel on fresh values of it changes no output."""
    source = (
        "import warp as wp\n\n@wp.kernel\n"
        "def relax(phase: wp.array(dtype=float), scores: wp.array(dtype=float), out: wp.array(dtype=float)):\n"
        "    i = wp.tid()\n    p = phase[i]\n    d = scores[i]\n    d = p * 2.0\n    out[i] = wp.sin(d)\n"
    )
    args = (
        ArgSpec("phase", "array", "float32", (32,), "in", (-1.0, 1.0)),
        ArgSpec("scores", "array", "float32", (32,), "in", (-1.0, 1.0)),
        ArgSpec("out", "array", "float32", (32,), "out", (0.0, 0.0)),
    )
    spec = KernelSpec("arithmetic", "relax", source, args, (32,), "basic")
    assert {"phase", "scores"} - live_arguments(source, "relax", {"out"}) == {"scores"}
    with contextlib.redirect_stderr(io.StringIO()):
        (run,) = execute_specs([spec], probe_inputs=True)
    assert run.ok and run.unused_args == ["scores"]


# ----------------------------------------------------------------------------- collapse


def _ints(text: str, vals) -> Expr:
    vals = np.asarray(vals, dtype=float)
    return Expr(text, I32, Interval(float(vals.min()), float(vals.max())), vals=vals)


def _floats(text: str, vals) -> Expr:
    vals = np.asarray(vals, dtype=float)
    return Expr(text, F32, Interval(float(vals.min()), float(vals.max())), vals=vals)


def test_an_expression_that_turns_inputs_into_a_constant_is_collapsed():
    b = _ints("b", np.arange(1, 13))
    cnt = ops.add(b, ops.mul(b, b))  # cnt += cnt * cnt with cnt = b: b (b + 1)
    key = ops.int_div("%", cnt, b)  # always 0
    assert key is not None and key.collapsed
    assert not ops.int_div("%", cnt, const(I32, 5)).collapsed
    # the collapse carries up through what is built on it
    assert ops.add(_floats("y", np.linspace(0, 1, 12)), ops.cast(key, F32)).collapsed


def test_a_side_that_never_decides_is_collapsed():
    x = _floats("x", np.linspace(-1.0, 1.0, 12))
    big = _floats("g", np.linspace(5.0, 6.0, 12))
    small = _floats("s", np.linspace(0.0, 0.5, 12))
    assert ops.binary_fn("max", big, small).collapsed  # wp.max(g, s): s never wins
    assert not ops.binary_fn("max", x, small).collapsed
    always = ops.comparison("<", x, const(F32, 5.0))
    assert ops.where(always, x, small).collapsed  # the else side is never taken
    splits = ops.comparison("<", x, const(F32, 0.0))
    assert not ops.where(splits, x, small).collapsed


def test_a_sum_that_cancels_its_parts_is_collapsed():
    k = _ints("k", np.arange(12) * 7)
    p = _ints("p", np.arange(12) % 2)
    assert ops.sub(k, ops.sub(k, p)).collapsed  # k - (k - p): k is gone
    assert not ops.add(k, p).collapsed


def _gen_with(production) -> ExprGen:
    kb = KernelBuilder(np.random.default_rng(0))
    gen = ExprGen(kb, {"test": 1.0})
    gen.productions = [("test", "test", lambda t: True, production)]
    return gen


def test_a_production_that_collapses_is_refused():
    b = _ints("b", np.arange(1, 13))
    collapsed = ops.int_div("%", ops.add(b, ops.mul(b, b)), b)
    healthy = ops.add(b, const(I32, 3))
    assert _gen_with(lambda g, t, d: collapsed).production(I32, 1) is None
    assert _gen_with(lambda g, t, d: healthy).production(I32, 1).text == "b + 3"


# ----------------------------------------------------------------------------- probe worlds


def _frame_writing(text_of, vals_of):
    """A frame with inputs a, b and one output written from ``text_of(a, b)`` whose sample
    values are ``vals_of(a, b)`` (Exprs of the thread's elements)."""
    f = standard_frame(
        np.random.default_rng(3), "arithmetic", arithmetic.PROFILE, (F32,), (F32,), dims=(1,), n_in=(2, 2), n_out=(1, 1)
    )
    a, b = [f.kb.element(x) for x in f.kb.args if x.role == "in"]
    (out,) = f.body.outputs
    f.kb.emit(f"{out.name}[{f.kb.center}] = {text_of(a, b)}")
    f.body.out_vals[out.name] = f.kb.full(vals_of(a, b))
    return f


def test_an_input_whose_redraw_changes_no_output_is_caught():
    blind = _frame_writing(lambda a, b: f"{a.text} + 0.0 * {b.text}", lambda a, b: a.vals + 0.0 * b.vals)
    b_name = blind.kb.args[1].name
    assert blind.dead_inputs() == []  # the static check reads b in the text
    assert blind.unread_on_samples() == [b_name] and not blind.outputs_ok()
    both = _frame_writing(lambda a, b: f"{a.text} + {b.text}", lambda a, b: a.vals + b.vals)
    assert both.unread_on_samples() == [] and both.outputs_ok()


def test_probe_worlds_redraw_one_input_and_choices_read_the_independent_draws():
    f = _frame_writing(lambda a, b: a.text, lambda a, b: a.vals)
    a, b = [x for x in f.kb.args if x.role == "in"]
    assert a.probe != b.probe and a.data.shape[0] == nm.TOTAL
    for w in range(nm.WORLDS, nm.TOTAL):
        assert np.array_equal(a.data[w], a.data[0]) == (w != nm.WORLDS + a.probe)
    x = f.kb.element(a)
    assert nm.draws(x.vals).shape[0] == x.vals.shape[0] // nm.TOTAL * nm.WORLDS


# ----------------------------------------------------------------------------- updates


def test_an_update_that_cancels_the_old_value_is_caught():
    x = _floats("rhs", np.linspace(-1.0, 1.0, 12))
    assert _cancels(x, x.vals + x.vals * -1.0)  # rhs += rhs * -1.0
    n = _ints("n", np.arange(12))
    assert _cancels(n, n.vals + (4 - n.vals))  # n += 4 - n
    assert not _cancels(x, x.vals + 0.5)


def _samples() -> list[KernelSpec]:
    return [generate(c, seed, i) for c in CATEGORIES for seed in (0, 3) for i in range(15)]


@pytest.fixture(scope="module")
def samples() -> list[KernelSpec]:
    return _samples()


def _kernel(spec: KernelSpec) -> ast.FunctionDef:
    tree = ast.parse(spec.python_source)
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == spec.kernel_name)


def test_generated_kernels_have_no_input_that_reaches_no_output(samples):
    for spec in samples:
        outputs = {a.name for a in spec.args if a.kind == "array" and a.role != "in"}
        live = live_arguments(spec.python_source, spec.kernel_name, outputs)
        dead = [a.name for a in spec.args if a.role == "in" and a.name not in live]
        assert not dead, (spec.category, spec.index, dead, spec.python_source)


def test_an_accumulation_does_not_read_the_variable_it_updates():
    """``x += e`` / ``x -= e`` with ``e`` reading ``x`` can cancel what ``x`` held (``x += x * -1.0``):
    BodyGen's accumulation never builds ``e`` from ``x``."""
    for seed in range(40):
        f = standard_frame(np.random.default_rng(seed), "arithmetic", arithmetic.PROFILE, (F32,), (F32,), dims=(1,))
        x = f.kb.declare("local", f.kb.element(f.kb.args[0]))
        f.body._accumulate(f.kb.vars[x.text], "+=", 2, 1)
        m = re.match(rf"\s*{x.text} [+-]= (.*)$", f.kb.lines[-1])
        if m:  # (else it fell back to a re-assignment)
            assert not re.search(rf"(?<![\w.]){x.text}\b", m.group(1)), f.kb.lines[-1]


def idempotent_loop_sets(kernel: ast.FunctionDef) -> list[str]:
    """Loop-carried variables a ``for`` body sets (``x = e``, ``x = wp.max(x, e)``) to a value
    that reads neither the loop variable nor a local of the body: the trip count then
    reaches nothing.  (Generated names are unique in a module, so a name stored outside
    the loop is the loop-carried variable.)"""
    found = []
    for loop in [n for n in ast.walk(kernel) if isinstance(n, ast.For)]:
        inside = {id(n) for n in ast.walk(loop)}
        stored_outside = {
            n.id
            for n in ast.walk(kernel)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and id(n) not in inside
        }
        stored_inside = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        moving = (stored_inside - stored_outside) | {loop.target.id}
        for stmt in _own_statements(loop):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                value = stmt.value
                if _min_max_of(value, name):  # x = wp.max(x, e): idempotent unless e moves
                    value = next(a for a in value.args if not (isinstance(a, ast.Name) and a.id == name))
                reads = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
                if name in stored_outside and name not in reads and not reads & moving:
                    found.append(ast.unparse(stmt))
    return found


def _min_max_of(value: ast.expr, name: str) -> bool:
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("min", "max")
        and len(value.args) == 2
        and any(isinstance(a, ast.Name) and a.id == name for a in value.args)
    )


def _own_statements(loop: ast.For) -> list[ast.stmt]:
    """The statements of a loop's body, in branches too, but not in loops nested in it."""
    out, todo = [], list(loop.body)
    while todo:
        s = todo.pop()
        out.append(s)
        if isinstance(s, ast.If):
            todo += s.body + s.orelse
    return out


def test_the_idempotent_loop_check_catches_a_loop_invariant_set():
    kernel = _kernel_of(
        "@wp.kernel\ndef k(q: float, rounds: int, out: wp.array(dtype=wp.float64)):\n"
        "    i = wp.tid()\n    arg = wp.float64(0.0)\n"
        "    for s in range(rounds):\n        arg = wp.float64(q)\n    out[i] = arg\n"
    )
    assert idempotent_loop_sets(kernel) == ["arg = wp.float64(q)"]
    moving = _kernel_of(
        "@wp.kernel\ndef k(q: wp.array(dtype=float), rounds: int, out: wp.array(dtype=float)):\n"
        "    i = wp.tid()\n    arg = float(0.0)\n"
        "    for s in range(rounds):\n        v = q[(i + s) % q.shape[0]]\n        arg = wp.max(arg, v)\n"
        "    out[i] = arg\n"
    )
    assert idempotent_loop_sets(moving) == []


def _kernel_of(source: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))


def test_generated_loops_do_not_set_a_loop_invariant_value(samples):
    for spec in samples:
        assert not idempotent_loop_sets(_kernel(spec)), (spec.category, spec.index, spec.python_source)
