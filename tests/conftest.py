"""Suite-wide set-up of the CPU suite (also loaded, and then inert, for tests/gpu).

- **Two workers by default.** The README's command (``pytest -q``, no paths: the
  ``testpaths`` of pyproject.toml) runs on two pytest-xdist workers when pytest-xdist is
  installed (the ``test`` extra brings it): ``-n 2`` is added unless the command line says
  ``-n``/``--numprocesses`` itself (``-n 0`` runs serially) or ``-p no:xdist``.  A command
  that names paths or tests (``pytest tests/test_eval.py``, the GPU suite's ``pytest
  tests/gpu -m gpu``) runs serially unless it says ``-n``; without pytest-xdist everything
  runs serially, as before.
- **A test module per worker.** Module-scoped fixtures (a reference dataset, a scorer) are
  built once per module, so whole modules go to the workers (xdist's loadfile), the
  costliest first (measured figures below).  The Ray module runs beside another module:
  tests/test_ray.py starts Ray's workers at normal priority (Ray's default, nice 15, is what
  starved it beside other work).
- **Shared artefacts.** What several tests make the same way (kernel_rows' rows) is made
  once per run, by whichever worker asks first, under a file lock (tests/shared.py); this
  makes the run's folder for it.  Warp's CPU precompiled header is shared the same way
  (``CUDAGEN_CPU_PCH_DIR``, a folder in it): built by the first process, copied by the rest.
- **Bytecode compiled once.** The package and the tests are compiled to ``__pycache__`` before
  the workers start: with ``PYTHONDONTWRITEBYTECODE`` set, every process would compile them again.
"""

from __future__ import annotations

import compileall
import os
import shutil
import tempfile

import pytest
import shared

from cudagen_data.warp_boundary.runtime import CPU_PCH_ENV

WORKERS = 2
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Seconds per module (tests' durations summed; a run on 2 workers beside other work): only
# their order matters, costliest first, so that no big module starts last.  A module not
# listed comes after these, by test count.
MODULE_SECONDS = {
    "tests/test_faults.py": 400,
    "tests/test_produce.py": 264,
    "tests/test_ray.py": 222,
    "tests/test_eval.py": 152,
    "tests/test_mine.py": 116,
    "tests/test_negatives.py": 86,
    "tests/test_gpu_cli.py": 83,
    "tests/test_generators_ml.py": 69,
    "tests/test_compile_agreement.py": 66,
    "tests/test_compile_level.py": 60,
    "tests/test_mine_kinds.py": 55,
    "tests/test_cross_env_determinism.py": 51,
    "tests/test_shards.py": 51,
    "tests/test_golden.py": 49,
    "tests/test_lock.py": 49,
    "tests/test_timing.py": 48,
    "tests/test_cpu_build.py": 44,
    "tests/test_bad_inputs.py": 42,
    "tests/test_gradcheck_rows.py": 36,
    "tests/test_resources.py": 33,
    "tests/test_sizes_inputs.py": 31,
    "tests/test_extract.py": 30,
    "tests/test_no_machine_paths.py": 27,
    "tests/test_cli_extract.py": 24,
    "tests/test_structure.py": 22,
    "tests/test_generators_basic.py": 19,
}


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-n 2`` for the README's ``pytest -q`` where pytest-xdist is installed (see above).
    Called before xdist's own hook, which turns ``numprocesses`` into workers."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    if config.option.numprocesses is not None or config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return
    if config.getoption("usepdb", False) or config.getoption("collectonly", False):
        return
    config.option.numprocesses = WORKERS
    if config.option.dist == "no":
        config.option.dist = "loadfile"  # a module per worker, ordered by the scheduler below
    config.option.tx = ["popen"] * WORKERS


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` (what ``pytest -q`` gets here): whole modules, the costliest first.
    Any other ``--dist`` keeps xdist's own scheduler."""
    if config.getoption("dist") != "loadfile":
        return None
    return _module_scheduler()(config, log)


def _module_scheduler():
    from xdist.scheduler import LoadFileScheduling  # only where xdist runs the session

    class ModuleScheduling(LoadFileScheduling):
        """xdist's loadfile (a module is one work unit, handed to a worker when it has at most
        two tests left), with the units queued costliest first."""

        _ordered = False

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:  # the first assignment: the queue, all of it, in our order
                units = dict(self.workqueue)
                self.workqueue.clear()
                for scope in sorted(units, key=lambda s: (-MODULE_SECONDS.get(s, 0.0), -len(units[s]), s)):
                    self.workqueue[scope] = units[scope]
                self._ordered = True
            super()._assign_work_unit(node)

    return ModuleScheduling


# --------------------------------------------------------------------------- shared artefacts


def pytest_configure(config: pytest.Config) -> None:
    """The run's folder of shared artefacts (tests/shared.py), made by the main process;
    xdist workers, started after this, inherit it."""
    if hasattr(config, "workerinput") or os.environ.get(shared.ENV):
        return
    # The run starts ~290 Python processes, most importing the package; where
    # PYTHONDONTWRITEBYTECODE is set (these machines) none keeps the bytecode it compiles, so
    # each compiles the package again.  Compiled once here, before the first worker starts
    # (__pycache__ is ignored by git and by the copies test_cross_env_determinism makes).
    for tree in ("cudagen_data", "tests"):
        compileall.compile_dir(os.path.join(REPO, tree), quiet=1)
    folder = tempfile.mkdtemp(prefix="cudagen-tests-shared-")
    os.environ[shared.ENV] = folder
    # ~60 processes of the run build Warp CPU modules; each would build clang's header of Warp's
    # builtin.h first (~1.5 CPU-s): the first leaves it here, the others start from it
    # (warp_boundary/runtime.py, tests/test_cpu_build.py)
    pch = os.environ.setdefault(CPU_PCH_ENV, os.path.join(folder, "cpu-pch"))
    config.add_cleanup(lambda: (os.environ.pop(shared.ENV, None), shutil.rmtree(folder, ignore_errors=True)))
    if pch.startswith(folder):
        config.add_cleanup(lambda: os.environ.pop(CPU_PCH_ENV, None))
