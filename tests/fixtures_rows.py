"""Realistic dataset rows and dataset folders for the publishing tests.

Rows are dicts matching ``ROW_SCHEMA``; their Python and CUDA are small hand-built
strings shaped like what Warp 1.19 emits (forward/backward ``__global__`` functions,
``@wp.func`` device functions with their adjoints).  ``write_folder`` writes them with
the producer's own folder writer and finalizer (data/*.parquet, jsonl/, stats.json,
manifest.json, rejects.jsonl, .cudagen/, README.md).
"""

from __future__ import annotations

import random

import orjson
import xxhash

from cudagen_data.contracts import SPLITS, Reject, RejectReason, RunStats
from cudagen_data.dataset.store import DatasetFolder, RunState
from cudagen_data.pipeline.config import ProduceConfig
from cudagen_data.pipeline.finalize import finalize
from cudagen_data.publish.splits import assign_split


def _h64(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode())


WARP_VERSION = "1.19.0"
GENERATOR_VERSION = "1"
ARCH = 86
PREAMBLE = (
    '#define WP_TILE_BLOCK_DIM 256\n#include "builtin.h"\n\n'
    "// avoid namespacing of float type for casting to float type, this is to avoid wp::float(x), "
    "which is not valid in C++\n"
    "#define float(x) cast_float(x)\n"
)
PREAMBLE_HASH = _h64(PREAMBLE)

# (category, Warp op, NumPy-ish description, difficulty, uses a device function)
_TEMPLATES = [
    ("arithmetic", "wp::mul", "*", "basic", False),
    ("arithmetic", "wp::add", "+", "basic", False),
    ("math", "wp::sin", "wp.sin", "intermediate", True),
    ("math", "wp::exp", "wp.exp", "intermediate", True),
    ("reduction", "wp::atomic_add", "wp.atomic_add", "advanced", False),
]

_HEAD = (
    "    const size_t _idx = static_cast<size_t>(blockIdx.z * gridDim.y + blockIdx.y) * "
    "static_cast<size_t>(gridDim.x * blockDim.x) + static_cast<size_t>(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "    if (_idx >= dim.size) return;\n"
)


def _python_source(name: str, op: str, const: float, func: bool) -> str:
    helper = f"@wp.func\ndef f_{name}(x: float):\n    return {op}(x) * {const}\n\n\n" if func else ""
    if op == "wp.atomic_add":
        body = f"    i = wp.tid()\n    wp.atomic_add(out, 0, a[i] * {const})\n"
    elif func:
        body = f"    i = wp.tid()\n    out[i] = f_{name}(a[i])\n"
    else:
        body = f"    i = wp.tid()\n    out[i] = a[i] {op} {const}\n"
    return (
        "import warp as wp\n\n\n"
        + helper
        + "@wp.kernel\n"
        + f"def {name}(a: wp.array(dtype=float), out: wp.array(dtype=float)):\n"
        + body
    )


def _cuda(name: str, key: str, wop: str, const: float, backward: bool, func: bool = False) -> str:
    args = "    wp::launch_bounds_t<1> dim,\n    wp::array_t<wp::float32> var_a,\n    wp::array_t<wp::float32> var_out"
    if backward:
        args += ",\n    wp::array_t<wp::float32> adj_a,\n    wp::array_t<wp::float32> adj_out"
    kind = "backward" if backward else "forward"
    body = (
        "    //---------\n    // primal vars\n    wp::int32 var_0;\n    wp::float32* var_1;\n"
        f"    const wp::float32 var_2 = {const};\n    wp::float32 var_3;\n    wp::float32 var_4;\n"
        "    //---------\n    // forward\n    var_0 = builtin_tid1d();\n    var_1 = wp::address(var_a, var_0);\n"
        "    var_3 = wp::load(var_1);\n"
        + (f"    var_4 = f_{name}_0(var_3);\n" if func else f"    var_4 = {wop}(var_3, var_2);\n")
    )
    if backward:
        adj = (
            f"adj_f_{name}_0(var_3, adj_3, adj_4)" if func else f"wp::adj_{wop[4:]}(var_3, var_2, adj_3, adj_2, adj_4)"
        )
        body += (
            "    //---------\n    // reverse\n"
            "    wp::adj_array_store(var_out, var_0, var_4, adj_out, adj_0, adj_4);\n"
            f"    {adj};\n    return;\n"
        )
    else:
        body += "    wp::array_store(var_out, var_0, var_4);\n"
    return f'extern "C" __global__ void {name}_{key}_cuda_kernel_{kind}(\n{args})\n{{\n{_HEAD}{body}}}\n'


def _device_functions(name: str, wop: str, const: float) -> str:
    return (
        f"static CUDA_CALLABLE wp::float32 f_{name}_0(\n    wp::float32 var_x)\n{{\n"
        f"    wp::float32 var_0;\n    var_0 = {wop}(var_x);\n    return wp::mul(var_0, {const});\n}}\n\n\n"
        f"static CUDA_CALLABLE void adj_f_{name}_0(\n    wp::float32 var_x,\n    wp::float32 & adj_x,\n"
        f"    wp::float32 & adj_ret)\n{{\n    wp::adj_{wop[4:]}(var_x, adj_x, adj_ret);\n    return;\n}}\n"
    )


def _test_vectors(n: int, rng: random.Random) -> str:
    a = [round(rng.uniform(-1, 1), 6) for _ in range(n)]
    return orjson.dumps(
        {
            "launch_dim": [n],
            "block_dim": None,
            "inputs": {
                "a": {"dtype": "float32", "shape": [n], "data": a},
                "out": {"dtype": "float32", "shape": [n], "data": [0.0] * n},
            },
            "outputs": {"out": {"dtype": "float32", "shape": [n], "data": [x * 2.0 for x in a]}},
            "output_grads": {"out": {"dtype": "float32", "shape": [n], "data": [1.0] * n}},
            "input_grads": {"a": {"dtype": "float32", "shape": [n], "data": [2.0] * n}},
        }
    ).decode()


def make_row(index: int, seed: int = 7, shape_hash: str | None = None, with_backward: bool = True) -> dict:
    """One realistic row.  ``shape_hash`` defaults to one derived from the template, so
    rows built from one template with different constants share it (as real ones do)."""
    rng = random.Random(seed * 1_000_003 + index)
    template = index % len(_TEMPLATES)
    category, wop, op, difficulty, func = _TEMPLATES[template]
    const = round(rng.uniform(0.5, 4.0), 3)
    name = f"k_{category}_{index}"
    source = _python_source(name, op, const, func)
    if not with_backward:  # a forward-only row says so in its source, the Warp way
        source = source.replace(
            "import warp as wp\n", 'import warp as wp\n\nwp.set_module_options({"enable_backward": False})\n', 1
        )
    key = xxhash.xxh32_hexdigest(source.encode())
    forward = _cuda(name, key, wop, const, backward=False, func=func)
    backward = _cuda(name, key, wop, const, backward=True, func=func) if with_backward else ""
    funcs = _device_functions(name, wop, const) if func else ""
    python_hash = _h64(source)
    n = 8
    features = sorted({"wp.tid", op if op.startswith("wp.") else "binary_op"} | ({"wp.func"} if func else set()))
    return {
        "id": f"{category}-{python_hash}",
        "kernel_name": name,
        "category": category,
        "python_source": source,
        "cuda_forward": forward,
        "cuda_backward": backward,
        "metadata": {
            "device": "cuda",
            "has_backward": bool(backward),
            "forward_lines": forward.count("\n"),
            "backward_lines": backward.count("\n"),
            "generation_time_ms": round(rng.uniform(2, 9), 3),
            "seed": seed,
            "batch": index // 50,
            "index": index % 50,
        },
        "difficulty": difficulty,
        "features": features,
        "device_functions": funcs,
        "preamble_hash": PREAMBLE_HASH,
        "arg_specs": orjson.dumps(
            [
                {"name": "a", "kind": "array", "dtype": "float32", "shape": [n], "role": "in", "domain": [-1.0, 1.0]},
                {
                    "name": "out",
                    "kind": "array",
                    "dtype": "float32",
                    "shape": [n],
                    "role": "out",
                    "domain": [-1.0, 1.0],
                },
            ]
        ).decode(),
        "launch_dim": [n],
        "block_dim": None,
        "test_vectors": _test_vectors(n, rng),
        "python_hash": python_hash,
        "shape_hash": shape_hash or _h64(f"shape-{template}-{index % 23}"),
        "cuda_hash": _h64(forward + backward),
        "compile": {
            "arch": ARCH,
            "level": "frontend",
            "nvrtc_version": "13.4.92",
            "status": "ok",
            "time_ms": round(rng.uniform(15, 40), 3),
        },
        "warp_version": WARP_VERSION,
        "generator_version": GENERATOR_VERSION,
        "gradient_check": (
            {"status": "verified", "reason": "", "precision": "float64", "probes": 4, "worst_rel_error": 1e-10}
            if with_backward
            else {
                "status": "forward_only",
                "reason": "declared forward-only (enable_backward=False)",
                "precision": "",
                "probes": 0,
                "worst_rel_error": 0.0,
            }
        ),
        "resources": None,
        "size_note": "fixed size: a fixture row (one set)",
        "unused_args": [],
    }


def make_rows(count: int, seed: int = 7) -> list[dict]:
    return [make_row(i, seed=seed, with_backward=(i % 11 != 5)) for i in range(count)]


def write_folder(
    folder, rows: list[dict], ratios=(0.8, 0.1, 0.1), shard_rows: int = 40, command: str | None = None
) -> dict:
    """Write ``rows`` as a dataset folder with the producer's own writer (DatasetFolder.commit,
    then pipeline.finalize); return the manifest.  Splits come from
    ``assign_split(shape_hash, ratios)``; each split is sharded by ``shard_rows``."""
    folder = DatasetFolder(folder)
    folder.root.mkdir(parents=True, exist_ok=True)
    categories = tuple(sorted({r["category"] for r in rows}))
    config = ProduceConfig(
        count=len(rows),
        categories=categories,
        seed=7,
        arch=ARCH,
        batch_size=50,
        split_ratios=tuple(ratios),
        shard_rows=shard_rows,
    )
    stats = RunStats.new(categories, SPLITS)
    by_split = {s: [] for s in SPLITS}
    path = ("generate", "extract", "compile", "execute")
    for r in rows:
        split = assign_split(r["shape_hash"], ratios)
        by_split[split].append(r)
        stats.count_slot(r["category"], path, None)
        stats.stages["dedup"].keep()
        stats.count_row(
            r["category"],
            r["difficulty"],
            split,
            r["metadata"]["forward_lines"],
            r["metadata"]["backward_lines"],
            r["gradient_check"]["status"],
        )
    rejected = Reject(
        len(rows),
        categories[0],
        len(rows),
        "k_bad",
        RejectReason.COMPILE_ERROR,
        "error: identifier undefined",
        "error: identifier undefined",
    )
    stats.count_slot(rejected.category, path, rejected.reason)
    stats.elapsed_seconds = 12.5
    state = RunState(
        fingerprint="fixtures_rows", tally=stats.to_json(), preambles={PREAMBLE_HASH: PREAMBLE}, shard_rows=shard_rows
    )
    folder.start(state)
    folder.commit(state, by_split, [rejected])
    finalize(folder, config, state, command=command or f"cudagen produce --count {len(rows)} --seed 7")
    return orjson.loads(folder.path("manifest.json").read_bytes())
