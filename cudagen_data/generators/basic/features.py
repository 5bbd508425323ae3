"""What a generated kernel actually uses, read back from its source.

Features are derived from the final source (not from what the generator intended), so
they are exact: every ``wp.<name>(...)`` call, and the language constructs present.
"""

from __future__ import annotations

import ast

LANGUAGE_FEATURES = (
    "if",
    "elif",
    "else",
    "for",
    "while",
    "break",
    "continue",
    "return",
    "ternary",
    "wp.func",
    "struct",
    "atomic",
    "array_augassign",
    "tid2d",
    "tid3d",
    "array2d",
    "array3d",
    "scalar_param",
    "bitwise",
    "matmul_op",
    "pow_op",
    "vector",
    "matrix",
    "quaternion",
    "augassign",
    "element_assign",
    "neighbour_read",
)

_BIT_OPS = (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)


def _kernel_def(tree: ast.Module) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(_decorator_name(d) == "kernel" for d in node.decorator_list):
            return node
    return None


def _decorator_name(d: ast.expr) -> str:
    if isinstance(d, ast.Call):
        d = d.func
    if isinstance(d, ast.Attribute) and isinstance(d.value, ast.Name) and d.value.id == "wp":
        return d.attr
    return ""


def wp_calls(tree: ast.AST) -> list[str]:
    """Distinct ``wp.<name>`` called in function bodies (not in annotations), in order of
    first appearance."""
    seen: dict[str, None] = {}
    bodies = [s for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for s in f.body]
    for node in (n for b in bodies for n in ast.walk(b)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if isinstance(f.value, ast.Name) and f.value.id == "wp":
                seen.setdefault(f"wp.{f.attr}", None)
    return list(seen)


def _has_elif(node: ast.If) -> bool:
    return len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)


def extract_features(source: str, tree: ast.Module | None = None) -> tuple[str, ...]:
    """Warp builtins called (``wp.<name>``, in order of first use) and language features."""
    tree = tree or ast.parse(source)
    feats: dict[str, None] = {}
    lang: dict[str, None] = {}
    kernel = _kernel_def(tree)
    array_params: set[str] = set()
    if kernel is not None:
        for a in kernel.args.args:
            ann = ast.unparse(a.annotation) if a.annotation is not None else ""
            if ann.startswith("wp.array"):
                array_params.add(a.arg)
                if "array2d" in ann or "ndim=2" in ann:
                    lang.setdefault("array2d", None)
                if "array3d" in ann or "ndim=3" in ann:
                    lang.setdefault("array3d", None)
            else:
                lang.setdefault("scalar_param", None)
    for top in tree.body:
        if isinstance(top, ast.ClassDef):
            if any(_decorator_name(d) == "struct" for d in top.decorator_list):
                lang.setdefault("struct", None)
            continue
        if not isinstance(top, ast.FunctionDef):
            continue
        in_kernel = top is kernel
        if any(_decorator_name(d) == "func" for d in top.decorator_list):
            lang.setdefault("wp.func", None)
        for stmt in top.body:
            for node in ast.walk(stmt):
                _visit(node, feats, lang, in_kernel, array_params)
    for name, prefixes in _TYPE_FEATURES:
        if any(f.startswith(prefixes) for f in feats):
            lang.setdefault(name, None)
    return tuple(feats) + tuple(lang)


_TYPE_FEATURES = (
    ("vector", ("wp.vec", "wp.dot", "wp.cross", "wp.normalize", "wp.length")),
    (
        "matrix",
        ("wp.mat", "wp.transpose", "wp.inverse", "wp.determinant", "wp.outer", "wp.identity", "wp.diag", "wp.skew"),
    ),
    ("quaternion", ("wp.quat",)),
)


def _visit(node: ast.AST, feats: dict, lang: dict, in_kernel: bool, array_params: set[str]) -> None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "wp":
            feats.setdefault(f"wp.{f.attr}", None)
            if f.attr.startswith("atomic_"):
                lang.setdefault("atomic", None)
    elif isinstance(node, ast.If):
        lang.setdefault("if", None)
        if _has_elif(node):
            lang.setdefault("elif", None)
        elif node.orelse:
            lang.setdefault("else", None)
    elif isinstance(node, ast.For):
        lang.setdefault("for", None)
    elif isinstance(node, ast.While):
        lang.setdefault("while", None)
    elif isinstance(node, ast.Break):
        lang.setdefault("break", None)
    elif isinstance(node, ast.Continue):
        lang.setdefault("continue", None)
    elif isinstance(node, ast.Return):
        if in_kernel:
            lang.setdefault("return", None)
    elif isinstance(node, ast.IfExp):
        lang.setdefault("ternary", None)
    elif isinstance(node, ast.AugAssign):
        lang.setdefault("augassign", None)
        tgt = node.target
        if (
            in_kernel
            and isinstance(tgt, ast.Subscript)
            and isinstance(tgt.value, ast.Name)
            and tgt.value.id in array_params
        ):
            lang.setdefault("atomic", None)
            lang.setdefault("array_augassign", None)
        elif isinstance(tgt, (ast.Subscript, ast.Attribute)):
            lang.setdefault("element_assign", None)
    elif isinstance(node, ast.Assign):
        tgt = node.targets[0]
        if in_kernel and isinstance(node.value, ast.Call) and isinstance(tgt, ast.Tuple):
            if ast.unparse(node.value.func) == "wp.tid" and len(tgt.elts) >= 2:
                lang.setdefault(f"tid{len(tgt.elts)}d", None)
        if (
            isinstance(tgt, (ast.Subscript, ast.Attribute))
            and isinstance(tgt.value, ast.Name)
            and tgt.value.id not in array_params
        ):
            lang.setdefault("element_assign", None)
    elif isinstance(node, ast.BinOp):
        if isinstance(node.op, _BIT_OPS):
            lang.setdefault("bitwise", None)
        elif isinstance(node.op, ast.MatMult):
            lang.setdefault("matmul_op", None)
        elif isinstance(node.op, ast.Pow):
            lang.setdefault("pow_op", None)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        lang.setdefault("bitwise", None)
    elif in_kernel and isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        if isinstance(node.value, ast.Name) and node.value.id in array_params:
            idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(not isinstance(e, ast.Name) for e in idx):
                lang.setdefault("neighbour_read", None)
