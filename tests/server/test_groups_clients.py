"""Consumer groups with real clients over real sockets against `kfs serve`.

Consumers that subscribe (join a group) in confluent-kafka (librdkafka) and
kafka-python: every record is consumed exactly once across rebalances
(members joining, leaving cleanly, and crashing so their session expires);
cooperative-sticky rebalancing moves only what it must; a static member
restarts without a rebalance; committed offsets survive ``kill -9``.

"Consumed" means consumed and committed: each test consumer commits every
record synchronously and counts it only when the commit succeeded, so a
record is redelivered exactly when its commit was refused (a fenced
generation) - which is what makes exactly-once checkable.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import textwrap
import threading
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from testkit.daemon import Daemon, DaemonFactory
from testkit.waiting import wait_for
from tests.server.conftest import create_topic

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import confluent_kafka
    import kafka
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KPTopicPartition

pytestmark = pytest.mark.integration

PARTITIONS = 6
SESSION_MS = 6000  # the coordinator's minimum: a crashed member expires soon


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[Any] = []
    for index, value in enumerate(values):
        producer.produce(
            topic,
            value,
            partition=index % PARTITIONS,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]


class Consumed:
    """Every (value, consumer) that was consumed and committed, across consumers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[bytes, str]] = []

    def add(self, value: bytes, who: str) -> None:
        with self.lock:
            self.rows.append((value, who))

    def values(self) -> list[bytes]:
        with self.lock:
            return [value for value, _ in self.rows]

    def count(self, who: str | None = None) -> int:
        with self.lock:
            return sum(1 for _, w in self.rows if who is None or w == who)


class ConfluentMember(threading.Thread):
    """A confluent-kafka consumer that subscribes, commits each record, and tracks ownership."""

    def __init__(
        self, name: str, bootstrap: str, group: str, topic: str, consumed: Consumed, **config: Any
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.label = name
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 100,
            **config,
        }
        self.topic = topic
        self.consumed = consumed
        self.owned: set[int] = set()
        self.assigned_events: list[list[int]] = []
        self.revoked_events: list[list[int]] = []
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.on_assign_hook: Callable[[ConfluentMember, list[int]], None] | None = None

    def _assign(self, consumer: Any, partitions: list[Any]) -> None:
        parts = sorted(p.partition for p in partitions)
        self.assigned_events.append(parts)
        if self.on_assign_hook is not None:
            self.on_assign_hook(self, parts)
        self.owned.update(parts)

    def _revoke(self, consumer: Any, partitions: list[Any]) -> None:
        parts = sorted(p.partition for p in partitions)
        self.revoked_events.append(parts)
        self.owned.difference_update(parts)

    def run(self) -> None:
        consumer = confluent_kafka.Consumer(self.config)
        consumer.subscribe(
            [self.topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._revoke
        )
        try:
            while not self.stopping.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(str(msg.error()))
                    continue
                try:
                    consumer.commit(message=msg, asynchronous=False)
                except confluent_kafka.KafkaException:
                    continue  # fenced: the record will be delivered again
                self.consumed.add(msg.value(), self.label)
        finally:
            consumer.close()  # LeaveGroup (unless static)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive(), f"{self.label} did not stop"


CRASHING_MEMBER = textwrap.dedent(
    """
    import sys, confluent_kafka
    bootstrap, group, topic, session_ms = sys.argv[1:5]
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": "crasher",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 100,
    })
    consumer.subscribe([topic])
    while True:
        msg = consumer.poll(0.1)
        if msg is None or msg.error():
            continue
        # One write per line: with PYTHONUNBUFFERED, print() writes each of its
        # arguments on its own, and the kill could cut a line between them.
        sys.stdout.write(f"commit {msg.partition()} {msg.offset()} {msg.value().decode()}\\n")
        sys.stdout.flush()
        try:
            consumer.commit(message=msg, asynchronous=False)
        except confluent_kafka.KafkaException:
            sys.stdout.write("failed\\n")
            sys.stdout.flush()
            continue
        sys.stdout.write("done\\n")
        sys.stdout.flush()
    """
)


class CrashingMember:
    """A group member in its own process, killed with SIGKILL (no LeaveGroup)."""

    def __init__(self, bootstrap: str, group: str, topic: str, consumed: Consumed) -> None:
        self.consumed = consumed
        self.uncertain: tuple[int, int, bytes] | None = None  # commit sent, outcome unknown
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CRASHING_MEMBER, bootstrap, group, topic, str(SESSION_MS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # cut short by the kill: the commit it announces was never sent
            words = line.split()
            if words[0] == "commit":
                self.uncertain = (int(words[1]), int(words[2]), words[3].encode())
            elif words[0] == "done" and self.uncertain is not None:
                self.consumed.add(self.uncertain[2], "crasher")
                self.uncertain = None
            elif words[0] == "failed":
                self.uncertain = None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.reader.join(10)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30
        )
    finally:
        consumer.close()
    return {p.partition: p.offset for p in parts}


def assert_exactly_once(consumed: Consumed, produced: list[bytes]) -> None:
    counts = collections.Counter(consumed.values())
    duplicates = [value for value, n in counts.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} records consumed twice, e.g. {duplicates[:3]}"
    missing = set(produced) - set(counts)
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:3]}"


def test_three_confluent_members_consume_every_record_once_across_rebalances(
    daemon: Daemon,
) -> None:
    bootstrap = daemon.bootstrap
    topic = create_topic(bootstrap, PARTITIONS, prefix="groups")
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumed = Consumed()
    produced: list[bytes] = []
    stop_producing = threading.Event()

    def keep_producing() -> None:
        batch = 0
        while not stop_producing.is_set():
            values = [f"r{batch}-{i}".encode() for i in range(PARTITIONS * 5)]
            produce(bootstrap, topic, values)
            produced.extend(values)
            batch += 1
            stop_producing.wait(0.05)

    producer = threading.Thread(target=keep_producing, daemon=True)
    first = ConfluentMember("c1", bootstrap, group, topic, consumed)
    second = ConfluentMember("c2", bootstrap, group, topic, consumed)
    crasher: CrashingMember | None = None
    try:
        producer.start()
        first.start()
        second.start()
        wait_for(lambda: consumed.count() >= 300, timeout=60, what="300 records consumed")
        # A third member joins (in its own process).
        crasher = CrashingMember(bootstrap, group, topic, consumed)
        wait_for(lambda: consumed.count("crasher") >= 30, timeout=60, what="the third member")
        # One leaves cleanly.
        second.stop()
        mark = consumed.count("c1")
        wait_for(lambda: consumed.count("c1") >= mark + 200, timeout=60, what="c1 after a leave")
        # One crashes: no LeaveGroup, its session times out.
        crasher.kill()
        mark = consumed.count("c1")
        wait_for(lambda: consumed.count("c1") >= mark + 300, timeout=60, what="c1 after the crash")
        stop_producing.set()
        producer.join(60)
        uncertain = crasher.uncertain
        if uncertain is not None:
            # Killed between its commit and its report: the committed offset says which.
            partition, offset, value = uncertain
            if committed_offsets(bootstrap, group, topic)[partition] > offset and (
                value not in consumed.values()
            ):
                consumed.add(value, "crasher")
        wait_for(
            lambda: set(consumed.values()) >= set(produced),
            timeout=60,
            what="every produced record consumed",
        )
    finally:
        stop_producing.set()
        for member in (first, second):
            if member.is_alive():
                member.stop()
        if crasher is not None and crasher.proc.poll() is None:
            crasher.kill()
    assert_exactly_once(consumed, produced)
    assert consumed.count("c2") > 0 and consumed.count("crasher") > 0
    assert first.owned == set(range(PARTITIONS)) or not first.is_alive()


def test_cooperative_sticky_moves_only_the_partitions_it_must(local_daemon: Daemon) -> None:
    bootstrap = local_daemon.bootstrap
    topic = create_topic(bootstrap, PARTITIONS, prefix="groups")
    group = f"coop-{uuid.uuid4().hex[:6]}"
    consumed = Consumed()
    config = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [
        ConfluentMember(f"m{i}", bootstrap, group, topic, consumed, **config) for i in range(3)
    ]
    violations: list[str] = []

    def check_ownership(member: ConfluentMember, parts: list[int]) -> None:
        violations.extend(
            f"{member.label} got {parts} while {other.label} owns {other.owned}"
            for other in members
            if other is not member and other.owned.intersection(parts)
        )

    for member in members:
        member.on_assign_hook = check_ownership
    try:
        members[0].start()
        members[1].start()
        wait_for(
            lambda: len(members[0].owned) == len(members[1].owned) == 3,
            timeout=60,
            what="two members with three partitions each",
        )
        before = {m.label: set(m.owned) for m in members[:2]}
        revoked_before = sum(len(r) for m in members[:2] for r in m.revoked_events)
        members[2].start()
        wait_for(
            lambda: all(len(m.owned) == 2 for m in members),
            timeout=60,
            what="three members with two partitions each",
        )
        revoked = sum(len(r) for m in members[:2] for r in m.revoked_events) - revoked_before
        assert revoked == 2, "cooperative-sticky should move exactly one partition per old member"
        for member in members[:2]:
            assert member.owned <= before[member.label], "an old member gained a partition"
        produce(bootstrap, topic, [f"v{i}".encode() for i in range(120)])
        wait_for(lambda: consumed.count() >= 120, timeout=60, what="120 records consumed")
        assert all(consumed.count(m.label) > 0 for m in members)
    finally:
        for member in members:
            if member.is_alive():
                member.stop()
    assert not violations, violations[:3]
    assert_exactly_once(consumed, [f"v{i}".encode() for i in range(120)])


def test_a_static_member_restarts_within_its_session_without_a_rebalance(
    local_daemon: Daemon,
) -> None:
    bootstrap = local_daemon.bootstrap
    topic = create_topic(bootstrap, PARTITIONS, prefix="groups")
    group = f"static-{uuid.uuid4().hex[:6]}"
    consumed = Consumed()
    static = {"group.instance.id": "host-1", "session.timeout.ms": 30000}
    dynamic = ConfluentMember("dynamic", bootstrap, group, topic, consumed)
    first = ConfluentMember("static-1", bootstrap, group, topic, consumed, **static)
    second: ConfluentMember | None = None
    try:
        dynamic.start()
        first.start()
        wait_for(
            lambda: len(dynamic.owned) == len(first.owned) == 3,
            timeout=60,
            what="both members assigned",
        )
        dynamic_assignments = len(dynamic.assigned_events)
        kept = set(first.owned)
        first.stop()  # a static member's close sends no LeaveGroup
        second = ConfluentMember("static-2", bootstrap, group, topic, consumed, **static)
        second.start()
        wait_for(lambda: second.owned == kept, timeout=60, what="the restarted static member")
        produce(bootstrap, topic, [f"s{i}".encode() for i in range(60)])
        wait_for(lambda: consumed.count() >= 60, timeout=60, what="60 records consumed")
        assert len(dynamic.assigned_events) == dynamic_assignments, "the group rebalanced"
        assert dynamic.revoked_events == []
        assert consumed.count("static-2") > 0
    finally:
        for member in (dynamic, first, second):
            if member is not None and member.is_alive():
                member.stop()
    assert_exactly_once(consumed, [f"s{i}".encode() for i in range(60)])


class KafkaPythonMember(threading.Thread):
    """A kafka-python KafkaConsumer in the same group, committing each record."""

    def __init__(self, bootstrap: str, group: str, topic: str, consumed: Consumed) -> None:
        super().__init__(name="kafka-python", daemon=True)
        self.bootstrap, self.group, self.topic, self.consumed = bootstrap, group, topic, consumed
        self.stopping = threading.Event()
        self.assigned: set[int] = set()

    def run(self) -> None:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id="kafka-python",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
        )
        consumer.subscribe([self.topic])
        try:
            while not self.stopping.is_set():
                for tp, records in consumer.poll(timeout_ms=100).items():
                    for record in records:
                        try:
                            consumer.commit(
                                {
                                    KPTopicPartition(tp.topic, tp.partition): OffsetAndMetadata(
                                        record.offset + 1, "", -1
                                    )
                                }
                            )
                        except kafka.errors.KafkaError:
                            continue
                        self.consumed.add(record.value, "kafka-python")
                self.assigned = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def test_kafka_python_and_confluent_members_share_a_group(local_daemon: Daemon) -> None:
    bootstrap = local_daemon.bootstrap
    topic = create_topic(bootstrap, PARTITIONS, prefix="groups")
    group = f"mixed-{uuid.uuid4().hex[:6]}"
    consumed = Consumed()
    python_member = KafkaPythonMember(bootstrap, group, topic, consumed)
    confluent_member = ConfluentMember("confluent", bootstrap, group, topic, consumed)
    values = [f"m{i}".encode() for i in range(300)]
    try:
        python_member.start()
        confluent_member.start()
        wait_for(
            lambda: (
                len(python_member.assigned) == len(confluent_member.owned) == 3
                and not python_member.assigned & confluent_member.owned
            ),
            timeout=60,
            what="both clients assigned three partitions each",
        )
        produce(bootstrap, topic, values)
        wait_for(lambda: consumed.count() >= len(values), timeout=60, what="every record")
    finally:
        python_member.stop()
        confluent_member.stop()
    assert_exactly_once(consumed, values)
    assert consumed.count("kafka-python") > 0 and consumed.count("confluent") > 0


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_committed_offsets_survive_kill_9(
    daemons: DaemonFactory, request: pytest.FixtureRequest, backend: str
) -> None:
    store: dict[str, str] = {}
    if backend == "s3":
        store = {
            "store_url": f"s3://{request.getfixturevalue('s3_bucket')}/groups-{uuid.uuid4().hex[:8]}",
            "s3_endpoint_url": request.getfixturevalue("moto_server"),
        }
    daemon = daemons.start(name=f"offsets-{backend}", **store)
    topic = create_topic(daemon.bootstrap, PARTITIONS, prefix="groups")
    group = "durable"
    consumed = Consumed()
    produce(daemon.bootstrap, topic, [f"d{i}".encode() for i in range(60)])
    member = ConfluentMember("durable", daemon.bootstrap, group, topic, consumed)
    member.start()
    try:
        wait_for(lambda: consumed.count() >= 60, timeout=60, what="60 records consumed")
    finally:
        member.stop()
    before = committed_offsets(daemon.bootstrap, group, topic)
    assert before == {p: 10 for p in range(PARTITIONS)}
    daemon.kill()
    daemon.start()
    assert committed_offsets(daemon.bootstrap, group, topic) == before
    # A new member of the group resumes after them: nothing is consumed twice.
    produce(daemon.bootstrap, topic, [f"e{i}".encode() for i in range(12)])
    after = Consumed()
    member = ConfluentMember("resumed", daemon.bootstrap, group, topic, after)
    member.start()
    try:
        wait_for(lambda: after.count() >= 12, timeout=60, what="12 new records")
    finally:
        member.stop()
    assert sorted(after.values()) == sorted(f"e{i}".encode() for i in range(12))
