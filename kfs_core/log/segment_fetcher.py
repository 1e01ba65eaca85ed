"""`SegmentFetcher`: reads committed segments -- L1, L2, range GETs, read-ahead.

Cheapest first:

1. L1, whole segments (`CachedSegment`), bounded by ``cache_size`` bytes:
   filled by flushes (`remember`), read-ahead, whole-segment reads.
2. L2, parsed indexes, bounded by ``index_cache_size`` bytes of estimated memory.
3. The object store.  The catalog entry gives the segment's size, so the
   body ends 16 bytes (the footer) before it; the index (one GET, then
   cached) gives the position of the entry at or below the offset and the
   next entry's position (`index_window`); ONE range GET fetches from the
   first to the second plus ``max_bytes``; `select_batches` keeps whole
   batches from the one holding the offset.  An uncached fetch costs two
   GETs, one with the index cached.  A third happens only when the wanted
   batch alone runs past that range (KIP-74 returns it whole).

An index that is missing, damaged or does not fit its segment (the index
rebuild job has not run yet) costs no fetch its answer: the whole segment is
read instead, once, into L1.

Whatever the fetcher caches, it caches only while the segment is live
(``is_live``, asked after the GET returns, since the catalog may have changed
meanwhile); `forget` drops segments that left the catalog.  Store requests
run on the caller's thread pool and are counted in the shared `LogMetrics`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import TypeVar

from kfs_core.catalog import layout
from kfs_core.catalog.actions import SegmentEntry
from kfs_core.errors import CorruptIndex, CorruptionError, KfsError, ObjectNotFound
from kfs_core.formats.index import IndexReader
from kfs_core.formats.segment import SEGMENT_HEADER_SIZE
from kfs_core.log.cache import CachedSegment, LruCache, index_weight
from kfs_core.log.metrics import LogMetrics
from kfs_core.log.range_reads import body_end, index_window, select_batches
from kfs_core.storage.base import ByteRange, ObjectStore
from kfs_core.threads import run_in

__all__ = ["IsLive", "SegmentFetcher"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Whether a catalog segment is still live (asked when something would be cached).
IsLive = Callable[[SegmentEntry], bool]


def _segment_weight(segment: CachedSegment) -> int:
    return segment.size


class SegmentFetcher:
    """Fetches from committed segments of one namespace through the L1 and L2 caches."""

    def __init__(
        self,
        store: ObjectStore,
        namespace: str,
        executor: Executor,
        metrics: LogMetrics,
        *,
        cache_size: int,
        index_cache_size: int,
        readahead_concurrency: int = 4,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self._executor = executor
        self._metrics = metrics
        self.l1: LruCache[str, CachedSegment] = LruCache(cache_size, _segment_weight)
        self.l2: LruCache[str, IndexReader] = LruCache(index_cache_size, index_weight)
        self._readahead_slots = asyncio.Semaphore(readahead_concurrency)
        self._prefetching: dict[str, asyncio.Task[None]] = {}

    def object_key(self, key: str) -> str:
        """The store key of a catalog segment or index key (those are relative to the namespace)."""
        return layout.join(self.namespace, key)

    # --- fetches -------------------------------------------------------------

    async def read(
        self, segment: SegmentEntry, offset: int, max_bytes: int, is_live: IsLive
    ) -> tuple[bytes, int]:
        """Whole batches of ``segment`` from the one holding ``offset``: at least one, then up to ``max_bytes``.

        Returns the bytes and the offset after the last batch (empty bytes
        and ``offset`` when the segment holds nothing at or past it).
        Raises `ObjectNotFound` when the segment object is gone.
        """
        cached = self.l1.get(segment.key)
        if cached is not None:
            self._metrics.fetch_from_cache += 1
            return cached.read(offset, max_bytes)
        index = await self._index(segment, is_live)
        if index is not None:
            try:
                return await self._read_range(segment, index, offset, max_bytes)
            except CorruptionError as exc:  # the index points beside the batches
                log.warning("%s; reading the whole segment", exc)
                self.l2.pop(segment.index_key)
        cached = await self.fetch(segment, is_live)
        self._metrics.fetch_from_cache += 1
        return cached.read(offset, max_bytes)

    async def _read_range(
        self, segment: SegmentEntry, index: IndexReader, offset: int, max_bytes: int
    ) -> tuple[bytes, int]:
        key = self.object_key(segment.key)
        end = body_end(segment)
        start, bound = index_window(index, offset, end)
        data = await self.get(key, ByteRange(start, min(end, bound + max_bytes) - start))
        selection = select_batches(data, start, offset, max_bytes, end=end, object_name=key)
        while selection.empty and selection.resume_length > 0:
            start = selection.resume_at
            data = await self.get(key, ByteRange(start, selection.resume_length))
            selection = select_batches(data, start, offset, max_bytes, end=end, object_name=key)
        if selection.empty:
            return b"", offset
        self._metrics.fetch_from_store += 1
        return data[selection.start : selection.stop], selection.next_offset

    async def _index(self, segment: SegmentEntry, is_live: IsLive) -> IndexReader | None:
        """The segment's index (L2 or one GET); None when it is unusable."""
        index = self.l2.get(segment.index_key)
        if index is not None:
            return index
        key = self.object_key(segment.index_key)
        try:
            index = IndexReader(await self.get(key), key)
        except ObjectNotFound:
            if not is_live(segment):
                raise  # the segment went with it: the caller refreshes its catalog
            log.warning("index %s is missing; reading the whole segment", key)
            return None
        except CorruptIndex as exc:
            log.warning("%s; reading the whole segment", exc)
            return None
        first, last = index.positions[0], index.positions[-1]
        if first < SEGMENT_HEADER_SIZE or last >= body_end(segment):
            log.warning(
                "index %s names positions %d..%d outside the segment's batches; "
                "reading the whole segment",
                key,
                first,
                last,
            )
            return None
        if is_live(segment):
            self.l2.put(segment.index_key, index)
        return index

    async def load(self, segment: SegmentEntry, is_live: IsLive) -> CachedSegment:
        """The whole segment: from L1, or one GET (then into L1 while it is live)."""
        cached = self.l1.get(segment.key)
        if cached is None:
            cached = await self.fetch(segment, is_live)
        return cached

    async def fetch(self, segment: SegmentEntry, is_live: IsLive) -> CachedSegment:
        """GET the whole segment, check it (body CRC) and index its batches; into L1 if live."""
        key = self.object_key(segment.key)
        data = await self.get(key)
        cached = await run_in(self._executor, CachedSegment.load, key, data)
        if is_live(segment):
            self.l1.put(segment.key, cached)
        return cached

    async def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        m = self._metrics
        m.store_gets += 1
        try:
            data = await run_in(self._executor, self.store.get, key, byte_range)
        except ObjectNotFound:
            raise
        except Exception:
            m.store_errors += 1
            raise
        m.store_get_bytes += len(data)
        return data

    # --- read-ahead ----------------------------------------------------------------

    def read_ahead(self, segments: Iterable[SegmentEntry], is_live: IsLive) -> None:
        """Fetch ``segments`` whole into L1 in the background (those not there or on their way)."""
        loop = asyncio.get_running_loop()
        for segment in segments:
            key = segment.key
            if (
                key in self.l1
                or key in self._prefetching
                or segment.size_bytes > self.l1.capacity // 2
            ):
                continue  # a segment over half the cache would push out more than it brings
            task = loop.create_task(self._prefetch(segment, is_live))
            self._prefetching[key] = task
            task.add_done_callback(functools.partial(self._prefetched, key))

    def _prefetched(self, key: str, task: asyncio.Task[None]) -> None:
        self._prefetching.pop(key, None)

    async def _prefetch(self, segment: SegmentEntry, is_live: IsLive) -> None:
        async with self._readahead_slots:
            if segment.key in self.l1 or not is_live(segment):
                return
            try:
                await self.fetch(segment, is_live)
            except (KfsError, OSError) as exc:
                log.info("read-ahead of %s failed: %s", segment.key, exc)
                return
            self._metrics.readahead_segments += 1

    async def wait_readahead(self) -> None:
        """Wait until the read-ahead fetches under way have finished."""
        while self._prefetching:
            await asyncio.wait(list(self._prefetching.values()))

    def prefetch_tasks(self) -> list[asyncio.Task[None]]:
        return list(self._prefetching.values())

    # --- cache upkeep ----------------------------------------------------------------

    def remember(
        self, entry: SegmentEntry, segment: CachedSegment | None, index: IndexReader
    ) -> None:
        """Cache a segment this daemon just committed (its index, and the segment if given)."""
        self.l2.put(entry.index_key, index)
        if segment is not None:
            self.l1.put(entry.key, segment)

    def forget(self, segments: Iterable[SegmentEntry]) -> None:
        """Drop segments that left the catalog: they are never served again."""
        for segment in segments:
            self.l1.pop(segment.key)
            self.l2.pop(segment.index_key)
