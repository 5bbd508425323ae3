"""A dataset made on the CPU machine, carried to the GPU machine and validated there.

A user produces on a CPU box and validates on a GPU workstation; a dataset made on the
GPU machine itself cannot show what differs between two machines (paths, Python and
Warp installed elsewhere).  Two modes:

    # here (CPU machine): 60 rows, 4 per category (--per-category), into the ignored folder .gpu_carry/
    python tests/gpu/carry_dataset.py make
    # there (GPU machine), before `python3 -m cudagen_data.gpu .gpu_carry/dataset`:
    python3 tests/gpu/carry_dataset.py check

``make`` keeps only what the GPU suite reads (manifest, stats, Parquet) and refuses a
folder over MAX_MIB (the device tool carries 64 MiB in all, Warp's stage included).
``check`` proves the folder arrived intact (every file's xxh3-128 from the manifest)
and prints where it was made next to where it is checked.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import shutil
import sys
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
DEFAULT_FOLDER = HERE.parent.parent / ".gpu_carry"
PER_CATEGORY = 4
MAX_MIB = 12  # with Warp's stage (~50 MiB) and the checkout, under the 64 MiB a call carries
KEPT = ("manifest.json", "stats.json", "data")


def made_on() -> dict:
    """The making machine, without anything that names it (no paths, no host name)."""
    from cudagen_data import warp_boundary

    wp = warp_boundary.warp()
    return {
        "python": platform.python_version(),
        "warp": importlib.metadata.version("warp-lang"),
        "platform": f"{platform.system()} {platform.machine()}",
        "cuda_devices": wp.get_cuda_device_count(),
        "cpu_cores": os.cpu_count(),
    }


def make(folder: Path, workers: int, seed: int, per_category: int = PER_CATEGORY) -> int:
    sys.path.insert(0, str(HERE))
    from make_dataset import make_dataset

    from cudagen_data.generators import categories

    cats = categories()
    dataset = folder / "dataset"
    shutil.rmtree(folder, ignore_errors=True)
    make_dataset(dataset, per_category * len(cats), categories=cats, workers=workers, seed=seed)
    for entry in dataset.iterdir():  # the GPU suite reads the manifest and the Parquet files
        if entry.name not in KEPT:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    manifest = orjson.loads((dataset / "manifest.json").read_bytes())
    manifest["files"] = [f for f in manifest["files"] if f["path"].split("/")[0] in KEPT]
    (dataset / "manifest.json").write_bytes(
        orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    )
    (folder / "made_on.json").write_bytes(orjson.dumps(made_on(), option=orjson.OPT_SORT_KEYS) + b"\n")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    rows = sum(f["rows"] for f in manifest["files"])
    import pyarrow.parquet as pq

    library = sum(
        "// warp/_src/" in text
        for f in manifest["files"]
        for text in pq.read_table(dataset / f["path"], columns=["device_functions"]).column(0).to_pylist()
    )
    print(f"{rows} rows ({per_category} per category, seed {seed}) in {folder}: {size / 2**20:.2f} MiB; "
          f"{library} rows call Warp library functions (source comments naming warp/_src/...)")  # fmt: skip
    if size > MAX_MIB * 2**20:
        print(
            f"error: {folder}: {size / 2**20:.1f} MiB is over {MAX_MIB} MiB, too large to carry with Warp's stage",
            file=sys.stderr,
        )
        return 1
    return 0


def check(folder: Path) -> int:
    import xxhash

    dataset = folder / "dataset"
    manifest_path = dataset / "manifest.json"
    if not manifest_path.exists():
        print(
            f"error: {manifest_path}: not found; make it on the CPU machine (carry_dataset.py make) and carry "
            f"{folder.name}/",
            file=sys.stderr,
        )
        return 2
    bad = []
    for f in orjson.loads(manifest_path.read_bytes())["files"]:
        path = dataset / f["path"]
        digest = xxhash.xxh3_128_hexdigest(path.read_bytes()) if path.exists() else "missing"
        if digest != f["xxh3_128"]:
            bad.append(f"{f['path']} ({digest})")
    origin = orjson.loads((folder / "made_on.json").read_bytes())
    print(f"carried dataset made on: {origin}")
    print(f"checked here on:         {made_on()}")
    if bad:
        print(f"error: {dataset}: files differ from the manifest: {', '.join(bad)}", file=sys.stderr)
        return 1
    print(f"{dataset}: every file matches the manifest's checksum")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("make", "check"))
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-category", type=int, default=PER_CATEGORY)
    args = parser.parse_args()
    if args.mode == "make":
        return make(args.folder, args.workers, args.seed, args.per_category)
    return check(args.folder)


if __name__ == "__main__":
    sys.exit(main())
