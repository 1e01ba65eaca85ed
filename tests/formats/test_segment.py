"""`.kfs` segments: writer contract, reader checks and typed corruption errors."""

from __future__ import annotations

import struct
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfs_core.errors import CorruptRecordBatch, CorruptSegment
from kfs_core.formats.segment import (
    SEGMENT_FOOTER_SIZE,
    SEGMENT_HEADER_SIZE,
    SegmentReader,
    SegmentWriter,
    decode_segment_footer,
    decode_segment_header,
    index_object_name,
    iter_batch_headers,
    parse_object_name,
    segment_object_name,
)
from tests.formats import golden
from tests.formats.batches import make_batch, make_batches

with warnings.catch_warnings():
    # Importing kafka-python 3 warns (importlib.resources.read_text) under -W error.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

pytestmark = pytest.mark.unit

NAME = "ns/orders/0/segment-00000000000000000005.kfs"
SEGMENT = golden.SEGMENT
BODY_END = len(SEGMENT) - SEGMENT_FOOTER_SIZE  # 182


def build(batches: list[bytes], **kwargs: int) -> bytes:
    writer = SegmentWriter(created_ms=1, **kwargs)
    for batch in batches:
        writer.append(batch)
    return writer.finish().data


def flip(data: bytes, byte: int, bit: int = 0) -> bytes:
    out = bytearray(data)
    out[byte] ^= 1 << bit
    return bytes(out)


def open_and_verify(data: bytes, name: str = NAME) -> None:
    SegmentReader(data, name).verify()


# --- writer ----------------------------------------------------------------


def test_writer_tracks_size_count_and_last_offset() -> None:
    writer = SegmentWriter(index_interval=1)
    assert (writer.size, writer.message_count, writer.last_offset) == (48, 0, None)
    batches = make_batches([(10, 3), (13, 1), (20, 5)])
    positions = [writer.append(b) for b in batches]
    assert positions == [32, 32 + len(batches[0]), 32 + len(batches[0]) + len(batches[1])]
    assert writer.message_count == 9
    assert writer.last_offset == 24
    assert writer.size == 48 + sum(map(len, batches))
    sealed = writer.finish()
    assert len(sealed.data) == sealed.meta.size == writer.size
    assert sealed.meta.base_offset == 10
    assert [e.offset for e in sealed.index_entries] == [10, 13, 20]


def test_writer_accepts_several_concatenated_batches_in_one_append() -> None:
    batches = make_batches([(0, 2), (2, 2), (4, 2)])
    writer = SegmentWriter(created_ms=1, index_interval=1)
    assert writer.append(b"".join(batches)) == 32
    assert writer.batch_count == 3
    assert writer.finish().data == build(batches, index_interval=1)


def test_explicit_base_offset_may_precede_the_first_batch() -> None:
    # A compacted segment keeps its original base offset.
    writer = SegmentWriter(base_offset=100, created_ms=1)
    writer.append(make_batch(104, [b"v"]))
    sealed = writer.finish()
    reader = SegmentReader(sealed.data, "segment-00000000000000000100.kfs")
    assert reader.header.base_offset == 100
    assert reader.verify().base_offset == 100


@pytest.mark.parametrize(
    ("first", "second"), [((5, 3), (7, 1)), ((5, 3), (5, 1)), ((5, 3), (2, 1))]
)
def test_offsets_must_strictly_increase(first: tuple[int, int], second: tuple[int, int]) -> None:
    writer = SegmentWriter(created_ms=1)
    a, b = make_batches([first, second])
    writer.append(a)
    with pytest.raises(ValueError, match="strictly increase"):
        writer.append(b)
    # The refused batch left no trace.
    assert writer.message_count == 3
    assert writer.finish().data == build([a])


def test_batch_below_the_explicit_base_offset_is_refused() -> None:
    writer = SegmentWriter(base_offset=10)
    with pytest.raises(ValueError, match="below the segment base offset"):
        writer.append(make_batch(9, [b"v"]))


def test_a_failed_multi_batch_append_adds_nothing() -> None:
    writer = SegmentWriter(created_ms=1)
    good = make_batch(0, [b"a"])
    with pytest.raises(CorruptRecordBatch):
        writer.append(good + good[:30])
    assert (writer.batch_count, writer.size) == (0, 48)
    writer.append(good)
    assert writer.finish().data == build([good])


@pytest.mark.parametrize(
    ("garbage", "offset"),
    [
        (b"\x00" * 10, 0),  # shorter than a batch header
        (make_batch(0, [b"a"])[:-1], 8),  # batch length runs past the end
        (flip(make_batch(0, [b"a"]), 16, 0), 16),  # magic 3
    ],
)
def test_garbage_batches_raise_corrupt_record_batch(garbage: bytes, offset: int) -> None:
    with pytest.raises(CorruptRecordBatch) as info:
        SegmentWriter().append(garbage)
    assert info.value.offset == offset


def test_empty_and_finished_writers_refuse() -> None:
    with pytest.raises(ValueError, match="empty segment"):
        SegmentWriter().finish()
    writer = SegmentWriter()
    writer.append(make_batch(0, [b"a"]))
    writer.finish()
    with pytest.raises(ValueError, match="finished"):
        writer.append(make_batch(1, [b"a"]))
    with pytest.raises(ValueError, match="finished"):
        writer.finish()
    with pytest.raises(ValueError, match="interval"):
        SegmentWriter(index_interval=0)
    with pytest.raises(ValueError, match="negative"):
        SegmentWriter(base_offset=-1)


def test_writer_copies_mutable_input() -> None:
    batch = bytearray(make_batch(0, [b"abc"]))
    writer = SegmentWriter(created_ms=1)
    writer.append(batch)
    batch[-2] ^= 0xFF
    SegmentReader(writer.finish().data).verify()


def test_codec_flags_timestamps_and_counts() -> None:
    gzip_a = make_batch(0, [b"x" * 50] * 4, codec=1)
    gzip_b = make_batch(4, [b"y"] * 2, codec=1, first_timestamp=5_000)
    plain = make_batch(6, [b"z"], first_timestamp=9_000)
    all_gzip = SegmentWriter(created_ms=1)
    all_gzip.append(gzip_a)
    all_gzip.append(gzip_b)
    meta = all_gzip.finish().meta
    assert (meta.flags, meta.codec, meta.record_count) == (1, 1, 6)
    assert (meta.min_timestamp, meta.max_timestamp) == (5_000, 1_700_000_000_003)
    mixed = SegmentWriter(created_ms=1)
    for batch in (gzip_a, gzip_b, plain):
        mixed.append(batch)
    sealed = mixed.finish()
    assert sealed.meta.flags == 0
    assert SegmentReader(sealed.data).verify() == sealed.meta


def test_log_append_time_batches_use_the_max_timestamp() -> None:
    batch = bytearray(make_batch(0, [b"a", b"b"], first_timestamp=1_000, attributes=0x08))
    writer = SegmentWriter(created_ms=1)
    writer.append(bytes(batch))
    meta = writer.finish().meta
    assert (meta.min_timestamp, meta.max_timestamp) == (1_001, 1_001)


def test_kafka_python_batches_round_trip() -> None:
    writer = SegmentWriter(created_ms=1, index_interval=10)
    expected = []
    offset = 0
    for n in range(1, 8):
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        for i in range(n):
            value = f"value-{offset + i}".encode()
            builder.append(i, timestamp=1_000 + offset + i, key=None, value=value, headers=[])
            expected.append((offset + i, value))
        batch = bytearray(builder.build())
        batch[:8] = struct.pack(">q", offset)  # assign offsets, outside the CRC
        writer.append(batch)
        offset += n
    sealed = writer.finish()
    reader = SegmentReader(sealed.data, segment_object_name(0))
    assert reader.verify().record_count == len(expected)
    seen: list[tuple[int, bytes]] = []
    for position, header in reader.iter_batches():
        batch = DefaultRecordBatch(bytearray(reader.batch_bytes(position, header)))
        assert batch.validate_crc()
        seen.extend((record.offset, bytes(record.value)) for record in batch)
    assert seen == expected


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 6)),  # (gap before, record count)
        min_size=1,
        max_size=30,
    ),
    st.integers(1, 20),
)
def test_any_well_formed_segment_verifies(specs: list[tuple[int, int]], interval: int) -> None:
    base = 0
    batches = []
    for gap, count in specs:
        base += gap
        batches.append(make_batch(base, [b"v"] * count))
        base += count
    writer = SegmentWriter(created_ms=7, index_interval=interval)
    for batch in batches:
        writer.append(batch)
    sealed = writer.finish()
    meta = SegmentReader(sealed.data, segment_object_name(sealed.meta.base_offset)).verify()
    assert meta == sealed.meta
    assert meta.record_count == sum(count for _, count in specs)
    assert meta.last_offset == base - 1


# --- reader ----------------------------------------------------------------


def test_object_names() -> None:
    assert segment_object_name(5) == "segment-00000000000000000005.kfs"
    assert index_object_name(5) == "segment-00000000000000000005.index"
    assert parse_object_name("ns/t/3/segment-00000000000000001234.index") == 1234
    with pytest.raises(ValueError):
        parse_object_name("segment-5.kfs")


def test_range_read_helpers_work_on_fetched_pieces() -> None:
    header = decode_segment_header(SEGMENT[:32], NAME)
    footer = decode_segment_footer(SEGMENT[-16:], NAME, file_offset=BODY_END)
    assert (header.base_offset, footer.last_offset) == (5, 9)
    # A range GET of the body from batch B on, cut 10 bytes short of its end.
    piece = SEGMENT[golden.BATCH_B_POSITION : BODY_END - 10]
    walked = list(
        iter_batch_headers(piece, NAME, file_offset=golden.BATCH_B_POSITION, allow_partial=True)
    )
    assert walked == []
    whole = SEGMENT[32:BODY_END]
    walked = list(iter_batch_headers(whole, NAME, file_offset=32, allow_partial=True))
    assert [pos for pos, _ in walked] == [32, golden.BATCH_B_POSITION]
    with pytest.raises(CorruptSegment) as info:
        list(iter_batch_headers(piece, NAME, file_offset=golden.BATCH_B_POSITION))
    assert (info.value.object_name, info.value.offset) == (NAME, golden.BATCH_B_POSITION + 8)


def test_reader_accepts_memoryview_and_bytearray() -> None:
    for data in (memoryview(SEGMENT), bytearray(SEGMENT), memoryview(bytearray(SEGMENT))):
        assert SegmentReader(data, NAME).verify().record_count == 3


def test_skipping_the_body_crc_is_cheap_but_verify_still_catches_it() -> None:
    damaged = flip(SEGMENT, golden.BATCH_B_POSITION + 70)  # a record byte of batch B
    reader = SegmentReader(damaged, NAME, verify=False)  # opens: header and footer are fine
    assert reader.last_offset == 9
    with pytest.raises(CorruptSegment) as info:
        reader.verify()
    assert info.value.offset == golden.BATCH_B_POSITION + 17  # batch B's CRC field


# --- corruption --------------------------------------------------------------


@pytest.mark.parametrize("size", range(len(SEGMENT)))
def test_every_truncation_raises(size: int) -> None:
    with pytest.raises(CorruptSegment) as info:
        open_and_verify(SEGMENT[:size])
    assert info.value.object_name == NAME
    if size < 48:
        assert info.value.offset == size  # too short for header + footer
    else:
        assert info.value.offset == size - 4  # no footer magic where the file ends


@pytest.mark.parametrize(
    ("byte", "offset", "message"),
    [
        (0, 0, "segment magic"),
        (3, 0, "segment magic"),
        (5, 4, "version"),
        (6, 6, "flags"),  # bit 0 of the high flags byte: an unknown flag
        (7, 6, "flags"),  # codec 1 while the batches are uncompressed
        (15, 8, "object name says"),  # base offset 5 -> 4
        (19, 16, "message count"),
        (31, 28, "reserved"),
    ],
)
def test_flipped_header_bit_raises_at_the_field(byte: int, offset: int, message: str) -> None:
    with pytest.raises(CorruptSegment, match=message) as info:
        open_and_verify(flip(SEGMENT, byte))
    assert (info.value.object_name, info.value.offset) == (NAME, offset)


@pytest.mark.parametrize(
    ("byte", "offset", "message"),
    [
        (BODY_END + 0, 32, "every batch passes"),  # the body CRC itself
        (BODY_END + 11, BODY_END + 4, "footer last offset"),  # last offset 9 -> 8
        (BODY_END + 12, BODY_END + 12, "footer magic"),
        (BODY_END + 15, BODY_END + 12, "footer magic"),
    ],
)
def test_flipped_footer_bit_raises_at_the_field(byte: int, offset: int, message: str) -> None:
    with pytest.raises(CorruptSegment, match=message) as info:
        open_and_verify(flip(SEGMENT, byte))
    assert (info.value.object_name, info.value.offset) == (NAME, offset)


@pytest.mark.parametrize(
    ("byte", "offset"),
    [
        (32 + 30, 32 + 17),  # batch A's last offset delta: batch A's CRC fails
        (32 + 70, 32 + 17),  # a record of batch A
        (golden.BATCH_B_POSITION + 61, golden.BATCH_B_POSITION + 17),  # batch B's records
        (golden.BATCH_B_POSITION + 16, golden.BATCH_B_POSITION + 16),  # batch B's magic
        (golden.BATCH_B_POSITION + 7, golden.BATCH_B_POSITION),  # base offset 9 -> 8
        (32 + 13, 32),  # batch A's leader epoch: outside every batch CRC
    ],
)
def test_flipped_body_bit_raises_at_the_batch(byte: int, offset: int) -> None:
    with pytest.raises(CorruptSegment, match="body CRC-32C mismatch") as info:
        SegmentReader(flip(SEGMENT, byte), NAME)
    assert (info.value.object_name, info.value.offset) == (NAME, offset)


def test_every_single_bit_flip_is_caught_except_in_created_ms() -> None:
    created = range(20, 28)  # the one header field nothing can check
    for byte in range(len(SEGMENT)):
        for bit in range(8):
            damaged = flip(SEGMENT, byte, bit)
            if byte in created:
                open_and_verify(damaged)
                continue
            with pytest.raises(CorruptSegment) as info:
                open_and_verify(damaged)
            assert info.value.object_name == NAME
            if SEGMENT_HEADER_SIZE <= byte < BODY_END:
                assert SEGMENT_HEADER_SIZE <= info.value.offset < BODY_END, (byte, bit)
            elif byte < SEGMENT_HEADER_SIZE:
                assert info.value.offset <= byte, (byte, bit)


def test_wrong_magic_names_the_object_and_byte() -> None:
    with pytest.raises(CorruptSegment) as info:
        SegmentReader(b"PAR1" + SEGMENT[4:], "x.kfs")
    assert (info.value.object_name, info.value.offset) == ("x.kfs", 0)
    assert "x.kfs: corrupt at byte 0" in str(info.value)


def test_header_base_offset_above_the_first_batch_blames_the_header() -> None:
    damaged = SEGMENT[:8] + struct.pack(">q", 6) + SEGMENT[16:]
    with pytest.raises(CorruptSegment, match="below the segment base offset") as info:
        open_and_verify(damaged, "tiny.kfs")  # not a segment name: no name check
    assert info.value.offset == 8


def test_a_segment_without_batches_fails_verify() -> None:
    empty = SEGMENT[:32] + struct.pack(">Iq4s", 0, 9, b"END!")
    with pytest.raises(CorruptSegment, match="no batch") as info:
        open_and_verify(empty)
    assert info.value.offset == 32


def test_corruption_errors_pickle() -> None:
    import pickle

    with pytest.raises(CorruptSegment) as info:
        SegmentReader(b"", NAME)
    again = pickle.loads(pickle.dumps(info.value))
    assert (type(again), again.object_name, again.offset) == (CorruptSegment, NAME, 0)


def test_a_borrowed_batch_is_copied_once_into_the_same_bytes() -> None:
    batches = [make_batch(0, [b"a", b"b"]), make_batch(2, [b"c"])]
    copied, borrowed = SegmentWriter(created_ms=1), SegmentWriter(created_ms=1)
    for batch in batches:
        copied.append(bytearray(batch))
        borrowed.append(bytearray(batch), borrow=True)
    assert borrowed.finish().data == copied.finish().data


def test_a_mutable_batch_not_borrowed_is_copied_at_append() -> None:
    batch = bytearray(make_batch(0, [b"value"]))
    original = bytes(batch)
    writer = SegmentWriter(created_ms=1)
    writer.append(batch)
    batch[-1] ^= 0xFF  # the caller reuses its buffer after append
    sealed = writer.finish()
    assert sealed.data[SEGMENT_HEADER_SIZE : SEGMENT_HEADER_SIZE + len(original)] == original
    SegmentReader(sealed.data).check_body_crc()  # the CRC covers the bytes appended
