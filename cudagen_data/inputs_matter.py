"""Do a kernel's outputs depend on its inputs?  Fresh inputs, the same kernel, compared outputs.

A kernel whose outputs are the same for every input ("input-blind") is no test of
anything: a table of its recorded outputs passes any judge.  And an argument that reaches
no output is noise in a row (and a hint the generator emitted dead code).  Both are found
by running the kernel again on *fresh* inputs, drawn from a stream of their own (not the
recorded ones, and independent of how the generator reasoned about its values):

- blind: every argument the kernel reads (role ``in``; the ``inout`` ones if it has no
  other) redrawn at once, twice; no output changed either time (or it has no argument a
  draw can change);
- unused: one argument read only (role ``in``) redrawn alone, twice, changed no output; or
  its name does not occur in the kernel's body at all (arguments that cannot be redrawn:
  a size fixed to one value).

Pure: the caller supplies ``forward(inputs) -> outputs`` (one launch of the built kernel)
and ``fresh(stream) -> inputs`` (a full draw).  execution.py wires it in.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .spec import ArgSpec, KernelSpec

DRAWS = 2  # fresh draws per question: a real dependence shows in the first almost always

Forward = Callable[[dict[str, Any]], dict[str, np.ndarray]]
Fresh = Callable[[str], dict[str, Any]]


@dataclass
class Verdict:
    blind: bool = False
    unused: list[str] = field(default_factory=list)


def perturbable(arg: ArgSpec) -> bool:
    """Arguments a fresh draw can change: inputs with a domain wider than a point."""
    return arg.role != "out" and arg.domain[0] < arg.domain[1]


def referenced_names(spec: KernelSpec) -> set[str]:
    """Names read anywhere in the kernel function's body."""
    tree = ast.parse(spec.python_source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == spec.kernel_name:
            return {n.id for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return set()


def judge(spec: KernelSpec, inputs: dict, outputs: dict, forward: Forward, fresh: Fresh) -> Verdict:
    """Whether ``spec``'s outputs ignore all its inputs, and which arguments reach no output."""
    draws = [fresh(f"fresh{k}") for k in range(DRAWS)]

    def changes(names: list[str]) -> bool:
        for draw in draws:
            trial = {n: (draw[n] if n in names else v) for n, v in inputs.items()}
            try:
                got = forward(trial)
            except Exception:  # noqa: BLE001 - a launch that fails on other values depends on them
                return True
            if any(not _same(got[n], outputs[n]) for n in outputs):
                return True
        return False

    candidates = [a for a in spec.args if perturbable(a)]
    reads = [a.name for a in candidates if a.role == "in"] or [a.name for a in candidates]
    verdict = Verdict(blind=not reads or not changes(reads))  # no input to vary: outputs fixed
    body = referenced_names(spec)
    for a in spec.args:
        if a.role != "in":  # an inout argument is an output: its start value may rightly be overwritten
            continue
        if a.name.split(".")[0] not in body or (perturbable(a) and not changes([a.name])):
            verdict.unused.append(a.name)
    return verdict


def _same(a: Any, b: Any) -> bool:
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind == "f")
