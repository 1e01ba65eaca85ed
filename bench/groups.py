"""Consumer groups through a real `kfs serve`: rebalances, end-to-end latency, offset rebuild.

    .venv/bin/python -m bench.groups [--commits N] [--seconds S] [--rate-mb R]

Starts ``kfs serve`` (bench.produce_fetch's daemon: temporary data
directory, a ``file://`` store, cautious durability) and measures with
confluent-kafka consumers that subscribe:

- rebalance, 3 members: three consumers of one group subscribe at once to a
  6-partition topic that already holds records; the time from the first
  ``subscribe()`` to every member having fetched its first record.  KFS's
  ``group.initial.rebalance.delay.ms`` is 300 ms; Kafka's default is
  3000 ms, which a Kafka broker would add to this row (a reference, not a
  target);
- rebalance, one member leaves: ``close()`` (LeaveGroup) of one member, then
  the time until another member fetches a record from one of its partitions;
- end-to-end latency: a producer at ``--rate-mb`` MB/s of 1 KiB values
  (acks=all) and one group consumer; per record, the time from the
  producer's CreateTime timestamp to the consumer receiving it, p50 / p99;
- offset rebuild: ``--commits`` offset commits (one partition each, as
  librdkafka sends them from a consumer's commit loop), then a graceful
  restart; the daemon's own measure of rebuilding them from
  ``__consumer_offsets`` (``kfs_groups_offsets_load_seconds``).

Prints a table; exits non-zero only if the daemon or a client fails.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.produce_fetch import Daemon

PARTITIONS = 6
KIB = 1024
KAFKA_INITIAL_REBALANCE_DELAY_S = 3.0


@dataclass
class Row:
    what: str
    value: str
    note: str = ""


def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    topic = f"bench-groups-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    return topic


def produce_each_partition(bootstrap: str, topic: str, partitions: list[int], count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for partition in partitions:
        for _ in range(count):
            producer.produce(topic, b"x" * 100, partition=partition)
    assert producer.flush(60) == 0


def consumer(bootstrap: str, group: str, name: str) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
        }
    )


class Member(threading.Thread):
    """A polling group member noting when it first fetched a record, per partition."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer(bootstrap, group, name)
        self.topic = topic
        self.first_record_at: float | None = None
        self.partition_first: dict[int, float] = {}
        self.stopping = threading.Event()
        self.owned: set[int] = set()

    def run(self) -> None:
        def assigned(_: object, parts: list[confluent_kafka.TopicPartition]) -> None:
            self.owned = {p.partition for p in parts}

        self.consumer.subscribe([self.topic], on_assign=assigned)
        while not self.stopping.is_set():
            msg = self.consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            now = time.perf_counter()
            if self.first_record_at is None:
                self.first_record_at = now
            partition = msg.partition()
            assert partition is not None  # a record without an error has its partition
            self.partition_first.setdefault(partition, now)

    def stop(self, close: bool = True) -> None:
        self.stopping.set()
        self.join(30)
        if close:
            self.consumer.close()


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)


def bench_rebalance(bootstrap: str) -> list[Row]:
    topic = create_topic(bootstrap)
    produce_each_partition(bootstrap, topic, list(range(PARTITIONS)), 5)
    group = f"rebalance-{uuid.uuid4().hex[:6]}"
    members = [Member(bootstrap, group, topic, f"m{i}") for i in range(3)]
    started = time.perf_counter()
    for member in members:
        member.start()
    wait_until(
        lambda: all(m.first_record_at is not None for m in members), 60, "three members fetching"
    )
    joined = max(m.first_record_at or 0 for m in members) - started
    wait_until(lambda: sum(len(m.owned) for m in members) == PARTITIONS, 60, "a full assignment")
    leaver, *rest = members
    moved = sorted(leaver.owned)
    produce_each_partition(bootstrap, topic, moved, 1)
    left_at = time.perf_counter()
    leaver.stop()
    wait_until(
        lambda: any(
            p in m.partition_first and m.partition_first[p] > left_at for m in rest for p in moved
        ),
        60,
        "a remaining member fetching a moved partition",
    )
    moved_at = min(
        m.partition_first[p]
        for m in rest
        for p in moved
        if p in m.partition_first and m.partition_first[p] > left_at
    )
    for member in rest:
        member.stop()
    return [
        Row(
            "rebalance: 3 members, first JoinGroup to first record each",
            f"{joined * 1000:.0f} ms",
            f"Kafka's defaults add a {KAFKA_INITIAL_REBALANCE_DELAY_S:g} s initial delay",
        ),
        Row(
            "rebalance: one member leaves, LeaveGroup to its partitions fetched",
            f"{(moved_at - left_at) * 1000:.0f} ms",
            f"{len(moved)} partition(s) moved",
        ),
    ]


def bench_latency(bootstrap: str, seconds: float, rate_mb: float) -> Row:
    topic = create_topic(bootstrap)
    group = f"latency-{uuid.uuid4().hex[:6]}"
    reader = consumer(bootstrap, group, "latency")
    reader.subscribe([topic], on_assign=lambda c, parts: None)
    latencies: list[float] = []
    stop = threading.Event()
    produced = 0

    def produce() -> None:
        nonlocal produced
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1}
        )
        value = b"v" * KIB
        per_tick = max(1, int(rate_mb * 1_000_000 / KIB / 100))  # 100 ticks a second
        next_tick = time.monotonic()
        while not stop.is_set():
            for _ in range(per_tick):
                producer.produce(topic, value, timestamp=int(time.time() * 1000))
                produced += 1
            producer.poll(0)
            next_tick += 0.01
            time.sleep(max(0.0, next_tick - time.monotonic()))
        producer.flush(30)

    # Wait for the assignment before producing, so the rebalance is not measured.
    deadline = time.monotonic() + 60
    while not reader.assignment():
        reader.poll(0.05)
        if time.monotonic() > deadline:
            raise TimeoutError("the latency consumer got no assignment")
    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        msg = reader.poll(0.05)
        if msg is None or msg.error():
            continue
        latencies.append(time.time() * 1000 - msg.timestamp()[1])
    stop.set()
    thread.join(60)
    reader.close()
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    return Row(
        f"end-to-end latency at {rate_mb:g} MB/s, produce to group consumer",
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms",
        f"{len(latencies)} records of 1 KiB",
    )


def bench_rebuild(daemon: Daemon, commits: int, groups: int = 8) -> Row:
    """``commits`` single-partition commits from ``groups`` groups' committers, then a restart.

    A group's commits are stored one after another (each durable before the
    next is applied, so replay order is commit order); different groups
    share WAL fsyncs, which is how a daemon with many groups commits.
    """
    bootstrap = daemon.bootstrap
    topic = create_topic(bootstrap)
    done = 0
    failed: list[object] = []

    def on_commit(err: object, _parts: object) -> None:
        nonlocal done
        done += 1
        if err is not None:
            failed.append(err)

    committers = [
        confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"rebuild-{g}",
                "enable.auto.commit": False,
                "on_commit": on_commit,
            }
        )
        for g in range(groups)
    ]
    started = time.perf_counter()
    for i in range(commits):
        partition = confluent_kafka.TopicPartition(topic, i % PARTITIONS, i)
        committers[i % groups].commit(offsets=[partition], asynchronous=True)
        if i % 1000 == 999:
            for committer in committers:
                committer.poll(0)
    deadline = time.monotonic() + 600
    while done < commits and time.monotonic() < deadline:
        for committer in committers:
            committer.poll(0.01)
    commit_rate = commits / (time.perf_counter() - started)
    for committer in committers:
        committer.close()
    if failed or done < commits:
        raise RuntimeError(f"{len(failed)} commits failed, {commits - done} unanswered")
    daemon.stop()
    daemon.start()
    metrics = daemon.metrics()
    seconds = metrics["kfs_groups_offsets_load_seconds"]
    return Row(
        f"offset rebuild after {commits:,} commits (graceful restart)",
        f"{seconds * 1000:.0f} ms",
        f"{int(metrics['kfs_groups_offsets_loaded'])} live offsets of {groups} groups; "
        f"commits ran at {commit_rate:,.0f}/s",
    )


def run(root: Path, commits: int, seconds: float, rate_mb: float) -> list[Row]:
    daemon = Daemon(root)
    daemon.start()
    try:
        rows = bench_rebalance(daemon.bootstrap)
        rows.append(bench_latency(daemon.bootstrap, seconds, rate_mb))
        rows.append(bench_rebuild(daemon, commits))
    finally:
        try:
            daemon.stop()
        except Exception:  # noqa: BLE001 - whatever stopped the graceful stop, no daemon outlives the run
            daemon.kill()
    return rows


def format_table(rows: list[Row]) -> str:
    width = max(len(r.what) for r in rows)
    value_width = max(len(r.value) for r in rows)
    lines = [f"{'measure':<{width}}  {'result':<{value_width}}  note"]
    lines += [f"{r.what:<{width}}  {r.value:<{value_width}}  {r.note}" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate-mb", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kfs-bench-groups-") as tmp:
        print(format_table(run(Path(tmp), args.commits, args.seconds, args.rate_mb)))


if __name__ == "__main__":
    main()
