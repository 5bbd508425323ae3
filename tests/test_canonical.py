"""Canonical forms: identifier renaming, docstring/comment removal, literal folding, hashes."""

from __future__ import annotations

import ast
import re

from cudagen_data.canonical import canonical_python, canonical_shape, python_hash, shape_hash

KERNEL = '''import warp as wp


@wp.func
def soft_limit(x: float, k: float) -> float:
    """Smoothly limit x."""
    return x / (1.0 + wp.abs(x) * k)  # a comment


@wp.kernel
def apply_limit(values: wp.array(dtype=float), gain: float, out: wp.array(dtype=float)):
    """Docstring of the kernel."""
    i = wp.tid()
    v = values[i]
    for j in range(3):
        v = soft_limit(v, gain) + float(j)
    out[i] = v
'''

# the same kernel: other names, other formatting, other comments and docstrings
RENAMED = """import warp as wp

@wp.func
def squash(a: float, b: float) -> float:
    return a / (1.0 + wp.abs(a) * b)

@wp.kernel
def run(src: wp.array(dtype=float), g: float, dst: wp.array(dtype=float)):
    # no docstring here
    t = wp.tid()
    y = src[t]
    for n in range(3):
        y = squash(y, g) + float(n)
    dst[t] = y
"""


def test_identifiers_are_renamed_in_order_of_first_appearance():
    text = canonical_python(KERNEL)
    assert "def v0(v1: float, v2: float) -> float:" in text
    assert "def v3(v4: wp.array(dtype=float), v5: float, v6: wp.array(dtype=float)):" in text
    assert "v7 = wp.tid()" in text
    assert "v8 = v4[v7]" in text
    assert "for v9 in range(3):" in text
    assert "v8 = v0(v8, v5) + float(v9)" in text
    # every identifier is either a v<N> or something the author did not choose
    names = {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}
    assert names <= {"wp", "float", "range"} | {f"v{k}" for k in range(10)}


def test_docstrings_and_comments_are_dropped():
    text = canonical_python(KERNEL)
    assert "Smoothly" not in text and "Docstring" not in text and "comment" not in text
    assert '"""' not in text and "#" not in text


def test_warp_names_and_python_builtins_are_kept():
    text = canonical_python(KERNEL)
    for kept in ("wp.kernel", "wp.func", "wp.tid()", "wp.abs(", "wp.array(dtype=float)", "range(", "float("):
        assert kept in text


def test_naming_and_formatting_do_not_change_the_canonical_form():
    assert canonical_python(KERNEL) == canonical_python(RENAMED)
    assert python_hash(KERNEL) == python_hash(RENAMED)
    assert shape_hash(KERNEL) == shape_hash(RENAMED)


def test_a_different_constant_changes_the_python_hash_but_not_the_shape():
    other = KERNEL.replace("range(3)", "range(5)").replace("1.0 +", "2.5 +")
    assert python_hash(other) != python_hash(KERNEL)
    assert shape_hash(other) == shape_hash(KERNEL)


def test_a_different_structure_changes_the_shape():
    other = KERNEL.replace("wp.abs(x)", "wp.sqrt(x)")
    assert shape_hash(other) != shape_hash(KERNEL)
    swapped = KERNEL.replace("soft_limit(v, gain)", "soft_limit(gain, v)")
    assert shape_hash(swapped) != shape_hash(KERNEL)


def test_shape_folds_every_numeric_literal_into_one_token_but_not_bools_or_strings():
    src = "import warp as wp\n\ndef f(a):\n    return a * 2 + 3.5 - 1e-3 if True else 'x'\n"
    shape = canonical_shape(src)
    assert re.findall(r"\d", shape.replace("v0", "").replace("v1", "")) == []
    assert shape.count("NUM") == 3
    assert "True" in shape and "'x'" in shape


def test_struct_and_field_names_are_renamed_but_vector_components_are_not():
    src = """import warp as wp


@wp.struct
class Particle:
    pos: wp.vec3
    mass: float


@wp.kernel
def k(xs: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    p = Particle()
    p.pos = xs[i]
    p.mass = 2.0
    out[i] = p.pos.x * p.mass + xs[i].y + float(xs.shape[0])
"""
    text = canonical_python(src)
    assert "class v0:" in text
    assert "v1: wp.vec3" in text and "v2: float" in text
    assert "v7.v1 = v4[v6]" in text and "v7.v2 = 2.0" in text
    assert "v7.v1.x * v7.v2" in text and "v4[v6].y" in text and "v4.shape[0]" in text
    renamed = src.replace("Particle", "Body").replace("pos", "where").replace("mass", "m")
    assert python_hash(renamed) == python_hash(src)


def test_keywords_of_library_calls_are_kept_and_of_own_functions_renamed():
    src = """import warp as wp


@wp.func
def scale(x: float, factor: float) -> float:
    return x * factor


@wp.kernel
def k(n: wp.array(dtype=float)):
    i = wp.tid()
    m = wp.identity(n=3, dtype=float)
    n[i] = scale(n[i], factor=m[0, 0])
"""
    text = canonical_python(src)
    assert "wp.identity(n=3, dtype=float)" in text  # not renamed although the kernel has an ``n``
    assert "v0(v4[v5], v2=v6[0, 0])" in text


def test_hashes_are_16_hex_digits_and_the_output_is_valid_python():
    for h in (python_hash(KERNEL), shape_hash(KERNEL)):
        assert re.fullmatch(r"[0-9a-f]{16}", h)
    ast.parse(canonical_python(KERNEL))
    ast.parse(canonical_shape(KERNEL))
    assert python_hash(KERNEL) != shape_hash(KERNEL)


def test_canonical_form_is_a_fixed_point():
    once = canonical_python(KERNEL)
    assert canonical_python(once) == once
