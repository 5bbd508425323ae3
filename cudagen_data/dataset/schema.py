"""The dataset row: its columns, their Arrow types, and the test-vector format.

JSONL and Parquet hold the same columns.  The first seven match the format the project
started from (id, kernel_name, category, python_source, cuda_forward, cuda_backward,
metadata) so older readers keep working.

``test_vectors`` is a JSON string (orjson, keys in a fixed order) of the form::

    {"launch_dim": [n, ...], "block_dim": null | int,
     "inputs":  {arg_name: value, ...},      # every argument, in kernel order
     "outputs": {arg_name: value, ...},      # arrays with role out/inout after the forward launch
     "output_grads": {arg_name: value, ...}, # the seed gradient put on each float output
     "input_grads":  {arg_name: value, ...}} # gradients of float inputs after tape.backward()

where an array value is ``{"dtype": "vec3", "shape": [8], "data": [[...], ...]}``
(``data`` nested as ``numpy.ndarray.tolist()`` of the component array, i.e. shape +
the dtype's component shape) and a scalar value is ``{"dtype": "float32", "data": 1.5}``.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

METADATA_TYPE = pa.struct(
    [
        ("device", pa.string()),
        ("has_backward", pa.bool_()),
        ("forward_lines", pa.int32()),
        ("backward_lines", pa.int32()),
        ("generation_time_ms", pa.float64()),
        ("seed", pa.int64()),
        ("batch", pa.int64()),
        ("index", pa.int64()),
    ]
)

COMPILE_TYPE = pa.struct(
    [
        ("arch", pa.int32()),
        ("status", pa.string()),
        ("time_ms", pa.float64()),
    ]
)

ROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("kernel_name", pa.string()),
        ("category", pa.string()),
        ("python_source", pa.string()),
        ("cuda_forward", pa.string()),
        ("cuda_backward", pa.string()),
        ("metadata", METADATA_TYPE),
        ("difficulty", pa.string()),
        ("features", pa.list_(pa.string())),
        ("device_functions", pa.string()),
        ("preamble_hash", pa.string()),
        ("arg_specs", pa.string()),
        ("launch_dim", pa.list_(pa.int32())),
        ("block_dim", pa.int32()),
        ("test_vectors", pa.string()),
        ("python_hash", pa.string()),
        ("shape_hash", pa.string()),
        ("cuda_hash", pa.string()),
        ("compile", COMPILE_TYPE),
        ("warp_version", pa.string()),
        ("generator_version", pa.string()),
    ]
)

COLUMNS = tuple(ROW_SCHEMA.names)

# Fields that hold wall-clock timings: the only values that may differ between two runs
# with the same seed and version.
TIMING_FIELDS = (("metadata", "generation_time_ms"), ("compile", "time_ms"))


def strip_timing(row: dict) -> dict:
    """A copy of ``row`` with timing fields zeroed, for byte-for-byte comparisons."""
    out = dict(row)
    for outer, inner in TIMING_FIELDS:
        if isinstance(out.get(outer), dict):
            out[outer] = {**out[outer], inner: 0.0}
    return out
