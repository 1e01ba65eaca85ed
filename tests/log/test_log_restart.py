"""Restarts: data in the WAL only, in segments only, in both, and committed but not checkpointed.

Every case ends the same way: every acknowledged offset readable with the same
bytes, nothing twice in the catalog, and the next append continuing after the
old high watermark.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kfs_core.catalog import PartitionCatalog, PartitionState
from kfs_core.catalog.layout import POINTER_NAME
from kfs_core.log import LogManager
from kfs_core.log.wal import WalPosition
from kfs_core.storage.base import ByteRange, ObjectStore
from tests.log.log_helpers import (
    NS,
    TOPIC,
    Harness,
    InstrumentedStore,
    both_stores,
    make_batch,
    offsets_and_values,
    read_all,
    run_harness,
)

PARTITIONS = 2

any_store = both_stores()


async def produce(logs: LogManager, rounds: int, tag: str) -> None:
    for n in range(rounds):
        for partition in range(PARTITIONS):
            batch = make_batch(1 + n % 3, size=30, tag=f"{tag}{n}-p{partition}-")
            await logs.append(TOPIC, partition, batch, timeout_s=10)


async def snapshot(logs: LogManager) -> dict[int, bytes]:
    return {p: await read_all(logs, TOPIC, p, max_bytes=200) for p in range(PARTITIONS)}


def assert_no_duplicates(state: PartitionState, high_watermark: int) -> None:
    """Live segments tile [0, HW) exactly once."""
    expected = 0
    for segment in state.segments:
        assert segment.base_offset == expected, state.segments
        expected = segment.last_offset + 1
    assert expected == state.high_watermark == high_watermark


def check_catalog(store: ObjectStore, high_watermarks: dict[int, int]) -> None:
    for partition, hw in high_watermarks.items():
        assert_no_duplicates(PartitionCatalog(store, NS, TOPIC, partition).load(), hw)


@pytest.mark.parametrize("where", ["wal", "segments", "both"])
def test_restart_serves_the_same_bytes_at_the_same_offsets(
    any_store: ObjectStore, tmp_path: Path, where: str
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=PARTITIONS)
        await produce(logs, 6, "a")
        if where in ("segments", "both"):
            await logs.flush()
        if where == "both":
            await produce(logs, 4, "b")
        before = await snapshot(logs)
        hws = {p: await logs.high_watermark(TOPIC, p) for p in range(PARTITIONS)}
        if where == "segments":
            await h.shutdown(logs)
        else:
            await h.crash(logs)  # unflushed batches exist only in the WAL

        again = await h.open()
        report = h.last_report
        batches = 6 if where == "wal" else 4 if where == "both" else 0
        assert (report.replayed_batches, report.skipped_batches) == (batches * PARTITIONS, 0)
        assert await snapshot(again) == before
        for partition in range(PARTITIONS):
            assert await again.high_watermark(TOPIC, partition) == hws[partition]
        # What the WAL held was flushed during start: the catalog has it all, once.
        check_catalog(h.store, hws)
        result = await again.append(TOPIC, 0, make_batch(1), timeout_s=10)
        assert result.base_offset == hws[0]
        await h.crash(again)

        # And once more, now that the WAL holds only the one new batch.
        third = await h.open()
        data = await read_all(third, TOPIC, 0)
        assert data.startswith(before[0])
        assert [o for o, _ in offsets_and_values(data)] == list(range(hws[0] + 1))

    run_harness(any_store, tmp_path, body)


def test_batches_committed_before_their_checkpoint_are_not_replayed_twice(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=PARTITIONS)

        async def lost_checkpoint(topic: str, partition: int, offset: int) -> WalPosition:
            return WalPosition(0, 0, 0)  # the daemon died before the checkpoint frame

        logs.wal.checkpoint_async = lost_checkpoint  # type: ignore[method-assign]
        await produce(logs, 5, "a")
        await logs.flush()  # committed, but the WAL still holds the frames
        await produce(logs, 3, "b")  # and these are only in the WAL
        before = await snapshot(logs)
        hws = {p: await logs.high_watermark(TOPIC, p) for p in range(PARTITIONS)}
        await h.crash(logs)

        again = await h.open()
        report = h.last_report
        assert (report.replayed_batches, report.skipped_batches) == (3 * PARTITIONS, 5 * PARTITIONS)
        assert again.metrics().flushes == PARTITIONS  # the "b" batches, once per partition
        assert await snapshot(again) == before
        check_catalog(h.store, hws)

    run_harness(local_store, tmp_path, body)


# --- the warm-up after a start -------------------------------------------------------

WARM_PARTITIONS = 4


async def produce_everywhere(logs: LogManager, topics: list[str]) -> None:
    for topic in topics:
        for partition in range(WARM_PARTITIONS):
            await logs.append(
                topic, partition, make_batch(2, tag=f"{topic}-{partition}-"), timeout_s=10
            )


@pytest.mark.parametrize("stop", ["graceful", "crash"])
def test_a_start_opens_the_partitions_the_wal_names_before_any_request(
    local_store: ObjectStore, tmp_path: Path, stop: str
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=WARM_PARTITIONS)
        await produce_everywhere(logs, [TOPIC])
        await logs.flush()  # all in the catalog: nothing for the replay to open
        await (h.shutdown(logs) if stop == "graceful" else h.crash(logs))

        again = await h.open()
        assert again.warm_up is not None
        assert await again.warm_up == WARM_PARTITIONS
        # Open without a request: the first produce finds its partition loaded.
        assert again.metrics().partitions == WARM_PARTITIONS
        result = await again.append(TOPIC, 3, make_batch(1), timeout_s=10)
        assert result.base_offset == 2
        await h.crash(again)

    run_harness(local_store, tmp_path, body)


def test_the_warm_up_tries_at_most_warmup_partitions_and_skips_deleted_topics(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        for topic in ("gone", "kept"):
            await logs.create_topic(topic, partitions=WARM_PARTITIONS)
        await produce_everywhere(logs, ["gone", "kept"])
        await logs.flush()
        await h.crash(logs)
        # Deleted while the daemon was down: the WAL still names its partitions.
        logs.registry.delete_topic("gone")

        # The first six keys: "gone"'s four (tried, not opened) and two of "kept".
        again = await h.open(warmup_partitions=6)
        assert again.warm_up is not None
        assert await again.warm_up == 2
        assert again.metrics().partitions == 2
        for partition in range(WARM_PARTITIONS):  # the rest open on their first request
            await again.append("kept", partition, make_batch(1), timeout_s=10)
        await again.flush()  # so that the next start has nothing to replay
        await h.crash(again)

        none = await h.open(warmup_partitions=0)
        assert none.warm_up is not None
        assert await none.warm_up == 0
        assert none.metrics().partitions == 0

    run_harness(local_store, tmp_path, body)


def test_the_partitions_a_request_opens_load_at_once(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    # On S3 a catalog load is several round trips: one after another, a
    # request to many cold partitions would pay them once per partition.
    both_loading = threading.Barrier(2)

    class MeetingStore(InstrumentedStore):
        def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
            if f"/{TOPIC}/" in key and key.endswith(POINTER_NAME):
                both_loading.wait(timeout=10)  # broken, and the load fails, if alone
            return super().get(key, byte_range)

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=PARTITIONS)
        await logs.open_partitions([(TOPIC, p) for p in range(PARTITIONS)], timeout_s=30)
        assert logs.metrics().partitions == PARTITIONS
        assert not both_loading.broken

    run_harness(MeetingStore(local_store), tmp_path, body)
