"""Real clients against `kfs serve`: confluent-kafka and kafka-python, every codec, 3 partitions.

Each test runs twice, against a daemon on the local-directory store and one
on S3 (moto).  Partitions are assigned (no consumer groups).  Every record a
producer got acknowledged must come back at its offset with its bytes, read
by both clients; the last test restarts the daemon (SIGTERM, exit 0) and
reads everything back from the store.
"""

from __future__ import annotations

import pytest

from testkit.daemon import Daemon
from tests.server.conftest import (
    CODECS,
    Delivered,
    by_partition,
    consume_confluent,
    consume_confluent_topics,
    consume_kafka_python,
    produce_confluent,
    produce_kafka_python,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 3


def values_for(prefix: str, count: int = 120) -> list[bytes]:
    """Small, medium and one large value (several batches, some compressed well, some not)."""
    values = [b"%s-%04d-" % (prefix.encode(), i) * (1 + i % 17) for i in range(count)]
    values.append(bytes(range(256)) * 600)  # ~150 KiB: a batch of its own
    return values


# What each daemon was asked to store, for the restart test: topic -> delivered.
_written: dict[str, dict[str, Delivered]] = {}


def remember(daemon: Daemon, topic: str, delivered: Delivered) -> None:
    _written.setdefault(daemon.store_url, {})[topic] = delivered


def check(delivered: Delivered, consumed: Delivered) -> None:
    assert len(consumed) == len(delivered)
    assert by_partition(consumed) == by_partition(delivered)
    for rows in by_partition(consumed).values():
        offsets = [offset for offset, _ in rows]
        assert offsets == sorted(set(offsets))  # strictly increasing, no duplicates


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(daemon: Daemon, codec: str) -> None:
    topic = f"cf-{codec}"
    delivered = produce_confluent(daemon.bootstrap, topic, values_for(topic), codec=codec)
    assert {p for p, _, _ in delivered} == set(range(PARTITIONS))
    remember(daemon, topic, delivered)
    check(delivered, consume_confluent(daemon.bootstrap, topic, PARTITIONS, len(delivered)))
    # And the other client reads the same bytes.
    check(delivered, consume_kafka_python(daemon.bootstrap, topic, PARTITIONS, len(delivered)))


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(daemon: Daemon, codec: str) -> None:
    topic = f"kp-{codec}"
    delivered = produce_kafka_python(daemon.bootstrap, topic, values_for(topic), codec=codec)
    remember(daemon, topic, delivered)
    check(delivered, consume_kafka_python(daemon.bootstrap, topic, PARTITIONS, len(delivered)))
    check(delivered, consume_confluent(daemon.bootstrap, topic, PARTITIONS, len(delivered)))


def test_acks_1_and_0_are_stored_too(daemon: Daemon) -> None:
    topic = "acks-variants"
    acked = produce_confluent(daemon.bootstrap, topic, [b"one-%d" % i for i in range(30)], acks="1")
    unacked = produce_confluent(
        daemon.bootstrap, topic, [b"zero-%d" % i for i in range(30)], acks="0"
    )
    assert all(offset is None or offset < 0 for _, offset, _ in unacked)  # acks=0: no offsets
    consumed = consume_confluent(daemon.bootstrap, topic, PARTITIONS, 60)
    assert {v for _, _, v in consumed} == {v for _, _, v in acked + unacked}
    remember(daemon, topic, [row for row in consumed])


def test_restart_reads_everything_back(daemon: Daemon) -> None:
    written = _written.get(daemon.store_url)
    assert written, "runs after the round trips of this module"
    assert daemon.stop() == 0, daemon.log()[-3000:]
    assert "log flushed and closed" in daemon.log()
    daemon.start()
    total = sum(len(delivered) for delivered in written.values())
    consumed = consume_confluent_topics(daemon.bootstrap, sorted(written), PARTITIONS, total)
    for topic, delivered in sorted(written.items()):
        check(delivered, consumed[topic])
