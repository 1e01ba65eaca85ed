"""Sealing a partition's acknowledged batches into segment files, re-encoding them as asked.

Sealing.  `seal_segments` cuts a partition's acknowledged batches into
segments of at most ``segment_bytes`` (a batch never splits; a batch larger
than that gets a segment of its own) and builds each `.kfs` and `.index` with
`SegmentWriter`, plus the catalog's `SegmentEntry`.

Recompression.  Batches are stored as the producer sent them unless
`Recompression` says otherwise: a topic whose ``compression.type`` names a
codec (or ``uncompressed``) gets every batch in that codec, as a Kafka broker
converts them; under ``compression.type=producer`` the daemon's
``KFS_COMPRESSION_CODEC`` (when not ``none``) compresses the batches producers
left uncompressed and keeps the others.  A re-encoded batch
(`reencode_batch`) keeps its offsets, timestamps, headers, producer id, epoch
and sequence, and its transactional bit; only the codec bits, the length and
the CRC change.  Control batches are never re-encoded (clients read their
single record without looking at the codec, and Kafka never compresses
them).  The work is CPU-bound Python (records are decoded and encoded one by
one) and runs on the log's I/O threads (`kfs_core.log.flusher`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kfs_core.catalog.actions import SegmentEntry
from kfs_core.errors import CorruptionError
from kfs_core.formats.segment import SealedSegment, SegmentWriter
from kfs_core.log.buffer import BufferedBatch
from kfs_core.records.batch import decode_batch, reencode_batch
from kfs_core.records.codecs import CODEC_NONE, codec_by_name
from kfs_core.records.header import BatchHeader, read_batch_header

__all__ = ["KEEP_AS_PRODUCED", "Recompression", "Sealed", "seal_segments"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Recompression:
    """Which batches a flush re-encodes, and into which codec.

    ``codec`` None stores every batch as produced.  With ``only_uncompressed``
    only batches the producer left uncompressed are re-encoded.
    """

    codec: int | None = None
    only_uncompressed: bool = False

    @classmethod
    def for_topic(cls, compression_type: str, daemon_codec: str) -> Recompression:
        """The topic's ``compression.type`` first, then the daemon's ``KFS_COMPRESSION_CODEC``."""
        if compression_type != "producer":
            return cls(codec_by_name(compression_type))
        codec = codec_by_name(daemon_codec)
        return cls() if codec == CODEC_NONE else cls(codec, only_uncompressed=True)

    def applies(self, header: BatchHeader) -> bool:
        """Whether the batch with ``header`` is stored re-encoded."""
        if self.codec is None or header.is_control or header.record_count == 0:
            return False
        if self.only_uncompressed:
            return header.codec == CODEC_NONE
        return header.codec != self.codec


KEEP_AS_PRODUCED = Recompression()


@dataclass(frozen=True, slots=True)
class Sealed:
    """One segment of a flush: its bytes, catalog entry, and where each of its batches sits."""

    segment: SealedSegment
    entry: SegmentEntry
    batches: tuple[BufferedBatch, ...]
    positions: tuple[int, ...]  # file position of each batch
    recoded: tuple[bool, ...]  # per batch: the segment holds it re-encoded, not the buffer's bytes

    @property
    def recoded_batches(self) -> int:
        return sum(self.recoded)


def seal_segments(
    topic: str,
    partition: int,
    batches: Sequence[BufferedBatch],
    *,
    segment_bytes: int,
    index_interval: int,
    created_ms: int,
    recompression: Recompression = KEEP_AS_PRODUCED,
    join: bool = False,
    key_suffix: str = "",
) -> list[Sealed]:
    """Build the segments that carry ``batches`` (offset order), each at most ``segment_bytes``.

    Each batch is stored as produced or re-encoded, as ``recompression`` says.
    A segment is its parts (`SealedSegment`); with ``join`` its bytes are also
    joined into one buffer here (the flush does this on an I/O thread when L1
    will hold the segment).  ``key_suffix`` goes into each segment's object
    key (the writer's lease epoch: `kfs_core.catalog.layout.epoch_suffix`).
    """
    name = f"{topic}-{partition}"
    recoded = [_recoded(batch, recompression, name) for batch in batches]
    stored = [b.data if r is None else r for b, r in zip(batches, recoded, strict=True)]
    groups: list[list[int]] = []
    size = 0
    for i, data in enumerate(stored):
        if not groups or size + len(data) > segment_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += len(data)
    sealed: list[Sealed] = []
    for group in groups:
        writer = SegmentWriter(created_ms=created_ms, index_interval=index_interval)
        # The buffered batches do not change until their commit: borrowed, copied once.
        # Their CRCs were checked on produce (or computed by the re-encoder).
        positions = tuple(writer.append(stored[i], borrow=True, crcs_checked=True) for i in group)
        segment = writer.finish()
        if join:
            segment.data  # noqa: B018 - joins the parts once, now
        entry = SegmentEntry.for_sealed(topic, partition, segment, key_suffix=key_suffix)
        sealed.append(
            Sealed(
                segment,
                entry,
                tuple(batches[i] for i in group),
                positions,
                tuple(recoded[i] is not None for i in group),
            )
        )
    return sealed


def _recoded(batch: BufferedBatch, recompression: Recompression, name: str) -> bytes | None:
    """``batch`` re-encoded as ``recompression`` asks; None to store it as produced."""
    if recompression.codec is None:
        return None
    header = read_batch_header(batch.data, object_name=name)
    if not recompression.applies(header):
        return None
    try:
        decoded = decode_batch(batch.data, verify_crc=True, object_name=name)
    except CorruptionError as exc:
        # A fresh CRC would hide the damage: keep the bytes, validation reports them.
        log.error("%s: batch at offset %d stored as produced: %s", name, batch.base_offset, exc)
        return None
    return reencode_batch(decoded, recompression.codec)
