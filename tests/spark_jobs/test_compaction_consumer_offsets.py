"""The compaction job keeps ``__consumer_offsets`` small.

The daemon rebuilds the same committed offsets from what it leaves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog, layout
from kfs_core.formats.segment import SegmentReader
from kfs_core.groups.offset_log import OFFSETS_TOPIC
from kfs_core.records import decode_batch
from kfs_core.storage import open_store
from spark_jobs import compaction
from testkit.daemon import DaemonFactory
from testkit.waiting import wait_for
from tests.server.conftest import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]

NS = "test"
ROUNDS = 5
COMMITS_PER_ROUND = 60
PARTITIONS = 3


def _records(store: Any) -> int:
    count = 0
    for entry in PartitionCatalog(store, NS, OFFSETS_TOPIC, 0).load().segments:
        name = layout.join(NS, entry.key)
        reader = SegmentReader(store.get(name), name)
        for position, _ in reader.iter_batches():
            count += len(decode_batch(reader.data, position).records)
    return count


def _committed(bootstrap: str, topic: str) -> dict[int, int]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "compacted"})
    try:
        parts = consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30
        )
    finally:
        consumer.close()
    return {p.partition: p.offset for p in parts}


def test_compaction_keeps_the_newest_commit_per_key(tmp_path: Path, spark: Any) -> None:
    import confluent_kafka

    factory = DaemonFactory(tmp_path)
    try:
        daemon = factory.start(extra_args=["--offsets-topic-num-partitions", "1"])
        store = open_store(daemon.store_url)
        create_topic(daemon.bootstrap, PARTITIONS, "events")
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": daemon.bootstrap, "group.id": "compacted"}
        )
        offset = 0
        for round_ in range(ROUNDS):
            for _ in range(COMMITS_PER_ROUND):
                offset += 1
                consumer.commit(
                    offsets=[confluent_kafka.TopicPartition("events", offset % PARTITIONS, offset)],
                    asynchronous=False,
                )
            wait_for(
                lambda r=round_: (
                    len(PartitionCatalog(store, NS, OFFSETS_TOPIC, 0).load().segments) > r
                ),
                timeout=60,
                what=f"round {round_} of commits sealed",
            )
        consumer.close()
        expected = _committed(daemon.bootstrap, "events")
        assert daemon.stop() == 0, daemon.log()[-2000:]
        assert _records(store) == ROUNDS * COMMITS_PER_ROUND

        args = ["--store-url", store.url, "--namespace", NS, "--topics", OFFSETS_TOPIC]
        summary = compaction.run([*args, "--max-read-mb-per-s", "0"], spark)
        assert summary["status"] == "ok", summary["message"]
        # One commit per (group, topic, partition) is left of the older rounds; the
        # newest segment, like Kafka's active segment, is not cleaned.
        assert _records(store) <= PARTITIONS + COMMITS_PER_ROUND

        daemon.start()
        assert _committed(daemon.bootstrap, "events") == expected
    finally:
        factory.close()
