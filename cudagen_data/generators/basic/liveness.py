"""Which names reach a kernel's outputs: a backward liveness pass over the generated source.

A generated statement may compute something nothing stores (``delta = scores[i]`` then
``delta = p``; a local read only by another dead local; a histogram that bins a leaf and
ignores the locals computed before it).  An argument read only by such statements is an
argument that reaches no output.  :func:`live_arguments` finds the names whose values can
reach an output write (``out[i] = ...``, ``out[i] += ...``, ``wp.atomic_*(out, ...)``):

- straight-line code is walked backwards: ``x = e`` makes ``e``'s reads live only if ``x``
  is live after it, and kills ``x`` (an earlier value of ``x`` is dead); ``x += e``,
  ``v[k] = e`` and ``s.f = e`` read the old value too;
- a branch's condition is live if either branch does something that matters (a live
  assignment, an output write, ``return``/``break``/``continue``); a loop is iterated to a
  fixpoint, and its range (or condition) is live if its body does something that matters;
- a helper ``@wp.func`` reads only the arguments whose parameters reach its ``return``;
- ``a.shape`` reads the array's extent, not its values.

It is conservative where values decide (a branch that never runs, ``x - x``): a name it
calls dead is dead for every input; a name it calls live may still not matter.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

_EFFECT_CALL_PREFIX = ("atomic_", "tile_store", "tile_atomic")


@dataclass(frozen=True)
class _Ctx:
    outputs: frozenset[str]
    helpers: dict[str, tuple[bool, ...]]  # helper name -> which parameters reach its return
    in_helper: bool = False
    after_loop: frozenset[str] = frozenset()  # live at ``break``
    loop_head: frozenset[str] = frozenset()  # live at ``continue``


def live_arguments(source: str, kernel_name: str, outputs: set[str] | frozenset[str]) -> set[str]:
    """Names live at the entry of ``kernel_name`` in ``source`` (its arguments among them)
    when ``outputs`` (the arrays it writes) are what matters."""
    tree = ast.parse(source)
    helpers: dict[str, tuple[bool, ...]] = {}
    kernel = None
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        if node.name == kernel_name:
            kernel = node
            continue
        params = [a.arg for a in node.args.args]
        ctx = _Ctx(frozenset(), dict(helpers), in_helper=True)
        live, _ = _block(node.body, frozenset(), ctx)
        helpers[node.name] = tuple(p in live for p in params)
    if kernel is None:
        raise ValueError(f"no function {kernel_name!r} in the source")
    live, _ = _block(kernel.body, frozenset(), _Ctx(frozenset(outputs), helpers))
    return set(live)


def _block(stmts: list[ast.stmt], live: frozenset[str], ctx: _Ctx) -> tuple[frozenset[str], bool]:
    """(names live before ``stmts``, whether they do anything that matters) given ``live`` after."""
    effect = False
    for stmt in reversed(stmts):
        live, e = _stmt(stmt, live, ctx)
        effect = effect or e
    return live, effect


def _stmt(s: ast.stmt, live: frozenset[str], ctx: _Ctx) -> tuple[frozenset[str], bool]:
    if isinstance(s, ast.Assign):
        for target in s.targets:
            live, e = _assign(target, s.value, live, ctx, augmented=False)
        return live, e
    if isinstance(s, ast.AnnAssign) and s.value is not None:
        return _assign(s.target, s.value, live, ctx, augmented=False)
    if isinstance(s, ast.AugAssign):
        return _assign(s.target, s.value, live, ctx, augmented=True)
    if isinstance(s, ast.Expr):
        call = s.value
        if isinstance(call, ast.Call) and _writes_output(call, ctx):
            return live | _reads(call, ctx), True
        return live, False
    if isinstance(s, ast.Return):
        if ctx.in_helper:
            return _reads(s.value, ctx) if s.value is not None else frozenset(), True
        return frozenset(), True
    if isinstance(s, ast.Break):
        return ctx.after_loop, True
    if isinstance(s, ast.Continue):
        return ctx.loop_head, True
    if isinstance(s, ast.If):
        then_live, then_eff = _block(s.body, live, ctx)
        else_live, else_eff = _block(s.orelse, live, ctx)
        out = then_live | else_live
        if then_eff or else_eff:
            return out | _reads(s.test, ctx), True
        return out, False
    if isinstance(s, ast.For):
        bound = _names_bound(s.target)
        head, eff = _loop(s.body, live, ctx, frozenset())
        head = head - bound
        return (head | _reads(s.iter, ctx), True) if eff else (head, False)
    if isinstance(s, ast.While):
        test_reads = _reads(s.test, ctx)
        head, eff = _loop(s.body, live, ctx, test_reads)
        return (head | test_reads, True) if eff else (head, False)
    # anything else (pass, a docstring): reads everything it mentions, to stay conservative
    return live | _reads(s, ctx), False


def _loop(body: list[ast.stmt], after: frozenset[str], ctx: _Ctx, test_reads: frozenset[str]):
    """Names live at a loop's head (fixpoint over the back edge) and whether the body matters."""
    head = after
    eff = False
    for _ in range(64):
        inner = _Ctx(ctx.outputs, ctx.helpers, ctx.in_helper, after_loop=after, loop_head=head)
        body_live, eff = _block(body, head, inner)
        new = after | body_live | (test_reads if eff else frozenset())
        if new == head:
            break
        head = new
    return head, eff


def _assign(target: ast.expr, value: ast.expr, live: frozenset[str], ctx: _Ctx, augmented: bool):
    if isinstance(target, ast.Name):
        if target.id not in live:
            return live, False
        rest = live if augmented else live - {target.id}
        return rest | _reads(value, ctx), True
    if isinstance(target, ast.Tuple | ast.List):
        names = _names_bound(target)
        if not names & live:
            return live, False
        return (live - names) | _reads(value, ctx), True
    base = _base_name(target)
    if base is not None and base in ctx.outputs:  # out[i] = e, out[i] += e
        return live | _reads(target, ctx) | _reads(value, ctx), True
    if base is not None and base in live:  # v[k] = e, s.f = e: the rest of the old value stays
        return live | _reads(target, ctx) | _reads(value, ctx), True
    return live, False


def _base_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _names_bound(target: ast.expr) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(target) if isinstance(n, ast.Name))


def _writes_output(call: ast.Call, ctx: _Ctx) -> bool:
    """``wp.atomic_add(out, ...)`` and its kin, on an output array."""
    fn = call.func
    if not (isinstance(fn, ast.Attribute) and fn.attr.startswith(_EFFECT_CALL_PREFIX)):
        return False
    return bool(call.args) and _base_name(call.args[0]) in ctx.outputs


def _reads(node: ast.AST | None, ctx: _Ctx) -> frozenset[str]:
    out: set[str] = set()
    _collect(node, ctx, out)
    return frozenset(out)


def _collect(node: ast.AST | None, ctx: _Ctx, out: set[str]) -> None:
    if node is None:
        return
    if isinstance(node, ast.Name):
        out.add(node.id)
        return
    if isinstance(node, ast.Attribute):
        if node.attr == "shape":  # an extent, not the array's values
            return
        _collect(node.value, ctx, out)
        return
    if isinstance(node, ast.Call):
        fn = node.func
        used = ctx.helpers.get(fn.id) if isinstance(fn, ast.Name) else None
        if not isinstance(fn, ast.Name):
            _collect(fn, ctx, out)
        for k, arg in enumerate(node.args):
            if used is None or k >= len(used) or used[k]:
                _collect(arg, ctx, out)
        for kw in node.keywords:
            _collect(kw.value, ctx, out)
        return
    for child in ast.iter_child_nodes(node):
        _collect(child, ctx, out)
