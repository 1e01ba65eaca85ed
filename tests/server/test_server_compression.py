"""``kfs serve --compression-codec zstd``: uncompressed produce, zstd segments, clients read them.

A daemon started with ``--compression-codec zstd`` takes uncompressed
batches from confluent-kafka, stores them as zstd batches at flush (every
batch in every committed segment has codec 4), and confluent-kafka and
kafka-python consume the same records from them -- from the segment cache
and, after a restart, from the store.  A codec the daemon does not know is a
one-line error before anything starts.
"""

from __future__ import annotations

import contextlib

import pytest

from kfs_core.catalog import PartitionCatalog
from kfs_core.config import Settings
from kfs_core.formats.segment import SegmentReader
from kfs_core.records import CODEC_ZSTD, decode_batch
from kfs_core.storage import open_store
from testkit.daemon import DaemonFactory
from testkit.waiting import wait_for
from tests.server.conftest import (
    by_partition,
    consume_confluent,
    consume_kafka_python,
    produce_confluent,
)

PARTITIONS = 3
COUNT = 300
TOPIC = "zstd-at-rest"


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_uncompressed_produce_is_stored_as_zstd_and_consumed_back(daemons: DaemonFactory) -> None:
    daemon = daemons.start(
        extra_args=[
            "--compression-codec", "zstd",
            "--default-partitions", str(PARTITIONS),
            "--flush-interval-ms", "100",
        ]
    )  # fmt: skip
    values = [b"value-%04d-" % i + b"abcdefgh" * 16 for i in range(COUNT)]
    delivered = produce_confluent(daemon.bootstrap, TOPIC, values, partitions=PARTITIONS)
    expected = by_partition(delivered)

    with contextlib.closing(open_store(daemon.store_url)) as store:

        def committed() -> bool:
            return all(
                PartitionCatalog(store, "test", TOPIC, p).load().high_watermark == len(expected[p])
                for p in range(PARTITIONS)
            )

        wait_for(committed, timeout=60, what="every record flushed")
        batches = 0
        for p in range(PARTITIONS):
            for segment in PartitionCatalog(store, "test", TOPIC, p).load().segments:
                assert segment.codec == CODEC_ZSTD, segment
                reader = SegmentReader(store.get(f"test/{segment.key}"), segment.key)
                for position, header in reader.iter_batches():
                    batch = decode_batch(reader.batch_bytes(position, header))
                    assert batch.codec == CODEC_ZSTD
                    batches += 1
        assert batches >= PARTITIONS

    for where in ("the segment cache", "the store, after a restart"):
        if where.startswith("the store"):
            daemon.restart()
        for consume in (consume_confluent, consume_kafka_python):
            got = consume(daemon.bootstrap, TOPIC, PARTITIONS, COUNT)
            assert by_partition(got) == expected, (consume.__name__, where)
    assert daemon.stop() == 0


@pytest.mark.unit
def test_an_unknown_compression_codec_is_refused_before_start() -> None:
    with pytest.raises(ValueError, match=r"KFS_COMPRESSION_CODEC='brotli'.*none, gzip"):
        Settings(compression_codec="brotli")
