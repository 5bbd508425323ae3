"""Keep generated kernels inside what Warp 1.19 differentiates correctly.

Two decisions per generated kernel, from its source and argument specs alone:

- *not differentiable by nature* (no float input array, no float output array, a
  ``while`` loop, ``atomic_min``/``atomic_max`` into an in/out accumulator, a builtin
  without an adjoint such as tile scans, tile max/min/reduce, argmax, ``frac``): the
  kernel becomes an explicit forward-only row, ``wp.set_module_options({"enable_backward":
  False})`` in its source, so Warp emits no backward and ``cuda_backward`` is honestly empty;
- *differentiable, but in a form Warp's adjoint gets wrong* (DESIGN.md, "What Warp 1.19
  differentiates wrongly"): a dynamic ``for`` loop whose trip count depends on the
  thread (Warp 1.19 drops such a loop's adjoint: the gradient through it is zero), a
  value carried by a dynamic ``for`` loop and used after it other than by a plain store,
  a recurrence inside a dynamic loop that is not a plain sum, writing a vector/matrix
  component twice, reading an output array before the kernel overwrites it.  The
  generator draws again (same rng stream, so still a function of the seed); a kernel
  whose trip count still depends on the thread after the redraws is declared
  forward-only (generators/__init__.py); for the other hazards the row-level gradient
  check is the safety net behind this prediction.

A loop is *dynamic* unless its bounds are literals or ``wp.constant`` values and it runs
at most ``MAX_UNROLL`` times (Warp unrolls those, and unrolled code differentiates
correctly).
"""

from __future__ import annotations

import ast
import dataclasses
import threading

from ..astwalk import walk
from ..spec import KernelSpec, is_float_dtype

MAX_UNROLL = 16  # warp.config.max_unroll in Warp 1.19
FORWARD_ONLY_LINE = 'wp.set_module_options({"enable_backward": False})'

# Builtins whose adjoint is missing, so any gradient through them is wrong.  (tile_max
# and tile_min lack adjoints too, but kernels often use them where the gradient through
# them is zero, as the max shift of a softmax: the gradient check decides those, and
# tile_reduce; tile_full of a computed value is an adjoint hazard: drawn again.)
NO_ADJOINT = (
    "tile_scan_inclusive",
    "tile_scan_exclusive",
    "tile_scan_max_inclusive",  # is_differentiable=False in Warp 1.19 (found by the issue #26 audit)
    "tile_scan_min_inclusive",
    "tile_argmax",
    "tile_argmin",
    "frac",
)


_memo = threading.local()  # .walks: set during one adjoint_hazard call (per thread)


def _walk(node: ast.AST) -> list[ast.AST]:
    """``ast.walk(node)`` as a list; within :func:`adjoint_hazard`, which walks the same
    subtrees many times over (each statement of a nested block once per enclosing block),
    remembered per node: the same nodes in the same order, computed once.  The memo holds
    the node itself, so its id cannot be reused by another node while the memo lives."""
    walks = getattr(_memo, "walks", None)
    if walks is None:
        return walk(node)
    got = walks.get(id(node))
    if got is None:
        got = walks[id(node)] = (node, walk(node))
    return got[1]


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _base(node: ast.AST) -> str:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def forward_only_cause(spec: KernelSpec) -> str | None:
    """Why ``spec``'s kernel has no meaningful gradient (None: it has one)."""
    ins = [a for a in spec.args if a.kind == "array" and a.role != "out" and is_float_dtype(a.dtype)]
    outs = [a for a in spec.args if a.kind == "array" and a.role != "in" and is_float_dtype(a.dtype)]
    if not ins:
        return "no float input array"
    if not outs:
        return "no float output array"
    tree = ast.parse(spec.python_source)
    inout = {a.name for a in spec.args if a.role == "inout"}
    for node in walk(tree):
        if isinstance(node, ast.While):
            return "while loop"
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in ("atomic_min", "atomic_max") and node.args and _base(node.args[0]) in inout:
                return f"wp.{name} into an in/out array"
            if name in NO_ADJOINT:
                return f"wp.{name} has no adjoint"
    return None


def adjoint_hazard(spec: KernelSpec) -> str | None:
    """The first construct in ``spec`` that Warp 1.19 differentiates wrongly, or None."""
    _memo.walks = {}
    try:
        return _adjoint_hazard(spec)
    finally:
        _memo.walks = None


def _adjoint_hazard(spec: KernelSpec) -> str | None:
    tree = ast.parse(spec.python_source)
    for node in _walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "tile_full" and not _constant_value(node):
            return "wp.tile_full of a computed value has no adjoint"
        if (
            isinstance(node, ast.Call)
            and _name(node.func) == "tile_load"
            and node.args
            and {"out", "inout"} & {roles_of(spec).get(_base(node.args[0]), "")}
        ):
            if any(
                isinstance(n, ast.Call)
                and _name(n.func) == "tile_store"
                and n.args
                and _base(n.args[0]) == _base(node.args[0])
                for n in _walk(tree)
            ):
                return f"reads output array {_base(node.args[0])!r} before overwriting it"
    consts = _constants(tree)
    roles = roles_of(spec)
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        body = _Body(consts, roles)
        body.float_arrays = {a.name for a in spec.args if a.kind == "array" and is_float_dtype(a.dtype)}
        # by-value scalars: Warp's backward keeps their adjoints local, so a wrong one is
        # never shipped
        body.scalars |= {a.name for a in spec.args if a.kind == "scalar"}
        hazard = body.function(fn)
        if hazard:
            return hazard
    return None


def roles_of(spec: KernelSpec) -> dict[str, str]:
    return {a.name: a.role for a in spec.args}


def _constant_value(call: ast.Call) -> bool:
    value = next((kw.value for kw in call.keywords if kw.arg == "value"), call.args[1] if len(call.args) > 1 else None)
    if isinstance(value, ast.Call) and len(value.args) == 1:  # wp.float32(0.0)
        value = value.args[0]
    return value is None or isinstance(value, ast.Constant)


def _constants(tree: ast.Module) -> dict[str, int]:
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and _name(stmt.value.func) == "constant":
            arg = stmt.value.args[0] if stmt.value.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, int):
                out.update({t.id: arg.value for t in stmt.targets if isinstance(t, ast.Name)})
    return out


class _Body:
    def __init__(self, consts: dict[str, int], roles: dict[str, str]):
        self.consts = consts
        self.roles = roles
        self.scalars = set(consts)

    def _int(self, node: ast.AST) -> int | None:
        """The value of a loop bound Warp 1.19 treats as known at code generation: an
        int literal (optionally negated) or a ``wp.constant`` name.  Arithmetic on them
        (``N - 1``, ``16 // TK``) is not folded: such a loop is dynamic."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return self.consts.get(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            v = self._int(node.operand)
            return None if v is None else -v
        return None

    def dynamic(self, loop: ast.For) -> bool:
        if not (isinstance(loop.iter, ast.Call) and _name(loop.iter.func) == "range"):
            return True
        bounds = [self._int(a) for a in loop.iter.args]
        if any(b is None for b in bounds):
            return True
        start, stop, step = (
            (0, bounds[0], 1) if len(bounds) == 1 else (*bounds[:2], bounds[2] if len(bounds) > 2 else 1)
        )
        return not step or len(range(start, stop, step)) > MAX_UNROLL

    def function(self, fn: ast.FunctionDef) -> str | None:
        self.ints = _int_names(fn)
        self.uniform = _uniform_names(fn, self.scalars)
        self.params = {a.arg for a in fn.args.args}
        self.parents = {child: node for node in _walk(fn) for child in ast.iter_child_nodes(node)}
        self.selection_only = _selection_only(fn, self.parents)
        return self.block(fn.body, written=set(), component_writes={}, in_dynamic_loop=False)

    def block(
        self, stmts: list[ast.stmt], written: set[str], component_writes: dict[str, int], in_dynamic_loop: bool
    ) -> str | None:
        for i, stmt in enumerate(stmts):
            # outputs read before the kernel writes them (not through an atomic)
            for node in _walk(stmt):
                if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                    name = _base(node)
                    if (
                        self.roles.get(name) in ("out", "inout")
                        and name in self.float_arrays
                        and name not in written
                        and _stored_later(stmts[i:], name, node)
                    ):
                        return f"reads output array {name!r} before overwriting it"
            for node in _walk(stmt):
                for t in _targets(node):
                    if isinstance(t, ast.Subscript) or (
                        isinstance(t, ast.Attribute) and t.attr in ("x", "y", "z", "w")
                    ):
                        name = _base(t)
                        if name in self.roles or name in self.params:
                            written.add(name)
                        elif name:
                            return f"writes a component of {name!r} in place"
                    elif isinstance(t, ast.Name) and t.id in component_writes:
                        component_writes.pop(t.id)  # a fresh value
            if isinstance(stmt, ast.For):
                dyn = self.dynamic(stmt)
                if dyn and not all(_uniform(a, self.uniform) for a in getattr(stmt.iter, "args", [stmt.iter])):
                    return THREAD_BOUND
                if dyn:
                    hazard = _loop_hazard(stmt, stmts[i + 1 :], self)
                    if hazard:
                        return hazard
                inner = self.block(stmt.body, written, component_writes, in_dynamic_loop or dyn)
                if inner:
                    return inner
            elif isinstance(stmt, ast.If):
                for body in (stmt.body, stmt.orelse):
                    inner = self.block(body, written, component_writes, in_dynamic_loop)
                    if inner:
                        return inner
        return None


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _in_loop(stmt: ast.stmt, node: ast.AST) -> bool:
    return isinstance(stmt, ast.For) and node is not stmt


def _stored_later(stmts: list[ast.stmt], name: str, read: ast.AST) -> bool:
    for stmt in stmts:
        for node in _walk(stmt):
            for t in _targets(node):
                if isinstance(t, ast.Subscript) and _base(t) == name and not isinstance(node, ast.AugAssign):
                    return True
    return False


THREAD_BOUND = "dynamic for loop whose trip count depends on the thread (Warp 1.19 drops its adjoint)"


def _uniform(node: ast.AST, uniform: set[str]) -> bool:
    """Whether ``node`` has the same value in every thread: built from literals, uniform
    names, array shapes and builtins of them; never from ``wp.tid()`` or array data."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in uniform
    if isinstance(node, ast.Attribute):
        return node.attr == "shape" or _uniform(node.value, uniform)
    if isinstance(node, ast.Subscript):  # x.shape[0] is uniform; x[i] is data
        return isinstance(node.value, ast.Attribute) and node.value.attr == "shape" and _uniform(node.slice, uniform)
    if isinstance(node, ast.Call):
        if _name(node.func) == "tid":
            return False
        return all(_uniform(a, uniform) for a in [*node.args, *(k.value for k in node.keywords)])
    if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Tuple)):
        return all(_uniform(child, uniform) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))
    return False


def _uniform_names(fn: ast.FunctionDef, scalars: set[str]) -> set[str]:
    """Names with the same value in every thread: by-value scalars, ``wp.constant`` values,
    locals assigned only at the top of the kernel from uniform values (a name assigned
    inside a branch or a loop may differ between threads: not uniform, conservatively),
    and the variables of loops with uniform bounds."""
    assigned: dict[str, list[ast.AST]] = {}
    top = {id(stmt) for stmt in fn.body}
    for node in _walk(fn):
        for t in _targets(node):
            if isinstance(t, ast.Name):
                value = getattr(node, "value", None)
                ok = id(node) in top and isinstance(node, ast.Assign) and value is not None
                assigned.setdefault(t.id, []).append(value if ok else None)
            elif isinstance(t, ast.Tuple):
                for e in t.elts:
                    if isinstance(e, ast.Name):
                        assigned.setdefault(e.id, []).append(None)
        if isinstance(node, ast.For):  # a loop variable is uniform where the loop's bounds are
            bounds = node.iter if isinstance(node.iter, ast.Call) and _name(node.iter.func) == "range" else None
            for n in _walk(node.target):
                if isinstance(n, ast.Name):
                    assigned.setdefault(n.id, []).append(bounds)
    uniform = set(scalars) - set(assigned)
    changed = True
    while changed:
        changed = False
        for name, values in assigned.items():
            if name not in uniform and all(v is not None and _uniform(v, uniform) for v in values):
                uniform.add(name)
                changed = True
    return uniform


def _int_names(fn: ast.FunctionDef) -> set[str]:
    """Local names that only ever hold integers (loop variables, thread ids, int(...))."""
    assigned: dict[str, list[ast.AST]] = {}
    ints: set[str] = set()
    for node in _walk(fn):
        if isinstance(node, ast.For):
            ints |= {n.id for n in _walk(node.target) if isinstance(n, ast.Name)}
        for t in _targets(node):
            value = getattr(node, "value", None)
            if isinstance(t, ast.Name) and value is not None:
                assigned.setdefault(t.id, []).append(value)
            elif isinstance(t, ast.Tuple) and isinstance(value, ast.Call) and _name(value.func) == "tid":
                ints |= {e.id for e in t.elts if isinstance(e, ast.Name)}

    def int_like(v: ast.AST) -> bool:
        if isinstance(v, ast.Constant):
            return isinstance(v.value, int) and not isinstance(v.value, bool)
        if isinstance(v, ast.Name):
            return v.id in ints
        if isinstance(v, ast.Call):
            if _name(v.func) in ("min", "max", "abs", "clamp"):
                return bool(v.args) and all(int_like(a) for a in v.args)
            return _name(v.func) in ("int", "int32", "int64", "uint32", "tid")
        if isinstance(v, ast.BinOp):
            return not isinstance(v.op, ast.Div) and int_like(v.left) and int_like(v.right)
        if isinstance(v, ast.UnaryOp):
            return int_like(v.operand)
        return False

    changed = True
    while changed:
        changed = False
        for name, values in assigned.items():
            if name not in ints and all(int_like(v) for v in values):
                ints.add(name)
                changed = True
    return ints


def _selection_only(fn: ast.FunctionDef, parents: dict) -> set[str]:
    """Local names whose value only ever decides comparisons (a running best in an argmax,
    a threshold): read only inside comparisons or copied into other such names, so no
    gradient flows through them."""
    names = {t.id for node in _walk(fn) for t in _targets(node) if isinstance(t, ast.Name)}
    reads: dict[str, list[ast.Name]] = {}
    for n in _walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names:
            reads.setdefault(n.id, []).append(n)

    def use_of(n: ast.Name) -> tuple[str, str | None]:
        p = parents.get(n)
        while p is not None and not isinstance(p, (ast.Compare, ast.stmt)):
            p = parents.get(p)
        if isinstance(p, ast.Compare):
            return "compare", None
        parent = parents.get(n)
        if (
            isinstance(parent, ast.Assign)
            and parent.value is n
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
        ):
            return "copy", parent.targets[0].id
        return "value", None

    only = set(names)
    changed = True
    while changed:
        changed = False
        for name in list(only):
            for n in reads.get(name, []):
                kind, target = use_of(n)
                if kind == "value" or (kind == "copy" and target not in only):
                    only.discard(name)
                    changed = True
                    break
    return only


def _loop_hazard(loop: ast.For, after: list[ast.stmt], body: _Body) -> str | None:
    """A dynamic loop is differentiated right by Warp 1.19 only if every value it carries
    is a plain running sum (``v += e`` / ``v = v + e``, ``e`` free of carried values) and is
    used after the loop only by plain stores into arrays."""
    assigned: set[str] = set()
    for node in _walk(loop):
        for t in _targets(node):
            if isinstance(t, ast.Name):
                assigned.add(t.id)
    loop_var = {n.id for n in _walk(loop.target) if isinstance(n, ast.Name)}
    body_defined = _defined_first_in(loop.body)
    scalars = body.scalars
    # tile_matmul(a, b, out) adds a @ b into ``out``: a running sum carried by the loop
    accumulated = {
        node.args[2].id
        for node in _walk(loop)
        if isinstance(node, ast.Call)
        and _name(node.func) == "tile_matmul"
        and len(node.args) >= 3
        and isinstance(node.args[2], ast.Name)
    }
    carried = (assigned | accumulated) - loop_var - body_defined - body.ints  # integers carry no gradient
    carried -= body.selection_only
    for node in _walk(loop):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = [t.id for t in _targets(node) if isinstance(t, ast.Name) and t.id in carried]
            if not targets:
                continue
            value = node.value
            if isinstance(node, ast.AugAssign):
                if not isinstance(node.op, (ast.Add, ast.Sub)) or _mentions(value, carried):
                    return f"dynamic for loop carries {targets[0]!r} through a non-sum update"
            else:
                ok = (
                    isinstance(value, ast.BinOp)
                    and isinstance(value.op, (ast.Add, ast.Sub))
                    and isinstance(value.left, ast.Name)
                    and value.left.id == targets[0]
                    and not _mentions(value.right, carried)
                )
                if not ok:
                    return f"dynamic for loop carries {targets[0]!r} through a non-sum update"
    derived = set(carried)  # the carried values, and values linear in them
    for stmt in _flatten(after):
        used = {n.id for n in _walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} & derived
        if not used:
            continue
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and _linear(stmt.value, derived, scalars)
        ):
            derived.add(stmt.targets[0].id)
        elif (
            isinstance(stmt, ast.AugAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id in derived
            and isinstance(stmt.op, (ast.Add, ast.Sub))
            and not _mentions(stmt.value, derived)
        ):
            pass
        elif isinstance(stmt, ast.Return) and stmt.value is not None and _linear(stmt.value, derived, scalars):
            pass
        elif not _plain_store(stmt, derived, scalars):
            return f"dynamic for loop: {sorted(used)[0]!r} is used after the loop"
    return None


def _flatten(stmts: list[ast.stmt]):
    """Simple statements in order; a compound statement's header counts as a use."""
    for stmt in stmts:
        if isinstance(stmt, (ast.For, ast.If)):
            yield ast.Expr(stmt.iter if isinstance(stmt, ast.For) else stmt.test)
            yield from _flatten(stmt.body)
            yield from _flatten(stmt.orelse)
        else:
            yield stmt


def _defined_first_in(body: list[ast.stmt]) -> set[str]:
    """Names whose first appearance in the loop body (nested blocks in order) is an
    assignment: values local to one iteration."""
    seen_load: set[str] = set()
    defined: set[str] = set()
    for stmt in _flatten(body):
        loads = {n.id for n in _walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if isinstance(stmt, ast.AugAssign):
            loads |= {t.id for t in _targets(stmt) if isinstance(t, ast.Name)}
        stores = {t.id for t in _targets(stmt) if isinstance(t, ast.Name)}
        seen_load |= loads - defined
        defined |= stores - seen_load
    return defined


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in _walk(node))


def _plain_store(stmt: ast.stmt, name: set[str], scalars: set[str]) -> bool:
    """``arr[...] = e`` / ``arr[...] += e`` / ``wp.atomic_add(arr, ..., e)`` /
    ``wp.tile_store(arr, e, ...)`` with ``e``
    linear in ``name`` and scaled only by constants: its adjoint never needs the value of
    ``name``, which is what Warp's backward gets wrong after a dynamic loop."""
    if isinstance(stmt, (ast.Assign, ast.AugAssign)) and all(isinstance(t, ast.Subscript) for t in _targets(stmt)):
        return _linear(stmt.value, name, scalars)
    if (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and _name(stmt.value.func) in ("atomic_add", "atomic_sub")
    ):
        return bool(stmt.value.args) and _linear(stmt.value.args[-1], name, scalars)
    if (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and _name(stmt.value.func) in ("tile_store", "tile_atomic_add")
    ):
        return len(stmt.value.args) >= 2 and _linear(stmt.value.args[1], name, scalars)
    return False


def _linear(node: ast.AST, name: set[str], scalars: set[str]) -> bool:
    if isinstance(node, ast.Name) and node.id in name:
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _linear(node.operand, name, scalars)
    if isinstance(node, ast.BinOp):
        left_has, right_has = _mentions(node.left, name), _mentions(node.right, name)
        if isinstance(node.op, (ast.Add, ast.Sub)):
            return (
                (not left_has or _linear(node.left, name, scalars))
                and (not right_has or _linear(node.right, name, scalars))
                and _constant_free(node.left if not left_has else node.right, scalars, allow_any=True)
            )
        if isinstance(node.op, ast.Mult):
            if left_has and not right_has:
                return _linear(node.left, name, scalars) and _constant_free(node.right, scalars)
            if right_has and not left_has:
                return _linear(node.right, name, scalars) and _constant_free(node.left, scalars)
        if isinstance(node.op, ast.Div) and left_has and not right_has:
            return _linear(node.left, name, scalars) and _constant_free(node.right, scalars)
    return False


def _constant_free(node: ast.AST, scalars: set[str], allow_any: bool = False) -> bool:
    """True if ``node`` holds no differentiable value (constants, casts of sizes, scalar args)."""
    if allow_any:
        return True  # an added term's own adjoint does not involve the carried value
    for n in _walk(node):
        if isinstance(n, ast.Subscript):
            return False
        if (
            isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)
            and n.id not in scalars
            and n.id not in ("wp", "float", "int")
        ):
            return False
    return True


def declare_forward_only(spec: KernelSpec, cause: str) -> KernelSpec:
    """``spec`` with its source saying, the Warp way, that it has no backward."""
    lines = spec.python_source.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("import warp"))
    lines[at + 1 : at + 1] = ["", f"# forward-only: {cause}", FORWARD_ONLY_LINE]
    source = "\n".join(lines)
    features = tuple(spec.features) + (() if "forward_only" in spec.features else ("forward_only",))
    return dataclasses.replace(spec, python_source=source, features=features)
