"""Compaction and retention change the catalog under the daemon: removed segments are never served.

Another `PartitionCatalog` instance on the same store plays the Spark job: it
replaces the first segment with a "compacted" one (a batch dropped, the rest
recompressed with gzip, offsets unchanged) or removes it and advances the log
start offset.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kfs_core.catalog import PartitionCatalog, SegmentEntry
from kfs_core.errors import OffsetOutOfRange
from kfs_core.formats.segment import SegmentWriter
from kfs_core.log import EARLIEST_TIMESTAMP, LogManager
from kfs_core.records import CODEC_GZIP, decode_batch, reencode_batch
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import (
    NS,
    TOPIC,
    Harness,
    both_stores,
    decode_all,
    eventually,
    make_batch,
    read_all,
    run_harness,
)

any_store = both_stores()


async def two_segments(h: Harness, **settings: object) -> LogManager:
    """Offsets 0..8 in one segment, 9..17 in the next (three 3-record batches each).

    A consumer reads the partition first, so the flushed segments go into L1.
    """
    logs = await h.open(**settings)
    await logs.create_topic(TOPIC)
    await logs.read(TOPIC, 0, 0, 1 << 20)
    for segment in range(2):
        for n in range(3):
            await logs.append(TOPIC, 0, make_batch(3, tag=f"s{segment}b{n}-"), timeout_s=10)
        await logs.flush()
    return logs


def compact_first_segment(store: ObjectStore, *, drop_base: int = 3) -> SegmentEntry:
    """Replace segment 0 as compaction would; returns the new entry."""
    job = PartitionCatalog(store, NS, TOPIC, 0)
    old = job.load().segments[0]
    data = store.get(f"{NS}/{old.key}")
    writer = SegmentWriter(index_interval=2)
    position = 32
    while position < len(data) - 16:
        batch = decode_batch(data, position)
        if batch.base_offset != drop_base:
            writer.append(reencode_batch(batch, CODEC_GZIP))
        position += batch.size_in_bytes
    sealed = writer.finish()
    new = SegmentEntry.for_sealed(TOPIC, 0, sealed, key_suffix="-c1")
    store.put(f"{NS}/{new.key}", sealed.data)
    store.put(f"{NS}/{new.index_key}", sealed.index)
    job.replace([old], [new])
    return new


def delete_objects(store: ObjectStore, segment: SegmentEntry) -> None:
    """Retention's grace period is over: the objects go."""
    store.delete(f"{NS}/{segment.key}")
    store.delete(f"{NS}/{segment.index_key}")


def test_a_replaced_segment_leaves_the_caches_and_is_never_served(
    any_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await two_segments(h)
        old = (await logs.catalog_state(TOPIC, 0)).segments[0]
        assert old.key in logs.cached_segments()  # flushed segments go into L1
        original = await read_all(logs, TOPIC, 0)

        new = compact_first_segment(h.store)
        await logs.refresh(TOPIC, 0)
        assert old.key not in logs.cached_segments()
        assert old.index_key not in logs.cached_indexes()
        delete_objects(h.store, old)

        first = decode_all((await logs.read(TOPIC, 0, 0, 1 << 20)).records)
        assert [b.codec for b in first] == [CODEC_GZIP, CODEC_GZIP]  # the replacement's bytes
        assert [b.base_offset for b in first] == [0, 6]
        # Offset 4 was compacted away: the fetch gets the next batch, as in Kafka.
        gap = decode_all((await logs.read(TOPIC, 0, 4, 1 << 20)).records)
        assert gap[0].base_offset == 6
        after = await read_all(logs, TOPIC, 0)
        assert after.endswith(original[-(len(original) // 2) :])  # segment 1 untouched
        assert new.key in (s.key for s in (await logs.catalog_state(TOPIC, 0)).segments)

    run_harness(any_store, tmp_path, body)


def test_a_fetch_that_finds_its_segment_gone_refreshes_and_reads_the_replacement(
    any_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        await h.shutdown(await two_segments(h))
        logs = await h.open()  # its catalog state is loaded now ...
        old = (await logs.catalog_state(TOPIC, 0)).segments[0]
        compact_first_segment(h.store)  # ... and goes stale here
        delete_objects(h.store, old)
        first = decode_all((await logs.read(TOPIC, 0, 1, 1 << 20)).records)
        assert first[0].codec == CODEC_GZIP and first[0].base_offset == 0
        assert logs.metrics().catalog_refreshes == 1

    run_harness(any_store, tmp_path, body)


def test_retention_moves_the_log_start_and_old_offsets_are_out_of_range(
    any_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await two_segments(h)
        job = PartitionCatalog(h.store, NS, TOPIC, 0)
        old = job.load().segments[0]
        job.remove([old], log_start_offset=9)
        await logs.refresh(TOPIC, 0)
        assert old.key not in logs.cached_segments()
        for offset in (0, 8):
            with pytest.raises(OffsetOutOfRange) as caught:
                await logs.read(TOPIC, 0, offset, 1000)
            assert (caught.value.kafka_error_code, caught.value.log_start_offset) == (1, 9)
        assert (await logs.list_offsets(TOPIC, 0, EARLIEST_TIMESTAMP)).offset == 9
        assert decode_all((await logs.read(TOPIC, 0, 9, 1000)).records)[0].base_offset == 9
        appended = await logs.append(TOPIC, 0, make_batch(1), timeout_s=10)
        assert (appended.base_offset, appended.log_start_offset) == (18, 9)

    run_harness(any_store, tmp_path, body)


def test_partitions_being_read_are_refreshed_periodically(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await two_segments(h, catalog_refresh_ms=20)
        await logs.read(TOPIC, 0, 0, 100)  # being read: refreshed every 20 ms
        PartitionCatalog(h.store, NS, TOPIC, 0).remove([0], log_start_offset=9)
        seen = logs.metrics().catalog_refreshes
        await eventually(
            lambda: logs.metrics().catalog_refreshes >= seen + 2, what="two more refreshes"
        )
        with pytest.raises(OffsetOutOfRange):
            await logs.read(TOPIC, 0, 0, 100)

    run_harness(local_store, tmp_path, body)
