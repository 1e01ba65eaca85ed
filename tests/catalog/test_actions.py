"""Commit files: stable, human-readable JSON; every malformed file is `CorruptCatalog`."""

from __future__ import annotations

import gc
import json

import pytest
from pydantic import ValidationError

from kfs_core.catalog import (
    AddSegment,
    Commit,
    RemoveSegment,
    ReplaceSegments,
    SegmentEntry,
    SegmentRef,
    SetLogStartOffset,
    SetTopicConfig,
)
from kfs_core.catalog.actions import (
    AbortedRange,
    OpenTransaction,
    carry_transactions,
    decode_commit,
    encode_commit,
)
from kfs_core.errors import CorruptCatalog
from tests.catalog.conftest import seg

KEY = "ns/orders/0/_log/00000000000000000007.json"


def sample_commit() -> Commit:
    return Commit(
        version=7,
        commit_id="c0ffee",
        writer="host:42",
        timestamp_ms=1_700_000_000_123,
        operation="compaction",
        actions=(
            AddSegment(segment=seg(0, 10)),
            RemoveSegment(
                key="orders/0/segment-00000000000000000000.kfs", base_offset=0, removed_ms=5
            ),
            ReplaceSegments(
                inputs=(
                    SegmentRef(key="orders/0/segment-00000000000000000010.kfs", base_offset=10),
                ),
                outputs=(seg(10, 5, suffix="-c1"),),
                removed_ms=6,
            ),
            SetLogStartOffset(offset=10),
            SetTopicConfig(configs={"retention.ms": "1000"}),
        ),
    )


def test_commit_encoding_is_stable_and_one_action_a_line() -> None:
    data = encode_commit(sample_commit())
    lines = data.decode().splitlines()
    assert lines[0] == (
        '{"format":1,"version":7,"commit_id":"c0ffee","writer":"host:42",'
        '"timestamp_ms":1700000000123,"operation":"compaction","actions":['
    )
    assert lines[1] == (
        '{"action":"add","segment":{"base_offset":0,"last_offset":9,"record_count":10,'
        '"size_bytes":1000,"index_size_bytes":16,"min_timestamp":1699999999500,'
        '"max_timestamp":1700000000000,"codec":0,"created_ms":1700000000000,'
        '"key":"orders/0/segment-00000000000000000000.kfs",'
        '"index_key":"orders/0/segment-00000000000000000000.index"}},'
    )
    assert lines[2] == (
        '{"action":"remove","key":"orders/0/segment-00000000000000000000.kfs",'
        '"base_offset":0,"removed_ms":5},'
    )
    assert lines[4] == '{"action":"set_log_start_offset","offset":10},'
    assert lines[5] == '{"action":"topic_config","configs":{"retention.ms":"1000"}}'
    assert lines[6] == "]}"
    assert data.endswith(b"\n")
    json.loads(data)  # one valid JSON document
    assert encode_commit(sample_commit()) == data  # same commit, same bytes


def test_commit_round_trips() -> None:
    commit = sample_commit()
    assert decode_commit(encode_commit(commit), KEY, 7) == commit


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d[:80], "Invalid JSON"),
        (lambda d: b"", "Invalid JSON"),
        (lambda d: b"\xff\xfe" + d, "Invalid JSON"),
        (lambda d: d.replace(b'"codec":0', b'"codec":"0"'), "codec"),
        (lambda d: d.replace(b'"codec":0', b'"codec":9'), "codec"),
        (lambda d: d.replace(b'"action":"remove"', b'"action":"explode"'), "actions.1"),
        (lambda d: d.replace(b'"format":1', b'"format":2'), "format"),
        (lambda d: d.replace(b'"writer"', b'"surprise":1,"writer"'), "surprise"),
        (lambda d: d.replace(b'"last_offset":9', b'"last_offset":-1'), "last_offset"),
    ],
)
def test_malformed_commit_is_corrupt_catalog_naming_the_key(mutate, fragment: str) -> None:
    with pytest.raises(CorruptCatalog) as caught:
        decode_commit(mutate(encode_commit(sample_commit())), KEY, 7)
    assert caught.value.object_name == KEY
    assert KEY in str(caught.value)
    assert fragment in str(caught.value)


def test_truncated_commit_reports_the_byte_offset() -> None:
    data = encode_commit(sample_commit())
    with pytest.raises(CorruptCatalog) as caught:
        decode_commit(data[:150], KEY)
    assert 149 <= caught.value.offset <= 150  # where the text ran out


def test_commit_stored_under_the_wrong_version_is_corrupt() -> None:
    with pytest.raises(CorruptCatalog, match="records version 7 but its key says 8"):
        decode_commit(encode_commit(sample_commit()), KEY, 8)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"last_offset": 4, "base_offset": 5}, "last_offset 4 < base_offset 5"),
        ({"record_count": 11}, "record_count 11 > offset span 10"),
        ({"min_timestamp": 3, "max_timestamp": 2}, "min_timestamp 3 > max_timestamp 2"),
        ({"key": "orders/0/segment-0.bin"}, "does not end in .kfs"),
        ({"index_key": "orders/0/segment-0.idx"}, "does not end in .index"),
        ({"codec": 5}, "less than or equal to 4"),
        ({"size_bytes": -1}, "greater than or equal to 0"),
    ],
)
def test_segment_entry_validation(changes: dict[str, object], message: str) -> None:
    fields = seg(0, 10).model_dump() | changes
    with pytest.raises(ValidationError, match=message):
        SegmentEntry(**fields)


def test_segment_entry_for_partition_uses_the_standard_keys() -> None:
    entry = SegmentEntry.for_partition(
        "orders",
        3,
        base_offset=42,
        last_offset=50,
        record_count=9,
        size_bytes=1,
        index_size_bytes=0,
        min_timestamp=-1,
        max_timestamp=-1,
        codec=4,
        created_ms=0,
    )
    assert entry.key == "orders/3/segment-00000000000000000042.kfs"
    assert entry.index_key == "orders/3/segment-00000000000000000042.index"


def test_segment_entries_are_immutable() -> None:
    entry = seg(0)
    with pytest.raises(ValidationError):
        entry.base_offset = 5  # type: ignore[misc]


def test_segment_entries_share_one_fields_set_so_each_is_one_object_for_the_collector() -> None:
    # A long partition holds its entries for the daemon's life: every full
    # collection walks whatever they add to the collector's lists.
    gc.collect()
    before = len(gc.get_objects())
    entries = [seg(i * 10) for i in range(1_000)]
    gc.collect()
    assert len(gc.get_objects()) - before <= len(entries) + 50
    assert entries[0].model_fields_set == set(SegmentEntry.model_fields)
    assert entries[0].model_dump(exclude_unset=True) == entries[0].model_dump()


def test_a_copied_segment_entry_is_validated_and_the_shared_fields_set_unchanged() -> None:
    entry = seg(0, 10)
    copy = entry.model_copy(update={"created_ms": 5})
    assert (copy.created_ms, copy.base_offset, entry.created_ms) == (5, 0, 1_700_000_000_000)
    with pytest.raises(ValidationError, match="record_count 11 > offset span 10"):
        entry.model_copy(update={"record_count": 11})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        entry.model_copy(update={"colour": "red"})
    assert seg(20).model_fields_set == set(SegmentEntry.model_fields)


def test_rewritten_segments_carry_their_inputs_transactions() -> None:
    aborted = AbortedRange(producer_id=4, first_offset=3, last_offset=12)
    still_open = OpenTransaction(producer_id=5, first_offset=25)
    inputs = [
        seg(0),
        seg(10).model_copy(update={"aborted": (aborted,)}),
        seg(20).model_copy(update={"open_txns": (still_open,)}),
    ]
    outputs = carry_transactions(inputs, [seg(0, 15, suffix="-c1"), seg(15, 15, suffix="-c1")])
    assert [(o.aborted, o.open_txns) for o in outputs] == [((aborted,), ()), ((), (still_open,))]
    # An abort marker that no output holds is an error, never a silently lost entry.
    with pytest.raises(ValueError, match="marker in no output"):
        carry_transactions(inputs, [seg(0, 5, suffix="-c1"), seg(20, 10, suffix="-c1")])
