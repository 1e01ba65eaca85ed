"""`.index` files: codec, binary search + forward scan, rebuilds and consistency checks."""

from __future__ import annotations

import gc
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfs_core.errors import CorruptIndex, CorruptSegment
from kfs_core.formats.index import IndexEntry, IndexReader, encode_index
from kfs_core.formats.index_check import (
    build_index_entries,
    build_index_from_segment,
    check_index,
    find_batch_position,
)
from kfs_core.formats.segment import SealedSegment, SegmentReader, SegmentWriter
from tests.formats import golden
from tests.formats.batches import make_batch

pytestmark = pytest.mark.unit

INDEX_NAME = "ns/orders/0/segment-00000000000000000005.index"


def write_segment(
    specs: list[tuple[int, list[int]]], interval: int, base_offset: int | None = None
) -> SealedSegment:
    """A segment from (base offset, record offset deltas) pairs."""
    writer = SegmentWriter(base_offset=base_offset, created_ms=1, index_interval=interval)
    for base, deltas in specs:
        writer.append(make_batch(base, [b"v"] * len(deltas), offset_deltas=deltas))
    return writer.finish()


def compacted_specs(batches: int = 300) -> list[tuple[int, list[int]]]:
    """Batches of 1-7 records with gaps between and inside them, as after compaction."""
    specs = []
    offset = 1_000
    for i in range(batches):
        count = 1 + i % 7
        deltas = [d * (1 + (i % 3 == 0)) for d in range(count)]  # every 3rd batch: holes
        specs.append((offset, deltas))
        offset += deltas[-1] + 1 + (i % 5)  # gaps of 0-4 offsets between batches
    return specs


def batch_ends(reader: SegmentReader) -> list[tuple[int, int]]:
    return [(position, header.last_offset) for position, header in reader.iter_batches()]


def linear_search(ends: list[tuple[int, int]], target: int) -> int | None:
    """The reference answer: the first batch whose last offset reaches the target."""
    for position, last_offset in ends:
        if last_offset >= target:
            return position
    return None


# --- codec -----------------------------------------------------------------


def test_encode_and_read_back() -> None:
    entries = [IndexEntry(0, 32), IndexEntry(100, 4_000), IndexEntry(250, 9_000)]
    data = encode_index(entries, 100)
    assert len(data) == 16 + 3 * 12
    index = IndexReader(data, INDEX_NAME)
    assert (index.entries, index.interval, len(index)) == (tuple(entries), 100, 3)


def test_a_read_index_is_one_object_for_the_collector_however_many_entries() -> None:
    # The L2 cache keeps thousands of read indexes for the daemon's life.
    data = encode_index([(i * 100, 32 + i * 1_000) for i in range(50)], 100)
    gc.collect()
    before = len(gc.get_objects())
    readers = [IndexReader(data, INDEX_NAME) for _ in range(200)]
    gc.collect()
    assert len(gc.get_objects()) - before <= len(readers) + 50
    assert readers[0].entries[49] == IndexEntry(4_900, 49_032)
    assert readers[0].lookup_entry(4_950) == IndexEntry(4_900, 49_032)


@pytest.mark.parametrize(
    ("target", "position"),
    [
        (-5, 32),
        (0, 32),
        (99, 32),
        (100, 4_000),
        (101, 4_000),
        (249, 4_000),
        (250, 9_000),
        (10**12, 9_000),
    ],
)
def test_lookup_is_the_last_entry_at_or_below(target: int, position: int) -> None:
    index = IndexReader(encode_index([(0, 32), (100, 4_000), (250, 9_000)], 100))
    assert index.lookup(target) == position


@pytest.mark.parametrize(
    ("data", "offset", "message"),
    [
        (golden.INDEX[:10], 10, "truncated"),
        (golden.INDEX[:-1], 39, "need exactly 40"),  # a cut entry
        (golden.INDEX[:-12], 28, "need exactly 40"),  # a whole entry missing
        (golden.INDEX + b"\x00", 40, "need exactly 40"),  # trailing bytes
        (b"IDX\x01" + golden.INDEX[4:], 0, "magic"),
        (golden.INDEX[:5] + b"\x02" + golden.INDEX[6:], 4, "version"),
        (golden.INDEX[:6] + struct.pack(">i", 0) + golden.INDEX[10:16], 6, "at least"),
        (golden.INDEX[:10] + struct.pack(">i", 0) + golden.INDEX[14:], 10, "interval"),
        (golden.INDEX[:16] + golden.INDEX[28:] + golden.INDEX[16:28], 28, "strictly increase"),
    ],
)
def test_corrupt_index_raises_at_the_byte(data: bytes, offset: int, message: str) -> None:
    with pytest.raises(CorruptIndex, match=message) as info:
        IndexReader(data, INDEX_NAME)
    assert (info.value.object_name, info.value.offset) == (INDEX_NAME, offset)


def test_every_flipped_header_bit_of_the_golden_index_is_caught_or_harmless() -> None:
    for byte in range(16):
        for bit in range(8):
            damaged = bytearray(golden.INDEX)
            damaged[byte] ^= 1 << bit
            if byte >= 14:  # reserved: unchecked, harmless
                assert IndexReader(bytes(damaged)).entries == IndexReader(golden.INDEX).entries
                continue
            if 10 <= byte < 14:  # interval: only its sign bit is checked
                try:
                    IndexReader(bytes(damaged))
                except CorruptIndex as exc:
                    assert exc.offset == 10
                continue
            with pytest.raises(CorruptIndex) as info:
                IndexReader(bytes(damaged))
            assert info.value.offset <= byte or info.value.offset in (28, 40)


def test_encode_refuses_bad_interval() -> None:
    with pytest.raises(ValueError):
        encode_index([], 0)


# --- lookups over real segments ---------------------------------------------


@pytest.mark.parametrize("interval", [1, 3, 100])
def test_find_batch_position_agrees_with_a_linear_scan(interval: int) -> None:
    specs = compacted_specs()
    sealed = write_segment(specs, interval)
    reader = SegmentReader(sealed.data, "seg.kfs")
    index = IndexReader(sealed.index, "seg.index")
    if interval == 1:
        assert len(index) == len(specs)
    first, last = specs[0][0], reader.last_offset
    ends = batch_ends(reader)
    for target in range(first - 3, last + 3):
        expected = linear_search(ends, target)
        assert find_batch_position(reader, index, target) == expected, target
        assert find_batch_position(sealed.data, index, target) == expected, target
        if target % 17 == 0:  # without an index: a scan from the first batch
            assert find_batch_position(reader, None, target) == expected, target


def test_found_batch_holds_the_target_or_follows_the_gap() -> None:
    specs = compacted_specs(100)
    sealed = write_segment(specs, 100)
    reader = SegmentReader(sealed.data)
    index = IndexReader(sealed.index)
    present = {base + d for base, deltas in specs for d in deltas}
    for target in sorted(present):
        position = find_batch_position(reader, index, target)
        assert position is not None
        header = next(reader.iter_batches(position))[1]
        assert header.base_offset <= target <= header.last_offset
    assert find_batch_position(reader, index, reader.last_offset + 1) is None


def test_index_positions_point_at_batch_starts() -> None:
    sealed = write_segment(compacted_specs(50), 10)
    reader = SegmentReader(sealed.data)
    starts = {pos: header.base_offset for pos, header in reader.iter_batches()}
    for entry in IndexReader(sealed.index).entries:
        assert starts[entry.position] == entry.offset


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 12)), min_size=1, max_size=40),
    st.integers(1, 30),
    st.data(),
)
def test_lookup_property(specs: list[tuple[int, int]], interval: int, data: st.DataObject) -> None:
    batches = []
    offset = data.draw(st.integers(0, 10**12))
    for gap, count in specs:
        offset += gap
        batches.append((offset, list(range(count))))
        offset += count
    sealed = write_segment(batches, interval)
    reader = SegmentReader(sealed.data)
    index = IndexReader(sealed.index)
    target = data.draw(st.integers(batches[0][0] - 5, offset + 5))
    ends = batch_ends(reader)
    assert find_batch_position(reader, index, target) == linear_search(ends, target)
    assert build_index_from_segment(sealed.data, interval) == sealed.index
    assert check_index(reader, index) == []


# --- rebuild and consistency ---------------------------------------------------


@pytest.mark.parametrize("interval", [1, 2, 5, 100, 10_000])
def test_rebuild_reproduces_the_writers_index(interval: int) -> None:
    sealed = write_segment(compacted_specs(), interval)
    assert build_index_from_segment(sealed.data, interval) == sealed.index
    assert build_index_entries(sealed.data, interval) == list(sealed.index_entries)


def test_rebuild_refuses_a_damaged_segment() -> None:
    damaged = bytearray(golden.SEGMENT)
    damaged[100] ^= 1
    with pytest.raises(CorruptSegment):
        build_index_from_segment(bytes(damaged), 2, object_name="s.kfs")


def test_check_index_accepts_the_golden_pair() -> None:
    assert check_index(golden.SEGMENT, golden.INDEX) == []
    assert check_index(SegmentReader(golden.SEGMENT), IndexReader(golden.INDEX)) == []


def test_check_index_lists_every_problem() -> None:
    # entry 0 off the first batch; entry 1 between batches; entry 2 wrong offset.
    bad = encode_index([(5, 33), (6, 40), (10, golden.BATCH_B_POSITION)], 2)
    problems = check_index(golden.SEGMENT, bad, index_name="i.index")
    assert [(p.object_name, p.offset) for p in problems] == [
        ("i.index", 16),
        ("i.index", 16),
        ("i.index", 28),
        ("i.index", 40),
    ]
    assert "first batch" in problems[0].message
    assert "not the start of a batch" in problems[1].message
    assert "starts at offset 9" in problems[3].message
    assert str(problems[3]).startswith("i.index: byte 40: ")


def test_check_index_reports_an_unreadable_index_as_a_problem() -> None:
    problems = check_index(golden.SEGMENT, golden.INDEX[:-3], index_name="i.index")
    assert [(p.object_name, p.offset) for p in problems] == [("i.index", 37)]


def test_sparser_index_is_still_consistent() -> None:
    # An index with fewer entries than the interval asks for still finds everything.
    sealed = write_segment(compacted_specs(80), 1)
    sparse = encode_index(list(sealed.index_entries)[::7], 7)
    assert check_index(sealed.data, sparse) == []
    reader = SegmentReader(sealed.data)
    index = IndexReader(sparse)
    ends = batch_ends(reader)
    for target in range(1_000, reader.last_offset + 1, 3):
        assert find_batch_position(reader, index, target) == linear_search(ends, target)
