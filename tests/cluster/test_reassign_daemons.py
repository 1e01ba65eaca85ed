"""`kfs partitions reassign` moving a partition between three real `kfs serve` daemons.

A confluent-kafka producer keeps producing to every partition while an
operator moves one of them to a chosen node: the command returns at once,
``--verify`` reports it completed once the target holds the lease and says
so in its heartbeat, Metadata names the target with a higher leader epoch,
no other partition moves, and every acknowledged record is stored once at
its offset (the history checks of tests/cluster/test_daemons.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from testkit.daemon import Daemon, DaemonFactory, node_id_of
from testkit.raw_client import RawClient
from testkit.waiting import wait_for
from tests.cluster.test_daemons import (
    BackgroundProducer,
    bootstrap,
    check_history,
    create_topic,
    read_all,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata import MetadataRequest

pytestmark = pytest.mark.integration


def leaders_and_epochs(daemon: Daemon, topic: str) -> dict[int, tuple[int, int]]:
    """Partition -> (leader node id, leader epoch), from a Metadata v12 request."""
    with RawClient(daemon.bootstrap) as client:
        response = client.request(
            MetadataRequest(
                version=12,
                topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    [entry] = response.topics
    return {p.partition_index: (p.leader_id, p.leader_epoch) for p in entry.partitions}


def reassign(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KFS_")}
    return subprocess.run(
        [sys.executable, "-m", "kfs_core.cli", "--store-url", store_url, "--namespace", "test",
         "partitions", "reassign", *args],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip


def test_a_partition_moves_by_hand_under_load_and_loses_nothing(factory: DaemonFactory) -> None:
    store_url = (factory.root / "store").as_uri()
    daemons = factory.start_cluster(3, store_url=store_url)
    servers = bootstrap(daemons)
    topic = create_topic(servers)
    with BackgroundProducer(servers, topic) as producer:
        wait_for(lambda: producer.acked_count() >= 300, timeout=60, what="300 acks")

        def every_partition_held() -> dict[int, tuple[int, int]] | None:
            found = leaders_and_epochs(daemons[0], topic)
            return found if all(epoch > 0 for _, epoch in found.values()) else None

        before = wait_for(every_partition_held, timeout=60, what="every partition held")
        moved = 0
        source, epoch = before[moved]
        target = next(node_id_of(d) for d in daemons if node_id_of(d) != source)
        flags = ["--topic", topic, "--partition", str(moved), "--broker", str(target)]

        executed = reassign(store_url, *flags, "--execute")
        assert executed.returncode == 0, executed.stderr
        assert executed.stdout.splitlines()[-1] == (
            f"Successfully started partition reassignment for {topic}-{moved}"
        )
        assert f'"partition":{moved},"replicas":[{source}]' in executed.stdout

        def completed() -> bool:
            result = reassign(store_url, *flags, "--verify")
            assert result.returncode == 0, result.stderr
            return f"Reassignment of partition {topic}-{moved} is completed." in result.stdout

        wait_for(completed, timeout=60, what=f"{topic}-{moved} moving to node {target}")

        def target_leads_at_a_new_epoch() -> dict[int, tuple[int, int]] | None:
            # Daemon 0 learns the target's epoch from the target's next heartbeat.
            found = leaders_and_epochs(daemons[0], topic)
            return found if found[moved][0] == target and found[moved][1] > epoch else None

        after = wait_for(
            target_leads_at_a_new_epoch, timeout=60, what=f"node {target} leading {topic}-{moved}"
        )
        new_epoch = after[moved][1]
        # Exactly the partition named moved.
        assert {p: a for p, a in after.items() if p != moved} == {
            p: b for p, b in before.items() if p != moved
        }
        # The producer follows it: more acknowledgements on the moved partition.
        with producer.history.lock:
            on_moved = sum(1 for p, _ in producer.history.acked if p == moved)

        def more_on_moved() -> bool:
            with producer.history.lock:
                return sum(1 for p, _ in producer.history.acked if p == moved) >= on_moved + 50

        wait_for(more_on_moved, timeout=60, what=f"acks on {topic}-{moved} after the move")
        listed = reassign(store_url, "--list")
        assert listed.stdout.splitlines() == [
            "Current partition reassignments:",
            f"{topic}-{moved}: replicas: {target}. completed.",
        ]
    assert not producer.history.errors, producer.history.errors[:3]
    check_history(producer.history, read_all(servers, topic))
    target_log = next(d for d in daemons if node_id_of(d) == target).log()
    assert f"took {topic}-{moved} at epoch {new_epoch}" in target_log
    source_log = next(d for d in daemons if node_id_of(d) == source).log()
    assert f"handing over {topic}-{moved}: it is assigned to node {target}" in source_log
