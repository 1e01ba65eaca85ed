"""The group coordinator: one object the Kafka group APIs talk to.

One `GroupCoordinator` per daemon coordinates every group (KFS is a
single-node cluster, so it is every group's coordinator).  It speaks in
plain values, never wire types: `kfs_core.server.apis.groups` translates.

It is a façade over two parts that share one table of groups, as Kafka
keeps its GroupCoordinator apart from its GroupMetadataManager:

- `kfs_core.groups.membership` — the classic group protocol's state
  machine: join, sync, heartbeat, leave, static membership, generation
  fencing, rebalance timers;
- `kfs_core.groups.offsets` — committed offsets: commit, fetch, the rebuild
  of groups (offsets and stored membership) from ``__consumer_offsets`` on
  `start`, deletes and retention.

The façade owns the lifecycle: no call is answered (`CoordinatorNotAvailable`)
before `start` has rebuilt the offsets or after `close`.

With several daemons on one namespace, a daemon coordinates the groups whose
``__consumer_offsets`` partition it leads (``leadership`` says at which lease
epoch it holds a partition, or None).  Each partition's groups are loaded
from the log when this daemon comes to hold it (at `start`, or on the first
request after a take-over: COORDINATOR_LOAD_IN_PROGRESS meanwhile, or the
request waits when it can) and forgotten once it holds it no more; a request
for a group led elsewhere gets NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence

from kfs_core.errors import (
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    GroupError,
    NotCoordinator,
    NotLeaderOrFollower,
)
from kfs_core.groups.membership import GroupMembership
from kfs_core.groups.model import (
    MAX_GROUP_ID_LENGTH,
    Group,
    GroupDescription,
    GroupSettings,
    GroupState,
    JoinedMember,
    JoinResult,
    MemberDescription,
    SyncResult,
    TopicPartitions,
)
from kfs_core.groups.offset_log import CommittedOffset, OffsetLog, PartitionKey
from kfs_core.groups.offsets import CommitRequest, CommittedOffsets

__all__ = [
    "MAX_GROUP_ID_LENGTH",
    "CommitRequest",
    "GroupCoordinator",
    "GroupDescription",
    "GroupSettings",
    "GroupState",
    "JoinResult",
    "JoinedMember",
    "MemberDescription",
    "SyncResult",
]


class GroupCoordinator:
    """Every consumer group of the daemon, and their committed offsets."""

    def __init__(
        self,
        offset_log: OffsetLog,
        topic_partitions: TopicPartitions,
        settings: GroupSettings | None = None,
        *,
        leadership: Callable[[int], int | None] | None = None,
    ) -> None:
        self.settings = settings or GroupSettings()
        groups: dict[str, Group] = {}
        self._membership = GroupMembership(groups, self.settings, offset_log.append_group)
        self._offsets = CommittedOffsets(
            groups, offset_log, topic_partitions, self.settings, self._membership.resume
        )
        self._offset_log = offset_log
        self._loaded = False
        # Several daemons: the lease epoch of each offsets partition, when held here.
        self._leadership = leadership
        self._loaded_epochs: dict[int, int] = {}
        self._loading: dict[int, asyncio.Task[int | None]] = {}

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> tuple[int, float]:
        """Rebuild committed offsets from ``__consumer_offsets``: how many, and the seconds it took.

        With several daemons, only the partitions this daemon leads.
        """
        if self._leadership is None:
            count, took = await self._offsets.load()
        else:
            started = asyncio.get_running_loop().time()
            count = 0
            for partition in range(await self._offset_log.existing_partitions()):
                count += await self._load(partition) or 0
            took = asyncio.get_running_loop().time() - started
        self._loaded = True
        self._offsets.start_sweeper()
        return count, took

    async def close(self) -> None:
        await self._offsets.stop_sweeper()
        self._loaded = False
        for task in self._loading.values():
            task.cancel()
        self._membership.close()
        await self._membership.drain()

    async def ready_for(self, group_id: str) -> None:
        """Wait until this daemon has loaded the group's offsets partition, if it must load it.

        Raises `NotCoordinator` when another daemon leads that partition; a
        call that returns finds the group's state in place, so requests that
        do not wait themselves (Heartbeat, OffsetFetch) are answered at once.
        """
        if self._leadership is not None and self._loaded:
            await self._ensure_loaded(group_id)

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` unless it exists, and learn its partition count."""
        await self._offset_log.ensure_topic()

    async def _load(self, partition: int) -> int | None:
        """Load one offsets partition's groups if this daemon leads it; None if it does not.

        Reading the partition opens it, and so takes its lease: the topic is
        created first if no group has committed yet.
        """
        try:
            await self._offset_log.ensure_topic()
            count = await self._offsets.load_partition(partition)
        except NotLeaderOrFollower:
            self._offsets.unload_partition(partition)
            self._loaded_epochs.pop(partition, None)
            return None
        assert self._leadership is not None
        epoch = self._leadership(partition)
        if epoch is not None:
            self._loaded_epochs[partition] = epoch
        return count

    def _check_loaded(self, group_id: str | None = None) -> None:
        """Refuse unless started and, with several daemons, this one has the group's offsets.

        Starts loading them when this daemon has come to lead their partition
        (`CoordinatorLoadInProgress` until done); `NotCoordinator` when
        another daemon leads it.
        """
        if not self._loaded:
            raise CoordinatorNotAvailable("the group coordinator is loading or stopped")
        if self._leadership is None:
            return
        self._forget_lost_partitions()
        if group_id is None:
            return
        partition = self._offsets.partition_for(group_id)
        if self._current(partition):
            return
        task = self._loading.get(partition)
        if task is not None and task.done():
            del self._loading[partition]
            if not task.cancelled() and task.exception() is None and self._current(partition):
                return
            if not task.cancelled() and task.exception() is None:
                raise NotCoordinator(f"another daemon coordinates group {group_id!r}")
            task = None
        if task is None:
            self._loading[partition] = asyncio.ensure_future(self._load(partition))
        raise CoordinatorLoadInProgress(f"loading the offsets of group {group_id!r}")

    async def _ensure_loaded(self, group_id: str) -> None:
        """`_check_loaded`, waiting for a load this call needs instead of refusing."""
        try:
            self._check_loaded(group_id)
        except CoordinatorLoadInProgress:
            task = self._loading.get(self._offsets.partition_for(group_id))
            if task is None:
                raise
            with contextlib.suppress(Exception):
                await asyncio.shield(task)
            self._check_loaded(group_id)

    def _current(self, partition: int) -> bool:
        assert self._leadership is not None
        epoch = self._leadership(partition)
        return epoch is not None and self._loaded_epochs.get(partition) == epoch

    def _forget_lost_partitions(self) -> None:
        """Drop the groups of offsets partitions this daemon no longer holds at the loaded epoch."""
        for partition in [p for p in self._loaded_epochs if not self._current(p)]:
            del self._loaded_epochs[partition]
            self._offsets.unload_partition(partition)

    # --- membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup --------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int = -1,
        instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = False,
    ) -> JoinResult:
        """Join (or rejoin) ``group_id``; returns when the group's join phase completes."""
        await self._ensure_loaded(group_id)
        return await self._membership.join(
            group_id,
            member_id,
            protocol_type=protocol_type,
            protocols=protocols,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            instance_id=instance_id,
            client_id=client_id,
            client_host=client_host,
            require_known_member_id=require_known_member_id,
        )

    async def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: Mapping[str, bytes],
        *,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        """The member's assignment for this generation; the leader brings everyone's."""
        await self._ensure_loaded(group_id)
        return await self._membership.sync(
            group_id,
            member_id,
            generation,
            assignments,
            instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
        )

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, *, instance_id: str | None = None
    ) -> None:
        """Keep the member alive; raises `RebalanceInProgress` when it must rejoin."""
        self._check_loaded(group_id)
        self._membership.heartbeat(group_id, member_id, generation, instance_id=instance_id)

    def leave(
        self, group_id: str, departures: Sequence[tuple[str, str | None]]
    ) -> list[GroupError | None]:
        """Remove members ``(member id, instance id)``; one outcome per departure."""
        self._check_loaded(group_id)
        return self._membership.leave(group_id, departures)

    # --- offsets: OffsetCommit, OffsetFetch, OffsetDelete --------------------------------

    async def commit(
        self,
        group_id: str,
        offsets: Sequence[CommitRequest],
        *,
        member_id: str = "",
        generation: int = -1,
        instance_id: str | None = None,
    ) -> list[GroupError | Exception | None]:
        """Store committed offsets durably; one outcome per partition (None: stored).

        A group not using group management (generation < 0, no member id)
        may commit while it is Empty, as Kafka allows for assigned consumers.
        """
        await self._ensure_loaded(group_id)
        group = self._membership.fence_commit(group_id, member_id, generation, instance_id)
        return await self._offsets.commit(group, offsets)

    async def commit_transactional(
        self,
        group_id: str,
        offsets: Sequence[CommitRequest],
        *,
        producer_id: int,
        producer_epoch: int,
        member_id: str = "",
        generation: int = -1,
        instance_id: str | None = None,
    ) -> list[GroupError | Exception | None]:
        """TxnOffsetCommit: offsets that count once the producer's transaction commits."""
        await self._ensure_loaded(group_id)
        group = self._membership.fence_commit(
            group_id, member_id, generation, instance_id, transactional=True
        )
        return await self._offsets.commit_transactional(group, producer_id, producer_epoch, offsets)

    def pending_transactional(self, group_id: str) -> set[PartitionKey]:
        """The partitions with a transactional commit of the group not settled yet."""
        self._check_loaded(group_id)
        return self._offsets.pending_transactional(group_id)

    async def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker reached offsets ``partition``: settle its pending commits."""
        self._offsets.complete_transaction(partition, producer_id, commit)

    def committed(
        self, group_id: str, partitions: Iterable[PartitionKey] | None = None
    ) -> dict[PartitionKey, CommittedOffset]:
        """The group's committed offsets: all of them, or those of ``partitions`` that exist."""
        self._check_loaded(group_id)
        return self._offsets.committed(group_id, partitions)

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[PartitionKey]
    ) -> list[GroupError | None]:
        """OffsetDelete: drop committed offsets of topics the live group does not subscribe to."""
        await self._ensure_loaded(group_id)
        return await self._offsets.delete_offsets(group_id, partitions)

    # --- admin -----------------------------------------------------------------------------

    def list_groups(self, states: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, or of those in ``states``."""
        self._check_loaded()
        return self._membership.list_groups(states)

    def describe(self, group_id: str) -> GroupDescription:
        """The group's state and members (state Dead when there is no such group, as in Kafka)."""
        self._check_loaded(group_id)
        return self._membership.describe(group_id)

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups: an Empty group and its committed offsets go."""
        await self._ensure_loaded(group_id)
        await self._offsets.delete_group(group_id)

    async def forget_topic(self, topic: str) -> int:
        """Drop every group's committed offsets of a deleted topic; returns how many."""
        return await self._offsets.forget_topic(topic)

    # --- retention ---------------------------------------------------------------------------

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Drop expired offsets (KIP-211) and those of topics that no longer exist; how many."""
        return await self._offsets.expire_offsets(now_ms)
