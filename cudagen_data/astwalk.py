"""``ast.walk`` as a list, ~1.4x faster: the generators and checks walk every kernel's
tree many times (generation time is ~half of ``--fast``).

Same nodes in the same (breadth-first) order as ``ast.walk``; tests/test_astwalk.py
compares them on generated kernels of every category.
"""

from __future__ import annotations

import ast

_AST = ast.AST


def walk(node: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(node))``."""
    out = [node]
    i = 0
    while i < len(out):
        n = out[i]
        i += 1
        for name in n._fields:
            try:
                value = getattr(n, name)
            except AttributeError:  # an optional field never set (as ast.iter_fields skips it)
                continue
            if isinstance(value, _AST):
                out.append(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, _AST):
                        out.append(item)
    return out
