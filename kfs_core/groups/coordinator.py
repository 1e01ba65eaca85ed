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
  from ``__consumer_offsets`` on `start`, deletes and retention.

The façade owns the lifecycle: no call is answered (`CoordinatorNotAvailable`)
before `start` has rebuilt the offsets or after `close`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kfs_core.errors import CoordinatorNotAvailable, GroupError
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
    ) -> None:
        self.settings = settings or GroupSettings()
        groups: dict[str, Group] = {}
        self._membership = GroupMembership(groups, self.settings)
        self._offsets = CommittedOffsets(groups, offset_log, topic_partitions, self.settings)
        self._loaded = False

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> tuple[int, float]:
        """Rebuild committed offsets from ``__consumer_offsets``: how many, and the seconds it took."""
        count, took = await self._offsets.load()
        self._loaded = True
        self._offsets.start_sweeper()
        return count, took

    async def close(self) -> None:
        await self._offsets.stop_sweeper()
        self._loaded = False
        self._membership.close()

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise CoordinatorNotAvailable("the group coordinator is loading or stopped")

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
        self._check_loaded()
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
        self._check_loaded()
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
        self._check_loaded()
        self._membership.heartbeat(group_id, member_id, generation, instance_id=instance_id)

    def leave(
        self, group_id: str, departures: Sequence[tuple[str, str | None]]
    ) -> list[GroupError | None]:
        """Remove members ``(member id, instance id)``; one outcome per departure."""
        self._check_loaded()
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
        self._check_loaded()
        group = self._membership.fence_commit(group_id, member_id, generation, instance_id)
        return await self._offsets.commit(group, offsets)

    def committed(
        self, group_id: str, partitions: Iterable[PartitionKey] | None = None
    ) -> dict[PartitionKey, CommittedOffset]:
        """The group's committed offsets: all of them, or those of ``partitions`` that exist."""
        self._check_loaded()
        return self._offsets.committed(group_id, partitions)

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[PartitionKey]
    ) -> list[GroupError | None]:
        """OffsetDelete: drop committed offsets of topics the live group does not subscribe to."""
        self._check_loaded()
        return await self._offsets.delete_offsets(group_id, partitions)

    # --- admin -----------------------------------------------------------------------------

    def list_groups(self, states: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, or of those in ``states``."""
        self._check_loaded()
        return self._membership.list_groups(states)

    def describe(self, group_id: str) -> GroupDescription:
        """The group's state and members (state Dead when there is no such group, as in Kafka)."""
        self._check_loaded()
        return self._membership.describe(group_id)

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups: an Empty group and its committed offsets go."""
        self._check_loaded()
        await self._offsets.delete_group(group_id)

    async def forget_topic(self, topic: str) -> int:
        """Drop every group's committed offsets of a deleted topic; returns how many."""
        return await self._offsets.forget_topic(topic)

    # --- retention ---------------------------------------------------------------------------

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Drop expired offsets (KIP-211) and those of topics that no longer exist; how many."""
        return await self._offsets.expire_offsets(now_ms)
