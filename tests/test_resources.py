"""`cudagen produce --resources`: ptxas's report per kernel, the `resources` column, its
summary in stats.json and the card, and `cudagen validate`'s re-check.

Each field is tested on a hand-written kernel whose figure is known independently of the
code under test: a register cap (`--maxrregcount`) that a kernel with high register
pressure must hit exactly and spill past; a `__shared__` array of a known size; a local
array indexed at run time (it cannot live in registers, so it is the stack frame); the
PTX that NVRTC hands out.
"""

from __future__ import annotations

import ctypes
import dataclasses
import statistics
import subprocess
import sys

import orjson
import pytest

from cudagen_data.contracts.row import ResourceInfo, Row
from cudagen_data.contracts.stats import ResourceTally, RunStats, histogram_median
from cudagen_data.extract import extract_kernels, frontend
from cudagen_data.extract.resources import (
    ResourceError,
    entry_name,
    measure_kernel,
    measure_unit,
    parse_ptxas_report,
)
from cudagen_data.pipeline.config import ProduceConfig, command_line
from cudagen_data.publish.card import _resources_section
from cudagen_data.validate import PTX_BYTES_TOLERANCE, check_resources

# 48 accumulators live at once through a loop: far more than 24 registers hold.
PRESSURE = r"""
extern "C" __global__ void pressure_cuda_kernel_forward(const float* x, float* y, int n) {
    float acc[48];
    #pragma unroll
    for (int j = 0; j < 48; j++) acc[j] = x[(threadIdx.x * 48 + j) % n];
    for (int r = 0; r < 16; r++) {
        #pragma unroll
        for (int j = 0; j < 48; j++) acc[j] = acc[j] * acc[(j + r + 1) % 48] + x[(j * r) % n];
    }
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < 48; j++) s += acc[j];
    y[threadIdx.x] = s;
}
"""

LIGHT = r"""
extern "C" __global__ void light_cuda_kernel_forward(float* y) {
    y[threadIdx.x] = 1.0f;
}
"""

SHARED_FORWARD = r"""
extern "C" __global__ void tiles_cuda_kernel_forward(float* y) {
    __shared__ float tile[300];
    tile[threadIdx.x] = threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = tile[299 - threadIdx.x];
}
"""

# The loop bound comes from an argument: `loc` is indexed at run time, so it is local memory.
LOCAL_BACKWARD = r"""
extern "C" __global__ void tiles_cuda_kernel_backward(float* y, int n, int k) {
    float loc[64];
    for (int j = 0; j < 64; j++) loc[j] = 0.0f;
    for (int j = 0; j < n; j++) loc[(j * 7 + k) & 63] += y[j];
    y[threadIdx.x] = loc[k & 63];
}
"""

WARP_SOURCE = """
import warp as wp

@wp.func
def helper(x: float):
    return wp.sin(x) * 2.0 + 1.0

@wp.kernel
def k(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid()
    b[i] = helper(a[i]) * a[i]
"""


def _fields(kind: str, r: ResourceInfo) -> dict:
    names = [f.name for f in dataclasses.fields(r) if f.name.startswith(kind)]
    return {name.removeprefix(f"{kind}_"): getattr(r, name) for name in names}


# ------------------------------------------------------------------ per field, known kernels


def test_registers_hit_a_forced_cap_exactly_and_spills_appear_past_it():
    free = measure_unit(PRESSURE, PRESSURE, "", arch=86)
    capped = measure_unit(PRESSURE, PRESSURE, "", arch=86, extra_options=("--maxrregcount=24",))
    assert free.forward_registers > 24  # the kernel needs more than the cap...
    assert capped.forward_registers == 24  # ...so ptxas uses exactly the cap
    assert free.forward_spill_store_bytes == 0 and free.forward_spill_load_bytes == 0
    assert capped.forward_spill_store_bytes > 0 and capped.forward_spill_load_bytes > 0
    assert capped.spills and not free.spills
    # spilled registers live in the stack frame: it grows by at least what is stored
    assert capped.forward_local_bytes >= free.forward_local_bytes + 4


def test_a_light_kernel_uses_few_registers_and_no_memory():
    r = measure_unit(LIGHT, LIGHT, "", arch=86)
    assert 1 <= r.forward_registers <= 8
    assert (r.forward_shared_bytes, r.forward_local_bytes, r.forward_spill_store_bytes) == (0, 0, 0)


def test_static_shared_memory_and_local_memory_are_the_declared_arrays():
    unit = SHARED_FORWARD + LOCAL_BACKWARD
    r = measure_unit(unit, SHARED_FORWARD, LOCAL_BACKWARD, arch=86)
    assert r.forward_shared_bytes == 300 * 4  # float tile[300]
    assert r.forward_local_bytes == 0
    assert r.backward_local_bytes == 64 * 4  # float loc[64], indexed at run time
    assert r.backward_shared_bytes == 0
    assert r.backward_spill_store_bytes == 0 and r.backward_spill_load_bytes == 0


def test_ptx_bytes_is_the_ptx_nvrtc_emits():
    r = measure_unit(LIGHT, LIGHT, "", arch=86)
    # Independently: the PTX text itself, fetched from NVRTC with the same options.
    lib = frontend._nvrtc().lib
    lib.nvrtcGetPTX.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), LIGHT.encode(), b"x.cu", 0, None, None)
    opts = [o.encode() for o in frontend._nvrtc().options(86, ["--ptxas-options=-v"])]
    assert lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) == 0
    size = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    ptx = buf.value
    assert b".entry light_cuda_kernel_forward" in ptx
    assert r.ptx_bytes == len(ptx)
    bigger = measure_unit(LIGHT + SHARED_FORWARD, LIGHT, "", arch=86)
    assert bigger.ptx_bytes > r.ptx_bytes  # a second kernel in the unit is in its PTX


def test_the_arch_is_the_one_built_for_and_changes_the_figures():
    unit = SHARED_FORWARD + LOCAL_BACKWARD
    sm86 = measure_unit(unit, SHARED_FORWARD, LOCAL_BACKWARD, arch=86)
    sm90 = measure_unit(unit, SHARED_FORWARD, LOCAL_BACKWARD, arch=90)
    assert (sm86.arch, sm90.arch) == (86, 90)
    assert sm86.forward_shared_bytes == sm90.forward_shared_bytes == 1200


def test_a_warp_kernel_reports_forward_and_backward():
    kernel = extract_kernels(WARP_SOURCE)[0]
    r = measure_kernel(kernel, arch=86)
    for kind in ("forward", "backward"):
        f = _fields(kind, r)
        assert all(isinstance(v, int) and v >= 0 for v in f.values()), f
        assert f["registers"] > 0
    assert r.ptx_bytes > 1000
    assert measure_kernel(kernel, arch=86) == r  # deterministic: validate relies on it


def test_no_backward_gives_null_backward_fields():
    r = measure_unit(LIGHT, LIGHT, "", arch=86)
    assert all(v is None for v in _fields("backward", r).values())


def test_a_kernel_that_does_not_build_or_is_not_reported_raises():
    with pytest.raises(ResourceError, match="full compile failed"):
        measure_unit(LIGHT + "\nint broken = ;", LIGHT, "", arch=86)
    with pytest.raises(ResourceError, match="reported nothing on the backward"):
        measure_unit(LIGHT, LIGHT, SHARED_FORWARD, arch=86)  # not in the unit


def test_parse_ptxas_report():
    log = """ptxas info    : 151 bytes gmem
ptxas info    : Function properties for helper_0
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Compiling entry function 'a_cuda_kernel_backward' for 'sm_86'
ptxas info    : Function properties for a_cuda_kernel_backward
ptxas         .     32 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 29 registers, used 0 barriers, 32 bytes cumulative stack size, 1060 bytes smem, 616 bytes cmem[0]
ptxas info    : Compile time = 97.501 ms
ptxas info    : Compiling entry function 'a_cuda_kernel_forward' for 'sm_86'
ptxas info    : Function properties for a_cuda_kernel_forward
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 26 registers, used 0 barriers, 496 bytes cmem[0]
"""
    got = parse_ptxas_report(log)
    assert set(got) == {"a_cuda_kernel_backward", "a_cuda_kernel_forward"}  # helper_0 is no entry
    b, f = got["a_cuda_kernel_backward"], got["a_cuda_kernel_forward"]
    assert (b.arch, b.registers, b.spill_store_bytes, b.spill_load_bytes, b.shared_bytes, b.local_bytes) == (
        86,
        29,
        16,
        12,
        1060,
        32,
    )
    assert (f.registers, f.shared_bytes, f.local_bytes) == (26, 0, 0)  # no smem on the line: none


def test_entry_name():
    assert entry_name(SHARED_FORWARD) == "tiles_cuda_kernel_forward"
    assert entry_name("") is None


# ------------------------------------------------------------------ stats, card, config


def _info(regs: int, bwd: int | None, spill: int = 0) -> ResourceInfo:
    return ResourceInfo(86, 100, regs, spill, spill, 0, 0, bwd, 0 if bwd else None, 0 if bwd else None, 0, 0)


@pytest.mark.parametrize(
    "values, median",
    [([], None), ([5], 5), ([1, 3], 2), ([3, 1, 2], 2), ([1, 1, 1, 9], 1), ([1, 2, 2, 9], 2), ([7, 8, 9, 10], 8.5)],
)
def test_histogram_median(values, median):
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    assert histogram_median(counts) == median
    if values:
        assert histogram_median(counts) == statistics.median(values)


def test_stats_summarise_resources_per_category_and_survive_the_run_state():
    stats = RunStats.new(("a", "b"), ("train",))
    stats.count_row("a", "basic", "train", 1, 1, "verified", _info(20, 30))
    stats.count_row("a", "basic", "train", 1, 1, "verified", _info(40, 50, spill=8))
    stats.count_row("a", "basic", "train", 1, 1, "forward_only", _info(25, None))
    stats.count_row("b", "basic", "train", 1, 1, "verified", None)  # not measured: not counted
    stats = RunStats.from_json(orjson.loads(orjson.dumps(stats.to_json())))
    res = stats.to_stats_json(fast=False)["resources"]
    assert res["by_category"] == {
        "a": {"rows": 3, "median_forward_registers": 25, "median_backward_registers": 40, "rows_with_spills": 1}
    }
    assert res["all"]["rows"] == 3
    assert RunStats.new(("a",), ("train",)).to_stats_json(fast=False)["resources"] is None
    total = ResourceTally()
    total.merge(ResourceTally.from_json(stats.resources["a"]))
    assert total.summary() == res["all"]


def test_card_section_only_with_resources():
    assert _resources_section({}) == ""
    stats = RunStats.new(("a",), ("train",))
    stats.count_row("a", "basic", "train", 1, 1, "verified", _info(20, 30, spill=4))
    text = _resources_section(stats.to_stats_json(fast=False))
    assert "## Kernel resources" in text
    assert "| `a` | 1 | 20 | 30 | 1 |" in text


def test_config_and_command_line():
    with pytest.raises(ValueError, match="--resources"):
        ProduceConfig(count=1, categories=("a",), fast=True, resources=True)
    on = ProduceConfig(count=1, categories=("a",), resources=True)
    assert "--resources" in command_line(on)
    assert ProduceConfig.from_dict(on.to_dict()) == on
    off = ProduceConfig(count=1, categories=("a",))
    assert "resources" not in off.to_dict()  # older folders keep their fingerprint
    assert ProduceConfig.from_dict(off.to_dict()) == off


def test_cli_rejects_resources_with_fast(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "cudagen_data.cli", "produce", "-n", "1", "--fast", "--resources", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: --resources builds every kernel to machine code: it cannot be combined with --fast"
    ]


# ------------------------------------------------------------------ validate's re-check


def _row_of(kernel) -> tuple[Row, str]:
    from test_produce import _outcome  # a minimal Row

    row = dataclasses.replace(
        _outcome(0, "a", "p", "c").row,
        device_functions=kernel.device_functions,
        cuda_forward=kernel.forward,
        cuda_backward=kernel.backward,
        resources=measure_kernel(kernel, arch=86),
    )
    return row, kernel.preamble


def test_validate_accepts_true_figures_and_catches_each_wrong_one():
    kernel = extract_kernels(WARP_SOURCE)[0]
    row, preamble = _row_of(kernel)
    assert check_resources(row, preamble) == []
    figures = dataclasses.asdict(row.resources)
    for name, value in figures.items():
        if name == "arch":
            continue
        if name == "ptx_bytes":  # checked to PTX_BYTES_TOLERANCE: NVVM's register numbering varies
            near = dataclasses.replace(row, resources=dataclasses.replace(row.resources, ptx_bytes=value + 1))
            assert check_resources(near, preamble) == []
            value = int(value * (1 + 2 * PTX_BYTES_TOLERANCE)) - 1
        wrong = dataclasses.replace(row, resources=dataclasses.replace(row.resources, **{name: value + 1}))
        problems = check_resources(wrong, preamble)
        assert len(problems) == 1 and problems[0].startswith(f"resources.{name} is {value + 1}"), problems
    # figures of another arch than the recorded one
    sm90 = measure_kernel(kernel, arch=90)
    assert sm90 != row.resources
    relabelled = dataclasses.replace(row, resources=dataclasses.replace(sm90, arch=86))
    assert check_resources(relabelled, preamble)
    # a backward dropped from the figures while the row has one
    dropped = dataclasses.replace(row, resources=dataclasses.replace(row.resources, backward_registers=None))
    assert check_resources(dropped, preamble) == [
        f"resources.backward_registers is None, the compiler reports {figures['backward_registers']}"
    ]
    # a row whose CUDA no longer builds
    broken = dataclasses.replace(row, cuda_forward=row.cuda_forward.replace("{", "{ int broken = ;", 1))
    assert check_resources(broken, preamble)[0].startswith("not rebuilt: the full compile failed")
