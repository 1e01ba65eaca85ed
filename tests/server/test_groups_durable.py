"""Group membership kept in ``__consumer_offsets``: members go on across a daemon restart.

As with a Kafka broker, a restarted daemon reloads each group's stored
generation: its members keep their member ids and assignments and go on
heartbeating, without a rebalance; a static member's newest member id is
the one known; a deleted group stays deleted.
"""

from __future__ import annotations

import uuid
import warnings

import pytest

from kfs_core.server.protocol import ErrorCode
from testkit.daemon import DaemonFactory
from testkit.raw_client import RawClient
from testkit.raw_groups import assignment, heartbeat, join, joined
from testkit.waiting import wait_for
from tests.server.conftest import create_topic
from tests.server.test_groups_clients import (
    PARTITIONS,
    ConfluentMember,
    Consumed,
    assert_exactly_once,
    produce,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
    from kafka.protocol.consumer import LeaveGroupRequest

pytestmark = pytest.mark.integration


def describe(client: RawClient, group: str) -> tuple[str, list[tuple[str, str | None, bytes]]]:
    """The group's state and its members' (member id, instance id, assignment)."""
    (described,) = client.request(DescribeGroupsRequest(version=5, groups=[group])).groups
    assert described.error_code == 0
    members = [(m.member_id, m.group_instance_id, m.member_assignment) for m in described.members]
    return described.group_state, members


def test_members_keep_their_ids_generation_and_assignment_across_kill_9(
    daemons: DaemonFactory,
) -> None:
    daemon = daemons.start(name="members")
    topic = create_topic(daemon.bootstrap, 2, prefix="members")
    run = uuid.uuid4().hex[:6]
    plain, static, deleted = f"plain-{run}", f"static-{run}", f"deleted-{run}"
    with RawClient(daemon.bootstrap) as client:
        first = joined(client, plain, topic)
        old = joined(client, static, topic, instance_id="host-a")
        # The static member comes back under a new member id: no rebalance, the new id is kept.
        back = join(client, static, instance_id="host-a")
        assert back.error_code == 0 and back.member_id != old.member_id
        assert back.generation_id == old.generation_id
        gone = joined(client, deleted, topic)
        member = LeaveGroupRequest.MemberIdentity
        left = client.request(
            LeaveGroupRequest(
                version=3,
                group_id=deleted,
                members=[member(member_id=gone.member_id, group_instance_id=None)],
            )
        )
        assert left.error_code == 0
        answer = client.request(DeleteGroupsRequest(version=2, groups_names=[deleted]))
        assert [r.error_code for r in answer.results] == [0]
        before = describe(client, plain)

    daemon.kill()
    daemon.start()

    with RawClient(daemon.bootstrap) as client:
        assert describe(client, plain) == before
        assert before == ("Stable", [(first.member_id, None, assignment("t", [0]))])
        assert heartbeat(client, plain, first.generation_id, first.member_id) == 0
        assert heartbeat(client, static, back.generation_id, back.member_id, "host-a") == 0
        assert heartbeat(client, static, old.generation_id, old.member_id, "host-a") == (
            ErrorCode.FENCED_INSTANCE_ID
        )
        assert describe(client, deleted) == ("Dead", [])
        listed = client.request(ListGroupsRequest(version=3))
        assert {g.group_id for g in listed.groups} >= {plain, static}
        assert deleted not in {g.group_id for g in listed.groups}


def test_a_consumer_goes_on_through_a_restart_without_a_rebalance(
    daemons: DaemonFactory,
) -> None:
    daemon = daemons.start(name="consumer-restart")
    topic = create_topic(daemon.bootstrap, PARTITIONS, prefix="restart")
    consumed = Consumed()
    produced = [f"a{i}".encode() for i in range(30)]
    produce(daemon.bootstrap, topic, produced)
    # A session long enough to outlast the restart, as a Kafka broker's restart needs too.
    member = ConfluentMember(
        "steady", daemon.bootstrap, f"steady-{uuid.uuid4().hex[:6]}", topic, consumed,
        **{"session.timeout.ms": 45_000},
    )  # fmt: skip
    member.start()
    try:
        wait_for(lambda: consumed.count() >= 30, timeout=60, what="30 records consumed")
        daemon.restart()
        more = [f"b{i}".encode() for i in range(30)]
        produce(daemon.bootstrap, topic, more)
        produced += more
        wait_for(lambda: consumed.count() >= 60, timeout=60, what="30 more records consumed")
        # Assigned once, at the start; nothing revoked or lost (closing revokes, below).
        assert member.assigned_events == [list(range(PARTITIONS))]
        assert member.revoked_events == []
    finally:
        member.stop()
    assert_exactly_once(consumed, produced)
