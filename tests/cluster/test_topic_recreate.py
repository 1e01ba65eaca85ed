"""A topic deleted and created again under its name while three daemons serve it.

The daemon that answers DeleteTopics purges the topic: it takes each
partition's lease at a new epoch and lists it in its heartbeat, so the
daemons still holding partitions hand them over; then the data goes and the
name is free.  The new topic, created through another daemon, holds only
what was produced to it: nothing the others had acknowledged for the
deleted topic, flushed or not, comes back.
"""

from __future__ import annotations

import time

import confluent_kafka
import confluent_kafka.admin
import pytest

from testkit.daemon import DaemonFactory
from testkit.waiting import wait_for
from tests.cluster.test_daemons import PARTITIONS, bootstrap, create_topic, read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def produce(servers: str, topic: str, prefix: bytes, count: int) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True}
    )
    for i in range(count):
        producer.produce(topic, b"%s-%04d" % (prefix, i), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def recreate(servers: str, topic: str) -> None:
    """CreateTopics until the purge has freed the name ("marked for deletion" until then)."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": servers})

    def created() -> bool:
        [future] = admin.create_topics(
            [confluent_kafka.admin.NewTopic(topic, PARTITIONS, 3)]
        ).values()
        try:
            future.result(30)
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            assert error.code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS, error
            assert "marked for deletion" in error.str()
            return False
        return True

    wait_for(created, timeout=60, interval=0.2, what=f"{topic!r} to be purged")


@pytest.mark.parametrize("durability", ["store", "cautious"])
def test_a_topic_deleted_and_created_again_across_daemons_holds_only_its_new_records(
    factory: DaemonFactory, durability: str
) -> None:
    store_url = (factory.root / "store").as_uri()
    # A long flush interval: the holders still have acknowledged, unflushed
    # records of the deleted topic when it is purged.
    daemons = factory.start_cluster(
        3, store_url=store_url, durability=durability, extra_args=["--flush-interval-ms", "600000"]
    )
    servers = bootstrap(daemons)
    topic = create_topic(servers, replication=3)
    produce(servers, topic, b"before", 120)
    assert len(read_all(servers, topic)) == 120

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": daemons[0].bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    started = time.monotonic()
    recreate(daemons[1].bootstrap, topic)
    purged_in = time.monotonic() - started

    produce(servers, topic, b"after", 60)
    records = read_all(servers, topic)
    assert sorted(records.values()) == sorted(b"after-%04d" % i for i in range(60))
    assert "purged deleted topic" in daemons[0].log()
    handed_over = [d for d in daemons[1:] if f"handing over {topic}-" in d.log()]
    assert handed_over, "no daemon handed a partition of the deleted topic over"
    print(f"purged and created again in {purged_in:.1f} s")

    # A restart replays nothing of the deleted topic into the new one.
    for daemon in daemons[1:]:
        daemon.kill()
        daemon.restart()
    assert sorted(read_all(bootstrap(daemons), topic).values()) == sorted(records.values())
