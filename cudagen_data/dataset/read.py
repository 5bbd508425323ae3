"""Reading rows from one dataset file (.parquet or .jsonl), each with its location.

The read boundary: :func:`read_rows_from` hands out each record as the row contract
(``Row`` / ``RealRow``), or as a :class:`NotARow` saying why it is not one, so readers
after it use attributes and a renamed column fails in ``contracts/row.py`` only.
:func:`iter_rows_from` gives the raw records, for ``cudagen validate``, which checks
each against the schema before reading it as a row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..contracts.row import Row, column_of, row_from_dict

UNREADABLE = "__unreadable__"  # the record of a line that is not JSON: {UNREADABLE: its first 80 bytes}


@dataclass(frozen=True)
class NotARow:
    """A record read where a row was expected that is not one, and why.  ``id``,
    ``category``, ``kernel_name`` and ``warp_version`` are what the record says (None
    where it does not), to name it in a report."""

    problem: str
    id: object = None
    category: object = None
    kernel_name: object = None
    warp_version: object = None


def read_row(record: dict) -> Row | NotARow:
    """A record of a dataset file as a row, or why it is not one: a line that is not JSON,
    or columns that do not fit the contract."""
    if not isinstance(record, dict) or UNREADABLE in record:
        return NotARow("not a JSON line" if isinstance(record, dict) else "not a JSON object")
    try:
        return row_from_dict(record)
    except (TypeError, KeyError) as exc:
        labels = (column_of(record, c) for c in ("id", "category", "kernel_name", "warp_version"))
        return NotARow(f"not a dataset row ({type(exc).__name__}: {exc})", *labels)


def iter_rows_from(path: Path) -> Iterator[tuple[str, dict]]:
    """(location, record) for a .jsonl or .parquet file: the raw records (a line that is
    not JSON as ``{UNREADABLE: ...}``)."""
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
                    yield f"{path.name}:{i}", {UNREADABLE: line[:80].decode("utf-8", "replace")}


def read_rows_from(path: Path) -> Iterator[tuple[str, Row | NotARow]]:
    """(location, row or why the record is not one) for a .jsonl or .parquet file."""
    for where, record in iter_rows_from(path):
        yield where, read_row(record)
