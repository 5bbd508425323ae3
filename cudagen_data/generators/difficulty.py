"""Difficulty tier of a kernel, for every category: one rule, score -> tier by cut points.

:func:`difficulty` reads a *score* from the kernel's source and maps it to ``basic``,
``intermediate`` or ``advanced`` with the category's two cut points (score < lo: basic,
< hi: intermediate, else advanced).  Two scores exist, kept as they were calibrated so
that no tier of any generated kernel changed when they were brought together here:

- :func:`structure_score` (the six basic categories): statements, nesting depth, loops,
  branches, helper functions, early exits, calls.  Cut points per category were
  calibrated as the score tertiles of 400 kernels per category, seed 99
  (benchmarks/bench_generators.py prints the resulting split).
- :func:`points_score` (the ML families): deepest loop nesting, tiles, atomics, helpers,
  branches, plus ``algorithmic`` points a family adds for ideas the syntax does not show
  (online rescaling, causal masking, multi-pass carries, top-k selection); cut points 3, 5.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ..astwalk import walk

_COMPOUND = (ast.If, ast.For, ast.While)


@dataclass(frozen=True)
class Structure:
    statements: int
    depth: int
    loops: int
    branches: int
    helpers: int
    exits: int  # break / continue / early return
    calls: int

    @property
    def score(self) -> float:
        return (
            self.statements
            + 2.0 * max(0, self.depth - 1)
            + 2.5 * self.loops
            + 1.5 * self.branches
            + 2.0 * self.helpers
            + 1.0 * self.exits
            + 0.25 * self.calls
        )


def _depth(stmts: list[ast.stmt]) -> int:
    best = 1 if stmts else 0
    for s in stmts:
        if isinstance(s, _COMPOUND):
            inner = _depth(s.body)
            if isinstance(s, ast.If):
                inner = max(
                    inner, _depth(s.orelse) - (1 if len(s.orelse) == 1 and isinstance(s.orelse[0], ast.If) else 0)
                )
            best = max(best, 1 + inner)
    return best


def structure(source: str, tree: ast.Module | None = None) -> Structure:
    tree = tree or ast.parse(source)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    statements = loops = branches = exits = calls = 0
    depth = 0
    for f in funcs:
        depth = max(depth, _depth(f.body))
        for node in walk(f):
            if isinstance(node, ast.stmt) and node is not f:
                statements += 1
            if isinstance(node, (ast.For, ast.While)):
                loops += 1
            elif isinstance(node, ast.If):
                branches += 1
            elif isinstance(node, (ast.Break, ast.Continue)):
                exits += 1
            elif isinstance(node, ast.Call):
                calls += 1
        if any(isinstance(n, ast.Return) for n in walk(f)) and f is funcs[-1]:
            exits += 1
    helpers = len(funcs) - 1
    return Structure(statements, depth, loops, branches, helpers, exits, calls)


def structure_score(tree: ast.Module, features: tuple[str, ...] = (), algorithmic: int = 0) -> float:
    return structure("", tree).score


def _loop_depth(node: ast.AST, depth: int = 0) -> int:
    best = depth
    for child in ast.iter_child_nodes(node):
        d = depth + 1 if isinstance(child, (ast.For, ast.While)) else depth
        best = max(best, _loop_depth(child, d))
    return best


def points_score(tree: ast.Module, features: tuple[str, ...], algorithmic: int = 0) -> float:
    score = _loop_depth(tree)
    score += 3 if "tile" in features else 0
    score += 1 if "atomic" in features else 0
    score += 1 if "wp.func" in features else 0
    score += 1 if "if" in features else 0
    return score + algorithmic


Score = Callable[[ast.Module, tuple[str, ...], int], float]

# category -> (score, (lo, hi)); a category not listed is scored by structure, (11, 18)
_ML_CUTS = (3.0, 5.0)  # integer points: <= 2 basic, <= 4 intermediate
SCORING: dict[str, tuple[Score, tuple[float, float]]] = {
    "arithmetic": (structure_score, (10.0, 17.0)),
    "vector": (structure_score, (12.5, 20.0)),
    "matrix": (structure_score, (11.0, 18.0)),
    "control_flow": (structure_score, (24.0, 35.5)),
    "math": (structure_score, (9.5, 16.0)),
    "atomic": (structure_score, (11.0, 18.0)),
    **{
        c: (points_score, _ML_CUTS)
        for c in ("reduction", "scan", "stencil", "gemm", "softmax", "norm", "linear_act", "attention", "moe_routing")
    },
}
DEFAULT_SCORING: tuple[Score, tuple[float, float]] = (structure_score, (11.0, 18.0))
TIERS = ("basic", "intermediate", "advanced")


def difficulty(category: str, tree: ast.Module, features: tuple[str, ...] = (), algorithmic: int = 0) -> str:
    """The tier of a kernel of ``category`` whose source parses to ``tree``."""
    score_fn, (lo, hi) = SCORING.get(category, DEFAULT_SCORING)
    s = score_fn(tree, features, algorithmic)
    if s < lo:
        return "basic"
    if s < hi:
        return "intermediate"
    return "advanced"
