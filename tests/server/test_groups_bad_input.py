"""Bad input to the group APIs, over a real socket.

Each gets Kafka's error code, the daemon stays up and the other groups
carry on undisturbed.
"""

from __future__ import annotations

import uuid
import warnings
from typing import Any

import pytest

from kfs_core.server.protocol import ErrorCode
from testkit.daemon import Daemon, DaemonFactory
from testkit.raw_client import RawClient
from testkit.raw_groups import heartbeat, join, joined, subscription, sync

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import confluent_kafka
    import confluent_kafka.admin
    from kafka.protocol.admin import (
        DeleteGroupsRequest,
        DeleteTopicsRequest,
        DescribeGroupsRequest,
        ListGroupsRequest,
    )
    from kafka.protocol.consumer import (
        OffsetCommitRequest,
        OffsetDeleteRequest,
        OffsetFetchRequest,
    )
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        FindCoordinatorRequest,
        MetadataRequest,
    )

pytestmark = pytest.mark.integration


@pytest.fixture
def client(local_daemon: Daemon) -> Any:
    with RawClient(local_daemon.bootstrap) as raw:
        yield raw


@pytest.fixture
def topic(client: RawClient) -> str:
    name = f"bad-groups-{uuid.uuid4().hex[:6]}"
    meta = client.request(
        MetadataRequest(
            version=8,
            topics=[MetadataRequest.MetadataRequestTopic(name=name)],
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )
    assert meta.topics[0].error_code == 0
    return name


def commit(
    client: RawClient, group: str, generation: int, member_id: str, rows: list[tuple[str, int, str]]
) -> list[int]:
    topic_class = OffsetCommitRequest.OffsetCommitRequestTopic
    partition_class = topic_class.OffsetCommitRequestPartition
    response = client.request(
        OffsetCommitRequest(
            version=8,
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=None,
            topics=[
                topic_class(
                    name=name,
                    partitions=[
                        partition_class(
                            partition_index=partition,
                            committed_offset=1,
                            committed_leader_epoch=-1,
                            committed_metadata=metadata,
                        )
                    ],
                )
                for name, partition, metadata in rows
            ],
        )
    )
    return [p.error_code for t in response.topics for p in t.partitions]


def test_invalid_group_ids(client: RawClient) -> None:
    assert join(client, "").error_code == ErrorCode.INVALID_GROUP_ID
    assert join(client, "g" * 256).error_code == ErrorCode.INVALID_GROUP_ID
    found = client.request(FindCoordinatorRequest(version=2, key="", key_type=0))
    assert found.error_code == ErrorCode.INVALID_GROUP_ID


def test_joins_with_bad_members_protocols_or_timeouts(client: RawClient) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    first = join(client, group)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    assert join(client, group, "ghost").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert join(client, group, metadata=b"\x00\x00\x7f").error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert join(client, group, session_timeout_ms=1).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    ok = join(client, group, first.member_id)
    assert ok.error_code == 0 and ok.generation_id == 1 and ok.leader == first.member_id


def test_syncs_heartbeats_and_commits_with_stale_or_unknown_ids(
    client: RawClient, topic: str
) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    bystander = joined(client, f"bystander-{group}", topic)
    first = join(client, group, metadata=subscription(topic))
    member = join(client, group, first.member_id, subscription(topic))
    generation, member_id = member.generation_id, member.member_id
    assert sync(client, group, 99, member_id, [0]).error_code == ErrorCode.ILLEGAL_GENERATION
    assert sync(client, group, generation, "ghost", [0]).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    malformed = sync(client, group, generation, member_id, raw_assignment=b"\x00\x00\x00\x00\x7f")
    assert malformed.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert sync(client, group, generation, member_id, [0, 1], topic=topic).error_code == 0
    assert heartbeat(client, group, generation, member_id) == 0
    assert heartbeat(client, group, generation - 1, member_id) == ErrorCode.ILLEGAL_GENERATION
    assert heartbeat(client, group, generation, "ghost") == ErrorCode.UNKNOWN_MEMBER_ID
    assert heartbeat(client, "no-such-group", 1, "ghost") == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(client, group, generation, member_id, [(topic, 0, "ok")]) == [0]
    assert commit(client, group, generation + 1, member_id, [(topic, 0, "")]) == [
        ErrorCode.ILLEGAL_GENERATION
    ]
    assert commit(
        client,
        group,
        generation,
        member_id,
        [("no-such-topic", 0, ""), (topic, 99, ""), (topic, 1, "m" * 5000)],
    ) == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
    ]
    fetched = client.request(
        OffsetFetchRequest(
            version=6,
            group_id=group,
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])
            ],
        )
    )
    assert fetched.error_code == 0
    rows = {
        p.partition_index: (p.committed_offset, p.metadata) for p in fetched.topics[0].partitions
    }
    assert rows == {0: (1, "ok"), 1: (-1, "")}
    # The other group never noticed.
    assert (
        heartbeat(client, f"bystander-{group}", bystander.generation_id, bystander.member_id) == 0
    )


def test_a_replaced_static_member_is_fenced(client: RawClient, topic: str) -> None:
    group = f"static-{uuid.uuid4().hex[:6]}"
    old = joined(client, group, topic, instance_id="box-1")
    new = join(client, group, metadata=subscription(topic), instance_id="box-1")
    assert new.error_code == 0 and new.member_id != old.member_id
    assert new.generation_id == old.generation_id  # stable group: no rebalance
    assert heartbeat(client, group, old.generation_id, old.member_id, "box-1") == (
        ErrorCode.FENCED_INSTANCE_ID
    )
    assert heartbeat(client, group, new.generation_id, new.member_id, "box-1") == 0


def test_group_admin_errors(client: RawClient, topic: str) -> None:
    group = f"admin-{uuid.uuid4().hex[:6]}"
    live = joined(client, group, topic)
    described = client.request(DescribeGroupsRequest(version=5, groups=[group, "never-was"]))
    states = {g.group_id: (g.error_code, g.group_state) for g in described.groups}
    assert states == {group: (0, "Stable"), "never-was": (0, "Dead")}
    (member,) = described.groups[0].members
    assert member.member_id == live.member_id and member.client_id == "kfs-raw"
    assert member.client_host == "/127.0.0.1"
    deleted = client.request(DeleteGroupsRequest(version=2, groups_names=[group, "never-was"]))
    assert {r.group_id: r.error_code for r in deleted.results} == {
        group: ErrorCode.NON_EMPTY_GROUP,
        "never-was": ErrorCode.GROUP_ID_NOT_FOUND,
    }
    assert commit(client, group, live.generation_id, live.member_id, [(topic, 0, "")]) == [0]
    topic_class = OffsetDeleteRequest.OffsetDeleteRequestTopic
    dropped = client.request(
        OffsetDeleteRequest(
            version=0,
            group_id=group,
            topics=[
                topic_class(
                    name=topic,
                    partitions=[topic_class.OffsetDeleteRequestPartition(partition_index=0)],
                )
            ],
        )
    )
    assert dropped.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    listed = client.request(ListGroupsRequest(version=4, states_filter=["Stable"]))
    assert group in {g.group_id for g in listed.groups}
    assert all(g.group_state == "Stable" for g in listed.groups)


def test_transactional_coordinator_lookups_point_here_and_kip848_is_not_offered(
    client: RawClient, local_daemon: Daemon
) -> None:
    found = client.request(FindCoordinatorRequest(version=2, key="txn-1", key_type=1))
    assert found.error_code == 0 and found.port == local_daemon.kafka_port
    versions = client.request(
        ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1")
    )
    offered = {a.api_key for a in versions.api_keys}
    assert 68 not in offered  # ConsumerGroupHeartbeat: clients fall back to the classic protocol
    assert {10, 11, 12, 13, 14, 8, 9, 15, 16, 42, 47} <= offered


def test_committed_offsets_of_a_deleted_topic_are_dropped(client: RawClient, topic: str) -> None:
    group = f"gone-{uuid.uuid4().hex[:6]}"
    assert commit(client, group, -1, "", [(topic, 0, "before")]) == [0]
    deleted = client.request(DeleteTopicsRequest(version=4, topic_names=[topic], timeout_ms=10_000))
    assert deleted.responses[0].error_code == 0
    fetched = client.request(OffsetFetchRequest(version=6, group_id=group, topics=None))
    assert fetched.error_code == 0 and fetched.topics == []


def test_group_settings_use_kafkas_names_from_flags_and_environment(
    daemons: DaemonFactory,
) -> None:
    daemon = daemons.start(
        name="group-settings",
        extra_args=[
            "--group-min-session-timeout-ms", "1000",
            "--group-initial-rebalance-delay-ms", "0",
            "--offsets-retention-minutes", "60",
        ],
    )  # fmt: skip
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": daemon.bootstrap})
    resource = confluent_kafka.admin.ConfigResource("broker", "0")
    (future,) = admin.describe_configs([resource]).values()
    configs = {name: entry.value for name, entry in future.result(30).items()}
    assert configs["group.min.session.timeout.ms"] == "1000"
    assert configs["group.initial.rebalance.delay.ms"] == "0"
    assert configs["offsets.retention.minutes"] == "60"
    assert configs["offsets.topic.num.partitions"] == "4"
    with RawClient(daemon.bootstrap) as client:
        # 1.5 s is below Kafka's (and KFS's default) minimum, above this daemon's.
        first = join(client, "short-sessions", session_timeout_ms=1500)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert (
            join(client, "short-sessions", first.member_id, session_timeout_ms=1500).error_code == 0
        )
        assert join(client, "short", session_timeout_ms=500).error_code == (
            ErrorCode.INVALID_SESSION_TIMEOUT
        )
