"""Fixtures for the daemon tests: `kfs serve` as a subprocess or in-process, and client helpers.

`DaemonFactory` starts ``python -m kfs_core.cli serve`` on free loopback
ports with its own data directory and store (a local directory, or S3 on
the moto server of tests/conftest.py), waits for /readyz with a deadline,
and kills every process it started at teardown.  `Daemon.stop` sends SIGTERM
and returns the exit code; `Daemon.kill` is ``kill -9``; `Daemon.restart`
starts a new process on the same ports, data directory and store.

`ThreadedServer` runs `KfsServer.run` on a thread of the test process (where a
test can monkeypatch the daemon); the `inprocess` fixture is one over a local
store in ``tmp_path``, built from `inprocess_settings`.  `create_topic` creates
a topic through confluent-kafka's admin client.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kfs_core.config import Settings
from kfs_core.records.batch import Record, encode_batch
from kfs_core.server.app import KfsServer
from tests.conftest import _free_port, wait_for

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

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass
class Daemon:
    """One `kfs serve` process and how to reach it."""

    kafka_port: int
    metrics_port: int
    data_dir: Path
    store_url: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    factory: DaemonFactory | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Daemon:
        assert not self.alive()
        with open(self.log_path, "ab") as out:
            out.write(b"\n--- start ---\n")
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kfs_core.cli", "serve", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        def ready_or_gone() -> bool:
            return not self.alive() or self.http("/readyz")[0] == 200

        try:
            wait_for(ready_or_gone, timeout=READY_TIMEOUT_S, what="kfs serve /readyz")
        except TimeoutError:
            raise TimeoutError(f"kfs serve never became ready:\n{self.log()[-4000:]}") from None
        if not self.alive():
            raise RuntimeError(f"kfs serve exited early:\n{self.log()[-4000:]}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then wait; the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"kfs serve ignored SIGTERM:\n{self.log()[-4000:]}") from None

    def kill(self) -> None:
        """kill -9."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def restart(self) -> Daemon:
        if self.alive():
            assert self.stop() == 0, self.log()[-4000:]
        return self.start()


class DaemonFactory:
    """Starts daemons under a directory and guarantees none outlives the test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.daemons: list[Daemon] = []

    def start(
        self,
        *,
        store_url: str | None = None,
        s3_endpoint_url: str | None = None,
        extra_args: Sequence[str] = (),
        name: str | None = None,
    ) -> Daemon:
        home = self.root / (name or f"kfs-{len(self.daemons)}")
        home.mkdir(parents=True, exist_ok=True)
        data_dir = home / "data"
        store_url = store_url or (home / "store").as_uri()
        kafka_port, metrics_port = _free_port(), _free_port()
        args = [
            "--listen", f"127.0.0.1:{kafka_port}",
            "--metrics-listen", f"127.0.0.1:{metrics_port}",
            "--data-dir", str(data_dir),
            "--store-url", store_url,
            "--namespace", "test",
            *(["--s3-endpoint-url", s3_endpoint_url] if s3_endpoint_url else []),
            *extra_args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("KFS_")}
        env["KFS_HOME"] = str(home)
        env["PYTHONUNBUFFERED"] = "1"
        daemon = Daemon(
            kafka_port=kafka_port,
            metrics_port=metrics_port,
            data_dir=data_dir,
            store_url=store_url,
            args=args,
            env=env,
            log_path=home / "kfs-serve.log",
            factory=self,
        )
        self.daemons.append(daemon)
        return daemon.start()

    def close(self) -> None:
        for daemon in self.daemons:
            if daemon.alive():
                assert daemon.proc is not None
                daemon.proc.kill()
                daemon.proc.wait(10)


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
    """Create ``topic`` (default: a fresh ``<prefix>-<8 hex digits>``) with confluent-kafka's
    admin client, replication factor 1; its name.  Raises if the broker refused it."""
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


class RawClient:
    """A bare socket speaking the protocol with kafka-python's message classes."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, message: Any) -> int:
        self._correlation += 1
        message.with_header(correlation_id=self._correlation, client_id="kfs-raw")
        self.sock.sendall(bytes(message.encode(header=True, framed=True)))
        return self._correlation

    def read_frame(self) -> bytes | None:
        """One response frame's payload; None when the server closed the connection."""
        prefix = self._read_exactly(4)
        if prefix is None:
            return None
        (size,) = struct.unpack(">i", prefix)
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes | None:
        chunks = b""
        while len(chunks) < n:
            try:
                chunk = self.sock.recv(n - len(chunks))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks += chunk
        return chunks

    def request(self, message: Any) -> Any:
        """Send ``message``; its response, decoded by kafka-python as its client does."""
        self.send(message)
        return self.read_response(message)

    def read_response(self, message: Any) -> Any:
        """The next response frame, which must answer ``message`` (already sent)."""
        payload = self.read_frame()
        assert payload is not None, "the server closed the connection"
        response_class = message.header.get_response_class()
        buffer = io.BytesIO(payload)
        assert response_class.parse_header(buffer).correlation_id == message.header.correlation_id
        return response_class.decode(buffer)

    def closed_by_server(self, timeout: float = 10.0) -> bool:
        """Whether the server closes the connection (reads until EOF, within ``timeout``)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


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
