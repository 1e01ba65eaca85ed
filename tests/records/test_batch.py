"""RecordBatch v2.

Golden bytes, round trips, attribute bits, corrupt input, iteration over
concatenated batches and the broker's in-place edits.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfs_core.errors import CorruptRecordBatch, UnsupportedCodec
from kfs_core.records.batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CREATE_TIME,
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    assign_offsets_into,
    decode_batch,
    encode_batch,
    encode_control_key,
    iter_batch_headers,
    iter_batches,
    parse_control_key,
    reencode_batch,
    rewrite_base_offset,
    rewrite_base_offset_into,
    set_partition_leader_epoch_into,
    stamp_log_append_time_into,
)
from kfs_core.records.codecs import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    compress,
)
from kfs_core.records.header import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    batch_crc,
    read_batch_header,
)
from tests.records.kafka_python import pure_python_crc32c
from tests.records.strategies import record_lists

pytestmark = pytest.mark.unit

ALL_CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
OBJECT = "ns/orders/0/segment-00000000000000000000.kfs"

GOLDEN_RECORDS = [
    Record(offset=0, timestamp=1_700_000_000_000, key=b"k", value=b"v1", headers=[("h", b"x")]),
    Record(offset=1, timestamp=1_700_000_000_005, key=None, value=b"v2"),
]

# The same two records, written out field by field.
GOLDEN_RECORD_BYTES = bytes.fromhex(
    # record 0
    "1a"  # length: 13 (zig-zag 26)
    "00"  # attributes
    "00"  # timestamp delta 0
    "00"  # offset delta 0
    "02"
    "6b"  # key length 1, "k"
    "04"
    "7631"  # value length 2, "v1"
    "02"  # 1 header
    "02"
    "68"  # header key length 1, "h"
    "02"
    "78"  # header value length 1, "x"
    # record 1
    "10"  # length: 8 (zig-zag 16)
    "00"  # attributes
    "0a"  # timestamp delta 5 (zig-zag 10)
    "02"  # offset delta 1 (zig-zag 2)
    "01"  # key length -1: null key
    "04"
    "7632"  # value length 2, "v2"
    "00"  # no headers
)
GOLDEN_CRC = 0x601D1266
GOLDEN_BATCH = (
    bytes.fromhex(
        "0000000000000000"  # base offset 0
        "00000048"  # batch length 72 = 49 header bytes after this field + 23 record bytes
        "ffffffff"  # partition leader epoch -1
        "02"  # magic 2
        "601d1266"  # CRC-32C of everything from the attributes on
        "0000"  # attributes: no codec, CreateTime, not transactional, not control
        "00000001"  # last offset delta 1
        "0000018bcfe56800"  # first timestamp 1700000000000
        "0000018bcfe56805"  # max timestamp 1700000000005
        "ffffffffffffffff"  # producer id -1
        "ffff"  # producer epoch -1
        "ffffffff"  # base sequence -1
        "00000002"  # 2 records
    )
    + GOLDEN_RECORD_BYTES
)


def recrc(buf: bytearray, pos: int = 0) -> bytearray:
    """Fix the CRC after a deliberate edit, so the check behind it is reached."""
    total = read_batch_header(buf, pos).total_size
    struct.pack_into(">I", buf, pos + 17, batch_crc(buf, pos, total))
    return buf


def flip(buf: bytes, index: int, bit: int = 0) -> bytearray:
    out = bytearray(buf)
    out[index] ^= 1 << bit
    return out


# --- golden bytes ------------------------------------------------------------


def test_golden_uncompressed_batch() -> None:
    encoded = encode_batch(GOLDEN_RECORDS)
    assert encoded == GOLDEN_BATCH
    assert len(encoded) == BATCH_HEADER_SIZE + 23
    # The pinned CRC agrees with an implementation nobody here wrote.
    assert pure_python_crc32c(GOLDEN_BATCH[21:]) == GOLDEN_CRC


def test_golden_batch_decodes() -> None:
    batch = decode_batch(GOLDEN_BATCH)
    assert batch == RecordBatch(
        base_offset=0,
        partition_leader_epoch=-1,
        attributes=0,
        last_offset_delta=1,
        first_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_005,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records=GOLDEN_RECORDS,
        crc=GOLDEN_CRC,
        size_in_bytes=len(GOLDEN_BATCH),
    )
    assert (batch.magic, batch.record_count, batch.last_offset, batch.next_offset) == (2, 2, 1, 2)


# --- round trips -------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    data=record_lists(),
    codec=st.sampled_from(ALL_CODECS),
    timestamp_type=st.sampled_from([CREATE_TIME, LOG_APPEND_TIME]),
    transactional=st.booleans(),
    control=st.booleans(),
    producer=st.tuples(
        st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)
    ),
    leader_epoch=st.integers(-1, 2**31 - 1),
)
def test_round_trip(
    data: tuple[int, list[Record]],
    codec: int,
    timestamp_type: int,
    transactional: bool,
    control: bool,
    producer: tuple[int, int, int],
    leader_epoch: int,
) -> None:
    base, records = data
    producer_id, producer_epoch, base_sequence = producer
    encoded = encode_batch(
        records,
        base_offset=base,
        codec=codec,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
        is_control=control,
        partition_leader_epoch=leader_epoch,
    )
    batch = decode_batch(encoded, object_name=OBJECT)
    assert batch.records == records
    assert batch.base_offset == base
    assert batch.codec == (codec if records else CODEC_NONE)
    assert batch.timestamp_type == timestamp_type
    assert batch.is_transactional is transactional
    assert batch.is_control is control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert batch.partition_leader_epoch == leader_epoch
    assert batch.size_in_bytes == len(encoded)
    if records:
        assert batch.last_offset == records[-1].offset
        assert batch.first_timestamp == records[0].timestamp
        assert batch.max_timestamp == max(r.timestamp for r in records)
    # Encoding the decoded batch again gives the same bytes.
    assert reencode_batch(batch) == encoded


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_record_attributes_and_odd_header_keys_round_trip(codec: int) -> None:
    records = [
        Record(0, 5, b"k", b"v", [("caf\xe9", b"1"), ("", None)], attributes=-3),
        Record(1, 4, None, None, [("\udcff\udc80", b"raw bytes key")], attributes=127),
    ]
    batch = decode_batch(encode_batch(records, codec=codec))
    assert batch.records == records
    assert batch.first_timestamp == 5  # the first record's, not the smallest
    assert batch.max_timestamp == 5


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_non_utf8_header_key_survives_a_round_trip(codec: int) -> None:
    # A header key that is not UTF-8 (librdkafka allows any bytes) must come
    # back byte for byte, so a re-encoded batch keeps its bytes.
    encoded = bytearray(encode_batch([Record(0, 0, None, b"v", [("ab", b"x")])], codec=CODEC_NONE))
    index = encoded.index(b"ab")
    encoded[index : index + 2] = b"\xff\xfe"
    recrc(encoded)
    batch = decode_batch(encoded)
    assert reencode_batch(batch) == bytes(encoded)
    assert decode_batch(reencode_batch(batch, codec)).records == batch.records


def test_attribute_bits_are_exact() -> None:
    encoded = encode_batch(
        GOLDEN_RECORDS,
        codec=CODEC_LZ4,
        timestamp_type=LOG_APPEND_TIME,
        is_transactional=True,
        is_control=True,
    )
    header = read_batch_header(encoded)
    assert header.attributes == CODEC_LZ4 | TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT
    assert header.attributes == 0x3B


def test_log_append_time_effective_timestamp() -> None:
    batch = decode_batch(
        encode_batch(GOLDEN_RECORDS, timestamp_type=LOG_APPEND_TIME, max_timestamp=42)
    )
    assert batch.max_timestamp == 42
    assert [r.timestamp for r in batch.records] == [1_700_000_000_000, 1_700_000_000_005]
    assert [batch.effective_timestamp(r) for r in batch.records] == [42, 42]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_empty_batch_is_a_bare_header(codec: int) -> None:
    encoded = encode_batch(
        [],
        base_offset=100,
        codec=codec,
        last_offset_delta=4,
        max_timestamp=77,
        producer_id=9,
        producer_epoch=1,
        base_sequence=50,
    )
    assert len(encoded) == BATCH_HEADER_SIZE
    batch = decode_batch(encoded)
    assert batch.records == []
    # As Kafka's writeEmptyHeader: codec none, no first timestamp.
    assert (batch.codec, batch.last_offset, batch.first_timestamp, batch.max_timestamp) == (
        CODEC_NONE,
        104,
        -1,
        77,
    )
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 1, 50)


@pytest.mark.parametrize(
    ("records", "kwargs", "match"),
    [
        ([Record(1, 0, None, None), Record(1, 0, None, None)], {}, "not above"),
        ([Record(2, 0, None, None), Record(1, 0, None, None)], {}, "not above"),
        ([Record(4, 0, None, None)], {"base_offset": 5}, "not above"),
        ([Record(2**31, 0, None, None)], {}, "int32"),
        ([Record(3, 0, None, None)], {"last_offset_delta": 2}, "beyond last offset"),
        ([], {"codec": 8}, "codec bits"),
        ([], {"timestamp_type": 2}, "timestamp type"),
    ],
)
def test_encode_refuses_bad_input(
    records: list[Record], kwargs: dict[str, int], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        encode_batch(records, **kwargs)


def test_encode_with_unknown_codec_bits() -> None:
    with pytest.raises(UnsupportedCodec):
        encode_batch(GOLDEN_RECORDS, codec=5)


# --- re-encoding (compaction) ------------------------------------------------


@pytest.mark.parametrize("source", ALL_CODECS)
@pytest.mark.parametrize("target", ALL_CODECS)
def test_reencode_keeps_every_header_field(source: int, target: int) -> None:
    records = [
        Record(1000 + i, 1_000 + (i * 7) % 5, b"key%d" % (i % 4), b"value" * i, [("i", b"%d" % i)])
        for i in range(40)
    ]
    original = decode_batch(
        encode_batch(
            records,
            base_offset=1000,
            codec=source,
            producer_id=77,
            producer_epoch=3,
            base_sequence=1200,
            is_transactional=True,
            partition_leader_epoch=12,
        )
    )
    again = decode_batch(reencode_batch(original, target))
    assert again.codec == target
    assert again.records == original.records
    for name in (
        "base_offset",
        "partition_leader_epoch",
        "last_offset_delta",
        "first_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
    ):
        assert getattr(again, name) == getattr(original, name), name
    assert again.attributes & ~0x07 == original.attributes & ~0x07


def test_reencode_a_compacted_subset() -> None:
    records = [Record(10 + i, 500 - i, b"k%d" % i, b"v", []) for i in range(5)]
    batch = decode_batch(encode_batch(records, base_offset=10, codec=CODEC_GZIP))
    kept = [records[1], records[3]]
    compacted = decode_batch(reencode_batch(batch, CODEC_ZSTD, records=kept))
    assert compacted.records == kept
    assert compacted.last_offset == 14  # kept: producer sequences and offsets stay valid
    assert compacted.first_timestamp == 500  # deltas stay relative to the original
    assert compacted.max_timestamp == 499  # CreateTime: largest kept timestamp
    nothing = decode_batch(reencode_batch(batch, CODEC_ZSTD, records=[]))
    assert nothing.records == [] and nothing.last_offset == 14
    assert nothing.size_in_bytes == BATCH_HEADER_SIZE
    assert (nothing.codec, nothing.first_timestamp, nothing.max_timestamp) == (0, -1, 500)


def test_reencode_keeps_log_append_time_and_delete_horizon() -> None:
    encoded = bytearray(
        encode_batch(GOLDEN_RECORDS, timestamp_type=LOG_APPEND_TIME, max_timestamp=9)
    )
    # Set the KIP-534 delete-horizon bit by hand, as Kafka's cleaner would.
    attributes = struct.unpack_from(">h", encoded, 21)[0] | DELETE_HORIZON_BIT
    struct.pack_into(">h", encoded, 21, attributes)
    batch = decode_batch(recrc(encoded))
    assert batch.has_delete_horizon
    subset = decode_batch(reencode_batch(batch, CODEC_SNAPPY, records=batch.records[1:]))
    assert subset.has_delete_horizon and subset.timestamp_type == LOG_APPEND_TIME
    assert (subset.first_timestamp, subset.max_timestamp) == (1_700_000_000_000, 9)
    assert subset.records == batch.records[1:]


# --- corrupt input -----------------------------------------------------------


def test_every_bit_flip_outside_the_unprotected_fields_is_caught() -> None:
    prefix = encode_batch([Record(0, 0, b"a", b"b")])
    buf = prefix + GOLDEN_BATCH
    start = len(prefix)
    for index in range(start, len(buf)):
        for bit in (0, 7):
            damaged = flip(buf, index, bit)
            field = index - start
            if field < 8 or 12 <= field < 16:
                # Base offset and leader epoch: outside the CRC, by design.
                decode_batch(damaged, start, object_name=OBJECT)
                continue
            with pytest.raises(CorruptRecordBatch) as info:
                decode_batch(damaged, start, object_name=OBJECT)
            error = info.value
            assert error.object_name == OBJECT
            assert OBJECT in str(error)
            if field >= 17:
                assert error.offset == start + 17  # the CRC field
                assert "CRC" in error.message
            elif field == 16:
                assert error.offset == start + 16
                assert "magic" in error.message
            else:
                assert error.offset in (start + 8, start + 17)


def test_verify_crc_false_skips_only_the_crc() -> None:
    damaged = flip(GOLDEN_BATCH, len(GOLDEN_BATCH) - 2)  # inside "v2"
    with pytest.raises(CorruptRecordBatch, match="CRC"):
        decode_batch(damaged)
    assert decode_batch(damaged, verify_crc=False).records[1].value == b"v3"


def test_truncated_batch() -> None:
    for cut in range(len(GOLDEN_BATCH)):
        with pytest.raises(CorruptRecordBatch, match="truncated") as info:
            decode_batch(GOLDEN_BATCH[:cut], object_name=OBJECT)
        assert info.value.offset in (0, 8)


def test_wrong_magic() -> None:
    damaged = bytearray(GOLDEN_BATCH)
    damaged[16] = 1
    with pytest.raises(CorruptRecordBatch, match="magic 1") as info:
        decode_batch(damaged)
    assert info.value.offset == 16


def test_batch_length_shorter_than_a_header() -> None:
    damaged = bytearray(GOLDEN_BATCH)
    struct.pack_into(">i", damaged, 8, 20)
    with pytest.raises(CorruptRecordBatch, match="shorter than a header") as info:
        decode_batch(damaged)
    assert info.value.offset == 8


RECORDS_START = BATCH_HEADER_SIZE  # 61: where record 0 starts
RECORD_1_START = RECORDS_START + 14


@pytest.mark.parametrize(
    ("edit", "match", "offset"),
    [
        # header record count 3, only 2 records present
        (lambda b: struct.pack_into(">i", b, 57, 3), "record count 3", len(GOLDEN_BATCH)),
        # header record count 1, a second record follows
        (lambda b: struct.pack_into(">i", b, 57, 1), "left over", RECORD_1_START),
        (lambda b: struct.pack_into(">i", b, 57, -1), "negative record count", 57),
        # record 0 claims 14 bytes, its fields take 13
        (lambda b: b.__setitem__(RECORDS_START, 0x1C), "declares 14 bytes", RECORDS_START),
        # record 0 claims more bytes than remain
        (lambda b: b.__setitem__(RECORDS_START, 0x7E), "has length 63", RECORDS_START),
        # record 0's key length -2
        (lambda b: b.__setitem__(RECORDS_START + 4, 0x03), "key length -2", RECORDS_START),
        # record 1's value length -3
        (lambda b: b.__setitem__(RECORD_1_START + 5, 0x05), "value length -3", RECORD_1_START),
        # record 0's header count -1
        (lambda b: b.__setitem__(RECORDS_START + 9, 0x01), "header count -1", RECORDS_START),
        # record 0's header key length -1 (header keys are never null)
        (lambda b: b.__setitem__(RECORDS_START + 10, 0x01), "header key", RECORDS_START),
        # record 1's offset delta becomes an unterminated varint
        (lambda b: b.__setitem__(len(b) - 1, 0x80), "malformed", RECORD_1_START),
    ],
)
def test_structural_damage_behind_a_valid_crc(edit, match: str, offset: int) -> None:  # type: ignore[no-untyped-def]
    damaged = bytearray(GOLDEN_BATCH)
    edit(damaged)
    recrc(damaged)
    with pytest.raises(CorruptRecordBatch, match=match) as info:
        decode_batch(damaged, object_name=OBJECT)
    assert info.value.offset == offset
    assert info.value.object_name == OBJECT


def _with_payload(codec: int, count: int, payload: bytes) -> bytearray:
    """A batch header announcing ``codec`` and ``count`` in front of ``payload``."""
    buf = bytearray(BATCH_HEADER_SIZE) + payload
    BATCH_HEADER.pack_into(
        buf, 0, 0, len(buf) - 12, -1, 2, 0, codec, count - 1, 0, 0, -1, -1, -1, count
    )
    return recrc(buf)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_garbage_compressed_payload(codec: int) -> None:
    buf = bytes(100) + _with_payload(codec, 2, b"\x07definitely not compressed data")
    with pytest.raises(CorruptRecordBatch, match="decompress") as info:
        decode_batch(buf, 100, object_name=OBJECT)
    assert info.value.offset == 100 + BATCH_HEADER_SIZE


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_compressed_records_with_a_bad_count(codec: int) -> None:
    buf = _with_payload(codec, 3, compress(codec, GOLDEN_RECORD_BYTES))
    with pytest.raises(CorruptRecordBatch, match="decompressed records") as info:
        decode_batch(buf, object_name=OBJECT)
    assert info.value.offset == BATCH_HEADER_SIZE


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_a_batch(codec: int) -> None:
    with pytest.raises(UnsupportedCodec):
        decode_batch(_with_payload(codec, 2, GOLDEN_RECORD_BYTES))


# --- iterating concatenated batches --------------------------------------------


def _three_batches() -> tuple[bytes, list[bytes]]:
    parts = [
        GOLDEN_BATCH,
        encode_batch(
            [Record(2, 1, b"x", b"y"), Record(3, 2, None, b"z")], base_offset=2, codec=CODEC_GZIP
        ),
        encode_batch([Record(4, 3, b"k", None)], base_offset=4, codec=CODEC_ZSTD),
    ]
    return b"".join(parts), parts


def test_iter_batches() -> None:
    body, parts = _three_batches()
    positions = [pos for pos, _ in iter_batch_headers(body)]
    assert positions == [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    batches = list(iter_batches(body))
    assert [r.offset for b in batches for r in b.records] == [0, 1, 2, 3, 4]
    assert [b.codec for b in batches] == [CODEC_NONE, CODEC_GZIP, CODEC_ZSTD]
    # A window of the buffer.
    assert [
        b.base_offset for b in iter_batches(body, len(parts[0]), len(body) - len(parts[2]))
    ] == [2]
    assert list(iter_batches(b"")) == []


def test_iter_batches_truncated_tail() -> None:
    body, parts = _three_batches()
    for tail in (b"\x00" * 5, parts[2][:11], parts[2][:12], parts[2][:40], parts[2][:-1]):
        buf = body + tail
        assert len(list(iter_batches(buf, allow_truncated_tail=True))) == 3
        with pytest.raises(CorruptRecordBatch, match="truncated") as info:
            list(iter_batches(buf, object_name=OBJECT))
        assert info.value.offset in (len(body), len(body) + 8)


def test_iter_batches_reports_where_the_damage_is() -> None:
    body, parts = _three_batches()
    second = len(parts[0])
    damaged = flip(body, second + 40)
    with pytest.raises(CorruptRecordBatch) as info:
        list(iter_batches(damaged, object_name=OBJECT))
    assert info.value.offset == second + 17
    assert len(list(iter_batch_headers(damaged, verify_crc=False))) == 3


# --- the broker's edits --------------------------------------------------------


def test_rewrite_base_offset_keeps_the_crc() -> None:
    moved = rewrite_base_offset(GOLDEN_BATCH, 1_000_000)
    assert moved[8:] == GOLDEN_BATCH[8:]
    batch = decode_batch(moved)  # verifies the CRC
    assert [r.offset for r in batch.records] == [1_000_000, 1_000_001]
    assert batch.records[0].value == b"v1"


def test_rewrite_base_offset_in_place_on_bytearray_and_memoryview() -> None:
    buf = bytearray(b"junk" + GOLDEN_BATCH)
    header = rewrite_base_offset_into(buf, 7, 4)
    assert header.base_offset == 0  # the header before the edit
    assert decode_batch(buf, 4).base_offset == 7
    view = memoryview(buf)
    rewrite_base_offset_into(view[4:], 9)
    assert decode_batch(buf, 4).base_offset == 9
    with pytest.raises(CorruptRecordBatch):
        rewrite_base_offset_into(bytearray(10), 1)


def test_assign_offsets_into_a_produce_request() -> None:
    body, _ = _three_batches()
    buf = bytearray(body)
    assert assign_offsets_into(buf, 500) == 505
    batches = list(iter_batches(buf))
    assert [b.base_offset for b in batches] == [500, 502, 504]
    assert [r.offset for b in batches for r in b.records] == [500, 501, 502, 503, 504]


def test_set_partition_leader_epoch_keeps_the_crc() -> None:
    buf = bytearray(GOLDEN_BATCH)
    set_partition_leader_epoch_into(buf, 31)
    assert decode_batch(buf).partition_leader_epoch == 31


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_stamp_log_append_time(codec: int) -> None:
    buf = bytearray(
        b"pad" + encode_batch(GOLDEN_RECORDS, codec=codec, is_transactional=True, producer_id=1)
    )
    stamp_log_append_time_into(buf, 1_800_000_000_000, 3)
    batch = decode_batch(buf, 3)  # CRC recomputed
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert batch.is_transactional and batch.codec == codec
    assert batch.max_timestamp == 1_800_000_000_000
    assert batch.first_timestamp == 1_700_000_000_000
    assert [batch.effective_timestamp(r) for r in batch.records] == [1_800_000_000_000] * 2


# --- control records -----------------------------------------------------------


def test_control_batch() -> None:
    marker = Record(50, 123, encode_control_key(CONTROL_COMMIT), b"\x00\x00\x00\x00\x00\x07")
    batch = decode_batch(
        encode_batch(
            [marker],
            base_offset=50,
            is_control=True,
            is_transactional=True,
            producer_id=4,
            producer_epoch=0,
        )
    )
    assert batch.is_control and batch.is_transactional
    assert parse_control_key(batch.records[0].key) == (0, CONTROL_COMMIT)
    assert parse_control_key(encode_control_key(CONTROL_ABORT)) == (0, CONTROL_ABORT)
    with pytest.raises(CorruptRecordBatch):
        parse_control_key(b"\x00")
    with pytest.raises(CorruptRecordBatch):
        parse_control_key(None)
