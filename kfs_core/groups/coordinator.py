"""The group coordinator: Kafka's classic group protocol and committed offsets.

One `GroupCoordinator` per daemon coordinates every group (KFS is a
single-node cluster, so it is every group's coordinator).  It speaks in
plain values, never wire types: `kfs_core.server.apis.groups` translates.

The classic protocol, as Kafka's coordinator runs it:

    Empty ──join──► PreparingRebalance ──all joined / rebalance timeout──►
    CompletingRebalance ──leader's SyncGroup──► Stable ──join, leave, expiry──►
    PreparingRebalance …   (every member gone: Empty; DeleteGroups: Dead)

* JoinGroup: a new member without an id gets one back with
  MEMBER_ID_REQUIRED (KIP-394) and joins again with it.  The join completes
  when every known member has rejoined or the largest rebalance timeout
  passes (members that did not rejoin are removed); a group's first join
  waits ``initial_rebalance_delay_ms`` for more members (Kafka's
  ``group.initial.rebalance.delay.ms``), extended by each newcomer, up to
  the rebalance timeout.  The generation then increases, one protocol all
  members support is chosen (by the members' preference order), the leader
  receives every member's metadata and runs the assignor in the client.
* SyncGroup: the leader's assignments are stored and relayed to each
  member; the group becomes Stable.  Eager and cooperative-sticky
  rebalancing both work this way: the cooperative protocol's revocations
  are the clients' own business (they rejoin after revoking).
* Heartbeat: keeps a member alive for ``session_timeout_ms``; a member that
  misses it is removed and the group rebalances.  REBALANCE_IN_PROGRESS
  tells members to rejoin.
* Static membership (``group.instance.id``, KIP-345): a restarted static
  member takes over its old member id's place; in a Stable group with
  unchanged protocols that causes no rebalance.  The replaced id is fenced
  (FENCED_INSTANCE_ID).
* Generation fencing: SyncGroup, Heartbeat and OffsetCommit from another
  generation get ILLEGAL_GENERATION; from a removed member
  UNKNOWN_MEMBER_ID.

Committed offsets are kept in memory and made durable first through
`OffsetLog` (``__consumer_offsets``); they are rebuilt from it on `start`.
Offsets of an Empty group expire ``offsets_retention_ms`` after its last
commit or after it became empty, whichever is later (KIP-211); offsets of
deleted topics are dropped by the same sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from kfs_core.errors import UnknownTopicOrPartition
from kfs_core.groups.consumer_protocol import (
    ConsumerProtocolError,
    parse_assignment,
    parse_subscription,
)
from kfs_core.groups.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupError,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    MemberIdRequired,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    RebalanceInProgress,
    UnknownMemberId,
)
from kfs_core.groups.offset_log import CommittedOffset, OffsetLog, PartitionKey

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

log = logging.getLogger(__name__)

# Kafka sets no limit below the protocol's; KFS keys offsets by group id and
# shows it on the KFS page, so it keeps ids to the topic-name limit.
MAX_GROUP_ID_LENGTH: Final = 255
CONSUMER_PROTOCOL: Final = "consumer"

# Answers whether a topic exists and how many partitions it has (None: absent).
TopicPartitions = Callable[[str], Awaitable[int | None]]


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupSettings:
    """The coordinator's broker configs, under Kafka's names (``group.*``, ``offsets.*``)."""

    initial_rebalance_delay_ms: int = 300  # Kafka: 3000
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    max_group_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """A member as the leader sees it in JoinGroup: its id, instance id and protocol metadata."""

    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    member_id: str
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """One partition of an OffsetCommit."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    assigned: Mapping[str, Sequence[int]]  # decoded for protocol type "consumer"


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str
    generation: int
    members: tuple[MemberDescription, ...]


@dataclass(eq=False)
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    expiry: asyncio.TimerHandle | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def take_settings(self, other: _Member) -> None:
        """What a rejoin may change: client, timeouts and protocols."""
        self.client_id, self.client_host = other.client_id, other.client_host
        self.session_timeout_ms = other.session_timeout_ms
        self.rebalance_timeout_ms = other.rebalance_timeout_ms
        self.protocol_type, self.protocols = other.protocol_type, other.protocols


@dataclass(eq=False)
class _Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # KIP-394
    offsets: dict[PartitionKey, CommittedOffset] = field(default_factory=dict)
    join_timer: asyncio.TimerHandle | None = None
    join_deadline: float = 0.0  # loop time the initial delay may not pass
    empty_since_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    commit_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def subscribed_topics(self) -> set[str]:
        topics: set[str] = set()
        if self.protocol_type != CONSUMER_PROTOCOL:
            return topics
        for member in self.members.values():
            with contextlib.suppress(ConsumerProtocolError):
                topics.update(parse_subscription(member.metadata_for(self.protocol_name)))
        return topics


def validate_group_id(group_id: object, *, allow_empty: bool = False) -> str:
    """``group_id`` if it is a usable group id; `InvalidGroupId` otherwise."""
    if not isinstance(group_id, str) or (not group_id and not allow_empty):
        raise InvalidGroupId(f"group id must be a non-empty string, got {group_id!r}")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupId(
            f"group id is {len(group_id)} characters long; the limit is {MAX_GROUP_ID_LENGTH}"
        )
    return group_id


class GroupCoordinator:
    """Every consumer group of the daemon, and their committed offsets."""

    def __init__(
        self,
        offset_log: OffsetLog,
        topic_partitions: TopicPartitions,
        settings: GroupSettings | None = None,
    ) -> None:
        self.settings = settings or GroupSettings()
        self._offset_log = offset_log
        self._topic_partitions = topic_partitions
        self._groups: dict[str, _Group] = {}
        self._loaded = False
        self._sweeper: asyncio.Task[None] | None = None

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> tuple[int, float]:
        """Rebuild committed offsets from ``__consumer_offsets``: how many, and the seconds it took."""
        started = time.perf_counter()
        loaded = await self._offset_log.load()
        for group_id, offsets in loaded.items():
            self._groups[group_id] = _Group(group_id, offsets=offsets)
        self._loaded = True
        took = time.perf_counter() - started
        count = sum(len(o) for o in loaded.values())
        log.info("loaded %d committed offset(s) of %d group(s) in %.3fs", count, len(loaded), took)
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="kfs-offsets-retention")
        return count, took

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        self._loaded = False
        for group in self._groups.values():
            if group.join_timer is not None:
                group.join_timer.cancel()
            for handle in group.pending.values():
                handle.cancel()
            for member in group.members.values():
                self._fail_waiters(member, CoordinatorNotAvailable("the coordinator is stopping"))
                if member.expiry is not None:
                    member.expiry.cancel()

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise CoordinatorNotAvailable("the group coordinator is loading or stopped")

    # --- JoinGroup -------------------------------------------------------------------

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
        validate_group_id(group_id)
        settings = self.settings
        if not (
            settings.min_session_timeout_ms <= session_timeout_ms <= settings.max_session_timeout_ms
        ):
            raise InvalidSessionTimeout(
                f"session timeout {session_timeout_ms} ms is outside "
                f"{settings.min_session_timeout_ms}..{settings.max_session_timeout_ms} ms"
            )
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: Kafka uses the session timeout
            rebalance_timeout_ms = session_timeout_ms
        if not protocol_type or not protocols:
            raise InconsistentGroupProtocol("a join needs a protocol type and protocols")
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        if protocol_type == CONSUMER_PROTOCOL:
            for name, metadata in protocols:
                try:
                    parse_subscription(metadata)
                except ConsumerProtocolError as exc:
                    raise InconsistentGroupProtocol(
                        f"protocol {name!r} metadata is not a consumer subscription: {exc}"
                    ) from exc
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            if member_id:
                raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}")
            group = self._groups[group_id] = _Group(group_id)
        if not self._compatible(group, protocol_type, protocols):
            raise InconsistentGroupProtocol(
                f"group {group_id!r} uses protocol type {group.protocol_type!r} with "
                f"protocols no member of this join supports"
            )
        joining = _Member(
            member_id=member_id,
            instance_id=instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=list(protocols),
        )
        if not member_id:
            return await self._join_new(group, joining, require_known_member_id)
        return await self._join_known(group, joining)

    def _compatible(
        self, group: _Group, protocol_type: str, protocols: Sequence[tuple[str, bytes]]
    ) -> bool:
        if not group.members:
            return True
        if protocol_type != group.protocol_type:
            return False
        supported_by_all = set.intersection(
            *(set(m.protocol_names()) for m in group.members.values())
        )
        return bool(supported_by_all.intersection(name for name, _ in protocols))

    async def _join_new(
        self, group: _Group, joining: _Member, require_known_member_id: bool
    ) -> JoinResult:
        joining.member_id = f"{joining.client_id or 'member'}-{uuid.uuid4()}"
        if joining.instance_id is not None:
            old_id = group.static.get(joining.instance_id)
            if old_id is not None:
                return await self._replace_static(group, old_id, joining)
        elif require_known_member_id:
            # KIP-394: the member learns its id first, so a lost response leaves no ghost.
            loop = asyncio.get_running_loop()
            group.pending[joining.member_id] = loop.call_later(
                joining.session_timeout_ms / 1000, self._expire_pending, group, joining.member_id
            )
            raise MemberIdRequired("rejoin with the member id given", member_id=joining.member_id)
        return await self._add_and_wait(group, joining)

    async def _join_known(self, group: _Group, joining: _Member) -> JoinResult:
        member_id = joining.member_id
        pending = group.pending.pop(member_id, None)
        if pending is not None:
            pending.cancel()
            return await self._add_and_wait(group, joining)
        self._check_instance(group, member_id, joining.instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"group {group.group_id!r} has no member {member_id!r}")
        changed = member.protocols != joining.protocols
        member.take_settings(joining)
        if group.state == GroupState.PREPARING_REBALANCE:
            return await self._wait_join(group, member)
        if group.state == GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_result(group, member)
        if group.state == GroupState.STABLE and not changed and member.member_id != group.leader_id:
            return self._join_result(group, member)
        # A changed subscription, or the leader rejoining: everyone rebalances.
        self._prepare_rebalance(group, f"member {member_id} rejoined")
        return await self._wait_join(group, member)

    async def _replace_static(self, group: _Group, old_id: str, joining: _Member) -> JoinResult:
        instance_id, new_id = joining.instance_id, joining.member_id
        member = group.members.pop(old_id)
        self._fail_waiters(member, FencedInstanceId(f"instance {instance_id!r} rejoined"))
        changed = member.protocols != joining.protocols
        member.member_id = new_id
        member.take_settings(joining)
        group.members[new_id] = member
        group.static[instance_id or ""] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        log.info("group %r: static member %r came back as %s", group.group_id, instance_id, new_id)
        if group.state == GroupState.STABLE and not changed:
            self._heartbeat_seen(group, member)
            return self._join_result(group, member)
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        return await self._wait_join(group, member)

    async def _add_and_wait(self, group: _Group, member: _Member) -> JoinResult:
        group.members[member.member_id] = member
        if member.instance_id is not None:
            group.static[member.instance_id] = member.member_id
        if group.protocol_type is None or len(group.members) == 1:
            group.protocol_type = member.protocol_type
        if group.state == GroupState.PREPARING_REBALANCE:
            self._extend_initial_delay(group)
        else:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        return await self._wait_join(group, member)

    async def _wait_join(self, group: _Group, member: _Member) -> JoinResult:
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_exception(
                UnknownMemberId("a newer JoinGroup of this member replaced this one")
            )
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        if member.expiry is not None:  # a member waiting in a join is alive
            member.expiry.cancel()
            member.expiry = None
        self._maybe_complete_join(group)
        return await waiter

    def _join_result(self, group: _Group, member: _Member) -> JoinResult:
        leader = member.member_id == group.leader_id
        return JoinResult(
            generation=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            member_id=member.member_id,
            members=tuple(
                JoinedMember(m.member_id, m.instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
            if leader
            else (),
        )

    # --- rebalancing -------------------------------------------------------------------

    def _prepare_rebalance(self, group: _Group, reason: str) -> None:
        loop = asyncio.get_running_loop()
        initial = group.state == GroupState.EMPTY
        log.info("group %r: rebalancing (%s)", group.group_id, reason)
        for member in group.members.values():
            if member.sync_waiter is not None and not member.sync_waiter.done():
                member.sync_waiter.set_exception(RebalanceInProgress("the group is rebalancing"))
            member.sync_waiter = None
        group.state = GroupState.PREPARING_REBALANCE
        if group.join_timer is not None:
            group.join_timer.cancel()
        timeout_s = self._rebalance_timeout_s(group)
        if initial:
            delay_s = min(self.settings.initial_rebalance_delay_ms / 1000, timeout_s)
            group.join_deadline = loop.time() + timeout_s
            group.join_timer = loop.call_later(delay_s, self._initial_delay_over, group)
        else:
            group.join_deadline = 0.0
            group.join_timer = loop.call_later(timeout_s, self._complete_join, group)

    def _rebalance_timeout_s(self, group: _Group) -> float:
        timeouts = [m.rebalance_timeout_ms for m in group.members.values()]
        return max(timeouts, default=self.settings.min_session_timeout_ms) / 1000

    def _extend_initial_delay(self, group: _Group) -> None:
        """A newcomer during the first join's delay pushes it back, up to the rebalance timeout."""
        if group.join_deadline <= 0 or group.join_timer is None:
            return
        loop = asyncio.get_running_loop()
        delay_s = self.settings.initial_rebalance_delay_ms / 1000
        remaining = group.join_deadline - loop.time()
        group.join_timer.cancel()
        group.join_timer = loop.call_later(
            max(0.0, min(delay_s, remaining)), self._initial_delay_over, group
        )

    def _initial_delay_over(self, group: _Group) -> None:
        group.join_deadline = 0.0
        loop = asyncio.get_running_loop()
        remaining = self._rebalance_timeout_s(group)
        group.join_timer = loop.call_later(remaining, self._complete_join, group)
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: _Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or group.join_deadline > 0:
            return
        if all(m.join_waiter is not None for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.join_deadline = 0.0
        for member in [m for m in group.members.values() if m.join_waiter is None]:
            log.info("group %r: member %s did not rejoin in time", group.group_id, member.member_id)
            self._remove(group, member)
        group.generation += 1
        if not group.members:
            self._become_empty(group)
            return
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        log.info(
            "group %r: generation %d with %d member(s), protocol %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
        )
        for member in group.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            self._heartbeat_seen(group, member)
            if waiter is not None and not waiter.done():
                waiter.set_result(self._join_result(group, member))

    def _select_protocol(self, group: _Group) -> str:
        members = list(group.members.values())
        common = set(members[0].protocol_names())
        for member in members[1:]:
            common &= set(member.protocol_names())
        if not common:  # _compatible keeps this from happening
            raise InconsistentGroupProtocol("no protocol every member supports")
        votes: dict[str, int] = {}
        for member in members:
            choice = next(name for name in member.protocol_names() if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        # Ties go to the first member's preference, as in Kafka's vote.
        order = [n for n in members[0].protocol_names() if n in common]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

    def _become_empty(self, group: _Group) -> None:
        group.state = GroupState.EMPTY
        group.leader_id = None
        group.protocol_name = None
        group.empty_since_ms = int(time.time() * 1000)
        log.info("group %r is empty (generation %d)", group.group_id, group.generation)

    # --- members leaving ------------------------------------------------------------------

    def _remove(self, group: _Group, member: _Member) -> None:
        group.members.pop(member.member_id, None)
        if member.instance_id is not None and group.static.get(member.instance_id) == (
            member.member_id
        ):
            del group.static[member.instance_id]
        if member.expiry is not None:
            member.expiry.cancel()
            member.expiry = None
        self._fail_waiters(member, UnknownMemberId(f"member {member.member_id} left the group"))

    @staticmethod
    def _fail_waiters(member: _Member, error: GroupError) -> None:
        for waiter in (member.join_waiter, member.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)
        member.join_waiter = member.sync_waiter = None

    def _after_removal(self, group: _Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            if group.members:
                self._prepare_rebalance(group, reason)
            else:
                group.generation += 1
                self._become_empty(group)
        elif group.state == GroupState.PREPARING_REBALANCE:
            if group.members:
                self._maybe_complete_join(group)
            else:
                if group.join_timer is not None:
                    group.join_timer.cancel()
                    group.join_timer = None
                group.join_deadline = 0.0
                group.generation += 1
                self._become_empty(group)

    def _heartbeat_seen(self, group: _Group, member: _Member) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expire, group, member
        )

    def _expire(self, group: _Group, member: _Member) -> None:
        member.expiry = None
        if group.members.get(member.member_id) is not member or member.join_waiter is not None:
            return
        log.info(
            "group %r: member %s missed its session timeout (%d ms)",
            group.group_id,
            member.member_id,
            member.session_timeout_ms,
        )
        self._remove(group, member)
        self._after_removal(group, f"member {member.member_id} expired")

    def _expire_pending(self, group: _Group, member_id: str) -> None:
        group.pending.pop(member_id, None)

    def _check_instance(self, group: _Group, member_id: str, instance_id: str | None) -> None:
        if instance_id is None:
            return
        current = group.static.get(instance_id)
        if current is not None and current != member_id:
            raise FencedInstanceId(
                f"instance {instance_id!r} of group {group.group_id!r} is now member {current}"
            )

    def _member(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[_Group, _Member]:
        self._check_loaded()
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}")
        return group, self._member_of(group, member_id, instance_id, generation)

    def _member_of(
        self, group: _Group, member_id: str, instance_id: str | None, generation: int
    ) -> _Member:
        """The group's member, checked against fencing: instance id, member id, generation."""
        self._check_instance(group, member_id, instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"group {group.group_id!r} has no member {member_id!r}")
        if generation != group.generation:
            raise IllegalGeneration(
                f"generation {generation} of group {group.group_id!r} is not the current "
                f"{group.generation}"
            )
        return member

    # --- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------

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
        group, member = self._member(group_id, member_id, instance_id, generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            raise InconsistentGroupProtocol(
                f"group {group_id!r} runs {group.protocol_type}/{group.protocol_name}"
            )
        if group.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing")
        self._heartbeat_seen(group, member)
        if group.state == GroupState.STABLE:
            return SyncResult(group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: wait for the leader's assignments.
        if member_id == group.leader_id:
            if group.protocol_type == CONSUMER_PROTOCOL:
                for target, data in assignments.items():
                    try:
                        parse_assignment(data)
                    except ConsumerProtocolError as exc:
                        raise InconsistentGroupProtocol(
                            f"the assignment for {target} is not a consumer assignment: {exc}"
                        ) from exc
            for other in group.members.values():
                other.assignment = bytes(assignments.get(other.member_id, b""))
            group.state = GroupState.STABLE
            log.info("group %r: generation %d is stable", group_id, group.generation)
            for other in group.members.values():
                follower, other.sync_waiter = other.sync_waiter, None
                if follower is not None and not follower.done():
                    follower.set_result(
                        SyncResult(group.protocol_type, group.protocol_name, other.assignment)
                    )
            return SyncResult(group.protocol_type, group.protocol_name, member.assignment)
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_exception(RebalanceInProgress("a newer SyncGroup replaced this"))
        member.sync_waiter = waiter
        return await waiter

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, *, instance_id: str | None = None
    ) -> None:
        """Keep the member alive; raises `RebalanceInProgress` when it must rejoin."""
        group, member = self._member(group_id, member_id, instance_id, generation)
        self._heartbeat_seen(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing")

    def leave(
        self, group_id: str, departures: Sequence[tuple[str, str | None]]
    ) -> list[GroupError | None]:
        """Remove members ``(member id, instance id)``; one outcome per departure."""
        self._check_loaded()
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            raise UnknownMemberId(f"group {group_id!r} has no members")
        outcomes: list[GroupError | None] = []
        removed = []
        for member_id, instance_id in departures:
            try:
                if instance_id is not None:
                    current = group.static.get(instance_id)
                    if current is None:
                        raise UnknownMemberId(f"no member has instance id {instance_id!r}")
                    if member_id and member_id != current:
                        raise FencedInstanceId(f"instance {instance_id!r} is member {current}")
                    member_id = current
                pending = group.pending.pop(member_id, None)
                if pending is not None:
                    pending.cancel()
                    outcomes.append(None)
                    continue
                member = group.members.get(member_id)
                if member is None:
                    raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}")
                self._remove(group, member)
                removed.append(member_id)
                outcomes.append(None)
            except GroupError as exc:
                outcomes.append(exc)
        if removed:
            self._after_removal(group, f"member(s) {', '.join(removed)} left")
        return outcomes

    # --- offsets ---------------------------------------------------------------------------

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
        validate_group_id(group_id, allow_empty=True)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            if generation >= 0 or member_id:
                raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}")
            group = self._groups[group_id] = _Group(group_id)
        if not (generation < 0 and group.state == GroupState.EMPTY):
            member = self._member_of(group, member_id, instance_id, generation)
            if group.state == GroupState.COMPLETING_REBALANCE:
                raise RebalanceInProgress(f"group {group_id!r} is rebalancing")
            self._heartbeat_seen(group, member)
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
        if stored:
            async with group.commit_lock:
                try:
                    await self._offset_log.append(group_id, stored)
                except Exception as exc:
                    return [exc if outcome is None else outcome for outcome in outcomes]
                group.offsets.update(stored)
        return outcomes

    def committed(
        self, group_id: str, partitions: Iterable[PartitionKey] | None = None
    ) -> dict[PartitionKey, CommittedOffset]:
        """The group's committed offsets: all of them, or those of ``partitions`` that exist."""
        self._check_loaded()
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
        self._check_loaded()
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
        self, group: _Group, dropped: Sequence[tuple[PartitionKey, CommittedOffset | None]]
    ) -> None:
        if not dropped:
            return
        async with group.commit_lock:
            await self._offset_log.append(group.group_id, dropped)
            for key, _ in dropped:
                group.offsets.pop(key, None)

    # --- admin -----------------------------------------------------------------------------

    def list_groups(self, states: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, or of those in ``states``."""
        self._check_loaded()
        wanted = {s.lower() for s in states} if states else None
        return [
            (group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if group.state != GroupState.DEAD
            and (wanted is None or group.state.value.lower() in wanted)
        ]

    def describe(self, group_id: str) -> GroupDescription:
        """The group's state and members (state Dead when there is no such group, as in Kafka)."""
        self._check_loaded()
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD, "", "", -1, ())
        members = []
        for m in group.members.values():
            assigned: Mapping[str, Sequence[int]] = {}
            if group.protocol_type == CONSUMER_PROTOCOL:
                with contextlib.suppress(ConsumerProtocolError):
                    assigned = parse_assignment(m.assignment)
            members.append(
                MemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(group.protocol_name),
                    m.assignment if group.state == GroupState.STABLE else b"",
                    assigned if group.state == GroupState.STABLE else {},
                )
            )
        return GroupDescription(
            group_id,
            group.state,
            group.protocol_type or "",
            group.protocol_name or "" if group.state == GroupState.STABLE else "",
            group.generation,
            tuple(members),
        )

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups: an Empty group and its committed offsets go."""
        self._check_loaded()
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")
        if group.state != GroupState.EMPTY:
            raise NonEmptyGroup(f"group {group_id!r} has {len(group.members)} member(s)")
        await self._drop(group, [(key, None) for key in group.offsets])
        group.state = GroupState.DEAD
        del self._groups[group_id]

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
            if group.state == GroupState.EMPTY and not group.offsets and not group.members:
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
