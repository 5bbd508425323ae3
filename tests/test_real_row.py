"""The real-code row of `cudagen mine` is declared in contracts/ next to Row: its schema
and column docs come from the declaration, and readers tell it from a synthetic row
through one function (``is_real_row``), never by looking for a column."""

from __future__ import annotations

import dataclasses

import orjson
import pyarrow as pa
import pytest
from test_produce import _outcome  # a minimal Row

from cudagen_data.contracts import REAL_ROW_SCHEMA, ROW_SCHEMA, Provenance, RealRow, Row, is_real_row, row_from_dict
from cudagen_data.contracts.row import PROVENANCE_DOCS, REAL_COLUMNS, as_row, column_of, row_schema
from cudagen_data.dataset.read import UNREADABLE, NotARow, read_row, read_rows_from
from cudagen_data.validate import check_rows


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


def test_a_row_dict_is_read_once_at_the_boundary(tmp_path):
    real, synthetic = _real_row(), _outcome(1, "a", "p", "c").row
    assert as_row(real) is real and as_row(real.to_dict()) == real and type(as_row(synthetic.to_dict())) is Row
    assert column_of(real.to_dict(), "id") == column_of(real, "id") == real.id
    assert column_of({}, "category", "?") == "?" and column_of([1, 2], "id") is None  # a record that is not one
    with pytest.raises(KeyError, match="not a column"):
        column_of(real.to_dict(), "kernel")  # a misspelt (or renamed) column fails here
    # what is not a row says why, and what it says it is
    assert read_row(real.to_dict()) == real
    assert read_row({UNREADABLE: "{oops"}) == NotARow("not a JSON line")
    assert read_row([1, 2]).problem == "not a JSON object"
    no_metadata = {k: v for k, v in synthetic.to_dict().items() if k != "metadata"}
    bad = read_row(no_metadata)
    assert isinstance(bad, NotARow) and bad.problem.startswith("not a dataset row") and "metadata" in bad.problem
    assert (bad.id, bad.category, bad.kernel_name) == ("p", "a", "k1")
    extra = read_row({**synthetic.to_dict(), "compile": {**synthetic.to_dict()["compile"], "flags": "-O3"}})
    assert isinstance(extra, NotARow) and "flags" in extra.problem
    path = tmp_path / "rows.jsonl"
    path.write_bytes(orjson.dumps(real) + b"\n{oops\n" + orjson.dumps(no_metadata) + b"\n")
    got = list(read_rows_from(path))
    assert [where for where, _ in got] == ["rows.jsonl:1", "rows.jsonl:2", "rows.jsonl:3"]
    assert got[0][1] == real and got[1][1].problem == "not a JSON line" and got[2][1] == bad


def test_validate_names_a_record_that_does_not_fit_the_contract():
    row = _outcome(3, "a", "p", "c").row.to_dict()
    del row["metadata"]["seed"]  # fits the Arrow schema (a null), not the contract
    (report,) = check_rows({}, None, 1e-4, 1e-5, [("f.jsonl:1", row)])
    assert [(f.row_id, f.category, f.check) for f in report.failures] == [("p", "a", "schema")]
    assert "does not fit the row contract" in report.failures[0].message and "seed" in report.failures[0].message
    (report,) = check_rows({}, None, 1e-4, 1e-5, [("f.jsonl:2", [1, 2])])
    assert [(f.row_id, f.check, f.message) for f in report.failures] == [("?", "schema", "not a JSON object")]


def test_readers_get_rows_or_one_line_about_what_is_not_one(tmp_path):
    from cudagen_data.eval.command import EvalInputError, load_split
    from cudagen_data.gpu.judge import judge

    real, synthetic = _real_row(), _outcome(1, "a", "p", "c").row
    path = tmp_path / "rows.jsonl"
    path.write_bytes(orjson.dumps(synthetic) + b"\n" + orjson.dumps(real) + b"\n")
    rows, _ = load_split(path, "test")  # eval: rows by id, read as the contract
    assert rows == {"p": synthetic, real.id: real} and type(rows[real.id]) is RealRow
    no_arch = {**synthetic.to_dict(), "compile": {"level": "ptx"}}
    path.write_bytes(orjson.dumps(synthetic) + b"\n" + orjson.dumps(no_arch) + b"\n")
    with pytest.raises(EvalInputError, match=r"^rows\.jsonl:2: not a dataset row \(TypeError: .*arch"):
        load_split(path, "test")
    # the GPU suite: a record that is not a row fails its schema check, named as it names itself
    verdict = judge(4, read_row(no_arch), None, None, {}, "1.0")
    assert (verdict.pos, verdict.row_id, verdict.kernel_name) == (4, "p", "k1")
    assert verdict.failures[0][0] == "schema" and "not a dataset row" in verdict.failures[0][1]
    assert judge(5, read_row({UNREADABLE: "x"}), None, None, {}, "1.0").failures == [("schema", "not a JSON line")]


def test_export_reads_columns_of_the_contract():
    """The export reads a projection of the row (PairText): every field a column of the contract."""
    from cudagen_data.publish.export import PAIR_COLUMNS, PairText, build_pair

    assert set(PAIR_COLUMNS) <= set(ROW_SCHEMA.names)
    row = dataclasses.replace(_outcome(1, "a", "p", "c").row, python_source="src", cuda_forward="fwd")
    projected = PairText(**{c: getattr(row, c) for c in PAIR_COLUMNS})
    assert build_pair(projected) == build_pair(row)
