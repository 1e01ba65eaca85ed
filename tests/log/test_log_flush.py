"""Flush: triggers, one commit per partition per cycle, retries, WAL checkpoints, no gap."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kfs_core.catalog import PartitionCatalog
from kfs_core.formats.segment import SegmentReader
from kfs_core.storage.base import ObjectStore
from kfs_core.storage.local import LocalObjectStore
from tests.log.log_helpers import (
    NS,
    TOPIC,
    Harness,
    InstrumentedStore,
    both_stores,
    decode_all,
    eventually,
    make_batch,
    offsets_and_values,
    read_all,
    run_harness,
)

any_store = both_stores()


def test_reads_span_memory_and_store_without_gap(any_store: ObjectStore, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        for n in range(8):
            await logs.append(TOPIC, 0, make_batch(3, tag=f"a{n}-"), timeout_s=10)
        before = await read_all(logs, TOPIC, 0, max_bytes=150)
        await logs.flush()
        m = logs.metrics()
        assert (m.buffered_bytes, m.pool_used_bytes, m.flushes, m.catalog_commits) == (0, 0, 1, 1)
        state = await logs.catalog_state(TOPIC, 0)
        assert [(s.base_offset, s.last_offset) for s in state.segments] == [(0, 23)]
        for n in range(5):  # the next ones stay in memory
            await logs.append(TOPIC, 0, make_batch(2, tag=f"b{n}-"), timeout_s=10)
        after = await read_all(logs, TOPIC, 0, max_bytes=150)  # store, then memory
        assert after[: len(before)] == before
        assert [o for o, _ in offsets_and_values(after)] == list(range(34))
        await h.shutdown(logs)

        # A fresh daemon reads everything from the store: the same bytes.
        again = await h.open()
        assert again.metrics().flushes == 0  # the WAL had nothing left to replay
        cold = await read_all(again, TOPIC, 0, max_bytes=150)
        assert cold == after
        assert again.metrics().store_gets > 0

    run_harness(any_store, tmp_path, body)


def test_size_and_age_trigger_flushes(local_store: ObjectStore, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        by_size = await h.open(segment_bytes=2000)
        await by_size.create_topic(TOPIC, partitions=2)
        while by_size.metrics().produce_bytes < 2000:
            await by_size.append(TOPIC, 0, make_batch(2, size=100), timeout_s=10)
        await eventually(lambda: by_size.metrics().flushes >= 1, what="a flush by size")
        await by_size.append(TOPIC, 1, make_batch(2), timeout_s=10)
        await h.shutdown(by_size)

        by_age = await h.open(flush_interval_ms=50)
        await by_age.append(TOPIC, 1, make_batch(2), timeout_s=10)
        await eventually(lambda: by_age.metrics().flushes >= 1, what="a flush by age")
        assert by_age.metrics().buffered_bytes == 0
        state = await by_age.catalog_state(TOPIC, 1)
        assert state.high_watermark == 4

    run_harness(local_store, tmp_path, body)


def test_a_topics_segment_ms_seals_its_batches_sooner(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    """segment.ms bounds how long a topic's records wait outside a segment (flush interval: 1 h)."""

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=1, configs={"segment.ms": "50"})
        await logs.create_topic("slow", partitions=1)
        await logs.append("slow", 0, make_batch(2), timeout_s=10)
        await logs.append(TOPIC, 0, make_batch(2), timeout_s=10)
        await eventually(lambda: logs.metrics().flushes >= 1, what="a flush by segment.ms")
        assert (await logs.catalog_state(TOPIC, 0)).high_watermark == 2
        assert (await logs.catalog_state("slow", 0)).high_watermark == 0  # still buffered

    run_harness(local_store, tmp_path, body)


def test_one_commit_per_partition_for_all_segments_of_a_cycle(
    any_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open(segment_bytes=1000)
        await logs.create_topic(TOPIC)
        # One produce of many batches is acknowledged at once, so one cycle takes it all.
        produce = b"".join(make_batch(4, size=60, tag=f"{n}-") for n in range(12))
        await logs.append(TOPIC, 0, produce, timeout_s=10)
        await logs.flush()
        state = await logs.catalog_state(TOPIC, 0)
        assert state.version == 0  # a single commit ...
        assert len(state.segments) >= 3  # ... of several segments of at most 1000 bytes
        assert all(s.size_bytes <= 1000 + 48 for s in state.segments)
        assert [s.base_offset for s in state.segments[1:]] == [
            s.last_offset + 1 for s in state.segments[:-1]
        ]
        assert logs.metrics().catalog_commits == 1
        for segment in state.segments:  # every object is a sound segment
            SegmentReader(any_store.get(f"{NS}/{segment.key}")).verify()
        assert logs.wal.flushed_offsets[(TOPIC, 0)] == 47

    run_harness(any_store, tmp_path, body)


def test_the_segments_of_a_cycle_upload_side_by_side_each_before_its_index(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    store = InstrumentedStore(local_store)

    async def body(h: Harness) -> None:
        logs = await h.open(segment_bytes=1000, upload_concurrency=3)
        await logs.create_topic(TOPIC)
        produce = b"".join(make_batch(4, size=60, tag=f"{n}-") for n in range(12))
        await logs.append(TOPIC, 0, produce, timeout_s=10)
        store.put_gate.clear()
        flush = asyncio.ensure_future(logs.flush())
        # Three segment PUTs wait at the gate together: none waits for another.
        await eventually(lambda: store.held == 3)
        store.put_gate.set()
        await flush
        state = await logs.catalog_state(TOPIC, 0)
        assert len(state.segments) > 3 and state.version == 0
        for segment in state.segments:
            puts = store.puts
            assert puts.index(f"{NS}/{segment.key}") < puts.index(f"{NS}/{segment.index_key}")
        assert puts[-1].endswith(".json")  # the commit comes last

    run_harness(store, tmp_path, body)


def test_a_store_that_gains_nothing_from_parallel_puts_gets_one_at_a_time(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    assert LocalObjectStore(tmp_path / "other").put_concurrency == 1  # a local disk
    store = InstrumentedStore(local_store)
    store.put_concurrency = 1

    async def body(h: Harness) -> None:
        logs = await h.open(segment_bytes=1000, upload_concurrency=3)
        await logs.create_topic(TOPIC)
        produce = b"".join(make_batch(4, size=60, tag=f"{n}-") for n in range(12))
        await logs.append(TOPIC, 0, produce, timeout_s=10)
        await logs.flush()
        state = await logs.catalog_state(TOPIC, 0)
        assert len(state.segments) > 3 and state.version == 0
        # Each segment and its index before the next segment: one upload at a time.
        expected = [f"{NS}/{key}" for s in state.segments for key in (s.key, s.index_key)]
        assert [key for key in store.puts if key.endswith((".kfs", ".index"))] == expected

    run_harness(store, tmp_path, body)


@pytest.mark.parametrize(
    ("put_concurrency", "pool_bytes", "side_by_side"),
    [(1, 64 << 20, 1), (None, 64 << 20, 3), (1, 1100, 3)],
    ids=["one-at-a-time", "no-limit", "one-at-a-time-but-memory-is-short"],
)
def test_a_store_that_takes_n_puts_at_once_gets_n_from_all_flushes_together(
    local_store: ObjectStore,
    tmp_path: Path,
    put_concurrency: int | None,
    pool_bytes: int,
    side_by_side: int,
) -> None:
    store = InstrumentedStore(local_store)
    store.put_concurrency = put_concurrency

    async def body(h: Harness) -> None:
        logs = await h.open(upload_concurrency=3, pool_bytes=pool_bytes)
        await logs.create_topic(TOPIC, partitions=3)
        store.put_gate.clear()  # nothing leaves memory before the gate opens
        batches = [make_batch(4, size=60) for _ in range(3)]
        for partition, batch in enumerate(batches):
            await logs.append(TOPIC, partition, batch, timeout_s=10)
        # 1,023 bytes: under pressure in a pool of 1,100 (75 %), not in one of 64 MiB.
        assert logs.metrics().pool_used_bytes == sum(map(len, batches)) == 1023
        flush = asyncio.ensure_future(logs.flush())
        # One partition's upload at the gate, and the others waiting for it
        # (one at a time); or each partition's at the gate together.
        await eventually(lambda: store.held == side_by_side)
        store.put_gate.set()
        await flush
        for partition in range(3):
            state = await logs.catalog_state(TOPIC, partition)
            assert [(s.base_offset, s.last_offset) for s in state.segments] == [(0, 3)]
        assert store.most_put_many_calls == side_by_side

    run_harness(store, tmp_path, body)


def test_failed_uploads_and_commits_are_retried_and_nothing_is_lost(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    store = InstrumentedStore(local_store)

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        for n in range(4):
            await logs.append(TOPIC, 0, make_batch(2, tag=f"{n}-"), timeout_s=10)
        expected = await read_all(logs, TOPIC, 0)
        store.fail_puts = 5  # segment, index and commit PUTs all fail a few times
        await logs.flush()
        m = logs.metrics()
        assert (m.flush_retries, m.store_errors, m.flushes) == (5, 5, 1)
        assert await read_all(logs, TOPIC, 0) == expected
        state = PartitionCatalog(local_store, NS, TOPIC, 0).load()
        assert state.high_watermark == 8 and state.version == 0

    run_harness(store, tmp_path, body)


def test_checkpoint_follows_commit_and_close_flushes_everything(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=3)
        for partition in range(3):
            await logs.append(TOPIC, partition, make_batch(partition + 1), timeout_s=10)
        await logs.flush(TOPIC, 1)
        assert logs.wal.flushed_offsets == {(TOPIC, 1): 1}
        await h.shutdown(logs)  # flushes the other two
        for partition in range(3):
            state = PartitionCatalog(local_store, NS, TOPIC, partition).load()
            assert state.high_watermark == partition + 1
        again = await h.open()
        assert again.metrics().flushes == 0  # the WAL had nothing left to replay

    run_harness(local_store, tmp_path, body)


def test_flushed_segments_are_served_from_l1_then_store(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    store = InstrumentedStore(local_store)

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await logs.read(TOPIC, 0, 0, 1 << 20)  # a consumer at the tail: the partition has readers
        await logs.append(TOPIC, 0, make_batch(5), timeout_s=10)
        await logs.flush()
        store.reset()
        await read_all(logs, TOPIC, 0)
        assert store.data_gets() == []  # the segment just written went into L1
        assert logs.cached_segments() == [f"{TOPIC}/0/segment-{0:020d}.kfs"]
        m = logs.metrics()
        assert (m.fetch_from_cache, m.l1_hits) == (1, 1)
        await h.shutdown(logs)

        uncached = await h.open(cache_flushed_segments=False, catalog_refresh_ms=3_600_000)
        await uncached.read(TOPIC, 0, 0, 1 << 20)
        await uncached.append(TOPIC, 0, make_batch(2), timeout_s=10)
        await uncached.flush()
        assert uncached.cached_segments() == []

    run_harness(store, tmp_path, body)


def test_segments_of_a_partition_nobody_reads_stay_out_of_l1(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    """Pure ingestion caches nothing; the first read, and the flushes after it, do."""
    store = InstrumentedStore(local_store)

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(5), timeout_s=10)
        await logs.flush()
        assert logs.cached_segments() == []
        store.reset()
        assert len(decode_all(await read_all(logs, TOPIC, 0))) == 1  # read from the store
        assert [g.key for g in store.data_gets()] == [f"{NS}/{TOPIC}/0/segment-{0:020d}.kfs"]
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)
        await logs.flush()
        assert f"{TOPIC}/0/segment-{5:020d}.kfs" in logs.cached_segments()  # it has a reader now

    run_harness(store, tmp_path, body)


def test_offset_lookups_alone_keep_flushed_segments_out_of_l1(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    """A lag monitor's ListOffsets reads nothing: only a fetch makes flushes cache their segments."""

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(5), timeout_s=10)
        for timestamp in (-1, -2, 0):  # latest, earliest, by time
            await logs.list_offsets(TOPIC, 0, timestamp)
        await logs.flush()
        assert logs.cached_segments() == []
        assert len(decode_all(await read_all(logs, TOPIC, 0))) == 1  # a consumer now
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)
        await logs.flush()
        assert f"{TOPIC}/0/segment-{5:020d}.kfs" in logs.cached_segments()

    run_harness(local_store, tmp_path, body)
