"""kfs_core.records.merge: merged batches are exactly what decode + encode_batch would build.

The model is the slow path compaction used before: decode every source
batch, keep the records not dropped, `encode_batch` them at the first source
batch's base offset.  `BatchMerger` must give the same bytes, refuse the same
damaged input with `CorruptRecordBatch`, and the same unencodable timestamps
with `ValueError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kfs_core.errors import CorruptRecordBatch
from kfs_core.records.batch import Record, decode_batch, encode_batch
from kfs_core.records.codecs import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from kfs_core.records.header import read_batch_header
from kfs_core.records.merge import BatchMerger, rebase_records
from tests.records.strategies import record_lists
from tests.records.test_batch import GOLDEN_BATCH, OBJECT, RECORD_1_START, RECORDS_START, recrc

pytestmark = pytest.mark.unit

ALL_CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]


@st.composite
def source_batches(draw: st.DrawFn) -> list[tuple[bytes, list[Record]]]:
    """Consecutive batches (increasing offsets, gaps allowed), each with its records."""
    batches: list[tuple[bytes, list[Record]]] = []
    next_offset = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 4))):
        base = next_offset + draw(st.integers(0, 5))
        _, records = draw(record_lists(min_size=1, max_size=6, base_offset=base))
        try:
            encoded = encode_batch(
                records, base_offset=base, codec=draw(st.sampled_from(ALL_CODECS))
            )
        except ValueError:  # timestamps too far apart for one batch
            assume(False)
        batches.append((encoded, records))
        next_offset = records[-1].offset + 1 + draw(st.integers(0, 3))
    return batches


def merged_by_model(
    batches: list[tuple[bytes, list[Record]]], drop: set[int], codec: int
) -> bytes | None:
    """The slow path: decode, filter, encode_batch."""
    first = read_batch_header(batches[0][0])
    last = read_batch_header(batches[-1][0]).last_offset
    kept = [
        r
        for encoded, _ in batches
        for r in decode_batch(encoded).records
        if r.key is None or r.offset not in drop
    ]
    if not kept:
        return None
    return encode_batch(
        kept,
        base_offset=first.base_offset,
        codec=codec,
        last_offset_delta=last - first.base_offset,
        partition_leader_epoch=first.partition_leader_epoch,
    )


def merged(batches: list[tuple[bytes, list[Record]]], drop: set[int], codec: int) -> bytes | None:
    merger = BatchMerger(codec)
    for encoded, _ in batches:
        header = read_batch_header(encoded)
        merger.add(header, merger.rebase(encoded, 0, header, drop=drop))
    return merger.finish()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=source_batches(), codec=st.sampled_from(ALL_CODECS), data=st.data())
def test_merging_equals_decode_filter_encode(
    batches: list[tuple[bytes, list[Record]]], codec: int, data: st.DataObject
) -> None:
    offsets = [r.offset for _, records in batches for r in records]
    drop = data.draw(st.sets(st.sampled_from(offsets)))
    try:
        expected = merged_by_model(batches, drop, codec)
    except ValueError:
        # The kept records' timestamps cannot share one batch: refused alike.
        with pytest.raises(ValueError):
            merged(batches, drop, codec)
        return
    result = merged(batches, drop, codec)
    assert result == expected
    if result is not None:
        records = decode_batch(result).records
        assert [r.offset for r in records] == [
            o
            for o, r in zip(offsets, [r for _, rs in batches for r in rs], strict=True)
            if r.key is None or o not in drop
        ]


def test_a_merger_spans_dropped_batches_and_starts_afresh() -> None:
    first = encode_batch(
        [Record(10, 1000, b"a", b"1"), Record(11, 1001, b"b", b"2")], base_offset=10
    )
    second = encode_batch(
        [Record(14, 999, None, b"3"), Record(15, 1010, b"c", b"4")], base_offset=12
    )
    merger = BatchMerger(CODEC_NONE)
    for encoded in (first, second):
        header = read_batch_header(encoded)
        merger.add(header, merger.rebase(encoded, 0, header, drop={10, 11}))
    batch = decode_batch(merger.finish() or b"")
    # The first source batch's records are all gone, its offsets are still spanned.
    assert (batch.base_offset, batch.last_offset) == (10, 15)
    assert [(r.offset, r.timestamp) for r in batch.records] == [(14, 999), (15, 1010)]
    assert (batch.first_timestamp, batch.max_timestamp) == (999, 1010)
    assert merger.empty and merger.finish() is None
    header = read_batch_header(first)
    merger.add(header, merger.rebase(first, 0, header, drop={10, 11}))
    assert merger.finish() is None  # every record dropped: no batch at all


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda b: struct.pack_into(">i", b, 57, 3), "record count 3"),
        (lambda b: struct.pack_into(">i", b, 57, 1), "left over"),
        (lambda b: struct.pack_into(">i", b, 57, -1), "negative record count"),
        (lambda b: b.__setitem__(RECORDS_START, 0x1C), "declares 14 bytes"),
        (lambda b: b.__setitem__(RECORDS_START, 0x7E), "has length 63"),
        (lambda b: b.__setitem__(RECORDS_START + 4, 0x03), "key length -2"),
        (lambda b: b.__setitem__(RECORD_1_START + 5, 0x05), "value length -3"),
        (lambda b: b.__setitem__(RECORDS_START + 9, 0x01), "header count -1"),
        (lambda b: b.__setitem__(RECORDS_START + 10, 0x01), "header key"),
        (lambda b: b.__setitem__(len(b) - 1, 0x80), "malformed"),
        # offsets must increase within the batch's last offset delta
        (lambda b: b.__setitem__(RECORD_1_START + 3, 0x00), "offset delta 0"),
        (lambda b: b.__setitem__(RECORD_1_START + 3, 0x04), "offset delta 2"),
    ],
)
def test_damage_behind_a_valid_crc_is_refused(
    edit: Callable[[bytearray], None], match: str
) -> None:
    damaged = bytearray(GOLDEN_BATCH)
    edit(damaged)
    recrc(damaged)
    with pytest.raises(CorruptRecordBatch, match=match) as info:
        BatchMerger(CODEC_ZSTD).rebase(damaged, 0, read_batch_header(damaged), object_name=OBJECT)
    assert info.value.object_name == OBJECT


def test_timestamps_one_batch_cannot_hold_are_refused_not_called_damage() -> None:
    early = encode_batch([Record(0, -(2**62), b"a", b"1")])
    late = encode_batch([Record(1, 2**62 + 5, b"b", b"2")], base_offset=1)
    with pytest.raises(ValueError, match="too far"):
        merged_by_model([(early, []), (late, [])], set(), CODEC_NONE)
    with pytest.raises(ValueError, match="does not fit") as info:
        merged([(early, []), (late, [])], set(), CODEC_NONE)
    assert not isinstance(info.value, CorruptRecordBatch)


def test_rebase_refuses_a_base_above_the_batch() -> None:
    header = read_batch_header(GOLDEN_BATCH)
    with pytest.raises(ValueError, match="below the new base"):
        rebase_records(GOLDEN_BATCH[61:], header, base_offset=1, first_timestamp=None)
