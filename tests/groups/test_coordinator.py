"""The group coordinator's rules, driven directly (no sockets).

Joins, syncs, heartbeats, leaves, static members, fencing, offsets and bad input.

Committed offsets go to a small in-memory stand-in for `OffsetLog` here; the
real ``__consumer_offsets`` path is exercised through the daemon in
tests/server/test_groups_clients.py.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterable
from typing import Any

import pytest

from kfs_core.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
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
    UnknownTopicOrPartition,
)
from kfs_core.groups.consumer_protocol import parse_assignment, parse_subscription
from kfs_core.groups.coordinator import (
    MAX_GROUP_ID_LENGTH,
    CommitRequest,
    GroupCoordinator,
    GroupSettings,
    GroupState,
)
from kfs_core.groups.group_record import StoredGroup
from kfs_core.groups.offset_log import (
    CommittedOffset,
    LoadedGroup,
    decode_offset_record,
    encode_offset_key,
    encode_offset_value,
)

pytestmark = pytest.mark.unit

TOPICS = {"orders": 6, "payments": 2}
FAST = GroupSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)


def _str(value: str) -> bytes:
    return struct.pack(">h", len(value)) + value.encode()


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0, as clients write it."""
    return (
        struct.pack(">hi", 0, len(topics))
        + b"".join(_str(t) for t in topics)
        + struct.pack(">i", -1)
    )


def assignment(parts: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    out = struct.pack(">hi", 0, len(parts))
    for topic, partitions in parts.items():
        out += _str(topic) + struct.pack(">i", len(partitions))
        out += b"".join(struct.pack(">i", p) for p in partitions)
    return out + struct.pack(">i", -1)


class MemoryOffsetLog:
    """What `OffsetLog` keeps, in a list: every append, in order."""

    def __init__(self) -> None:
        self.appends: list[tuple[str, list[tuple[tuple[str, int], CommittedOffset | None]]]] = []
        self.fail: Exception | None = None
        self.open_transactions: dict[int, dict[int, dict[object, CommittedOffset | None]]] = {}
        self.memberships: list[tuple[str, StoredGroup | None]] = []

    async def append(
        self,
        group: str,
        entries: Iterable[tuple[tuple[str, int], CommittedOffset | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        if self.fail is not None:
            raise self.fail
        self.appends.append((group, list(entries)))

    async def append_group(self, group: str, stored: StoredGroup | None) -> None:
        if self.fail is not None:
            raise self.fail
        self.memberships.append((group, stored))

    async def load(self) -> dict[str, LoadedGroup]:
        groups: dict[str, LoadedGroup] = {}
        for group, entries in self.appends:
            for key, committed in entries:
                if committed is None:
                    groups.get(group, LoadedGroup()).offsets.pop(key, None)
                else:
                    groups.setdefault(group, LoadedGroup()).offsets[key] = committed
        for group, stored in self.memberships:
            groups.setdefault(group, LoadedGroup()).membership = stored
        return {g: loaded for g, loaded in groups.items() if loaded.offsets or loaded.membership}


async def topic_partitions(name: str) -> int | None:
    return TOPICS.get(name)


async def coordinator(settings: GroupSettings = FAST) -> tuple[GroupCoordinator, MemoryOffsetLog]:
    offsets = MemoryOffsetLog()
    groups = GroupCoordinator(offsets, topic_partitions, settings)  # type: ignore[arg-type]
    await groups.start()
    return groups, offsets


async def join(groups: GroupCoordinator, group: str = "g", member: str = "", **kw: Any) -> Any:
    kw.setdefault("protocol_type", "consumer")
    kw.setdefault("protocols", [("range", subscription("orders"))])
    kw.setdefault("session_timeout_ms", 10_000)
    return await groups.join(group, member, **kw)


async def join_new(groups: GroupCoordinator, group: str = "g", **kw: Any) -> Any:
    """A KIP-394 join: learn the member id, then join with it."""
    with pytest.raises(MemberIdRequired) as required:
        await join(groups, group, require_known_member_id=True, **kw)
    return await join(groups, group, required.value.member_id, **kw)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- joining and syncing ------------------------------------------------------------


def test_a_single_member_joins_leads_and_gets_its_assignment() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        joined = await join_new(groups)
        assert joined.generation == 1
        assert joined.leader_id == joined.member_id
        assert joined.protocol_name == "range"
        assert [m.member_id for m in joined.members] == [joined.member_id]
        assert parse_subscription(joined.members[0].metadata) == ["orders"]
        mine = assignment({"orders": [0, 1, 2, 3, 4, 5]})
        synced = await groups.sync("g", joined.member_id, 1, {joined.member_id: mine})
        assert synced.assignment == mine
        assert groups.describe("g").state == GroupState.STABLE
        groups.heartbeat("g", joined.member_id, 1)
        await groups.close()

    run(scenario())


def test_two_members_join_one_generation_and_each_gets_only_its_partitions() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        first = await join_new(groups)
        await groups.sync("g", first.member_id, 1, {first.member_id: assignment({"orders": [0]})})
        # A second member arrives: the first must rejoin (its heartbeat says so).
        second_join = asyncio.create_task(join(groups, client_id="b"))
        await asyncio.sleep(0)
        with pytest.raises(RebalanceInProgress):
            groups.heartbeat("g", first.member_id, 1)
        first_again = await join(groups, member=first.member_id)
        second = await second_join
        assert first_again.generation == second.generation == 2
        assert first_again.leader_id == first.member_id  # the leader stays leader
        assert {m.member_id for m in first_again.members} == {first.member_id, second.member_id}
        assert second.members == ()  # only the leader sees the members
        plan = {
            first.member_id: assignment({"orders": [0, 1, 2]}),
            second.member_id: assignment({"orders": [3, 4, 5]}),
        }
        follower = asyncio.create_task(groups.sync("g", second.member_id, 2, {}))
        leader = await groups.sync("g", first.member_id, 2, plan)
        assert parse_assignment(leader.assignment) == {"orders": [0, 1, 2]}
        assert parse_assignment((await follower).assignment) == {"orders": [3, 4, 5]}
        await groups.close()

    run(scenario())


def test_the_protocol_every_member_supports_is_chosen() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        sub = subscription("orders")
        a = asyncio.create_task(
            join(groups, protocols=[("cooperative-sticky", sub), ("range", sub)])
        )
        b = asyncio.create_task(join(groups, protocols=[("range", sub)]))
        results = await asyncio.gather(a, b)
        assert {r.protocol_name for r in results} == {"range"}
        with pytest.raises(InconsistentGroupProtocol):
            await join(groups, protocols=[("roundrobin", sub)])
        with pytest.raises(InconsistentGroupProtocol):
            await join(groups, protocol_type="connect", protocols=[("range", sub)])
        await groups.close()

    run(scenario())


def test_a_member_that_does_not_rejoin_is_removed_after_the_rebalance_timeout() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        first = await join(groups, session_timeout_ms=5_000, rebalance_timeout_ms=200)
        await groups.sync("g", first.member_id, 1, {})
        second = await join(groups, rebalance_timeout_ms=200)  # the first never rejoins
        assert second.generation == 2
        assert [m.member_id for m in second.members] == [second.member_id]
        with pytest.raises(UnknownMemberId):
            groups.heartbeat("g", first.member_id, 1)
        await groups.close()

    run(scenario())


def test_a_silent_member_expires_after_its_session_timeout_and_the_group_empties() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        joined = await join(groups, session_timeout_ms=150)
        await groups.sync("g", joined.member_id, 1, {})
        deadline = asyncio.get_running_loop().time() + 5
        while groups.describe("g").state != GroupState.EMPTY:
            assert asyncio.get_running_loop().time() < deadline, "member never expired"
            await asyncio.sleep(0.02)
        with pytest.raises(UnknownMemberId):
            groups.heartbeat("g", joined.member_id, 1)
        await groups.close()

    run(scenario())


def test_leave_group_rebalances_the_rest_and_empties_the_group_at_the_end() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        a, b = await asyncio.gather(join(groups), join(groups))
        await asyncio.gather(
            groups.sync("g", a.member_id, 1, {}), groups.sync("g", b.member_id, 1, {})
        )
        assert groups.leave("g", [(b.member_id, None)]) == [None]
        with pytest.raises(RebalanceInProgress):
            groups.heartbeat("g", a.member_id, 1)
        again = await join(groups, member=a.member_id)
        assert again.generation == 2
        (unknown,) = groups.leave("g", [("nobody", None)])
        assert isinstance(unknown, UnknownMemberId)
        assert groups.leave("g", [(a.member_id, None)]) == [None]
        assert groups.describe("g").state == GroupState.EMPTY
        await groups.close()

    run(scenario())


# --- static membership and fencing ---------------------------------------------------


async def stable_static_pair(
    groups: GroupCoordinator,
) -> tuple[Any, Any, dict[str, str], dict[str, bytes]]:
    """Two static members in a stable generation 1: leader, follower, instance ids, assignments."""
    a, b = await asyncio.gather(
        join(groups, instance_id="host-a"), join(groups, instance_id="host-b")
    )
    instance = {a.member_id: "host-a", b.member_id: "host-b"}
    leader = a if a.leader_id == a.member_id else b
    other = b if leader is a else a
    plan = {
        leader.member_id: assignment({"orders": [0, 1, 2]}),
        other.member_id: assignment({"orders": [3, 4, 5]}),
    }
    await asyncio.gather(
        groups.sync("g", leader.member_id, 1, plan), groups.sync("g", other.member_id, 1, {})
    )
    return leader, other, instance, plan


def test_a_static_member_restarting_in_a_stable_group_causes_no_rebalance() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        leader, other, instance, plan = await stable_static_pair(groups)
        # The follower restarts: a new member id, no LeaveGroup, the same instance id.
        restarted = await join(groups, instance_id=instance[other.member_id])
        assert restarted.member_id != other.member_id
        assert restarted.generation == 1  # no rebalance
        synced = await groups.sync("g", restarted.member_id, 1, {})
        assert synced.assignment == plan[other.member_id]
        groups.heartbeat("g", leader.member_id, 1)  # the other member noticed nothing
        # The old incarnation is fenced.
        with pytest.raises(FencedInstanceId):
            groups.heartbeat("g", other.member_id, 1, instance_id=instance[other.member_id])
        await groups.close()

    run(scenario())


def test_a_static_leader_returning_with_new_subscription_bytes_causes_no_rebalance() -> None:
    """Only a change of the group's selected protocol rebalances, as in Kafka.

    Its subscription carries its last generation (cooperative-sticky's user data).
    """

    async def scenario() -> None:
        groups, _ = await coordinator()
        leader, other, instance, plan = await stable_static_pair(groups)
        generation_1 = subscription("orders")[:-4] + struct.pack(">i", 4) + b"\x00\x00\x00\x01"
        restarted = await join(
            groups,
            instance_id=instance[leader.member_id],
            protocols=[("range", generation_1)],
        )
        assert restarted.generation == 1  # no rebalance
        assert restarted.leader_id == restarted.member_id and restarted.members  # still the leader
        synced = await groups.sync("g", restarted.member_id, 1, {})
        assert synced.assignment == plan[leader.member_id]
        groups.heartbeat("g", other.member_id, 1)  # the follower noticed nothing
        await groups.close()

    run(scenario())


def test_stale_generations_are_fenced_everywhere() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        a = await join(groups)
        await groups.sync("g", a.member_id, 1, {})
        with pytest.raises(IllegalGeneration):
            groups.heartbeat("g", a.member_id, 0)
        with pytest.raises(IllegalGeneration):
            await groups.sync("g", a.member_id, 7, {})
        with pytest.raises(IllegalGeneration):
            await groups.commit(
                "g", [CommitRequest("orders", 0, 5)], member_id=a.member_id, generation=3
            )
        with pytest.raises(UnknownMemberId):
            await groups.commit("g", [CommitRequest("orders", 0, 5)], member_id="x", generation=1)
        # A group with members refuses the "simple consumer" commit (no generation).
        with pytest.raises(UnknownMemberId):
            await groups.commit("g", [CommitRequest("orders", 0, 5)])
        await groups.close()

    run(scenario())


# --- offsets ----------------------------------------------------------------------------


def test_commits_are_stored_durably_first_and_fetched_back() -> None:
    async def scenario() -> None:
        groups, offsets = await coordinator()
        outcomes = await groups.commit(
            "standalone",
            [
                CommitRequest("orders", 0, 42, leader_epoch=3, metadata="checkpoint-1"),
                CommitRequest("orders", 9, 1),  # no partition 9
                CommitRequest("nope", 0, 1),  # no such topic
                CommitRequest("payments", 1, 7, metadata="x" * 5000),  # metadata too large
            ],
        )
        assert outcomes[0] is None
        assert isinstance(outcomes[1], UnknownTopicOrPartition)
        assert isinstance(outcomes[2], UnknownTopicOrPartition)
        assert isinstance(outcomes[3], OffsetMetadataTooLarge)
        committed = groups.committed("standalone")
        assert list(committed) == [("orders", 0)]
        assert committed["orders", 0].offset == 42
        assert committed["orders", 0].metadata == "checkpoint-1"
        assert committed["orders", 0].leader_epoch == 3
        assert len(offsets.appends) == 1  # one durable append for the request
        # A failed append stores nothing in memory either.
        offsets.fail = OSError("disk gone")
        (failed,) = await groups.commit("standalone", [CommitRequest("orders", 0, 99)])
        assert isinstance(failed, OSError)
        assert groups.committed("standalone")["orders", 0].offset == 42
        await groups.close()
        # A new coordinator on the same log rebuilds the offsets.
        offsets.fail = None
        rebuilt = GroupCoordinator(offsets, topic_partitions, FAST)  # type: ignore[arg-type]
        await rebuilt.start()
        assert rebuilt.committed("standalone")["orders", 0].offset == 42
        await rebuilt.close()

    run(scenario())


def test_offsets_expire_only_in_empty_groups_and_go_with_deleted_topics() -> None:
    async def scenario() -> None:
        settings = GroupSettings(
            initial_rebalance_delay_ms=0, min_session_timeout_ms=100, offsets_retention_ms=1000
        )
        groups, _ = await coordinator(settings)
        await groups.commit("idle", [CommitRequest("orders", 0, 1)])
        member = await join(groups, "busy")
        await groups.sync("busy", member.member_id, 1, {})
        await groups.commit(
            "busy", [CommitRequest("orders", 1, 5)], member_id=member.member_id, generation=1
        )
        far_future = int(time.time() * 1000) + 10**9
        assert await groups.expire_offsets(far_future) == 1  # only the empty group's
        assert groups.committed("idle") == {}
        assert groups.committed("busy")["orders", 1].offset == 5
        del TOPICS["payments"]
        try:
            await groups.commit("other", [CommitRequest("orders", 2, 3)])
            TOPICS["payments"] = 2
            await groups.commit("other", [CommitRequest("payments", 0, 3)])
            del TOPICS["payments"]
            assert await groups.expire_offsets(0) == 1  # the deleted topic's offset
            assert list(groups.committed("other")) == [("orders", 2)]
        finally:
            TOPICS["payments"] = 2
        await groups.close()

    run(scenario())


def test_delete_groups_and_offset_delete_follow_kafka() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        await groups.commit("old", [CommitRequest("orders", 0, 1), CommitRequest("payments", 0, 2)])
        live = await join(groups, "live", protocols=[("range", subscription("orders"))])
        await groups.sync("live", live.member_id, 1, {})
        await groups.commit(
            "live",
            [CommitRequest("orders", 0, 1), CommitRequest("payments", 0, 1)],
            member_id=live.member_id,
            generation=1,
        )
        with pytest.raises(NonEmptyGroup):
            await groups.delete_group("live")
        with pytest.raises(GroupIdNotFound):
            await groups.delete_group("never")
        await groups.delete_group("old")
        assert groups.committed("old") == {}
        assert "old" not in [g for g, _, _ in groups.list_groups()]
        subscribed, unsubscribed = await groups.delete_offsets(
            "live", [("orders", 0), ("payments", 0)]
        )
        assert isinstance(subscribed, GroupSubscribedToTopic)
        assert unsubscribed is None
        assert list(groups.committed("live")) == [("orders", 0)]
        assert [s for g, _, s in groups.list_groups(["Stable"])] == ["Stable"]
        assert groups.describe("never").state == GroupState.DEAD
        await groups.close()

    run(scenario())


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("group_id", ["", "x" * (MAX_GROUP_ID_LENGTH + 1)])
def test_invalid_group_ids_are_refused(group_id: str) -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        with pytest.raises(InvalidGroupId):
            await join(groups, group_id)
        await groups.close()

    run(scenario())


def test_bad_joins_and_syncs_get_their_error_and_leave_other_groups_alone() -> None:
    async def scenario() -> None:
        groups, _ = await coordinator()
        other = await join(groups, "other")
        await groups.sync("other", other.member_id, 1, {})
        with pytest.raises(InvalidSessionTimeout):
            await join(groups, session_timeout_ms=1)
        with pytest.raises(UnknownMemberId):
            await join(groups, member="made-up")
        with pytest.raises(InconsistentGroupProtocol):
            await join(groups, protocols=[("range", b"\x00\x00\xff\xff\xff\xff")])
        with pytest.raises(InconsistentGroupProtocol):
            await join(groups, protocols=[])
        a = await join(groups)
        with pytest.raises(InconsistentGroupProtocol):
            await groups.sync("g", a.member_id, 1, {a.member_id: b"\x00\x00\x00\x00\x00\x09"})
        with pytest.raises(InconsistentGroupProtocol):
            await groups.sync("g", a.member_id, 1, {}, protocol_name="roundrobin")
        await groups.sync("g", a.member_id, 1, {a.member_id: assignment({"orders": [0]})})
        groups.heartbeat("other", other.member_id, 1)  # unaffected
        assert groups.describe("other").state == GroupState.STABLE
        await groups.close()

    run(scenario())


def test_offset_records_use_kafkas_layouts() -> None:
    key = encode_offset_key("g", "orders", 3)
    assert key == bytes.fromhex("00010001670006") + b"orders" + bytes.fromhex("00000003")
    value = encode_offset_value(CommittedOffset(42, 5, "m", 1700000000000))
    assert value == (
        bytes.fromhex("0003000000000000002a000000050001") + b"m" + struct.pack(">q", 1700000000000)
    )
    assert decode_offset_record(key, value) == (
        "g",
        ("orders", 3),
        CommittedOffset(42, 5, "m", 1700000000000),
    )
    assert decode_offset_record(key, None) == ("g", ("orders", 3), None)


# --- membership kept in __consumer_offsets ------------------------------------------------


async def restarted(offsets: MemoryOffsetLog, settings: GroupSettings = FAST) -> GroupCoordinator:
    """A new coordinator over what ``offsets`` holds: a daemon after a restart."""
    groups = GroupCoordinator(offsets, topic_partitions, settings)  # type: ignore[arg-type]
    await groups.start()
    return groups


def test_a_stable_generation_is_stored_and_its_members_go_on_after_a_restart() -> None:
    async def scenario() -> None:
        groups, offsets = await coordinator()
        leader, other, instance, plan = await stable_static_pair(groups)
        group, stored = offsets.memberships[-1]
        assert group == "g" and stored is not None
        assert (stored.generation, stored.protocol, stored.leader) == (1, "range", leader.member_id)
        assert {m.member_id: m.assignment for m in stored.members} == plan
        assert {m.member_id: m.instance_id for m in stored.members} == instance
        await groups.close()

        again = await restarted(offsets)
        described = again.describe("g")
        assert (described.state, described.generation) == (GroupState.STABLE, 1)
        assert {m.member_id: m.assignment for m in described.members} == plan
        again.heartbeat("g", leader.member_id, 1)  # no rebalance: both keep going
        again.heartbeat("g", other.member_id, 1, instance_id=instance[other.member_id])
        rejoined = await join(again, other.member_id, instance_id=instance[other.member_id])
        assert rejoined.generation == 1
        await again.close()

    run(scenario())


def test_a_static_member_back_under_a_new_id_is_stored_before_its_answer() -> None:
    async def scenario() -> None:
        groups, offsets = await coordinator()
        _, other, instance, _ = await stable_static_pair(groups)
        back = await join(groups, instance_id=instance[other.member_id])
        _, stored = offsets.memberships[-1]
        assert stored is not None and back.member_id in {m.member_id for m in stored.members}
        await groups.close()
        again = await restarted(offsets)
        again.heartbeat("g", back.member_id, 1, instance_id=instance[other.member_id])
        with pytest.raises(FencedInstanceId):
            again.heartbeat("g", other.member_id, 1, instance_id=instance[other.member_id])
        await again.close()

    run(scenario())


def test_members_loaded_but_silent_expire_and_the_empty_group_is_stored() -> None:
    async def scenario() -> None:
        groups, offsets = await coordinator()
        joined = await join(groups, session_timeout_ms=150)
        await groups.sync("g", joined.member_id, 1, {})
        await groups.close()
        again = await restarted(offsets)
        deadline = asyncio.get_running_loop().time() + 5
        while again.describe("g").state != GroupState.EMPTY:
            assert asyncio.get_running_loop().time() < deadline, "member never expired"
            await asyncio.sleep(0.02)
        await again.close()  # waits for the background store
        _, stored = offsets.memberships[-1]
        assert stored is not None and not stored.members and stored.generation == 2
        assert stored.protocol is None and stored.leader is None
        third = await restarted(offsets)
        assert third.describe("g").state == GroupState.EMPTY
        assert third.list_groups() == [("g", "consumer", "Empty")]
        await third.close()

    run(scenario())


def test_a_failed_store_answers_the_leader_and_rebalances_the_group() -> None:
    async def scenario() -> None:
        groups, offsets = await coordinator()
        a, b = await asyncio.gather(join(groups), join(groups))
        leader = a if a.leader_id == a.member_id else b
        other = b if leader is a else a
        offsets.fail = OSError("store unreachable")
        follower = asyncio.ensure_future(groups.sync("g", other.member_id, 1, {}))
        with pytest.raises(CoordinatorNotAvailable):
            await groups.sync("g", leader.member_id, 1, {other.member_id: assignment({})})
        with pytest.raises(RebalanceInProgress):
            await follower
        assert groups.describe("g").state == GroupState.PREPARING_REBALANCE
        offsets.fail = None
        await groups.close()

    run(scenario())


def test_deleting_a_group_writes_the_tombstone_of_its_membership() -> None:
    async def scenario() -> None:
        groups, offsets = await coordinator()
        joined = await join(groups)
        await groups.sync("g", joined.member_id, 1, {})
        groups.leave("g", [(joined.member_id, None)])
        await groups.close()
        again = await restarted(offsets)
        await again.delete_group("g")
        assert offsets.memberships[-1] == ("g", None)
        await again.close()
        third = await restarted(offsets)
        assert third.describe("g").state == GroupState.DEAD
        await third.close()

    run(scenario())


def test_a_txn_offset_commit_without_member_or_generation_passes_in_a_live_group() -> None:
    """TxnOffsetCommit v0-v2 carry no member id or generation: Kafka accepts them in any state."""

    async def scenario() -> None:
        groups, _ = await coordinator()
        joined = await join(groups)
        await groups.sync("g", joined.member_id, 1, {})
        request = [CommitRequest("orders", 0, 7)]
        assert await groups.commit_transactional("g", request, producer_id=5, producer_epoch=0) == [
            None
        ]
        assert groups.pending_transactional("g") == {("orders", 0)}
        with pytest.raises(UnknownMemberId):  # a plain commit must come from a member
            await groups.commit("g", request)
        with pytest.raises(IllegalGeneration):  # a member id given is checked, generation too
            await groups.commit_transactional(
                "g", request, producer_id=5, producer_epoch=0, member_id=joined.member_id
            )
        await groups.close()

    run(scenario())
