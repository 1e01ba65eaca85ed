"""The values the group coordinator's parts share: a group, its members, its settings.

`Group` is one consumer group as the coordinator holds it in memory: its
members and the classic protocol's state (`kfs_core.groups.membership`
drives it) and its committed offsets (`kfs_core.groups.offsets` keeps them).
`GroupSettings` are the broker configs of both.  The JoinGroup, SyncGroup
and DescribeGroups results are here too: a member waits on them, and the
group itself computes them (`Group.join_result`, `Group.describe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from kfs_core.errors import (
    FencedInstanceId,
    GroupError,
    InconsistentGroupProtocol,
    InvalidGroupId,
)
from kfs_core.groups.consumer_protocol import (
    ConsumerProtocolError,
    parse_assignment,
    parse_subscription,
)
from kfs_core.groups.group_record import StoredGroup, StoredMember
from kfs_core.groups.offset_log import CommittedOffset, LoadedGroup, PartitionKey

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
class Member:
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

    def take_settings(self, other: Member) -> None:
        """What a rejoin may change: client, timeouts and protocols."""
        self.client_id, self.client_host = other.client_id, other.client_host
        self.session_timeout_ms = other.session_timeout_ms
        self.rebalance_timeout_ms = other.rebalance_timeout_ms
        self.protocol_type, self.protocols = other.protocol_type, other.protocols

    def fail_waiters(self, error: GroupError) -> None:
        """Its pending JoinGroup and SyncGroup answer ``error``."""
        for waiter in (self.join_waiter, self.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)
        self.join_waiter = self.sync_waiter = None


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # KIP-394
    offsets: dict[PartitionKey, CommittedOffset] = field(default_factory=dict)
    # TxnOffsetCommit: producer id -> offsets that count once its transaction commits
    pending_txn: dict[int, dict[PartitionKey, CommittedOffset]] = field(default_factory=dict)
    join_timer: asyncio.TimerHandle | None = None
    join_deadline: float = 0.0  # loop time the initial delay may not pass
    empty_since_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    commit_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    membership_stored: bool = False  # ``__consumer_offsets`` holds a membership record of it

    @classmethod
    def restored(cls, group_id: str, loaded: LoadedGroup) -> Group:
        """The group as ``__consumer_offsets`` holds it: Stable with its members, or Empty.

        The members' session timers are not running yet
        (`kfs_core.groups.membership.GroupMembership.resume` starts them).
        """
        group = cls(group_id, offsets=loaded.offsets)
        stored = loaded.membership
        if stored is None:
            return group
        group.membership_stored = True
        group.generation = stored.generation
        group.protocol_type = stored.protocol_type or None
        if not stored.members:
            if stored.state_timestamp_ms > 0:
                group.empty_since_ms = stored.state_timestamp_ms
            return group
        group.state = GroupState.STABLE
        group.protocol_name, group.leader_id = stored.protocol, stored.leader
        for m in stored.members:
            group.members[m.member_id] = Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=stored.protocol_type,
                protocols=[(stored.protocol or "", m.subscription)],
                assignment=m.assignment,
            )
            if m.instance_id is not None:
                group.static[m.instance_id] = m.member_id
        return group

    def stored(self) -> StoredGroup:
        """The group's membership as ``__consumer_offsets`` keeps it (Stable or Empty)."""
        return StoredGroup(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            state_timestamp_ms=int(time.time() * 1000),
            members=tuple(
                StoredMember(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(self.protocol_name),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )

    def stop_timers(self, error: GroupError) -> None:
        """Cancel every timer of the group; its waiting JoinGroup and SyncGroup answer ``error``."""
        if self.join_timer is not None:
            self.join_timer.cancel()
            self.join_timer = None
        for handle in self.pending.values():
            handle.cancel()
        for member in self.members.values():
            member.fail_waiters(error)
            if member.expiry is not None:
                member.expiry.cancel()
                member.expiry = None

    def subscribed_topics(self) -> set[str]:
        topics: set[str] = set()
        if self.protocol_type != CONSUMER_PROTOCOL:
            return topics
        for member in self.members.values():
            with contextlib.suppress(ConsumerProtocolError):
                topics.update(parse_subscription(member.metadata_for(self.protocol_name)))
        return topics

    def accepts(self, protocol_type: str, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join: one must suit every member."""
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        supported_by_all = set.intersection(
            *(set(m.protocol_names()) for m in self.members.values())
        )
        return bool(supported_by_all.intersection(name for name, _ in protocols))

    def select_protocol(self) -> str:
        """The protocol the members vote for among those all of them support."""
        members = list(self.members.values())
        common = set(members[0].protocol_names())
        for member in members[1:]:
            common &= set(member.protocol_names())
        if not common:  # `accepts` keeps this from happening
            raise InconsistentGroupProtocol("no protocol every member supports")
        votes: dict[str, int] = {}
        for member in members:
            choice = next(name for name in member.protocol_names() if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        # Ties go to the first member's preference, as in Kafka's vote.
        order = [n for n in members[0].protocol_names() if n in common]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

    def join_result(self, member: Member) -> JoinResult:
        """The member's JoinGroup answer; the leader's carries every member's metadata."""
        leader = member.member_id == self.leader_id
        return JoinResult(
            generation=self.generation,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id or "",
            member_id=member.member_id,
            members=tuple(
                JoinedMember(m.member_id, m.instance_id, m.metadata_for(self.protocol_name))
                for m in self.members.values()
            )
            if leader
            else (),
        )

    def check_instance(self, member_id: str, instance_id: str | None) -> None:
        """`FencedInstanceId` if ``instance_id`` now belongs to another member id."""
        if instance_id is None:
            return
        current = self.static.get(instance_id)
        if current is not None and current != member_id:
            raise FencedInstanceId(
                f"instance {instance_id!r} of group {self.group_id!r} is now member {current}"
            )

    def describe(self) -> GroupDescription:
        """What DescribeGroups shows of the group."""
        members = []
        for m in self.members.values():
            assigned: Mapping[str, Sequence[int]] = {}
            if self.protocol_type == CONSUMER_PROTOCOL:
                with contextlib.suppress(ConsumerProtocolError):
                    assigned = parse_assignment(m.assignment)
            members.append(
                MemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(self.protocol_name),
                    m.assignment if self.state == GroupState.STABLE else b"",
                    assigned if self.state == GroupState.STABLE else {},
                )
            )
        return GroupDescription(
            self.group_id,
            self.state,
            self.protocol_type or "",
            self.protocol_name or "" if self.state == GroupState.STABLE else "",
            self.generation,
            tuple(members),
        )


def validate_group_id(group_id: object, *, allow_empty: bool = False) -> str:
    """``group_id`` if it is a usable group id; `InvalidGroupId` otherwise."""
    if not isinstance(group_id, str) or (not group_id and not allow_empty):
        raise InvalidGroupId(f"group id must be a non-empty string, got {group_id!r}")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupId(
            f"group id is {len(group_id)} characters long; the limit is {MAX_GROUP_ID_LENGTH}"
        )
    return group_id
