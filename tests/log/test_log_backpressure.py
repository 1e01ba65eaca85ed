"""The memory pool: emergency flushes, appends that wait, typed timeouts, memory that stays bounded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kfs_core.errors import MessageTooLarge, RequestTimedOut
from kfs_core.log.pool import MemoryPool
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import (
    TOPIC,
    Harness,
    InstrumentedStore,
    eventually,
    make_batch,
    offsets_and_values,
    read_all,
    run,
    run_harness,
)

POOL = 4000
BATCH = make_batch(4, size=200)  # about 1 KB


def test_a_full_pool_makes_appends_wait_until_a_flush_frees_it(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    store = InstrumentedStore(local_store)

    async def body(h: Harness) -> None:
        logs = await h.open(pool_bytes=POOL)
        await logs.create_topic(TOPIC, partitions=2)
        store.put_gate.clear()  # the store stops answering: flushes hang
        fits = POOL // len(BATCH)
        for n in range(fits):
            await logs.append(TOPIC, n % 2, BATCH, timeout_s=10)
        # 75 % full: an emergency flush has started (and is stuck in its upload).
        await eventually(lambda: store.held > 0, what="the emergency flush's upload")
        assert logs.metrics().pool_waits == 0  # every append so far fitted
        waiting = asyncio.ensure_future(logs.append(TOPIC, 0, BATCH, timeout_s=30))
        await eventually(lambda: logs.metrics().pool_waiters == 1, what="the append to wait")
        assert not waiting.done()
        assert logs.metrics().pool_used_bytes <= POOL

        store.put_gate.set()  # the store recovers; the flushes free the pool
        result = await waiting
        # The wait is counted and timed: a stall in the pool shows as such.
        assert logs.metrics().pool_waits == 1
        assert logs.metrics().pool_wait_seconds > 0
        assert result.base_offset == len(offsets_and_values(BATCH)) * ((fits + 1) // 2)
        await logs.flush()
        total = 0
        for partition in range(2):
            total += len(offsets_and_values(await read_all(logs, TOPIC, partition)))
        assert total == 4 * (fits + 1)
        assert logs.metrics().pool_used_bytes == 0

    run_harness(store, tmp_path, body)


def test_a_stuck_store_times_appends_out_with_memory_bounded(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    store = InstrumentedStore(local_store)

    async def body(h: Harness) -> None:
        logs = await h.open(pool_bytes=POOL)
        await logs.create_topic(TOPIC)
        store.put_gate.clear()
        acknowledged = 0
        timeouts = 0
        for _ in range(8):
            try:
                # Long enough for a WAL fsync on a busy machine: only the pool's wait times out.
                await logs.append(TOPIC, 0, BATCH, timeout_s=1.0)
                acknowledged += 1
            except RequestTimedOut as exc:
                assert exc.kafka_error_code == 7 and exc.retriable
                timeouts += 1
            m = logs.metrics()
            assert m.pool_used_bytes <= POOL and m.buffered_bytes <= POOL
        assert acknowledged == POOL // len(BATCH) and timeouts == 8 - acknowledged
        assert logs.metrics().produce_timeouts == timeouts
        # Nothing that timed out in the pool got an offset.
        assert await logs.high_watermark(TOPIC, 0) == 4 * acknowledged

        store.put_gate.set()
        await logs.flush()
        assert len(offsets_and_values(await read_all(logs, TOPIC, 0))) == 4 * acknowledged

    run_harness(store, tmp_path, body)


def test_a_produce_larger_than_the_pool_is_too_large(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open(pool_bytes=POOL)
        await logs.create_topic(TOPIC)
        with pytest.raises(MessageTooLarge) as caught:
            await logs.append(TOPIC, 0, BATCH * 5, timeout_s=1)
        assert caught.value.kafka_error_code == 10
        assert logs.metrics().pool_used_bytes == 0

    run_harness(local_store, tmp_path, body)


# --- MemoryPool on its own ----------------------------------------------------


def test_pool_serves_waiters_first_come_first_served() -> None:
    async def body() -> list[str]:
        signals: list[int] = []
        pool = MemoryPool(100, on_pressure=lambda: signals.append(pool.used))
        await pool.acquire(70)
        assert signals == []  # below 75 %: no pressure yet
        order: list[str] = []

        async def take(name: str, size: int) -> None:
            await pool.acquire(size, 5)
            order.append(name)

        big = asyncio.ensure_future(take("big", 60))
        await eventually(lambda: pool.waiting == 1)
        assert signals  # a waiter means a flush is needed
        small = asyncio.ensure_future(take("small", 10))  # would fit, but queues behind
        await eventually(lambda: pool.waiting == 2)
        assert order == []
        pool.release(70)
        await asyncio.gather(big, small)
        assert pool.used == 70
        return order

    assert run(body()) == ["big", "small"]


def test_pool_timeouts_and_cancellations_give_their_place_up() -> None:
    async def body() -> None:
        pool = MemoryPool(100)
        await pool.acquire(90)
        with pytest.raises(RequestTimedOut):
            await pool.acquire(50, 0.01)
        assert (pool.used, pool.waiting) == (90, 0)
        assert pool.waits == 1 and pool.wait_seconds > 0.005  # a timed-out wait counts too
        blocked = asyncio.ensure_future(pool.acquire(50, 5))
        behind = asyncio.ensure_future(pool.acquire(5, 5))
        await eventually(lambda: pool.waiting == 2)
        blocked.cancel()
        await asyncio.wait([blocked])
        await behind  # the cancelled head no longer blocks it
        assert (pool.used, pool.waiting) == (95, 0)
        assert pool.waits == 3
        pool.force_acquire(50)  # replay may overshoot; the flush brings it back
        assert pool.used == 145 and pool.under_pressure
        pool.release(145)
        with pytest.raises(ValueError):
            await pool.acquire(101)

    run(body())
