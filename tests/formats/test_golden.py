"""Golden bytes: the writer reproduces the field-by-field segment and index exactly."""

from __future__ import annotations

import crc32c
import pytest

from kfs_core.formats.index import IndexEntry, IndexReader, encode_index
from kfs_core.formats.index_check import build_index_from_segment
from kfs_core.formats.segment import (
    SegmentFooter,
    SegmentHeader,
    SegmentReader,
    SegmentWriter,
    decode_segment_footer,
    decode_segment_header,
    encode_segment_footer,
    encode_segment_header,
)
from kfs_core.records.header import read_batch_header, verify_batch_crc
from tests.formats import golden
from tests.formats.batches import make_batch

pytestmark = pytest.mark.unit

NAME = "ns/topic/0/segment-00000000000000000005.kfs"


def test_fixture_files_hold_the_golden_bytes() -> None:
    assert golden.SEGMENT_FIXTURE.read_bytes() == golden.SEGMENT
    assert golden.INDEX_FIXTURE.read_bytes() == golden.INDEX
    assert len(golden.SEGMENT) == 32 + 79 + 71 + 16
    assert len(golden.INDEX) == 16 + 2 * 12


def test_pinned_crcs_are_the_crcs() -> None:
    assert crc32c.crc32c(golden.BATCH_A[21:]) == 0xE69868A3
    assert crc32c.crc32c(golden.BATCH_B[21:]) == 0x2281A97D
    assert crc32c.crc32c(golden.BATCH_A + golden.BATCH_B) == 0x0FFEF496
    for batch in (golden.BATCH_A, golden.BATCH_B):
        verify_batch_crc(batch, 0, read_batch_header(batch))


def test_test_batch_builder_matches_the_golden_batches() -> None:
    assert make_batch(5, [b"a", b"bc"], keys=[None, b"k"]) == golden.BATCH_A
    assert make_batch(9, [b"xyz"], first_timestamp=1_700_000_000_005) == golden.BATCH_B


def test_writer_reproduces_the_fixture_byte_for_byte() -> None:
    writer = SegmentWriter(created_ms=golden.CREATED_MS, index_interval=golden.INDEX_INTERVAL)
    assert writer.append(golden.BATCH_A) == golden.BATCH_A_POSITION
    assert writer.append(golden.BATCH_B) == golden.BATCH_B_POSITION
    assert writer.size == len(golden.SEGMENT)
    sealed = writer.finish()
    assert sealed.data == golden.SEGMENT_FIXTURE.read_bytes()
    assert sealed.index == golden.INDEX_FIXTURE.read_bytes()
    assert sealed.index_entries == (IndexEntry(5, 32), IndexEntry(9, 111))
    meta = sealed.meta
    assert (meta.base_offset, meta.last_offset, meta.record_count, meta.batch_count) == (5, 9, 3, 2)
    assert (meta.min_timestamp, meta.max_timestamp) == (1_700_000_000_000, 1_700_000_000_005)
    assert (meta.flags, meta.codec, meta.size, meta.created_ms) == (0, 0, 198, golden.CREATED_MS)


def test_writer_with_a_wide_interval_indexes_only_the_first_batch() -> None:
    writer = SegmentWriter(created_ms=golden.CREATED_MS)  # default interval 100
    writer.append(golden.BATCH_A)
    writer.append(golden.BATCH_B)
    sealed = writer.finish()
    assert sealed.data == golden.SEGMENT
    assert sealed.index == b"".join(
        [
            b"IDX\x00",  # magic
            (1).to_bytes(2, "big"),  # version
            (1).to_bytes(4, "big"),  # entry count
            (100).to_bytes(4, "big"),  # interval
            (0).to_bytes(2, "big"),  # reserved
            (5).to_bytes(8, "big") + (32).to_bytes(4, "big"),  # the first batch
        ]
    )


def test_reader_decodes_the_fixture() -> None:
    reader = SegmentReader(golden.SEGMENT_FIXTURE.read_bytes(), NAME)
    assert reader.header == SegmentHeader(
        base_offset=5, message_count=3, created_ms=golden.CREATED_MS, flags=0
    )
    assert reader.footer == SegmentFooter(body_crc=0x0FFEF496, last_offset=9)
    assert [(pos, h.base_offset, h.last_offset) for pos, h in reader.iter_batches()] == [
        (32, 5, 6),
        (111, 9, 9),
    ]
    assert reader.body_end == 182
    assert bytes(reader.body) == golden.BATCH_A + golden.BATCH_B
    meta = reader.verify()
    assert (meta.base_offset, meta.last_offset, meta.record_count, meta.size) == (5, 9, 3, 198)


def test_header_and_footer_codecs_round_trip_the_golden_bytes() -> None:
    header = decode_segment_header(golden.SEGMENT[:32], NAME)
    footer = decode_segment_footer(golden.SEGMENT[-16:], NAME, file_offset=182)
    assert encode_segment_header(header) == golden.SEGMENT[:32]
    assert encode_segment_footer(footer) == golden.SEGMENT[-16:]


def test_index_codec_and_rebuild_reproduce_the_fixture() -> None:
    index = IndexReader(golden.INDEX_FIXTURE.read_bytes(), "segment-00000000000000000005.index")
    assert (index.interval, index.entries) == (2, (IndexEntry(5, 32), IndexEntry(9, 111)))
    assert encode_index(index.entries, index.interval) == golden.INDEX
    assert build_index_from_segment(golden.SEGMENT, golden.INDEX_INTERVAL) == golden.INDEX
