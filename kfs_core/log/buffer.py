"""`PartitionBuffer`: one partition's batches that are in memory and not yet committed.

A produced batch enters the buffer when it is assigned its offsets, before
the WAL has acknowledged it, so that buffer order is offset order.  Readers
see only the batches below the partition's high watermark (what the WAL has
acknowledged); the flush takes only those too.  A batch leaves the buffer
when the catalog commit that makes its segment live has landed
(`drop_through`), so a fetch finds every offset either here or in the
catalog, never in neither.

Each entry is one Kafka batch: a fetch that starts in the middle of a
multi-batch produce returns from the batch holding its offset, as Kafka does.
While a flush is uploading, the entries' bytes are swapped for views into the
sealed segment (`BufferedBatch.data`), so memory holds each batch once.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from kfs_core.log.cache import take_batches

__all__ = ["BufferedBatch", "PartitionBuffer"]


@dataclass(eq=False, slots=True)
class BufferedBatch:
    """One RecordBatch v2 (offsets assigned) waiting to be flushed."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    data: bytes | memoryview
    appended_at: float  # time.monotonic() when it was buffered

    @property
    def size(self) -> int:
        return len(self.data)


class PartitionBuffer:
    """The buffered batches of one partition, in offset order."""

    def __init__(self) -> None:
        self._batches: list[BufferedBatch] = []
        self._last_offsets: list[int] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[BufferedBatch]:
        return iter(self._batches)

    @property
    def first_offset(self) -> int | None:
        """Base offset of the oldest buffered batch; None when empty."""
        return self._batches[0].base_offset if self._batches else None

    def append(self, batch: BufferedBatch) -> None:
        if self._last_offsets and batch.base_offset <= self._last_offsets[-1]:
            raise ValueError(
                f"batch at {batch.base_offset} does not follow the buffered last offset "
                f"{self._last_offsets[-1]}"
            )
        self._batches.append(batch)
        self._last_offsets.append(batch.last_offset)
        self.bytes += batch.size

    def visible(self, high_watermark: int) -> list[BufferedBatch]:
        """The batches wholly below ``high_watermark``: acknowledged, so readable and flushable."""
        stop = bisect.bisect_left(self._last_offsets, high_watermark)
        return self._batches[:stop]

    def visible_bytes(self, high_watermark: int) -> int:
        """Bytes of `visible` batches, counted from the unacknowledged tail (usually short)."""
        hidden = 0
        for batch in reversed(self._batches):
            if batch.last_offset < high_watermark:
                break
            hidden += batch.size
        return self.bytes - hidden

    def read(self, offset: int, max_bytes: int, high_watermark: int) -> tuple[bytes, int]:
        """Whole visible batches from the one holding ``offset``: at least one, then up to ``max_bytes``.

        Returns the bytes and the offset after the last batch returned
        (empty bytes and ``offset`` when no visible batch reaches ``offset``).
        """
        first = bisect.bisect_left(self._last_offsets, offset)
        stop = bisect.bisect_left(self._last_offsets, high_watermark)
        if first >= stop:
            return b"", offset
        bounds = [0]
        for batch in self._batches[first:stop]:
            if bounds[-1] >= max_bytes:
                break
            bounds.append(bounds[-1] + batch.size)
        taken = self._batches[first : first + take_batches(bounds, 0, max_bytes)]
        return b"".join(b.data for b in taken), taken[-1].last_offset + 1

    def drop_through(self, last_offset: int) -> int:
        """Forget the batches up to ``last_offset`` (committed now); the bytes freed."""
        stop = bisect.bisect_right(self._last_offsets, last_offset)
        freed = sum(b.size for b in self._batches[:stop])
        del self._batches[:stop]
        del self._last_offsets[:stop]
        self.bytes -= freed
        return freed
