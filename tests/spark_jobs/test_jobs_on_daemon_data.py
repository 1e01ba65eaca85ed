"""Every maintenance job on data the daemon wrote, over the local store and S3 on moto.

A real `kfs serve` takes records from confluent-kafka in rounds (each round is
sealed into its own segment before the next), then stops; the jobs run with
the session's SparkSession on what it left: validation passes, compaction
merges the rounds into one segment with every record at its offset, an index
deleted behind the daemon's back is rebuilt, a checkpoint snapshot is taken,
and retention drops the segments of a topic whose records are past
``retention.ms``.
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
