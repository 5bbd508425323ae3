"""Produce a dataset for the GPU suite, on machines that lack ``datasets`` / PyYAML.

``produce()`` writes Parquet, JSONL, stats and the manifest, then renders the dataset
card (README.md), which needs ``datasets`` and ``yaml``.  The lent GPU machine has
neither, and the GPU suite needs only the manifest and the Parquet files, so a missing
card dependency is reported in one line and the dataset is used as it is.

    python3 tests/gpu/make_dataset.py --count 1000 --workers 16 --output /tmp/ds
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

CARD_DEPENDENCIES = ("datasets", "yaml", "huggingface_hub")


def make_dataset(output: str | Path, count: int, *, categories: tuple[str, ...] | None = None, workers: int = 0,
                 seed: int = 0, batch_size: int | None = None, progress: bool = False) -> Path:  # fmt: skip
    from cudagen_data.generators import categories as all_categories
    from cudagen_data.pipeline.config import ProduceConfig
    from cudagen_data.pipeline.producer import produce

    output = Path(output)
    extra = {"batch_size": batch_size} if batch_size else {}
    config = ProduceConfig(count=count, categories=tuple(categories or all_categories()), seed=seed, **extra)
    try:
        produce(config, output, workers=workers, overwrite=True, progress=progress)
    except ModuleNotFoundError as exc:
        if exc.name not in CARD_DEPENDENCIES or not (output / "manifest.json").exists():
            raise
        print(
            f"note: dataset card (README.md) not written: {exc.name!r} is not installed; data, stats and manifest are "
            "complete",
            file=sys.stderr,
        )
    return output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=None, help="kernels per batch (default: the producer's)")
    parser.add_argument("--categories", default=None, help="comma-separated (default: all)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    cats = tuple(c for c in args.categories.split(",") if c) if args.categories else None
    t0 = time.perf_counter()
    out = make_dataset(
        args.output, args.count, categories=cats, workers=args.workers, seed=args.seed, batch_size=args.batch_size
    )
    import orjson

    stats = orjson.loads((out / "stats.json").read_bytes())
    print(
        f"{stats['total_pairs']} pairs in {out} ({time.perf_counter() - t0:.1f} s); by category: "
        f"{stats['by_category']}; rejects: {stats['rejects_by_reason']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
