"""What an operator reads of the cluster from the store (`kfs_core.cluster.status`).

Heartbeats are the documents `kfs_core.cluster.nodes.encode_node` writes and
leases are real ``lease`` commits (`PartitionCatalog.take_lease`), on the
local-directory store and on S3 (moto over HTTP).  The wall clock the
verdicts count to is a fixed number, so every age is exact.
"""

from __future__ import annotations

import json

import pytest

from kfs_core.catalog import PartitionCatalog, TopicRegistry
from kfs_core.cluster.nodes import encode_node, node_key, nodes_prefix
from kfs_core.cluster.status import (
    DEFAULT_SESSION_TIMEOUT_MS,
    PartitionLease,
    daemon_statuses,
    lease_holder,
    read_heartbeats,
    read_leases,
)
from kfs_core.cluster.view import NodeInfo, NodeState
from kfs_core.errors import UnknownTopic
from kfs_core.storage import ObjectStore

NS = "ns"
NOW = 1_800_000_000_000
TIMEOUT_MS = 9000


def _node(
    node_id: int, *, state: NodeState = "running", held: dict[tuple[str, int], int] | None = None
) -> NodeInfo:
    return NodeInfo(
        node_id,
        f"inc-{node_id}",
        {"PLAINTEXT": (f"host-{node_id}", 9092)},
        "store",
        state=state,
        seq=node_id * 10,
        held=held or {},
    )


def _beat(store: ObjectStore, info: NodeInfo, heartbeat_ms: int) -> None:
    store.put(node_key(NS, info.node_id), encode_node(info, heartbeat_ms=heartbeat_ms))


def test_the_default_session_timeout_is_the_daemons() -> None:
    assert DEFAULT_SESSION_TIMEOUT_MS == 9000


def test_each_heartbeat_gets_its_wall_clock_verdict(store: ObjectStore) -> None:
    fresh = _node(1, held={("orders", 0): 2, ("orders", 3): 1})
    _beat(store, fresh, NOW - 100)
    _beat(store, _node(2), NOW - TIMEOUT_MS)  # exactly the timeout: not yet dead
    _beat(store, _node(3), NOW - TIMEOUT_MS - 1)
    _beat(store, _node(4, state="stopped"), NOW - 60_000)  # stopped stays stopped, however old
    untimed = json.loads(encode_node(_node(5)))
    del untimed["heartbeat_ms"]
    store.put(node_key(NS, 5), json.dumps(untimed).encode())
    store.put(node_key(NS, 6), b'{"node_id": 6}')
    store.put(f"{nodes_prefix(NS)}notes.txt", b"not a heartbeat")  # not .json: not looked at

    heartbeats, corrupt = read_heartbeats(store, NS)
    assert [(info.node_id, ms) for info, ms in heartbeats] == [
        (1, NOW - 100), (2, NOW - TIMEOUT_MS), (3, NOW - TIMEOUT_MS - 1), (4, NOW - 60_000),
        (5, -1),
    ]  # fmt: skip
    assert heartbeats[0][0] == fresh  # the document round-trips
    [message] = corrupt
    assert f"{nodes_prefix(NS)}6.json" in message

    statuses = daemon_statuses(heartbeats, TIMEOUT_MS, NOW)
    assert [(s.info.node_id, s.state, s.age_ms) for s in statuses] == [
        (1, "running", 100),
        (2, "running", TIMEOUT_MS),
        (3, "dead", TIMEOUT_MS + 1),
        (4, "stopped", 60_000),
        (5, "dead", None),
    ]
    assert statuses[0].to_json() == {
        "node_id": 1, "state": "running", "heartbeat_ms": NOW - 100, "heartbeat_age_ms": 100,
        "incarnation": "inc-1", "seq": 10, "durability": "store",
        "listeners": {"PLAINTEXT": "host-1:9092"}, "rack": None, "partitions": 2,
    }  # fmt: skip
    # A longer session timeout: node 3 runs again.
    assert daemon_statuses(heartbeats, TIMEOUT_MS + 1, NOW)[2].state == "running"


def test_an_empty_namespace_has_no_heartbeats(store: ObjectStore) -> None:
    assert read_heartbeats(store, NS) == ([], [])


def test_leases_from_the_catalogs_and_who_holds_them(store: ObjectStore) -> None:
    TopicRegistry(store, NS).create_topic("orders", partitions=7)

    def lease(partition: int, *nodes: int) -> None:
        catalog = PartitionCatalog(store, NS, "orders", partition)
        for node_id in nodes:
            catalog.take_lease(node_id, f"inc-{node_id}")

    lease(0, 1)  # node 1 runs and lists it: live
    lease(1, 3)  # node 3 is dead
    lease(2, 2, 1)  # taken over by node 1 at epoch 2
    # orders/3: never taken
    lease(4, 4)  # node 4 stopped
    lease(5, 9)  # node 9 has no heartbeat
    lease(6, 2)  # node 2 runs but handed it over (its heartbeat no longer lists it)
    _beat(store, _node(1, held={("orders", 0): 1, ("orders", 2): 2}), NOW - 10)
    _beat(store, _node(2), NOW - 10)
    _beat(store, _node(3, held={("orders", 1): 1}), NOW - 3 * TIMEOUT_MS)
    _beat(store, _node(4, state="stopped"), NOW - 10)

    leases = read_leases(store, NS, "orders")
    assert [(x.partition, x.epoch, x.node_id, x.incarnation) for x in leases] == [
        (0, 1, 1, "inc-1"), (1, 1, 3, "inc-3"), (2, 2, 1, "inc-1"), (3, 0, -1, ""),
        (4, 1, 4, "inc-4"), (5, 1, 9, "inc-9"), (6, 1, 2, "inc-2"),
    ]  # fmt: skip
    statuses = {
        s.info.node_id: s for s in daemon_statuses(read_heartbeats(store, NS)[0], TIMEOUT_MS, NOW)
    }
    assert [lease_holder(x, statuses) for x in leases] == [
        "live", "dead", "live", "no-lease", "stopped", "no-heartbeat", "released",
    ]  # fmt: skip
    # A running node whose heartbeat does not list the partition does not hold it.
    assert lease_holder(PartitionLease("orders", 1, 1, 1, "inc-1"), statuses) == "released"
    assert lease_holder(PartitionLease("orders", 0, 1, 1, "inc-1"), {}) == "no-heartbeat"

    with pytest.raises(UnknownTopic):
        read_leases(store, NS, "missing")
