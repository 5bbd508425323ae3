"""The real-code row of `cudagen mine` is declared in contracts/ next to Row: its schema
and column docs come from the declaration, and readers tell it from a synthetic row
through one function (``is_real_row``), never by looking for a column."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from test_produce import _outcome  # a minimal Row

from cudagen_data.contracts import REAL_ROW_SCHEMA, ROW_SCHEMA, Provenance, RealRow, Row, is_real_row, row_from_dict
from cudagen_data.contracts.row import PROVENANCE_DOCS, REAL_COLUMNS, row_schema


def _real_row() -> RealRow:
    row = _outcome(3, "real", "p", "c").row
    prov = Provenance(
        "warp/tests/t.py", 12, "test_f.<locals>.k", "", "warp-lang", "1.0", "Apache-2.0", True, "", True, []
    )
    return RealRow(**vars(row), provenance=prov)


def test_real_row_is_row_plus_provenance():
    assert REAL_ROW_SCHEMA.names == [*ROW_SCHEMA.names, "provenance"]
    assert REAL_COLUMNS == tuple(REAL_ROW_SCHEMA.names)
    assert REAL_ROW_SCHEMA.field("provenance").type == pa.struct(
        [(f.name, f.metadata["arrow"]) for f in dataclasses.fields(Provenance)]
    )
    assert list(PROVENANCE_DOCS) == [f.name for f in dataclasses.fields(Provenance)]
    assert all(doc.strip() for doc in PROVENANCE_DOCS.values())


def test_real_row_round_trips_and_fits_its_schema():
    row = _real_row()
    d = row.to_dict()
    assert list(d) == REAL_ROW_SCHEMA.names
    assert RealRow.from_dict(d) == row and row_from_dict(d) == row
    pa.Table.from_pylist([d], schema=REAL_ROW_SCHEMA)
    # a provenance that misses a field, or has one too many, is not a real row
    with pytest.raises(TypeError):
        RealRow.from_dict({**d, "provenance": {k: v for k, v in d["provenance"].items() if k != "line"}})
    with pytest.raises(TypeError):
        RealRow.from_dict({**d, "provenance": {**d["provenance"], "machine_path": "/home/x"}})


def test_one_way_to_tell_a_real_row():
    real, synthetic = _real_row(), _outcome(1, "a", "p", "c").row
    assert is_real_row(real) and is_real_row(real.to_dict())
    assert not is_real_row(synthetic) and not is_real_row(synthetic.to_dict())
    assert not is_real_row({**real.to_dict(), "provenance": None})  # a null struct (a mixed table)
    assert row_schema(real.to_dict()) is REAL_ROW_SCHEMA and row_schema(synthetic.to_dict()) is ROW_SCHEMA
    assert type(row_from_dict(synthetic.to_dict())) is Row and type(row_from_dict(real.to_dict())) is RealRow
