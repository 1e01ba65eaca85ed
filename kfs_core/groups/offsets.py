"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups and retention.

Kafka keeps this apart from the group protocol (its GroupMetadataManager);
so does KFS.  Committed offsets are kept in memory on each `Group` and made
durable first through `OffsetLog` (``__consumer_offsets``); `load` rebuilds
them from it when the daemon starts.  Offsets of an Empty group expire
``offsets_retention_ms`` after its last commit or after it became empty,
whichever is later (KIP-211); offsets of deleted topics are dropped by the
same sweep.  Deleting a group or offsets appends tombstones.

Who may commit (generation fencing) is decided by
`kfs_core.groups.membership.GroupMembership.fence_commit` before
`CommittedOffsets.commit` stores anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kfs_core.errors import (
    GroupError,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    NonEmptyGroup,
    NotCoordinator,
    OffsetMetadataTooLarge,
    UnknownTopicOrPartition,
)
from kfs_core.groups.model import (
    Group,
    GroupSettings,
    GroupState,
    TopicPartitions,
    validate_group_id,
)
from kfs_core.groups.offset_log import CommittedOffset, LoadedGroup, OffsetLog, PartitionKey

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """One partition of an OffsetCommit."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


class CommittedOffsets:
    """Every group's committed offsets: stored, fetched, deleted, expired.

    It shares the table of groups with
    `kfs_core.groups.membership.GroupMembership` (both are parts of
    `GroupCoordinator`, which checks it is loaded before every call).
    """

    def __init__(
        self,
        groups: dict[str, Group],
        offset_log: OffsetLog,
        topic_partitions: TopicPartitions,
        settings: GroupSettings,
        on_load: Callable[[Group], None] = lambda group: None,
    ) -> None:
        self._groups = groups
        self._offset_log = offset_log
        self._topic_partitions = topic_partitions
        self.settings = settings
        self._on_load = on_load
        self._sweeper: asyncio.Task[None] | None = None

    # --- lifecycle ------------------------------------------------------------------

    async def load(self) -> tuple[int, float]:
        """Rebuild groups from ``__consumer_offsets``: how many offsets, and the seconds it took."""
        started = time.perf_counter()
        loaded = await self._offset_log.load()
        self._restore(loaded)
        for partition in list(self._offset_log.open_transactions):
            self._load_open_transactions(partition)
        took = time.perf_counter() - started
        count = sum(len(g.offsets) for g in loaded.values())
        log.info("loaded %d committed offset(s) of %d group(s) in %.3fs", count, len(loaded), took)
        return count, took

    async def load_partition(self, partition: int) -> int:
        """Rebuild the groups whose records go to ``partition``; how many offsets they have.

        The groups of that partition known before are dropped first: this
        daemon has just (again) become their coordinator, and the log is the
        truth.  Raises what the log raises (`NotLeaderOrFollower`).
        """
        loaded = await self._offset_log.load_partition(partition)
        self.unload_partition(partition)
        self._restore(loaded)
        self._load_open_transactions(partition)
        count = sum(len(g.offsets) for g in loaded.values())
        log.info(
            "loaded %d committed offset(s) of %d group(s) from partition %d",
            count,
            len(loaded),
            partition,
        )
        return count

    def _restore(self, loaded: Mapping[str, LoadedGroup]) -> None:
        for group_id, found in loaded.items():
            group = self._groups[group_id] = Group.restored(group_id, found)
            if group.members:
                log.info(
                    "group %r: generation %d with %d member(s) loaded",
                    group_id,
                    group.generation,
                    len(group.members),
                )
            self._on_load(group)

    def _load_open_transactions(self, partition: int) -> None:
        """The transactional commits a load found without their marker yet: pending."""
        found = self._offset_log.open_transactions.get(partition, {})
        for producer_id, entries in found.items():
            for (group_id, key), committed in entries.items():
                if committed is None:
                    continue
                group = self._groups.setdefault(group_id, Group(group_id))
                group.pending_txn.setdefault(producer_id, {})[key] = committed

    def unload_partition(self, partition: int) -> None:
        """Forget the groups whose commits go to ``partition`` (another daemon coordinates them)."""
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            self._groups.pop(group_id).stop_timers(
                NotCoordinator(f"another daemon coordinates group {group_id!r}")
            )

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition the group's commits go to."""
        return self._offset_log.partition_for(group_id)

    def start_sweeper(self) -> None:
        """Run `expire_offsets` every ``offsets_retention_check_interval_ms``."""
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="kfs-offsets-retention")

    async def stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper

    # --- OffsetCommit, OffsetFetch, OffsetDelete ---------------------------------------------

    async def commit(
        self, group: Group, offsets: Sequence[CommitRequest]
    ) -> list[GroupError | Exception | None]:
        """Store committed offsets durably; one outcome per partition (None: stored)."""
        outcomes, stored = await self._validated(offsets)
        if stored:
            async with group.commit_lock:
                try:
                    await self._offset_log.append(group.group_id, stored)
                except Exception as exc:  # noqa: BLE001 - every commit in the batch reports it
                    return [exc if outcome is None else outcome for outcome in outcomes]
                group.offsets.update(stored)
        return outcomes

    async def commit_transactional(
        self, group: Group, producer_id: int, producer_epoch: int, offsets: Sequence[CommitRequest]
    ) -> list[GroupError | Exception | None]:
        """TxnOffsetCommit: store offsets that count once the producer's transaction commits.

        They are appended as a transactional batch of the producer; the
        marker the transaction coordinator writes to this partition settles
        them (`complete_transaction`).
        """
        outcomes, stored = await self._validated(offsets)
        if stored:
            async with group.commit_lock:
                try:
                    await self._offset_log.append(
                        group.group_id,
                        stored,
                        producer_id=producer_id,
                        producer_epoch=producer_epoch,
                    )
                except Exception as exc:  # noqa: BLE001 - every commit in the batch reports it
                    return [exc if outcome is None else outcome for outcome in outcomes]
                group.pending_txn.setdefault(producer_id, {}).update(stored)
        return outcomes

    def pending_transactional(self, group_id: str) -> set[PartitionKey]:
        """The partitions with a transactional commit of the group not settled yet."""
        group = self._groups.get(group_id)
        if group is None:
            return set()
        return {key for pending in group.pending_txn.values() for key in pending}

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> int:
        """The producer's transaction ended at offsets ``partition``: its commits count or go.

        Returns how many offsets it settled.
        """
        settled = 0
        for group in self._groups.values():
            if self.partition_for(group.group_id) != partition:
                continue
            pending = group.pending_txn.pop(producer_id, None)
            if pending is None:
                continue
            settled += len(pending)
            if commit:
                group.offsets.update(pending)
        return settled

    async def _validated(
        self, offsets: Sequence[CommitRequest]
    ) -> tuple[list[GroupError | Exception | None], list[tuple[PartitionKey, CommittedOffset]]]:
        """One outcome per requested offset (None: valid), and the valid ones to store."""
        now = int(time.time() * 1000)
        outcomes: list[GroupError | Exception | None] = []
        stored: list[tuple[PartitionKey, CommittedOffset]] = []
        for request in offsets:
            metadata = request.metadata or ""
            if len(metadata.encode("utf-8")) > self.settings.offset_metadata_max_bytes:
                outcomes.append(
                    OffsetMetadataTooLarge(
                        f"metadata of {len(metadata)} characters is over "
                        f"offset.metadata.max.bytes ({self.settings.offset_metadata_max_bytes})"
                    )
                )
                continue
            partitions = await self._topic_partitions(request.topic)
            if partitions is None or not 0 <= request.partition < partitions:
                outcomes.append(_unknown_partition(request.topic, request.partition))
                continue
            outcomes.append(None)
            stored.append(
                (
                    (request.topic, request.partition),
                    CommittedOffset(request.offset, request.leader_epoch, metadata, now),
                )
            )
        return outcomes, stored

    def committed(
        self, group_id: str, partitions: Iterable[PartitionKey] | None = None
    ) -> dict[PartitionKey, CommittedOffset]:
        """The group's committed offsets: all of them, or those of ``partitions`` that exist."""
        validate_group_id(group_id, allow_empty=True)
        group = self._groups.get(group_id)
        offsets = {} if group is None else group.offsets
        if partitions is None:
            return dict(offsets)
        return {key: offsets[key] for key in partitions if key in offsets}

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[PartitionKey]
    ) -> list[GroupError | None]:
        """OffsetDelete: drop committed offsets of topics the live group does not subscribe to."""
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")
        subscribed = group.subscribed_topics() if group.members else set()
        outcomes: list[GroupError | None] = []
        dropped: list[tuple[PartitionKey, CommittedOffset | None]] = []
        for key in partitions:
            if key[0] in subscribed:
                outcomes.append(
                    GroupSubscribedToTopic(f"group {group_id!r} subscribes to {key[0]!r}")
                )
                continue
            outcomes.append(None)
            if key in group.offsets:
                dropped.append((key, None))
        await self._drop(group, dropped)
        return outcomes

    async def _drop(
        self, group: Group, dropped: Sequence[tuple[PartitionKey, CommittedOffset | None]]
    ) -> None:
        if not dropped:
            return
        async with group.commit_lock:
            await self._offset_log.append(group.group_id, dropped)
            for key, _ in dropped:
                group.offsets.pop(key, None)

    # --- DeleteGroups, deleted topics ------------------------------------------------------

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups: an Empty group and its committed offsets go."""
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")
        if group.state != GroupState.EMPTY:
            raise NonEmptyGroup(f"group {group_id!r} has {len(group.members)} member(s)")
        await self._drop(group, [(key, None) for key in group.offsets])
        await self._forget_membership(group)
        group.state = GroupState.DEAD
        del self._groups[group_id]

    async def _forget_membership(self, group: Group) -> None:
        """A tombstone for the group's stored membership, if it has one."""
        if group.membership_stored:
            await self._offset_log.append_group(group.group_id, None)
            group.membership_stored = False

    async def forget_topic(self, topic: str) -> int:
        """Drop every group's committed offsets of a deleted topic; returns how many."""
        dropped = 0
        for group in list(self._groups.values()):
            keys = [(key, None) for key in group.offsets if key[0] == topic]
            await self._drop(group, keys)
            dropped += len(keys)
        return dropped

    # --- retention ---------------------------------------------------------------------------

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Drop expired offsets (KIP-211) and those of topics that no longer exist; how many."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        retention = self.settings.offsets_retention_ms
        existing: dict[str, bool] = {}
        total = 0
        for group in list(self._groups.values()):
            dropped: list[tuple[PartitionKey, CommittedOffset | None]] = []
            for key, committed in group.offsets.items():
                topic = key[0]
                if topic not in existing:
                    existing[topic] = await self._topic_partitions(topic) is not None
                expired = group.state == GroupState.EMPTY and (
                    now_ms - max(committed.commit_timestamp, group.empty_since_ms) >= retention
                )
                if expired or not existing[topic]:
                    dropped.append((key, None))
            await self._drop(group, dropped)
            total += len(dropped)
            if (
                group.state == GroupState.EMPTY
                and not group.offsets
                and not group.members
                and not group.pending_txn
            ):
                await self._forget_membership(group)
                del self._groups[group.group_id]
        if total:
            log.info("dropped %d expired or orphaned committed offset(s)", total)
        return total

    async def _sweep_loop(self) -> None:
        interval_s = self.settings.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("the committed-offsets retention sweep failed; retrying later")


def _unknown_partition(topic: str, partition: int) -> Exception:
    return UnknownTopicOrPartition(f"unknown partition {topic}-{partition}", topic=topic)
