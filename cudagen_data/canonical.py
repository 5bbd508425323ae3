"""Canonical forms of a kernel's Python source, for deduplication and leak-free splits.

``canonical_python``: the source re-printed from its AST with every user identifier
(kernel, functions, arguments, locals, structs, fields) renamed in order of first
appearance and docstrings dropped: two kernels that differ only in names and layout
have the same form.  ``canonical_shape`` additionally folds every numeric literal into
one token: kernels that differ only in constants share a shape.
"""

from __future__ import annotations

import ast
import builtins

import xxhash

_KEEP = set(dir(builtins)) | {"wp", "warp", "np", "numpy", "self"}


class _Renamer(ast.NodeTransformer):
    def __init__(self, fold_numbers: bool):
        self.names: dict[str, str] = {}
        self.fold_numbers = fold_numbers

    def _name(self, name: str) -> str:
        if name in _KEEP:
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name):
        node.id = self._name(node.id)
        return node

    def visit_arg(self, node: ast.arg):
        node.arg = self._name(node.arg)
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef):
        node.name = self._name(node.name)
        _drop_docstring(node)
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: ast.ClassDef):
        node.name = self._name(node.name)
        _drop_docstring(node)
        self.generic_visit(node)
        return node

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        # wp.sin, wp.vec3 ...: library names stay; struct fields (p.mass) are renamed.
        if not (isinstance(node.value, ast.Name) and node.value.id in _KEEP):
            node.attr = self._name(node.attr)
        return node

    def visit_Constant(self, node: ast.Constant):
        if self.fold_numbers and isinstance(node.value, (int, float, complex)) and not isinstance(node.value, bool):
            return ast.Name(id="NUM", ctx=ast.Load())
        return node


def _drop_docstring(node) -> None:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]


def _canonical(source: str, fold_numbers: bool) -> str:
    tree = ast.parse(source)
    _drop_docstring(tree)
    tree = _Renamer(fold_numbers).visit(tree)
    return ast.unparse(tree)


def canonical_python(source: str) -> str:
    return _canonical(source, fold_numbers=False)


def canonical_shape(source: str) -> str:
    return _canonical(source, fold_numbers=True)


def python_hash(source: str) -> str:
    return xxhash.xxh3_64_hexdigest(canonical_python(source).encode())


def shape_hash(source: str) -> str:
    return xxhash.xxh3_64_hexdigest(canonical_shape(source).encode())
