"""Recompression at flush: ``KFS_COMPRESSION_CODEC`` and the topic's ``compression.type``.

* ``compression.type=producer`` (the default) with ``KFS_COMPRESSION_CODEC``
  naming a codec: batches producers left uncompressed are stored in it,
  compressed ones as they came.  Reads after the flush -- from L1 and, after
  a restart, from the store -- return the recompressed batches, with the same
  records and every header field but codec, length and CRC unchanged.
* A topic whose ``compression.type`` names a codec (or ``uncompressed``)
  gets every batch in that codec, as a Kafka broker converts them.
* With the defaults, segments hold the produced bytes exactly.
* Control batches are never re-encoded; a bad ``compression_codec`` is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog
from kfs_core.config import Settings
from kfs_core.formats.segment import SegmentReader
from kfs_core.log import LogManager
from kfs_core.log.buffer import BufferedBatch
from kfs_core.log.sealing import Recompression, seal_segments
from kfs_core.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    decode_batch,
)
from kfs_core.records.batch import (
    CONTROL_COMMIT,
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    encode_batch,
    encode_control_key,
    iter_batches,
)
from kfs_core.records.header import read_batch_header
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import NS, TIMESTAMP_BASE, TOPIC, Harness, read_all, run_harness

CODECS = {"gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}


def rich_batch(count: int, *, tag: str, **options: Any) -> bytes:
    """A batch with keys, null and repetitive values, headers (one with a null value)."""
    records = [
        Record(
            i,
            TIMESTAMP_BASE + 7 * i,
            None if i == 1 else f"key-{tag}-{i}".encode(),
            None if i == 2 else (f"{tag}-{i}-".encode() * 20),
            [("trace", f"t{i}".encode()), ("empty", None)],
        )
        for i in range(count)
    ]
    return encode_batch(records, **options)


PRODUCED = [
    # (batch, how the producer sent it)
    (rich_batch(4, tag="plain"), CODEC_NONE),
    (
        rich_batch(
            3,
            tag="idem",
            producer_id=4711,
            producer_epoch=3,
            base_sequence=17,
        ),
        CODEC_NONE,
    ),
    (rich_batch(5, tag="gz", codec=CODEC_GZIP), CODEC_GZIP),
]


def header_fields(batch: RecordBatch) -> tuple[Any, ...]:
    """Everything a re-encoding must keep: all but codec bits, length and CRC."""
    return (
        batch.base_offset,
        batch.partition_leader_epoch,
        batch.attributes & ~0x07,
        batch.last_offset_delta,
        batch.first_timestamp,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
    )


def records_of(batch: RecordBatch) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records]


async def produce_all(logs: LogManager) -> list[RecordBatch]:
    for data, _ in PRODUCED:
        await logs.append(TOPIC, 0, data, timeout_s=10)
    return list(iter_batches(await read_all(logs, TOPIC, 0)))  # from memory, as produced


def stored_codecs(store: ObjectStore) -> list[int]:
    """The codec of every batch in the partition's committed segments, read from the store."""
    codecs = []
    for segment in PartitionCatalog(store, NS, TOPIC, 0).load().segments:
        reader = SegmentReader(store.get(f"{NS}/{segment.key}"), segment.key)
        codecs += [header.codec for _, header in reader.iter_batches()]
    return codecs


@pytest.mark.parametrize("codec_name", sorted(CODECS))
def test_kfs_compression_codec_compresses_what_producers_left_uncompressed(
    local_store: ObjectStore, tmp_path: Path, codec_name: str
) -> None:
    codec = CODECS[codec_name]
    expected_codecs = [codec, codec, CODEC_GZIP]  # the producer's gzip batch is kept

    async def body(h: Harness) -> None:
        logs = await h.open(compression_codec=codec_name)
        await logs.create_topic(TOPIC)
        produced = await produce_all(logs)
        assert [b.codec for b in produced] == [c for _, c in PRODUCED]
        await logs.flush()
        assert logs.metrics().buffered_bytes == 0 and logs.metrics().pool_used_bytes == 0
        assert logs.metrics().flush_recompressed_batches == 2

        for restarted in (False, True):  # L1 now; the store after a restart
            if restarted:
                await h.shutdown(logs)
                logs = await h.open(compression_codec=codec_name, cache_size=0)
            read = await read_all(logs, TOPIC, 0)
            stored = [decode_batch(b) for b in split(read)]  # decode_batch checks each CRC
            assert [b.codec for b in stored] == expected_codecs
            assert [header_fields(b) for b in stored] == [header_fields(b) for b in produced]
            assert [records_of(b) for b in stored] == [records_of(b) for b in produced]
            assert stored[1].producer_id == 4711 and stored[1].base_sequence == 17
        assert stored_codecs(local_store) == expected_codecs
        [segment] = (await logs.catalog_state(TOPIC, 0)).segments
        assert segment.codec == (codec if codec == CODEC_GZIP else 0)  # 0: mixed

    run_harness(local_store, tmp_path, body)


@pytest.mark.parametrize(("compression_type", "codec"), [("zstd", CODEC_ZSTD), ("uncompressed", 0)])
def test_a_topic_compression_type_converts_every_batch(
    local_store: ObjectStore, tmp_path: Path, compression_type: str, codec: int
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open(compression_codec="lz4")  # the topic's own codec wins
        await logs.create_topic(
            TOPIC,
            configs={
                "compression.type": compression_type,
                "message.timestamp.type": "LogAppendTime",
            },
        )
        produced = await produce_all(logs)
        await logs.flush()
        stored = [decode_batch(b) for b in split(await read_all(logs, TOPIC, 0))]
        assert [b.codec for b in stored] == [codec] * 3
        assert all(b.timestamp_type == LOG_APPEND_TIME for b in stored)
        assert [header_fields(b) for b in stored] == [header_fields(b) for b in produced]
        assert [records_of(b) for b in stored] == [records_of(b) for b in produced]
        assert stored_codecs(local_store) == [codec] * 3

    run_harness(local_store, tmp_path, body)


def test_by_default_segments_hold_the_produced_bytes(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await produce_all(logs)
        before = await read_all(logs, TOPIC, 0)
        await logs.flush()
        assert await read_all(logs, TOPIC, 0) == before
        assert logs.metrics().flush_recompressed_batches == 0
        assert stored_codecs(local_store) == [c for _, c in PRODUCED]

    run_harness(local_store, tmp_path, body)


def test_control_batches_are_never_recompressed() -> None:
    control = encode_batch(
        [Record(10, TIMESTAMP_BASE, encode_control_key(CONTROL_COMMIT), b"\0\0\0\0\0\0")],
        base_offset=10,
        producer_id=9,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
    )
    data = encode_batch([Record(11, TIMESTAMP_BASE, None, b"x" * 100)], base_offset=11)
    batches = [
        BufferedBatch(10, 10, TIMESTAMP_BASE, control, 0.0),
        BufferedBatch(11, 11, TIMESTAMP_BASE, data, 0.0),
    ]
    for recompression in (Recompression(CODEC_ZSTD), Recompression.for_topic("producer", "gzip")):
        [sealed] = seal_segments(
            TOPIC,
            0,
            batches,
            segment_bytes=1 << 20,
            index_interval=100,
            created_ms=0,
            recompression=recompression,
        )
        assert sealed.recoded == (False, True)
        reader = SegmentReader(sealed.segment.data)
        (_, first), (_, second) = reader.iter_batches()
        assert bytes(reader.batch_bytes(sealed.positions[0], first)) == control
        assert second.codec == recompression.codec


@pytest.mark.parametrize(
    ("compression_type", "daemon_codec", "produced", "stored"),
    [
        ("producer", "none", CODEC_GZIP, CODEC_GZIP),
        ("producer", "none", CODEC_NONE, CODEC_NONE),
        ("producer", "zstd", CODEC_NONE, CODEC_ZSTD),
        ("producer", "zstd", CODEC_GZIP, CODEC_GZIP),
        ("snappy", "zstd", CODEC_GZIP, CODEC_SNAPPY),
        ("snappy", "none", CODEC_NONE, CODEC_SNAPPY),
        ("uncompressed", "zstd", CODEC_LZ4, CODEC_NONE),
    ],
)
def test_which_codec_a_batch_is_stored_in(
    compression_type: str, daemon_codec: str, produced: int, stored: int
) -> None:
    recompression = Recompression.for_topic(compression_type, daemon_codec)
    header = read_batch_header(rich_batch(2, tag="c", codec=produced))
    got = recompression.codec if recompression.applies(header) else produced
    assert got == stored


def test_an_unknown_compression_codec_is_refused() -> None:
    with pytest.raises(ValueError, match=r"brotli.*none, gzip, snappy, lz4, zstd"):
        Settings(compression_codec="brotli")


def split(data: bytes) -> list[bytes]:
    """The encoded batches of a fetch, one by one."""
    out, pos = [], 0
    while pos < len(data):
        size = read_batch_header(data, pos).total_size
        out.append(data[pos : pos + size])
        pos += size
    return out
