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

A larger dataset (1,000 rows at three sizes: ~85 MiB of Parquet) goes over in several
calls.  ``pack`` takes a finished folder made here (``cudagen produce``), keeps what the
GPU suite reads, cuts its Parquet into shards of at most PART_MIB (same rows, same order,
same schema; the manifest lists the new shards with their checksums) and deals the files
into carry folders ``.gpu_carry_1/``, ``.gpu_carry_2/``, ... of at most PART_MIB each:

    python tests/gpu/carry_dataset.py pack --from data/production
    # there, one call per part (carry: [".gpu_carry_N"]), then check as above:
    mkdir -p /root/carry && cp -r .gpu_carry_N/. /root/carry/
    python3 tests/gpu/carry_dataset.py check --folder /root/carry
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
PART_MIB = 55  # one carry folder: with the checkout (~4 MiB), under the 64 MiB a call carries


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


def pack(source: Path, top: Path, part_mib: float = PART_MIB) -> int:
    """Cut ``source``'s Parquet into shards of at most ``part_mib`` and deal them, with the
    manifest and stats, into carry folders ``top/.gpu_carry_1``, ... (see the docstring)."""
    import pyarrow.parquet as pq
    import xxhash

    manifest = orjson.loads((source / "manifest.json").read_bytes())
    limit = int(part_mib * 2**20)
    staging = top / ".gpu_carry_pack"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "data").mkdir(parents=True)
    files = []
    for entry in manifest["files"]:
        if not entry["path"].startswith("data/"):
            continue
        table = pq.read_table(source / entry["path"])
        size = (source / entry["path"]).stat().st_size
        pieces = max(1, -(-size * 5 // (limit * 4)))  # 25% headroom: rows differ in size
        step = -(-table.num_rows // pieces)
        stem = entry["path"].split("/")[1].split("-")[0]
        for i in range(pieces):
            part = table.slice(i * step, step)
            name = f"data/{stem}-carry{i:02d}-of-{pieces:02d}.parquet"
            pq.write_table(part, staging / name, compression="zstd")
            data = (staging / name).read_bytes()
            if len(data) > limit:
                print(f"error: {name}: {len(data) / 2**20:.1f} MiB is over {part_mib} MiB; pass a smaller --part-mib",
                      file=sys.stderr)  # fmt: skip
                return 1
            files.append({"path": name, "rows": part.num_rows, "split": entry["split"],
                          "xxh3_128": xxhash.xxh3_128_hexdigest(data)})  # fmt: skip
    manifest["files"] = files
    (staging / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
    shutil.copy(source / "stats.json", staging / "stats.json")
    (staging / "made_on.json").write_bytes(orjson.dumps(made_on(), option=orjson.OPT_SORT_KEYS) + b"\n")
    # deal the files into parts, largest first, each into the first part with room
    paths = sorted((p for p in staging.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
    parts: list[list[Path]] = []
    room: list[int] = []
    for path in paths:
        n = path.stat().st_size
        k = next((i for i, r in enumerate(room) if r >= n), len(parts))
        if k == len(parts):
            parts.append([])
            room.append(limit)
        parts[k].append(path)
        room[k] -= n
    for old in top.glob(".gpu_carry_[0-9]*"):
        shutil.rmtree(old)
    for k, group in enumerate(parts, 1):
        for path in group:
            rel = path.relative_to(staging)
            dest = top / f".gpu_carry_{k}" / (rel if rel.name == "made_on.json" else Path("dataset") / rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, dest)
    shutil.rmtree(staging)
    rows = sum(f["rows"] for f in files)
    print(f"{rows} rows of {source} in {len(files)} shards, dealt into {len(parts)} carry folders "
          f"(.gpu_carry_1 .. .gpu_carry_{len(parts)}, at most {part_mib} MiB each)")  # fmt: skip
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
    parser.add_argument("mode", choices=("make", "pack", "check"))
    parser.add_argument("--from", dest="source", type=Path, help="pack: a finished dataset folder made here")
    parser.add_argument("--part-mib", type=float, default=PART_MIB, help="pack: MiB per carry folder at most")
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-category", type=int, default=PER_CATEGORY)
    args = parser.parse_args()
    if args.mode == "make":
        return make(args.folder, args.workers, args.seed, args.per_category)
    if args.mode == "pack":
        if args.source is None or not (args.source / "manifest.json").is_file():
            print(f"error: pack needs --from FOLDER, a finished dataset folder (got {args.source})", file=sys.stderr)
            return 2
        return pack(args.source, HERE.parent.parent, args.part_mib)
    return check(args.folder)


if __name__ == "__main__":
    sys.exit(main())
