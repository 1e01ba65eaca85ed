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
import warnings
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest

from kfs_core.catalog import PartitionCatalog, SetLeaderEpochStart, TakeLease
from kfs_core.storage import LocalObjectStore
from soak.fault_proxy import FaultProxy
from testkit.daemon import Daemon, DaemonFactory, node_id_of
from testkit.raw_client import RawClient
from testkit.waiting import wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest

PARTITIONS = 6
#: moto answers slower than a local directory, above all on a busy machine.
S3_TIMING = {"heartbeat_ms": 300, "session_timeout_ms": 4000}


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
    # (partition, value) librdkafka counted delivered without an offset: a
    # request whose daemon died unanswered, implied by a later batch's ack.
    unplaced: list[tuple[int, bytes]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(str(err))
            elif msg.offset() is None:
                self.unplaced.append((msg.partition(), msg.value()))
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
    where = {(p, v) for (p, _), v in stored.items()}
    unplaced = [u for u in history.unplaced if u not in where]
    assert not unplaced, f"{len(unplaced)} record(s) acknowledged without an offset lost"
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
        try:
            wait_for(
                lambda: set(leaders(daemons[0].bootstrap, topic).values()) == {1},
                timeout=30,
                what="every partition on the remaining daemon",
            )
        except TimeoutError as exc:  # the daemons' own account of the hand-over
            raise AssertionError(
                f"{exc}\nstopped:\n{daemons[1].log()[-3000:]}\nremaining:\n{daemons[0].log()[-4000:]}"
            ) from exc
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


# --- leader epochs across a failover ------------------------------------------------------

#: Consumer errors that mean its position was judged lost.
POSITION_LOST = {
    confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE,
    confluent_kafka.KafkaError._AUTO_OFFSET_RESET,
    confluent_kafka.KafkaError._LOG_TRUNCATION,
}


class TrackingConsumer:
    """Reads every partition from its start in a thread; each record with its leader epoch.

    ``auto.offset.reset=error``: a position judged lost (out of range, or
    truncated by an OffsetForLeaderEpoch answer) is an error, not a reset.
    """

    def __init__(self, servers: str, topic: str) -> None:
        self.records: list[
            tuple[int, int, bytes, int | None]
        ] = []  # partition, offset, value, epoch
        self.errors: list[Any] = []  # per-partition errors poll returned
        self.client_errors: list[Any] = []  # the client's own (a broker going away)
        self.lock = threading.Lock()
        self._topic = topic
        self._servers = servers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TrackingConsumer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self._servers,
                "group.id": f"validate-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 500,
                "error_cb": self.client_errors.append,
            }
        )
        consumer.assign(
            [
                confluent_kafka.TopicPartition(self._topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                with self.lock:
                    if msg.error() is not None:
                        self.errors.append(msg.error())
                    else:
                        self.records.append(
                            (msg.partition(), msg.offset(), msg.value(), msg.leader_epoch())
                        )
        finally:
            consumer.close()

    def positions(self) -> dict[int, int]:
        """Partition -> the offset after the last record read."""
        with self.lock:
            found: dict[int, int] = {}
            for partition, offset, _, _ in self.records:
                found[partition] = max(found.get(partition, 0), offset + 1)
            return found


def end_offsets(servers: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": "ends"})
    try:
        return {
            p: wait_for(
                lambda p=p: consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(topic, p), timeout=10
                ),
                timeout=60,
                what=f"the end of partition {p}",
            )[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def end_offset_for_epoch(daemon: Daemon, topic: str, partition: int, epoch: int) -> tuple[int, ...]:
    """OffsetForLeaderEpoch v3 from ``daemon``: (error code, leader epoch, end offset)."""
    asked = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    request = OffsetForLeaderEpochRequest(
        version=3,
        replica_id=-1,
        topics=[
            asked(
                topic=topic,
                partitions=[
                    asked.OffsetForLeaderPartition(
                        partition=partition, current_leader_epoch=-1, leader_epoch=epoch
                    )
                ],
            )
        ],
    )
    with RawClient(daemon.bootstrap) as client:
        [answer] = client.request(request).topics[0].partitions
    return (answer.error_code, answer.leader_epoch, answer.end_offset)


def lease_start(store_url: str, topic: str, partition: int, epoch: int) -> int:
    """The start offset the lease commit of ``epoch`` recorded (the catalog's end then)."""
    catalog = PartitionCatalog(
        LocalObjectStore(store_url.removeprefix("file://")), "test", topic, partition
    )
    state = catalog.load()
    for commit in catalog.read_commits(0, state.version + 1):
        for action in commit.actions:
            if isinstance(action, TakeLease) and action.epoch == epoch:
                assert action.start_offset is not None
                return action.start_offset
    raise AssertionError(f"no lease of epoch {epoch} in {topic}-{partition}")


def test_after_a_failover_consumers_keep_their_positions_and_read_every_record_once(
    factory: DaemonFactory,
) -> None:
    """A consumer reading across a kill -9 validates its position (KIP-320) and loses nothing.

    Flushes are rare (5 s), so the consumer has read, from the holder's
    buffers, records the catalog does not hold yet: the new holder replays
    them from the store WAL under the old epoch, and its own epoch begins
    after them -- which is what OffsetForLeaderEpoch must answer.
    """
    store_url = (factory.root / "store").as_uri()
    daemons = factory.start_cluster(
        3, store_url=store_url, extra_args=["--flush-interval-ms", "5000"]
    )
    servers = bootstrap(daemons)
    topic = create_topic(servers)
    victim = daemons[1]
    victim_id = node_id_of(victim)
    with TrackingConsumer(servers, topic) as consumer:
        with BackgroundProducer(servers, topic) as producer:
            wait_for(lambda: producer.acked_count() >= 300, timeout=60, what="300 acks")
            wait_for(
                lambda: (
                    len(consumer.positions()) == PARTITIONS
                    and sum(consumer.positions().values()) >= 200
                ),
                timeout=60,
                what="the consumer reading every partition",
            )
            moved = [p for p, node in leaders(servers, topic).items() if node == victim_id]
            assert moved, "the victim leads no partition"
            read_before = consumer.positions()
            victim.kill()
            wait_for(
                lambda: victim_id not in leaders(daemons[0].bootstrap, topic).values(),
                timeout=30,
                what="the dead daemon's partitions moving",
            )
            before = producer.acked_count()
            wait_for(
                lambda: producer.acked_count() >= before + 300,
                timeout=60,
                what="acks after the kill",
            )
        servers = bootstrap(daemons)
        ends = end_offsets(servers, topic)
        wait_for(
            lambda: (
                bool(consumer.errors)  # a position judged lost: fail at once
                or all(consumer.positions().get(p, 0) >= ends[p] for p in range(PARTITIONS))
            ),
            timeout=60,
            what="the consumer reading every partition to its end",
        )
    assert not producer.history.errors, producer.history.errors[:3]
    assert not consumer.errors, consumer.errors[:3]
    assert not [e for e in consumer.client_errors if e.code() in POSITION_LOST]
    offsets = [(p, o) for p, o, _, _ in consumer.records]
    assert len(offsets) == len(set(offsets)), "a record was read twice"
    stored = {(p, o): v for p, o, v, _ in consumer.records}
    check_history(producer.history, stored)

    survivors = [d for d in daemons if d.alive()]
    by_node = {node_id_of(d): d for d in survivors}
    now_leading = leaders(servers, topic)
    replayed_past_catalog = 0
    for p in moved:
        epochs = {o: e for q, o, _, e in consumer.records if q == p}
        old = max(e for o, e in epochs.items() if o < read_before[p] and e is not None)
        began = min(o for o, e in epochs.items() if e is not None and e > old)
        new = epochs[began]
        # The old epoch ended where the new holder's began, past what it replayed.
        assert end_offset_for_epoch(by_node[now_leading[p]], topic, p, old) == (0, old, began)
        lease = lease_start(store_url, topic, p, new)
        assert lease <= began
        if read_before[p] > lease:
            replayed_past_catalog += 1
    # The case the test is about came up: the consumer had read beyond the catalog's end.
    assert replayed_past_catalog > 0, (read_before, moved)
    validations = sum(
        d.metric('kfs_requests_total{api="OFFSET_FOR_LEADER_EPOCH"}') for d in survivors
    )
    assert validations > 0, "the consumer never validated its position"


def test_a_daemon_restarted_after_kill_9_begins_its_epoch_after_what_it_recovered(
    factory: DaemonFactory,
) -> None:
    daemon = factory.start(extra_args=["--node-id", "1", "--flush-interval-ms", "600000"])
    topic = create_topic(daemon.bootstrap, partitions=1, replication=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": daemon.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(topic, value=b"before-%d" % i, partition=0)
    assert producer.flush(30) == 0
    daemon.kill()  # nothing was flushed: the 20 records are in the WAL only
    daemon.start()
    # WAL recovery replayed them under epoch 1; epoch 2 (this run's lease) begins after them.
    assert lease_start(daemon.store_url, topic, 0, 2) == 0
    assert end_offset_for_epoch(daemon, topic, 0, 1) == (0, 1, 20)
    assert end_offset_for_epoch(daemon, topic, 0, 2) == (0, 2, 20)
    producer.produce(topic, value=b"after", partition=0)
    assert producer.flush(30) == 0
    assert end_offset_for_epoch(daemon, topic, 0, 2) == (0, 2, 21)
    catalog = PartitionCatalog(
        LocalObjectStore(daemon.store_url.removeprefix("file://")), "test", topic, 0
    )
    state = catalog.load()
    starts = [
        action
        for commit in catalog.read_commits(0, state.version + 1)
        for action in commit.actions
        if isinstance(action, SetLeaderEpochStart)
    ]
    assert starts == [SetLeaderEpochStart(epoch=2, start_offset=20)]


def test_a_cautious_daemon_restarted_after_kill_9_replays_its_wal_whatever_the_assignment(
    factory: DaemonFactory,
) -> None:
    """Its local WAL alone holds what it acknowledged and had not flushed.

    Right after a restart its view of the others is not settled yet, and the
    assignment may name another daemon for one of its partitions: recovery
    takes the partition all the same, replays and flushes it, and hands it
    over afterwards.  Before, the replay skipped such a partition and its
    acknowledged records were lost.
    """
    daemons = factory.start_cluster(
        3,
        store_url=(factory.root / "store").as_uri(),
        durability="cautious",
        extra_args=["--flush-interval-ms", "600000"],
    )
    servers = bootstrap(daemons)
    topic = create_topic(servers, replication=3)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True}
    )
    for i in range(60):
        producer.produce(topic, b"record-%04d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0
    daemons[1].kill()  # nothing was flushed: its records are in its WAL only
    daemons[1].restart()
    records = read_all(bootstrap(daemons), topic)
    assert sorted(records.values()) == [b"record-%04d" % i for i in range(60)]
    assert "WAL replay skips" not in daemons[1].log()
