"""Extraction: Python source -> Warp CUDA (forward, backward, device functions), compile check."""

from __future__ import annotations

import dataclasses
import linecache
import subprocess
import sys
import textwrap

import pytest

from cudagen_data.extract import ExtractError, compile_units, extract_kernels, extract_source, nvrtc_compile

FEATURES_SOURCE = textwrap.dedent(
    """
    import numpy as np
    import warp as wp

    SCALE = wp.constant(2.5)

    @wp.struct
    class Particle:
        pos: wp.vec3
        mass: float

    @wp.func
    def kinetic(v: wp.vec3, m: float):
        return 0.5 * m * wp.dot(v, v)

    @wp.kernel
    def energy(ps: wp.array(dtype=Particle), vel: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
        i = wp.tid()
        p = ps[i]
        out[i] = kinetic(vel[i], p.mass) * SCALE

    @wp.kernel
    def looped(a: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
        i = wp.tid()
        s = float(0.0)
        for k in range(n):
            if k % 2 == 0:
                s += a[i] * float(k)
            else:
                s -= wp.sin(a[i])
        out[i] = s

    @wp.kernel
    def transform(m: wp.array(dtype=wp.mat33), v: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        out[i] = wp.transpose(m[i]) * v[i] + wp.cross(v[i], wp.vec3(1.0, 0.0, 0.0))

    @wp.kernel
    def histogram(vals: wp.array(dtype=float), bins: wp.array(dtype=int), total: wp.array(dtype=float)):
        i = wp.tid()
        b = wp.clamp(int(vals[i] * 4.0), 0, 3)
        wp.atomic_add(bins, b, 1)
        wp.atomic_add(total, 0, vals[i])

    @wp.kernel
    def blur(img: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
        i, j = wp.tid()
        out[i, j] = 0.5 * img[i, j] + 0.25 * img[wp.max(i - 1, 0), j] + 0.25 * img[i, wp.max(j - 1, 0)]

    if __name__ == "__main__":
        raise SystemExit("the main block must not run during extraction")
    """
)


@pytest.fixture(scope="module")
def kernels():
    return {k.name: k for k in extract_kernels(FEATURES_SOURCE)}


def test_every_kernel_comes_out_with_forward_and_backward(kernels):
    assert sorted(kernels) == ["blur", "energy", "histogram", "looped", "transform"]
    for k in kernels.values():
        assert k.forward.startswith('extern "C" __global__ void ') and "_cuda_kernel_forward(" in k.forward
        assert "_cuda_kernel_backward(" in k.backward and k.backward.rstrip().endswith("}")
        assert k.forward.count("{") == k.forward.count("}")
        assert '#include "builtin.h"' in k.preamble


def test_device_functions_hold_funcs_and_structs(kernels):
    energy = kernels["energy"]
    assert "struct Particle_" in energy.device_functions
    assert "kinetic_0(" in energy.device_functions and "adj_kinetic_0(" in energy.device_functions
    assert "kinetic_0(" in energy.forward
    # each kernel alone in its module: nothing of the other kernels leaks in
    assert "kinetic" not in kernels["looped"].device_functions


@pytest.mark.parametrize(
    "name, needle",
    [
        ("looped", "for"),
        ("transform", "wp::transpose("),
        ("transform", "wp::cross("),
        ("histogram", "wp::atomic_add("),
        ("blur", "builtin_tid2d("),
        ("blur", "wp::launch_bounds_t<2>"),
    ],
)
def test_features_reach_the_cuda(kernels, name, needle):
    assert needle in kernels[name].forward


def test_nothing_of_the_machine_in_the_output(kernels, tmp_path):
    import getpass
    import os
    import socket

    text = "".join(k.translation_unit() for k in kernels.values())
    for needle in (
        str(tmp_path.parent),
        os.path.expanduser("~"),
        socket.gethostname(),
        getpass.getuser() + "/",
        str(os.getpid()),
    ):
        if len(needle) > 3:
            assert needle not in text


def test_loading_leaves_no_trace():
    import warp._src.context as wp_context

    before_lines = {k for k in linecache.cache if str(k).startswith("<cudagen")}
    before_modules = set(wp_context.user_modules)
    before_sys = {m for m in sys.modules if m.startswith("cudagen_src_")}
    for _ in range(3):
        extract_kernels(FEATURES_SOURCE)
    assert {k for k in linecache.cache if str(k).startswith("<cudagen")} == before_lines
    assert set(wp_context.user_modules) == before_modules
    assert {m for m in sys.modules if m.startswith("cudagen_src_")} == before_sys


def test_same_source_gives_same_cuda_regardless_of_history():
    first = extract_kernels(FEATURES_SOURCE)
    # defining other helpers in between must not shift Warp's function-name counters
    extract_kernels(
        "import warp as wp\n@wp.func\ndef kinetic(x: float):\n    return x\n@wp.kernel\ndef k(a: "
        "wp.array(dtype=float)):\n    a[0] = kinetic(1.0)\n"
    )
    again = extract_kernels(FEATURES_SOURCE)
    assert first == again


_DIGEST_SCRIPT = """
import sys, xxhash
from cudagen_data.extract import extract_kernels
src = sys.stdin.read()
print(xxhash.xxh3_128_hexdigest("".join(k.translation_unit() for k in extract_kernels(src)).encode()))
"""


def test_byte_identical_across_processes():
    digests = set()
    for warm_up in ("", "import warp as wp\n@wp.func\ndef kinetic(x: float):\n    return x\n"):
        script = (f"from cudagen_data.extract import extract_source\nextract_source({warm_up!r})\n") + _DIGEST_SCRIPT
        out = subprocess.run(
            [sys.executable, "-c", script], input=FEATURES_SOURCE, capture_output=True, text=True, check=True
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_bad_input_reports_file_lines_and_keeps_other_kernels():
    src = FEATURES_SOURCE + textwrap.dedent(
        """
        import not_installed_package_xyz

        @wp.kernel
        def broken(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = undefined_helper(i)
        """
    )
    report = extract_source(src)
    assert {k.name for k in report.kernels} == {"blur", "energy", "histogram", "looped", "transform"}
    lines = src.splitlines()
    messages = {e.message.split(":")[0]: e for e in report.errors}
    assert "ModuleNotFoundError" in messages
    assert "not_installed_package_xyz" in lines[messages["ModuleNotFoundError"].line - 1]
    broken = next(e for e in report.errors if e.kernel == "broken")
    assert "undefined_helper" in lines[broken.line - 1]
    assert "\n" not in broken.message


def test_syntax_error_and_no_kernel():
    report = extract_source("import warp as wp\ndef f(:\n    pass\n")
    assert report.errors[0].line == 2 and "SyntaxError" in report.errors[0].message
    with pytest.raises(ExtractError, match="no @wp.kernel"):
        extract_kernels("import warp as wp\nx = 1\n")


def test_compile_success(kernels):
    results = compile_units([kernels["energy"]], arch=86)
    assert results[0].ok and results[0].log == "" and results[0].arch == 86


def test_compile_failure_captures_nvrtc_log(kernels):
    bad = dataclasses.replace(
        kernels["looped"], forward=kernels["looped"].forward.replace("{", "{ this_is_not_cuda;", 1)
    )
    ok, log = nvrtc_compile(bad.translation_unit(), arch=86)
    assert not ok
    assert "this_is_not_cuda" in log and "error" in log


def test_bisection_isolates_one_bad_kernel_in_fifty():
    srcs = [
        f"import warp as wp\n@wp.func\ndef helper(x: float):\n    return x * {i}.0 + 1.0\n"
        f"@wp.kernel\ndef k{i}(a: wp.array(dtype=float)):\n    i = wp.tid()\n    a[i] = helper(a[i]) + "
        f"wp.cos(float({i}))\n"
        for i in range(50)
    ]
    batch = [extract_kernels(s)[0] for s in srcs]
    bad_at = 37
    batch[bad_at] = dataclasses.replace(
        batch[bad_at], forward=batch[bad_at].forward.replace("{", "{ int broken = ;", 1)
    )
    results = compile_units(batch, arch=86)
    assert [i for i, r in enumerate(results) if not r.ok] == [bad_at]
    assert "expected an expression" in results[bad_at].log


def test_unsupported_arch_is_a_clear_error(kernels):
    with pytest.raises(ValueError, match="not supported"):
        compile_units([kernels["energy"]], arch=12)


NORM_SOURCE = textwrap.dedent(
    """
    import warp as wp

    @wp.func
    def scaled(v: wp.vec3, k: float):
        return v * k

    @wp.kernel
    def norms(v: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = wp.norm_l1(scaled(v[i], 2.0))  # norm_l1 is a @wp.func of warp.math
    """
)


def test_executed_and_extracted_modules_are_freed():
    """A long-running worker must not keep the Warp modules of kernels it is done with.
    Warp links a module into the ``dependents`` set of each module it references
    (warp.math lives for the whole process), which once kept ~10 MB per 100 kernels."""
    import gc

    from warp._src.context import Module

    from cudagen_data.execution import execute_specs
    from cudagen_data.spec import ArgSpec, KernelSpec

    spec = KernelSpec(
        "vector",
        "norms",
        NORM_SOURCE,
        (ArgSpec("v", "array", "vec3", (8,)), ArgSpec("out", "array", "float32", (8,), "out")),
        (8,),
        "basic",
    )

    def alive() -> set[str]:
        gc.collect()
        return {
            o.name
            for o in gc.get_objects()
            if isinstance(o, Module) and o.name.startswith(("cudagen_src_", "cudagen_batch_"))
        }

    # modules an earlier test of this process keeps on purpose (eval's shared-memory scrub,
    # built once per process) are not this test's
    before = alive()
    for _ in range(2):
        extract_source(spec.python_source)
        assert execute_specs([spec])[0].ok
    assert alive() - before == set()
