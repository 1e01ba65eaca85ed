"""Transactions with confluent-kafka against a real daemon: Kafka's semantics, end to end.

* Committed and aborted transactions over two partitions: a
  ``read_committed`` consumer gets every committed record once and no
  aborted one, a ``read_uncommitted`` consumer gets both; an open
  transaction holds ``read_committed`` readers at its first offset.
* ``send_offsets_to_transaction`` in a consume-transform-produce loop: the
  group's committed offsets move only when the transaction commits.
* Zombie fencing: a second producer with the same ``transactional.id``
  fences the first, whose next call fails with a fatal fenced error.
* A transaction left open past ``transaction.timeout.ms`` is aborted by
  the coordinator; its records never reach a ``read_committed`` consumer.
* The coordinator's state survives a restart: a committed transaction stays
  committed, and the id goes on at the next epoch.
* aiokafka's and kafka-python's transactional producers commit, abort and
  send offsets with a transaction.
* Operators (KIP-664, kafka-python's admin client): ListTransactions,
  DescribeTransactions and DescribeProducers show a hanging transaction;
  WriteTxnMarkers aborts it on its partition, as ``kafka-transactions.sh
  abort`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin._transactions import AbortTransactionSpec
from kafka.structs import OffsetAndMetadata

from testkit.waiting import wait_for
from tests.server.conftest import ThreadedServer, create_topic, inprocess_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadedServer]:
    """The daemon in process, its timed-out transactions looked for every 200 ms."""
    settings = inprocess_settings(tmp_path).with_overrides(
        transaction_abort_timed_out_transaction_cleanup_interval_ms=200
    )
    with ThreadedServer(settings) as running:
        yield running
    assert running.exit_code == 0


def producer(bootstrap: str, transactional_id: str, **extra: Any) -> confluent_kafka.Producer:
    p = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **extra}
    )
    p.init_transactions(30)
    return p


def read_all(
    bootstrap: str, topic: str, partitions: int, *, committed: bool
) -> dict[int, list[bytes]]:
    """Every value of ``topic`` up to its end (the LSO for read_committed), by partition."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        deadline = time.monotonic() + 60
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"stuck before the end: {got}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def test_read_committed_sees_committed_transactions_once_and_never_aborted_ones(
    server: ThreadedServer,
) -> None:
    topic = create_topic(server.bootstrap, 2, prefix="txn")
    p = producer(server.bootstrap, "tx-commit-abort")
    for n, commit in enumerate([True, False, True]):
        p.begin_transaction()
        for partition in (0, 1):
            p.produce(topic, f"t{n}-p{partition}".encode(), partition=partition)
        p.flush(30)  # in the log before it ends (an abort would drop what is still queued)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(30)  # in the log, its transaction still open
    committed = read_all(server.bootstrap, topic, 2, committed=True)
    assert committed == {0: [b"t0-p0", b"t2-p0"], 1: [b"t0-p1", b"t2-p1"]}
    everything = read_all(server.bootstrap, topic, 2, committed=False)
    assert everything == {
        0: [b"t0-p0", b"t1-p0", b"t2-p0", b"open"],
        1: [b"t0-p1", b"t1-p1", b"t2-p1"],
    }
    p.commit_transaction(30)
    assert read_all(server.bootstrap, topic, 2, committed=True)[0][-1] == b"open"


def test_offsets_sent_to_a_transaction_count_only_once_it_commits(server: ThreadedServer) -> None:
    source = create_topic(server.bootstrap, 1, prefix="src")
    sink = create_topic(server.bootstrap, 1, prefix="sink")
    plain = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap})
    for i in range(10):
        plain.produce(source, b"%d" % i)
    plain.flush(30)
    group = f"copier-{uuid.uuid4().hex[:8]}"
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(source, 0, 0)])
    p = producer(server.bootstrap, "tx-copier")

    def copy(count: int, *, commit: bool) -> None:
        p.begin_transaction()
        copied = 0
        while copied < count:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            p.produce(sink, b"copy-" + msg.value(), partition=0)
            copied += 1
        p.flush(30)
        p.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    def committed_offset() -> int:
        [tp] = consumer.committed([confluent_kafka.TopicPartition(source, 0)], timeout=30)
        return int(tp.offset)

    try:
        copy(4, commit=True)
        assert committed_offset() == 4
        copy(3, commit=False)
        assert committed_offset() == 4  # the aborted transaction's offsets never count
        consumer.seek(confluent_kafka.TopicPartition(source, 0, 4))
        copy(6, commit=True)
        assert committed_offset() == 10
    finally:
        consumer.close()
    assert read_all(server.bootstrap, sink, 1, committed=True) == {
        0: [b"copy-%d" % i for i in range(10)]
    }


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    server: ThreadedServer, caplog: pytest.LogCaptureFixture
) -> None:
    topic = create_topic(server.bootstrap, 1, prefix="zombie")
    zombie = producer(server.bootstrap, "tx-zombie")
    zombie.begin_transaction()
    zombie.produce(topic, b"from the zombie", partition=0)
    zombie.flush(30)
    successor = producer(server.bootstrap, "tx-zombie")  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce(topic, b"from the successor", partition=0)
    successor.commit_transaction(30)
    with (
        caplog.at_level(logging.INFO, logger="kfs_core.server.apis.transactions"),
        pytest.raises(confluent_kafka.KafkaException) as raised,
    ):
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    # The daemon says why, once for this client.
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert any(("tx-zombie" in m and "FENCED" in m) or "EPOCH" in m for m in refusals), refusals
    assert error.fatal() or error.txn_requires_abort(), error
    assert error.code() in (
        confluent_kafka.KafkaError._FENCED,
        confluent_kafka.KafkaError.PRODUCER_FENCED,
        confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    assert read_all(server.bootstrap, topic, 1, committed=True) == {0: [b"from the successor"]}


def test_a_transaction_open_past_its_timeout_is_aborted(server: ThreadedServer) -> None:
    topic = create_topic(server.bootstrap, 1, prefix="timeout")
    p = producer(server.bootstrap, "tx-slow", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce(topic, b"too slow", partition=0)
    p.flush(30)
    # The coordinator aborts it: read_committed readers move past it without its record.
    wait_for(
        lambda: (
            read_all(server.bootstrap, topic, 1, committed=True) == {0: []}
            and _end_offset(server.bootstrap, topic) == 2
        ),
        timeout=30,
        what="the timed-out transaction aborted",
    )
    with pytest.raises(confluent_kafka.KafkaException):
        p.commit_transaction(30)


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "probe", "isolation.level": "read_committed"}
    )
    try:
        _low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=10
        )
        return int(high)
    finally:
        consumer.close()


def test_a_committed_transaction_and_the_epoch_survive_a_restart(tmp_path: Path) -> None:
    settings = inprocess_settings(tmp_path)
    with ThreadedServer(settings) as first:
        topic = create_topic(first.bootstrap, 1, prefix="restart")
        p = producer(first.bootstrap, "tx-restart")
        p.begin_transaction()
        p.produce(topic, b"before", partition=0)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"left open", partition=0)
        p.flush(30)
    with ThreadedServer(settings) as second:
        successor = producer(second.bootstrap, "tx-restart")  # aborts what was left open
        successor.begin_transaction()
        successor.produce(topic, b"after", partition=0)
        successor.commit_transaction(30)
        assert read_all(second.bootstrap, topic, 1, committed=True) == {0: [b"before", b"after"]}


def test_operators_list_describe_and_abort_a_hanging_transaction(server: ThreadedServer) -> None:
    """KIP-664 through kafka-python's admin client: what ``kafka-transactions.sh`` calls."""
    topic = create_topic(server.bootstrap, 1, prefix="hanging")
    p = producer(server.bootstrap, "tx-hanging")
    p.begin_transaction()
    p.produce(topic, b"left open", partition=0)
    p.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        [listed] = [
            t
            for txns in admin.list_transactions().values()
            for t in txns
            if t.transactional_id == "tx-hanging"
        ]
        assert listed.state == "Ongoing"
        assert not admin.list_transactions(state_filters=["CompleteCommit"]).get(0)
        described = admin.describe_transactions(["tx-hanging"])["tx-hanging"]
        assert described.state == "Ongoing"
        assert described.producer_id == listed.producer_id
        assert described.topic_partitions == {TopicPartition(topic, 0)}
        assert described.transaction_start_time_ms > 0
        tp = TopicPartition(topic, 0)
        [state] = admin.describe_producers([tp])[tp].active_producers
        assert (state.producer_id, state.current_transaction_start_offset) == (
            listed.producer_id,
            0,
        )
        # Held at offset 0 by the open transaction, until an operator aborts it.
        assert _end_offset(server.bootstrap, topic) == 0
        admin.abort_transaction(AbortTransactionSpec(tp, state.producer_id, state.producer_epoch))
        assert _end_offset(server.bootstrap, topic) == 2
        assert read_all(server.bootstrap, topic, 1, committed=True) == {0: []}
        [state] = admin.describe_producers([tp])[tp].active_producers
        assert state.current_transaction_start_offset == -1
    finally:
        admin.close()


def test_aiokafka_and_kafka_python_transactional_producers(server: ThreadedServer) -> None:
    """The two pure-Python clients' transactions: commit, abort, offsets sent with a commit."""
    topic = create_topic(server.bootstrap, 2, prefix="pyclients")

    async def with_aiokafka() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=server.bootstrap, transactional_id="tx-aiokafka"
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aiokafka-committed", partition=0)
            with contextlib.suppress(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"aiokafka-aborted", partition=1)
                    raise RuntimeError("abort it")
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aiokafka-again", partition=1)
                await producer.send_offsets_to_transaction(
                    {aiokafka.TopicPartition(topic, 0): 1}, "aiokafka-group"
                )
        finally:
            await producer.stop()

    asyncio.run(with_aiokafka())

    kp = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tx-kafka-python")
    kp.init_transactions()
    kp.begin_transaction()
    kp.send(topic, b"kafka-python-committed", partition=1)
    kp.commit_transaction()
    kp.begin_transaction()
    kp.send(topic, b"kafka-python-aborted", partition=0)
    kp.flush()  # in the log, then aborted
    kp.abort_transaction()
    kp.begin_transaction()
    kp.send(topic, b"kafka-python-again", partition=0)
    kp.send_offsets_to_transaction(
        {TopicPartition(topic, 1): OffsetAndMetadata(2, "", -1)}, "kafka-python-group"
    )
    kp.commit_transaction()
    kp.close()

    committed = read_all(server.bootstrap, topic, 2, committed=True)
    assert sorted(v for values in committed.values() for v in values) == sorted(
        [b"aiokafka-committed", b"aiokafka-again", b"kafka-python-committed", b"kafka-python-again"]
    )
    everything = read_all(server.bootstrap, topic, 2, committed=False)
    assert {b"aiokafka-aborted", b"kafka-python-aborted"} <= {
        v for values in everything.values() for v in values
    }
    offsets = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        assert (
            offsets.list_group_offsets("aiokafka-group")["aiokafka-group"][
                TopicPartition(topic, 0)
            ].offset
            == 1
        )
        assert (
            offsets.list_group_offsets("kafka-python-group")["kafka-python-group"][
                TopicPartition(topic, 1)
            ].offset
            == 2
        )
    finally:
        offsets.close()
