"""``spark.read.format("kfs")`` on topics a real daemon wrote: what a Kafka consumer reads.

confluent-kafka producers write keyed records with headers, null keys and
values, a LogAppendTime topic, and a committed and an aborted transaction;
the daemon stops (everything sealed into segments) and the data source reads
the store: the rows equal what a ``read_committed`` consumer read before,
column for column.  Offsets, partitions and pushed-down filters narrow the
read; a stream follows new segments with its offsets in a checkpoint; bad
options get a clear error.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan

from spark_jobs.topic_source import (
    Bounds,
    KfsFilteringTopicReader,
    KfsSourceError,
    KfsTopicReader,
    KfsTopicSource,
    SourceOptions,
)
from testkit.daemon import Daemon, DaemonFactory
from testkit.waiting import wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import confluent_kafka
    import confluent_kafka.admin

pytestmark = [pytest.mark.spark, pytest.mark.integration]

NS = "test"  # the namespace DaemonFactory gives its daemons
PARTITIONS = 3
RECORDS = 300

Row = tuple[Any, ...]  # (topic, partition, offset, key, value, timestamp ms, type, headers)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    factory = DaemonFactory(tmp_path / "kfs")
    try:
        yield factory.start(name="tables")
    finally:
        factory.close()


def _create(bootstrap: str, topic: str, partitions: int, **configs: str) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    new = confluent_kafka.admin.NewTopic(topic, partitions, 1, config=configs)
    admin.create_topics([new])[topic].result(30)


def _produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        key = None if i % 17 == 0 else b"k-%d" % (i % 23)
        value = None if i % 29 == 0 else b'{"i": %d}' % i
        headers = [("n", str(i).encode()), ("empty", b""), ("none", None)] if i % 3 else None
        producer.produce(topic, value, key, partition=i % PARTITIONS, headers=headers)
        producer.poll(0)
    assert producer.flush(30) == 0


def _transactions(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(30)
    for label, commit in (("committed", True), ("aborted", False)):
        producer.begin_transaction()
        for i in range(12):
            producer.produce(topic, b"%s-%d" % (label.encode(), i), b"t", partition=i % PARTITIONS)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # on the broker first: an abort purges what is still queued
            producer.abort_transaction(30)


def _consume(bootstrap: str, topics: list[str]) -> set[Row]:
    """Every record a read_committed consumer reads, up to the end offsets."""
    return _consume_partitions(bootstrap, topics, PARTITIONS)


def _consume_partitions(bootstrap: str, topics: list[str], partitions: int) -> set[Row]:
    """`_consume` of topics with ``partitions`` partitions each."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    parts = [confluent_kafka.TopicPartition(t, p) for t in topics for p in range(partitions)]
    ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp)[1] for tp in parts}
    consumer.assign([confluent_kafka.TopicPartition(t, p, 0) for t, p in ends])
    rows: set[Row] = set()
    done: set[tuple[str, int]] = {tp for tp, end in ends.items() if end == 0}

    def caught_up() -> bool:
        for message in consumer.consume(500, timeout=0.5):
            if message.error() is not None:
                continue
            tp = (message.topic(), message.partition())
            kind, ms = message.timestamp()
            headers = tuple(message.headers() or ())
            rows.add((*tp, message.offset(), message.key(), message.value(), ms, kind - 1, headers))
            if message.offset() + 1 >= ends[tp]:
                done.add(tp)
        # read_committed stops at markers: a partition is done once its position passes them
        for tp in set(ends) - done:
            position = consumer.position([confluent_kafka.TopicPartition(*tp)])[0].offset
            if position >= ends[tp]:
                done.add(tp)
        return done == set(ends)

    wait_for(caught_up, timeout=60, what="the consumer to reach the end offsets")
    consumer.close()
    return rows


def _spark_rows(frame: Any) -> set[Row]:
    rows = set()
    for r in frame.collect():
        headers = tuple((h["key"], h["value"]) for h in r["headers"] or ())
        ms = int(r["timestamp"].timestamp() * 1000 + 0.5)
        rows.add(
            (
                r["topic"],
                r["partition"],
                r["offset"],
                None if r["key"] is None else bytes(r["key"]),
                None if r["value"] is None else bytes(r["value"]),
                ms,
                r["timestampType"],
                tuple((k, None if v is None else bytes(v)) for k, v in headers),
            )
        )
    return rows


def _reader(spark: Any, daemon: Daemon, **options: str) -> Any:
    spark.dataSource.register(KfsTopicSource)
    reader = spark.read.format("kfs").option("storeUrl", daemon.store_url)
    reader = reader.option("namespace", NS)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader


def test_the_source_reads_what_a_read_committed_consumer_reads(daemon: Daemon, spark: Any) -> None:
    plain, appended = f"plain-{uuid.uuid4().hex[:6]}", f"logtime-{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, plain, PARTITIONS)
    _create(daemon.bootstrap, appended, PARTITIONS, **{"message.timestamp.type": "LogAppendTime"})
    _produce(daemon.bootstrap, plain, RECORDS)
    _transactions(daemon.bootstrap, plain)
    _produce(daemon.bootstrap, appended, 60)
    consumed = _consume(daemon.bootstrap, [plain, appended])
    assert daemon.stop() == 0  # everything acknowledged is sealed into segments

    frame = _reader(spark, daemon, subscribe=f"{plain},{appended}", includeHeaders="true").load()
    assert frame.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    assert _spark_rows(frame) == consumed
    assert len(consumed) == RECORDS + 12 + 60
    assert {r[6] for r in consumed if r[0] == appended} == {1}  # LogAppendTime

    uncommitted = _reader(spark, daemon, topic=plain, isolationLevel="read_uncommitted").load()
    values = {bytes(r["value"]) for r in uncommitted.collect() if r["value"] is not None}
    assert {b"aborted-%d" % i for i in range(12)} <= values
    committed = _reader(spark, daemon, topic=plain).load()
    assert committed.count() == RECORDS + 12
    assert "headers" not in committed.columns


def test_offsets_partitions_and_filters_narrow_the_read(daemon: Daemon, spark: Any) -> None:
    topic = f"narrow-{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, topic, PARTITIONS)
    for round_ in range(3):  # three segments per partition
        _produce(daemon.bootstrap, topic, 90, start=90 * round_)
        daemon.restart()
    assert daemon.stop() == 0

    ranged = _reader(
        spark,
        daemon,
        topic=topic,
        startingOffsets=f'{{"{topic}": {{"0": 10, "1": -2}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 40, "2": 5}}}}',
    ).load()
    got = {(r["partition"], r["offset"]) for r in ranged.collect()}
    assert got == (
        {(0, o) for o in range(10, 40)} | {(1, o) for o in range(90)} | {(2, o) for o in range(5)}
    )
    one = _reader(spark, daemon, topic=topic, partitions="2").load()
    assert {r["partition"] for r in one.collect()} == {2} and one.count() == 90

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        full = _reader(spark, daemon, topic=topic, filterPushdown="true").load()
        filtered = full.where("partition = 1 AND offset >= 70")
        assert {r["offset"] for r in filtered.collect()} == set(range(70, 90))
        late = full.where(f"timestamp > timestamp_millis({_newest_ms(daemon, topic)})")
        assert late.count() == 0
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")

    options = SourceOptions.parse({"storeUrl": daemon.store_url, "namespace": NS, "topic": topic})
    everything = KfsTopicReader(options).partitions()
    assert len(everything) == 3 * PARTITIONS
    narrowed = KfsFilteringTopicReader(options)
    handed_back = list(
        narrowed.pushFilters(
            [
                EqualTo(("partition",), 1),
                GreaterThanOrEqual(("offset",), 70),
                LessThan(("offset",), 200),
            ]
        )
    )
    assert len(handed_back) == 3  # Spark applies them to the rows too
    assert narrowed.bounds == Bounds(partitions=frozenset({1}), min_offset=70, max_offset=199)
    slices = narrowed.partitions()
    assert [(s.partition, s.start, s.end) for s in slices] == [(1, 70, 90)]
    future = KfsFilteringTopicReader(options)
    list(future.pushFilters([GreaterThan(("timestamp",), _after(daemon, topic))]))
    assert future.partitions() == []


def _newest_ms(daemon: Daemon, topic: str) -> int:
    """The newest record timestamp of the topic's segments (the catalog's)."""
    from kfs_core.catalog import PartitionCatalog
    from kfs_core.storage import open_store

    store = open_store(daemon.store_url)
    try:
        return max(
            s.max_timestamp
            for p in range(PARTITIONS)
            for s in PartitionCatalog(store, NS, topic, p).load().segments
        )
    finally:
        store.close()


def _after(daemon: Daemon, topic: str) -> Any:
    import datetime

    return datetime.datetime.fromtimestamp(_newest_ms(daemon, topic) / 1000 + 1, datetime.UTC)


def test_a_stream_follows_new_segments_through_its_checkpoint(
    daemon: Daemon, spark: Any, tmp_path: Path
) -> None:
    topic = f"stream-{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, topic, PARTITIONS)
    _produce(daemon.bootstrap, topic, 60)
    daemon.restart()
    spark.dataSource.register(KfsTopicSource)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_once() -> None:
        stream = (
            spark.readStream.format("kfs")
            .option("storeUrl", daemon.store_url)
            .option("namespace", NS)
            .option("topic", topic)
            .load()
        )
        query = (
            stream.writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)

    run_once()
    assert spark.read.parquet(str(output)).count() == 60
    _produce(daemon.bootstrap, topic, 45, start=60)
    daemon.restart()
    run_once()
    rows = spark.read.parquet(str(output)).collect()
    assert sorted(bytes(r["value"]) for r in rows if r["value"] is not None) == sorted(
        b'{"i": %d}' % i for i in range(105) if i % 29 != 0
    )
    assert len(rows) == 105  # each record once across the two runs


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t", "colour": "red"}, "unknown option(s) colour"),
        ({}, "option topic (or subscribe) is required"),
        ({"topic": "t", "startingOffsets": "yesterday"}, "startingOffsets must be"),
        ({"topic": "t", "endingOffsets": '{"t": {"0": -7}}'}, "offset -7 of t-0"),
        ({"topic": "t", "isolationLevel": "dirty"}, "isolationLevel must be one of"),
        ({"topic": "t", "partitions": "one"}, "partitions must be comma-separated"),
        ({"topic": "t", "includeHeaders": "yes"}, "includeHeaders must be true or false"),
    ],
)
@pytest.mark.unit
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(KfsSourceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SourceOptions.parse({"storeUrl": "/tmp/nowhere", **options})


def test_an_unknown_topic_or_partition_is_named(daemon: Daemon) -> None:
    _create(daemon.bootstrap, "known", 2)
    base = {"storeUrl": daemon.store_url, "namespace": NS}
    with pytest.raises(KfsSourceError, match="topic 'missing' of namespace 'test'"):
        KfsTopicReader(SourceOptions.parse({**base, "topic": "missing"})).partitions()
    with pytest.raises(KfsSourceError, match=r"has 2 partition\(s\); no partition \[5\]"):
        KfsTopicReader(
            SourceOptions.parse({**base, "topic": "known", "partitions": "0,5"})
        ).partitions()


def test_read_committed_stops_at_a_transaction_still_open(daemon: Daemon, spark: Any) -> None:
    topic = f"open-{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, topic, 1)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": daemon.bootstrap, "transactional.id": f"open-{topic}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, b"open-%d" % i, partition=0)
    producer.flush(30)  # on the broker, never committed
    plain = confluent_kafka.Producer({"bootstrap.servers": daemon.bootstrap})
    for i in range(7):
        plain.produce(topic, b"after-%d" % i, partition=0)
    assert plain.flush(30) == 0
    assert daemon.stop() == 0

    committed = _reader(spark, daemon, topic=topic).load()
    assert committed.count() == 0  # the open transaction's first offset is the last stable one
    everything = _reader(spark, daemon, topic=topic, isolationLevel="read_uncommitted").load()
    values = sorted(bytes(r["value"]) for r in everything.collect())
    assert values == sorted(
        [b"open-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(7)]
    )


def test_timestamps_bound_the_read_and_large_segments_split(daemon: Daemon, spark: Any) -> None:
    topic = f"times-{uuid.uuid4().hex[:6]}"
    _create(daemon.bootstrap, topic, 1)
    base = 1_700_000_000_000
    producer = confluent_kafka.Producer({"bootstrap.servers": daemon.bootstrap, "linger.ms": 0})
    for i in range(2000):
        producer.produce(topic, b"%04d" % i + b"." * 300, partition=0, timestamp=base + i * 10)
        if i % 50 == 0:
            producer.flush(30)  # many small batches, so the index has entries to cut at
    assert producer.flush(30) == 0
    assert daemon.stop() == 0

    between = _reader(
        spark,
        daemon,
        topic=topic,
        startingTimestamp=str(base + 1005),  # offsets 101.. (timestamps 1010 ms on)
        endingTimestamp=str(base + 15_000),  # ..1499
    ).load()
    assert sorted(r["offset"] for r in between.collect()) == list(range(101, 1500))
    past = _reader(spark, daemon, topic=topic, startingTimestamp=str(base + 10**9)).load()
    assert past.count() == 0  # no record that late: the start is the end

    options = SourceOptions.parse(
        {
            "storeUrl": daemon.store_url,
            "namespace": NS,
            "topic": topic,
            "maxBytesPerPartition": "65536",
        }
    )
    slices = KfsTopicReader(options).partitions()
    assert len(slices) > 5 and len({s.object_key for s in slices}) == 1
    assert [s.start for s in slices[1:]] == [s.end for s in slices[:-1]]  # no gap, no overlap
    split = _reader(spark, daemon, topic=topic, maxBytesPerPartition="65536").load()
    assert sorted(r["offset"] for r in split.collect()) == list(range(2000))


def test_a_compacted_topic_reads_as_its_consumers_read_it(daemon: Daemon, spark: Any) -> None:
    from spark_jobs import compaction

    topic = f"kv-{uuid.uuid4().hex[:6]}"
    _create(
        daemon.bootstrap,
        topic,
        1,
        **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"},
    )
    producer = confluent_kafka.Producer({"bootstrap.servers": daemon.bootstrap})
    for round_ in range(4):  # each round its own segment; the newest is never compacted
        for k in range(20):
            value = None if (round_ == 2 and k % 4 == 0) else b"r%d-k%d" % (round_, k)
            if round_ < 3 or k < 5:
                producer.produce(topic, value, b"k%d" % k, partition=0)
        assert producer.flush(30) == 0
        daemon.restart()
    summary = compaction.run(
        ["--store-url", daemon.store_url, "--namespace", NS, "--topics", topic,
         "--max-read-mb-per-s", "0"],
        spark,
    )  # fmt: skip
    assert summary["status"] == "ok", summary["message"]
    assert summary["counts"]["partitions_compacted"] == 1
    daemon.restart()
    consumed = _consume_partitions(daemon.bootstrap, [topic], 1)
    assert len(consumed) < 3 * 20 + 5  # superseded records are gone
    assert (
        _spark_rows(_reader(spark, daemon, topic=topic, includeHeaders="true").load()) == consumed
    )
