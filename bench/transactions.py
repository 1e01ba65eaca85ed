"""Transactions through a real `kfs serve`: throughput, EndTxn latency, the cost of read_committed.

    .venv/bin/python -m bench.transactions [--seconds S] [--commit-ms MS]

Starts ``kfs serve`` (bench.produce_fetch's daemon: temporary data
directory, a ``file://`` store, cautious durability) and measures with
confluent-kafka, 1 KiB values over 6 partitions:

- produce throughput of an idempotent producer (acks=all) for ``--seconds``,
  and of a transactional one committing every ``--commit-ms`` (100 ms) over
  the same time, one after the other; the target is the transactional one at
  0.8 of the other or more;
- EndTxn latency: each ``commit_transaction()`` of that run, p50 / p99 (it
  flushes the transaction's records first, as librdkafka does, then waits
  for the coordinator's answer);
- the cost of ``read_committed``: the transactional topic read from the
  start by a ``read_committed`` and by a ``read_uncommitted`` consumer, one
  after the other; MB/s of each.

Prints a table with the target marked met or missed; exits non-zero only if
the daemon or a client fails.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.groups import Row, format_table
from bench.produce_fetch import Daemon

PARTITIONS = 6
VALUE = b"x" * 1024
#: Transactional throughput against idempotent, at least.
TARGET_RATIO = 0.8


def create_topic(bootstrap: str) -> str:
    topic = f"bench-txn-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    return topic


def produce_idempotent(bootstrap: str, topic: str, seconds: float) -> float:
    """MB/s acknowledged by an idempotent producer sending as fast as it can."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    sent = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        try:
            producer.produce(topic, VALUE, partition=sent % PARTITIONS)
            sent += 1
        except BufferError:
            producer.poll(0.01)
    assert producer.flush(120) == 0
    return sent * len(VALUE) / (time.perf_counter() - started) / 1e6


def produce_transactional(
    bootstrap: str, topic: str, seconds: float, commit_ms: float
) -> tuple[float, list[float]]:
    """MB/s committed by a transactional producer committing every ``commit_ms``; commit times."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 5}
    )
    producer.init_transactions(30)
    sent = 0
    commits: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        producer.begin_transaction()
        opened = time.perf_counter()
        while time.perf_counter() - opened < commit_ms / 1000:
            try:
                producer.produce(topic, VALUE, partition=sent % PARTITIONS)
                sent += 1
            except BufferError:
                producer.poll(0.01)
        before = time.perf_counter()
        producer.commit_transaction(60)
        commits.append(time.perf_counter() - before)
    return sent * len(VALUE) / (time.perf_counter() - started) / 1e6, commits


def read_all(bootstrap: str, topic: str, *, committed: bool) -> float:
    """MB/s of reading the whole topic from the start in one isolation level."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
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
    size = 0
    at_end: set[int] = set()
    started = time.perf_counter()
    try:
        while len(at_end) < PARTITIONS:
            for message in consumer.consume(1000, 1.0):
                error = message.error()
                if error is None:
                    size += len(message.value() or b"")
                elif error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(int(message.partition() or 0))
    finally:
        consumer.close()
    return size / (time.perf_counter() - started) / 1e6


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def run(root: Path, seconds: float, commit_ms: float) -> list[Row]:
    daemon = Daemon(root)
    daemon.start()
    try:
        plain = produce_idempotent(daemon.bootstrap, create_topic(daemon.bootstrap), seconds)
        topic = create_topic(daemon.bootstrap)
        txn, commits = produce_transactional(daemon.bootstrap, topic, seconds, commit_ms)
        committed = read_all(daemon.bootstrap, topic, committed=True)
        uncommitted = read_all(daemon.bootstrap, topic, committed=False)
    finally:
        try:
            daemon.stop()
        except Exception:  # noqa: BLE001 - whatever stopped the graceful stop, no daemon outlives the run
            daemon.kill()
    ratio = txn / plain
    met = "met" if ratio >= TARGET_RATIO else "missed"
    p99 = statistics.quantiles(commits, n=100)[98] if len(commits) >= 2 else commits[0]
    return [
        Row(
            "produce, idempotent (acks=all)", f"{plain:.1f} MB/s", f"{seconds:g} s of 1 KiB values"
        ),
        Row(
            f"produce, transactional (a commit every {commit_ms:g} ms)",
            f"{txn:.1f} MB/s",
            f"{ratio:.2f} of idempotent (target >= {TARGET_RATIO}: {met}); {len(commits)} commits",
        ),
        Row(
            "EndTxn (commit_transaction) p50 / p99",
            f"{_ms(statistics.median(commits))} / {_ms(p99)}",
            "the flush of the transaction's records included",
        ),
        Row(
            "fetch, read_uncommitted", f"{uncommitted:.1f} MB/s", "the transactional topic, from 0"
        ),
        Row(
            "fetch, read_committed",
            f"{committed:.1f} MB/s",
            f"{committed / uncommitted:.2f} of read_uncommitted",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--commit-ms", type=float, default=100.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kfs-bench-txn-") as tmp:
        print(format_table(run(Path(tmp), args.seconds, args.commit_ms)))


if __name__ == "__main__":
    main()
