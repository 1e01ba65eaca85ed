"""JSON values as table rows: types inferred, the schema evolved, misfits kept as dead letters."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs.tables.schema import (
    Conflict,
    Leaf,
    ListOf,
    Rows,
    Struct,
    added_columns,
    arrow_schema,
    infer,
    merge,
    settled,
    shape_of,
)


def _rows(*values: bytes | None, shape: Struct | None = None) -> Rows:
    rows = Rows(shape or Struct())
    for i, value in enumerate(values):
        rows.add(0, i, None, b"k%d" % i, value)
    return rows


def test_types_come_from_the_values() -> None:
    assert infer(True) == Leaf("boolean", fresh=True)
    assert infer(3) == Leaf("long", fresh=True)
    assert infer(3.5) == Leaf("double", fresh=True)
    assert infer("x") == Leaf("string", fresh=True)
    assert infer([1, None, 2]) == ListOf(Leaf("long", fresh=True), fresh=True)
    nested = infer({"a": {"b": "c"}})
    assert isinstance(nested, Struct) and isinstance(nested.fields["a"], Struct)
    assert infer(None) is None and infer([]) is None and infer({}) is None


def test_a_new_column_mixing_integers_and_fractions_is_double() -> None:
    rows = _rows(b'{"n": 1}', b'{"n": 2.5}', b'{"n": 3}')
    assert rows.shape.fields["n"] == Leaf("double", fresh=True)
    assert rows.dead_letters == 0
    assert rows.table().column("n").to_pylist() == [1.0, 2.5, 3.0]


def test_a_committed_long_column_refuses_a_fraction_and_the_record_is_a_dead_letter() -> None:
    committed = settled(_rows(b'{"n": 1}').shape)
    rows = _rows(b'{"n": 2.5, "m": "kept?"}', b'{"n": 4}', shape=committed)
    assert rows.dead_letters == 1
    first, second = rows.table().to_pylist()
    assert first["_error"] == "field n: long column, double value 2.5"
    assert first["_value"] == b'{"n": 2.5, "m": "kept?"}'
    assert first["n"] is None and "m" not in first  # a dead letter adds no column
    assert second["n"] == 4 and second["_error"] is None
    with pytest.raises(Conflict, match="long column, string value"):
        merge("x", Leaf("long"), "n")
    assert merge(7, Leaf("double"), "d") == Leaf("double")  # an integer fits a double


def test_every_misfit_has_its_reason() -> None:
    rows = _rows(
        b"{not json",
        b'"a string"',
        b'{"a.b": 1}',
        b'{"": 1}',
        b'{"_key": 1}',
        b'{"big": 123456789012345678901234567890}',
        b"\xff\xfe",
    )
    reasons = [row["_error"] for row in rows.rows]
    assert reasons[0].startswith("not JSON: ")
    assert reasons[1] == "not a JSON object: a JSON string"
    assert reasons[2] == "field 'a.b': a column name is not empty and holds no dot"
    assert reasons[3] == "field '': a column name is not empty and holds no dot"
    assert reasons[4] == "field _key is the name of a KFS column"
    assert (
        reasons[5]
        == "field big: integer 123456789012345678901234567890 is outside the 64-bit range"
    )
    assert reasons[6].startswith("not JSON: ")
    assert rows.dead_letters == 7 and rows.shape == Struct()


def test_structs_and_lists_evolve_inside() -> None:
    rows = _rows(
        b'{"address": {"city": "Oslo"}, "tags": []}',
        b'{"address": {"city": "Bergen", "zip": "5003"}, "tags": ["a"]}',
        b'{"address": "nowhere"}',
        b'{"tags": [1]}',
    )
    address = rows.shape.fields["address"]
    assert isinstance(address, Struct) and set(address.fields) == {"city", "zip"}
    assert rows.shape.fields["tags"] == ListOf(Leaf("string", fresh=True), fresh=True)
    assert [r.get("_error") for r in rows.rows] == [
        None,
        None,
        'field address: struct column, string value "nowhere"',
        "field tags[]: string column, long value 1",
    ]
    table = rows.table()
    assert table.column("address").to_pylist()[0] == {"city": "Oslo", "zip": None}
    assert table.column("tags").to_pylist()[:2] == [[], ["a"]]
    assert added_columns(Struct(), rows.shape) == ["address struct", "tags list<string>"]
    later = settled(rows.shape)
    grown = _rows(b'{"address": {"geo": {"lat": 1.5}}}', shape=later)
    assert added_columns(later, grown.shape) == ["address.geo struct"]


def test_a_column_never_seen_with_a_value_waits() -> None:
    rows = _rows(b'{"a": null, "b": [], "c": {}}')
    assert rows.shape == Struct()
    assert arrow_schema(rows.shape).names == [
        "_partition", "_offset", "_timestamp", "_key", "_error", "_value",
    ]  # fmt: skip


def test_the_table_schema_reads_back_as_the_same_shape() -> None:
    rows = _rows(b'{"a": 1, "b": {"c": [true]}, "d": "x", "e": 0.5}')
    schema = arrow_schema(rows.shape)
    assert shape_of(schema) == settled(rows.shape)
    assert schema.field("_timestamp").type == pa.timestamp("us", tz="UTC")


def test_a_compacted_topic_keeps_each_keys_latest_and_drops_tombstones() -> None:
    rows = Rows(Struct())
    for offset, (key, value) in enumerate(
        [(b"a", b'{"v": 1}'), (b"b", b'{"v": 2}'), (b"a", b'{"v": 3}'), (b"b", None),
         (None, b'{"v": 5}'), (b"c", b"{}")]
    ):  # fmt: skip
        rows.add(0, offset, None, key, value)
    assert rows.merged() == [2, 4, 5]  # a's latest, the keyless record, c's empty object
    assert rows.keys() == {b"a", b"b", b"c"}
    assert rows.tombstones == {3}
