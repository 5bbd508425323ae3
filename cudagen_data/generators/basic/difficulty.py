"""Difficulty tier from a kernel's structure.

A kernel's *complexity score* is read from its source: statements, nesting depth, loops,
branches, helper functions, early exits, calls.  Each category maps scores to tiers with
two cut points chosen so its tiers come out roughly balanced (the cut points were
calibrated as the score tertiles of 400 kernels per category, seed 99;
benchmarks/bench_generators.py prints the resulting split).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

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
                inner = max(inner, _depth(s.orelse) - (1 if len(s.orelse) == 1 and isinstance(s.orelse[0], ast.If) else 0))
            best = max(best, 1 + inner)
    return best


def structure(source: str, tree: ast.Module | None = None) -> Structure:
    tree = tree or ast.parse(source)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    statements = loops = branches = exits = calls = 0
    depth = 0
    for f in funcs:
        depth = max(depth, _depth(f.body))
        for node in ast.walk(f):
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
        if any(isinstance(n, ast.Return) for n in ast.walk(f)) and f is funcs[-1]:
            exits += 1
    helpers = len(funcs) - 1
    return Structure(statements, depth, loops, branches, helpers, exits, calls)


# score cut points per category: score < lo -> basic, < hi -> intermediate, else advanced
THRESHOLDS: dict[str, tuple[float, float]] = {
    "arithmetic": (10.0, 17.0),
    "vector": (12.5, 20.0),
    "matrix": (11.0, 18.0),
    "control_flow": (24.0, 35.5),
    "math": (9.5, 16.0),
    "atomic": (11.0, 18.0),
}
DEFAULT_THRESHOLDS = (11.0, 18.0)


def tier(category: str, source: str, tree: ast.Module | None = None) -> str:
    lo, hi = THRESHOLDS.get(category, DEFAULT_THRESHOLDS)
    s = structure(source, tree).score
    if s < lo:
        return "basic"
    if s < hi:
        return "intermediate"
    return "advanced"
