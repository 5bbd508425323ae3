"""The dataset card's second configuration, ``real``: kernels mined from real Warp programs.

:func:`render_card_with_real` takes the synthetic configuration's card inputs (or none,
for a folder that only holds mined rows) and the ``real`` configuration's, and renders
one README: the YAML header lists both configurations with their own data files,
features and split sizes (``datasets.load_dataset(folder, "real")``), and the body gets
a section on how the real rows were mined and what was left out.
"""

from __future__ import annotations

import pyarrow as pa
import yaml

from cudagen_data.contracts.manifest import SPLITS
from cudagen_data.contracts.reject import REAL_REJECTS_FILE
from cudagen_data.contracts.row import PROVENANCE_DOCS
from cudagen_data.publish import card

CONFIG = "real"


def render_card_with_real(
    *,
    default: dict | None,
    real_split_files: dict[str, list[str]],
    real_counts: dict[str, int],
    real_schema: pa.Schema,
    real_stats: dict,
    real_num_bytes: dict[str, int] | None = None,
) -> str:
    """README.md for a folder with the ``real`` configuration (and ``default`` if given).

    ``default``: the keyword arguments of :func:`card.render_card` for the synthetic rows,
    or None when the folder holds mined rows only.
    """
    splits = [s for s in SPLITS if real_split_files.get(s)]
    real_info = {
        "config_name": CONFIG,
        "features": card.features_yaml(real_schema),
        "splits": [
            {"name": s, "num_bytes": int((real_num_bytes or {}).get(s, 0)), "num_examples": real_counts[s]}
            for s in splits
        ],
    }
    real_config = {
        "config_name": CONFIG,
        "data_files": [{"split": s, "path": list(real_split_files[s])} for s in splits],
    }
    if default is not None:
        text = card.render_card(**default)
        _, yaml_text, body = text.split("---\n", 2)
        header = yaml.safe_load(yaml_text)
        header["configs"].append(real_config)
        header["dataset_info"] = [{"config_name": "default", **header["dataset_info"]}, real_info]
        total = sum(s["num_examples"] for info in header["dataset_info"] for s in info["splits"])
        header["size_categories"] = [card.size_category(total)]
        body = body.lstrip("\n")
    else:
        header = {
            "license": card.LICENSE,
            "pretty_name": card.PRETTY_NAME,
            "language": ["code"],
            "task_categories": list(card.TASK_CATEGORIES),
            "tags": [t for t in card.TAGS if t != "synthetic"],
            "size_categories": [card.size_category(sum(real_counts.values()))],
            "configs": [{**real_config, "default": True}],
            "dataset_info": [real_info],
        }
        body = "# cudagen-data\n\nPairs of NVIDIA Warp kernels and the CUDA C++ Warp generates for them.\n"
    yaml_text = yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{yaml_text}---\n\n{body.rstrip()}\n\n{real_section(real_stats, real_counts)}\n"


def real_section(stats: dict, counts: dict[str, int]) -> str:
    """The body section on the ``real`` configuration."""
    figures = [
        ("files mined", card._fmt_int(stats.get("files", 0))),
        ("kernel definitions found (AST)", card._fmt_int(stats.get("kernel_definitions", 0))),
        ("kernels generated (each overload one)", card._fmt_int(stats.get("kernels_generated", 0))),
        ("rows", card._fmt_int(sum(counts.values()))),
        ("NVRTC compile pass rate", card._pct(stats.get("compile_pass_rate"))),
        ("compile check level", ", ".join(stats.get("compile_levels") or {}) or "none"),
        ("rows executed with test vectors", card._fmt_int(stats.get("executed", 0))),
    ]
    parts = [
        "## Configuration `real`: kernels mined from real Warp programs",
        REAL_INTRO,
        card._table(("split", "rows"), [(f"`{s}`", card._fmt_int(n)) for s, n in counts.items()]),
        card._table(("figure", "value"), figures),
        *_gradient_parts(stats),
    ]
    not_run = stats.get("not_executed_by_reason") or {}
    if not_run:
        parts.append("Rows not executed, by reason:\n\n" + _largest_first(("reason", "rows"), not_run))
    rejects = stats.get("rejects_by_reason") or {}
    if rejects:
        parts.append(
            f"Kernels not mined (listed one by one in `{REAL_REJECTS_FILE}`), by reason:\n\n"
            + _largest_first(("reason", "kernels"), rejects)
        )
    parts.append(
        "Columns: those of the default configuration, plus `provenance` (struct):\n\n"
        + card._table(("field", "meaning"), [(f"`provenance.{k}`", v) for k, v in PROVENANCE_DOCS.items()])
    )
    return "\n\n".join(parts)


def _gradient_parts(stats: dict) -> list[str]:
    """How mined backwards are checked, and the rows by verdict (none where none ran)."""
    grads = stats.get("gradient_check") or {}
    if not grads:
        return []
    parts = [
        "Backwards of executed rows are checked as the synthetic rows' are (Warp's tape gradient against central "
        "finite differences on probes, kinks re-probed, never called wrong), on the built kernel itself in "
        "**float32** (`gradient_check.precision`; tolerance 5e-2): a mined kernel needs its file, so no float64 "
        "twin is made. Unlike synthetic rows, a mined kernel whose adjoint disagrees is **kept** (it is real code, "
        'and its backward is what Warp really generates) with `gradient_check.status = "mismatch"` and the '
        "Warp construct responsible in `gradient_check.reason` where known: to train on verified backwards only, "
        "keep rows with status `verified`. Rows by `gradient_check.status`:\n\n"
        + card._table(("status", "rows"), [(f"`{k}`", card._fmt_int(v)) for k, v in sorted(grads.items())])
    ]
    constructs = stats.get("adjoint_mismatch_constructs") or {}
    if constructs:
        parts.append("Mismatching rows by construct:\n\n" + _largest_first(("construct", "rows"), constructs))
    return parts


def _largest_first(header: tuple[str, str], counts: dict[str, int]) -> str:
    """A table of ``counts``, largest first (ties by name)."""
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return card._table(header, [(f"`{k}`", card._fmt_int(v)) for k, v in rows])


REAL_INTRO = (
    '`datasets.load_dataset(..., "real")`. `cudagen mine` imports each file of a tree of Warp programs '
    "(by default the installed `warp-lang` package: its examples, tests and library) in a worker process "
    "with a time limit, collects every kernel Warp creates (kernels defined inside functions are re-created "
    "from their definition, without running the function), and keeps, per kernel (per overload of a "
    "generic kernel), the CUDA Warp generates for it: forward, backward and device functions, "
    "byte for byte what Warp generates when it loads the kernel's own module. "
    "Each pair is checked with NVRTC at the level `compile.level` names (`frontend` by default: NVRTC's front "
    "end with Warp's options; `ptx`: Warp's full compile), as the synthetic rows are; a kernel whose arguments "
    "can all be made up from their annotations "
    "(arrays of scalars, vectors, matrices; scalars) runs on Warp's CPU backend on seeded inputs and records "
    "`test_vectors`. Beyond the synthetic rows' `arg_specs`, a mined row's may hold: a parametric `dtype` for a "
    "vector, matrix, quaternion or transform type Warp has no name for (`vector(5,float32)`, `matrix(2,2,int8)`, "
    "`quaternion(float16)`, `transformation(float64)`); a `layout` key on arrays passed as "
    "`wp.indexedarray` (`indexed`: every dimension's indices in reverse), `wp.fabricarray` (`fabric`: two "
    "buckets, 3 elements then the rest) or `wp.indexedfabricarray` (`indexedfabric`: in reverse), whose values "
    "are the plain array behind them; and one spec per field of a struct argument, named `s.f` (a field array "
    "the run left unchanged has role `in`). Such kernels record no gradients. Every executed kernel is run again "
    "with its threads in reverse order: outputs and gradients that come out differently depend on thread order "
    "(a GPU may not reproduce them), are left out of `test_vectors` and named in `provenance.order_dependent`; "
    "a kernel left with no output is not executed. `python_source` is the kernel's own definition; it needs its "
    "file to run, which "
    "`provenance` names. Rows are deduplicated by the kernel's shape hash (and against the synthetic rows) "
    "and split by it, as the synthetic rows are. Comments Warp writes into device functions name files "
    "relative to the mined folder's parent, never a machine path."
)
