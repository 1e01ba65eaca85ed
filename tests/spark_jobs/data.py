"""Test data for the Spark jobs, written the way the daemon writes it, through kfs_core.

`write_topic` creates a topic in the registry and, per partition, seals
segments with `SegmentWriter`, puts the segment and then its index in the
store and commits them with `PartitionCatalog.add_segments`: the same objects
and catalog a running daemon leaves behind.  The fault helpers damage what it
wrote, one object at a time, as a disk, a bug or an operator might.

Shared by every Spark job's tests (validation, index rebuild, retention,
checkpoint, compaction): import from ``tests.spark_jobs.data``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kfs_core.catalog import PartitionCatalog, SegmentEntry, TopicRegistry, layout
from kfs_core.formats.index import INDEX_ENTRY, INDEX_HEADER_SIZE, IndexReader
from kfs_core.formats.segment import SEGMENT_HEADER_SIZE, SegmentWriter
from kfs_core.records import Record, encode_batch
from kfs_core.storage import ObjectStore

#: First record timestamp of generated data (2023-11-14T22:13:20Z).
BASE_TIMESTAMP_MS = 1_700_000_000_000


@dataclass
class WrittenPartition:
    """What `write_topic` wrote for one partition: its catalog entries, in offset order."""

    namespace: str
    topic: str
    partition: int
    segments: list[SegmentEntry] = field(default_factory=list)

    def object_key(self, entry: SegmentEntry) -> str:
        return layout.join(self.namespace, entry.key)

    def index_object_key(self, entry: SegmentEntry) -> str:
        return layout.join(self.namespace, entry.index_key)

    @property
    def prefix(self) -> str:
        return layout.join(self.namespace, layout.partition_dir(self.topic, self.partition)) + "/"


def make_batches(
    base_offset: int,
    record_count: int,
    *,
    batch_size: int = 10,
    codec: int = 0,
    timestamp_ms: int = BASE_TIMESTAMP_MS,
    keys: Sequence[bytes | None] | None = None,
    value_of: Callable[[int], bytes | None] | None = None,
) -> bytes:
    """``record_count`` records from ``base_offset`` in batches of ``batch_size``, concatenated.

    ``value_of(offset)`` gives each record's value (default ``value-<offset>`` three times).
    """
    chunks: list[bytes] = []
    for start in range(0, record_count, batch_size):
        records = [
            Record(
                offset=base_offset + i,
                timestamp=timestamp_ms + base_offset + i,
                key=keys[i] if keys is not None else f"k{(base_offset + i) % 7}".encode(),
                value=(
                    value_of(base_offset + i)
                    if value_of is not None
                    else f"value-{base_offset + i}".encode() * 3
                ),
            )
            for i in range(start, min(start + batch_size, record_count))
        ]
        chunks.append(encode_batch(records, base_offset=base_offset + start, codec=codec))
    return b"".join(chunks)


def write_segment(
    store: ObjectStore,
    namespace: str,
    topic: str,
    partition: int,
    base_offset: int,
    record_count: int,
    *,
    batch_size: int = 10,
    codec: int = 0,
    index_interval: int = 100,
    created_ms: int = BASE_TIMESTAMP_MS,
    value_of: Callable[[int], bytes | None] | None = None,
) -> SegmentEntry:
    """Seal one segment and put it and its index (segment first); not committed."""
    writer = SegmentWriter(base_offset, created_ms=created_ms, index_interval=index_interval)
    writer.append(
        make_batches(
            base_offset, record_count, batch_size=batch_size, codec=codec, value_of=value_of
        )
    )
    sealed = writer.finish()
    entry = SegmentEntry.for_sealed(topic, partition, sealed)
    store.put(layout.join(namespace, entry.key), sealed.data)
    store.put(layout.join(namespace, entry.index_key), sealed.index)
    return entry


def write_topic(
    store: ObjectStore,
    namespace: str,
    topic: str,
    *,
    partitions: int = 1,
    segments: int = 3,
    records_per_segment: int = 250,
    batch_size: int = 10,
    codec: int = 0,
    gap: int = 0,
    index_interval: int = 100,
    configs: dict[str, str] | None = None,
    value_of: Callable[[int], bytes | None] | None = None,
) -> list[WrittenPartition]:
    """Create ``topic`` and commit ``segments`` segments to each partition.

    ``gap`` offsets are skipped between consecutive segments (what compaction
    leaves behind).  Each partition gets one commit, as one flush cycle would.
    """
    TopicRegistry(store, namespace).create_topic(topic, partitions, configs)
    written: list[WrittenPartition] = []
    for partition in range(partitions):
        part = WrittenPartition(namespace, topic, partition)
        offset = 0
        for _ in range(segments):
            part.segments.append(
                write_segment(
                    store,
                    namespace,
                    topic,
                    partition,
                    offset,
                    records_per_segment,
                    batch_size=batch_size,
                    codec=codec,
                    index_interval=index_interval,
                    value_of=value_of,
                )
            )
            offset += records_per_segment + gap
        if part.segments:
            PartitionCatalog(store, namespace, topic, partition).add_segments(part.segments)
        written.append(part)
    return written


# --- faults -------------------------------------------------------------------


def flip_bit(store: ObjectStore, key: str, byte: int, bit: int = 0) -> None:
    """Flip one bit of an object (a negative ``byte`` counts from the end)."""
    data = bytearray(store.get(key))
    data[byte] ^= 1 << bit
    store.put(key, bytes(data))


def truncate(store: ObjectStore, key: str, remove: int) -> None:
    """Cut the last ``remove`` bytes off an object (a torn upload)."""
    data = store.get(key)
    store.put(key, data[: len(data) - remove])


def batch_byte(store: ObjectStore, key: str, batch: int, offset_in_batch: int) -> int:
    """File position of ``offset_in_batch`` inside the ``batch``-th batch of a segment."""
    from kfs_core.formats.segment import SegmentReader

    positions = [pos for pos, _ in SegmentReader(store.get(key), key).iter_batches()]
    return positions[batch] + offset_in_batch


def point_index_off_batch(store: ObjectStore, index_key: str, entry: int = 0) -> None:
    """Move one index entry's position a byte past its batch start (still in order)."""
    data = bytearray(store.get(index_key))
    reader = IndexReader(bytes(data), index_key)
    offset, position = reader.entries[entry]
    INDEX_ENTRY.pack_into(data, INDEX_HEADER_SIZE + entry * INDEX_ENTRY.size, offset, position + 1)
    store.put(index_key, bytes(data))


def set_index_interval(store: ObjectStore, index_key: str, interval: int) -> None:
    """Rewrite the interval field of an index header (leaving its entries alone)."""
    data = bytearray(store.get(index_key))
    struct.pack_into(">i", data, 10, interval)
    store.put(index_key, bytes(data))


def put_orphan(store: ObjectStore, part: WrittenPartition, base_offset: int) -> str:
    """An uncommitted segment object in ``part``'s prefix (a crash between upload and commit)."""
    key = layout.join(
        part.namespace, layout.segment_key(part.topic, part.partition, base_offset, "-orphan")
    )
    store.put(key, b"KAFS" + bytes(SEGMENT_HEADER_SIZE))
    return key
