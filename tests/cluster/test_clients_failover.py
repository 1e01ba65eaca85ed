"""Every client in the suite produces and consumes through a failover.

Three `store`-mode daemons share a namespace; a client library's producer
(idempotent, acks=all) and consumer, each one instance for the whole test,
write and read a 6-partition topic; then the daemon leading partition 0 is
killed with ``kill -9`` and the same instances go on: the producer's records
on the dead daemon's partitions are acknowledged by their new leader, the
consumer reads on from where it was.  No error reaches the application, and
every acknowledged record is read back once, at its offset, by the client
and by confluent-kafka.

The clients: confluent-kafka, kafka-python and aiokafka in this process;
KafkaJS (tests/clients/kafkajs/failover.js, its group consumer, and its
idempotent producer) and kcat (a ``kcat -P`` and a ``kcat -C`` process).
`make test` installs node, KafkaJS and kcat; without them these tests fail
and say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import shutil
import subprocess
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import aiokafka
import confluent_kafka
import pytest

from testkit.daemon import Daemon, DaemonFactory, node_id_of
from testkit.waiting import wait_for
from tests.cluster.test_daemons import PARTITIONS, bootstrap, create_topic, leaders, read_all

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's importlib.resources
    import kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

Record = tuple[int, int, bytes]  # (partition, offset, value)
#: Records written before the kill, and as many after it.
COUNT = 30
#: Long enough for the session timeout, the takeover and a client's own retries.
DEADLINE_S = 90.0
KAFKAJS = Path(__file__).resolve().parents[1] / "clients" / "kafkajs"
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


class Client(Protocol):
    """One library's producer and consumer, alive from the first record to the last."""

    def produce(self, prefix: str, count: int) -> list[Record]:
        """``count`` records round robin over the partitions; each as acknowledged."""
        ...

    def consume(self, count: int) -> list[Record]:
        """The next ``count`` records the consumer reads."""
        ...

    def close(self) -> None:
        """Close the producer and the consumer."""
        ...


def values(prefix: str, count: int) -> list[tuple[int, bytes]]:
    return [(i % PARTITIONS, f"{prefix}{i}".encode()) for i in range(count)]


class ConfluentKafka:
    def __init__(self, servers: str, topic: str) -> None:
        self.topic = topic
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": servers,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": int(DEADLINE_S * 1000),
                "topic.metadata.refresh.interval.ms": 500,
                "retry.backoff.ms": 100,
            }
        )
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": f"failover-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 500,
                "fetch.wait.max.ms": 100,
            }
        )
        self.consumer.assign(
            [confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)]
        )

    def produce(self, prefix: str, count: int) -> list[Record]:
        acked: list[Record] = []
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked.append((msg.partition(), msg.offset(), msg.value()))

        for partition, value in values(prefix, count):
            self.producer.produce(self.topic, value, partition=partition, on_delivery=delivered)
        assert self.producer.flush(DEADLINE_S) == 0
        assert not errors, errors[:3]
        return acked

    def consume(self, count: int) -> list[Record]:
        got: list[Record] = []

        def enough() -> bool:
            while len(got) < count and (msg := self.consumer.poll(0.2)) is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.offset(), msg.value()))
            return len(got) >= count

        wait_for(enough, timeout=DEADLINE_S, what=f"{count} records through confluent-kafka")
        return got

    def close(self) -> None:
        self.consumer.close()


class KafkaPython:
    def __init__(self, servers: str, topic: str) -> None:
        self.topic = topic
        brokers = servers.split(",")
        self.producer = kafka.KafkaProducer(
            bootstrap_servers=brokers,
            acks="all",
            enable_idempotence=True,
            delivery_timeout_ms=int(DEADLINE_S * 1000),
            request_timeout_ms=10_000,
            metadata_max_age_ms=1000,
            retry_backoff_ms=100,
        )
        self.consumer = kafka.KafkaConsumer(
            bootstrap_servers=brokers,
            enable_auto_commit=False,
            metadata_max_age_ms=1000,
            request_timeout_ms=10_000,
            retry_backoff_ms=100,
        )
        partitions = [kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.consumer.assign(partitions)
        self.consumer.seek_to_beginning(*partitions)

    def produce(self, prefix: str, count: int) -> list[Record]:
        sent = [
            (value, self.producer.send(self.topic, value=value, partition=partition))
            for partition, value in values(prefix, count)
        ]
        self.producer.flush(timeout=DEADLINE_S)
        acked = []
        for value, future in sent:
            meta = future.get(timeout=DEADLINE_S)  # raises the error the application would see
            acked.append((meta.partition, meta.offset, value))
        return acked

    def consume(self, count: int) -> list[Record]:
        got: list[Record] = []

        def enough() -> bool:
            for batch in self.consumer.poll(timeout_ms=200, max_records=count - len(got)).values():
                got.extend((m.partition, m.offset, m.value) for m in batch)
            return len(got) >= count

        wait_for(enough, timeout=DEADLINE_S, what=f"{count} records through kafka-python")
        return got

    def close(self) -> None:
        self.producer.close(timeout=10)
        self.consumer.close()


class AioKafka:
    """aiokafka's producer and consumer on an event loop of their own."""

    def __init__(self, servers: str, topic: str) -> None:
        self.topic = topic
        self.servers = servers
        self.loop = asyncio.new_event_loop()
        self.producer, self.consumer = self.loop.run_until_complete(self._start())

    async def _start(self) -> tuple[aiokafka.AIOKafkaProducer, aiokafka.AIOKafkaConsumer]:
        # aiokafka's clients belong to the loop they are made on.
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=self.servers,
            acks="all",
            enable_idempotence=True,
            request_timeout_ms=int(DEADLINE_S * 1000),
            metadata_max_age_ms=1000,
            retry_backoff_ms=100,
        )
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=self.servers,
            enable_auto_commit=False,
            metadata_max_age_ms=1000,
            request_timeout_ms=10_000,
            retry_backoff_ms=100,
        )
        await producer.start()
        await consumer.start()
        partitions = [aiokafka.TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        return producer, consumer

    def produce(self, prefix: str, count: int) -> list[Record]:
        async def send() -> list[Record]:
            futures = [
                (value, await self.producer.send(self.topic, value=value, partition=partition))
                for partition, value in values(prefix, count)
            ]
            acked = []
            for value, future in futures:
                meta = await future
                acked.append((meta.partition, meta.offset, value))
            return acked

        return self.loop.run_until_complete(send())

    def consume(self, count: int) -> list[Record]:
        async def read() -> list[Record]:
            got: list[Record] = []
            while len(got) < count:
                batches = await self.consumer.getmany(timeout_ms=200, max_records=count - len(got))
                for batch in batches.values():
                    got.extend((m.partition, m.offset, m.value) for m in batch)
            return got

        return self.loop.run_until_complete(asyncio.wait_for(read(), DEADLINE_S))

    def close(self) -> None:
        async def stop() -> None:
            await self.producer.stop()
            # aiokafka's fetcher awaits the fetch tasks it cancels: one in its
            # retry backoff for the dead daemon ends its stop with CancelledError.
            with contextlib.suppress(asyncio.CancelledError):
                await self.consumer.stop()

        self.loop.run_until_complete(stop())
        self.loop.close()


class Lines:
    """A child process's stdout, a line at a time, collected on a thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.queue: queue.Queue[bytes] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.queue.put(line)

    def next(self, what: str) -> bytes:
        try:
            return self.queue.get(timeout=DEADLINE_S)
        except queue.Empty:
            raise AssertionError(f"nothing more from {what} in {DEADLINE_S:g} s") from None


class KafkaJs:
    """One ``node failover.js`` process: its idempotent producer and group consumer."""

    def __init__(self, servers: str, topic: str, log_dir: Path) -> None:
        node = shutil.which("node")
        if node is None or not (KAFKAJS / "node_modules" / "kafkajs").is_dir():
            pytest.fail("node or KafkaJS is missing; run `make kafkajs`")
        self.stderr_path = log_dir / "kafkajs-failover.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in close()
        group = f"failover-{uuid.uuid4().hex[:6]}"
        self.proc = subprocess.Popen(
            [node, "failover.js", servers, topic, group],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=KAFKAJS,
        )
        assert self.proc.stdout is not None
        self.lines = Lines(self.proc.stdout)
        self.records: list[Record] = []  # every record the consumer read
        self.taken = 0  # how many of them `consume` has returned
        self._read_until(lambda event: event["event"] == "ready")

    def _event(self) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(self.lines.next("failover.js"))
        if event["event"] == "record":
            self.records.append((event["partition"], event["offset"], event["value"].encode()))
        assert event["event"] != "error", f"{event['error']}\n{self.stderr()}"
        return event

    def _read_until(self, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        events = []
        while not done(event := self._event()):
            events.append(event)
        return events

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def produce(self, prefix: str, count: int) -> list[Record]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"produce {prefix} {count}\n".encode())
        self.proc.stdin.flush()
        events = self._read_until(lambda event: event["event"] == "done")
        return [
            (e["partition"], e["offset"], e["value"].encode())
            for e in events
            if e["event"] == "produced"
        ]

    def consume(self, count: int) -> list[Record]:
        while len(self.records) < self.taken + count:
            self._event()
        got = self.records[self.taken : self.taken + count]
        self.taken += count
        return got

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        finally:
            self.proc.kill()
            self._stderr.close()


def open_client(name: str, servers: str, topic: str, log_dir: Path) -> Client:
    if name == "kafkajs":
        return KafkaJs(servers, topic, log_dir)
    kinds: dict[str, Callable[[str, str], Client]] = {
        "confluent-kafka": ConfluentKafka,
        "kafka-python": KafkaPython,
        "aiokafka": AioKafka,
    }
    return kinds[name](servers, topic)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Daemon]]:
    factory = DaemonFactory(tmp_path)
    try:
        yield factory.start_cluster(3, store_url=(tmp_path / "store").as_uri())
    finally:
        factory.close()


def kill_the_leader_of_partition_0(daemons: list[Daemon], topic: str) -> set[int]:
    """``kill -9`` of the daemon leading partition 0; the partitions it led."""
    led = wait_for(
        lambda: (found := leaders(bootstrap(daemons), topic)) and min(found.values()) > 0 and found,
        timeout=30,
        what="every partition led",
    )
    victim = next(d for d in daemons if node_id_of(d) == led[0])
    victim.kill()
    return {p for p, node in led.items() if node == led[0]}


def check(
    acked: list[Record],
    consumed: list[Record],
    stored: dict[tuple[int, int], bytes],
    read_before: Sequence[Record] = (),
) -> None:
    """Each acknowledged record stored at its offset, and consumed there, nothing else.

    Each is consumed once, except that a record read before the failover may
    be read again: a group consumer is at least once across a coordinator's
    death (the commit of what it had just read may have been in flight to
    the dead daemon, and Kafka's clients then resume from the last commit).
    """
    # librdkafka counts a record delivered without an offset when the daemon it
    # was sent to died unanswered and a later batch's ack implies it: placed
    # here where it is stored, by its value (each value is unique).
    where = {(p, v): o for (p, o), v in stored.items()}
    acked = [(p, where.get((p, v), -1) if o is None else o, v) for p, o, v in acked]
    assert len({(p, o) for p, o, _ in acked}) == len(acked), "an offset acknowledged twice"
    lost = [(p, o, v) for p, o, v in acked if stored.get((p, o)) != v]
    assert not lost, f"acknowledged records lost or changed: {lost[:5]}"
    again = set(read_before)
    once = sorted(dict.fromkeys(consumed)) if again else sorted(consumed)
    assert once == sorted(acked), "the consumer read other records than were acked"
    repeated = [r for r in consumed if consumed.count(r) > 1]
    assert all(r in again for r in repeated), f"read twice after the failover: {repeated[:5]}"


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka", "kafkajs"])
def test_a_client_produces_and_consumes_through_a_failover(
    cluster: list[Daemon], tmp_path: Path, client: str
) -> None:
    servers = bootstrap(cluster)
    topic = create_topic(servers)
    library = open_client(client, servers, topic, tmp_path)
    try:
        before = library.produce("before-", COUNT)
        read_before = library.consume(COUNT)
        moved = kill_the_leader_of_partition_0(cluster, topic)
        after = library.produce("after-", COUNT)
        read_after = library.consume(COUNT)
        while len(set(read_after) - set(read_before)) < COUNT:
            read_after += library.consume(1)  # a re-read of an earlier record came first
    finally:
        library.close()
    assert any(p in moved for p, _, _ in after), (moved, after)
    check(
        before + after, read_before + read_after, read_all(bootstrap(cluster), topic), read_before
    )


def kcat_produce(servers: str, topic: str, records: set[bytes]) -> None:
    """One ``kcat -P`` run: ``records`` spread at random over the partitions, idempotent.

    kcat reads its input in large blocks, so a run delivers once its input
    ends: the failover test starts one right after the kill, whose metadata
    still names the dead daemon.
    """
    assert KCAT is not None
    proc = subprocess.run(
        [KCAT, "-P", "-b", servers, "-t", topic, "-X", "enable.idempotence=true",
         "-X", "acks=all", "-X", "partitioner=random", "-X", "sticky.partitioning.linger.ms=0",
         "-X", "topic.metadata.refresh.interval.ms=500"],
        input=b"".join(v + b"\n" for v in sorted(records)),
        capture_output=True, timeout=DEADLINE_S, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"Delivery failed" not in proc.stderr, proc.stderr  # kcat's word for a lost record


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make test installs it)")
def test_kcat_produces_and_consumes_through_a_failover(cluster: list[Daemon]) -> None:
    """A ``kcat -C`` process reads on through the kill; ``kcat -P`` runs before and right after."""
    assert KCAT is not None
    servers = bootstrap(cluster)
    topic = create_topic(servers)
    consumer = subprocess.Popen(
        [KCAT, "-C", "-b", servers, "-t", topic, "-o", "beginning", "-u", "-f", "%p %o %s\\n",
         "-X", "topic.metadata.refresh.interval.ms=500"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert consumer.stdout is not None
    lines = Lines(consumer.stdout)
    read: list[Record] = []

    def read_values(wanted: set[bytes]) -> None:
        seen = {v for _, _, v in read}
        while not wanted <= seen:
            partition, offset, value = lines.next("kcat -C").rstrip(b"\n").split(b" ", 2)
            read.append((int(partition), int(offset), value))
            seen.add(value)

    before = {v for _, v in values("before-", COUNT)}
    after = {v for _, v in values("after-", COUNT)}
    try:
        kcat_produce(servers, topic, before)
        read_values(before)
        moved = kill_the_leader_of_partition_0(cluster, topic)
        kcat_produce(servers, topic, after)
        read_values(after)
    finally:
        consumer.kill()
    assert any(p in moved for p, _, v in read if v in after), (moved, read)
    stored = read_all(bootstrap(cluster), topic)
    assert sorted(v for _, _, v in read) == sorted(before | after), "read twice, or not at all"
    assert all(stored.get((p, o)) == v for p, o, v in read), "read other than stored"
    assert sorted(stored.values()) == sorted(before | after), "stored twice, or lost"
