"""`PartitionReader`: the read side of a partition -- Fetch and ListOffsets.

Fetch, cheapest first: the partition buffer (offsets not yet committed),
then the committed segments through `SegmentFetcher` (L1 whole segments, L2
indexes, then at most two GETs -- index and one range -- for an uncached
fetch, one with the index cached).  The catalog state in memory names the
segment; nothing is listed.  A segment that vanished under a fetch
(compaction or retention removed it after the last refresh) makes the reader
refresh the partition's catalog state and read again, once.

A consumer whose fetch starts where its previous one ended is sequential:
the next ``readahead_segments`` segments are fetched whole into L1 in the
background.

ListOffsets: -2 is the log start offset, -1 the high watermark; a
timestamp is looked up through the catalog's per-segment max timestamp, then
the batch headers, then the records of one batch.
"""

from __future__ import annotations

import bisect
import struct
import time
from concurrent.futures import Executor
from dataclasses import dataclass

from kfs_core.catalog.actions import SegmentEntry
from kfs_core.errors import (
    CorruptionError,
    LogStorageError,
    ObjectNotFound,
    ObjectStoreError,
    OffsetOutOfRange,
)
from kfs_core.log.cache import CachedSegment
from kfs_core.log.catalog_refresh import CatalogRefresher
from kfs_core.log.metrics import LogMetrics
from kfs_core.log.partition import Partition
from kfs_core.log.segment_fetcher import SegmentFetcher
from kfs_core.log.transactions import AbortedTxn
from kfs_core.records.batch import decode_batch
from kfs_core.records.header import read_batch_header
from kfs_core.threads import run_in

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "OffsetLookup",
    "PartitionReader",
    "ReadResult",
]

#: ListOffsets timestamps with a special meaning (Kafka's ``ListOffsetsRequest``).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # the record with the largest timestamp (KIP-734)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What a fetch response carries for one partition.

    ``records`` holds whole batches only: the one holding the requested
    offset (even when it is larger than ``max_bytes``) and as many following
    ones as fit.  Empty at the high watermark.
    """

    records: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1  # -1: the high watermark (no transaction open)
    # A read_committed read: the aborted transactions among ``records``
    aborted: tuple[AbortedTxn, ...] = ()

    @property
    def stable_offset(self) -> int:
        """The last stable offset (the high watermark when no transaction is open)."""
        return self.high_watermark if self.last_stable_offset < 0 else self.last_stable_offset


@dataclass(frozen=True, slots=True)
class OffsetLookup:
    """A ListOffsets answer: the offset, and the record's timestamp (-1 for earliest/latest).

    ``offset`` is -1 when no record has a timestamp at or after the one asked for.
    """

    offset: int
    timestamp: int


class PartitionReader:
    """Reads of open partitions: the buffer first, then committed segments."""

    def __init__(
        self,
        fetcher: SegmentFetcher,
        refresher: CatalogRefresher,
        executor: Executor,
        metrics: LogMetrics,
        *,
        readahead_segments: int,
    ) -> None:
        self._fetcher = fetcher
        self._refresher = refresher
        self._executor = executor
        self._metrics = metrics
        self._readahead_segments = readahead_segments

    async def read(
        self, p: Partition, offset: int, max_bytes: int, *, read_committed: bool = False
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one).

        ``read_committed`` reads stop below the last stable offset (an
        offset between it and the high watermark reads nothing) and carry
        the aborted transactions among what they return.  Raises
        `OffsetOutOfRange` (below the log start offset or above the high
        watermark) or `LogStorageError` (the store failed or holds a damaged
        object).
        """
        p.last_read_at = p.last_fetch_at = time.monotonic()
        for attempt in range(2):
            high_watermark = p.high_watermark
            log_start = p.state.log_start_offset
            stable = p.txns.last_stable_offset(high_watermark)
            lso = -1 if stable == high_watermark else stable
            if offset == high_watermark or (read_committed and stable <= offset <= high_watermark):
                return ReadResult(b"", high_watermark, log_start, lso)
            if not log_start <= offset < high_watermark:
                raise OffsetOutOfRange(
                    f"{p.name}: offset {offset} is outside [{log_start}, {high_watermark}]",
                    topic=p.topic,
                    partition=p.partition,
                    offset=offset,
                    log_start_offset=log_start,
                    high_watermark=high_watermark,
                )
            try:
                records = await self._read_at(p, offset, max_bytes)
            except ObjectNotFound as exc:
                # Compaction or retention removed the segment after our last
                # refresh: learn what replaced it and read again.
                if attempt:
                    raise LogStorageError(f"{p.name}: offset {offset}: {exc}") from exc
                await self._refresher.refresh(p)
                continue
            except (ObjectStoreError, CorruptionError) as exc:
                raise LogStorageError(f"{p.name}: reading offset {offset}: {exc}") from exc
            aborted: tuple[AbortedTxn, ...] = ()
            # Only a partition with transactions pays for walking the batches:
            # without one open, every batch read lies below the LSO (the HW).
            if read_committed and (stable < high_watermark or p.txns.any_aborted):
                records, end = _below(records, stable)
                aborted = tuple(p.txns.aborted_between(offset, end))
            self._metrics.fetch_requests += 1
            self._metrics.fetch_bytes += len(records)
            return ReadResult(records, p.high_watermark, p.state.log_start_offset, lso, aborted)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read_at(self, p: Partition, offset: int, max_bytes: int) -> bytes:
        memory_first = p.buffer.first_offset
        if memory_first is None or offset < memory_first:
            for segment in p.state.segments_from(offset):
                if memory_first is not None and segment.base_offset >= memory_first:
                    break  # committed, but still buffered: memory is cheaper
                records, next_offset = await self._fetcher.read(
                    segment, offset, max_bytes, p.is_live
                )
                if records:
                    sequential = offset == p.next_sequential_read
                    p.next_sequential_read = next_offset
                    if sequential:
                        self._read_ahead(p, segment)
                    return records
        records, next_offset = p.buffer.read(offset, max_bytes, p.high_watermark)
        if records:
            self._metrics.fetch_from_memory += 1
            p.next_sequential_read = next_offset
        return records

    def _read_ahead(self, p: Partition, segment: SegmentEntry) -> None:
        """Prefetch the ``readahead_segments`` segments after ``segment`` into L1."""
        count = self._readahead_segments
        if count > 0:
            segments = p.state.segments
            i = bisect.bisect_right(segments, segment.base_offset, key=_base_offset)
            self._fetcher.read_ahead(segments[i : i + count], p.is_live)

    async def list_offsets(
        self, p: Partition, timestamp: int, *, read_committed: bool = False
    ) -> OffsetLookup:
        """ListOffsets: -2 the log start offset, -1 the high watermark, else by timestamp.

        ``read_committed``: -1 is the last stable offset, and a timestamp
        finds nothing at or above it, as Kafka answers.

        -3 (KIP-734): the first record with the largest timestamp in the
        log, and that timestamp; ``OffsetLookup(-1, -1)`` for an empty log.

        For a timestamp >= 0: the first offset (at or above the log start)
        whose record timestamp is at or after it, and that timestamp; the
        catalog's per-segment max timestamp picks the segment, batch headers
        the batch.  ``OffsetLookup(-1, -1)`` when there is none.
        """
        p.last_read_at = time.monotonic()
        if timestamp == LATEST_TIMESTAMP:
            if read_committed:
                return OffsetLookup(p.txns.last_stable_offset(p.high_watermark), -1)
            return OffsetLookup(p.high_watermark, -1)
        if timestamp == MAX_TIMESTAMP:
            largest = self._largest_timestamp(p)
            if largest is None:
                return OffsetLookup(-1, -1)
            timestamp = largest
        if read_committed and timestamp >= 0:
            lookup = await self.list_offsets(p, timestamp)
            if lookup.offset >= p.txns.last_stable_offset(p.high_watermark):
                return OffsetLookup(-1, -1)
            return lookup
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetLookup(p.state.log_start_offset, -1)
        if timestamp < 0:
            raise ValueError(f"timestamp {timestamp}: expected -1, -2, -3 or a time in ms")
        log_start = p.state.log_start_offset
        memory_first = p.buffer.first_offset
        try:
            for segment in p.state.segments:
                if memory_first is not None and segment.base_offset >= memory_first:
                    break
                if segment.last_offset < log_start or segment.max_timestamp < timestamp:
                    continue
                cached = await self._fetcher.load(segment, p.is_live)
                found = await run_in(self._executor, _find_in_segment, cached, timestamp, log_start)
                if found is not None:
                    return found
        except (ObjectStoreError, CorruptionError) as exc:
            raise LogStorageError(f"{p.name}: looking up timestamp {timestamp}: {exc}") from exc
        for batch in p.buffer.visible(p.high_watermark):
            if batch.max_timestamp >= timestamp and batch.last_offset >= log_start:
                found = _find_in_batch(batch.data, 0, timestamp, log_start)
                if found is not None:
                    return found
        return OffsetLookup(-1, -1)

    @staticmethod
    def _largest_timestamp(p: Partition) -> int | None:
        """The largest timestamp of the log from the log start on (the catalog's and batch headers')."""
        log_start = p.state.log_start_offset
        memory_first = p.buffer.first_offset
        stamps = [
            segment.max_timestamp
            for segment in p.state.segments
            if segment.last_offset >= log_start
            and (memory_first is None or segment.base_offset < memory_first)
        ]
        stamps.extend(
            batch.max_timestamp
            for batch in p.buffer.visible(p.high_watermark)
            if batch.last_offset >= log_start
        )
        return max(stamps, default=None)


def _base_offset(segment: SegmentEntry) -> int:
    return segment.base_offset


def _find_in_segment(
    segment: CachedSegment, timestamp: int, min_offset: int
) -> OffsetLookup | None:
    for position, last_offset in zip(segment.positions, segment.last_offsets, strict=False):
        if last_offset < min_offset:
            continue
        header = read_batch_header(segment.data, position, object_name=segment.key)
        if header.max_timestamp >= timestamp:
            found = _find_in_batch(segment.data, position, timestamp, min_offset)
            if found is not None:
                return found
    return None


def _find_in_batch(
    buf: bytes | memoryview, pos: int, timestamp: int, min_offset: int
) -> OffsetLookup | None:
    batch = decode_batch(buf, pos, verify_crc=False)
    for record in batch.records:
        record_timestamp = batch.effective_timestamp(record)
        if record.offset >= min_offset and record_timestamp >= timestamp:
            return OffsetLookup(record.offset, record_timestamp)
    return None


_BATCH_START = struct.Struct(">qi")  # base offset, length


def _below(records: bytes, limit: int) -> tuple[bytes, int]:
    """The whole batches of ``records`` that start below offset ``limit``, and where they end.

    A transaction's records and its marker are batches of their own, so a
    batch never straddles the last stable offset.
    """
    view = memoryview(records)
    pos = 0
    end_offset = -1
    while pos + _BATCH_START.size <= len(view):
        base, length = _BATCH_START.unpack_from(view, pos)
        if base >= limit:
            break
        header = read_batch_header(view, pos)
        end_offset = header.last_offset + 1
        pos += _BATCH_START.size + length
    if pos == len(view):
        return records, max(end_offset, 0)
    return bytes(view[:pos]), max(end_offset, 0)
