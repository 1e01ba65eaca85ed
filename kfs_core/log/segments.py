"""Segment work of the log manager that needs no I/O: sealing buffers, planning range reads.

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
one) and runs on the log manager's I/O threads.

Range reads.  A cold fetch knows the segment's size from the catalog and the
batch positions from its index.  The index is sparse, so `index_window` gives
the entry at or below the wanted offset (``start``) and the next entry's
position (``bound``): the batch holding the offset starts in
``[start, bound]``, so one GET of ``[start, bound + max_bytes)`` holds it and
``max_bytes`` after it, at the price of at most one index interval of batches
before it.  `select_batches` then walks the headers of what came back and
keeps whole batches from the one holding the offset.
"""

from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kfs_core.catalog.actions import SegmentEntry
from kfs_core.errors import CorruptionError, CorruptSegment
from kfs_core.formats.index import IndexReader
from kfs_core.formats.segment import (
    SEGMENT_FOOTER_SIZE,
    SealedSegment,
    SegmentWriter,
    iter_batch_headers,
)
from kfs_core.log.buffer import BufferedBatch
from kfs_core.records.batch import decode_batch, reencode_batch
from kfs_core.records.codecs import CODEC_NAMES, CODEC_NONE, codec_by_name
from kfs_core.records.header import LOG_OVERHEAD, BatchHeader, read_batch_header

__all__ = [
    "DAEMON_CODECS",
    "KEEP_AS_PRODUCED",
    "Recompression",
    "Sealed",
    "Selection",
    "body_end",
    "index_window",
    "seal_segments",
    "select_batches",
]

_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_OFFSET = 8
# How much to read on when a wanted batch runs past a range and its length is
# not known yet (fewer than 12 of its bytes came back).
_MIN_RESUME_BYTES = 64 << 10

log = logging.getLogger(__name__)

#: The values of ``KFS_COMPRESSION_CODEC``, Kafka's producer spelling.
DAEMON_CODECS: tuple[str, ...] = tuple(CODEC_NAMES.values())  # none gzip snappy lz4 zstd


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
) -> list[Sealed]:
    """Build the segments that carry ``batches`` (offset order), each at most ``segment_bytes``.

    Each batch is stored as produced or re-encoded, as ``recompression`` says.
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
        positions = tuple(writer.append(stored[i]) for i in group)
        segment = writer.finish()
        entry = SegmentEntry.for_sealed(topic, partition, segment)
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


def body_end(entry: SegmentEntry) -> int:
    """File position where the segment's batches end and its 16-byte footer starts."""
    return entry.size_bytes - SEGMENT_FOOTER_SIZE


def index_window(index: IndexReader, offset: int, end: int) -> tuple[int, int]:
    """``(start, bound)``: the batch holding ``offset`` starts at a position in ``[start, bound]``.

    ``start`` is the last index entry at or below ``offset`` (the first entry
    if none is), ``bound`` the next entry's position, or ``end`` (the body's
    end) after the last entry.
    """
    entries = index.entries
    i = max(bisect.bisect_right(entries, offset, key=lambda e: e.offset) - 1, 0)
    bound = entries[i + 1].position if i + 1 < len(entries) else end
    return entries[i].position, bound


@dataclass(frozen=True, slots=True)
class Selection:
    """What `select_batches` kept of a range read.

    ``start``/``stop`` index the buffer; ``next_offset`` is the offset after
    the last batch kept.  When nothing was kept, ``resume_at`` is the file
    position to read on from (the wanted batch runs past the range) and
    ``resume_length`` how much to read there (0 when the range reached the
    body's end: the segment holds nothing at or past the offset).
    """

    start: int = 0
    stop: int = 0
    next_offset: int = -1
    resume_at: int = -1
    resume_length: int = 0

    @property
    def empty(self) -> bool:
        return self.stop <= self.start


def select_batches(
    buf: bytes,
    file_offset: int,
    offset: int,
    max_bytes: int,
    *,
    end: int,
    object_name: str,
) -> Selection:
    """Whole batches of ``buf`` (which starts at file position ``file_offset``, at a batch start).

    Skips batches wholly below ``offset``; keeps the first batch that reaches
    it even when it is larger than ``max_bytes`` (KIP-74), then more while the
    total stays within ``max_bytes``.  A batch cut off by the end of ``buf``
    ends the walk.  ``end`` is the body's end position in the file.  Raises
    `CorruptSegment` for bytes that are not batches, or a batch that runs
    past ``end``.
    """
    first = -1
    stop = 0
    next_offset = -1
    walked = 0  # end of the last whole batch, relative to buf
    for position, header in iter_batch_headers(
        buf, object_name, file_offset=file_offset, allow_partial=True
    ):
        rel = position - file_offset
        walked = rel + header.total_size
        if header.last_offset < offset:
            continue
        if first < 0:
            first = rel
        elif walked - first > max_bytes:
            break
        stop = walked
        next_offset = header.last_offset + 1
    if first >= 0:
        return Selection(first, stop, next_offset)
    resume_at = file_offset + walked
    if resume_at >= end:
        return Selection()
    # Each resume must make progress, so a batch that cannot end inside the
    # body (a misplaced index entry reads a length from inside a batch) is
    # corruption, not a reason to read the same range again.
    length = max(max_bytes, _MIN_RESUME_BYTES)
    if len(buf) - walked >= LOG_OVERHEAD:
        (batch_length,) = _BATCH_LENGTH.unpack_from(buf, walked + _BATCH_LENGTH_OFFSET)
        length = max(length, LOG_OVERHEAD + batch_length)
        if batch_length < 0 or resume_at + LOG_OVERHEAD + batch_length > end:
            raise CorruptSegment(
                f"batch at byte {resume_at} declares length {batch_length}, running past "
                f"the end of the batches at byte {end}",
                object_name=object_name,
                offset=resume_at + _BATCH_LENGTH_OFFSET,
            )
    elif end - resume_at < LOG_OVERHEAD:
        raise CorruptSegment(
            f"{end - resume_at} bytes before the end of the batches at byte {end}, "
            "too few for a batch",
            object_name=object_name,
            offset=resume_at,
        )
    return Selection(resume_at=resume_at, resume_length=min(length, end - resume_at))
