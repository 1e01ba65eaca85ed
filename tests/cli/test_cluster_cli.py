"""`kfs cluster status|leases` as an operator runs them, against the heartbeats of real daemons.

Two `kfs serve` processes share a local store; the command reads their
heartbeats and the partition catalogs from that store alone.  A stopped
daemon shows ``stopped``; a heartbeat whose wall clock is older than the
session timeout shows ``dead``; an empty namespace and a bad store URL get a
one-line answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest

from kfs_core.clock import now_ms
from kfs_core.cluster.nodes import encode_node, node_key, nodes_prefix
from kfs_core.cluster.view import NodeInfo
from kfs_core.storage import open_store
from testkit.daemon import DaemonFactory
from testkit.waiting import wait_for

NAMESPACE = "test"  # DaemonFactory's
PARTITIONS = 4


def kfs(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KFS_")}
    return subprocess.run(
        [sys.executable, "-m", "kfs_core.cli", "--store-url", store_url,
         "--namespace", NAMESPACE, *args],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip


def status_json(store_url: str) -> dict[str, Any]:
    result = kfs(store_url, "cluster", "status", "--json")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[DaemonFactory]:
    daemons = DaemonFactory(tmp_path)
    try:
        yield daemons
    finally:
        daemons.close()


def test_status_and_leases_of_two_daemons_then_one_stopped(
    factory: DaemonFactory, tmp_path: Path
) -> None:
    store_url = (tmp_path / "store").as_uri()
    first, second = factory.start_cluster(2, store_url=store_url)
    admin = confluent_kafka.admin.AdminClient(
        {"bootstrap.servers": f"{first.bootstrap},{second.bootstrap}"}
    )
    for future in admin.create_topics(
        [confluent_kafka.admin.NewTopic("orders", PARTITIONS, 1)]
    ).values():
        future.result(30)
    # A daemon takes a partition when it first opens it: one record in each.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": f"{first.bootstrap},{second.bootstrap}", "acks": "all"}
    )
    for p in range(PARTITIONS):
        producer.produce("orders", b"record", partition=p)
    assert producer.flush(60) == 0
    del producer, admin  # no client left to retry the daemons stopped below

    def every_partition_held() -> dict[str, Any] | None:
        doc = status_json(store_url)
        return doc if len(doc["partitions"]) == PARTITIONS else None

    doc = wait_for(every_partition_held, timeout=60, what="every partition in a heartbeat")
    assert doc["namespace"] == NAMESPACE and doc["session_timeout_ms"] == 9000
    daemons = doc["daemons"]
    assert [d["node_id"] for d in daemons] == [1, 2]
    assert [d["state"] for d in daemons] == ["running", "running"]
    assert daemons[0]["listeners"] == {"PLAINTEXT": first.bootstrap}
    assert daemons[1]["listeners"] == {"PLAINTEXT": second.bootstrap}
    assert {d["durability"] for d in daemons} == {"store"}
    assert all(0 <= d["heartbeat_age_ms"] < 9000 for d in daemons), daemons
    assert set(daemons[0]) == {"node_id", "state", "heartbeat_ms", "heartbeat_age_ms",
                               "incarnation", "seq", "durability", "listeners", "rack",
                               "partitions"}  # fmt: skip
    held = doc["partitions"]
    assert [(p["topic"], p["partition"]) for p in held] == [
        ("orders", p) for p in range(PARTITIONS)
    ]
    assert all(p["epoch"] >= 1 and p["holder"] in (1, 2) for p in held), held
    counts = {d["node_id"]: d["partitions"] for d in daemons}
    assert counts == {n: sum(p["holder"] == n for p in held) for n in (1, 2)}

    table = kfs(store_url, "cluster", "status", "--partitions")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("node 1") and " running " in lines[0]
    assert f"listeners PLAINTEXT://{first.bootstrap}" in lines[0]
    assert "durability store" in lines[0]
    assert lines[1].startswith("node 2")
    for p in held:
        expected = f"  orders/{p['partition']}  epoch {p['epoch']}  holder node {p['holder']}"
        assert expected in lines, table.stdout

    # The catalogs' leases agree with the heartbeats (no heartbeat was read for these).
    leases = kfs(store_url, "cluster", "leases", "orders", "--json")
    assert leases.returncode == 0, leases.stderr
    by_partition = {e["partition"]: e for e in json.loads(leases.stdout)}
    for p in held:
        lease = by_partition[p["partition"]]
        assert (lease["leader_epoch"], lease["leader_node_id"]) == (p["epoch"], p["holder"])

    assert second.stop() == 0
    after = status_json(store_url)
    assert [(d["node_id"], d["state"]) for d in after["daemons"]] == [
        (1, "running"),
        (2, "stopped"),
    ]
    assert after["daemons"][1]["partitions"] == 0

    # With no daemon running the leases are still there to read.
    assert first.stop() == 0
    table = kfs(store_url, "cluster", "leases", "orders")
    assert table.returncode == 0, table.stderr
    assert len(table.stdout.splitlines()) == PARTITIONS
    assert all(" epoch " in line and " node " in line for line in table.stdout.splitlines())


def test_a_heartbeat_older_than_the_session_timeout_is_dead(tmp_path: Path) -> None:
    store_url = (tmp_path / "store").as_uri()
    store = open_store(store_url)
    info = NodeInfo(7, "abc", {"PLAINTEXT": ("host-7", 9092)}, "store", held={("t", 0): 3})
    store.put(node_key(NAMESPACE, 7), encode_node(info, heartbeat_ms=now_ms() - 60_000))
    store.put(f"{nodes_prefix(NAMESPACE)}8.json", b"not json")

    result = kfs(store_url, "cluster", "status", "-v")
    assert result.returncode == 0, result.stderr
    [line, partition] = result.stdout.splitlines()
    assert line.startswith("node 7") and " dead " in line and "partitions 1" in line
    assert partition == "  t/0  epoch 3  holder node 7"
    assert "kfs: warning: skipping a corrupt heartbeat" in result.stderr
    # A session timeout longer than the heartbeat's age: running again.
    [daemon] = json.loads(
        kfs(store_url, "cluster", "status", "--json", "--session-timeout-ms", "600000").stdout
    )["daemons"]
    assert daemon["state"] == "running" and daemon["heartbeat_age_ms"] >= 60_000


def test_an_empty_namespace_says_so(tmp_path: Path) -> None:
    store_url = (tmp_path / "store").as_uri()
    result = kfs(store_url, "cluster", "status")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"no daemons in namespace {NAMESPACE!r} (no heartbeats in the store)\n"
    doc = status_json(store_url)
    assert doc["daemons"] == [] and doc["partitions"] == []


def test_a_bad_store_url_or_an_unknown_topic_is_a_one_line_error(tmp_path: Path) -> None:
    result = kfs("nope://bucket", "cluster", "status")
    assert result.returncode != 0
    [line] = result.stderr.splitlines()
    assert line.startswith("kfs: error: unsupported store URL 'nope://bucket'")
    result = kfs((tmp_path / "store").as_uri(), "cluster", "leases", "missing")
    assert result.returncode != 0
    [line] = result.stderr.splitlines()
    assert line.startswith("kfs: error:") and "missing" in line
