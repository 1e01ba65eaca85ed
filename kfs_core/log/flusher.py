"""`Flusher`: seals acknowledged batches into segments, uploads them, commits, checkpoints the WAL.

When.  A background loop (`Flusher.run`) starts a partition's flush when its
acknowledged batches reach ``segment_bytes``, when the oldest is older than
``flush_interval_ms`` or the topic's ``segment.ms`` (at the next tick, at
most 100 ms later), when the memory pool is 75 % full (the pool calls
`Flusher.wake`), and `flush_until` runs one on demand (`LogManager.flush`,
`close`, DeleteRecords, start-up replay).  At most one flush per partition
runs at a time (``Partition.flush_task``) and at most ``flush_concurrency``
partitions flush at once.

One cycle of one partition (`_flush_partition`):

1. seal the acknowledged batches into segments (`seal_segments`, on the I/O
   threads), re-encoding them as the topic's ``compression.type`` or
   ``KFS_COMPRESSION_CODEC`` says;
2. PUT each segment, then its index -- the segments of a cycle side by side
   (``upload_concurrency``), since nothing is visible before the commit.  A
   store that says how many PUTs it takes at once
   (`ObjectStore.put_concurrency`) gets no more than that from all the
   partitions' flushes together, unless the memory pool is under pressure,
   and one that takes one at a time gets each cycle in one
   `ObjectStore.put_many` (the local store: one directory fsync for all);
3. ONE catalog commit for all segments of the cycle;
4. in one loop step: adopt the new catalog state, drop the batches from the
   buffer and release their pool bytes -- so a fetch finds every offset in
   the buffer or in the catalog, never in neither;
5. cache the new segments in L1 (lagging tail consumers read them next);
6. write the producer-state snapshot, then checkpoint the WAL past the batches.

Failed uploads and commits are retried with backoff for as long as it takes;
nothing leaves memory before its commit landed.  A commit whose outcome was
unknown and did land is recognised on the retry (`_commit_segments`).  A
commit that collides with another writer's segments (a second daemon writing
the partition) is retried too, but `flush_until` stops waiting for it and
raises `SegmentConflict`: a shutdown leaves those batches in the WAL rather
than waiting for a commit that cannot land.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from typing import TypeVar

from kfs_core.catalog.actions import AbortedRange, OpenTransaction, SegmentEntry, Tombstone
from kfs_core.catalog.layout import epoch_suffix
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import PartitionState
from kfs_core.config import Settings
from kfs_core.errors import (
    FencedLeaderEpoch,
    InvalidCatalogAction,
    LogError,
    SegmentConflict,
    SegmentOverlap,
    WalError,
    WalWriteFailed,
)
from kfs_core.formats.index import IndexReader
from kfs_core.log.cache import CachedSegment
from kfs_core.log.catalog_refresh import CatalogRefresher
from kfs_core.log.failure import LogFailure
from kfs_core.log.metrics import FlushObserver, LogMetrics
from kfs_core.log.partition import Partition
from kfs_core.log.pool import MemoryPool
from kfs_core.log.producer_state import SnapshotStore
from kfs_core.log.range_reads import body_end
from kfs_core.log.sealing import Recompression, Sealed, seal_segments
from kfs_core.log.segment_fetcher import SegmentFetcher
from kfs_core.log.topic_cache import TopicCache
from kfs_core.log.wal import WalLike
from kfs_core.storage.base import ObjectStore
from kfs_core.threads import run_in

__all__ = ["Flusher"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Flusher:
    """Moves acknowledged batches from the partition buffers into committed segments."""

    def __init__(
        self,
        partitions: Mapping[tuple[str, int], Partition],
        *,
        settings: Settings,
        store: ObjectStore,
        wal: WalLike,
        pool: MemoryPool,
        fetcher: SegmentFetcher,
        refresher: CatalogRefresher,
        topics: TopicCache,
        snapshots: SnapshotStore,
        failure: LogFailure,
        executor: Executor,
        metrics: LogMetrics,
        clock: Callable[[], int],
        observer: FlushObserver | None = None,
    ) -> None:
        self._partitions = partitions
        self.settings = settings
        self._store = store
        # The store may know that fewer PUTs side by side serve it better.
        self._upload_concurrency = min(
            settings.upload_concurrency, store.put_concurrency or settings.upload_concurrency
        )
        # Then that many at once across every partition's flush, not per flush
        # (unless memory is short, `_flush_partition`).  A disk takes one write
        # at a time: four partitions' segments side by side queued 16 MiB ahead
        # of the WAL's next write (`bench.produce_cpu`).
        self._store_slots = (
            asyncio.Semaphore(store.put_concurrency) if store.put_concurrency else None
        )
        self._wal = wal
        self._pool = pool
        self._fetcher = fetcher
        self._refresher = refresher
        self._topics = topics
        self._snapshots = snapshots
        self._failure = failure
        self._executor = executor
        self._metrics = metrics
        self._clock = clock
        self._observer = observer
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(settings.flush_concurrency)
        self._rng = random.Random()
        #: Called (by the log) once a flush found another daemon took the partition.
        self.on_fenced: Callable[[Partition], None] | None = None

    # --- when ------------------------------------------------------------------------

    def wake(self) -> None:
        """Look for due flushes now (a buffer filled up, the pool is under pressure)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Start the flushes that become due, forever."""
        # Ticks find buffers that grew old; size, pressure and flush ends wake it early.
        tick = max(0.005, min(0.1, self.settings.flush_interval_ms / 4000))
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(tick):
                    await self._wakeup.wait()
            self._wakeup.clear()
            self._schedule()

    async def flush_all(self, partitions: Iterable[Partition]) -> None:
        """Commit everything acknowledged so far in ``partitions``, and wait.

        Every partition is waited for; then the first failure, if any, is raised.
        """
        outcomes = await asyncio.gather(
            *(self.flush_until(p, p.high_watermark) for p in partitions), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def flush_until(self, p: Partition, target: int) -> None:
        """Flush ``p`` until every offset below ``target`` is committed.

        `SegmentConflict` when the partition's commit collides with another
        writer's: the flush goes on retrying, but waiting for it is pointless.
        """
        while (first := p.buffer.first_offset) is not None and first < target:
            if p.flush_conflict is not None:
                raise p.flush_conflict
            task = p.flush_task if p.flush_task is not None else self._start(p)
            conflicted = asyncio.ensure_future(p.flush_conflicted.wait())
            try:
                # Waiting, not owning: cancelling us leaves the flush running.
                await asyncio.wait([task, conflicted], return_when=asyncio.FIRST_COMPLETED)
            finally:
                conflicted.cancel()
            if not task.done():
                continue  # in conflict: raised at the top of the loop
            if task.cancelled():
                if p.deleted or p.leaving:
                    return  # dropped with its topic, or taken by another daemon
                raise asyncio.CancelledError
            if (error := task.exception()) is not None:
                raise error

    def _schedule(self) -> None:
        now = time.monotonic()
        urgent = self._pool.under_pressure
        for p in self._partitions.values():
            if p.flush_task is None and self._due(p, now, urgent):
                self._start(p)

    def _due(self, p: Partition, now: float, urgent: bool) -> bool:
        visible = p.buffer.visible_bytes(p.high_watermark)
        if visible == 0:
            return False
        if urgent or visible >= self.settings.segment_bytes:
            return True
        oldest = next(iter(p.buffer))
        return now - oldest.appended_at >= self._max_age_s(p.topic)

    def _max_age_s(self, topic: str) -> float:
        """How long a batch may wait to be sealed: ``flush_interval_ms``, or the topic's segment.ms."""
        limit_ms = self.settings.flush_interval_ms
        config = self._topics.cached_config(topic)
        if config is not None:
            limit_ms = min(limit_ms, config.segment_ms)
        return limit_ms / 1000

    def _start(self, p: Partition) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._flush_partition(p))
        p.flush_task = task
        task.add_done_callback(functools.partial(self._done, p))
        return task

    def _done(self, p: Partition, task: asyncio.Task[None]) -> None:
        p.flush_task = None
        if not task.cancelled() and (exc := task.exception()) is not None:
            if isinstance(exc, FencedLeaderEpoch):
                if self.on_fenced is not None:
                    self.on_fenced(p)
                return
            log.error("%s: flush failed unexpectedly", p.name, exc_info=exc)
        self.wake()  # more may have become due while it ran

    # --- one cycle -------------------------------------------------------------------

    async def _flush_partition(self, p: Partition) -> None:
        """Seal, upload, commit once, release, checkpoint: one flush cycle of one partition."""
        async with self._slots:
            batches = p.buffer.visible(p.high_watermark)
            if not batches:
                return
            started = time.monotonic()
            created_ms = self._clock()
            recompression = await self._recompression(p.topic)
            cache = self._cache_wanted(p)
            sealed = await self._retry(
                f"{p.name}: sealing {len(batches)} batches",
                lambda: run_in(
                    self._executor,
                    functools.partial(
                        seal_segments,
                        p.topic,
                        p.partition,
                        batches,
                        segment_bytes=self.settings.segment_bytes,
                        index_interval=self.settings.index_interval,
                        created_ms=created_ms,
                        recompression=recompression,
                        join=cache,
                        key_suffix=epoch_suffix(p.epoch or 0),
                    ),
                ),
            )
            if cache:
                _share_segment_bytes(sealed)
            # Nothing is visible before the commit, so the segments of a cycle
            # upload side by side (each before its index): one partition that
            # takes hundreds of MB/s must not wait for one PUT after another.
            # A store that writes one at a time gets them all in one call.
            groups = [sealed] if self._upload_concurrency == 1 else [[s] for s in sealed]
            # Under memory pressure the partitions' uploads go side by side
            # again: draining the pool before the producers stall matters more
            # then than the WAL's latency.
            slots = self._store_slots
            if slots is None or self._pool.under_pressure:
                slots = asyncio.Semaphore(self._upload_concurrency)
            await asyncio.gather(*(self._upload(p, group, slots) for group in groups))
            entries = [_with_transactions(p, s.entry) for s in sealed]
            state = await self._retry(
                f"{p.name}: committing {len(entries)} segment(s)",
                functools.partial(self._commit, p, entries),
            )
            self._metrics.catalog_commits += 1
            last_offset = entries[-1].last_offset
            # One loop step from here to the release: a fetch sees the batches in
            # the buffer or in the catalog state, never in neither.
            self._refresher.adopt(p, state)
            self._pool.release(p.buffer.drop_through(last_offset))
            p.txns.sealed_through(last_offset)
            if not p.deleted:
                self._cache_sealed(p, sealed, cache)
            self._count(sealed, time.monotonic() - started)
        if not p.deleted:
            await self._snapshot_producers(p, last_offset + 1)
        if self._failure.error is not None or p.deleted:
            return  # a failed WAL takes no frames; forget_topic checkpointed a deleted topic
        try:
            await self._wal.checkpoint_async(p.topic, p.partition, last_offset)
            self._metrics.wal_checkpoints += 1
        except WalError as exc:
            if isinstance(exc, WalWriteFailed):
                self._failure.fail(exc)
            # The commit stands; the next start replays a little more and skips it.
            log.warning("%s: WAL checkpoint at %d failed: %s", p.name, last_offset, exc)

    async def _commit(self, p: Partition, entries: list[SegmentEntry]) -> PartitionState:
        """One attempt at the cycle's catalog commit; a conflict stops `flush_until` waiting."""
        try:
            state = await run_in(
                self._executor, _commit_segments, p.catalog, entries, p.epoch, p.epoch_start_due
            )
        except FencedLeaderEpoch:
            log.warning(
                "%s: another daemon took the partition (this one held epoch %s); its "
                "unsealed batches are the new holder's to replay",
                p.name,
                p.epoch,
            )
            raise
        except SegmentConflict as exc:
            p.flush_conflict = exc
            p.flush_conflicted.set()
            raise
        if p.flush_conflict is not None:
            p.flush_conflict = None
            p.flush_conflicted.clear()
        p.epoch_start_due = None
        return state

    def _count(self, sealed: Sequence[Sealed], seconds: float) -> None:
        size = sum(s.entry.size_bytes for s in sealed)
        m = self._metrics
        m.flushes += 1
        m.flush_segments += len(sealed)
        m.flush_bytes += size
        m.flush_recompressed_batches += sum(s.recoded_batches for s in sealed)
        m.flush_seconds_total += seconds
        m.flush_seconds_max = max(m.flush_seconds_max, seconds)
        if self._observer is not None:
            try:
                self._observer(seconds, size, len(sealed))
            except Exception:  # a metrics bug must not stop flushing
                log.exception("flush observer failed")

    async def _recompression(self, topic: str) -> Recompression:
        """How a flush stores the topic's batches: its compression.type, then KFS_COMPRESSION_CODEC."""
        try:
            compression_type = (await self._topics.get(topic)).config.compression_type
        except LogError as exc:
            # The bytes are valid either way; store them as produced.
            log.debug("%s: no topic config for this flush (%s); storing as produced", topic, exc)
            compression_type = "producer"
        return Recompression.for_topic(compression_type, self.settings.compression_codec)

    async def _upload(
        self, p: Partition, group: Sequence[Sealed], slots: asyncio.Semaphore
    ) -> None:
        """PUT segments, each before its index, in one store call; retried until they land."""
        objects: list[tuple[str, Sequence[bytes | bytearray | memoryview]]] = []
        for sealed in group:
            segment = sealed.segment
            # The parts as sealed (no joined copy), or the bytes joined for L1.
            parts = (segment.data,) if segment.joined else segment.parts
            objects.append((self._fetcher.object_key(sealed.entry.key), parts))
            objects.append((self._fetcher.object_key(sealed.entry.index_key), (segment.index,)))
        what = objects[0][0] if len(group) == 1 else f"{len(group)} segments from {objects[0][0]}"
        async with slots:
            await self._retry(
                f"{p.name}: uploading {what}", functools.partial(self._put_many, objects)
            )

    async def _put_many(
        self, objects: Sequence[tuple[str, Sequence[bytes | bytearray | memoryview]]]
    ) -> None:
        try:
            await run_in(self._executor, self._store.put_many, objects)
        except Exception:
            self._metrics.store_errors += 1
            raise
        self._metrics.store_puts += len(objects)
        self._metrics.store_put_bytes += sum(len(part) for _, parts in objects for part in parts)

    def _cache_wanted(self, p: Partition) -> bool:
        """Whether this flush's segments go into L1: only while the partition has consumers.

        Segments just committed are what lagging tail consumers read next.  But
        the bytes of a segment nobody reads (no Fetch within
        ``idle_refresh_ms``) would push read segments out of L1, and holding
        them keeps the memory from serving the next flush; nor are they then
        joined into one buffer at all (the store writes the sealed parts).
        A ListOffsets does not count: lag monitors and ``GetOffsetShell`` ask
        every partition for its offsets without reading any of them, and
        caching a copy of everything flushed on their account costs a copy
        of every byte produced and the memory it fills.
        """
        return (
            self.settings.cache_flushed_segments
            and p.last_fetch_at > 0
            and time.monotonic() - p.last_fetch_at < self.settings.idle_refresh_ms / 1000
        )

    def _cache_sealed(self, p: Partition, sealed: Sequence[Sealed], cache: bool) -> None:
        """Remember the committed segments' indexes (L2), and their bytes (L1) if ``cache``."""
        for s in sealed:
            if not p.is_live(s.entry):
                continue
            cached = None
            if cache:
                cached = CachedSegment(
                    self._fetcher.object_key(s.entry.key),
                    s.segment.data,
                    (*s.positions, body_end(s.entry)),
                    tuple(b.last_offset for b in s.batches),
                )
            index = IndexReader(s.segment.index, self._fetcher.object_key(s.entry.index_key))
            self._fetcher.remember(s.entry, cached, index)

    async def _snapshot_producers(self, p: Partition, through: int) -> None:
        """Write the producer state of the offsets below ``through`` (all committed), if it changed."""
        producers = p.producers
        now = self._clock()
        producers.expire(now)
        producers.drop_below(p.state.log_start_offset)
        p.txns.drop_below(p.state.log_start_offset)
        if not producers.changed:
            return
        snapshot = producers.snapshot(through, now)
        # Batches above ``through`` still need a snapshot once they are flushed.
        producers.changed = any(e.last_offset >= through for e in producers.entries())
        try:
            await run_in(self._executor, self._snapshots.write, p.topic, p.partition, snapshot)
        except OSError as exc:
            producers.changed = True
            log.warning("%s: writing the producer-state snapshot: %s", p.name, exc)

    async def _retry(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt`` until it succeeds, backing off: a flush never drops data."""
        failures = 0
        while True:
            try:
                return await attempt()
            except FencedLeaderEpoch:
                raise  # another daemon leads the partition: retrying cannot succeed
            except Exception as exc:  # noqa: BLE001 - every failure is retried; cancellation is not caught
                failures += 1
                self._metrics.flush_retries += 1
                cap = min(self.settings.retry_max_ms, self.settings.retry_base_ms * 2**failures)
                delay = self._rng.uniform(cap / 2, cap) / 1000
                level = logging.WARNING if failures < 10 else logging.ERROR
                log.log(
                    level,
                    "%s failed (attempt %d, retrying in %.2fs): %s",
                    what,
                    failures,
                    delay,
                    exc,
                )
                await asyncio.sleep(delay)


def _with_transactions(p: Partition, entry: SegmentEntry) -> SegmentEntry:
    """``entry`` with the aborted transactions it ends and those open at its end, if any."""
    aborted, open_at = p.txns.for_segment(entry.base_offset, entry.last_offset)
    if not aborted and not open_at:
        return entry
    return entry.model_copy(
        update={
            "aborted": tuple(
                AbortedRange(
                    producer_id=t.producer_id,
                    first_offset=t.first_offset,
                    last_offset=t.last_offset,
                )
                for t in aborted
            ),
            "open_txns": tuple(
                OpenTransaction(producer_id=pid, first_offset=first)
                for pid, first in sorted(open_at.items())
            ),
        }
    )


def _share_segment_bytes(sealed: Sequence[Sealed]) -> None:
    """Point the buffered batches at their bytes inside the sealed segments.

    Until the commit lands the batches stay readable from the buffer; after
    this each is held once (in the segment) rather than twice.  A re-encoded
    batch keeps its own bytes: its size in the segment differs, and the
    buffer and the pool count the size it was produced with.
    """
    for s in sealed:
        view = memoryview(s.segment.data)
        for batch, position, recoded in zip(s.batches, s.positions, s.recoded, strict=True):
            if not recoded:
                batch.data = view[position : position + batch.size]


def _commit_segments(
    catalog: PartitionCatalog,
    entries: list[SegmentEntry],
    epoch: int | None = None,
    epoch_start: int | None = None,
) -> PartitionState:
    """Add ``entries`` in one commit; idempotent when an earlier attempt's outcome was unknown.

    ``epoch_start`` (`Partition.epoch_start_due`) lands in the same commit.

    An earlier attempt that landed left these very entries: live, or (compacted
    meanwhile) as tombstones of the same objects.  A different entry under one
    of our keys, or over our offsets, is another writer's: `SegmentConflict`.
    Taking it as ours would drop from memory the offsets it does not cover.
    """
    try:
        catalog.add_segments(entries, leader_epoch=epoch, epoch_start=epoch_start)
    except (SegmentOverlap, InvalidCatalogAction) as exc:
        state = catalog.refresh()
        if all(_landed(state, entry) for entry in entries):
            return state
        raise SegmentConflict(
            f"{exc}; another writer's segments stand there (is a second daemon writing "
            "this partition?), so these batches stay in memory and in the WAL",
            **exc.fields,
        ) from exc
    return catalog.state


def _landed(state: PartitionState, entry: SegmentEntry) -> bool:
    if state.segment_for(entry.base_offset) == entry:
        return True
    return any(t == Tombstone.of(entry, t.removed_ms) for t in state.tombstones)
