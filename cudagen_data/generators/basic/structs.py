"""Local ``@wp.struct`` values: a struct type declared at module level, filled in and read
inside the kernel (``p = Particle()``, ``p.pos = ...``, later ``p.pos + p.vel * dt``)."""

from __future__ import annotations

from .builder import Var
from .frame import Frame, pick
from .wtypes import F32, I32, WType, vec

STRUCT_NAMES = (
    "Particle",
    "Ray",
    "Body",
    "Sample",
    "Contact",
    "Spring",
    "Hit",
    "Probe",
    "Segment",
    "Light",
    "Cell",
    "Node",
    "State",
    "Bounds",
    "Wave",
)
FIELDS = (
    ("pos", vec(3)),
    ("vel", vec(3)),
    ("dir", vec(3)),
    ("origin", vec(3)),
    ("normal", vec(3)),
    ("color", vec(3)),
    ("uv", vec(2)),
    ("mass", F32),
    ("weight", F32),
    ("radius", F32),
    ("energy", F32),
    ("scale", F32),
    ("phase", F32),
    ("count", I32),
    ("level", I32),
)


def struct_motif(f: Frame) -> None:
    kb, g = f.kb, f.gen
    sname = kb.names.take(pick(f.rng, STRUCT_NAMES))
    order = f.rng.permutation(len(FIELDS))[: int(f.rng.integers(2, 4))]
    fields: list[tuple[str, WType]] = [FIELDS[int(j)] for j in order]
    lines = [f"@wp.struct\nclass {sname}:"]
    for fname, t in fields:
        lines.append(f"    {fname}: {t.annotation(kb.short_annot)}")
    kb.structs.append("\n".join(lines) + "\n")
    var = kb.names.fresh(pick(f.rng, ("local", "local_vec")))
    kb.emit(f"{var} = {sname}()")
    for fname, t in fields:
        e = g.gen_varying(t, int(f.rng.integers(1, 3)))
        if t.is_float:
            e = g.fit_mag(e, 100.0)
        key = f"{var}.{fname}"
        kb.emit(f"{key} = {e.text}")
        kb.vars[key] = Var(key, kb.var_expr(key, e), len(kb.loops), kb.block_depth)
