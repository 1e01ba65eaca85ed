"""Several `kfs serve` processes on one namespace, driven by real Kafka clients.

Three daemons share a store (the local directory store, and S3 on a moto
server); partitions spread over them; a daemon killed with ``kill -9`` in
the ``store`` durability mode loses no acknowledged record; a paused owner
can write nothing once another took over; a graceful stop hands its
partitions over at once; a node id or a WAL directory is used by one daemon
at a time.  Every check reads back what the clients were acknowledged.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest

from soak.fault_proxy import FaultProxy
from testkit.daemon import Daemon, DaemonFactory
from testkit.waiting import wait_for

PARTITIONS = 6
#: moto answers slower than a local directory, above all on a busy machine.
S3_TIMING = {"heartbeat_ms": 300, "session_timeout_ms": 4000}


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[DaemonFactory]:
    daemons = DaemonFactory(tmp_path)
    try:
        yield daemons
    finally:
        daemons.close()


def bootstrap(daemons: list[Daemon]) -> str:
    return ",".join(d.bootstrap for d in daemons if d.alive())


def create_topic(servers: str, partitions: int = PARTITIONS, replication: int = 3) -> str:
    topic = f"ha-{uuid.uuid4().hex[:8]}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics(
        [confluent_kafka.admin.NewTopic(topic, partitions, replication)]
    ).values():
        future.result(30)
    return topic


def leaders(servers: str, topic: str) -> dict[int, int]:
    """Partition -> leader node id, from a fresh Metadata request."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": servers})
    meta = admin.list_topics(topic, timeout=10)
    return {p.id: p.leader for p in meta.topics[topic].partitions.values()}


@dataclass
class History:
    """Every acknowledgement a producer got: (partition, offset) -> value."""

    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                key = (msg.partition(), msg.offset())
                assert key not in self.acked, f"offset {key} acknowledged twice"
                self.acked[key] = msg.value()


class BackgroundProducer:
    """Produces numbered records over every partition until stopped (idempotent, acks=all).

    ``settings`` adds to or overrides the producer's configuration.
    """

    def __init__(self, servers: str, topic: str, settings: dict[str, Any] | None = None) -> None:
        self.history = History()
        self.topic = topic
        self.sent = 0
        self._stop = threading.Event()
        self._producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "request.timeout.ms": 10000,
                "queue.buffering.max.messages": 2000,
                "topic.metadata.refresh.interval.ms": 500,
                "retry.backoff.ms": 100,
                **(settings or {}),
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            value = b"record-%08d" % self.sent
            # Round robin over the partitions, passing over one whose queue is
            # full (its leader is moving): the others keep going meanwhile.
            partition = attempt % PARTITIONS
            attempt += 1
            try:
                self._producer.produce(
                    self.topic,
                    value=value,
                    partition=partition,
                    on_delivery=self.history.on_delivery,
                )
                self.sent += 1
            except BufferError:
                pass
            self._producer.poll(0.002)

    def acked_count(self) -> int:
        with self.history.lock:
            return len(self.history.acked)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(90) == 0


def read_all(
    servers: str, topic: str, partitions: int = PARTITIONS
) -> dict[tuple[int, int], bytes]:
    """Every record of the topic, read from the start of each partition to its end."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            # A leader that just moved answers NOT_LEADER until the client's metadata follows.
            _, ends[p] = wait_for(
                lambda p=p: consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(topic, p), timeout=10
                ),
                timeout=60,
                what=f"the end of partition {p}",
            )
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        got: dict[tuple[int, int], bytes] = {}
        positions = dict.fromkeys(range(partitions), 0)

        def caught_up() -> bool:
            while (msg := consumer.poll(0.2)) is not None:
                assert msg.error() is None, msg.error()
                got[(msg.partition(), msg.offset())] = msg.value()
                positions[msg.partition()] = msg.offset() + 1
            return all(positions[p] >= ends[p] for p in range(partitions))

        wait_for(caught_up, timeout=60, what="reading every partition to its end")
        return got
    finally:
        consumer.close()


def check_history(history: History, stored: dict[tuple[int, int], bytes]) -> None:
    """Every acknowledged record is at its offset, once; each partition's offsets are dense."""
    missing = {k: v for k, v in history.acked.items() if stored.get(k) != v}
    assert not missing, (
        f"{len(missing)} acknowledged record(s) lost or changed: {sorted(missing)[:5]}"
    )
    values = list(stored.values())
    assert len(values) == len(set(values)), "a record is stored twice"
    for p in range(PARTITIONS):
        offsets = sorted(o for q, o in stored if q == p)
        assert offsets == list(range(len(offsets))), f"partition {p} has gaps"


def test_three_daemons_share_the_partitions_and_serve_every_client(
    factory: DaemonFactory,
) -> None:
    daemons = factory.start_cluster(3, store_url=(factory.root / "store").as_uri())
    servers = bootstrap(daemons)
    topic = create_topic(servers, replication=3)
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": daemons[0].bootstrap})
    meta = admin.list_topics(topic, timeout=10)
    assert sorted(meta.brokers) == [1, 2, 3]
    for partition in meta.topics[topic].partitions.values():
        assert len(partition.replicas) == 3
        assert partition.replicas[0] == partition.leader
    spread = sorted(leaders(servers, topic).values())
    assert set(spread) == {1, 2, 3}, spread
    with BackgroundProducer(daemons[0].bootstrap, topic) as producer:
        wait_for(lambda: producer.acked_count() >= 600, timeout=60, what="600 acks")
    check_history(producer.history, read_all(servers, topic))


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_kill_9_of_a_daemon_loses_no_acknowledged_record(
    factory: DaemonFactory, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "s3":
        endpoint = request.getfixturevalue("moto_server")
        bucket = request.getfixturevalue("s3_bucket")
        store_url, s3 = f"s3://{bucket}/ha-{uuid.uuid4().hex[:8]}", endpoint
    else:
        store_url, s3 = (factory.root / "store").as_uri(), None
    timing = S3_TIMING if backend == "s3" else {}
    daemons = factory.start_cluster(3, store_url=store_url, s3_endpoint_url=s3, **timing)
    servers = bootstrap(daemons)
    topic = create_topic(servers)
    victim = daemons[1]
    with BackgroundProducer(servers, topic) as producer:
        wait_for(lambda: producer.acked_count() >= 300, timeout=60, what="300 acks")
        victim.kill()
        before = producer.acked_count()
        wait_for(
            lambda: 2 not in leaders(daemons[0].bootstrap, topic).values(),
            timeout=30,
            what="the dead daemon's partitions moving",
        )
        wait_for(
            lambda: producer.acked_count() >= before + 300, timeout=60, what="acks after the kill"
        )
    assert not producer.history.errors, producer.history.errors[:3]
    check_history(producer.history, read_all(bootstrap(daemons), topic))
    if backend == "local":
        # Once its records are committed by the new holders, its WAL objects go.
        dead_wal = factory.root / "store" / "test" / "_wal" / "2"
        wait_for(
            lambda: not any(dead_wal.rglob("*.wal")),
            timeout=30,
            what="the dead daemon's store WAL objects swept",
        )


def test_a_joining_daemon_takes_its_share_and_clients_follow(factory: DaemonFactory) -> None:
    store_url = (factory.root / "store").as_uri()
    daemons = factory.start_cluster(3, store_url=store_url)
    topic = create_topic(bootstrap(daemons))
    with BackgroundProducer(bootstrap(daemons), topic) as producer:
        wait_for(lambda: producer.acked_count() >= 300, timeout=60, what="300 acks")
        daemons += factory.start_cluster(1, store_url=store_url, first_node_id=4)
        wait_for(
            lambda: 4 in leaders(daemons[0].bootstrap, topic).values(),
            timeout=30,
            what="partitions moving to the new daemon",
        )
        before = producer.acked_count()
        wait_for(lambda: producer.acked_count() >= before + 300, timeout=60, what="acks")
    assert not producer.history.errors, producer.history.errors[:3]
    counts = sorted(leaders(daemons[0].bootstrap, topic).values())
    assert {counts.count(node) for node in (1, 2, 3, 4)} <= {1, 2}, counts
    check_history(producer.history, read_all(bootstrap(daemons), topic))


def consume_group(servers: str, group: str, topic: str, count: int) -> list[tuple[int, int]]:
    """``count`` records through a subscribed group member, committed; their (partition, offset)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    got: list[tuple[int, int]] = []
    try:
        consumer.subscribe([topic])

        def enough() -> bool:
            while (msg := consumer.poll(0.2)) is not None:
                if msg.error() is None:
                    got.append((msg.partition(), msg.offset()))
            return len(got) >= count

        wait_for(enough, timeout=90, what=f"{count} records through group {group}")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_groups_work_across_daemons_and_survive_their_coordinator_dying(
    factory: DaemonFactory,
) -> None:
    daemons = factory.start_cluster(3, store_url=(factory.root / "store").as_uri())
    servers = bootstrap(daemons)
    topic = create_topic(servers)
    with BackgroundProducer(servers, topic) as producer:
        wait_for(lambda: producer.acked_count() >= 600, timeout=60, what="600 acks")
    first = consume_group(servers, "g1", topic, producer.acked_count())
    assert len(set(first)) == len(first)
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": servers})
    [described] = admin.describe_consumer_groups(["g1"]).values()
    coordinator = described.result(30).coordinator.id
    victim = next(d for d in daemons if d.args[d.args.index("--node-id") + 1] == str(coordinator))
    victim.kill()
    servers = bootstrap(daemons)
    with BackgroundProducer(servers, topic) as more:
        wait_for(lambda: more.acked_count() >= 300, timeout=60, what="300 more acks")
    second = consume_group(servers, "g1", topic, more.acked_count())
    # The committed offsets moved with the coordinator: nothing read before comes again.
    assert not set(first) & set(second)
    assert set(second) >= set(more.history.acked)


def test_a_paused_owner_writes_nothing_once_another_took_over(factory: DaemonFactory) -> None:
    daemons = factory.start_cluster(3, store_url=(factory.root / "store").as_uri())
    servers = bootstrap(daemons)
    topic = create_topic(servers)
    paused = daemons[2]
    with BackgroundProducer(servers, topic) as producer:
        wait_for(lambda: producer.acked_count() >= 300, timeout=60, what="300 acks")
        paused.pause()
        others = ",".join(d.bootstrap for d in daemons[:2])
        wait_for(
            lambda: 3 not in leaders(others, topic).values(),
            timeout=30,
            what="the paused daemon's partitions moving",
        )
        before = producer.acked_count()
        wait_for(lambda: producer.acked_count() >= before + 300, timeout=60, what="acks")
        paused.resume()
        before = producer.acked_count()
        wait_for(lambda: producer.acked_count() >= before + 300, timeout=60, what="acks")
    check_history(producer.history, read_all(bootstrap(daemons), topic))
    # It noticed: a refused append, a fenced commit, or a lapsed lease.
    assert any(
        line in paused.log()
        for line in ("starts over from the store", "another daemon took", "lease deadline")
    ), paused.log()[-3000:]


def test_a_daemon_cut_off_from_the_store_stops_and_others_take_over(
    factory: DaemonFactory, moto_server: str, s3_bucket: str
) -> None:
    """Node 3 reaches S3 through a proxy that fails every request while the cut lasts."""
    store_url = f"s3://{s3_bucket}/ha-{uuid.uuid4().hex[:8]}"
    with FaultProxy(moto_server, seed=3) as proxy:
        daemons = factory.start_cluster(
            2, store_url=store_url, s3_endpoint_url=moto_server, **S3_TIMING
        )
        daemons += factory.start_cluster(
            1, store_url=store_url, s3_endpoint_url=proxy.url, first_node_id=3, **S3_TIMING
        )
        wait_for(
            lambda: all(d.metric("kfs_cluster_live_nodes") >= 3 for d in daemons),
            timeout=30,
            what="three live daemons",
        )
        topic = create_topic(bootstrap(daemons))
        with BackgroundProducer(bootstrap(daemons), topic) as producer:
            wait_for(lambda: producer.acked_count() >= 300, timeout=60, what="300 acks")
            wait_for(lambda: 3 in leaders(daemons[0].bootstrap, topic).values(), timeout=30)
            proxy.set(outage=True)
            wait_for(
                lambda: 3 not in leaders(daemons[0].bootstrap, topic).values(),
                timeout=30,
                what="the cut-off daemon's partitions moving",
            )
            before = producer.acked_count()
            wait_for(lambda: producer.acked_count() >= before + 300, timeout=60, what="acks")
            assert daemons[2].metric("kfs_cluster_lease_valid") == 0
            proxy.set()
            wait_for(
                lambda: daemons[2].metric("kfs_cluster_lease_valid") == 1,
                timeout=30,
                what="the healed daemon's leases valid again",
            )
            before = producer.acked_count()
            wait_for(lambda: producer.acked_count() >= before + 300, timeout=60, what="acks")
        assert not producer.history.errors, producer.history.errors[:3]
        check_history(producer.history, read_all(bootstrap(daemons), topic))


def test_a_graceful_stop_hands_the_partitions_over(factory: DaemonFactory) -> None:
    daemons = factory.start_cluster(
        2, store_url=(factory.root / "store").as_uri(), durability="cautious"
    )
    servers = bootstrap(daemons)
    topic = create_topic(servers)
    with BackgroundProducer(servers, topic) as producer:
        wait_for(lambda: producer.acked_count() >= 300, timeout=60, what="300 acks")
        assert daemons[1].stop() == 0
        wait_for(
            lambda: set(leaders(daemons[0].bootstrap, topic).values()) == {1},
            timeout=30,
            what="every partition on the remaining daemon",
        )
        before = producer.acked_count()
        wait_for(lambda: producer.acked_count() >= before + 300, timeout=60, what="acks")
    assert not producer.history.errors, producer.history.errors[:3]
    check_history(producer.history, read_all(daemons[0].bootstrap, topic))


def test_a_node_id_serves_one_daemon_at_a_time(factory: DaemonFactory) -> None:
    store_url = (factory.root / "store").as_uri()
    [first] = factory.start_cluster(1, store_url=store_url)
    with pytest.raises(RuntimeError, match="exited early"):
        factory.start(name="twin", store_url=store_url, extra_args=["--node-id", "1"])
    assert "node id 1 is in use" in factory.daemons[-1].log()
    assert first.alive()


def test_a_wal_directory_serves_one_daemon_at_a_time(factory: DaemonFactory) -> None:
    first = factory.start(extra_args=["--node-id", "1"])
    with pytest.raises(RuntimeError, match="exited early"):
        factory.start(
            name="second",
            store_url=first.store_url,
            extra_args=["--data-dir", str(first.data_dir), "--node-id", "2"],
        )
    assert "another kfs serve is using the WAL directory" in factory.daemons[-1].log()
    assert first.alive()
