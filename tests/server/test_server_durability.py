"""Invariant 1 through the daemon: an acknowledged write survives ``kill -9``.

A confluent-kafka producer (acks=all) streams records at a cautious-mode
daemon; every delivery report that says "stored at (partition, offset)" is
recorded.  Mid-stream the daemon is killed with SIGKILL - no flush, no WAL
close - and started again on the same data directory and store.  Every
acknowledged record must be readable at its offset with identical bytes.
The same with SIGTERM, which must also exit 0 after answering the requests
it had read.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import pytest

from testkit.daemon import Daemon, DaemonFactory
from testkit.waiting import wait_for
from tests.server.conftest import confluent_kafka

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "survivor"
PARTITIONS = 3
ACKED_BEFORE_KILL = 20_000


class StreamingProducer:
    """Produces until stopped, on its own thread; remembers what the broker acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "compression.type": "lz4",
                "message.timeout.ms": 10_000,
                "reconnect.backoff.max.ms": 100,
            }
        )
        self.acked: dict[tuple[int, int], bytes] = {}
        self.sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="streaming-producer", daemon=True)
        self._rng = random.Random(1234)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            with self._lock:
                self.acked[(msg.partition(), msg.offset())] = msg.value()

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _run(self) -> None:
        while not self._stop.is_set():
            i = self.sent
            value = b"%08d:" % i + self._rng.randbytes(self._rng.randrange(10, 3000))
            try:
                self.producer.produce(
                    TOPIC, value=value, partition=i % PARTITIONS, on_delivery=self._on_delivery
                )
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.sent += 1
            self.producer.poll(0)
        # Whatever was not acknowledged by now is in doubt: drop it, fast.
        self.producer.purge()
        self.producer.flush(10)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def read_all(bootstrap: str) -> dict[tuple[int, int], bytes]:
    """Every record of every partition, up to the high watermark."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kfs-durability",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
        }
    )
    got: dict[tuple[int, int], bytes] = {}
    at_end: set[int] = set()
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        deadline = time.monotonic() + 60
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
                at_end.add(msg.partition())
                continue
            got[(msg.partition(), msg.offset())] = msg.value()
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS, "did not reach the end of every partition"
    return got


@pytest.mark.parametrize("backend", ["local", "s3"])
@pytest.mark.parametrize("how", ["kill-9", "sigterm"])
def test_acknowledged_records_survive_a_stop_mid_stream(
    daemons: DaemonFactory, request: pytest.FixtureRequest, how: str, backend: str
) -> None:
    store: dict[str, str] = {}
    if backend == "s3":
        store = {
            "store_url": f"s3://{request.getfixturevalue('s3_bucket')}/{how}-{uuid.uuid4().hex[:8]}",
            "s3_endpoint_url": request.getfixturevalue("moto_server"),
        }
    # Small, frequent segments: some acknowledged records are in the store,
    # some only in the WAL when the daemon stops.
    args = [
        "--durability", "cautious",
        "--default-partitions", str(PARTITIONS),
        "--segment-bytes", "256KiB",
        "--flush-interval-ms", "200",
    ]  # fmt: skip
    daemon: Daemon = daemons.start(name=f"{how}-{backend}", extra_args=args, **store)
    producer = StreamingProducer(daemon.bootstrap)
    producer.start()
    try:
        wait_for(
            lambda: producer.acked_count() >= ACKED_BEFORE_KILL,
            timeout=90,
            what=f"{ACKED_BEFORE_KILL} acknowledged records",
        )
        # Mid-stream: the producer is still sending.
        if how == "kill-9":
            daemon.kill()
        else:
            assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        producer.stop()
    acked = dict(producer.acked)
    assert len(acked) >= ACKED_BEFORE_KILL
    assert producer.sent > len(acked), "the kill should have caught records in flight"

    daemon.start()
    stored = read_all(daemon.bootstrap)
    missing = [key for key in acked if key not in stored]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    changed = [key for key, value in acked.items() if stored[key] != value]
    assert not changed, f"{len(changed)} acknowledged records changed, e.g. {changed[:5]}"
    for partition in range(PARTITIONS):
        offsets = sorted(offset for p, offset in stored if p == partition)
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # no gaps
    assert daemon.stop() == 0
