"""Independent audit of a dataset's shipped backwards (issue #12).

For every row that ships a backward, the *recorded* input gradients (Warp's float32 tape:
what ``cuda_backward`` computes) are compared with central finite differences of the
row's forward in float64 (the float64 twin of numerics/twin.py; the float32 kernel where Warp
has no twin), at the recorded inputs with the recorded output seeds.  It shares nothing
with the producer's check (cudagen_data/gradcheck.py) but Warp launches: its own
probes (random elements, and one random direction over all elements of each input,
seeded apart from the producer's), its own steps (Richardson
extrapolation of two central differences), its own kink test (a 4x larger step must
agree), its own tolerance (float32 tape vs exact: 10% of the gradient scale).

    python benchmarks/audit_gradients.py --count 1000 --workers 2      # a fresh dataset
    python benchmarks/audit_gradients.py --dataset data/production      # an existing one

Prints per category: rows, rows with a verified backward (%), forward-only, audited,
disagreements; and the totals against the targets (0 shipped disagreements, >= 85% of
rows verified, >= 60% in every category).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBES = 4  # random elements per float input array (and one random direction over all its elements)
TOL = 0.1  # |recorded - fd| / (|fd| + 1e-2 * scale): recorded float32 grads vs float64 differences


def _rows(folder: Path) -> list[dict]:
    rows = []
    for path in sorted((folder / "jsonl").glob("*.jsonl")):
        rows += [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return rows


def audit(rows: list[dict], seed: int = 2026) -> dict:
    from cudagen_data import warp_boundary
    from cudagen_data.contracts.read import row_to_spec
    from cudagen_data.contracts.row import row_from_dict
    from cudagen_data.contracts.test_vectors import decode_value
    from cudagen_data.execution import CPU_OPT_LEVEL, launch, to_warp
    from cudagen_data.numerics.twin import TwinUnavailable, twin_spec, widen_all
    from cudagen_data.spec import is_float_dtype

    per = collections.defaultdict(collections.Counter)
    worst: list[tuple[float, str, str]] = []
    todo = []
    for row in rows:
        cat = row["category"]
        per[cat]["rows"] += 1
        status = (row.get("gradient_check") or {}).get("status", "none")
        per[cat][f"status_{status}"] += 1
        if not row["cuda_backward"] or not row["test_vectors"]:
            continue
        tv = orjson.loads(row["test_vectors"])
        if not tv["input_grads"]:
            continue
        spec = row_to_spec(row_from_dict(row))
        inputs = {n: decode_value(v) for n, v in tv["inputs"].items()}
        seeds = {n: decode_value(v) for n, v in tv["output_grads"].items()}
        recorded = {n: np.asarray(decode_value(v), dtype=np.float64) for n, v in tv["input_grads"].items()}
        try:
            twin = twin_spec(spec)
            todo.append((row, twin, widen_all(inputs, spec.args), widen_all(seeds, spec.args), recorded, "float64"))
        except (TwinUnavailable, SyntaxError):
            todo.append((row, spec, inputs, seeds, recorded, "float32"))

    diverged = []  # rows whose float64 twin computes another function at the recorded inputs

    def run_group(group):
        sources = [(t[1].python_source, t[1].kernel_name) for t in group]
        with warp_boundary.batch_module(sources, optimization_level=CPU_OPT_LEVEL) as (module, kernels, errors):
            if any(k is None for k in kernels) or warp_boundary.build_module(module, "cpu") is not None:
                return False  # a twin Warp rejects: audit those in float32, one by one
            for item, kernel in zip(group, kernels, strict=False):
                if _audit_one(item, kernel, per, worst, seed, launch, to_warp, is_float_dtype) == "diverged":
                    diverged.append(item)
        return True

    def float32_item(row):
        spec = row_to_spec(row_from_dict(row))
        tv = orjson.loads(row["test_vectors"])
        inputs = {n: decode_value(v) for n, v in tv["inputs"].items()}
        seeds = {n: decode_value(v) for n, v in tv["output_grads"].items()}
        recorded = {n: np.asarray(decode_value(v), dtype=np.float64) for n, v in tv["input_grads"].items()}
        return (row, spec, inputs, seeds, recorded, "float32")

    chunk = 50
    for start in range(0, len(todo), chunk):
        group = todo[start : start + chunk]
        if not run_group(group):
            for item in group:
                if not run_group([item]):
                    run_group([float32_item(item[0])])
    # A float64 twin whose outputs differ from the recorded float32 ones (an int cast at a
    # rounding boundary: float32 2.6 * 5 = 12.9999995 -> 12, float64 -> 13) is another
    # function there: its differences say nothing of the float32 backward.  Audited in
    # float32, the row's own precision, instead.
    for item in diverged:
        per[item[0]["category"]]["twin_diverged"] += 1
        run_group([float32_item(item[0])])
    return {"per": per, "worst": sorted(worst, reverse=True)[:10]}


def _audit_one(item, kernel, per, worst, seed, launch, to_warp, is_float_dtype) -> None:
    row, spec, inputs, seeds, recorded, precision = item
    cat = row["category"]
    rng = np.random.default_rng([seed, int(row["metadata"]["index"]), len(row["kernel_name"])])
    arrays = {a.name: to_warp(a, inputs[a.name], "cpu", False) for a in spec.args}
    views = {a.name: arrays[a.name].numpy() for a in spec.args if a.kind == "array"}
    outs = [a for a in spec.args if a.kind == "array" and a.role != "in" and is_float_dtype(a.dtype)]
    seed_vec = np.concatenate([np.asarray(seeds[a.name], dtype=np.float64).ravel() for a in outs])

    def loss_outputs(name=None, flat=None, h=0.0):
        """The outputs with input ``name`` moved by ``h`` at element ``flat`` (an int), or
        along ``flat`` (an array of the input's shape: a direction)."""
        for a in spec.args:
            if a.kind != "array":
                continue
            if a.role == "out":
                views[a.name][...] = 0
            else:
                base = np.array(inputs[a.name], dtype=np.float64, copy=True)
                if a.name == name and isinstance(flat, np.ndarray):
                    base += h * flat
                elif a.name == name:
                    base.reshape(-1)[flat] += h
                views[a.name][...] = base.astype(views[a.name].dtype)
        launch(spec, kernel, [arrays[a.name] for a in spec.args], "cpu")
        return np.concatenate([views[a.name].astype(np.float64).ravel() for a in outs])

    def derivative(name, flat, h):
        return float(np.dot(loss_outputs(name, flat, h) - loss_outputs(name, flat, -h), seed_vec)) / (2 * h)

    if precision == "float64":
        recorded_out = orjson.loads(row["test_vectors"])["outputs"]
        from cudagen_data.contracts.test_vectors import decode_value

        want = np.concatenate([np.asarray(decode_value(recorded_out[a.name]), dtype=np.float64).ravel() for a in outs])
        got = loss_outputs()
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4 * (1.0 + float(np.max(np.abs(want), initial=0.0)))):
            return "diverged"
    base_h = 1e-4 if precision == "float64" else 1e-2
    scale = max(float(np.max(np.abs(g))) for g in recorded.values()) if recorded else 0.0
    audited, bad, err_max = 0, False, 0.0
    try:
        for name, grad in recorded.items():
            size = grad.size
            x_in = np.asarray(inputs[name], dtype=np.float64)
            direction = rng.uniform(-1.0, 1.0, size=x_in.shape)  # all elements at once
            picks = [*rng.choice(size, size=min(PROBES, size), replace=False), direction]
            for flat in picks:
                along = isinstance(flat, np.ndarray)
                x = float(np.max(np.abs(x_in))) if along else float(x_in.reshape(-1)[flat])
                h = base_h * max(1.0, abs(x))
                d1, d2, d4 = derivative(name, flat, h), derivative(name, flat, 2 * h), derivative(name, flat, 4 * h)
                rich = (4 * d1 - d2) / 3  # Richardson: O(h^4)
                rich_big = (4 * d2 - d4) / 3
                # the recorded gradient along the probe, and the scale of its terms
                tape = float(np.sum(grad * flat)) if along else float(grad.reshape(-1)[flat])
                terms = float(np.sum(np.abs(grad * flat))) if along else scale
                if abs(rich - rich_big) > 1e-2 * (abs(rich) + 1e-3 * terms) + 1e-9:
                    continue  # not smooth here: says nothing about the adjoint
                audited += 1
                err = abs(tape - rich) / (abs(rich) + 1e-2 * max(scale, terms) + 1e-12)
                err_max = max(err_max, err)
                if err > TOL:
                    bad = True
    except Exception:  # noqa: BLE001
        per[cat]["audit_failed"] += 1
        return
    if audited:
        per[cat]["audited"] += 1
        if bad:
            per[cat]["disagree"] += 1
            worst.append((err_max, cat, row["kernel_name"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, help="audit this dataset folder instead of making one")
    ap.add_argument("--count", type=int, default=150)
    ap.add_argument("--seed", type=int, default=11, help="seed of the fresh dataset (not the producer's default)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--categories", default="")
    args = ap.parse_args()
    from cudagen_data.generators import categories
    from cudagen_data.pipeline.config import ProduceConfig
    from cudagen_data.pipeline.producer import produce

    folder = args.dataset
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="cudagen-audit-"))
        cats = tuple(args.categories.split(",")) if args.categories else categories()
        t0 = time.perf_counter()
        produce(ProduceConfig(count=args.count, categories=cats, seed=args.seed), folder, workers=args.workers)
        print(f"made {args.count} rows (seed {args.seed}) in {time.perf_counter() - t0:.1f} s: {folder}")
    t0 = time.perf_counter()
    result = audit(_rows(folder))
    print(f"audit: {time.perf_counter() - t0:.1f} s")
    per = result["per"]
    print(
        f"{'category':<14}{'rows':>6}{'verified':>10}{'%':>7}{'fwd-only':>9}{'unverif.':>9}{'audited':>9}{'disagree':>9}"
    )
    tot = collections.Counter()
    ok = True
    for cat in sorted(per):
        c = per[cat]
        tot.update(c)
        pct = 100.0 * c["status_verified"] / max(c["rows"], 1)
        ok &= pct >= 60.0
        print(
            f"{cat:<14}{c['rows']:>6}{c['status_verified']:>10}{pct:>7.1f}{c['status_forward_only']:>9}{c['status_unverified']:>9}{c['audited']:>9}{c['disagree']:>9}"
        )
    pct = 100.0 * tot["status_verified"] / max(tot["rows"], 1)
    print(
        f"{'total':<14}{tot['rows']:>6}{tot['status_verified']:>10}{pct:>7.1f}{tot['status_forward_only']:>9}{tot['status_unverified']:>9}{tot['audited']:>9}{tot['disagree']:>9}"
    )
    if tot["twin_diverged"]:
        print(f"  ({tot['twin_diverged']} rows audited in float32: their float64 twin computes another function)")
    print(
        f"targets: disagreements {tot['disagree']} (target 0, at most 1% = {tot['rows'] // 100}); verified {pct:.1f}% "
        "(>= 85%); "
        f"every category >= 60%: {'yes' if ok else 'no'}"
    )
    for err, cat, name in result["worst"]:
        print(f"  disagreement: {cat}/{name}: relative error {err:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
