"""Transactions over three `kfs serve` processes: markers reach partitions other daemons lead.

A transaction's partitions spread over every daemon, and its coordinator
(the leader of its ``__transaction_state`` partition) is one of them: the
markers of the partitions the others lead go to them as WriteTxnMarkers
requests.  confluent-kafka's transactional producer commits and aborts
across all six partitions and sends a group's offsets with a transaction;
a ``read_committed`` consumer reads each committed record once and no
aborted one, and the group's offsets move when the transaction commits.
"""

from __future__ import annotations

import uuid

import confluent_kafka
import pytest

from testkit.daemon import DaemonFactory
from testkit.waiting import wait_for
from tests.cluster.test_daemons import PARTITIONS, bootstrap, create_topic, leaders

pytestmark = pytest.mark.integration


def read_committed(servers: str, topic: str) -> list[bytes]:
    """Every value a read_committed consumer gets from the start to each partition's end."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    values: list[bytes] = []
    at_end: set[int] = set()

    def done() -> bool:
        while (msg := consumer.poll(0.2)) is not None:
            if msg.error() is not None:
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
                at_end.add(msg.partition())
            else:
                at_end.discard(msg.partition())
                values.append(msg.value())
        return len(at_end) == PARTITIONS

    try:
        wait_for(done, timeout=60, what="every partition read to its end")
    finally:
        consumer.close()
    return values


def test_a_transaction_over_partitions_of_three_daemons_commits_and_aborts_everywhere(
    factory: DaemonFactory,
) -> None:
    daemons = factory.start_cluster(3, store_url=(factory.root / "store").as_uri())
    servers = bootstrap(daemons)
    topic = create_topic(servers)
    assert set(leaders(servers, topic).values()) == {1, 2, 3}
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(30)

    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(topic, value=b"committed-%d" % p, partition=p)
    producer.commit_transaction(30)

    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(topic, value=b"aborted-%d" % p, partition=p)
    producer.flush(30)
    producer.abort_transaction(30)

    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(topic, value=b"again-%d" % p, partition=p)
    group = f"g-{uuid.uuid4().hex[:6]}"
    offsets = [confluent_kafka.TopicPartition(topic, p, 7) for p in range(PARTITIONS)]
    metadata = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": group})
    producer.send_offsets_to_transaction(offsets, metadata.consumer_group_metadata(), 30)
    producer.commit_transaction(30)

    values = read_committed(servers, topic)
    expected = [b"committed-%d" % p for p in range(PARTITIONS)]
    expected += [b"again-%d" % p for p in range(PARTITIONS)]
    assert sorted(values) == sorted(expected)
    committed = wait_for(
        lambda: metadata.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        ),
        timeout=30,
        what="the group's committed offsets",
    )
    assert [tp.offset for tp in committed] == [7] * PARTITIONS
    metadata.close()
