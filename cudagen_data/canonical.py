"""Canonical forms of kernel sources, for deduplication and leak-free splits.

``canonical_python`` re-prints a source from its AST with docstrings and comments gone
and every user-chosen identifier (kernel, function, argument, local variable, struct and
field names) renamed in order of first appearance to ``v0``, ``v1``, ...  Two kernels
that differ only in naming and formatting get the same canonical form.
``canonical_shape`` additionally replaces every numeric literal with one token, so
kernels that differ only in their constants share a shape.

Names that are not the author's choice are kept: the ``warp``/``wp`` module and its
attributes (``wp.sin``, ``wp.vec3``), Python builtins (``range``, ``float``, ``int``),
and attribute names that are not fields of a struct the source defines (``v.x``,
``a.shape``).
"""

from __future__ import annotations

import ast
import builtins

import xxhash

from .astwalk import walk

KEEP_NAMES = frozenset(dir(builtins)) | {"wp", "warp", "np", "numpy", "math"}
NUMBER_TOKEN = "NUM"


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return body or [ast.Pass()]


class _Renamer(ast.NodeTransformer):
    """Renames identifiers to v0, v1, ... in order of first appearance (source order)."""

    def __init__(self, struct_fields: set[str], imported: set[str], user_functions: set[str]):
        self.mapping: dict[str, str] = {}
        self.struct_fields = struct_fields
        self.user_functions = user_functions
        self.keep = KEEP_NAMES | imported

    def _name(self, name: str) -> str:
        if name in self.keep:
            return name
        if name not in self.mapping:
            self.mapping[name] = f"v{len(self.mapping)}"
        return self.mapping[name]

    # definitions -------------------------------------------------------------------
    def visit_Module(self, node: ast.Module) -> ast.AST:
        node.body = _strip_docstring(node.body) if node.body else node.body
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        for d in node.decorator_list:
            self.visit(d)
        node.name = self._name(node.name)
        self.visit(node.args)
        if node.returns is not None:
            node.returns = self.visit(node.returns)
        node.body = [self.visit(s) for s in _strip_docstring(node.body)]
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        for d in node.decorator_list:
            self.visit(d)
        node.name = self._name(node.name)
        node.bases = [self.visit(b) for b in node.bases]
        node.body = [self.visit(s) for s in _strip_docstring(node.body)]
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._name(node.arg)
        if node.annotation is not None:
            node.annotation = self.visit(node.annotation)
        return node

    # uses ----------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._name(node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        node.value = self.visit(node.value)
        if node.attr in self.struct_fields and not (isinstance(node.value, ast.Name) and node.value.id in self.keep):
            node.attr = self._name(node.attr)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        # struct field declarations: ``pos: wp.vec3``
        node.target = self.visit(node.target)
        node.annotation = self.visit(node.annotation)
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        # keyword arguments of calls to the author's own functions name its parameters;
        # keywords of library calls (``wp.identity(n=3)``) are not the author's names
        own = isinstance(node.func, ast.Name) and node.func.id in self.user_functions
        node.func = self.visit(node.func)
        node.args = [self.visit(a) for a in node.args]
        for kw in node.keywords:
            if own and kw.arg is not None:
                kw.arg = self._name(kw.arg)
            kw.value = self.visit(kw.value)
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        # a bare string statement anywhere is a comment-like docstring: drop it
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        self.generic_visit(node)
        return node


def _declared_names(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    """(struct fields, imported names, the author's function names), in one walk."""
    fields: set[str] = set()
    imported: set[str] = set()
    functions: set[str] = set()
    for node in walk(tree):
        if isinstance(node, ast.FunctionDef):
            functions.add(node.name)
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    fields.add(stmt.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                imported.add((alias.asname or alias.name).split(".")[0])
    return fields, imported, functions


def _canonical_tree(source: str) -> ast.Module:
    tree = ast.parse(source)
    fields, imported, functions = _declared_names(tree)
    return _Renamer(fields, imported, functions).visit(tree)  # ast.unparse needs no locations


def canonical_python(source: str) -> str:
    """The source re-printed from its AST with user identifiers renamed v0, v1, ... in
    order of first appearance and docstrings/comments dropped."""
    return ast.unparse(_canonical_tree(source))


class _NumberEraser(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, (int, float, complex)) and not isinstance(value, bool):
            return ast.copy_location(ast.Name(id=NUMBER_TOKEN, ctx=ast.Load()), node)
        return node


def canonical_shape(source: str) -> str:
    """:func:`canonical_python` with every numeric literal replaced by one token."""
    return ast.unparse(_NumberEraser().visit(_canonical_tree(source)))


def text_hash(text: str) -> str:
    """The one hash of text in rows: 16 hex digits, xxh3_64 of the UTF-8 bytes
    (``python_hash``, ``shape_hash``, ``preamble_hash``, ``cuda_hash``)."""
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8"))


def cuda_hash(forward: str, backward: str) -> str:
    """A row's ``cuda_hash``: of its forward and backward CUDA (dedup on CUDA text)."""
    return text_hash(forward + backward)


def python_hash(source: str) -> str:
    """16 hex digits: xxh3_64 of :func:`canonical_python`."""
    return text_hash(canonical_python(source))


def shape_hash(source: str) -> str:
    """16 hex digits: xxh3_64 of :func:`canonical_shape`."""
    return text_hash(canonical_shape(source))


def canonical_hashes(source: str) -> tuple[str, str]:
    """(:func:`python_hash`, :func:`shape_hash`) with one parse: what a row needs."""
    tree = _canonical_tree(source)
    python = ast.unparse(tree)
    return text_hash(python), text_hash(ast.unparse(_NumberEraser().visit(tree)))


def kernel_shape_hash(source: str) -> str:
    """:func:`shape_hash` of the first ``@wp.kernel`` definition in ``source`` alone.

    Comparable between a mined row (a bare definition) and a synthetic row (a module with
    imports and helpers): both reduce to the kernel's def itself.
    """
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(_is_kernel_decorator(d) for d in node.decorator_list):
            return shape_hash(ast.unparse(node))
    return shape_hash(source)


def _is_kernel_decorator(node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        node = node.func
    return (isinstance(node, ast.Attribute) and node.attr == "kernel") or (
        isinstance(node, ast.Name) and node.id == "kernel"
    )
