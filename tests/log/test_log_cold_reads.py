"""The cold read path: GETs per fetch, whole batches from a range GET, read-ahead, cache bounds.

A fresh daemon (nothing cached) fetches from segments another run flushed.
An uncached fetch costs two GETs (the index, one range of the segment); with
the index cached, one.  Counted by an instrumented store on the local
directory and on S3, and by the manager's own counters.
"""

from __future__ import annotations

from pathlib import Path

from kfs_core.catalog import SegmentEntry
from kfs_core.formats.index import encode_index
from kfs_core.log import LogManager
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import (
    NS,
    TOPIC,
    Harness,
    InstrumentedStore,
    both_stores,
    decode_all,
    make_batch,
    read_all,
    run_harness,
)

INDEX_INTERVAL = 4

any_store = both_stores()


async def write_segments(h: Harness, batches: int = 40, **produce: int) -> dict[int, bytes]:
    """Flush ``batches`` 3-record batches into several segments; each batch's bytes by base offset."""
    logs = await h.open(segment_bytes=3000, index_interval=INDEX_INTERVAL)
    await logs.create_topic(TOPIC)
    size = produce.get("size", 60)
    await logs.append(
        TOPIC,
        0,
        b"".join(make_batch(3, size=size, tag=f"{n}-") for n in range(batches)),
        timeout_s=10,
    )
    reference = await read_all(logs, TOPIC, 0)
    await h.shutdown(logs)
    out: dict[int, bytes] = {}
    position = 0
    for batch in decode_all(reference):
        out[batch.base_offset] = reference[position : position + batch.size_in_bytes]
        position += batch.size_in_bytes
    return out


def expected_bytes(reference: dict[int, bytes], offset: int, max_bytes: int) -> bytes:
    """What a fetch must return: the batch holding ``offset``, then whole batches within max_bytes."""
    bases = sorted(reference)
    first = max(b for b in bases if b <= offset)
    out = reference[first]
    for base in bases[bases.index(first) + 1 :]:
        if len(out) + len(reference[base]) > max_bytes:
            break
        out += reference[base]
    return out


async def fetch(logs: LogManager, offset: int, max_bytes: int) -> bytes:
    return (await logs.read(TOPIC, 0, offset, max_bytes)).records


def middle_of(segment: SegmentEntry) -> int:
    """An offset inside a batch in the middle of the segment, not at an index entry."""
    return segment.base_offset + (segment.last_offset - segment.base_offset) // 2 + 1


def test_cold_fetch_costs_two_gets_and_one_with_the_index_cached(
    any_store: ObjectStore, tmp_path: Path
) -> None:
    store = InstrumentedStore(any_store)

    async def body(h: Harness) -> None:
        reference = await write_segments(h)
        logs = await h.open(readahead_segments=0, index_interval=INDEX_INTERVAL)
        segments = (await logs.catalog_state(TOPIC, 0)).segments
        assert len(segments) >= 4
        first, other = segments[1], segments[3]
        store.reset()

        offset = middle_of(first)
        assert await fetch(logs, offset, 500) == expected_bytes(reference, offset, 500)
        gets = store.data_gets()
        assert [g.key for g in gets] == [f"{NS}/{first.index_key}", f"{NS}/{first.key}"]
        assert gets[1].byte_range is not None  # a range, not the whole object

        offset = middle_of(other) + 2
        assert await fetch(logs, offset, 400) == expected_bytes(reference, offset, 400)
        assert len(store.data_gets()) == 4  # another index, another range

        # Back in the first segment, at an offset not continuing the last fetch:
        # its index is cached, so one range GET.
        offset = first.base_offset + 1
        assert await fetch(logs, offset, 300) == expected_bytes(reference, offset, 300)
        assert len(store.data_gets()) == 5
        assert store.data_gets()[-1].key == f"{NS}/{first.key}"
        offset = other.last_offset
        assert await fetch(logs, offset, 10_000) == expected_bytes(reference, offset, 10_000)
        assert len(store.data_gets()) == 6

        m = logs.metrics()
        assert m.store_gets == 6
        assert (m.l2_hits, m.l2_misses) == (2, 2)
        assert m.fetch_from_store == 4
        assert logs.cached_segments() == []  # ranges are not whole segments: L1 stays empty

    run_harness(store, tmp_path, body)


def test_a_batch_larger_than_max_bytes_comes_back_whole_from_a_range_read(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    store = InstrumentedStore(local_store)

    async def body(h: Harness) -> None:
        reference = await write_segments(h, batches=12, size=700)  # ~2.2 KB batches
        logs = await h.open(readahead_segments=0)
        for offset in sorted(reference)[1:8]:
            assert await fetch(logs, offset + 1, 10) == reference[offset]
        assert len(store.data_gets()) <= 3 * 7

    run_harness(store, tmp_path, body)


def test_sequential_consumers_get_the_next_segments_read_ahead(
    any_store: ObjectStore, tmp_path: Path
) -> None:
    store = InstrumentedStore(any_store)

    async def body(h: Harness) -> None:
        reference = await write_segments(h)
        logs = await h.open(readahead_segments=2)
        segments = (await logs.catalog_state(TOPIC, 0)).segments
        # A jump is not sequential: no read-ahead.
        await fetch(logs, middle_of(segments[0]), 200)
        await logs.wait_readahead()
        assert logs.cached_segments() == []
        # Continuing where the last fetch ended is.
        data = await fetch(logs, 0, 200)
        await fetch(logs, decode_all(data)[-1].last_offset + 1, 200)
        await logs.wait_readahead()
        assert set(logs.cached_segments()) == {segments[1].key, segments[2].key}
        assert logs.metrics().readahead_segments == 2

        store.reset()
        offset = segments[1].base_offset + 2
        assert await fetch(logs, offset, 600) == expected_bytes(reference, offset, 600)
        assert store.data_gets() == []  # served by L1
        everything = await read_all(logs, TOPIC, 0, max_bytes=700)
        assert everything == b"".join(reference[b] for b in sorted(reference))

    run_harness(store, tmp_path, body)


def test_caches_stay_within_their_byte_bounds(local_store: ObjectStore, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        reference = await write_segments(h)
        logs = await h.open(readahead_segments=3, cache_size=7000, index_cache_size=1500)
        assert await read_all(logs, TOPIC, 0, max_bytes=300) == b"".join(
            reference[b] for b in sorted(reference)
        )
        await logs.wait_readahead()
        m = logs.metrics()
        assert 0 < m.l1_bytes <= 7000 and 0 < m.l2_bytes <= 1500
        assert m.l1_segments <= 2

    run_harness(local_store, tmp_path, body)


def test_a_missing_damaged_or_misplaced_index_costs_no_fetch_its_answer(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        reference = await write_segments(h)
        logs = await h.open(readahead_segments=0)
        segments = (await logs.catalog_state(TOPIC, 0)).segments
        await h.shutdown(logs)
        missing, garbage, misaligned, outside = (f"{NS}/{s.index_key}" for s in segments[:4])
        h.store.delete(missing)
        h.store.put(garbage, b"not an index")
        base = segments[2].base_offset
        # Valid index files, wrong positions: inside a batch, and past the batches.
        h.store.put(misaligned, encode_index([(base, 32), (base + 4, 40)], INDEX_INTERVAL))
        h.store.put(outside, encode_index([(base, 32), (base + 4, 1 << 20)], INDEX_INTERVAL))

        logs = await h.open(readahead_segments=0)
        for segment in segments[:4]:
            for offset in (segment.base_offset, segment.base_offset + 5, segment.last_offset):
                assert await fetch(logs, offset, 400) == expected_bytes(reference, offset, 400)
        assert await read_all(logs, TOPIC, 0, max_bytes=300) == b"".join(
            reference[b] for b in sorted(reference)
        )
        # Each broken index cost one whole-segment GET, then L1 served the segment.
        assert set(logs.cached_segments()) >= {s.key for s in segments[:4]}

    run_harness(local_store, tmp_path, body)
