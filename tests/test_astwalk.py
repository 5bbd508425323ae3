"""astwalk.walk is ast.walk (same nodes, same order), only faster."""

from __future__ import annotations

import ast

from cudagen_data.astwalk import walk
from cudagen_data.generators import categories, generate
from cudagen_data.numerics.twin import twin_source


def test_walk_is_ast_walk_on_generated_kernels():
    sources = [generate(c, 3, i).python_source for c in categories() for i in range(4)]
    sources.append(twin_source(sources[0]))
    sources.append("x: int\ndef f(*a, b=1, **k):\n    return [i async for i in a] if b else {**k}\n")
    for source in sources:
        tree = ast.parse(source)
        for node in [tree, *ast.walk(tree)]:
            assert [id(n) for n in walk(node)] == [id(n) for n in ast.walk(node)]


def test_walk_skips_optional_fields_never_set():
    node = ast.BinOp(left=ast.Constant(1))  # built by hand: no op, no right at all
    assert walk(node) == list(ast.walk(node)) == [node, node.left]
