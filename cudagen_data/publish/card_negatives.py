"""The dataset card's ``negatives`` configuration (``cudagen negatives``).

:func:`with_negatives` takes the folder's card as the other writers rendered it (the
synthetic and/or ``real`` configurations) and adds the ``negatives`` configuration to its
YAML header (data files, features, split sizes: ``datasets.load_dataset(folder,
"negatives")``) and a body section: what a negative is, how each was proven, the kinds,
and the counts by kind, stage and category.  Applied again it replaces what it added.
"""

from __future__ import annotations

import pyarrow as pa
import yaml

from cudagen_data.contracts.manifest import SPLITS
from cudagen_data.contracts.negative import NEGATIVE_COLUMN_DOCS, NEGATIVES_CONFIG
from cudagen_data.publish import card

SECTION_TITLE = "## Configuration `negatives`: kernels proven wrong"
KIND_COLUMNS = ("kind", "stage", "the wrong kernel", "rows allowing", "shipped", "fair share", "shipped / fair",
                "tried", "discarded")  # fmt: skip


def with_negatives(
    readme: str,
    *,
    split_files: dict[str, list[str]],
    counts: dict[str, int],
    schema: pa.Schema,
    stats: dict,
    kind_docs: dict[str, str],
    kind_stages: dict[str, str],
    num_bytes: dict[str, int] | None = None,
) -> str:
    """``readme`` with the negatives configuration in its header and body (replacing an earlier one)."""
    splits = [s for s in SPLITS if split_files.get(s)]
    info = {
        "config_name": NEGATIVES_CONFIG,
        "features": card.features_yaml(schema),
        "splits": [
            {"name": s, "num_bytes": int((num_bytes or {}).get(s, 0)), "num_examples": counts[s]} for s in splits
        ],
    }
    config = {
        "config_name": NEGATIVES_CONFIG,
        "data_files": [{"split": s, "path": list(split_files[s])} for s in splits],
    }
    if readme.startswith("---\n"):
        _, yaml_text, body = readme.split("---\n", 2)
        header = yaml.safe_load(yaml_text)
    else:
        header = {"license": card.LICENSE, "pretty_name": card.PRETTY_NAME, "configs": [], "dataset_info": []}
        body = readme
    header["configs"] = [c for c in header.get("configs", []) if c.get("config_name") != NEGATIVES_CONFIG] + [config]
    infos = header.get("dataset_info") or []
    if isinstance(infos, dict):  # a single configuration's info has no config_name
        infos = [{"config_name": "default", **infos}]
    header["dataset_info"] = [i for i in infos if i.get("config_name") != NEGATIVES_CONFIG] + [info]
    body = body.split(f"\n{SECTION_TITLE}\n", 1)[0].rstrip()
    yaml_text = yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=1000)
    section = negatives_section(stats, counts, kind_docs, kind_stages)
    return f"---\n{yaml_text}---\n\n{body.lstrip()}\n\n{section}\n"


def _balanced(fair: dict) -> str:
    if fair.get("ratio_min") is None:
        return "n/a"
    verdict = "yes" if fair["balanced"] else "**no**"
    return f"{verdict} ({fair['ratio_min']:.2f} to {fair['ratio_max']:.2f}; factor {fair['factor']:g})"


def _counts_table(label: str, counts: dict[str, int]) -> str:
    return card._table((label, "negatives"), [(f"`{k}`", card._fmt_int(v)) for k, v in counts.items()])


def negatives_section(
    stats: dict, counts: dict[str, int], kind_docs: dict[str, str], kind_stages: dict[str, str]
) -> str:
    shipped = stats.get("by_kind", {})
    candidates = stats.get("candidates_by_kind", {})
    allowed = stats.get("rows_allowing_kind", {})
    fair = stats.get("balance") or {}
    kinds_rows = []
    for kind, doc in kind_docs.items():
        c = candidates.get(kind, {})
        discarded = sum(c.get("discarded", {}).values())
        share, ratio = fair.get("fair_share", {}).get(kind), fair.get("shipped_over_fair", {}).get(kind)
        kinds_rows.append((f"`{kind}`", f"`{kind_stages[kind]}`", doc, card._fmt_int(allowed.get(kind, 0)),
                           card._fmt_int(shipped.get(kind, 0)), "" if share is None else f"{share:.1f}",
                           "" if ratio is None else f"{ratio:.2f}", card._fmt_int(c.get("tried", 0)),
                           card._fmt_int(discarded)))  # fmt: skip
    parts = [
        SECTION_TITLE,
        '`datasets.load_dataset(..., "negatives")`. Wrong kernels for training critics, reward models and '
        "preference pairs: each is made from a row of this dataset (`positive_id`; synthetic or mined, "
        "`positive_config`) by one edit of a kind listed below, and each is **proven wrong on a CPU machine** at the "
        "stage of `cudagen eval` that rejects it (`stage`), with the proof in `evidence`: the structure rule it "
        "breaks; NVRTC's first error (after passing the structure stage); or, for run-stage kinds (after passing "
        "the structure and compile stages), the CPU witness: the same edit applied to the function Warp generates "
        "for the CPU (statement for statement the CUDA's; an edit that changes other lines there is not trusted), "
        "run through the run stage's own judging (the row's recorded inputs and fresh ones, guard cells, the "
        "GPU suite's tolerance model), with the first output or gradient that differs and its error. "
        "`bounds_check_dropped` is witnessed by the positive's CPU kernel on the launch widened to whole GPU "
        "blocks; `race` by the lost-update model of its read-modify-write (every thread of a contended element "
        "reads it before any writes); `wrong_backward` by the edited backward against the row's recorded input "
        "gradients, which agree with central finite differences of the forward (rows whose gradient check says "
        "`verified` only). A candidate the witness cannot tell apart from the positive is not a negative and is "
        "not shipped (counted below). Mined (`real`) rows get structure and compile negatives only: their "
        "Python source is the kernel's own definition, which needs its file to run. A negative lives in its "
        "positive's split, so no split leaks. `diff` is the "
        "unified diff from the positive's CUDA; `cuda_backward` is the positive's except for `wrong_backward`.",
        card._table(("split", "negatives"), [(f"`{s}`", card._fmt_int(n)) for s, n in counts.items()]),
        "Kinds (positive rows that allow the kind; negatives shipped; the kind's fair share and shipped / fair "
        "share; candidates tried and discarded). Each row's kinds are tried least-chosen first, so kinds are "
        "balanced against what the rows allow. The fair share spreads the negatives evenly over the kinds, no "
        "kind getting more than the rows that allow it (`race` needs an atomic, `wrong_backward` a verified "
        "gradient); a row whose run-stage candidates were discarded takes more structure and compile "
        "candidates, so that it has its negatives:\n\n" + card._table(KIND_COLUMNS, kinds_rows),
        "By stage:\n\n" + _counts_table("stage", stats.get("by_stage", {})),
        "By category of the positive:\n\n" + _counts_table("category", stats.get("by_category", {})),
        card._table(
            ("figure", "value"),
            [
                ("positive rows", card._fmt_int(stats.get("positives", 0))),
                ("negatives per positive", f"{stats.get('per_positive', 0):.2f}"),
                ("run-stage candidates proven by the CPU witness", card._pct(stats.get("run_proven_rate"))),
                ("kinds balanced (shipped / fair share of every kind within a factor of 2)", _balanced(fair)),
            ],
        ),
        "Columns:\n\n" + card._table(("column", "meaning"), [(f"`{k}`", v) for k, v in NEGATIVE_COLUMN_DOCS.items()]),
    ]
    return "\n\n".join(parts)
