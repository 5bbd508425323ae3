"""The front-end compile check: Warp's exact NVRTC options, same verdict and error as Warp's
full compile on broken kernels, clear errors when the standalone NVRTC is wrong or missing."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os

import pytest

from cudagen_data.extract import extract_kernels, frontend, nvrtc_compile
from cudagen_data.extract.frontend import NvrtcUnavailable, frontend_check, frontend_options, nvrtc_info

SOURCE = """
import warp as wp

@wp.func
def helper(x: float):
    return x * 2.0 + 1.0

@wp.kernel
def k(a: wp.array(dtype=float), v: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    a[i] = helper(a[i]) + wp.length(v[i])
"""

# (what is injected into the forward, an error line both compilers must report)
BROKEN = {
    "undefined identifier": ("{ this_is_not_cuda;", 'identifier "this_is_not_cuda" is undefined'),
    "syntax": ("{ int broken = ;", "expected an expression"),
    "unknown builtin": ("{ float z = wp::addd(1.0f, 2.0f);", 'namespace "wp" has no member "addd"'),
    "type error": ("{ wp::vec3 z = wp::mat33();", "no suitable"),
}


@pytest.fixture(scope="module")
def kernel():
    return extract_kernels(SOURCE)[0]


def _error_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if ": error" in ln]


def test_options_are_warps_own(capfd, kernel, monkeypatch):
    # Warp prints the options it passes to NVRTC when WARP_DEBUG is set (warp/native/warp.cu).
    monkeypatch.setenv("WARP_DEBUG", "1")
    capfd.readouterr()
    assert nvrtc_compile(kernel.translation_unit(), arch=86)[0]
    printed = capfd.readouterr().out.split("NVRTC options:\n", 1)[1].splitlines()
    warp_opts = [ln for ln in printed if ln.startswith("-")]
    include_dir = frontend.warp_include_dir()
    assert warp_opts == frontend.warp_options(86, include_dir=include_dir)
    assert frontend_options(86) == warp_opts + ["--fdevice-syntax-only"]


def test_good_kernel_passes_and_info_is_recorded(kernel):
    assert frontend_check(kernel.translation_unit(), arch=86) == (True, "")
    info = nvrtc_info(90)
    assert info.package == "nvidia-cuda-nvrtc" and info.version == "13.4.92"
    assert "--gpu-architecture=sm_90" in info.options and info.options[-1] == "--fdevice-syntax-only"


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_kernel_fails_like_the_full_compile(kernel, kind):
    inject, expected = BROKEN[kind]
    bad = dataclasses.replace(kernel, forward=kernel.forward.replace("{", inject, 1)).translation_unit()
    ok_fe, log_fe = frontend_check(bad, arch=86)
    ok_full, log_full = nvrtc_compile(bad, arch=86)
    assert not ok_fe and not ok_full
    assert expected in log_fe
    assert _error_lines(log_fe) == _error_lines(log_full)


def test_log_has_no_machine_path(kernel):
    # an error inside a Warp header template: NVRTC's notes name the header by absolute path
    bad = dataclasses.replace(kernel, forward=kernel.forward.replace("{", "{ auto z = wp::address(1, 2, 3);", 1))
    ok, log = frontend_check(bad.translation_unit(), arch=86)
    assert not ok and "warp/native/array.h" in log
    assert frontend.warp_include_dir() not in log and os.sep + "site-packages" not in log


def _version_is(monkeypatch, versions: dict[str, str]) -> None:
    real = importlib.metadata.version

    def fake(name):
        if name in versions:
            if versions[name] is None:
                raise importlib.metadata.PackageNotFoundError(name)
            return versions[name]
        return real(name)

    monkeypatch.setattr(frontend.importlib.metadata, "version", fake)


def test_mismatched_nvrtc_names_the_package_to_install(monkeypatch):
    _version_is(monkeypatch, {"nvidia-cuda-nvrtc": "13.5.37"})
    with pytest.raises(NvrtcUnavailable) as exc:
        frontend._Nvrtc()
    message = str(exc.value)
    assert "pip install nvidia-cuda-nvrtc==13.4.92" in message and "found 13.5.37" in message and "\n" not in message


def test_missing_nvrtc_names_the_package_to_install(monkeypatch):
    _version_is(monkeypatch, {"nvidia-cuda-nvrtc": None})
    with pytest.raises(NvrtcUnavailable, match=r"pip install nvidia-cuda-nvrtc==13\.4\.92 \(not installed\)"):
        frontend._Nvrtc()


def test_unknown_warp_version_is_a_clear_error(monkeypatch):
    _version_is(monkeypatch, {"warp-lang": "9.9.9"})
    with pytest.raises(NvrtcUnavailable, match="warp-lang 9.9.9: its NVRTC version is not known"):
        frontend._Nvrtc()


def test_unsupported_arch_is_a_clear_error(kernel):
    with pytest.raises(ValueError, match="arch 12 is not supported by NVRTC 13.4.92"):
        frontend_check(kernel.translation_unit(), arch=12)


def test_check_leaves_no_files_behind(kernel):
    # NVRTC's automatic precompiled headers (-pch) would leave ~76 MB per process in /tmp.  What
    # was there before is not the check's: an earlier build of this process may have asked for a
    # header (the GPU suite's dry run does, warp_boundary/modules.py) and NVRTC keeps it until exit
    import glob

    def ours() -> set[str]:
        return set(glob.glob(f"/tmp/__nvrtc_auto_pch_{os.getpid()}_*/**", recursive=True))

    before = ours()
    for _ in range(2):
        assert frontend_check(kernel.translation_unit(), arch=86)[0]
    bad = dataclasses.replace(kernel, forward=kernel.forward.replace("{", "{ this_is_not_cuda;", 1))
    ok, log = frontend_check(bad.translation_unit(), arch=86)
    assert not ok and log.splitlines()[0].startswith("cudagen.cu(") and "precompiled" not in log
    assert ours() == before
