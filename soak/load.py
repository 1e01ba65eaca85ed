"""What every soak campaign drives and checks: producers, a tail consumer, the record model.

`LoadProducer` (idempotent confluent-kafka, acks=all, one codec each) sends
records with a key, a value, headers and a create time at a steady rate and
remembers what it sent and what the broker acknowledged where (and, apart,
what librdkafka counted delivered without an offset: `unplaced_acks`);
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

`check_seen` judges what a consumer saw while the faults ran against the
final read (a record seen must never change afterwards), and `merge_model`
joins the producers' records and acknowledgements into one history.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import confluent_kafka.admin
from confluent_kafka.cimpl import NewTopic

TOPIC = "kfs-soak"
PARTITIONS = 6
CODECS = ("lz4", "zstd", "gzip")  # one per producer
#: The librdkafka errors a consumer reports while its only broker restarts.
RESTART_ERRORS = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE"})
#: The errors a request gets while its partition's leader moves to another daemon.
LEADER_MOVING_ERRORS = frozenset(
    {
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "_TIMED_OUT",
        *RESTART_ERRORS,
    }
)
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

    @property
    def ident(self) -> bytes:
        """Which sent record this is: its ``id`` header (keys repeat on a compacted topic)."""
        return dict(self.headers).get("id", self.key)

    @classmethod
    def of(cls, msg: Any) -> Record:
        return cls(
            msg.key() or b"",
            msg.value() or b"",
            tuple((name, bytes(value or b"")) for name, value in msg.headers() or ()),
            msg.timestamp()[1],
        )


Position = tuple[int, int]  # (partition, offset)


def message_position(msg: confluent_kafka.Message) -> Position:
    """Where a consumed record sits; a message without an error always has both."""
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None, "a message without a position"
    return partition, offset


@dataclass
class Findings:
    """What the checks found; each kind counted, with a few examples."""

    lost: set[Position] = field(default_factory=set)
    changed: set[Position] = field(default_factory=set)
    duplicated: set[bytes] = field(default_factory=set)  # record idents
    problems: dict[str, list[str]] = field(default_factory=dict)  # kind -> examples

    def problem(self, kind: str, example: str) -> None:
        examples = self.problems.setdefault(kind, [])
        if len(examples) < EXAMPLES:
            examples.append(example)

    def lines(self) -> list[str]:
        found: list[tuple[str, list[Position] | list[bytes]]] = [
            ("lost", sorted(self.lost)),
            ("changed", sorted(self.changed)),
            ("duplicated", sorted(self.duplicated)),
        ]
        out = [f"{kind}: {len(what)}, e.g. {what[:EXAMPLES]}" for kind, what in found if what]
        return out + [f"{kind}: {', '.join(examples)}" for kind, examples in self.problems.items()]


def check_log(
    log: dict[Position, Record],
    sent: Mapping[bytes, Record],
    acked: Iterable[tuple[Position, bytes]],
    findings: Findings,
    read_ends: Mapping[int, int | None],
    *,
    log_starts: dict[int, int] | None = None,
    compacted: bool = False,
) -> None:
    """Check the records read back (``log``) against what was sent and acknowledged.

    ``acked`` pairs a position with the ident of the record acknowledged
    there; only positions from ``log_starts[partition]`` (where retention
    left the log; 0 by default) below ``read_ends[partition]`` (what has been
    read) are judged.  On a ``compacted`` topic a record may be missing if a
    later record of its partition has its key (compaction superseded it), and
    offsets may have gaps; the newest record of every key must be there.
    """
    starts = log_starts or {}
    newest: dict[tuple[int, bytes], int] = {}  # (partition, key) -> highest offset in the log
    if compacted:
        for (partition, offset), record in log.items():
            slot = (partition, record.key)
            newest[slot] = max(newest.get(slot, -1), offset)
    unread = sorted(p for p, end in read_ends.items() if end is None)
    if unread:
        findings.problem("final read", f"partitions {unread} could not be read to their end")
    acked_at: dict[bytes, Position] = {}  # where each record was acknowledged
    for position, ident in acked:
        acked_at[ident] = position
        partition, offset = position
        if not starts.get(partition, 0) <= offset < (read_ends.get(partition) or 0):
            continue
        stored = log.get(position)
        if stored is None:
            superseded = compacted and newest.get((partition, sent[ident].key), -1) > offset
            if not superseded:
                findings.lost.add(position)
        elif stored != sent[ident]:
            findings.changed.add(position)
    where: dict[bytes, Position] = {}
    for position, record in log.items():
        if sent.get(record.ident) != record:
            findings.changed.add(position)
        first = where.setdefault(record.ident, position)
        if first != position:
            findings.problem(
                "duplicated where",
                f"{record.ident.decode()} at {first} and {position}, acknowledged at "
                f"{acked_at.get(record.ident)}",
            )
            findings.duplicated.add(record.ident)
    if compacted:
        return
    for partition, end in read_ends.items():
        if end is None:
            continue  # reported above
        missing = [o for o in range(starts.get(partition, 0), end) if (partition, o) not in log]
        if missing:
            findings.problem("gaps", f"partition {partition} lacks offsets {missing[:EXAMPLES]}")


def check_seen(
    seen: Mapping[Position, Record], final: Mapping[Position, Record], findings: Findings
) -> None:
    """A record a consumer read while faults ran must be in the final read, unchanged."""
    for position, record in seen.items():
        if final.get(position) != record:
            findings.changed.add(position)


def placed(
    log: Mapping[Position, Record],
    sent: Mapping[bytes, Record],
    partition: int,
    ident: bytes,
    *,
    compacted: bool,
) -> bool:
    """Whether a record acknowledged without an offset is in ``log``, or may be gone.

    A producer's records of one partition lie in the order of their ``seq``
    header: the record may be gone below the log start (the partition's
    oldest record of its producer is a later one) or, on a compacted topic,
    superseded (a later record of its producer has its key).  A record
    without a ``seq`` (sent by `LoadProducer.send`) must be there.
    """

    def seq(record: Record) -> int:
        return int(dict(record.headers).get("seq", -1))

    record = sent[ident]
    producer = dict(record.headers).get("producer")
    mine = [
        r
        for (p, _), r in log.items()
        if p == partition and dict(r.headers).get("producer") == producer
    ]
    if any(r.ident == ident for r in mine):
        return True
    if seq(record) < 0:
        return False
    if compacted:
        return any(r.key == record.key and seq(r) > seq(record) for r in mine)
    return bool(mine) and min(seq(r) for r in mine) > seq(record)


def check_unplaced(
    producers: Iterable[LoadProducer],
    log: Mapping[Position, Record],
    sent: Mapping[bytes, Record],
    findings: Findings,
    *,
    compacted: bool = False,
) -> int:
    """Every record librdkafka acknowledged without an offset must be in ``log``; their count."""
    count = 0
    for producer in producers:
        for partition, ident in producer.unplaced_acks():
            count += 1
            if not placed(log, sent, partition, ident, compacted=compacted):
                findings.problem(
                    "lost", f"{ident.decode()}, acknowledged without an offset, is not there"
                )
    return count


def merge_model(
    producers: Iterable[LoadProducer],
) -> tuple[dict[bytes, Record], list[tuple[Position, bytes]]]:
    """Every record the ``producers`` sent, by ident, and every acknowledgement they got."""
    sent: dict[bytes, Record] = {}
    acked: list[tuple[Position, bytes]] = []
    for producer in producers:
        s, a = producer.snapshot()
        sent.update(s)
        acked += a
    return sent, acked


class LoadProducer:
    """One idempotent producer on its own thread, sending a steady stream until stopped."""

    def __init__(
        self,
        bootstrap: str,
        index: int,
        seed: int,
        codec: str,
        rate: int,
        *,
        topic: str = TOPIC,
        partitions: int = PARTITIONS,
        key_space: int | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """``settings`` override the librdkafka configuration (e.g. shorter timeouts)."""
        self.index = index
        self.rate = rate  # records a second
        self.topic, self.partitions = topic, partitions
        self.key_space = key_space  # keys repeat over this many (None: every key unique)
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
                **(settings or {}),
            }
        )
        self.sent: dict[bytes, Record] = {}
        self.acked: dict[Position, bytes] = {}
        self.acked_order: list[tuple[Position, bytes]] = []  # in delivery-report order
        self.unplaced: list[tuple[int, bytes]] = []  # (partition, ident): acked, offset unknown
        self.failed: dict[bytes, str] = {}  # key -> error name
        self.fatal: str | None = None
        self.max_latency_s = 0.0  # the slowest delivery report, acknowledged or not
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{index}", daemon=True)
        self._sends = 0  # records sent by `send`, numbered apart from the steady stream

    def _next(self, seq: int) -> Record:
        ident = b"p%d-%09d" % (self.index, seq)
        key = ident if self.key_space is None else b"k%06d" % self.rng.randrange(self.key_space)
        value = self.rng.randbytes(self.rng.choice((0, 1, 100, 1000, 2000, 4000)))
        headers = (("id", ident), ("producer", b"%d" % self.index), ("seq", b"%d" % seq))
        return Record(key, value, headers, 1_700_000_000_000 + seq)

    def _on_delivery(self, ident: bytes, err: Any, msg: Any) -> None:
        with self._lock:
            # librdkafka's own measure: from produce() to the delivery report.
            self.max_latency_s = max(self.max_latency_s, (msg.latency() or 0.0))
            if err is None and msg.offset() is None:
                # librdkafka acknowledged it without an offset: an idempotent
                # producer whose request got no answer (its broker died) counts
                # it delivered once a later batch is acknowledged.
                self.unplaced.append((msg.partition(), ident))
            elif err is None:
                position = (msg.partition(), msg.offset())
                self.acked[position] = ident
                self.acked_order.append((position, ident))
            else:
                self.failed[ident] = err.name()
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
                        self.topic,
                        key=record.key,
                        value=record.value,
                        headers=list(record.headers),
                        timestamp=record.timestamp,
                        partition=self.rng.randrange(self.partitions),
                        # A delivery report carries no headers: the closure says which record.
                        on_delivery=functools.partial(self._on_delivery, record.ident),
                    )
                except BufferError:  # the local queue is full while the broker restarts
                    break
                with self._lock:
                    self.sent[record.ident] = record
                seq += 1
            try:
                self.producer.poll(tick)
            except confluent_kafka.KafkaException as exc:  # a fatal error: the producer is done
                with self._lock:
                    self.fatal = self.fatal or str(exc.args[0])
                return

    def send(self, partition: int) -> bytes:
        """Send one small record to ``partition`` now; its ident (for a producer of rate 0).

        Its delivery report arrives through the producer's own thread, as the stream's do.
        """
        self._sends += 1
        ident = b"p%d-send-%09d" % (self.index, self._sends)
        headers = (("id", ident), ("producer", b"%d" % self.index))
        record = Record(ident, b"", headers, 1_700_000_000_000 + self._sends)
        with self._lock:
            self.sent[ident] = record
        self.producer.produce(
            self.topic,
            key=record.key,
            value=record.value,
            headers=list(record.headers),
            timestamp=record.timestamp,
            partition=partition,
            on_delivery=functools.partial(self._on_delivery, ident),
        )
        return ident

    def start(self) -> None:
        self._thread.start()

    def stop(self, drain_s: float = 120.0) -> None:
        """Stop sending; wait for every outstanding delivery report."""
        self._stop.set()
        self._thread.join(30)
        try:
            self.producer.flush(drain_s)
        except confluent_kafka.KafkaException as exc:
            with self._lock:
                self.fatal = self.fatal or str(exc.args[0])

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked_order)

    def acked_since(self, cursor: int) -> tuple[list[tuple[Position, bytes]], int]:
        """The acknowledgements after the first ``cursor``, and the cursor for the next call."""
        with self._lock:
            return self.acked_order[cursor:], len(self.acked_order)

    def snapshot(self) -> tuple[dict[bytes, Record], list[tuple[Position, bytes]]]:
        with self._lock:
            return dict(self.sent), list(self.acked.items())

    def unplaced_acks(self) -> list[tuple[int, bytes]]:
        """(partition, ident) of the records acknowledged without an offset."""
        with self._lock:
            return list(self.unplaced)


class TailConsumer:
    """An assigned consumer following every partition from its start, across restarts."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = TOPIC,
        partitions: int = PARTITIONS,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """``settings`` override the librdkafka configuration (e.g. shorter timeouts)."""
        self.topic, self.partitions = topic, partitions
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "kfs-soak-tail",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
                **QUIET,
                **(settings or {}),
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
                confluent_kafka.TopicPartition(self.topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(self.partitions)
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
                    self.seen[message_position(msg)] = Record.of(msg)
        finally:
            self.consumer.close()

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def holds(self, position: Position) -> bool:
        """Whether the consumer has read the record at ``position``."""
        with self._lock:
            return position in self.seen

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


class ReadStalled(TimeoutError):
    """A read-back that stopped short of the high watermarks it was asked for."""


def _watermarks(
    consumer: confluent_kafka.Consumer, topic: str, partition: int, timeout_s: float
) -> tuple[int, int]:
    """A partition's (low, high) watermarks, asked again while its leader moves."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), timeout=30, cached=False
            )
            return low, high
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            moving = error.retriable() or error.name() in LEADER_MOVING_ERRORS
            if not moving or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def read_range(
    bootstrap: str,
    starts: dict[int, int],
    timeout_s: float = 120.0,
    *,
    topic: str = TOPIC,
    partitions: int = PARTITIONS,
) -> tuple[dict[Position, Record], dict[int, int]]:
    """Every record from ``starts[p]`` up to each partition's high watermark now; and the ends.

    A start below the partition's log start (retention moved it) reads from the log start.
    """
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kfs-soak-check",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            **QUIET,
        }
    )
    got: dict[Position, Record] = {}
    try:
        marks = {p: _watermarks(consumer, topic, p, timeout_s) for p in range(partitions)}
        ends = {p: high for p, (_, high) in marks.items()}
        begin = {p: max(starts.get(p, 0), low) for p, (low, _) in marks.items()}
        pending = {p for p in range(partitions) if ends[p] > begin[p]}
        consumer.assign([confluent_kafka.TopicPartition(topic, p, begin[p]) for p in pending])
        # A slow store is not a failure; a read that stops advancing is.
        deadline = time.monotonic() + timeout_s
        last: dict[int, int] = {}
        while pending:
            if time.monotonic() > deadline:
                stuck = {p: (last.get(p, begin[p] - 1), ends[p]) for p in sorted(pending)}
                raise ReadStalled(
                    f"read-back made no progress for {timeout_s:g} s; partition: "
                    f"(last offset read, high watermark) {stuck}"
                )
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            deadline = time.monotonic() + timeout_s
            error = msg.error()
            if error is not None:
                if error.name() in LEADER_MOVING_ERRORS:
                    continue
                raise RuntimeError(f"read-back failed: {error.name()}: {error.str()}")
            partition, offset = message_position(msg)
            last[partition] = offset
            if offset < ends[partition]:
                got[(partition, offset)] = Record.of(msg)
            if offset >= ends[partition] - 1:
                pending.discard(partition)
    finally:
        consumer.close()
    return got, ends


def create_topic(
    bootstrap: str,
    topic: str = TOPIC,
    partitions: int = PARTITIONS,
    config: dict[str, str] | None = None,
) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics(
        [NewTopic(topic, partitions, 1, config=config or {})]
    ).values():
        future.result(30)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.02)
