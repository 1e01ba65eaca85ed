"""Group membership: Kafka's classic group protocol as a state machine.

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
  UNKNOWN_MEMBER_ID (`GroupMembership.fence_commit` for OffsetCommit).

The rebalance, initial-delay and session timers are ``asyncio`` timer
handles on the group and its members.

Membership is stored as Kafka stores it (``store``: a GroupMetadata record
of ``__consumer_offsets``, `kfs_core.groups.group_record`): the leader's
SyncGroup is answered once its generation is stored, a static member's
return under a new member id is stored before its JoinGroup is answered,
and a group that becomes Empty is stored in the background.  A group
loaded back is Stable with its members (`resume` starts their session
timers), so they go on heartbeating without a rebalance.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from kfs_core.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupError,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    MemberIdRequired,
    NotCoordinator,
    NotLeaderOrFollower,
    RebalanceInProgress,
    UnknownMemberId,
)
from kfs_core.groups.consumer_protocol import (
    ConsumerProtocolError,
    parse_assignment,
    parse_subscription,
)
from kfs_core.groups.group_record import StoredGroup
from kfs_core.groups.model import (
    CONSUMER_PROTOCOL,
    Group,
    GroupDescription,
    GroupSettings,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
    validate_group_id,
)

log = logging.getLogger(__name__)

#: Stores a group's membership durably (None: its tombstone); raises what the log raises.
StoreGroup = Callable[[str, StoredGroup | None], Awaitable[None]]


class GroupMembership:
    """Members joining, syncing, heartbeating and leaving every group of the daemon.

    It shares the table of groups with `kfs_core.groups.offsets.CommittedOffsets`
    (both are parts of `GroupCoordinator`, which checks it is loaded before
    every call).  Runs on the daemon's event loop.
    """

    def __init__(
        self, groups: dict[str, Group], settings: GroupSettings, store: StoreGroup | None = None
    ) -> None:
        self._groups = groups
        self.settings = settings
        self._store = store
        self._storing: set[asyncio.Task[None]] = set()  # Empty groups stored in the background

    def close(self) -> None:
        """Stop every timer and fail every waiting JoinGroup and SyncGroup."""
        for group in self._groups.values():
            group.stop_timers(CoordinatorNotAvailable("the coordinator is stopping"))

    async def drain(self) -> None:
        """Wait for the background stores under way."""
        if self._storing:
            await asyncio.wait(set(self._storing))

    def resume(self, group: Group) -> None:
        """A group just loaded: its members have a session timeout from now to heartbeat in."""
        for member in group.members.values():
            self._heartbeat_seen(group, member)

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
            group = self._groups[group_id] = Group(group_id)
        if not group.accepts(protocol_type, protocols):
            raise InconsistentGroupProtocol(
                f"group {group_id!r} uses protocol type {group.protocol_type!r} with "
                f"protocols no member of this join supports"
            )
        joining = Member(
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
            generation = group.generation
            try:
                await self._store_now(group)
            except GroupError:
                if group.generation == generation and (
                    group.state == GroupState.COMPLETING_REBALANCE
                ):  # as Kafka: nobody gets an assignment that was not stored; all rejoin
                    for other in group.members.values():
                        other.assignment = b""
                    self._prepare_rebalance(group, "storing its assignments failed")
                raise
            if _moved_on(group, generation):
                raise RebalanceInProgress(f"group {group_id!r} is rebalancing")
            if group.state == GroupState.COMPLETING_REBALANCE:
                self._stabilize(group)
            return SyncResult(group.protocol_type, group.protocol_name, member.assignment)
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_exception(RebalanceInProgress("a newer SyncGroup replaced this"))
        member.sync_waiter = waiter
        return await waiter

    def _stabilize(self, group: Group) -> None:
        """The leader's assignments are stored: the generation is Stable; followers get theirs."""
        group.state = GroupState.STABLE
        log.info("group %r: generation %d is stable", group.group_id, group.generation)
        for other in group.members.values():
            follower, other.sync_waiter = other.sync_waiter, None
            if follower is not None and not follower.done():
                follower.set_result(
                    SyncResult(group.protocol_type, group.protocol_name, other.assignment)
                )

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
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            raise UnknownMemberId(f"group {group_id!r} has no members")
        outcomes: list[GroupError | None] = []
        removed = []
        for given_member_id, instance_id in departures:
            member_id = given_member_id
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

    # --- the state machine ---------------------------------------------------------------

    async def _join_new(
        self, group: Group, joining: Member, require_known_member_id: bool
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

    async def _join_known(self, group: Group, joining: Member) -> JoinResult:
        member_id = joining.member_id
        pending = group.pending.pop(member_id, None)
        if pending is not None:
            pending.cancel()
            return await self._add_and_wait(group, joining)
        group.check_instance(member_id, joining.instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"group {group.group_id!r} has no member {member_id!r}")
        changed = member.protocols != joining.protocols
        member.take_settings(joining)
        if group.state == GroupState.PREPARING_REBALANCE:
            return await self._wait_join(group, member)
        if group.state == GroupState.COMPLETING_REBALANCE and not changed:
            return group.join_result(member)
        if group.state == GroupState.STABLE and not changed and member.member_id != group.leader_id:
            return group.join_result(member)
        # A changed subscription, or the leader rejoining: everyone rebalances.
        self._prepare_rebalance(group, f"member {member_id} rejoined")
        return await self._wait_join(group, member)

    async def _replace_static(self, group: Group, old_id: str, joining: Member) -> JoinResult:
        instance_id, new_id = joining.instance_id, joining.member_id
        member = group.members.pop(old_id)
        member.fail_waiters(FencedInstanceId(f"instance {instance_id!r} rejoined"))
        member.member_id = new_id
        member.take_settings(joining)
        group.members[new_id] = member
        group.static[instance_id or ""] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        log.info("group %r: static member %r came back as %s", group.group_id, instance_id, new_id)
        # As Kafka: a returning static member rebalances the group only if the
        # protocol the group would select changes.  Its subscription bytes may
        # differ (they carry its last generation) without changing anything.
        changed = group.select_protocol() != group.protocol_name
        if group.state == GroupState.STABLE and not changed:
            self._heartbeat_seen(group, member)
            # Stored before the answer: after a restart the new id is the one known.
            await self._store_now(group)
            return group.join_result(member)
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        return await self._wait_join(group, member)

    async def _add_and_wait(self, group: Group, member: Member) -> JoinResult:
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

    async def _wait_join(self, group: Group, member: Member) -> JoinResult:
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

    # --- rebalancing -------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
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

    def _rebalance_timeout_s(self, group: Group) -> float:
        timeouts = [m.rebalance_timeout_ms for m in group.members.values()]
        return max(timeouts, default=self.settings.min_session_timeout_ms) / 1000

    def _extend_initial_delay(self, group: Group) -> None:
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

    def _initial_delay_over(self, group: Group) -> None:
        group.join_deadline = 0.0
        loop = asyncio.get_running_loop()
        remaining = self._rebalance_timeout_s(group)
        group.join_timer = loop.call_later(remaining, self._complete_join, group)
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or group.join_deadline > 0:
            return
        if all(m.join_waiter is not None for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
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
        group.protocol_name = group.select_protocol()
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
                waiter.set_result(group.join_result(member))

    def _become_empty(self, group: Group) -> None:
        group.state = GroupState.EMPTY
        group.leader_id = None
        group.protocol_name = None
        group.empty_since_ms = int(time.time() * 1000)
        log.info("group %r is empty (generation %d)", group.group_id, group.generation)
        self._store_later(group)

    # --- storing membership ---------------------------------------------------------------

    async def _store_now(self, group: Group) -> None:
        """Store the group's membership; a failure is the coordinator's error to the caller."""
        if self._store is None:
            return
        try:
            await self._store(group.group_id, group.stored())
        except NotLeaderOrFollower as exc:
            raise NotCoordinator(f"group {group.group_id!r} moved to another daemon") from exc
        except Exception as exc:
            log.warning("group %r: storing its membership failed: %s", group.group_id, exc)
            raise CoordinatorNotAvailable(
                f"storing group {group.group_id!r} failed: {exc}"
            ) from exc
        group.membership_stored = True

    def _store_later(self, group: Group) -> None:
        """Store the group's membership as it is now, in the background."""
        if self._store is None:
            return
        task = asyncio.ensure_future(self._store(group.group_id, group.stored()))
        self._storing.add(task)
        task.add_done_callback(lambda done: self._stored(group, done))

    def _stored(self, group: Group, task: asyncio.Task[None]) -> None:
        self._storing.discard(task)
        if task.cancelled():
            return
        if task.exception() is not None:
            log.warning(
                "group %r: storing it as Empty failed: %s", group.group_id, task.exception()
            )
        else:
            group.membership_stored = True

    # --- members leaving ------------------------------------------------------------------

    def _remove(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.instance_id is not None and group.static.get(member.instance_id) == (
            member.member_id
        ):
            del group.static[member.instance_id]
        if member.expiry is not None:
            member.expiry.cancel()
            member.expiry = None
        member.fail_waiters(UnknownMemberId(f"member {member.member_id} left the group"))

    def _after_removal(self, group: Group, reason: str) -> None:
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

    def _heartbeat_seen(self, group: Group, member: Member) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expire, group, member
        )

    def _expire(self, group: Group, member: Member) -> None:
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

    def _expire_pending(self, group: Group, member_id: str) -> None:
        group.pending.pop(member_id, None)

    def _member(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[Group, Member]:
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}")
        return group, self._member_of(group, member_id, instance_id, generation)

    def _member_of(
        self, group: Group, member_id: str, instance_id: str | None, generation: int
    ) -> Member:
        """The group's member, checked against fencing: instance id, member id, generation."""
        group.check_instance(member_id, instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"group {group.group_id!r} has no member {member_id!r}")
        if generation != group.generation:
            raise IllegalGeneration(
                f"generation {generation} of group {group.group_id!r} is not the current "
                f"{group.generation}"
            )
        return member

    def fence_commit(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        *,
        transactional: bool = False,
    ) -> Group:
        """The group an OffsetCommit goes to, once the committing member passes fencing.

        A group not using group management (generation < 0, no member id)
        may commit while it is Empty, as Kafka allows for assigned consumers;
        such a commit to a group that does not exist creates it.  A
        TxnOffsetCommit without a member id and generation (versions 0-2,
        which carry none) is accepted in any state, as Kafka accepts it.
        """
        validate_group_id(group_id, allow_empty=True)
        group = self._groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            if generation >= 0 or member_id:
                raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}")
            group = self._groups[group_id] = Group(group_id)
        if generation < 0 and group.state == GroupState.EMPTY:
            return group
        if generation >= 0 or member_id or instance_id is not None:
            member = self._member_of(group, member_id, instance_id, generation)
            if not transactional and group.state == GroupState.COMPLETING_REBALANCE:
                raise RebalanceInProgress(f"group {group_id!r} is rebalancing")
            self._heartbeat_seen(group, member)
        elif not transactional:
            raise UnknownMemberId(
                f"group {group_id!r} has members: a commit without a member id and "
                f"generation is accepted only while it is Empty"
            )
        return group

    # --- admin -----------------------------------------------------------------------------

    def list_groups(self, states: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, or of those in ``states``."""
        wanted = {s.lower() for s in states} if states else None
        return [
            (group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if group.state != GroupState.DEAD
            and (wanted is None or group.state.value.lower() in wanted)
        ]

    def describe(self, group_id: str) -> GroupDescription:
        """The group's state and members (state Dead when there is no such group, as in Kafka)."""
        validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD, "", "", -1, ())
        return group.describe()


def _moved_on(group: Group, generation: int) -> bool:
    """Whether the group left ``generation`` or began a rebalance (while a store was under way)."""
    return group.generation != generation or group.state == GroupState.PREPARING_REBALANCE
