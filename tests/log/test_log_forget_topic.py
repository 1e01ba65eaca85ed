"""`LogManager.forget_topic`: a deleted topic is gone at once, its unflushed batches with it.

* Appends, reads, offset lookups and topic lookups raise
  `UnknownTopicOrPartition` right after it, with no topic-cache window; an
  append waiting for the WAL fails with it too.
* Unflushed batches are discarded: the pool and the buffers let go, and the
  WAL is checkpointed past them, so a restart does not replay them.
* Creating the name again is refused while the registry says "marked for
  deletion"; once purged, the new topic's offsets continue above the
  discarded ones, so no WAL checkpoint of the old topic covers a new batch:
  a crash right after a produce to the new topic loses nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kfs_core.catalog import PartitionCatalog
from kfs_core.errors import TopicAlreadyExists, UnknownTopicOrPartition
from kfs_core.log import LATEST_TIMESTAMP
from kfs_core.storage.base import ObjectStore
from tests.log.conftest import FsyncGate
from tests.log.log_helpers import (
    NS,
    TOPIC,
    Harness,
    eventually,
    make_batch,
    offsets_and_values,
    read_all,
    run_harness,
)


def test_a_forgotten_topic_is_unknown_at_once_and_its_unflushed_batches_are_gone(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=2)
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)
        await logs.flush()  # offsets 0..2 committed
        await logs.append(TOPIC, 0, make_batch(2), timeout_s=10)  # 3..4 only in memory
        await logs.append(TOPIC, 1, make_batch(1), timeout_s=10)  # 0 only in memory
        assert logs.metrics().pool_used_bytes > 0

        logs.registry.delete_topic(TOPIC)
        # The registry alone is not enough: the log's topic cache still knows the topic.
        assert (await logs.append(TOPIC, 1, make_batch(1), timeout_s=10)).base_offset == 1
        await logs.forget_topic(TOPIC)

        for attempt in (
            logs.append(TOPIC, 0, make_batch(1), timeout_s=10),
            logs.read(TOPIC, 0, 0, 1 << 20),
            logs.list_offsets(TOPIC, 1, LATEST_TIMESTAMP),
            logs.topic(TOPIC),
            logs.topic(TOPIC, auto_create=True),  # "marked for deletion": not created again
        ):
            with pytest.raises(UnknownTopicOrPartition):
                await attempt
        m = logs.metrics()
        assert (m.pool_used_bytes, m.buffered_bytes, m.partitions) == (0, 0, 0)
        assert logs.wal.flushed_offsets == {(TOPIC, 0): 4, (TOPIC, 1): 1}
        await logs.flush()  # nothing of the topic is left to flush
        await h.crash(logs)

        again = await h.open()
        assert h.last_report is not None
        assert h.last_report.replayed_batches == 0  # the discarded batches stay discarded
        assert again.metrics().flushes == 0
        state = PartitionCatalog(local_store, NS, TOPIC, 0).load()
        assert state.high_watermark == 3  # what was committed before the delete

    run_harness(local_store, tmp_path, body)


def test_an_append_waiting_for_the_wal_fails_when_its_topic_is_forgotten(
    local_store: ObjectStore, tmp_path: Path, fsync_gate: FsyncGate
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        waiting = asyncio.ensure_future(logs.append(TOPIC, 0, make_batch(2), timeout_s=10))
        await asyncio.to_thread(fsync_gate.entered.wait, 10)  # its frame is in the fsync
        logs.registry.delete_topic(TOPIC)
        forgetting = asyncio.ensure_future(logs.forget_topic(TOPIC))
        with pytest.raises(UnknownTopicOrPartition, match="deleted"):
            await asyncio.wait_for(waiting, 5)
        fsync_gate.release.set()  # the checkpoint behind it can be written now
        await forgetting
        assert logs.wal.flushed_offsets == {(TOPIC, 0): 1}
        assert logs.metrics().pool_used_bytes == 0

    run_harness(local_store, tmp_path, body)


def test_a_topic_created_again_continues_above_the_discarded_offsets(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(3, tag="old"), timeout_s=10)
        await logs.flush()
        await logs.append(TOPIC, 0, make_batch(2, tag="lost"), timeout_s=10)  # 3..4, discarded
        logs.registry.delete_topic(TOPIC)
        await logs.forget_topic(TOPIC)

        with pytest.raises(TopicAlreadyExists, match="marked for deletion"):
            await logs.create_topic(TOPIC)
        logs.registry.purge_topic(TOPIC)  # what retention does once the data is gone
        await logs.create_topic(TOPIC)
        appended = await logs.append(TOPIC, 0, make_batch(2, tag="new"), timeout_s=10)
        assert appended.base_offset == 5  # above the checkpoint at 4: offsets 3..4 not reused
        await h.crash(logs)  # unflushed: only the WAL has the new batch

        again = await h.open()
        assert h.last_report is not None and h.last_report.replayed_batches == 1
        result = await again.read(TOPIC, 0, 5, 1 << 20)
        assert offsets_and_values(result.records) == [(5, b"new0:xxx"), (6, b"new1:xxx")]
        assert await again.high_watermark(TOPIC, 0) == 7
        await eventually(lambda: again.metrics().flushes >= 1, what="the replayed batch")

    run_harness(local_store, tmp_path, body)


def test_a_topic_deleted_while_the_daemon_was_down_is_skipped_by_recovery_and_purged(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    """``kfs topics delete`` with the daemon down: its WAL records of the topic are never replayed.

    The restart checkpoints the WAL past them, and its sweep purges the topic:
    the name is free, and the new topic starts above every offset the WAL held.
    """

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC, partitions=1)
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)
        await logs.flush()  # offsets 0..2 committed
        await logs.append(TOPIC, 0, make_batch(2), timeout_s=10)  # 3..4 in the WAL only
        await h.crash(logs)
        logs.registry.delete_topic(TOPIC)

        again = await h.open()
        assert h.last_report is not None
        assert h.last_report.replayed_batches == 0
        assert again.wal.flushed_offsets[(TOPIC, 0)] == 4
        await eventually(lambda: not again.registry.deleted_topics(), what="the purge")
        state = PartitionCatalog(local_store, NS, TOPIC, 0).refresh()
        assert (state.segments, state.log_start_offset, state.high_watermark) == ((), 5, 5)
        await again.create_topic(TOPIC, partitions=1)
        assert (await again.append(TOPIC, 0, make_batch(1), timeout_s=10)).base_offset == 5
        await h.crash(again)

        third = await h.open()  # nothing of the deleted topic comes back
        assert offsets_and_values(await read_all(third, TOPIC, 0, 5))[0][0] == 5

    run_harness(local_store, tmp_path, body)
