"""`Partition`: everything the daemon keeps for one partition, shared by the log's parts.

One `Partition` per open ``(topic, partition)``, in the partition table
(`kfs_core.log.partition_table`).  Each part of the log owns some of its fields:

- the append path (`kfs_core.log.appender`): ``next_offset``,
  ``high_watermark``, ``pending``, ``producers``, ``txns``, and appends to
  ``buffer``;
- the flusher (`kfs_core.log.flusher`): ``flush_task``, ``flush_conflict``,
  and drops committed batches from ``buffer``;
- the catalog refresher (`kfs_core.log.catalog_refresh`): ``state`` and
  ``refreshed_at`` -- the catalog state reads go by;
- the reader (`kfs_core.log.reader`): ``next_sequential_read``, ``last_read_at``
  (any read: Fetch, ListOffsets) and ``last_fetch_at`` (Fetch only);
- the partition table (`kfs_core.log.partition_table`): ``epoch``, the lease
  this daemon holds it at, and ``leaving``, set while it is handed over.

All of them run on the one event loop, so none needs a lock.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

from kfs_core.catalog.actions import SegmentEntry
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import PartitionState
from kfs_core.errors import NotLeaderOrFollower, SegmentConflict, UnknownTopicOrPartition
from kfs_core.log.buffer import PartitionBuffer
from kfs_core.log.producer_state import ProducerStateTable
from kfs_core.log.transactions import PartitionTransactions

__all__ = ["Partition", "PendingAppend", "deleted_error", "not_leader"]


@dataclass(eq=False, slots=True)
class PendingAppend:
    """An append queued in the WAL, in offset order; visible once it and all before it are acked."""

    last_offset: int
    visible: asyncio.Future[None]
    acked: bool = False


class Partition:
    """One partition's offsets, unflushed batches, catalog state and idempotent producers."""

    def __init__(
        self, topic: str, partition: int, catalog: PartitionCatalog, state: PartitionState
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self.catalog = catalog
        self.state = state
        self.next_offset = state.high_watermark  # the next offset to assign
        self.high_watermark = state.high_watermark  # everything below is acknowledged
        self.buffer = PartitionBuffer()
        self.pending: deque[PendingAppend] = deque()
        self.flush_task: asyncio.Task[None] | None = None
        # Set while the flush's commit collides with another writer's segments.
        self.flush_conflict: SegmentConflict | None = None
        self.flush_conflicted = asyncio.Event()
        self.next_sequential_read = -1  # where a consumer continuing its last fetch starts
        self.last_read_at = 0.0  # a Fetch or ListOffsets: keeps the catalog state fresh
        self.last_fetch_at = 0.0  # a Fetch: flushed segments go into L1 for the next one
        self.refreshed_at = time.monotonic()
        self.moved_at: float | None = None  # when it opened here, taken from another daemon
        # Where this daemon's epoch begins, above replayed batches: committed with them.
        self.epoch_start_due: int | None = None
        self.deleted = False  # its topic was deleted (`PartitionTable.forget_topic`)
        # The lease epoch this daemon holds the partition at (`kfs_core.cluster`);
        # None for a log without leases.  Commits carry it, segment keys name it.
        self.epoch: int | None = None
        # Set once the partition is being handed over or was taken by another
        # daemon: appends get NOT_LEADER_OR_FOLLOWER.
        self.leaving = False
        self.producers = ProducerStateTable(self.name)  # replaced when the partition opens
        self.txns = PartitionTransactions(self.name)  # loaded from the catalog when it opens

    def __repr__(self) -> str:
        return f"Partition({self.name!r}, next_offset={self.next_offset})"

    def is_live(self, segment: SegmentEntry) -> bool:
        """Whether the catalog state reads go by lists ``segment`` (a lookup, not a scan)."""
        return self.state.holds(segment)


def deleted_error(p: Partition) -> UnknownTopicOrPartition:
    """What appends and reads of a partition of a deleted topic get."""
    return UnknownTopicOrPartition(
        f"topic {p.topic!r} was deleted", topic=p.topic, partition=p.partition
    )


def not_leader(p: Partition) -> NotLeaderOrFollower:
    """What appends and reads of a partition this daemon no longer leads get."""
    return NotLeaderOrFollower(
        f"{p.name}: this daemon does not lead the partition now; refresh metadata",
        topic=p.topic,
        partition=p.partition,
    )
