"""Transactions over three `kfs serve` processes: markers reach partitions other daemons lead.

A transaction's partitions spread over every daemon, and its coordinator
(the leader of its ``__transaction_state`` partition) is one of them: the
markers of the partitions the others lead go to them as WriteTxnMarkers
requests.  confluent-kafka's transactional producer commits and aborts
across all six partitions and sends a group's offsets with a transaction;
a ``read_committed`` consumer reads each committed record once and no
aborted one, and the group's offsets move when the transaction commits.
Daemons with only SASL listeners log in on each other for that
(``KFS_INTER_BROKER_SASL_USERNAME``).
"""

from __future__ import annotations

import uuid

import confluent_kafka
import confluent_kafka.admin
import pytest

from testkit.daemon import Daemon, DaemonFactory, add_user
from testkit.ports import free_port
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


SASL_PASSWORD = "daemons share this secret"


def _sasl_daemon(factory: DaemonFactory, node_id: int, port: int, store_url: str) -> Daemon:
    args = [
        "--node-id", str(node_id), "--durability", "store",
        "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "--broker-heartbeat-interval-ms", "200", "--broker-session-timeout-ms", "2000",
        "--inter-broker-sasl-username", "kfs-daemon",
        "--inter-broker-sasl-password", SASL_PASSWORD,
    ]  # fmt: skip
    return factory.start(name=f"node-{node_id}", store_url=store_url, extra_args=args)


def test_markers_reach_daemons_with_only_sasl_listeners(factory: DaemonFactory) -> None:
    """The coordinator logs in on the other daemon (SCRAM-SHA-512) to write its markers."""
    store_url = (factory.root / "store").as_uri()
    ports = [free_port(), free_port()]
    first = _sasl_daemon(factory, 1, ports[0], store_url)
    for user in ("kfs-daemon", "app"):
        add_user(first, user, SASL_PASSWORD, "SCRAM-SHA-512")
    daemons = [first, _sasl_daemon(factory, 2, ports[1], store_url)]
    wait_for(
        lambda: all(d.metric("kfs_cluster_live_nodes") >= 2 for d in daemons),
        timeout=60,
        what="both daemons seeing each other",
    )
    conf = {
        "bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "app",
        "sasl.password": SASL_PASSWORD,
    }
    topic = f"sasl-{uuid.uuid4().hex[:6]}"
    admin = confluent_kafka.admin.AdminClient(conf)
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 4, 1)])[topic].result(30)
    owners = wait_for(
        lambda: (
            (m := admin.list_topics(topic, timeout=10).topics[topic].partitions)
            and {p.leader for p in m.values()} == {1, 2}
            and {p.id: p.leader for p in m.values()}
        ),
        timeout=60,
        what="the topic's partitions led by both daemons",
    )
    assert set(owners.values()) == {1, 2}
    producer = confluent_kafka.Producer({**conf, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    for label, commit in (("committed", True), ("aborted", False), ("again", True)):
        producer.begin_transaction()
        for p in range(4):
            producer.produce(topic, value=b"%s-%d" % (label.encode(), p), partition=p)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # on the broker first: an abort purges what is still queued
            producer.abort_transaction(30)

    consumer = confluent_kafka.Consumer(
        {**conf, "group.id": f"check-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
         "enable.partition.eof": True, "enable.auto.commit": False}
    )  # fmt: skip
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(4)])
    values: list[bytes] = []
    at_end: set[int] = set()

    def read_all() -> bool:
        while (msg := consumer.poll(0.2)) is not None:
            if msg.error() is not None:
                at_end.add(msg.partition())
            else:
                at_end.discard(msg.partition())
                values.append(msg.value())
        return len(at_end) == 4

    try:
        wait_for(read_all, timeout=60, what="every partition read past its markers")
    finally:
        consumer.close()
    want = [b"%s-%d" % (label, p) for label in (b"committed", b"again") for p in range(4)]
    assert sorted(values) == sorted(want)
