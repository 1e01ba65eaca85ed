"""Planning range reads of a committed segment: which bytes to GET, which batches to keep.

A cold fetch knows the segment's size from the catalog and the batch
positions from its index.  The index is sparse, so `index_window` gives the
entry at or below the wanted offset (``start``) and the next entry's
position (``bound``): the batch holding the offset starts in
``[start, bound]``, so one GET of ``[start, bound + max_bytes)`` holds it and
``max_bytes`` after it, at the price of at most one index interval of batches
before it.  `select_batches` then walks the headers of what came back and
keeps whole batches from the one holding the offset.  No I/O here: the
`SegmentFetcher` (`kfs_core.log.segment_fetcher`) does the GETs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kfs_core.catalog.actions import SegmentEntry
from kfs_core.errors import CorruptSegment
from kfs_core.formats.index import IndexReader
from kfs_core.formats.segment import SEGMENT_FOOTER_SIZE, iter_batch_headers
from kfs_core.records.header import LOG_OVERHEAD

__all__ = ["Selection", "body_end", "index_window", "select_batches"]

_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_OFFSET = 8
# How much to read on when a wanted batch runs past a range and its length is
# not known yet (fewer than 12 of its bytes came back).
_MIN_RESUME_BYTES = 64 << 10


def body_end(entry: SegmentEntry) -> int:
    """File position where the segment's batches end and its 16-byte footer starts."""
    return entry.size_bytes - SEGMENT_FOOTER_SIZE


def index_window(index: IndexReader, offset: int, end: int) -> tuple[int, int]:
    """``(start, bound)``: the batch holding ``offset`` starts at a position in ``[start, bound]``.

    ``start`` is the last index entry at or below ``offset`` (the first entry
    if none is), ``bound`` the next entry's position, or ``end`` (the body's
    end) after the last entry.
    """
    positions = index.positions
    i = index.entry_index(offset)
    bound = positions[i + 1] if i + 1 < len(positions) else end
    return positions[i], bound


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
