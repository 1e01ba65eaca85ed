"""The Kafka APIs of one daemon among several: Metadata, coordinators, leader epochs.

The daemon runs in this process (`inprocess`) and its broker is given
`ThreeNodes`, a `ClusterView` of four live daemons - node 1 (this one),
nodes 0 and 2 on the PLAINTEXT listener, node 3 on SSL only - with the
leaders a test sets.  The partition log underneath is the real one; where a
test needs the log to refuse a partition another daemon serves, it makes the
log raise `NotLeaderOrFollower` for the partitions the view says this daemon
does not hold, as the leased log does.
"""

from __future__ import annotations

import json
import struct
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kfs_core.catalog.topics import TopicRegistry
from kfs_core.cluster.view import NO_LEADER, Leader, NodeInfo
from kfs_core.errors import NotLeaderOrFollower
from kfs_core.groups.offset_log import OFFSETS_TOPIC
from kfs_core.records.batch import iter_batch_headers
from kfs_core.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kfs_core.security.listeners import SecurityProtocol
from kfs_core.security.sasl import Session
from kfs_core.server.apis import SUPPORTED_VERSIONS
from kfs_core.server.apis.access import AuditLog, Checker
from kfs_core.server.apis.offsets import OFFSET_FOR_LEADER_EPOCH
from kfs_core.server.protocol import ApiKey, ErrorCode, decode_request
from kfs_core.storage.local import LocalObjectStore
from testkit.raw_client import RawClient
from testkit.waiting import wait_for
from tests.server.test_protocol import client_frame

from .conftest import ThreadedServer, inprocess_settings, produce_request

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import (
        CreateTopicsRequest,
        DeleteGroupsRequest,
        DescribeClusterRequest,
        DescribeGroupsRequest,
        ListGroupsRequest,
    )
    from kafka.protocol.consumer import (
        FetchRequest,
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        ListOffsetsRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        OffsetForLeaderEpochRequest,
        SyncGroupRequest,
    )
    from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

pytestmark = pytest.mark.integration

LOCAL = 1
EPOCH = 5
# The __consumer_offsets partitions (4 by default) and who leads each.
OFFSETS_LEADERS = {0: Leader(0, 3), 1: Leader(LOCAL, 4), 2: Leader(2, 9), 3: NO_LEADER}
NODE0 = ("node0.test", 9090)
NODE2 = ("node2.test", 9092)


class ThreeNodes:
    """Nodes 0, 1 (this daemon) and 2 on PLAINTEXT, node 3 on SSL only; leaders as set."""

    def __init__(self, local: tuple[str, int]) -> None:
        self.nodes = [
            NodeInfo(3, "i3", {"SSL": ("node3.test", 9093)}, "store"),
            NodeInfo(0, "i0", {"PLAINTEXT": NODE0}, "store"),
            NodeInfo(LOCAL, "i1", {"PLAINTEXT": local}, "store"),
            NodeInfo(2, "i2", {"PLAINTEXT": NODE2}, "store", rack="r2"),
        ]
        self.leaders: dict[tuple[str, int], Leader] = {}

    @property
    def node_id(self) -> int:
        return LOCAL

    def live_nodes(self) -> Sequence[NodeInfo]:
        return self.nodes

    def leader(self, topic: str, partition: int) -> Leader:
        if topic == OFFSETS_TOPIC:
            return OFFSETS_LEADERS[partition]
        return self.leaders.get((topic, partition), Leader(LOCAL, EPOCH))

    def local_epoch(self, topic: str, partition: int) -> int | None:
        leader = self.leader(topic, partition)
        return leader.epoch if leader.node_id == LOCAL else None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadedServer]:
    with ThreadedServer(inprocess_settings(tmp_path)) as running:
        yield running
    assert running.exit_code == 0


@pytest.fixture
def cluster(server: ThreadedServer) -> ThreeNodes:
    view = ThreeNodes(("127.0.0.1", server.server.kafka_port))
    server.server.broker.cluster = view
    return view


def groups_by_offsets_partition(server: ThreadedServer) -> dict[int, str]:
    """A group id for each __consumer_offsets partition."""
    partition_for = server.server.broker.offset_log.partition_for
    found: dict[int, str] = {}
    i = 0
    while len(found) < len(OFFSETS_LEADERS):
        found.setdefault(partition_for(f"group-{i}"), f"group-{i}")
        i += 1
    return found


def create_topic(client: RawClient, name: str, partitions: int, factor: int) -> Any:
    topic = CreateTopicsRequest.CreatableTopic
    response = client.request(
        CreateTopicsRequest(
            version=5,
            topics=[
                topic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=factor,
                    assignments=[],
                    configs=[],
                )
            ],
            timeout_ms=10_000,
            validate_only=False,
        )
    )
    [created] = response.topics
    return created


def metadata(client: RawClient, *topics: str) -> Any:
    return client.request(
        MetadataRequest(
            version=12,
            topics=[MetadataRequest.MetadataRequestTopic(name=t, topic_id=None) for t in topics],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )


def partitions_of(response: Any, topic: str) -> dict[int, Any]:
    [entry] = [t for t in response.topics if t.name == topic]
    return {p.partition_index: p for p in entry.partitions}


# --- Metadata, DescribeCluster, CreateTopics -------------------------------------------------


def test_metadata_lists_the_live_brokers_of_the_clients_listener_and_their_leaders(
    server: ThreadedServer, cluster: ThreeNodes
) -> None:
    port = server.server.kafka_port
    with RawClient(server.bootstrap) as client:
        created = create_topic(client, "spread", 3, 3)
        assert (created.error_code, created.replication_factor) == (0, 3)
        assert create_topic(client, "pair", 2, 2).error_code == 0
        cluster.leaders[("spread", 1)] = Leader(2, 7)
        cluster.leaders[("spread", 2)] = NO_LEADER
        cluster.leaders[("pair", 1)] = Leader(0, 2)
        response = metadata(client, "spread", "pair")

    brokers = {b.node_id: (b.host, b.port, b.rack) for b in response.brokers}
    # Node 3 has no PLAINTEXT listener, so a PLAINTEXT client cannot use it.
    assert brokers == {
        0: (*NODE0, None),
        LOCAL: ("127.0.0.1", port, None),
        2: (*NODE2, "r2"),
    }
    assert response.controller_id == 0  # the lowest live node id
    spread = partitions_of(response, "spread")
    assert [(p.error_code, p.leader_id, p.leader_epoch) for p in spread.values()] == [
        (0, LOCAL, EPOCH),
        (0, 2, 7),
        (ErrorCode.LEADER_NOT_AVAILABLE, -1, -1),
    ]
    # The leader, then the next brokers in ascending cyclic order, up to the factor.
    assert [(p.replica_nodes, p.isr_nodes) for p in spread.values()] == [
        ([1, 2, 0], [1, 2, 0]),
        ([2, 0, 1], [2, 0, 1]),
        ([0, 1, 2], []),
    ]
    assert all(p.offline_replicas == [] for p in spread.values())
    pair = partitions_of(response, "pair")
    assert [(p.leader_id, p.replica_nodes, p.isr_nodes) for p in pair.values()] == [
        (LOCAL, [1, 2], [1, 2]),
        (0, [0, 1], [0, 1]),
    ]


def test_a_metadata_request_reads_the_live_nodes_once(
    server: ThreadedServer, cluster: ThreeNodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not once per partition: the live nodes cost a lease snapshot, and topics are many."""
    calls = []
    live_nodes = cluster.live_nodes

    def counted() -> Sequence[NodeInfo]:
        calls.append(1)
        return live_nodes()

    with RawClient(server.bootstrap) as client:
        assert create_topic(client, "wide", 12, 3).error_code == 0
        monkeypatch.setattr(cluster, "live_nodes", counted)
        response = metadata(client, "wide")
    assert len(partitions_of(response, "wide")) == 12
    assert len(calls) <= 2  # the broker list and the controller id


def test_a_replication_factor_above_the_live_brokers_lists_them_all(
    server: ThreadedServer, cluster: ThreeNodes
) -> None:
    with RawClient(server.bootstrap) as client:
        assert create_topic(client, "wide", 1, 5).replication_factor == 5
        [p] = partitions_of(metadata(client, "wide"), "wide").values()
    assert p.replica_nodes == [1, 2, 0]


def test_create_topics_refuses_replication_factors_below_one(
    server: ThreadedServer, cluster: ThreeNodes
) -> None:
    with RawClient(server.bootstrap) as client:
        for factor in (0, -2):
            refused = create_topic(client, f"none-{-factor}", 1, factor)
            assert refused.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
            assert str(factor) in refused.error_message
        defaulted = create_topic(client, "defaulted", 1, -1)
        assert (defaulted.error_code, defaulted.replication_factor) == (0, 1)


def test_create_topics_takes_the_factor_from_replica_assignments(server: ThreadedServer) -> None:
    topic = CreateTopicsRequest.CreatableTopic
    assignment = topic.CreatableReplicaAssignment

    def create(name: str, brokers: list[list[int]]) -> Any:
        with RawClient(server.bootstrap) as client:
            response = client.request(
                CreateTopicsRequest(
                    version=5,
                    topics=[
                        topic(
                            name=name,
                            num_partitions=-1,
                            replication_factor=-1,
                            assignments=[
                                assignment(partition_index=i, broker_ids=ids)
                                for i, ids in enumerate(brokers)
                            ],
                            configs=[],
                        )
                    ],
                    timeout_ms=10_000,
                    validate_only=False,
                )
            )
        return response.topics[0]

    # Node ids are not checked: a lone daemon (node 0) takes assignments to 7 and 8.
    created = create("assigned", [[0, 7], [8, 0]])
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 2, 2)
    uneven = create("uneven", [[0, 7], [0]])
    assert uneven.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    with RawClient(server.bootstrap) as client:
        [p, _] = partitions_of(metadata(client, "assigned"), "assigned").values()
    # One live daemon: the factor asks for more replicas than there are brokers.
    assert (p.leader_id, p.replica_nodes) == (0, [0])


def test_the_replication_factor_survives_in_the_registry(tmp_path: Path) -> None:
    settings = inprocess_settings(tmp_path)
    with ThreadedServer(settings) as first, RawClient(first.bootstrap) as client:
        assert create_topic(client, "kept", 1, 3).error_code == 0
    with ThreadedServer(settings) as second:
        second.server.broker.cluster = ThreeNodes(("127.0.0.1", second.server.kafka_port))
        with RawClient(second.bootstrap) as client:
            [p] = partitions_of(metadata(client, "kept"), "kept").values()
    assert p.replica_nodes == [1, 2, 0]


def test_describe_cluster_lists_every_live_broker_of_the_listener(
    server: ThreadedServer, cluster: ThreeNodes
) -> None:
    with RawClient(server.bootstrap) as client:
        response = client.request(
            DescribeClusterRequest(version=1, include_cluster_authorized_operations=False)
        )
    assert response.error_code == 0
    assert response.controller_id == 0
    assert {b.broker_id: (b.host, b.port) for b in response.brokers} == {
        0: NODE0,
        LOCAL: ("127.0.0.1", server.server.kafka_port),
        2: NODE2,
    }


def test_a_lone_daemon_is_the_node_its_settings_name(tmp_path: Path) -> None:
    settings = inprocess_settings(tmp_path).with_overrides(node_id=7)
    with ThreadedServer(settings) as running, RawClient(running.bootstrap) as client:
        create_topic(client, "alone", 2, 1)
        response = metadata(client, "alone")
        found = client.request(FindCoordinatorRequest(version=2, key="g", key_type=0))
        assert [b.node_id for b in response.brokers] == [7]
        assert response.controller_id == 7
        assert [
            (p.leader_id, p.replica_nodes, p.isr_nodes)
            for p in partitions_of(response, "alone").values()
        ] == [(7, [7], [7])] * 2
        assert (found.error_code, found.node_id) == (0, 7)

        # Created here, the partitions are opened here (their leases taken)
        # without any produce or fetch: Metadata soon carries their epochs.
        def epochs() -> list[int]:
            answer = metadata(client, "alone")
            return [p.leader_epoch for p in partitions_of(answer, "alone").values()]

        wait_for(lambda: epochs() == [1, 1], what="the leader epochs of the created partitions")


# --- coordinators ------------------------------------------------------------------------------


def test_find_coordinator_names_the_leader_of_the_groups_offsets_partition(
    server: ThreadedServer, cluster: ThreeNodes
) -> None:
    groups = groups_by_offsets_partition(server)
    keys = [groups[1], groups[2], groups[3], groups[0]]
    with RawClient(server.bootstrap) as client:
        batched = client.request(
            FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=keys)
        )
        single = client.request(FindCoordinatorRequest(version=2, key=groups[2], key_type=0))
        transaction = client.request(FindCoordinatorRequest(version=2, key="txn", key_type=1))
    answers = {c.key: (c.error_code, c.node_id, c.host, c.port) for c in batched.coordinators}
    assert answers == {
        groups[1]: (0, LOCAL, "127.0.0.1", server.server.kafka_port),
        groups[2]: (0, 2, *NODE2),
        groups[3]: (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1),
        groups[0]: (0, 0, *NODE0),
    }
    assert (single.error_code, single.node_id, single.host, single.port) == (0, 2, *NODE2)
    assert (transaction.error_code, transaction.node_id) == (0, LOCAL)


def commit_request(group: str, topic: str, version: int = 2) -> Any:
    topic_class = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(
        version=version,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=-1,
        topics=[
            topic_class(
                name=topic,
                partitions=[
                    topic_class.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=1,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                ],
            )
        ],
    )


def test_group_requests_to_a_daemon_that_does_not_coordinate_answer_not_coordinator(
    server: ThreadedServer, cluster: ThreeNodes
) -> None:
    groups = groups_by_offsets_partition(server)
    ours, theirs, nobodys = groups[1], groups[2], groups[3]
    not_coordinator = ErrorCode.NOT_COORDINATOR
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
    with RawClient(server.bootstrap) as client:
        create_topic(client, "committed", 1, 1)
        joined = client.request(
            JoinGroupRequest(
                version=5,
                group_id=theirs,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[protocol],
            )
        )
        synced = client.request(
            SyncGroupRequest(
                version=5,
                group_id=theirs,
                generation_id=1,
                member_id="m",
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[],
            )
        )
        beat = client.request(
            HeartbeatRequest(
                version=4, group_id=theirs, generation_id=1, member_id="m", group_instance_id=None
            )
        )
        left = client.request(
            LeaveGroupRequest(
                version=3,
                group_id=theirs,
                members=[LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None)],
            )
        )
        committed = client.request(commit_request(theirs, "committed", version=8))
        ours_committed = client.request(commit_request(ours, "committed", version=8))
        fetched_v6 = client.request(OffsetFetchRequest(version=6, group_id=nobodys, topics=None))
        group = OffsetFetchRequest.OffsetFetchRequestGroup
        fetched_v8 = client.request(
            OffsetFetchRequest(
                version=8,
                groups=[group(group_id=ours, topics=None), group(group_id=theirs, topics=None)],
                require_stable=False,
            )
        )
        described = client.request(DescribeGroupsRequest(version=5, groups=[ours, theirs]))
        deleted = client.request(DeleteGroupsRequest(version=2, groups_names=[theirs, ours]))

    assert joined.error_code == not_coordinator
    assert (synced.error_code, beat.error_code, left.error_code) == (not_coordinator,) * 3
    assert committed.topics[0].partitions[0].error_code == not_coordinator
    assert ours_committed.topics[0].partitions[0].error_code == 0
    assert fetched_v6.error_code == not_coordinator
    assert {g.group_id: g.error_code for g in fetched_v8.groups} == {
        ours: 0,
        theirs: not_coordinator,
    }
    [fetched_ours] = [g for g in fetched_v8.groups if g.group_id == ours]
    assert fetched_ours.topics[0].partitions[0].committed_offset == 1
    assert {g.group_id: g.error_code for g in described.groups} == {
        ours: 0,
        theirs: not_coordinator,
    }
    codes = {r.group_id: r.error_code for r in deleted.results}
    assert codes[theirs] == not_coordinator
    assert codes[ours] != not_coordinator


def test_list_groups_lists_only_the_groups_this_daemon_coordinates(
    server: ThreadedServer,
) -> None:
    groups = groups_by_offsets_partition(server)
    with RawClient(server.bootstrap) as client:
        create_topic(client, "listed", 1, 1)
        for group in groups.values():  # alone, this daemon coordinates every group
            assert (
                client.request(commit_request(group, "listed")).topics[0].partitions[0].error_code
                == 0
            )
        alone = client.request(ListGroupsRequest(version=3))
        server.server.broker.cluster = ThreeNodes(("127.0.0.1", server.server.kafka_port))
        among_others = client.request(ListGroupsRequest(version=3))
    assert sorted(g.group_id for g in alone.groups) == sorted(groups.values())
    assert [g.group_id for g in among_others.groups] == [groups[1]]


# --- leader epochs and partitions served elsewhere ----------------------------------------------


def fetch_request(
    topic: str, partition: int, epoch: int, version: int = 12, offset: int = 0
) -> Any:
    fetch_topic = FetchRequest.FetchTopic
    return FetchRequest(
        version=version,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch_topic(
                topic=topic,
                partitions=[
                    fetch_topic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def list_offsets_request(topic: str, partition: int, epoch: int) -> Any:
    listed = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(
        version=7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            listed(
                name=topic,
                partitions=[
                    listed.ListOffsetsPartition(
                        partition_index=partition, current_leader_epoch=epoch, timestamp=-1
                    )
                ],
            )
        ],
    )


def fetched_partition(client: RawClient, topic: str, partition: int, epoch: int) -> Any:
    [answer] = client.request(fetch_request(topic, partition, epoch)).responses
    [partition_answer] = answer.partitions
    return partition_answer


def listed_partition(client: RawClient, topic: str, partition: int, epoch: int) -> Any:
    [answer] = client.request(list_offsets_request(topic, partition, epoch)).topics
    [partition_answer] = answer.partitions
    return partition_answer


def current_leader(answer: Any) -> tuple[int, int]:
    leader = answer.current_leader
    return (leader.leader_id, leader.leader_epoch)


def test_fetch_and_list_offsets_check_the_leader_epoch(
    server: ThreadedServer, cluster: ThreeNodes
) -> None:
    with RawClient(server.bootstrap) as client:
        create_topic(client, "epochs", 1, 3)
        produced = client.request(produce_request("epochs", [b"a", b"b"]))
        assert produced.responses[0].partition_responses[0].error_code == 0
        fenced = fetched_partition(client, "epochs", 0, EPOCH - 1)
        unknown = fetched_partition(client, "epochs", 0, EPOCH + 1)
        current = fetched_partition(client, "epochs", 0, EPOCH)
        unchecked = fetched_partition(client, "epochs", 0, -1)
        listed = {
            epoch: listed_partition(client, "epochs", 0, epoch)
            for epoch in (EPOCH - 1, EPOCH + 1, EPOCH, -1)
        }

    assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert current_leader(fenced) == (LOCAL, EPOCH)
    assert not fenced.records
    assert unknown.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    for answer in (current, unchecked):
        assert (answer.error_code, answer.high_watermark) == (0, 2)
        assert answer.records
    assert {e: (a.error_code, a.leader_epoch) for e, a in listed.items()} == {
        EPOCH - 1: (ErrorCode.FENCED_LEADER_EPOCH, -1),
        EPOCH + 1: (ErrorCode.UNKNOWN_LEADER_EPOCH, -1),
        EPOCH: (0, EPOCH),
        -1: (0, EPOCH),
    }
    assert listed[EPOCH].offset == 2


@pytest.fixture
def leased_log(
    server: ThreadedServer, cluster: ThreeNodes, monkeypatch: pytest.MonkeyPatch
) -> ThreeNodes:
    """The log refuses, as the leased log does, the partitions the view says others hold."""
    partition_log = server.server.broker.log
    read, list_offsets, append_many = (
        partition_log.read,
        partition_log.list_offsets,
        partition_log.append_many,
    )

    def refuse(topic: str, partition: int) -> None:
        if cluster.local_epoch(topic, partition) is None:
            raise NotLeaderOrFollower(f"{topic}-{partition} is served by another daemon")

    async def leased_read(topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        refuse(topic, partition)
        return await read(topic, partition, *args, **kwargs)

    async def leased_list_offsets(topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        refuse(topic, partition)
        return await list_offsets(topic, partition, *args, **kwargs)

    async def leased_append_many(appends: list[Any], **kwargs: Any) -> list[Any]:
        ours = [a for a in appends if cluster.local_epoch(a[0], a[1]) is not None]
        done = iter(await append_many(ours, **kwargs) if ours else [])
        return [
            next(done)
            if cluster.local_epoch(a[0], a[1]) is not None
            else NotLeaderOrFollower(f"{a[0]}-{a[1]} is served by another daemon")
            for a in appends
        ]

    monkeypatch.setattr(partition_log, "read", leased_read)
    monkeypatch.setattr(partition_log, "list_offsets", leased_list_offsets)

    async def leased_end_offset(topic: str, partition: int, *args: Any) -> Any:
        refuse(topic, partition)
        return await end_offset(topic, partition, *args)

    end_offset = partition_log.end_offset_for_epoch
    monkeypatch.setattr(partition_log, "append_many", leased_append_many)
    monkeypatch.setattr(partition_log, "end_offset_for_epoch", leased_end_offset)
    return cluster


def test_a_partition_served_elsewhere_answers_not_leader_or_follower(
    server: ThreadedServer, leased_log: ThreeNodes
) -> None:
    leased_log.leaders[("moved", 1)] = Leader(2, 7)
    with RawClient(server.bootstrap) as client:
        create_topic(client, "moved", 2, 1)
        produced = {
            p: client.request(produce_request("moved", [b"x"], partition=p))
            .responses[0]
            .partition_responses[0]
            .error_code
            for p in (0, 1)
        }
        fetched = fetched_partition(client, "moved", 1, -1)
        fetched_v11 = client.request(fetch_request("moved", 1, -1, version=11))
        listed = listed_partition(client, "moved", 1, -1)
        here = fetched_partition(client, "moved", 0, -1)

    not_leader = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert produced == {0: 0, 1: not_leader}
    assert fetched.error_code == not_leader
    assert current_leader(fetched) == (2, 7)  # v12+: where to go, without a metadata refresh
    assert fetched_v11.responses[0].partitions[0].error_code == not_leader
    assert (listed.error_code, listed.offset, listed.leader_epoch) == (not_leader, -1, -1)
    ended = client_answer(server, epoch_request("moved", [(1, -1, 7), (0, -1, 0)]))
    assert ended[1][0] == (not_leader, -1, -1)
    assert ended[0][0][0] == 0
    assert (here.error_code, here.high_watermark) == (0, 1)
    assert here.current_leader is None  # only a refusal names a leader (a tagged field)


def test_registry_documents_carry_a_replication_factor_only_above_one(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    registry = TopicRegistry(store, "ns")
    registry.create_topic("plain", 1)
    registry.create_topic("tripled", 1, replication_factor=3)
    plain = store.get("ns/_topics/plain.json")
    # What readers without the field wrote and read: unchanged for factor 1.
    assert b"replication_factor" not in plain
    assert json.loads(store.get("ns/_topics/tripled.json"))["replication_factor"] == 3
    assert registry.get("plain").replication_factor == 1
    altered = registry.alter_configs("tripled", {"retention.ms": "1000"})
    assert (altered.revision, altered.replication_factor) == (1, 3)
    with pytest.raises(ValidationError):
        registry.create_topic("none", 1, replication_factor=0)


# --- OffsetForLeaderEpoch -----------------------------------------------------------------


Query = tuple[int, int, int]  # partition, current_leader_epoch, leader_epoch
Answer = tuple[int, int, int]  # error code, leader epoch, end offset


def epoch_request(
    topic: str, queries: Sequence[Query], version: int = 3, replica_id: int = -1
) -> Any:
    asked = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    fields: dict[str, Any] = {"replica_id": replica_id} if version >= 3 else {}
    return OffsetForLeaderEpochRequest(
        version=version,
        topics=[
            asked(
                topic=topic,
                partitions=[
                    asked.OffsetForLeaderPartition(
                        partition=partition, current_leader_epoch=current, leader_epoch=epoch
                    )
                    for partition, current, epoch in queries
                ],
            )
        ],
        **fields,
    )


def client_answer(server: ThreadedServer, request: Any) -> dict[int, list[Answer]]:
    """Partition -> its answers (error code, leader epoch, end offset), in request order."""
    with RawClient(server.bootstrap) as client:
        [topic] = client.request(request).topics
    found: dict[int, list[Answer]] = {}
    for p in topic.partitions:
        found.setdefault(p.partition, []).append((p.error_code, p.leader_epoch, p.end_offset))
    return found


# Three runs of the daemon, each a lease of its own: epoch 1 holds offsets 0-2,
# epoch 2 offsets 3-6, epoch 3 (the third run's) offsets 7-9.
RUNS = ((b"a", b"b", b"c"), (b"d", b"e", b"f", b"g"), (b"h", b"i", b"j"))


@pytest.fixture
def three_epochs(tmp_path: Path) -> Iterator[tuple[ThreadedServer, ThreeNodes]]:
    """The third run of a daemon whose partition ``history`` had a lease in each run."""
    settings = inprocess_settings(tmp_path)
    for run, values in enumerate(RUNS, 1):
        with ThreadedServer(settings) as server, RawClient(server.bootstrap) as client:
            if run == 1:
                assert create_topic(client, "history", 2, 1).error_code == 0
            produced = client.request(produce_request("history", list(values)))
            assert produced.responses[0].partition_responses[0].error_code == 0
            if run < len(RUNS):
                continue
            view = ThreeNodes(("127.0.0.1", server.server.kafka_port))
            view.leaders[("history", 0)] = Leader(LOCAL, 3)
            server.server.broker.cluster = view
            yield server, view
    assert server.exit_code == 0


def test_offset_for_leader_epoch_answers_each_epochs_end_as_kafka(
    three_epochs: tuple[ThreadedServer, ThreeNodes],
) -> None:
    server, _ = three_epochs
    asked = [(0, -1, epoch) for epoch in (1, 2, 3, 0, 4, 9, -1, -3)]
    for version in (2, 3, 4):
        for replica_id in (-1, -2, 5):  # a consumer, a debug client, a follower: one answer
            answers = client_answer(server, epoch_request("history", asked, version, replica_id))
            assert answers == {
                0: [
                    (0, 1, 3),  # epoch 1 ended where epoch 2 began
                    (0, 2, 7),
                    (0, 3, 10),  # the current epoch ends at the high watermark
                    (0, 0, 0),  # older than any known: itself, where the first began
                    (0, -1, -1),  # newer than the current one: UNDEFINED
                    (0, -1, -1),
                    (0, -1, -1),  # no epoch named
                    (0, -1, -1),
                ]
            }, (version, replica_id)
            if version < 3:
                break


def test_each_batch_carries_the_epoch_it_was_written_in(
    three_epochs: tuple[ThreadedServer, ThreeNodes],
) -> None:
    server, _ = three_epochs
    stamped: list[tuple[int, int]] = []
    with RawClient(server.bootstrap) as client:
        while len(stamped) < len(RUNS):
            offset = stamped[-1][0] + len(RUNS[len(stamped) - 1]) if stamped else 0
            [answer] = client.request(fetch_request("history", 0, 3, offset=offset)).responses
            records = answer.partitions[0].records
            assert records, f"nothing at offset {offset}"
            stamped += [
                (h.base_offset, h.partition_leader_epoch) for _, h in iter_batch_headers(records)
            ]
    assert stamped == [(0, 1), (3, 2), (7, 3)]


def test_offset_for_leader_epoch_checks_the_current_leader_epoch(
    three_epochs: tuple[ThreadedServer, ThreeNodes],
) -> None:
    server, _ = three_epochs
    asked = [(0, current, 1) for current in (3, -1, 2, 4, -2)]
    assert client_answer(server, epoch_request("history", asked)) == {
        0: [
            (0, 1, 3),
            (0, 1, 3),  # -1: no check
            (ErrorCode.FENCED_LEADER_EPOCH, -1, -1),
            (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
            (ErrorCode.FENCED_LEADER_EPOCH, -1, -1),  # only -1 means none, as in Kafka
        ]
    }


def test_offset_for_leader_epoch_of_unknown_topics_and_partitions(
    three_epochs: tuple[ThreadedServer, ThreeNodes],
) -> None:
    server, _ = three_epochs
    unknown = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
    assert client_answer(server, epoch_request("history", [(2, -1, 1), (-1, -1, 1)])) == {
        2: [unknown],
        -1: [unknown],
    }
    for name in ("no-such-topic", "", "not/a/topic"):
        assert client_answer(server, epoch_request(name, [(0, -1, 1)])) == {0: [unknown]}
    # A partition never written: whatever epochs it had, each ends at 0.
    assert client_answer(server, epoch_request("history", [(1, -1, 1), (1, -1, 0)])) == {
        1: [(0, 1, 0), (0, 0, 0)]
    }


def test_offset_for_leader_epoch_golden_bytes(
    three_epochs: tuple[ThreadedServer, ThreeNodes],
) -> None:
    server, _ = three_epochs
    topic = b"history"
    with RawClient(server.bootstrap) as client:
        correlation = client.send(epoch_request("history", [(0, 3, 2)], version=3))
        v3 = client.read_frame()
        flexible = client.send(epoch_request("history", [(0, 3, 2)], version=4))
        v4 = client.read_frame()
    assert v3 == b"".join(
        [
            struct.pack(">i", correlation),  # response header v0: correlation id
            struct.pack(">i", 0),  # throttle_time_ms
            struct.pack(">i", 1),  # topics: one
            struct.pack(">h", len(topic)) + topic,  # topic
            struct.pack(">i", 1),  # partitions: one
            struct.pack(">h", 0),  # error_code
            struct.pack(">i", 0),  # partition
            struct.pack(">i", 2),  # leader_epoch
            struct.pack(">q", 7),  # end_offset: where epoch 3 began
        ]
    )
    assert v4 == b"".join(
        [
            struct.pack(">i", flexible),  # response header v1: correlation id,
            b"\x00",  # and no tagged fields
            struct.pack(">i", 0),  # throttle_time_ms
            b"\x02",  # topics: compact array of one (length + 1)
            bytes([len(topic) + 1]) + topic,  # topic: compact string
            b"\x02",  # partitions: one
            struct.pack(">h", 0),  # error_code
            struct.pack(">i", 0),  # partition
            struct.pack(">i", 2),  # leader_epoch
            struct.pack(">q", 7),  # end_offset
            b"\x00",  # the partition's tagged fields
            b"\x00",  # the topic's
            b"\x00",  # the response's
        ]
    )


def test_offset_for_leader_epoch_authorization_is_cluster_action_or_topic_describe() -> None:
    rule = OFFSET_FOR_LEADER_EPOCH.authorize
    assert rule is not None
    request = decode_request(
        client_frame(epoch_request("visible", [(0, -1, 1)]))[4:], SUPPORTED_VERSIONS
    )
    two_topics = decode_request(
        client_frame(
            OffsetForLeaderEpochRequest(
                version=3,
                replica_id=-1,
                topics=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=name, partitions=[])
                    for name in ("visible", "hidden")
                ],
            )
        )[4:],
        SUPPORTED_VERSIONS,
    )

    def checker(*bindings: AclBinding) -> Checker:
        session = Session.on(SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:app")
        return Checker(
            Authorizer(list(bindings)), session, AuditLog(), ApiKey.OFFSET_FOR_LEADER_EPOCH
        )

    def allow(op: Operation, rtype: ResourceType, name: str) -> AclBinding:
        return AclBinding(rtype, name, PatternType.LITERAL, "User:app", "*", op, Permission.ALLOW)

    broker = allow(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    reader = allow(Operation.DESCRIBE, ResourceType.TOPIC, "visible")
    assert rule(checker(broker), two_topics) is None  # a replica's principal: everything
    assert rule(checker(reader), request) is None
    plan = rule(checker(reader), two_topics)
    assert plan is not None and plan.request is not None and plan.denied is not None
    assert [t.topic for t in plan.request.body.topics] == ["visible"]
    assert [t.topic for t in plan.denied.body.topics] == ["hidden"]
    assert plan.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    denied = rule(checker(), request)
    assert denied is not None and denied.whole == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_metadata_naming_a_topic_opens_its_partitions_here(tmp_path: Path) -> None:
    settings = inprocess_settings(tmp_path)
    store = LocalObjectStore(tmp_path / "store")
    # Created behind the daemon's back (another daemon, an operator's tool).
    TopicRegistry(store, settings.namespace).create_topic("named", 3)
    with ThreadedServer(settings) as server, RawClient(server.bootstrap) as client:
        first = partitions_of(metadata(client, "named"), "named")
        assert {p.leader_id for p in first.values()} == {0}

        def epochs() -> list[int]:
            answer = metadata(client, "named")
            return [p.leader_epoch for p in partitions_of(answer, "named").values()]

        # Taken by the daemon on its own: nothing was produced or fetched.
        wait_for(lambda: epochs() == [1, 1, 1], what="the partitions' leases taken")
