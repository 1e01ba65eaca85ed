"""ListOffsets: earliest, latest, max timestamp and by time in memory, in segments and both."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfs_core.catalog import PartitionCatalog
from kfs_core.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    LogManager,
    OffsetLookup,
)
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import (
    NS,
    TOPIC,
    Harness,
    both_stores,
    make_batch,
    run_harness,
)

# Batch n holds offsets 4n..4n+3, timestamped 10_000 * (n + 1) + 0..3.
BATCHES = 6

any_store = both_stores()


def timestamp_of(offset: int) -> int:
    return 10_000 * (offset // 4 + 1) + offset % 4


async def produce(logs: LogManager, first: int, count: int) -> None:
    for n in range(first, first + count):
        await logs.append(TOPIC, 0, make_batch(4, timestamp=10_000 * (n + 1)), timeout_s=10)


async def lookup(logs: LogManager, timestamp: int) -> OffsetLookup:
    return await logs.list_offsets(TOPIC, 0, timestamp)


def expected(timestamp: int, high_watermark: int, log_start: int = 0) -> OffsetLookup:
    for offset in range(log_start, high_watermark):
        if timestamp_of(offset) >= timestamp:
            return OffsetLookup(offset, timestamp_of(offset))
    return OffsetLookup(-1, -1)


QUERIES = [0, 10_000, 10_002, 10_004, 25_000, 30_003, 40_001, 60_003, 60_004, 99_999]


@pytest.mark.parametrize("flushed", [0, 3, BATCHES], ids=["memory", "both", "segments"])
def test_list_offsets_by_timestamp(any_store: ObjectStore, tmp_path: Path, flushed: int) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open(segment_bytes=300)  # about two batches a segment
        await logs.create_topic(TOPIC)
        assert await lookup(logs, LATEST_TIMESTAMP) == OffsetLookup(0, -1)
        assert await lookup(logs, EARLIEST_TIMESTAMP) == OffsetLookup(0, -1)
        assert await lookup(logs, 0) == OffsetLookup(-1, -1)
        assert await lookup(logs, MAX_TIMESTAMP) == OffsetLookup(-1, -1)
        await produce(logs, 0, flushed)
        await logs.flush()
        await produce(logs, flushed, BATCHES - flushed)
        hw = 4 * BATCHES
        for timestamp in QUERIES:
            assert await lookup(logs, timestamp) == expected(timestamp, hw), timestamp
        assert await lookup(logs, LATEST_TIMESTAMP) == OffsetLookup(hw, -1)
        assert await lookup(logs, EARLIEST_TIMESTAMP) == OffsetLookup(0, -1)
        assert await lookup(logs, MAX_TIMESTAMP) == OffsetLookup(hw - 1, timestamp_of(hw - 1))
        await h.shutdown(logs)

        cold = await h.open()  # everything in segments now, nothing cached
        for timestamp in QUERIES:
            assert await lookup(cold, timestamp) == expected(timestamp, hw), timestamp

    run_harness(any_store, tmp_path, body)


def test_list_offsets_respects_the_log_start_offset(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open(segment_bytes=300)
        await logs.create_topic(TOPIC)
        await produce(logs, 0, BATCHES)
        await logs.flush()
        job = PartitionCatalog(h.store, NS, TOPIC, 0)
        first = job.load().segments[0]
        job.remove([first], log_start_offset=first.last_offset + 1)
        await logs.refresh(TOPIC, 0)
        start = first.last_offset + 1
        assert await lookup(logs, EARLIEST_TIMESTAMP) == OffsetLookup(start, -1)
        assert await lookup(logs, 0) == expected(0, 4 * BATCHES, start)
        with pytest.raises(ValueError):
            await lookup(logs, -4)

    run_harness(local_store, tmp_path, body)


@pytest.mark.parametrize("flushed", [0, 2, 4], ids=["memory", "both", "segments"])
def test_max_timestamp_is_the_first_record_with_the_largest_timestamp(
    any_store: ObjectStore, tmp_path: Path, flushed: int
) -> None:
    """KIP-734: not the last offset; of records with equal timestamps, the first."""
    # Offsets 0-3 at 50_000.., 4-7 at 90_000.. (largest 90_003 at offset 7), 8-11 at
    # 10_000.., 12-15 at 90_000.. again (90_003 again, at offset 15).
    stamps = [50_000, 90_000, 10_000, 90_000]

    async def body(h: Harness) -> None:
        logs = await h.open(segment_bytes=300)
        await logs.create_topic(TOPIC)
        for n, stamp in enumerate(stamps):
            if n == flushed:
                await logs.flush()
            await logs.append(TOPIC, 0, make_batch(4, timestamp=stamp), timeout_s=10)
        assert await lookup(logs, MAX_TIMESTAMP) == OffsetLookup(7, 90_003)
        await h.shutdown(logs)
        cold = await h.open()
        assert await lookup(cold, MAX_TIMESTAMP) == OffsetLookup(7, 90_003)

    run_harness(any_store, tmp_path, body)


def test_log_append_time_topics_are_looked_up_by_the_stamped_time(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    now = [5_000]

    async def body(h: Harness) -> None:
        logs = await h.open(clock=lambda: now[0])
        await logs.create_topic(TOPIC, configs={"message.timestamp.type": "LogAppendTime"})
        for stamp in (5_000, 6_000, 7_000):
            now[0] = stamp
            await logs.append(TOPIC, 0, make_batch(2, timestamp=1), timeout_s=10)
        assert await lookup(logs, 5_500) == OffsetLookup(2, 6_000)
        await logs.flush()
        assert await lookup(logs, 6_500) == OffsetLookup(4, 7_000)
        assert await lookup(logs, 7_001) == OffsetLookup(-1, -1)

    run_harness(local_store, tmp_path, body)
