"""The log layer's parts on their own: LRU cache, batch selection, buffer, validation, settings."""

from __future__ import annotations

import pytest

from kfs_core.config import Settings
from kfs_core.errors import CorruptSegment, InvalidRecord
from kfs_core.formats.index import IndexReader
from kfs_core.formats.segment import SegmentWriter
from kfs_core.log.buffer import BufferedBatch, PartitionBuffer
from kfs_core.log.cache import CachedSegment, LruCache, take_batches
from kfs_core.log.range_reads import index_window, select_batches
from kfs_core.log.sealing import seal_segments
from kfs_core.log.validate import validate_produce
from kfs_core.records.batch import rewrite_base_offset
from kfs_core.records.header import CRC_OFFSET, batch_crc
from tests.log.log_helpers import decode_all, make_batch


def batches_at(*counts: int, size: int = 20) -> list[bytes]:
    """Batches with consecutive offsets: ``counts[i]`` records each."""
    out = []
    offset = 0
    for n, count in enumerate(counts):
        out.append(rewrite_base_offset(make_batch(count, size=size, tag=f"{n}-"), offset))
        offset += count
    return out


def test_lru_cache_evicts_least_recently_used_beyond_its_weight() -> None:
    cache: LruCache[str, bytes] = LruCache(10, len)
    assert cache.put("a", b"1234") and cache.put("b", b"1234")
    assert cache.get("a") == b"1234"  # a is now the most recently used
    assert cache.put("c", b"1234")  # 12 > 10: b goes
    assert cache.keys() == ["a", "c"] and cache.weight == 8 and cache.evictions == 1
    assert not cache.put("huge", b"x" * 11)  # never cached, nothing evicted for it
    assert cache.get("b") is None
    assert (cache.hits, cache.misses) == (1, 1)
    assert cache.discard(["a", "zzz"]) == 1 and cache.weight == 4


def test_take_batches_takes_at_least_one_then_what_fits() -> None:
    bounds = [0, 100, 150, 400, 410]
    assert take_batches(bounds, 0, 10) == 1
    assert take_batches(bounds, 0, 150) == 2
    assert take_batches(bounds, 1, 300) == 3
    assert take_batches(bounds, 1, 10_000) == 4
    assert take_batches(bounds, 3, 0) == 4


def test_sealed_segments_cut_at_segment_bytes_and_cache_reads() -> None:
    buffered = [
        BufferedBatch(decode_all(b)[0].base_offset, decode_all(b)[0].last_offset, 0, b, 0.0)
        for b in batches_at(3, 3, 3, 3)
    ]
    sealed = seal_segments("t", 0, buffered, segment_bytes=400, index_interval=2, created_ms=1)
    assert [len(s.batches) for s in sealed] == [2, 2]
    assert [s.entry.key for s in sealed] == [
        "t/0/segment-00000000000000000000.kfs",
        "t/0/segment-00000000000000000006.kfs",
    ]
    cached = CachedSegment.load("k", sealed[1].segment.data)
    data, next_offset = cached.read(7, 1)
    assert [b.base_offset for b in decode_all(data)] == [6] and next_offset == 9
    assert cached.read(12, 1000) == (b"", 12)


def test_select_batches_skips_below_resumes_past_and_refuses_nonsense() -> None:
    batches = batches_at(2, 2, 2, 2, size=100)
    writer = SegmentWriter(index_interval=1)
    for batch in batches:
        writer.append(batch)
    sealed = writer.finish()
    data, size = sealed.data, len(batches[0])
    end = len(data) - 16
    # Offset 3 is in the second batch; the range starts at the first.
    whole = select_batches(data[32:end], 32, 3, size, end=end, object_name="s")
    assert (whole.start, whole.stop, whole.next_offset) == (size, 2 * size, 4)
    # A range that cuts the wanted batch off asks for the rest of it.
    cut = select_batches(data[32 : 32 + size + 20], 32, 3, 10, end=end, object_name="s")
    assert cut.empty and (cut.resume_at, cut.resume_length) == (32 + size, end - 32 - size)
    past = select_batches(
        data[32 + 2 * size : end], 32 + 2 * size, 99, 10, end=end, object_name="s"
    )
    assert past.empty and past.resume_length == 0  # nothing at or past offset 99
    with pytest.raises(CorruptSegment):  # from inside a batch: a "length" past the body
        select_batches(data[40:60], 40, 0, 10, end=end, object_name="s")
    index = IndexReader(sealed.index)
    assert index_window(index, 3, end) == (32 + size, 32 + 2 * size)
    assert index_window(index, 7, end) == (32 + 3 * size, end)


def test_partition_buffer_shows_only_what_is_below_the_high_watermark() -> None:
    buffer = PartitionBuffer()
    for n, batch in enumerate(batches_at(2, 2, 2)):
        buffer.append(BufferedBatch(2 * n, 2 * n + 1, 0, batch, 0.0))
    assert buffer.read(0, 1 << 20, 4)[1] == 4  # the third batch is not acknowledged yet
    assert buffer.visible_bytes(4) == buffer.bytes - len(batches_at(2, 2, 2)[2])
    assert buffer.read(4, 100, 4) == (b"", 4)
    with pytest.raises(ValueError):  # offsets must increase
        buffer.append(BufferedBatch(5, 5, 0, b"", 0.0))
    total = buffer.bytes
    freed = buffer.drop_through(3)
    assert freed == 2 * len(batches_at(2)[0]) and buffer.bytes == total - freed
    assert buffer.first_offset == 4


def test_validation_decodes_records_when_asked() -> None:
    batch = bytearray(make_batch(2))
    batch[-1] ^= 0x7F  # damage the last record, then make the CRC match again
    batch[CRC_OFFSET : CRC_OFFSET + 4] = batch_crc(batch, 0, len(batch)).to_bytes(4, "big")
    assert len(validate_produce(batch, max_message_bytes=1 << 20)) == 1
    with pytest.raises(InvalidRecord):
        validate_produce(batch, max_message_bytes=1 << 20, decode_records=True)


def test_the_log_reads_the_one_settings_declaration() -> None:
    settings = Settings(segment_bytes=1 << 20, pool_bytes=64 << 20, flush_concurrency=2)
    assert (settings.segment_bytes, settings.pool_bytes) == (1 << 20, 64 << 20)
    assert (settings.readahead_segments, settings.flush_concurrency) == (2, 2)
    with pytest.raises(ValueError, match="KFS_POOL_BYTES must be positive, got 0"):
        Settings(pool_bytes=0)
    with pytest.raises(ValueError, match="flush_concurrency must be positive, got 0"):
        Settings(flush_concurrency=0)
