"""Cross-checks against kafka-python's own RecordBatch v2 builder and reader.

Batches kafka-python builds, for every codec it supports, must decode with
ours to the same records; batches we build must pass kafka-python's CRC
check and read back the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfs_core.records.batch import (
    CONTROL_COMMIT,
    LOG_APPEND_TIME,
    Record,
    decode_batch,
    encode_batch,
    encode_control_key,
    iter_batches,
    reencode_batch,
    rewrite_base_offset,
    stamp_log_append_time_into,
)
from kfs_core.records.codecs import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    SNAPPY_XERIAL_MAGIC,
)
from kfs_core.records.header import BATCH_HEADER_SIZE
from tests.records.kafka_python import (
    ControlRecord,
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
    MemoryRecords,
)
from tests.records.strategies import record_lists

pytestmark = pytest.mark.unit

ALL_CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]


def kafka_python_batch(
    records: list[Record],
    codec: int,
    *,
    transactional: bool = False,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    """Build a batch with kafka-python, as its producer does (base offset 0)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for record in records:
        metadata = builder.append(
            record.offset, record.timestamp, record.key, record.value, record.headers
        )
        assert metadata is not None
    return bytes(builder.build())


def fields(record: Any) -> tuple[Any, ...]:
    """What both libraries expose of a record."""
    return (record.offset, record.timestamp, record.key, record.value, list(record.headers))


def compressible_records(n: int = 50) -> list[Record]:
    return [
        Record(
            offset=i,
            timestamp=1_700_000_000_000 + i * 3,
            key=b"customer-%03d" % (i % 7) if i % 5 else None,
            value=b'{"order": %d, "status": "shipped", "items": [1, 2, 3]}' % i if i % 9 else None,
            headers=[("trace-id", b"abc%d" % i), ("empty", None)] if i % 2 else [],
        )
        for i in range(n)
    ]


# --- kafka-python builds, we read ------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_batches_decode_with_ours(codec: int) -> None:
    records = compressible_records()
    raw = kafka_python_batch(records, codec, transactional=True, producer=(4242, 7, 100))
    batch = decode_batch(raw)
    # kafka-python falls back to no compression when it does not pay; with
    # these records it always pays, so the codec really was exercised.
    assert batch.codec == codec
    assert [fields(r) for r in batch.records] == [fields(r) for r in records]
    assert batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, 100)
    assert (batch.last_offset_delta, batch.first_timestamp, batch.max_timestamp) == (
        49,
        1_700_000_000_000,
        1_700_000_000_147,
    )
    # kafka-python writes a leader epoch of 0 (Java writes -1); the rest of an
    # uncompressed batch is byte-identical to ours.
    if codec == CODEC_NONE:
        assert (
            encode_batch(
                records,
                partition_leader_epoch=0,
                is_transactional=True,
                producer_id=4242,
                producer_epoch=7,
                base_sequence=100,
            )
            == raw
        )


def test_kafka_python_writes_xerial_framed_snappy() -> None:
    raw = kafka_python_batch(compressible_records(), CODEC_SNAPPY)
    assert raw[BATCH_HEADER_SIZE : BATCH_HEADER_SIZE + 8] == SNAPPY_XERIAL_MAGIC


@settings(max_examples=40, deadline=None)
@given(
    data=record_lists(min_size=1, consecutive=True, base_offset=0),
    codec=st.sampled_from(ALL_CODECS),
)
def test_kafka_python_batches_decode_with_ours_generated(
    data: tuple[int, list[Record]], codec: int
) -> None:
    _, records = data
    batch = decode_batch(kafka_python_batch(records, codec))
    assert [fields(r) for r in batch.records] == [fields(r) for r in records]
    assert batch.max_timestamp == max(r.timestamp for r in records)


# --- we build, kafka-python reads ------------------------------------------------


def assert_kafka_python_reads(raw: bytes, records: list[Record]) -> DefaultRecordBatch:
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc()
    assert [fields(r) for r in theirs] == [fields(r) for r in records]
    return theirs


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_our_batches_decode_with_kafka_python(codec: int) -> None:
    records = [
        Record(r.offset + 1000, r.timestamp, r.key, r.value, r.headers)
        for r in compressible_records()
    ]
    raw = encode_batch(
        records,
        base_offset=1000,
        codec=codec,
        producer_id=99,
        producer_epoch=2,
        base_sequence=5,
        is_transactional=True,
        partition_leader_epoch=3,
    )
    theirs = assert_kafka_python_reads(raw, records)
    assert theirs.compression_type == codec
    assert (theirs.base_offset, theirs.last_offset, theirs.leader_epoch) == (1000, 1049, 3)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (99, 2, 5)
    assert theirs.is_transactional and not theirs.is_control_batch
    assert theirs.timestamp_type == 0


@settings(max_examples=60, deadline=None)
@given(data=record_lists(), codec=st.sampled_from(ALL_CODECS))
def test_our_batches_decode_with_kafka_python_generated(
    data: tuple[int, list[Record]], codec: int
) -> None:
    base, records = data
    raw = encode_batch(records, base_offset=base, codec=codec)
    assert_kafka_python_reads(raw, records)


@pytest.mark.parametrize("target", ALL_CODECS)
def test_reencoded_kafka_python_batches_stay_readable(target: int) -> None:
    records = compressible_records()
    for source in ALL_CODECS:
        batch = decode_batch(kafka_python_batch(records, source, producer=(1, 0, 0)))
        assert_kafka_python_reads(reencode_batch(batch, target), records)


def test_memory_records_walks_our_concatenated_batches() -> None:
    records = compressible_records(10)
    body = b""
    for i, codec in enumerate(ALL_CODECS):
        shifted = [
            Record(r.offset + 10 * i, r.timestamp, r.key, r.value, r.headers) for r in records
        ]
        body += encode_batch(shifted, base_offset=10 * i, codec=codec)
    memory = MemoryRecords(body)
    offsets = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        offsets += [r.offset for r in batch]
    assert offsets == list(range(50))
    assert [r.offset for b in iter_batches(body) for r in b.records] == offsets


# --- the broker's edits, as a client sees them ---------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_assigned_offsets_and_log_append_time_as_kafka_python_sees_them(codec: int) -> None:
    records = compressible_records(5)
    raw = bytearray(rewrite_base_offset(kafka_python_batch(records, codec), 7000))
    stamp_log_append_time_into(raw, 1_900_000_000_000)
    theirs = DefaultRecordBatch(bytes(raw))
    assert theirs.validate_crc()
    assert theirs.timestamp_type == LOG_APPEND_TIME
    read = list(theirs)
    assert [r.offset for r in read] == [7000, 7001, 7002, 7003, 7004]
    assert {r.timestamp for r in read} == {1_900_000_000_000}


def test_control_batch_as_kafka_python_sees_it() -> None:
    marker = Record(12, 5, encode_control_key(CONTROL_COMMIT), b"\x00\x00\x00\x00\x00\x00")
    raw = encode_batch(
        [marker],
        base_offset=12,
        is_control=True,
        is_transactional=True,
        producer_id=8,
        producer_epoch=1,
    )
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc() and theirs.is_control_batch
    (record,) = list(theirs)
    assert isinstance(record, ControlRecord) and record.commit


def test_empty_batch_as_kafka_python_sees_it() -> None:
    raw = encode_batch([], base_offset=3, codec=CODEC_ZSTD, last_offset_delta=2, producer_id=1)
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc()
    assert list(theirs) == []
    assert theirs.next_offset == 6
