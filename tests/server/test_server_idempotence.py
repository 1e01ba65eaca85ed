"""Idempotent producers over real sockets, and the transaction coordinator's raw answers.

* A retried idempotent batch (raw frames) is answered with its original
  offset and stored once; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old
  epoch INVALID_PRODUCER_EPOCH, a plain batch inside the producer's open
  transaction INVALID_TXN_STATE.
* The producer state survives ``kill -9`` (rebuilt from the WAL), a clean
  restart (its snapshot) and a lost snapshot (the segments' batch headers).
* confluent-kafka with ``enable.idempotence`` through a TCP proxy that
  resets its connections mid-stream: every value exactly once, in order.
* Transactions, raw: InitProducerId bumps the epoch; the coordinator's
  refusals carry Kafka's codes (unknown partitions, a wrong producer id, an
  EndTxn with nothing begun, a fenced epoch by request version).  Clients'
  transactions are in ``test_transactions_clients.py``.
"""

from __future__ import annotations

import shutil
import socket
import struct
import threading
import time
import warnings
from typing import Any

import confluent_kafka
import pytest

from kfs_core.records.batch import Record, encode_batch
from kfs_core.security.listeners import SecurityProtocol
from kfs_core.server.protocol import ErrorCode
from testkit.daemon import DaemonFactory
from testkit.raw_client import RawClient
from testkit.waiting import wait_for
from tests.server.conftest import ThreadedServer, create_topic

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka.protocol.consumer import ListOffsetsRequest
    from kafka.protocol.producer import (
        AddPartitionsToTxnRequest,
        EndTxnRequest,
        InitProducerIdRequest,
        ProduceRequest,
    )

pytestmark = pytest.mark.integration


# --- raw helpers ---------------------------------------------------------------------------


def init_producer_id(client: RawClient, transactional_id: str | None = None) -> Any:
    return client.request(
        InitProducerIdRequest(
            version=4,
            transactional_id=transactional_id,
            transaction_timeout_ms=60_000,
            producer_id=-1,
            producer_epoch=-1,
        )
    )


def idempotent_batch(
    pid: int, epoch: int, seq: int, count: int, *, transactional: bool = False
) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch(
        [Record(i, now, None, b"seq-%d" % (seq + i)) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


def produce(client: RawClient, topic: str, batch: bytes) -> tuple[int, int]:
    """(error code, base offset) of one partition-0 produce."""
    data = ProduceRequest.TopicProduceData
    response = client.request(
        ProduceRequest(
            version=9,
            transactional_id=None,
            acks=-1,
            timeout_ms=10_000,
            topic_data=[
                data(
                    name=topic,
                    partition_data=[data.PartitionProduceData(index=0, records=batch)],
                )
            ],
        )
    )
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def high_watermark(client: RawClient, topic: str) -> int:
    listed = ListOffsetsRequest.ListOffsetsTopic
    response = client.request(
        ListOffsetsRequest(
            version=7,
            replica_id=-1,
            isolation_level=0,
            topics=[
                listed(
                    name=topic,
                    partitions=[
                        listed.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=-1
                        )
                    ],
                )
            ],
        )
    )
    [partition] = response.topics[0].partitions
    assert partition.error_code == 0
    return int(partition.offset)


# --- sequence rules on the wire ------------------------------------------------------------


def test_a_retried_batch_gets_its_original_offset_and_is_stored_once(
    inprocess: ThreadedServer,
) -> None:
    with RawClient(inprocess.bootstrap) as client:
        init = init_producer_id(client)
        assert init.error_code == 0 and init.producer_epoch == 0
        pid = init.producer_id
        first, second = idempotent_batch(pid, 0, 0, 3), idempotent_batch(pid, 0, 3, 2)
        assert produce(client, "idem", first) == (0, 0)
        assert produce(client, "idem", second) == (0, 3)
        assert produce(client, "idem", first) == (0, 0)  # a retry: the original offset
        assert produce(client, "idem", second) == (0, 3)
        assert high_watermark(client, "idem") == 5  # written once
        assert produce(client, "idem", idempotent_batch(pid, 0, 5, 1)) == (0, 5)
        # Another producer id is another producer.
        other = init_producer_id(client).producer_id
        assert other != pid
        assert produce(client, "idem", idempotent_batch(other, 0, 0, 3)) == (0, 6)


def test_gaps_old_epochs_and_transactional_batches_are_refused(
    inprocess: ThreadedServer,
) -> None:
    with RawClient(inprocess.bootstrap) as client:
        pid = init_producer_id(client).producer_id
        assert produce(client, "rules", idempotent_batch(pid, 0, 0, 2)) == (0, 0)
        code, _ = produce(client, "rules", idempotent_batch(pid, 0, 5, 1))
        assert code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        code, _ = produce(client, "rules", idempotent_batch(pid, 1, 3, 1))
        assert code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # a new epoch starts at 0
        assert produce(client, "rules", idempotent_batch(pid, 1, 0, 1)) == (0, 2)
        code, _ = produce(client, "rules", idempotent_batch(pid, 0, 2, 1))
        assert code == ErrorCode.INVALID_PRODUCER_EPOCH  # fenced by epoch 1
        # A transactional batch opens a transaction of the producer here...
        assert produce(client, "rules", idempotent_batch(pid, 1, 1, 1, transactional=True)) == (
            0,
            3,
        )
        # ...inside which its plain batches are refused.
        code, _ = produce(client, "rules", idempotent_batch(pid, 1, 2, 1))
        assert code == ErrorCode.INVALID_TXN_STATE
        assert high_watermark(client, "rules") == 4
        # Plain batches are not checked at all.
        plain = encode_batch([Record(0, int(time.time() * 1000), None, b"x")])
        assert produce(client, "rules", plain) == (0, 4)
        assert produce(client, "rules", plain) == (0, 5)


def add_partitions(
    client: RawClient, pid: int, epoch: int, topic: str, *, version: int = 1
) -> list[int]:
    add = AddPartitionsToTxnRequest(
        version=version,
        v3_and_below_transactional_id="tx-1",
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0, 1])
        ],
    )
    [answer] = client.request(add).results_by_topic_v3_and_below
    return [p.partition_error_code for p in answer.results_by_partition]


def end_txn(client: RawClient, pid: int, epoch: int, *, commit: bool = True) -> int:
    end = EndTxnRequest(
        version=1, transactional_id="tx-1", producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return int(client.request(end).error_code)


def test_the_transaction_coordinator_answers_with_kafkas_codes(
    inprocess: ThreadedServer,
) -> None:
    create_topic(inprocess.bootstrap, 2, "txn-raw")
    with RawClient(inprocess.bootstrap) as client:
        first = init_producer_id(client, transactional_id="tx-1")
        assert first.error_code == ErrorCode.NONE and first.producer_epoch == 0
        pid = first.producer_id
        assert end_txn(client, pid, 0) == ErrorCode.INVALID_TXN_STATE  # nothing begun
        assert (
            add_partitions(client, pid, 0, "no-such-topic")
            == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
        )
        assert (
            add_partitions(client, pid + 1, 0, "txn-raw")
            == [ErrorCode.INVALID_PRODUCER_ID_MAPPING] * 2
        )
        assert add_partitions(client, pid, 0, "txn-raw") == [ErrorCode.NONE] * 2
        assert end_txn(client, pid, 0, commit=False) == ErrorCode.NONE
        # The retry of an abort that completed succeeds; a commit of it does not.
        assert wait_for(lambda: end_txn(client, pid, 0, commit=False) == ErrorCode.NONE)
        assert end_txn(client, pid, 0) == ErrorCode.INVALID_TXN_STATE
        second = init_producer_id(client, transactional_id="tx-1")
        assert (second.producer_id, second.producer_epoch) == (pid, 1)
        # The first instance is fenced: INVALID_PRODUCER_EPOCH before v2, PRODUCER_FENCED after.
        assert add_partitions(client, pid, 0, "txn-raw") == [ErrorCode.INVALID_PRODUCER_EPOCH] * 2
        assert (
            add_partitions(client, pid, 0, "txn-raw", version=2) == [ErrorCode.PRODUCER_FENCED] * 2
        )
        too_long = client.request(
            InitProducerIdRequest(
                version=4,
                transactional_id="tx-2",
                transaction_timeout_ms=3_600_000,
                producer_id=-1,
                producer_epoch=-1,
            )
        )
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_the_next_transaction_waits_for_the_last_ones_markers_instead_of_a_refusal(
    inprocess: ThreadedServer,
) -> None:
    """AddPartitionsToTxn right after EndTxn: answered once the markers are in, not refused."""
    create_topic(inprocess.bootstrap, 2, "txn-next")
    with RawClient(inprocess.bootstrap) as client:
        started = init_producer_id(client, transactional_id="tx-1")
        pid, epoch = started.producer_id, started.producer_epoch
        for round_ in range(20):
            assert add_partitions(client, pid, epoch, "txn-next") == [ErrorCode.NONE] * 2, round_
            batch = idempotent_batch(pid, epoch, round_, 1, transactional=True)
            assert produce(client, "txn-next", batch)[0] == ErrorCode.NONE
            assert end_txn(client, pid, epoch, commit=round_ % 2 == 0) == ErrorCode.NONE
        # A record and a marker per round; the last marker may still be on its way.
        wait_for(lambda: high_watermark(client, "txn-next") == 40, what="the last marker")


# --- restart -------------------------------------------------------------------------------


def test_producer_state_survives_kill_restart_and_a_lost_snapshot(
    daemons: DaemonFactory,
) -> None:
    daemon = daemons.start(extra_args=["--flush-interval-ms", "3600000"])
    with RawClient(daemon.bootstrap) as client:
        pid = init_producer_id(client).producer_id
        batches = [idempotent_batch(pid, 0, seq, 2) for seq in range(0, 8, 2)]
        for n, batch in enumerate(batches[:2]):
            assert produce(client, "durable", batch) == (0, 2 * n)
    daemon.kill()  # nothing flushed: the state comes back from the WAL
    daemon.start()
    with RawClient(daemon.bootstrap) as client:
        assert produce(client, "durable", batches[1]) == (0, 2)
        assert produce(client, "durable", batches[2]) == (0, 4)
        code, _ = produce(client, "durable", idempotent_batch(pid, 0, 9, 1))
        assert code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    daemon.restart()  # a clean stop flushes and snapshots
    snapshots = daemon.data_dir / "wal" / "producer-state"
    assert (snapshots / "durable-0.json").exists()
    with RawClient(daemon.bootstrap) as client:
        assert produce(client, "durable", batches[2]) == (0, 4)
        assert produce(client, "durable", batches[3]) == (0, 6)
    assert daemon.stop() == 0
    shutil.rmtree(snapshots)  # lost: rebuilt from the segments' batch headers
    daemon.start()
    with RawClient(daemon.bootstrap) as client:
        for n, batch in enumerate(batches):
            assert produce(client, "durable", batch) == (0, 2 * n)
        assert high_watermark(client, "durable") == 8


# --- confluent-kafka through a connection-resetting proxy ----------------------------------


class ResettingProxy:
    """A TCP proxy that resets (RST) both sides of a connection every ``reset_every`` bytes.

    Bytes a client sent may have reached the broker when the reset comes,
    and its answer is lost: the client must retry, and the broker must not
    store the retry twice.
    """

    def __init__(self, upstream: tuple[str, int], reset_every: int) -> None:
        self.upstream = upstream
        self.reset_every = reset_every
        self.resets = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._forwarded = 0
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._start(self._accept)

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            pair = (client, server)
            self._start(self._pump, client, server, pair, True)
            self._start(self._pump, server, client, pair, False)

    def _pump(
        self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, ...], up: bool
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if up:
                    with self._lock:
                        self._forwarded += len(data)
                        due = self._forwarded >= self.reset_every
                        if due:
                            self._forwarded = 0
                            self.resets += 1
                    if due:
                        self._reset(pair)
                        return
        except OSError:
            pass
        finally:
            self._reset(pair)

    @staticmethod
    def _reset(pair: tuple[socket.socket, ...]) -> None:
        for sock in pair:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def test_an_idempotent_producer_through_resets_writes_each_value_once_in_order(
    inprocess: ThreadedServer,
) -> None:
    server = inprocess.server
    assert server.broker is not None
    proxy = ResettingProxy(("127.0.0.1", server.kafka_port), reset_every=48 * 1024)
    # Clients learn the broker's address from Metadata: make it the proxy's.
    server.advertised[SecurityProtocol.PLAINTEXT] = ("127.0.0.1", proxy.port)
    topic, count = "through-resets", 20_000
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{proxy.port}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.size": 4096,
            "retry.backoff.ms": 10,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 100,
            "message.timeout.ms": 120_000,
        }
    )
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    try:
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, value=b"%08d" % i, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)  # the local queue is full: let deliveries drain it
            producer.poll(0)
        assert producer.flush(120) == 0
    finally:
        del producer  # stops librdkafka's threads before the proxy goes away
        proxy.close()
        # The proxy is gone: the consumer below must be told the broker's own address.
        server.advertised[SecurityProtocol.PLAINTEXT] = ("127.0.0.1", server.kafka_port)
    assert not errors, errors[:3]
    assert proxy.resets >= 3, "the proxy never reset a connection: the test proves nothing"

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": inprocess.bootstrap,
            "group.id": "idempotence-check",
            "enable.auto.commit": False,
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )

        def all_read() -> bool:
            for msg in consumer.consume(1000, 0.2):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
            return len(got) >= count

        try:
            wait_for(all_read, timeout=60, interval=0, what=f"{count} records")
        except TimeoutError:
            raise AssertionError(f"read {len(got)} of {count}: {sorted(set(got))[-3:]}") from None
        # Nothing beyond: the high watermark is exactly `count`.
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=10
        )
    finally:
        consumer.close()
    assert (low, high) == (0, count)
    assert got == [b"%08d" % i for i in range(count)]  # no duplicate, no gap, in order
