"""Recovery of a big WAL: fill it, ``kill -9``, time the restart to ``/readyz``, read it all back.

The daemon runs with flushing held off (`DAEMON_ARGS`: huge segments, an
hour's flush interval, a pool larger than the load), so every acknowledged
byte is in the WAL only when it is killed.  The restart must replay all of
it; the issue's target is ready within 5 s for 1 GiB.  Then every
acknowledged record is read back and compared by digest.
"""

from __future__ import annotations

import hashlib
import random
import time
from typing import Any

import confluent_kafka

from soak.crash_cycles import Restartable
from soak.load import QUIET, RESTART_ERRORS, TOPIC, create_topic, message_position
from soak.report import Row

VALUE_BYTES = 16 << 10
TARGET_S = 5.0


def daemon_args(wal_bytes: int) -> list[str]:
    """`kfs serve` flags that keep ``wal_bytes`` of produce in the WAL, unflushed."""
    room = max(wal_bytes * 3, 64 << 20)
    return [
        "--segment-bytes", str(room),
        "--pool-bytes", str(room),
        "--flush-interval-ms", str(3_600_000),
    ]  # fmt: skip


def _digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=16).digest()


def fill(bootstrap: str, wal_bytes: int, seed: int) -> dict[tuple[int, int], bytes]:
    """Produce ``wal_bytes`` of values (acks=all); acknowledged position -> value digest."""
    rng = random.Random(seed)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **QUIET}
    )
    acked: dict[tuple[int, int], bytes] = {}
    digests: dict[bytes, bytes] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = digests.pop(msg.key())

    for i in range(wal_bytes // VALUE_BYTES):
        value = rng.randbytes(VALUE_BYTES)
        key = b"%09d" % i
        digests[key] = _digest(value)
        while True:
            try:
                producer.produce(TOPIC, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records never acknowledged")
    return acked


def read_digests(
    bootstrap: str, count: int, timeout_s: float = 300.0
) -> dict[tuple[int, int], bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kfs-wal-recovery-check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    got: dict[tuple[int, int], bytes] = {}
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.name() in RESTART_ERRORS:
                    continue
                raise RuntimeError(f"read-back failed: {error.name()}: {error.str()}")
            got[message_position(msg)] = _digest(msg.value() or b"")
    finally:
        consumer.close()
    return got


def run(daemon: Restartable, *, wal_bytes: int, seed: int, store: str) -> Row:
    """Fill ``wal_bytes`` into a daemon started with `daemon_args`, kill -9, restart, check."""
    create_topic(daemon.bootstrap)
    acked = fill(daemon.bootstrap, wal_bytes, seed)
    daemon.kill()
    killed = time.monotonic()
    daemon.start()
    recovery = time.monotonic() - killed
    stored = read_digests(daemon.bootstrap, len(acked))
    lost = [p for p in acked if p not in stored]
    changed = [p for p, digest in acked.items() if p in stored and stored[p] != digest]
    problems = []
    if recovery > TARGET_S and wal_bytes >= 1 << 30:
        problems.append(f"ready after {recovery:.1f} s, target {TARGET_S:g} s (missed)")
    return Row(
        campaign=f"recover a {wal_bytes >> 20} MiB WAL",
        store=store,
        cycles=1,
        acknowledged=len(acked),
        lost=len(lost),
        changed=len(changed),
        max_recovery_s=recovery,
        seed=seed,
        problems=[f"lost, e.g. {sorted(lost)[:5]}"] * bool(lost) + problems,
    )
