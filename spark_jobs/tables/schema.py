"""JSON record values as table rows: a schema inferred from the data, evolved as fields appear.

A value that is a JSON object becomes one row: each field a column.  The
types come from the values (`infer`): ``true``/``false`` boolean, an
integer long, any other number double, a string string, an object a struct
of its fields, an array a list of its elements' type.  A field the table
has never seen is added as a new nullable column (a new struct field inside
a struct); a field whose values so far were only ``null``, ``[]`` or ``{}``
waits for a value that says its type (until then those rows hold null).

Iceberg's type promotion rules hold: a column never changes type.  Within
the records of one commit, a new column whose values mix integers and
fractions becomes double; once committed, a long column refuses ``1.5``.  A
value that does not fit - not JSON, not an object, a field whose value has
another type than its column, a field named like one of KFS's own columns
or holding a dot - is not dropped: its row goes to the table with every
value column null, the raw bytes in ``_value`` and the reason in
``_error`` (the dead-letter columns).  Nothing in a value can fail the job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

__all__ = [
    "DEAD_LETTER_COLUMNS",
    "KFS_COLUMNS",
    "Conflict",
    "Leaf",
    "ListOf",
    "Rows",
    "Struct",
    "added_columns",
    "arrow_schema",
    "infer",
    "merge",
    "rows_for",
    "settled",
    "shape_of",
]

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

#: The record's own columns, first in every table.
KFS_COLUMNS: Final = (
    pa.field("_partition", pa.int32()),
    pa.field("_offset", pa.int64()),
    pa.field("_timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("_key", pa.binary()),
)
#: Where a value that does not fit goes: the reason and the raw bytes.
DEAD_LETTER_COLUMNS: Final = (pa.field("_error", pa.string()), pa.field("_value", pa.binary()))
_RESERVED: Final = frozenset(f.name for f in (*KFS_COLUMNS, *DEAD_LETTER_COLUMNS))


class Conflict(ValueError):
    """A value that does not fit its column; the message names the field and both types."""


@dataclass(frozen=True)
class Leaf:
    """boolean, long, double or string.  ``fresh``: added in this commit, so long may still widen."""

    kind: str
    fresh: bool = False


@dataclass(frozen=True)
class ListOf:
    element: FieldType | None  # None: only empty lists seen so far
    fresh: bool = False


@dataclass(frozen=True)
class Struct:
    fields: Mapping[str, FieldType] = field(default_factory=dict)
    fresh: bool = False


FieldType = Leaf | ListOf | Struct

_ARROW: Final = {
    "boolean": pa.bool_(),
    "long": pa.int64(),
    "double": pa.float64(),
    "string": pa.string(),
}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _describe(ftype: FieldType) -> str:
    if isinstance(ftype, Leaf):
        return ftype.kind
    if isinstance(ftype, ListOf):
        return f"list<{_describe(ftype.element) if ftype.element else '?'}>"
    return "struct"


def infer(value: Any, path: str = "") -> FieldType | None:
    """The type of a JSON value never seen before; None when it says nothing (null, [], {})."""
    return merge(value, None, path)


def merge(value: Any, ftype: FieldType | None, path: str) -> FieldType | None:
    """``ftype`` widened to hold ``value`` (the same object when it already does).

    `Conflict` when it cannot: the column keeps its type and the record is a
    dead letter.
    """
    if value is None:
        return ftype
    if ftype is None:
        return _new(value, path)
    if isinstance(ftype, Leaf):
        kind = _kind(value)
        if kind == "long" and not _LONG_MIN <= value <= _LONG_MAX:
            raise Conflict(f"field {path}: integer {value} is outside the 64-bit range")
        if kind == ftype.kind or (kind == "long" and ftype.kind == "double"):
            return ftype
        if kind == "double" and ftype.kind == "long" and ftype.fresh:
            return Leaf("double", fresh=True)
        raise Conflict(f"field {path}: {_describe(ftype)} column, {kind} value {_sample(value)}")
    if isinstance(ftype, ListOf):
        if not isinstance(value, list):
            raise Conflict(f"field {path}: {_describe(ftype)} column, {_kind(value)} value")
        element = ftype.element
        for item in value:
            element = merge(item, element, f"{path}[]")
        return ftype if element is ftype.element else ListOf(element, fresh=ftype.fresh)
    if not isinstance(value, dict):
        raise Conflict(f"field {path}: struct column, {_kind(value)} value {_sample(value)}")
    return _merge_struct(value, ftype, path)


def _merge_struct(value: dict[str, Any], struct: Struct, path: str) -> Struct:
    fields: dict[str, FieldType] | None = None
    for name, item in value.items():
        where = f"{path}.{name}" if path else name
        if not name or "." in name:
            raise Conflict(f"field {where!r}: a column name is not empty and holds no dot")
        current = struct.fields.get(name)
        merged = merge(item, current, where)
        if merged is not current and merged is not None:
            fields = dict(struct.fields) if fields is None else fields
            fields[name] = merged
    return struct if fields is None else Struct(fields, fresh=struct.fresh)


def _new(value: Any, path: str) -> FieldType | None:
    kind = _kind(value)
    if kind in _ARROW:
        return merge(value, Leaf(kind, fresh=True), path)
    if kind == "array":
        element = None
        for item in value:
            element = merge(item, element, f"{path}[]")
        return ListOf(element, fresh=True) if element is not None else None
    if kind == "object":
        struct = _merge_struct(value, Struct(fresh=True), path)
        return struct if struct.fields else None
    raise Conflict(f"field {path}: a {kind} is not a JSON value")


def _sample(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --- arrow -------------------------------------------------------------------------


def _arrow_type(ftype: FieldType) -> pa.DataType:
    if isinstance(ftype, Leaf):
        return _ARROW[ftype.kind]
    if isinstance(ftype, ListOf):
        assert ftype.element is not None
        return pa.list_(_arrow_type(ftype.element))
    return pa.struct([pa.field(n, _arrow_type(t)) for n, t in ftype.fields.items()])


def arrow_schema(shape: Struct) -> pa.Schema:
    """A table's Arrow schema: KFS's columns, the value's, the dead-letter columns."""
    values = [
        pa.field(name, _arrow_type(t))
        for name, t in shape.fields.items()
        if not (isinstance(t, ListOf) and t.element is None)
    ]
    return pa.schema([*KFS_COLUMNS, *values, *DEAD_LETTER_COLUMNS])


def _from_arrow(dtype: pa.DataType) -> FieldType:
    if pa.types.is_boolean(dtype):
        return Leaf("boolean")
    if pa.types.is_integer(dtype):
        return Leaf("long")
    if pa.types.is_floating(dtype) or pa.types.is_decimal(dtype):
        return Leaf("double")
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return ListOf(_from_arrow(dtype.value_type))
    if pa.types.is_struct(dtype):
        return Struct({f.name: _from_arrow(f.type) for f in dtype})
    return Leaf("string")  # strings, and anything else a person added: JSON strings fit it


def shape_of(schema: pa.Schema) -> Struct:
    """The value columns of a table's schema (KFS's and the dead-letter columns left out)."""
    return Struct({f.name: _from_arrow(f.type) for f in schema if f.name not in _RESERVED})


# --- rows --------------------------------------------------------------------------


@dataclass
class Rows:
    """The rows of one commit, and the table's value shape as they leave it."""

    shape: Struct
    rows: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # first few reasons, with counts
    tombstones: set[int] = field(default_factory=set)  # rows of records without a value

    def add(
        self, partition: int, offset: int, timestamp: Any, key: bytes | None, value: bytes | None
    ) -> None:
        """One record: a row of its fields, or a dead letter (`_error`, `_value`)."""
        row: dict[str, Any] = {
            "_partition": partition,
            "_offset": offset,
            "_timestamp": timestamp,
            "_key": key,
        }
        if value is None:
            self.tombstones.add(len(self.rows))
        else:
            try:
                fields = _parse(value)
                self.shape = _merge_struct(fields, self.shape, "")
            except Conflict as exc:
                self._dead(row, value, str(exc))
            else:
                row.update(fields)
        self.rows.append(row)

    def _dead(self, row: dict[str, Any], value: bytes, reason: str) -> None:
        row["_error"] = reason
        row["_value"] = value
        self.dead_letters += 1
        if reason in self.reasons or len(self.reasons) < 20:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def table(self, indices: Iterable[int] | None = None) -> pa.Table:
        """The rows (those at ``indices`` only, when given) as an Arrow table."""
        rows = self.rows if indices is None else [self.rows[i] for i in indices]
        return pa.Table.from_pylist(rows, schema=arrow_schema(self.shape))

    def keys(self) -> set[bytes]:
        return {row["_key"] for row in self.rows if row["_key"] is not None}

    def merged(self) -> list[int]:
        """The rows a compacted topic's table keeps: each key's latest, unless it is a tombstone.

        Records without a key (a compacted topic refuses them, but a topic
        may have been compacted only later) are all kept.
        """
        latest: dict[bytes, int] = {}
        for i, row in enumerate(self.rows):
            if row["_key"] is not None:
                latest[row["_key"]] = i
        keep = set(latest.values()) - self.tombstones
        return [i for i, row in enumerate(self.rows) if i in keep or row["_key"] is None]


def _parse(value: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Conflict(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise Conflict(f"not a JSON object: a JSON {_kind(doc)}")
    taken = _RESERVED.intersection(doc)
    if taken:
        raise Conflict(f"field {sorted(taken)[0]} is the name of a KFS column")
    return doc


def added_columns(before: Struct, after: Struct, prefix: str = "") -> list[str]:
    """Columns (dotted paths) ``after`` has and ``before`` has not: the schema change to report."""
    added = []
    for name, ftype in after.fields.items():
        path = f"{prefix}{name}"
        old = before.fields.get(name)
        if isinstance(ftype, ListOf) and ftype.element is None:
            continue
        if old is None:
            added.append(f"{path} {_describe(ftype)}")
        elif isinstance(ftype, Struct) and isinstance(old, Struct):
            added.extend(added_columns(old, ftype, f"{path}."))
        elif isinstance(ftype, Leaf) and isinstance(old, Leaf) and ftype.kind != old.kind:
            added.append(f"{path} {_describe(ftype)}")
    return added


def settled(shape: Struct) -> Struct:
    """``shape`` with every type marked as committed (no longer ``fresh``)."""
    return Struct({n: _settle(t) for n, t in shape.fields.items()})


def _settle(ftype: FieldType) -> FieldType:
    if isinstance(ftype, Leaf):
        return Leaf(ftype.kind)
    if isinstance(ftype, ListOf):
        return ListOf(_settle(ftype.element) if ftype.element else None)
    return settled(ftype)


def rows_for(
    records: Iterable[tuple[int, int, Any, bytes | None, bytes | None]], shape: Struct
) -> Rows:
    """The rows of ``records`` (partition, offset, timestamp, key, value) against ``shape``."""
    rows = Rows(shape)
    for record in records:
        rows.add(*record)
    return rows
