"""Reading rows from one dataset file (.parquet or .jsonl), each with its location."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson


def iter_rows_from(path: Path) -> Iterator[tuple[str, dict]]:
    """(location, row) for a .jsonl or .parquet file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"{path.name}:{i}", row
    else:
        with open(path, "rb") as f:
            for i, line in enumerate(f, 1):
                try:
                    yield f"{path.name}:{i}", orjson.loads(line)
                except orjson.JSONDecodeError:
                    yield f"{path.name}:{i}", {"__unreadable__": line[:80].decode("utf-8", "replace")}
