"""Producers, tailing consumers and flushes at once: no gap, no duplicate, no reordering.

Small segments and a small pool make flushes (by size and by memory
pressure) commit while consumers fetch, so batches move from the buffers to
the store under the consumers' feet.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kfs_core.log import LogManager
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import (
    TOPIC,
    Harness,
    decode_all,
    make_batch,
    offsets_and_values,
    run_harness,
)

PARTITIONS = 3
PRODUCERS_PER_PARTITION = 3
BATCHES_EACH = 60


async def producer(logs: LogManager, partition: int, name: int) -> list[tuple[int, bytes]]:
    """Appends batches; returns (base offset, batch values) as acknowledged."""
    acked = []
    for n in range(BATCHES_EACH):
        count = 1 + (n + name) % 4
        batch = make_batch(count, size=150, tag=f"p{partition}-{name}-{n}-")
        result = await logs.append(TOPIC, partition, batch, timeout_s=20)
        acked.append((result.base_offset, batch))
    return acked


async def tailer(logs: LogManager, partition: int, total: int) -> list[tuple[int, bytes | None]]:
    """Fetches from 0 as a consumer would until ``total`` records came back."""
    seen: list[tuple[int, bytes | None]] = []
    offset = 0
    while len(seen) < total:
        result = await logs.read(TOPIC, partition, offset, 700)
        if not result.records:
            await asyncio.sleep(0.001)  # a long-poll would wait here
            continue
        batches = decode_all(result.records)
        assert batches[0].base_offset <= offset <= batches[0].last_offset
        seen += [(r.offset, r.value) for b in batches for r in b.records]
        offset = batches[-1].last_offset + 1
    return seen


def test_concurrent_producers_consumers_and_flushes(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open(segment_bytes=3000, pool_bytes=24_000, flush_interval_ms=20)
        await logs.create_topic(TOPIC, partitions=PARTITIONS)
        totals = {
            p: sum(
                1 + (n + name) % 4
                for name in range(PRODUCERS_PER_PARTITION)
                for n in range(BATCHES_EACH)
            )
            for p in range(PARTITIONS)
        }
        producers = [
            asyncio.ensure_future(producer(logs, p, name))
            for p in range(PARTITIONS)
            for name in range(PRODUCERS_PER_PARTITION)
        ]
        tailers = [asyncio.ensure_future(tailer(logs, p, totals[p])) for p in range(PARTITIONS)]
        acked = await asyncio.gather(*producers)
        seen = await asyncio.gather(*tailers)
        assert logs.metrics().flushes > PARTITIONS  # data moved to the store meanwhile

        for p in range(PARTITIONS):
            expected: list[tuple[int, bytes | None]] = []
            mine = acked[p * PRODUCERS_PER_PARTITION : (p + 1) * PRODUCERS_PER_PARTITION]
            batches = sorted(b for results in mine for b in results)
            for base_offset, batch in batches:
                assert base_offset == len(expected)  # contiguous across producers
                expected += [(base_offset + o, v) for o, v in offsets_and_values(batch)]
            assert seen[p] == expected
        await h.shutdown(logs)

        again = await h.open()
        for p in range(PARTITIONS):
            assert await tailer(again, p, totals[p]) == seen[p]

    run_harness(local_store, tmp_path, body)
