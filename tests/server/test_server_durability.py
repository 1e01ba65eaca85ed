"""Invariant 1 through the daemon: an acknowledged write survives ``kill -9``.

A confluent-kafka producer (acks=all) streams records at a cautious-mode
daemon; every delivery report that says "stored at (partition, offset)" is
recorded.  Mid-stream the daemon is killed with SIGKILL - no flush, no WAL
close - and started again on the same data directory and store.  Every
acknowledged record must be readable at its offset with identical bytes.
The same with SIGTERM, which must also exit 0 after answering the requests
it had read.

Records are in flight when the daemon goes, by construction, not by timing:
before the SIGKILL the daemon is frozen (SIGSTOP, every thread seen stopped),
and the producer goes on producing until it holds records the frozen daemon
cannot have read, so none of them can be acknowledged; before the test reads
back, those records are checked to be unacknowledged.  A SIGTERM'd daemon
answers what it had read, so there the records in flight are those produced
after it exited.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path
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

    def outstanding(self) -> int:
        """Records produced and not yet reported delivered or failed (librdkafka's count)."""
        return len(self.producer)

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


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (SIGSTOP has taken hold)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except FileNotFoundError:  # a thread that just ended
            continue
        states.append(text[text.rindex(")") + 2])  # the field after the command name
    return bool(states) and all(state in "Tt" for state in states)


def freeze_with_records_in_flight(daemon: Daemon, producer: StreamingProducer) -> int:
    """SIGSTOP the daemon, then let the producer send records it cannot read; the first index.

    Every record the producer produces once the daemon is stopped can never
    be acknowledged by it: a frozen process reads nothing, and a killed one
    nothing more.
    """
    assert daemon.proc is not None
    daemon.pause()
    wait_for(lambda: all_threads_stopped(daemon.proc.pid), timeout=10, what="the daemon stopped")
    first_unreadable = producer.sent
    wait_for(
        lambda: producer.sent > first_unreadable + 10 and producer.outstanding() > 0,
        timeout=30,
        what="records produced to the frozen daemon",
    )
    return first_unreadable


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
            in_flight_from = freeze_with_records_in_flight(daemon, producer)
            daemon.kill()
        else:
            assert daemon.stop() == 0, daemon.log()[-3000:]
            in_flight_from = producer.sent
            wait_for(
                lambda: producer.sent > in_flight_from,
                timeout=30,
                what="records produced after the daemon exited",
            )
    finally:
        producer.stop()
    acked = dict(producer.acked)
    assert len(acked) >= ACKED_BEFORE_KILL
    assert producer.sent > in_flight_from  # the stop caught records in flight ...
    late = [key for key, value in acked.items() if int(value[:8]) >= in_flight_from]
    assert not late, f"records the daemon could not have read were acknowledged: {late[:5]}"

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
