"""``python -m cudagen_data.gpu PATH``: the GPU suite without the ``cudagen`` console script
(exit status: see command.py)."""

from __future__ import annotations

import argparse
import sys

from .command import run_gpu_validation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cudagen_data.gpu", description="Validate a dataset's recorded CUDA on a GPU."
    )
    parser.add_argument("path", help="a dataset folder, or one .jsonl / .parquet file of rows")
    parser.add_argument("--limit", type=int, default=None, help="validate only the first N rows")
    parser.add_argument(
        "--jobs", "-j", type=int, default=None, help="worker processes (default: all cores; 0: in this process)"
    )
    parser.add_argument("--report", default=None, help="write the JSON report here")
    parser.add_argument("--device", default="cuda:0", help=argparse.SUPPRESS)  # "cpu": dry run, for testing
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bar on stderr"
    )
    args = parser.parse_args(argv)
    return run_gpu_validation(
        args.path, limit=args.limit, device=args.device, jobs=args.jobs, report_path=args.report, progress=args.progress
    )


if __name__ == "__main__":
    sys.exit(main())
