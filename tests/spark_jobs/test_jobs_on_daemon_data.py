"""Every maintenance job on data the daemon wrote, over the local store and S3 on moto.

A real `kfs serve` takes records from confluent-kafka in rounds (each round is
sealed into its own segment before the next), then stops; the jobs run with
the session's SparkSession on what it left: validation passes, compaction
merges the rounds into one segment with every record at its offset, an index
deleted behind the daemon's back is rebuilt, a checkpoint snapshot is taken,
and retention drops the segments of a topic whose records are past
``retention.ms``.  A compacted topic a transactional producer wrote, with a
committed and an aborted transaction, reads the same to ``read_committed``
consumers after compaction, and the aborted records are gone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog, layout
from kfs_core.formats.segment import SegmentReader
from kfs_core.records import decode_batch
from kfs_core.storage import ObjectStore, open_store
from spark_jobs import checkpoint, compaction, index_rebuild, retention, validation
from testkit.daemon import DaemonFactory
from testkit.waiting import wait_for
from tests.server.conftest import produce_confluent

pytestmark = [pytest.mark.spark, pytest.mark.integration]

NS = "test"  # the namespace DaemonFactory gives its daemons
ROUNDS = 5
PER_ROUND = 40
DAY_MS = 86_400_000


@pytest.fixture(params=["local", "s3"])
def daemon_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Any, ObjectStore, str | None]]:
    """A running daemon, its store opened here, and the S3 endpoint (None for local)."""
    factory = DaemonFactory(tmp_path)
    endpoint: str | None = None
    url: str | None = None
    if request.param == "s3":
        endpoint = request.getfixturevalue("moto_server")
        bucket = request.getfixturevalue("s3_bucket")
        url = f"s3://{bucket}/jobs-{uuid.uuid4().hex[:8]}"
    try:
        daemon = factory.start(store_url=url, s3_endpoint_url=endpoint)
        store = (
            open_store(daemon.store_url, endpoint_url=endpoint)
            if endpoint
            else open_store(daemon.store_url)
        )
        yield daemon, store, endpoint
    finally:
        factory.close()


def _segments(store: ObjectStore, topic: str) -> list[Any]:
    return list(PartitionCatalog(store, NS, topic, 0).load().segments)


def _produce_rounds(daemon: Any, store: ObjectStore, topic: str, timestamp_ms: int | None) -> dict:
    """``ROUNDS`` rounds into partition 0, each sealed as its own segment; offset → value."""
    import confluent_kafka.admin

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": daemon.bootstrap})
    config = {"retention.ms": str(DAY_MS)} if timestamp_ms is not None else {}
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, config=config)])[topic].result(30)
    written: dict[int, bytes] = {}
    for round_ in range(ROUNDS):
        values = [
            b'{"round": %d, "i": %d, "pad": "%s"}' % (round_, i, b"x" * 200)
            for i in range(PER_ROUND)
        ]
        delivered = produce_confluent(
            daemon.bootstrap, topic, values, partitions=1, timestamp_ms=timestamp_ms
        )
        written.update((offset, value) for _, offset, value in delivered)
        wait_for(
            lambda r=round_: len(_segments(store, topic)) == r + 1,
            timeout=60,
            what=f"round {round_} of {topic} sealed into a segment",
        )
    return written


def _read_back(store: ObjectStore, topic: str) -> dict[int, bytes]:
    records: dict[int, bytes] = {}
    for entry in _segments(store, topic):
        name = layout.join(NS, entry.key)
        reader = SegmentReader(store.get(name), name)
        reader.verify()
        for position, _ in reader.iter_batches():
            for record in decode_batch(reader.data, position).records:
                records[record.offset] = record.value
    return records


def _args(store: ObjectStore, endpoint: str | None, *extra: str) -> list[str]:
    args = ["--store-url", store.url, "--namespace", NS]
    return args + (["--s3-endpoint-url", endpoint] if endpoint else []) + list(extra)


def test_every_job_on_daemon_written_segments(daemon_store: Any, spark: Any) -> None:
    daemon, store, endpoint = daemon_store
    orders = _produce_rounds(daemon, store, "orders", timestamp_ms=None)
    old = int(time.time() * 1000) - 10 * DAY_MS  # past the topic's one-day retention
    _produce_rounds(daemon, store, "expired", timestamp_ms=old)
    assert daemon.stop() == 0, daemon.log()[-2000:]
    assert len(_segments(store, "orders")) == ROUNDS
    assert _read_back(store, "orders") == orders

    summary = validation.run(_args(store, endpoint), spark)
    assert summary["status"] == "ok", summary["message"]
    assert summary["counts"]["segments"] == 2 * ROUNDS

    summary = compaction.run(
        _args(store, endpoint, "--topics", "orders", "--max-read-mb-per-s", "0"), spark
    )
    assert summary["status"] == "ok", summary["message"]
    merged = _segments(store, "orders")
    assert len(merged) == 1
    assert _read_back(store, "orders") == orders  # every record, at its offset

    index_key = layout.join(NS, merged[0].index_key)
    expected_index = store.get(index_key)
    store.delete(index_key)
    summary = index_rebuild.run(_args(store, endpoint, "--topics", "orders"), spark)
    assert summary["status"] == "ok", summary["message"]
    assert store.get(index_key) == expected_index

    summary = checkpoint.run(_args(store, endpoint, "--snapshot", "after-compaction"), spark)
    assert summary["status"] == "ok", summary["message"]
    assert any("after-compaction" in info.key for info in store.list(layout.join(NS, "")))

    before = PartitionCatalog(store, NS, "expired", 0).load()
    summary = retention.run(_args(store, endpoint, "--topics", "expired"), spark)
    assert summary["status"] == "ok", summary["message"]
    after = PartitionCatalog(store, NS, "expired", 0).load()
    assert after.log_start_offset > before.log_start_offset
    assert len(after.segments) < len(before.segments)
    assert after.high_watermark == before.high_watermark

    summary = validation.run(_args(store, endpoint), spark)
    assert summary["status"] == "ok", summary["message"]


def _read_daemon(bootstrap: str, topic: str, *, committed: bool) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of partition 0 through the daemon, to its end (the LSO if committed)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    out: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return out
                continue
            out.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    raise TimeoutError(f"{topic}: no end of partition 0 within 60 s; read {len(out)}")


class _TransactionalTopic:
    """A one-partition compacted topic and a transactional producer writing it, round by round."""

    def __init__(
        self, daemon: Any, store: ObjectStore, topic: str, writer: str, **configs: str
    ) -> None:
        import confluent_kafka
        import confluent_kafka.admin

        self.daemon, self.store, self.topic = daemon, store, topic
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": daemon.bootstrap})
        config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", **configs}
        admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, config=config)])[
            topic
        ].result(30)
        self.producer = confluent_kafka.Producer(
            {"bootstrap.servers": daemon.bootstrap, "transactional.id": writer}
        )
        self.producer.init_transactions(30)

    def transaction(self, value: bytes, keys: range, commit: bool = True) -> None:
        """One transaction writing ``value`` under keys ``k<i>``, committed or aborted."""
        producer = self.producer
        producer.begin_transaction()
        for k in keys:
            producer.produce(self.topic, key=b"k%d" % k, value=value, partition=0)
        producer.flush(30)  # on the broker first: an abort purges what is still queued
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def sealed(self) -> None:
        """Wait until everything written is in segments: each round its own, to clean."""
        end = _read_daemon(self.daemon.bootstrap, self.topic, committed=False)[-1][0] + 1
        wait_for(
            lambda: PartitionCatalog(self.store, NS, self.topic, 0).load().high_watermark >= end,
            timeout=60,
            what="the round sealed",
        )

    def compact(self, spark: Any) -> dict[str, Any]:
        summary = compaction.run(
            ["--store-url", self.store.url, "--namespace", NS, "--topics", self.topic,
             "--max-read-mb-per-s", "0"],
            spark,
        )  # fmt: skip
        assert summary["status"] == "ok", summary["message"]
        return summary


def test_compaction_of_committed_and_aborted_transactions_keeps_read_committed(
    tmp_path: Path, spark: Any
) -> None:
    """A compacted topic written by a transactional producer, compacted: the same committed view."""
    factory = DaemonFactory(tmp_path)
    try:
        daemon = factory.start()
        store = open_store(daemon.store_url)
        topic = "txn-kv"
        writer = _TransactionalTopic(daemon, store, topic, "kv-writer")
        rounds = [
            (b"v0", range(10), True),
            (b"t1", range(5), True),
            (b"aborted", range(5, 10), False),
        ]
        rounds += [(b"v3", range(3), True), (b"newest", range(1), True)]
        for value, keys, commit in rounds:
            writer.transaction(value, keys, commit)
            writer.sealed()
        before = _read_daemon(daemon.bootstrap, topic, committed=True)
        assert not [r for r in before if r[2] == b"aborted"]
        in_log = _read_daemon(daemon.bootstrap, topic, committed=False)
        assert len([r for r in in_log if r[2] == b"aborted"]) == 5

        summary = writer.compact(spark)
        assert summary["counts"]["partitions_compacted"] == 1
        daemon.stop()
        daemon.start()  # what it knows of the transactions comes from the rewritten catalog

        after = _read_daemon(daemon.bootstrap, topic, committed=True)
        assert set(after) < set(before)  # superseded records went; nothing new appeared
        latest = {key: value for _, key, value in before}
        assert {key: value for _, key, value in after} == latest
        everything = _read_daemon(daemon.bootstrap, topic, committed=False)
        assert not [r for r in everything if r[2] == b"aborted"]  # removed, as Kafka's cleaner does
        summary = validation.run(["--store-url", store.url, "--namespace", NS], spark)
        assert summary["status"] == "ok", summary["message"]
    finally:
        factory.close()


def _control_batches(store: ObjectStore, topic: str) -> list[int]:
    """Offsets of the transaction markers in partition 0's live segments."""
    found = []
    for entry in _segments(store, topic):
        name = layout.join(NS, entry.key)
        reader = SegmentReader(store.get(name), name)
        found += [h.base_offset for _, h in reader.iter_batches() if h.is_control]
    return found


def test_markers_past_delete_retention_go_with_their_transactions(
    tmp_path: Path, spark: Any
) -> None:
    """Kafka's cleaner removes a marker once its transaction's records are gone: so does compaction."""
    factory = DaemonFactory(tmp_path)
    try:
        daemon = factory.start()
        store = open_store(daemon.store_url)
        topic = "txn-markers"
        writer = _TransactionalTopic(
            daemon, store, topic, "marker-writer", **{"delete.retention.ms": "0"}
        )
        transaction, sealed = writer.transaction, writer.sealed

        transaction(b"a", range(5))  # A: the producer's first marker here: it stays
        transaction(b"b", range(5, 10), commit=False)  # B: aborted
        transaction(b"c", range(5))  # C: every record superseded below
        sealed()
        transaction(b"d", range(5))
        sealed()
        transaction(b"newest", range(1))
        sealed()
        writer.compact(spark)  # no clean part yet, so no delete horizon: every marker stays
        markers = _control_batches(store, topic)
        assert len(markers) == 5
        transaction(b"e", range(1))
        sealed()
        transaction(b"newest", range(1))
        sealed()
        before = _read_daemon(daemon.bootstrap, topic, committed=True)
        writer.compact(spark)
        after_markers = _control_batches(store, topic)
        assert sorted(set(markers) - set(after_markers)) == [markers[1], markers[2]]  # B's, C's
        daemon.stop()
        daemon.start()  # its view of the transactions comes from the rewritten catalog
        after = _read_daemon(daemon.bootstrap, topic, committed=True)
        assert set(after) < set(before)  # superseded records went; nothing new appeared
        assert {key: value for _, key, value in after} == {key: value for _, key, value in before}
        everything = _read_daemon(daemon.bootstrap, topic, committed=False)
        assert not [r for r in everything if r[2] == b"b"]
        summary = validation.run(["--store-url", store.url, "--namespace", NS], spark)
        assert summary["status"] == "ok", summary["message"]
    finally:
        factory.close()
