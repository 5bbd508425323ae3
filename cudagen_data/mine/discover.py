"""Which files to mine, under which root, and how many kernels each one declares.

Pure file-system and AST work: nothing here imports Warp or the files themselves.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

KERNEL_DECORATORS = frozenset({"kernel"})


class MineError(Exception):
    """An expected problem with what was asked to be mined (one line, names the path)."""


@dataclass(frozen=True)
class SourceFile:
    """One Python file to mine: where it is and how provenance names it."""

    path: str  # absolute, on this machine: used to import it, never written out
    root: str  # the mined root it was found under (absolute)
    relpath: str  # POSIX path relative to the root's parent: what rows record
    package: str  # the distribution it belongs to ("warp-lang") or "" for a user's tree


def installed_warp_root() -> Path:
    """The installed ``warp`` package folder (its examples, tests and library modules)."""
    spec = importlib.util.find_spec("warp")
    if spec is None or not spec.submodule_search_locations:
        raise MineError("warp: the warp-lang package is not installed")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def find_files(paths: list[str | os.PathLike] | None) -> list[SourceFile]:
    """The ``.py`` files under ``paths`` (recursively, sorted); the installed Warp with none.

    A root's files are named relative to the root's parent, so a folder ``warp`` yields
    ``warp/tests/test_x.py`` and a file ``a.py`` given alone yields ``a.py``.
    """
    roots = [installed_warp_root()] if not paths else [Path(p) for p in paths]
    out: list[SourceFile] = []
    seen: set[str] = set()
    for given in roots:
        if not given.exists():
            raise MineError(f"{given}: no such file or folder")
        root = given.resolve()
        package = ""
        warp_root = _warp_root_or_none()
        if warp_root is not None and (root == warp_root or warp_root in root.parents):
            # A part of the installed Warp is named as Warp's own files are: warp/tests/...
            package, root_for_names = "warp-lang", warp_root
        else:
            root_for_names = root
        if root.is_file():
            if root.suffix != ".py":
                raise MineError(f"{given}: not a Python file")
            files = [root]
        else:
            files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
        for f in files:
            if str(f) in seen:
                continue
            seen.add(str(f))
            out.append(
                SourceFile(str(f), str(root_for_names), f.relative_to(root_for_names.parent).as_posix(), package)
            )
    return out


def _warp_root_or_none() -> Path | None:
    try:
        return installed_warp_root()
    except MineError:
        return None


def is_kernel_decorator(node: ast.expr) -> bool:
    """``@wp.kernel``, ``@warp.kernel``, ``@kernel`` and their called forms ``@wp.kernel(...)``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr in KERNEL_DECORATORS
    return isinstance(node, ast.Name) and node.id in KERNEL_DECORATORS


@dataclass(frozen=True)
class KernelDef:
    """A ``def`` decorated as a Warp kernel, as the parser sees it."""

    name: str
    line: int  # the first decorator's line: what Python records as co_firstlineno
    def_line: int
    qualname: str  # Python's __qualname__ for it (``outer.<locals>.name``)
    nested: bool  # defined inside a function or class, not at module level


def kernel_defs(tree: ast.Module) -> list[KernelDef]:
    """Every kernel definition in a parsed file, in source order."""
    found: list[KernelDef] = []

    def visit(body: list[ast.stmt], prefix: str, nested: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(is_kernel_decorator(d) for d in node.decorator_list):
                    first = min([d.lineno for d in node.decorator_list] + [node.lineno])
                    found.append(KernelDef(node.name, first, node.lineno, prefix + node.name, nested))
                visit(node.body, f"{prefix}{node.name}.<locals>.", True)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.", True)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], (ast.stmt, ast.excepthandler)):
                        stmts = [s for h in inner for s in (h.body if isinstance(h, ast.excepthandler) else [h])]
                        visit(stmts, prefix, nested)

    visit(tree.body, "", False)
    return sorted(found, key=lambda d: d.line)


def count_kernel_decorators(source: str) -> int:
    """How many kernel definitions a source declares (0 if it does not parse)."""
    try:
        return len(kernel_defs(ast.parse(source)))
    except SyntaxError:
        return 0
