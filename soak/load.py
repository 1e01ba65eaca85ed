"""What every soak campaign drives and checks: producers, a tail consumer, the record model.

`LoadProducer` (idempotent confluent-kafka, acks=all, one codec each) sends
records with a key, a value, headers and a create time at a steady rate and
remembers what it sent and what the broker acknowledged where;
`TailConsumer` follows every partition from offset 0; `read_range` reads
partitions up to their high watermarks.  `check_log` judges what was read
against the model:

- **lost**: a record acknowledged at (partition, offset) is not there;
- **changed**: the record there differs in key, value, headers or timestamp,
  or a record in the log matches nothing a producer sent (an unacknowledged
  record must appear whole or not at all);
- **duplicated**: one sent record at two offsets (the producers are
  idempotent, so a retry must not store a second copy);
- gaps in a partition's offsets are reported as problems.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import confluent_kafka.admin

TOPIC = "kfs-soak"
PARTITIONS = 6
CODECS = ("lz4", "zstd", "gzip")  # one per producer
#: The librdkafka errors a consumer reports while its only broker restarts.
RESTART_ERRORS = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE"})
#: librdkafka's own log: critical only; a refused connection during a restart is expected.
QUIET = {"log_level": 2}
#: How many examples of each kind of finding a row keeps.
EXAMPLES = 5


@dataclass(frozen=True)
class Record:
    """A record as a client sees it; equality is the campaign's idea of "unchanged"."""

    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int

    @classmethod
    def of(cls, msg: Any) -> Record:
        return cls(
            msg.key() or b"",
            msg.value() or b"",
            tuple((name, bytes(value or b"")) for name, value in msg.headers() or ()),
            msg.timestamp()[1],
        )


Position = tuple[int, int]  # (partition, offset)


@dataclass
class Findings:
    """What the checks found; each kind counted, with a few examples."""

    lost: set[Position] = field(default_factory=set)
    changed: set[Position] = field(default_factory=set)
    duplicated: set[bytes] = field(default_factory=set)  # keys
    problems: dict[str, list[str]] = field(default_factory=dict)  # kind -> examples

    def problem(self, kind: str, example: str) -> None:
        examples = self.problems.setdefault(kind, [])
        if len(examples) < EXAMPLES:
            examples.append(example)

    def lines(self) -> list[str]:
        found = [
            ("lost", sorted(self.lost)),
            ("changed", sorted(self.changed)),
            ("duplicated", sorted(self.duplicated)),
        ]
        out = [f"{kind}: {len(what)}, e.g. {what[:EXAMPLES]}" for kind, what in found if what]
        return out + [f"{kind}: {', '.join(examples)}" for kind, examples in self.problems.items()]


def check_log(
    log: dict[Position, Record],
    sent: dict[bytes, Record],
    acked: Iterable[tuple[Position, bytes]],
    findings: Findings,
    read_ends: dict[int, int],
) -> None:
    """Check the records read back (``log``) against what was sent and acknowledged.

    ``acked`` pairs a position with the key acknowledged there; only positions
    below ``read_ends[partition]`` (what has been read) are judged.
    """
    for position, key in acked:
        partition, offset = position
        if offset >= read_ends.get(partition, 0):
            continue
        stored = log.get(position)
        if stored is None:
            findings.lost.add(position)
        elif stored != sent[key]:
            findings.changed.add(position)
    where: dict[bytes, Position] = {}
    for position, record in log.items():
        if sent.get(record.key) != record:
            findings.changed.add(position)
        first = where.setdefault(record.key, position)
        if first != position:
            findings.duplicated.add(record.key)
    for partition, end in read_ends.items():
        missing = [o for o in range(end) if (partition, o) not in log]
        if missing:
            findings.problem("gaps", f"partition {partition} lacks offsets {missing[:EXAMPLES]}")


class LoadProducer:
    """One idempotent producer on its own thread, sending a steady stream until stopped."""

    def __init__(self, bootstrap: str, index: int, seed: int, codec: str, rate: int) -> None:
        self.index = index
        self.rate = rate  # records a second
        self.rng = random.Random(seed * 1_000 + index)
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "compression.type": codec,
                "linger.ms": 5,
                # Long enough to ride through a restart: in-flight records are retried.
                "message.timeout.ms": 120_000,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                **QUIET,
            }
        )
        self.sent: dict[bytes, Record] = {}
        self.acked: dict[Position, bytes] = {}
        self.failed: dict[bytes, str] = {}  # key -> error name
        self.fatal: str | None = None
        self.max_latency_s = 0.0  # the slowest delivery report, acknowledged or not
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{index}", daemon=True)

    def _next(self, seq: int) -> Record:
        key = b"p%d-%09d" % (self.index, seq)
        value = self.rng.randbytes(self.rng.choice((0, 1, 100, 1000, 2000, 4000)))
        headers = (("producer", b"%d" % self.index), ("seq", b"%d" % seq))
        return Record(key, value, headers, 1_700_000_000_000 + seq)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            # librdkafka's own measure: from produce() to the delivery report.
            self.max_latency_s = max(self.max_latency_s, (msg.latency() or 0.0))
            if err is None:
                self.acked[(msg.partition(), msg.offset())] = msg.key()
            else:
                self.failed[msg.key()] = err.name()
                if err.fatal():
                    self.fatal = err.str()

    def _run(self) -> None:
        seq = 0
        tick = 0.01
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while seq < due and not self._stop.is_set():
                record = self._next(seq)
                try:
                    self.producer.produce(
                        TOPIC,
                        key=record.key,
                        value=record.value,
                        headers=list(record.headers),
                        timestamp=record.timestamp,
                        partition=self.rng.randrange(PARTITIONS),
                        on_delivery=self._on_delivery,
                    )
                except BufferError:  # the local queue is full while the broker restarts
                    break
                with self._lock:
                    self.sent[record.key] = record
                seq += 1
            self.producer.poll(tick)

    def start(self) -> None:
        self._thread.start()

    def stop(self, drain_s: float = 120.0) -> None:
        """Stop sending; wait for every outstanding delivery report."""
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(drain_s)

    def snapshot(self) -> tuple[dict[bytes, Record], list[tuple[Position, bytes]]]:
        with self._lock:
            return dict(self.sent), list(self.acked.items())


class TailConsumer:
    """An assigned consumer following every partition from offset 0, across restarts."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "kfs-crash-cycles-tail",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                **QUIET,
            }
        )
        self.seen: dict[Position, Record] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tail", daemon=True)

    def _run(self) -> None:
        self.consumer.assign(
            [
                confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        try:
            while not self._stop.is_set():
                msg = self.consumer.poll(0.1)
                if msg is None:
                    continue
                error = msg.error()
                with self._lock:
                    if error is not None:
                        if error.name() not in RESTART_ERRORS:
                            self.errors.append(f"{error.name()}: {error.str()}")
                        continue
                    self.seen[(msg.partition(), msg.offset())] = Record.of(msg)
        finally:
            self.consumer.close()

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def read_range(bootstrap: str, starts: dict[int, int], timeout_s: float = 120.0) -> tuple[
    dict[Position, Record], dict[int, int]
]:  # fmt: skip
    """Every record from ``starts[p]`` up to each partition's high watermark now; and the ends."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kfs-crash-cycles-check",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            **QUIET,
        }
    )
    got: dict[Position, Record] = {}
    try:
        ends = {
            p: consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(TOPIC, p), timeout=30, cached=False
            )[1]
            for p in range(PARTITIONS)
        }
        pending = {p for p in range(PARTITIONS) if ends[p] > starts.get(p, 0)}
        consumer.assign(
            [confluent_kafka.TopicPartition(TOPIC, p, starts.get(p, 0)) for p in pending]
        )
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read-back did not reach the high watermarks {ends}")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.name() in RESTART_ERRORS:
                    continue
                raise RuntimeError(f"read-back failed: {error.name()}: {error.str()}")
            position = (msg.partition(), msg.offset())
            if msg.offset() < ends[msg.partition()]:
                got[position] = Record.of(msg)
            if msg.offset() >= ends[msg.partition()] - 1:
                pending.discard(msg.partition())
    finally:
        consumer.close()
    return got, ends


def create_topic(bootstrap: str) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [confluent_kafka.admin.NewTopic(TOPIC, PARTITIONS, 1)]
    ).values():
        future.result(30)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.02)
