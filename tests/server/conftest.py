"""Fixtures for the daemon tests: `kfs serve` as a subprocess or in-process, and client helpers.

`daemons` (and its module-scoped kin) is a `testkit.daemon.DaemonFactory`:
``python -m kfs_core.cli serve`` on free loopback ports with its own data
directory and store (a local directory, or S3 on the moto server of
tests/conftest.py), every process it started killed at teardown.  `Daemon`
and `DaemonFactory` live in testkit.daemon (the soak campaigns drive them
too); they are imported here for the tests that import them from this module.

`ThreadedServer` runs `KfsServer.run` on a thread of the test process (where a
test can monkeypatch the daemon); the `inprocess` fixture is one over a local
store in ``tmp_path``, built from `inprocess_settings`.  `create_topic` creates
a topic through confluent-kafka's admin client.  `produce_request` is a Produce
for `testkit.raw_client.RawClient` to send.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kfs_core.config import Settings
from kfs_core.records.batch import Record, encode_batch
from kfs_core.server.app import KfsServer
from testkit.daemon import Daemon, DaemonFactory
from testkit.waiting import wait_for

# kafka-python can warn that importlib.resources.read_text is deprecated when
# its protocol modules load; allow exactly that, only around the imports.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    import confluent_kafka
    import confluent_kafka.admin
    import kafka
    from kafka.structs import TopicPartition as KafkaPythonTopicPartition

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[DaemonFactory]:
    factory = DaemonFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def module_daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonFactory]:
    factory = DaemonFactory(tmp_path_factory.mktemp("daemons"))
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def local_daemon(module_daemons: DaemonFactory) -> Daemon:
    """One daemon over a local-directory store, shared by a module's tests."""
    return module_daemons.start(name="local", extra_args=["--default-partitions", "3"])


@pytest.fixture(scope="module")
def s3_daemon(module_daemons: DaemonFactory, moto_server: str, s3_bucket: str) -> Daemon:
    """One daemon over S3 on moto, shared by a module's tests."""
    return module_daemons.start(
        name="s3",
        store_url=f"s3://{s3_bucket}/daemon-{uuid.uuid4().hex[:8]}",
        s3_endpoint_url=moto_server,
        extra_args=["--default-partitions", "3"],
    )


@pytest.fixture(scope="module", params=["local", "s3"])
def daemon(request: pytest.FixtureRequest) -> Daemon:
    """The same test against a daemon on the local store and one on S3 (moto)."""
    value: Daemon = request.getfixturevalue(f"{request.param}_daemon")
    return value


# --- in process ------------------------------------------------------------------------


class ThreadedServer:
    """`KfsServer.run` on an event loop in a thread of this process."""

    def __init__(self, settings: Settings) -> None:
        self.server = KfsServer(settings.with_overrides(default_partitions=1))
        self.exit_code: int | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="kfs-serve", daemon=True)

    def _run(self) -> None:
        self.exit_code = self._loop.run_until_complete(
            self.server.run(install_signal_handlers=False)
        )
        self._loop.close()

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        wait_for(lambda: self.server.ready or self.exit_code is not None, what="ready")
        assert self.server.ready, f"exited with {self.exit_code}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._loop.call_soon_threadsafe(self.server.request_stop)
        self._thread.join(30)
        assert not self._thread.is_alive()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.kafka_port}"


def inprocess_settings(tmp_path: Path) -> Settings:
    """A local store and data directory under ``tmp_path``, on free loopback ports."""
    return Settings(
        store_url=(tmp_path / "store").as_uri(),
        data_dir=str(tmp_path / "data"),
        listen="127.0.0.1:0",
        metrics_listen="127.0.0.1:0",
    )


@pytest.fixture
def inprocess(tmp_path: Path) -> Iterator[ThreadedServer]:
    """The daemon in this process over `inprocess_settings`; it must stop with exit code 0."""
    with ThreadedServer(inprocess_settings(tmp_path)) as running:
        yield running
    assert running.exit_code == 0


# --- clients -------------------------------------------------------------------------

Delivered = list[tuple[int, int, bytes]]  # (partition, offset, value)


def create_topic(
    bootstrap: str, partitions: int, topic: str | None = None, *, prefix: str = "topic"
) -> str:
    """Create ``topic`` with confluent-kafka's admin client; its name.

    The default name is a fresh ``<prefix>-<8 hex digits>``; the replication
    factor is 1.  Raises if the broker refused it.
    """
    topic = topic or f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [confluent_kafka.admin.NewTopic(topic, partitions, 1)]
    ).values():
        future.result(30)
    return topic


def produce_confluent(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes],
    *,
    partitions: int = 3,
    codec: str = "none",
    acks: str = "all",
    extra: dict[str, Any] | None = None,
    timestamp_ms: int | None = None,
) -> Delivered:
    """Produce ``values`` round-robin over ``partitions``; what the broker acknowledged.

    ``timestamp_ms`` sets every record's create time (default: now).  Any
    delivery error fails the caller.
    """
    delivered, errors = produce_confluent_outcomes(
        bootstrap,
        topic,
        values,
        partitions=partitions,
        codec=codec,
        acks=acks,
        extra=extra,
        timestamp_ms=timestamp_ms,
    )
    assert not errors, errors[:3]
    return delivered


def produce_confluent_outcomes(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes],
    *,
    partitions: int = 3,
    codec: str = "none",
    acks: str = "all",
    extra: dict[str, Any] | None = None,
    timestamp_ms: int | None = None,
) -> tuple[Delivered, list[Any]]:
    """`produce_confluent`, returning the delivery errors (``KafkaError``) instead of failing."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "acks": acks,
            "linger.ms": 5,
            **(extra or {}),
        }
    )
    delivered: Delivered = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset(), msg.value()))

    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=b"key-%d" % i,
                    partition=i % partitions,
                    on_delivery=on_delivery,
                    **({"timestamp": timestamp_ms} if timestamp_ms is not None else {}),
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    return delivered, errors


def consume_confluent(bootstrap: str, topic: str, partitions: int, count: int) -> Delivered:
    """``count`` records from partitions 0..n-1 of ``topic``, from the beginning."""
    return consume_confluent_topics(bootstrap, [topic], partitions, count)[topic]


def consume_confluent_topics(
    bootstrap: str, topics: Sequence[str], partitions: int, count: int
) -> dict[str, Delivered]:
    """``count`` records in all from several topics, with one consumer; by topic."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kfs-test",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    got: dict[str, Delivered] = {topic: [] for topic in topics}
    received = 0
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for topic in topics
                for p in range(partitions)
            ]
        )
        deadline = time.monotonic() + 60
        while received < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.topic()].append((msg.partition(), msg.offset(), msg.value()))
            received += 1
    finally:
        consumer.close()
    return got


def produce_kafka_python(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes],
    *,
    partitions: int = 3,
    codec: str = "none",
) -> Delivered:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=5,
    )
    try:
        futures = [
            (producer.send(topic, value=value, key=b"key-%d" % i, partition=i % partitions), value)
            for i, value in enumerate(values)
        ]
        producer.flush(60)
        delivered: Delivered = []
        for future, value in futures:
            metadata = future.get(timeout=60)
            delivered.append((metadata.partition, metadata.offset, value))
    finally:
        producer.close(timeout=10)
    return delivered


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, count: int) -> Delivered:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    got: Delivered = []
    try:
        assigned = [KafkaPythonTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [(r.partition, r.offset, r.value) for r in records]
    finally:
        consumer.close()
    return got


def by_partition(records: Delivered) -> dict[int, list[tuple[int, bytes]]]:
    """Records grouped by partition, in offset order."""
    grouped: dict[int, list[tuple[int, bytes]]] = {}
    for partition, offset, value in records:
        grouped.setdefault(partition, []).append((offset, value))
    return {p: sorted(rows) for p, rows in sorted(grouped.items())}


# --- raw protocol ----------------------------------------------------------------------


def produce_request(topic: str, values: list[bytes], partition: int = 0) -> Any:
    """A Produce v9 (acks=all) of ``values`` to ``partition`` of ``topic``, as kafka-python encodes it."""
    with warnings.catch_warnings():  # kafka-python's protocol module, as test_protocol imports it
        warnings.filterwarnings(
            "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
        )
        from kafka.protocol.producer import ProduceRequest

    batch = encode_batch(
        [Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)]
    )
    return ProduceRequest(
        version=9,
        transactional_id=None,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=partition, records=batch
                    )
                ],
            )
        ],
    )
