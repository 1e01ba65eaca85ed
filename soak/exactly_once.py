"""The exactly-once campaign: a consume-transform-produce app through crashes of the daemon and its own.

An input topic holds ``records`` numbered records over `PARTITIONS`
partitions, produced up front.  The app -- what a Kafka Streams or Quix
Streams app with exactly-once does, written with confluent-kafka -- reads
them with a ``read_committed`` consumer of group `GROUP` (its partitions
assigned, starting at the group's committed offsets) and, per poll of up to
`BATCH` records, in one transaction: writes one output record per input
record (same key, the value with ``|out`` appended, to the same partition of
the output topic) and commits the consumer's positions with
``send_offsets_to_transaction``.  An error the transaction can recover from
aborts it and rewinds the consumer to the committed offsets; any other ends
the app's *incarnation*, and a new one starts: a new producer with the same
``transactional.id`` (``init_transactions`` fences the old one and aborts
its open transaction) and a new consumer at the committed offsets.

Each cycle (seeded: which fault, after how long) is one of

- **kill -9 of the daemon**, started again on the same WAL and store while
  the app runs: the transactions in flight complete or abort, as their
  coordinator's state (``__transaction_state``) says after the restart;
- **a crash of the app**: its producer and consumer are dropped where they
  stand, mid-transaction, never closed; the next incarnation takes over.

At the end the app drains the input and stops.  The history must show each
input record's output exactly once in a ``read_committed`` read of the
output topic (a *lost* or *duplicated* finding otherwise; a wrong value is
*changed*), in the input's order per partition, the group's committed
offsets at the input's end, and no
aborted output visible to ``read_committed``; a ``read_uncommitted`` read
counts the aborted records the faults left (a detail, not a finding).
"""

from __future__ import annotations

import collections
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import confluent_kafka

from soak.crash_cycles import Restartable
from soak.load import EXAMPLES, QUIET, Findings, create_topic, wait_until
from soak.report import Row

IN_TOPIC = "eos-in"
OUT_TOPIC = "eos-out"
GROUP = "eos-app"
PARTITIONS = 4
BATCH = 50  # input records per transaction, at most
ACTIONS = ("daemon", "app")
#: Short client timeouts, so that a restart is ridden through in seconds.
CLIENT_TIMEOUTS = {
    "metadata.recovery.strategy": "none",
    "socket.timeout.ms": 5000,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 500,
}


class _Crashed(Exception):
    """The app's incarnation is crashing mid-transaction (`EosApp.crash`)."""


def _id(n: int) -> bytes:
    return b"in-%08d" % n


class EosApp:
    """The consume-transform-produce app, on a thread, through as many incarnations as it takes."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.committed_txns = 0
        self.aborted_txns = 0
        self.incarnations = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._crash = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eos-app", daemon=True)
        self._failure: BaseException | None = None
        self._zombies: list[tuple[confluent_kafka.Producer, confluent_kafka.Consumer]] = []

    def start(self) -> None:
        self._thread.start()

    def crash(self) -> None:
        """Drop the incarnation where it stands: mid-transaction, its records written; a new one starts."""
        self._crash.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        for _producer, consumer in self._zombies:
            consumer.close()
        self._zombies.clear()
        if self._failure is not None:
            raise RuntimeError(f"the app failed: {self._failure!r}") from self._failure

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._incarnation()
        except Exception as exc:  # noqa: BLE001 - reported by stop()
            self._failure = exc

    def _new_clients(self) -> tuple[confluent_kafka.Producer, confluent_kafka.Consumer]:
        self.incarnations += 1
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": 60_000,
                "linger.ms": 5,
                **CLIENT_TIMEOUTS,
                **QUIET,
            }
        )
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **CLIENT_TIMEOUTS,
                **QUIET,
            }
        )
        return producer, consumer

    def _incarnation(self) -> None:
        producer, consumer = self._new_clients()
        crashed = False
        try:
            self._retry(lambda: producer.init_transactions(30), "init_transactions")
            self._rewind(consumer, assign=True)
            while not self._stop.is_set():
                messages = [m for m in consumer.consume(BATCH, 0.2) if m.error() is None]
                if not messages:
                    continue
                if not self._transaction(producer, consumer, messages):
                    return
        except _Crashed:
            # Left where they stand, never closed: the transaction stays open, its records
            # in the log, and the producer lives on as a zombie the next incarnation fences.
            self._crash.clear()
            self._zombies.append((producer, consumer))
            crashed = True
        except confluent_kafka.KafkaException as exc:
            self.errors[f"incarnation: {exc.args[0].name()}"] += 1
        finally:
            if not crashed:
                consumer.close()

    def _transaction(
        self,
        producer: confluent_kafka.Producer,
        consumer: confluent_kafka.Consumer,
        messages: list[Any],
    ) -> bool:
        """One transaction of ``messages``; False when the incarnation must end."""
        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(
                    OUT_TOPIC, key=m.key(), value=m.value() + b"|out", partition=m.partition()
                )
            if self._crash.is_set():
                producer.flush(30)  # the records are in the log; the transaction stays open
                raise _Crashed
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            self._retry(lambda: producer.commit_transaction(30), "commit_transaction")
            self.committed_txns += 1
            return True
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            self.errors[error.name()] += 1
            if error.fatal() or not error.txn_requires_abort():
                return False
            try:
                self._retry(lambda: producer.abort_transaction(30), "abort_transaction")
            except confluent_kafka.KafkaException:
                return False
            self.aborted_txns += 1
            self._rewind(consumer, assign=False)
            return True

    def _retry(self, call: Callable[[], object], what: str) -> None:
        """``call`` again while it fails with a retriable error (librdkafka says when it may)."""
        deadline = time.monotonic() + 120
        while True:
            try:
                call()
                return
            except confluent_kafka.KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    raise
                self.errors[f"{what}: {error.name()} (retried)"] += 1
                time.sleep(0.1)

    def _rewind(self, consumer: confluent_kafka.Consumer, *, assign: bool) -> None:
        """Every input partition at the group's committed offset (its start if none)."""
        wanted = [confluent_kafka.TopicPartition(IN_TOPIC, p) for p in range(PARTITIONS)]
        deadline = time.monotonic() + 120
        while True:
            try:
                committed = consumer.committed(wanted, timeout=10)
                break
            except confluent_kafka.KafkaException as exc:
                if time.monotonic() > deadline:
                    raise
                self.errors[f"committed: {exc.args[0].name()} (retried)"] += 1
                time.sleep(0.1)
        positions = [
            confluent_kafka.TopicPartition(
                IN_TOPIC,
                tp.partition,
                tp.offset if tp.offset >= 0 else confluent_kafka.OFFSET_BEGINNING,
            )
            for tp in committed
        ]
        if assign:
            consumer.assign(positions)
        else:
            for tp in positions:
                consumer.seek(tp)


def produce_input(bootstrap: str, records: int) -> dict[int, int]:
    """The numbered input records, round robin over the partitions; each partition's end."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20, **QUIET}
    )
    for n in range(records):
        producer.produce(IN_TOPIC, key=_id(n), value=b"value-%d" % n, partition=n % PARTITIONS)
        if n % 1000 == 999:
            producer.flush(60)
    assert producer.flush(60) == 0, "input records left unsent"
    return {p: len(range(p, records, PARTITIONS)) for p in range(PARTITIONS)}


def group_offsets(bootstrap: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "isolation.level": "read_committed",
            **QUIET,
        }
    )
    try:
        tps = [confluent_kafka.TopicPartition(IN_TOPIC, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=10)}
    finally:
        consumer.close()


def read_output(bootstrap: str, *, committed: bool) -> list[tuple[int, bytes, bytes]]:
    """Every (partition, key, value) of the output topic in offset order, to each partition's end.

    The end is the last stable offset when ``committed``.
    """
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(OUT_TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    out: list[tuple[int, bytes, bytes]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the output read stalled; at the end of {sorted(at_end)}")
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            partition = int(message.partition() or 0)
            if error is not None:
                if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                continue
            at_end.discard(partition)
            out.append((partition, message.key() or b"", message.value() or b""))
    finally:
        consumer.close()
    return out


def check_output(records: int, output: list[tuple[int, bytes, bytes]], findings: Findings) -> None:
    """Each input record's output exactly once, with the value the app writes, in order.

    Input partition ``p`` goes to output partition ``p`` in the order it was
    read, so each output partition's input numbers must increase.
    """
    seen = collections.Counter(key for _, key, _ in output)
    for n in range(records):
        count = seen[_id(n)]
        if count == 0:
            findings.lost.add((n % PARTITIONS, n // PARTITIONS))
        elif count > 1:
            findings.duplicated.add(_id(n))
    last: dict[int, int] = {}
    for partition, key, value in output:
        number = int(key[3:]) if key.startswith(b"in-") else -1
        if value != b"value-%d|out" % number:
            findings.changed.add((number % PARTITIONS, number // PARTITIONS))
        if number <= last.get(partition, -1):
            findings.problem(
                "order", f"output partition {partition}: input {number} after {last[partition]}"
            )
        last[partition] = max(number, last.get(partition, -1))


def run(
    daemon: Restartable,
    *,
    cycles: int,
    seed: int,
    store: str,
    records: int = 20_000,
    delay_s: tuple[float, float] = (0.3, 1.5),
    progress: Callable[[str], None] | None = None,
) -> Row:
    """``cycles`` faults (kill -9 of the daemon, a crash of the app) while the app works."""
    rng = random.Random(seed)
    bootstrap = daemon.bootstrap
    create_topic(bootstrap, IN_TOPIC, PARTITIONS)
    create_topic(bootstrap, OUT_TOPIC, PARTITIONS)
    ends = produce_input(bootstrap, records)
    app = EosApp(bootstrap, f"eos-app-{seed}")
    findings = Findings()
    recoveries: list[float] = []
    faults: collections.Counter[str] = collections.Counter()
    app.start()

    def processed() -> int:
        try:
            return sum(max(0, o) for o in group_offsets(bootstrap).values())
        except confluent_kafka.KafkaException:
            return -1

    try:
        for cycle in range(cycles):
            time.sleep(rng.uniform(*delay_s))
            action = rng.choice(ACTIONS)
            faults[action] += 1
            if action == "daemon":
                daemon.kill()
                killed = time.monotonic()
                daemon.start()
                recoveries.append(time.monotonic() - killed)
            else:
                app.crash()
            if progress:
                progress(
                    f"cycle {cycle + 1}/{cycles}: {action} crashed; "
                    f"{app.committed_txns} transactions committed, {app.aborted_txns} aborted"
                )
        wait_until(lambda: processed() >= records, 300, "the app to process every input record")
    except TimeoutError as exc:
        findings.problem("stalled", f"{exc}: {processed()} of {records} processed")
    finally:
        app.stop()
    offsets = group_offsets(bootstrap)
    if offsets != ends:
        findings.problem("offsets", f"the group committed {offsets}, the input ends at {ends}")
    check_output(records, read_output(bootstrap, committed=True), findings)
    everything = read_output(bootstrap, committed=False)
    aborted = len(everything) - records
    return Row(
        campaign="exactly-once",
        store=store,
        cycles=cycles,
        acknowledged=records,
        lost=len(findings.lost),
        duplicated=len(findings.duplicated),
        changed=len(findings.changed),
        max_recovery_s=max(recoveries, default=None),
        seed=seed,
        problems=findings.lines(),
        details=[
            f"{faults['daemon']} daemon kills, {faults['app']} app crashes; "
            f"{app.incarnations} app incarnations, {app.committed_txns} transactions committed, "
            f"{app.aborted_txns} aborted by the app; {max(aborted, 0)} aborted output records "
            "in the log (never read by read_committed)",
            "app errors: "
            + (
                ", ".join(f"{name} x{count}" for name, count in app.errors.most_common(EXAMPLES))
                or "none"
            ),
        ],
    )
