"""The `demo-events` stream `kfs run` starts: a JSON event about every second.

It is an ordinary Kafka client (confluent-kafka) talking to the daemon over
its socket, so what a new user sees in the store, the Airflow DAGs and the KFS
page is exactly what their own producers would make.  The topic is created
once, with a few partitions and a day's retention, so the maintenance DAGs
have small segments to compact and old ones to expire, and with an Iceberg
table (``kfs.table.enabled``, partitioned by day) that the ``kfs_tables`` DAG
keeps: its ``amount`` column appears with the first purchase.

Run on its own::

    python -m kfs_core.cli.demo --bootstrap 127.0.0.1:9092 [--interval 1.0]

SIGTERM or SIGINT stop it after the messages in flight are delivered.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import random
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

DEMO_TOPIC: Final = "demo-events"
DEMO_PARTITIONS: Final = 3
DEMO_CONFIGS: Final = {
    "retention.ms": str(24 * 3600 * 1000),
    "kfs.table.enabled": "true",
    "kfs.table.partition.by": "day(_timestamp)",
}

_ACTIONS: Final = ("view", "click", "add_to_cart", "purchase", "logout")
_PAGES: Final = ("/", "/search", "/product/17", "/product/42", "/cart", "/checkout")

log = logging.getLogger("kfs.demo")


def demo_event(sequence: int, rng: random.Random) -> tuple[bytes, bytes]:
    """Event ``sequence`` as (key, JSON value); the key (a user) picks the partition."""
    user = f"user-{rng.randrange(1, 25):02d}"
    action = rng.choice(_ACTIONS)
    event: dict[str, Any] = {
        "event_id": sequence,
        "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "user": user,
        "action": action,
        "page": rng.choice(_PAGES),
    }
    if action == "purchase":
        event["amount"] = round(rng.uniform(3, 250), 2)
    return user.encode(), json.dumps(event, separators=(",", ":")).encode()


def ensure_topic(
    bootstrap: str, *, should_stop: Callable[[], bool] = lambda: False, timeout_s: float = 30.0
) -> bool:
    """Create `demo-events` unless it exists; whether this call created it.

    Gives up quietly (False) when ``should_stop()`` turns true first.
    """
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kfs-demo"})
    topic = NewTopic(DEMO_TOPIC, num_partitions=DEMO_PARTITIONS, config=dict(DEMO_CONFIGS))
    future = admin.create_topics([topic], request_timeout=timeout_s)[DEMO_TOPIC]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            future.result(timeout=0.1)
        except FutureTimeout:
            if should_stop():
                return False
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer to CreateTopics from {bootstrap}") from None
            continue
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise
        return True


def run_stream(bootstrap: str, *, interval_s: float, should_stop: Callable[[], bool]) -> int:
    """Produce one event every ``interval_s`` until ``should_stop()``; the number delivered."""
    from confluent_kafka import Producer

    delivered = 0
    failed = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered, failed
        if err is None:
            delivered += 1
            return
        failed += 1
        if failed == 1 or failed % 100 == 0:
            log.warning("%d event(s) not delivered; latest: %s", failed, err)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "kfs-demo",
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "none",
        }
    )
    rng = random.Random()
    sequence = 0
    next_due = time.monotonic()
    while not should_stop():
        now = time.monotonic()
        if now < next_due:
            # poll() serves delivery reports while it waits; a signal is seen within 0.1 s.
            producer.poll(min(0.1, next_due - now))
            continue
        key, value = demo_event(sequence, rng)
        try:
            producer.produce(DEMO_TOPIC, key=key, value=value, on_delivery=on_delivery)
        except BufferError:  # the daemon is away and the local queue is full: skip a beat
            log.warning("producer queue full; event %d dropped", sequence)
        sequence += 1
        next_due = max(next_due + interval_s, now)
    left = producer.flush(5)
    log.info("stopped: %d event(s) delivered, %d failed, %d left unsent", delivered, failed, left)
    return delivered


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kfs_core.cli.demo", description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the daemon's host:port")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between events")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    stopping: list[int] = []
    # A flag, not a threading.Event: a handler must not take locks the loop may hold.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, _frame: stopping.append(signum))
    created = ensure_topic(args.bootstrap, should_stop=lambda: bool(stopping))
    if stopping:
        return 0
    log.info(
        "%s topic %r (%d partitions); one event every %.1fs to %s",
        "created" if created else "using",
        DEMO_TOPIC,
        DEMO_PARTITIONS,
        args.interval,
        args.bootstrap,
    )
    run_stream(args.bootstrap, interval_s=args.interval, should_stop=lambda: bool(stopping))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
