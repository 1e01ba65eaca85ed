"""`LogManager`: the partition logs of the ``kfs serve`` daemon -- lifecycle, partition table, appends.

The server calls `LogManager.append_many` (``append`` for one partition),
`read`, `list_offsets` and `topic`; the group coordinator and admin APIs a
few more.  Everything runs on one event loop; blocking work (object store
requests, catalog commits, sealing segments) runs on the manager's thread
pool, so the loop never waits on I/O.  The manager owns the parts and the
partition table they share; each part has its own module:

- `kfs_core.log.flusher` -- `Flusher`: seal, upload, commit, checkpoint;
- `kfs_core.log.reader` -- `PartitionReader`: Fetch and ListOffsets;
- `kfs_core.log.catalog_refresh` -- `CatalogRefresher`: others' catalog commits;
- `kfs_core.log.topic_cache` -- `TopicCache`: the topic registry, cached;
- `kfs_core.log.wal_writer` / `wal_recovery` -- the WAL and its recovery;
- `kfs_core.log.partition` -- `Partition`, the per-partition state they share.

Write path.  ``append_many`` takes every partition of one produce request.
It validates each partition's batches (`validate_produce`), charges their
size to the `MemoryPool` (waiting while it is full), then, in one step with
no await inside (`_assign_and_log`), checks the idempotent producers,
assigns offsets in place, stamps LogAppendTime when the topic asks for it,
puts the batches into the partitions' buffers and queues one WAL group (a
frame per partition).  Nothing else runs on the loop in between, so offsets
are assigned in exactly WAL order without a lock, and the step ends once the
frames are queued, not when they are durable, so concurrent producers share
fsyncs.  When the WAL acknowledges (per its durability mode), each
partition's high watermark moves past its batches and the producer gets an
`AppendResult` per partition.

Idempotent producers.  In that same step each partition's
`ProducerStateTable` checks the producer id, epoch and sequence of its
batches (`kfs_core.log.producer_state`): a retry of one of a producer's
last 5 batches is answered with the original offsets once they are
visible and is not written again; a gap or an old epoch is refused.  The
state is rebuilt when a partition opens from a snapshot written after each
flush (``{wal}/producer-state/``), the segments committed since, and the WAL.

Start-up.  `start` runs WAL recovery, skips what the catalog already has
(batches below its high watermark), replays the rest into the buffers and
flushes them before anything else happens.  Then, in the background, it opens
the other partitions the WAL's live files name (`_warm_up`, at most
``warmup_partitions``), so their producers' first requests after a restart
do not wait for the catalogs to load.

Admin changes.  `adopt_topic` takes a registry record an admin request just
wrote (altered configs, added partitions) into the topic cache at once;
`delete_records` moves a partition's log start offset forwards with a
catalog commit (flushing first what it must cover), so reads below it get
`OffsetOutOfRange` from then on and retention removes the segments below.

Deleted topics.  `forget_topic` (called once the registry marked the topic
deleted) drops its partitions at once -- lookups, appends and reads answer
`UnknownTopicOrPartition` without waiting for the topic cache -- discards
their unflushed batches and checkpoints the WAL past them.  Because WAL
checkpoints are keyed by topic name, a topic created again under that name
starts its offsets above the checkpoint, never below it.

WAL failure.  A failed WAL write or fsync (`WalWriteFailed`) puts the log
into its failed state (`LogManager.failed`, `kfs_core.log.failure`): every
append from then on, and every one still waiting for the WAL, gets
`LogStorageError` (KAFKA_STORAGE_ERROR); reads go on; the owner's
``on_failure`` is called once, and should stop the daemon so that recovery
replays the WAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from kfs_core.catalog.actions import SegmentEntry
from kfs_core.catalog.config import ConfigValue
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import PartitionState
from kfs_core.catalog.topics import TopicRecord, TopicRegistry
from kfs_core.clock import now_ms
from kfs_core.config import Settings
from kfs_core.errors import (
    CatalogError,
    CorruptionError,
    LogClosed,
    LogError,
    LogStartOffsetRegression,
    LogStorageError,
    MessageTooLarge,
    ObjectNotFound,
    ObjectStoreError,
    OffsetOutOfRange,
    RequestTimedOut,
    UnknownTopicOrPartition,
    WalError,
    WalWriteFailed,
)
from kfs_core.log.buffer import BufferedBatch
from kfs_core.log.catalog_refresh import CatalogRefresher
from kfs_core.log.failure import LogFailure
from kfs_core.log.flusher import Flusher
from kfs_core.log.metrics import FlushObserver, LogMetrics
from kfs_core.log.partition import Partition, PendingAppend, deleted_error
from kfs_core.log.pool import MemoryPool
from kfs_core.log.producer_state import (
    BatchMetadata,
    ProducerStateTable,
    SnapshotStore,
    batch_offsets,
)
from kfs_core.log.reader import (
    LATEST_TIMESTAMP,
    OffsetLookup,
    PartitionReader,
    ReadResult,
)
from kfs_core.log.segment_fetcher import SegmentFetcher
from kfs_core.log.topic_cache import TopicCache, TopicInfo
from kfs_core.log.validate import validate_produce
from kfs_core.log.wal_recovery import RecoveredBatch, TornTail
from kfs_core.log.wal_writer import WalAppend, WalPosition, WalWriter
from kfs_core.records.batch import (
    assign_offsets_into,
    iter_batch_headers,
    stamp_log_append_time_into,
)
from kfs_core.records.header import BatchHeader, read_batch_header
from kfs_core.storage.base import ObjectStore
from kfs_core.threads import name_os_thread, run_in

__all__ = ["AppendResult", "LogManager", "StartReport"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Partitions the warm-up after a start opens at once (`LogManager._warm_up`).
WARMUP_CONCURRENCY = 4


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What a produce response reports for one partition."""

    base_offset: int
    log_append_time: int  # the stamped time for LogAppendTime topics, else -1 (as Kafka)
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class StartReport:
    """What `LogManager.start` found in the WAL."""

    partitions: int  # partitions the WAL held unflushed batches for
    replayed_batches: int  # batches put back into buffers (and flushed)
    skipped_batches: int  # batches the catalog already had
    wal_files: int  # WAL files scanned
    torn_tail: TornTail | None  # the unacknowledged write a crash cut short, now zeroed


@dataclass(eq=False, slots=True)
class _StagedAppend:
    """One partition of a produce request on its way: validated, then charged, then logged."""

    index: int  # its place in the request
    p: Partition
    info: TopicInfo
    buf: bytearray | memoryview  # ours to edit in place
    batches: list[tuple[int, BatchHeader]]
    base_offset: int = -1  # assigned by `LogManager._assign_and_log`
    append_time: int = -1  # stamped LogAppendTime, else -1
    duplicate: bool = False  # a producer's retry: answered with the original offsets


class LogManager:
    """The partition logs of one daemon: append, read, list offsets, flush, recover.

    Lifecycle: construct, ``await start()`` (WAL recovery, replay, flush,
    background tasks), use, ``await close()`` (flushes everything unless told
    not to).  Or ``async with LogManager(...) as logs``.  All coroutines must
    run on the loop that ran `start`.  The manager owns neither the store nor
    the WAL: it runs ``wal.recover()`` but leaves closing both to the owner,
    after `close`.

    When the WAL fails (`WalWriteFailed`), the manager enters its failed
    state (`failed`): appends are refused with `LogStorageError`, reads go
    on, and ``on_failure`` is called once, on the loop, with the WAL's error
    -- the daemon's cue to stop and let recovery replay the WAL on restart.
    """

    def __init__(
        self,
        store: ObjectStore,
        namespace: str,
        wal: WalWriter,
        settings: Settings | None = None,
        registry: TopicRegistry | None = None,
        *,
        clock: Callable[[], int] | None = None,
        flush_observer: FlushObserver | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        settings = settings if settings is not None else Settings()
        self.store = store
        self.namespace = namespace
        self.wal = wal
        self.settings = settings
        self.registry = registry if registry is not None else TopicRegistry(store, namespace)
        self._clock = clock or now_ms
        self._metrics = LogMetrics()
        self._failure = LogFailure(on_failure)
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._opening: dict[tuple[str, int], asyncio.Task[Partition]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        # Opening the partitions the WAL names, after `start` (`_warm_up`):
        # its result is how many it opened.
        self.warm_up: asyncio.Task[int] | None = None
        self._lifecycle: Literal["new", "starting", "running", "closing", "closed"] = "new"
        self._producer_snapshots = SnapshotStore(Path(wal.directory) / "producer-state")
        self._executor = ThreadPoolExecutor(
            settings.io_threads, thread_name_prefix="kfs-log-io", initializer=name_os_thread
        )
        self._fetcher = SegmentFetcher(
            store,
            namespace,
            self._executor,
            self._metrics,
            cache_size=settings.cache_size,
            index_cache_size=settings.index_cache_size,
            readahead_concurrency=settings.readahead_concurrency,
        )
        self._topics = TopicCache(
            self.registry, self._executor, self._spawn, refresh_ms=settings.topic_refresh_ms
        )
        self._refresher = CatalogRefresher(
            self._fetcher,
            self._executor,
            self._metrics,
            refresh_ms=settings.catalog_refresh_ms,
            idle_refresh_ms=settings.idle_refresh_ms,
            concurrency=max(1, settings.io_threads // 4),
        )
        self._reader = PartitionReader(
            self._fetcher,
            self._refresher,
            self._executor,
            self._metrics,
            readahead_segments=settings.readahead_segments,
        )
        self._pool = MemoryPool(
            settings.pool_bytes,
            pressure_ratio=settings.pressure_ratio,
            on_pressure=self._wake_flusher,
        )
        self._flusher = Flusher(
            self._partitions,
            settings=settings,
            store=store,
            wal=wal,
            pool=self._pool,
            fetcher=self._fetcher,
            refresher=self._refresher,
            topics=self._topics,
            snapshots=self._producer_snapshots,
            failure=self._failure,
            executor=self._executor,
            metrics=self._metrics,
            clock=self._clock,
            observer=flush_observer,
        )

    def __repr__(self) -> str:
        return f"LogManager({self.store!r}, {self.namespace!r}, {self._lifecycle})"

    @property
    def failed(self) -> BaseException | None:
        """The WAL failure that stopped appends (a `WalWriteFailed`); None while healthy."""
        return self._failure.error

    async def __aenter__(self) -> LogManager:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> StartReport:
        """Recover the WAL, replay what the catalog lacks, flush it, start the background tasks."""
        if self._lifecycle != "new":
            raise RuntimeError(f"start() runs once; the log is {self._lifecycle}")
        self._lifecycle = "starting"
        recovery = await self._io(self.wal.recover)
        loop = asyncio.get_running_loop()
        self.wal.add_failure_listener(functools.partial(self._on_wal_failure, loop))
        replayed = skipped = 0
        touched: dict[tuple[str, int], Partition] = {}
        for record in recovery:
            p = await self._open_partition(record.topic, record.partition)
            touched[(p.topic, p.partition)] = p
            added, ignored = self._replay(p, record)
            replayed += added
            skipped += ignored
        for p in touched.values():
            p.high_watermark = p.next_offset
        log.info(
            "WAL replay: %d batches into %d partitions, %d already in the catalog",
            replayed,
            len(touched),
            skipped,
        )
        await self._flusher.flush_all(touched.values())
        self._lifecycle = "running"
        self._spawn(self._flusher.run())
        self._spawn(self._refresher.run(self._partitions.values()))
        self.warm_up = self._spawn(self._warm_up(sorted(self.wal.flushed_offsets)))
        return StartReport(len(touched), replayed, skipped, len(recovery.files), recovery.torn_tail)

    async def _warm_up(self, keys: Sequence[tuple[str, int]]) -> int:
        """Open the partitions the WAL's live files name, in the background; return how many.

        Those are the partitions written to shortly before the start.  Their
        producers come back within a second or two, and the first request to
        touch a partition waits for its catalog to load: some 50 ms for one
        of 10,000 segments on the local store, so a request to four such
        partitions waited a quarter of a second.  Loading them here usually
        gets there first; a request that comes sooner shares the load under
        way (`_open_partition`).

        The first ``warmup_partitions`` of them not open yet are tried, in key
        order, so a daemon with thousands of partitions in its WAL does not
        read every catalog on every start.  `WARMUP_CONCURRENCY` load at once:
        an object store's request latencies overlap (the checks of a catalog's
        entries hold the GIL, so more would not help on the local store).  A
        partition that cannot be opened (its topic deleted, the store failing)
        is left to its first request, which reports the error.
        """
        started = time.monotonic()
        closed = [key for key in keys if key not in self._partitions]
        todo = iter(closed[: self.settings.warmup_partitions])
        opened = 0

        async def worker() -> None:
            nonlocal opened
            for topic, partition in todo:
                if self._lifecycle != "running":
                    return
                try:
                    await self._partition(topic, partition)
                except Exception as exc:
                    log.info("warm-up: %s-%d stays closed: %s", topic, partition, exc)
                else:
                    opened += 1

        await asyncio.gather(*(worker() for _ in range(WARMUP_CONCURRENCY)))
        if opened:
            log.info(
                "warm-up: opened %d partitions named in the WAL in %.2f s",
                opened,
                time.monotonic() - started,
            )
        return opened

    def _replay(self, p: Partition, record: RecoveredBatch) -> tuple[int, int]:
        """Buffer the batches of one recovered WAL frame that the catalog does not have."""
        added = skipped = 0
        now = time.monotonic()
        view = memoryview(record.batch)
        headers = list(iter_batch_headers(record.batch, verify_crc=False, object_name=p.name))
        # Skipped batches too: the segments may have been read only in part (`_load_producers`).
        p.producers.replay((header for _, header in headers), self._clock())
        for pos, header in headers:
            if header.base_offset < p.next_offset:
                # Flushed before its WAL checkpoint was written.  Segments hold
                # whole batches, so a batch is either all in the catalog or not.
                if header.last_offset >= p.next_offset:
                    log.warning(
                        "%s: WAL batch %d..%d straddles the catalog's high watermark %d; "
                        "keeping the catalog's copy",
                        p.name,
                        header.base_offset,
                        header.last_offset,
                        p.next_offset,
                    )
                skipped += 1
                continue
            data = view[pos : pos + header.total_size]  # shares the recovered frame's bytes
            p.buffer.append(
                BufferedBatch(
                    header.base_offset, header.last_offset, header.max_timestamp, data, now
                )
            )
            self._pool.force_acquire(len(data))
            p.next_offset = header.last_offset + 1
            added += 1
        return added, skipped

    async def close(self, *, flush: bool = True, timeout_s: float | None = None) -> None:
        """Stop taking appends, flush everything acknowledged (unless ``flush=False``), stop.

        With ``timeout_s``, gives up flushing after that long: what is not
        committed stays in the WAL and the next `start` replays it.  Returns
        once no I/O job of this manager runs any more (a store call already
        under way is waited for, as the interpreter's exit would).  Neither
        the WAL nor the store is closed.
        """
        if self._lifecycle in ("closing", "closed"):
            return
        started = self._lifecycle in ("starting", "running")
        self._lifecycle = "closing"
        try:
            if started:
                async with asyncio.timeout(timeout_s):
                    # Appends already queued in the WAL are acknowledged soon; the
                    # final flush should carry them.
                    queued = [x.visible for p in self._partitions.values() for x in p.pending]
                    if queued:
                        await asyncio.wait(queued)
                    if flush:
                        await self._flusher.flush_all(list(self._partitions.values()))
        except TimeoutError:
            log.warning(
                "close: gave up flushing after %ss; unflushed batches stay in the WAL and "
                "are replayed on the next start",
                timeout_s,
            )
        finally:
            tasks = [
                *self._background,
                *self._fetcher.prefetch_tasks(),
                *(p.flush_task for p in self._partitions.values() if p.flush_task is not None),
            ]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
            # Jobs already running on the I/O threads (an upload, a catalog commit)
            # finish before close returns, so nothing of this manager writes after
            # it: a manager opened next on the same store and WAL (a restart in the
            # same process) never races an orphaned commit under its own keys.
            await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
            self._lifecycle = "closed"

    # --- topics ----------------------------------------------------------------

    async def topic(
        self,
        name: str,
        *,
        auto_create: bool = False,
        partitions: int = 1,
        configs: Mapping[str, ConfigValue] | None = None,
    ) -> TopicInfo:
        """The topic (cached for ``topic_refresh_ms``); `UnknownTopicOrPartition` if absent.

        With ``auto_create`` an absent topic is created with ``partitions``
        and ``configs`` (Kafka's ``auto.create.topics.enable``: the server
        decides when that applies).
        """
        return await self._topics.topic(
            name, auto_create=auto_create, partitions=partitions, configs=configs
        )

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, ConfigValue] | None = None,
    ) -> TopicInfo:
        """Create a topic in the registry (`TopicAlreadyExists`, `InvalidTopicName` ... as it raises)."""
        return await self._topics.create(name, partitions, configs)

    def adopt_topic(self, record: TopicRecord) -> TopicInfo:
        """Serve ``record`` (just written to the registry: new configs, more partitions) at once."""
        return self._topics.adopt(record)

    # --- the partition table -----------------------------------------------------

    async def open_partitions(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> None:
        """Load the catalog state of those ``(topic, partition)`` not loaded yet.

        Returns at once (without yielding to the loop) when all are loaded.
        A server awaits it before it reads the next request of a connection,
        so that request's appends cannot overtake these: `append_many` then
        finds its partitions open and assigns offsets without waiting.  The
        missing ones load at once, so a request to several pays for one
        object store round trip per step of a load, not one per partition.
        Errors and timeouts are left for `append_many` to report per partition.
        """
        missing = {key for key in keys if key not in self._partitions}
        if not missing:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(
                    *(self._partition(topic, partition) for topic, partition in sorted(missing)),
                    return_exceptions=True,
                )

    async def _partition(self, topic: str, partition: int) -> tuple[Partition, TopicInfo]:
        info = await self._topics.get(topic)
        if not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartition(
                f"topic {topic!r} has {info.partitions} partition(s); there is no partition "
                f"{partition}",
                topic=topic,
                partition=partition,
            )
        return await self._open_partition(topic, partition), info

    async def _open_partition(self, topic: str, partition: int) -> Partition:
        key = (topic, partition)
        p = self._partitions.get(key)
        if p is not None:
            return p
        task = self._opening.get(key)
        if task is None:
            # One catalog load per partition, however many requests arrive meanwhile.
            task = asyncio.ensure_future(self._load_partition(topic, partition))
            self._opening[key] = task
            task.add_done_callback(functools.partial(self._opened, key))
        return await asyncio.shield(task)

    def _opened(self, key: tuple[str, int], task: asyncio.Task[Partition]) -> None:
        self._opening.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here: a caller may have given up waiting

    async def _load_partition(self, topic: str, partition: int) -> Partition:
        generation = self._topics.generation(topic)
        catalog = PartitionCatalog(self.store, self.namespace, topic, partition)
        try:
            state = await self._io(catalog.load)
        except (ObjectStoreError, CatalogError) as exc:
            raise LogStorageError(f"loading the catalog of {topic}-{partition}: {exc}") from exc
        producers = await self._load_producers(topic, partition, state)
        if self._topics.generation(topic) != generation:
            raise UnknownTopicOrPartition(
                f"topic {topic!r} was deleted", topic=topic, partition=partition
            )
        p = Partition(topic, partition, catalog, state)
        p.producers = producers
        # The WAL checkpoints by topic name.  If it says more is flushed than
        # the catalog holds, those offsets belonged to a deleted topic of this
        # name whose last batches were discarded (forget_topic): continue
        # above them, so no checkpoint of the old topic covers a new batch.
        flushed = self.wal.flushed_offset(topic, partition)
        if flushed >= p.next_offset:
            log.info(
                "%s: the WAL has offsets up to %d of an earlier topic of this name; "
                "offsets continue at %d",
                p.name,
                flushed,
                flushed + 1,
            )
            p.next_offset = p.high_watermark = flushed + 1
            p.producers = ProducerStateTable(p.name, self.settings.producer_id_expiration_ms)
        self._partitions[(topic, partition)] = p
        return p

    async def _load_producers(
        self, topic: str, partition: int, state: PartitionState
    ) -> ProducerStateTable:
        """The idempotent producers of the committed segments: the snapshot, then newer segments.

        Segments created before the expiration horizon are skipped (their
        producers have expired), and at most ``producer_rebuild_bytes`` of
        the newest are read, so a missing snapshot cannot stall the start.
        """
        table = ProducerStateTable(f"{topic}-{partition}", self.settings.producer_id_expiration_ms)
        now = self._clock()
        snapshot = await self._io(self._producer_snapshots.read, topic, partition)
        start = 0
        if snapshot is not None and snapshot.through <= state.high_watermark:
            table.load(snapshot, now)
            start = snapshot.through
        elif snapshot is not None:
            log.warning(
                "%s: the producer-state snapshot reaches offset %d beyond the catalog's high "
                "watermark %d; rebuilding from the segments",
                table.name,
                snapshot.through,
                state.high_watermark,
            )
        horizon = now - self.settings.producer_id_expiration_ms
        newer = [s for s in state.segments if s.last_offset >= start and s.created_ms >= horizon]
        chosen: list[SegmentEntry] = []
        budget = self.settings.producer_rebuild_bytes
        for segment in reversed(newer):
            if chosen and budget < segment.size_bytes:
                log.warning(
                    "%s: producer state rebuilt from the newest %d of %d segments",
                    table.name,
                    len(chosen),
                    len(newer),
                )
                break
            chosen.append(segment)
            budget -= segment.size_bytes
        for segment in reversed(chosen):
            try:
                # Not into L1: these reads are start-up's, not a consumer's.
                cached = await self._fetcher.load(segment, lambda _: False)
            except (ObjectNotFound, CorruptionError) as exc:
                log.warning("%s: producer state skips %s: %s", table.name, segment.key, exc)
                continue
            except ObjectStoreError as exc:
                raise LogStorageError(f"{table.name}: reading {segment.key}: {exc}") from exc
            table.replay(
                (
                    read_batch_header(cached.data, pos, object_name=segment.key)
                    for pos in cached.positions[:-1]
                ),
                now,
            )
        table.drop_below(state.log_start_offset)
        # The first flush writes a snapshot even when empty, so the next start reads none of this.
        table.changed = True
        return table

    async def forget_topic(self, name: str) -> None:
        """Drop a deleted topic now: its partitions, unflushed batches and cached segments.

        Call once the registry has marked the topic deleted.  From then on
        appends, reads and lookups of it raise `UnknownTopicOrPartition` at
        once, without waiting for the topic cache to expire; appends still in
        flight fail with it.  Batches not yet committed are discarded --
        deleting a topic discards its data, and retention removes what was
        committed -- and a WAL checkpoint past each partition's last assigned
        offset keeps recovery from replaying them.  A topic created later
        under the same name continues above those offsets (`_load_partition`).
        """
        self._topics.forget(name)
        dropped = [p for (topic, _), p in self._partitions.items() if topic == name]
        for p in dropped:
            del self._partitions[(p.topic, p.partition)]
            self._drop(p)
        try:
            await self._io(self._producer_snapshots.delete_topic, name)
        except OSError as exc:
            log.warning("topic %r: removing its producer-state snapshots: %s", name, exc)
        if self._failure.error is not None:
            return  # the WAL takes no checkpoint; the next start replays, retention removes
        checkpoints = [p for p in dropped if p.next_offset > 0]
        outcomes = await asyncio.gather(
            *(
                self.wal.checkpoint_async(p.topic, p.partition, p.next_offset - 1)
                for p in checkpoints
            ),
            return_exceptions=True,
        )
        for p, outcome in zip(checkpoints, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if isinstance(outcome, WalWriteFailed):
                    self._failure.fail(outcome)
                log.warning(
                    "%s: WAL checkpoint of the deleted topic failed (%s); a restart replays "
                    "its last batches into the deleted topic, and retention removes them",
                    p.name,
                    outcome,
                )
        if dropped:
            log.info("forgot topic %r: %d partition(s) dropped", name, len(dropped))

    def _drop(self, p: Partition) -> None:
        """Discard a deleted topic's partition: buffer, pending appends, flush, cached segments."""
        p.deleted = True
        self._pool.release(p.buffer.drop_through(p.next_offset))
        for pending in p.pending:
            if not pending.visible.done():
                pending.visible.set_exception(deleted_error(p))
                pending.visible.exception()  # its producer may have timed out already
        p.pending.clear()
        if p.flush_task is not None:
            p.flush_task.cancel()  # an upload or commit may still land: retention removes it
        self._fetcher.forget(p.state.segments)

    # --- produce ---------------------------------------------------------------

    async def append(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        *,
        timeout_s: float,
    ) -> AppendResult:
        """Store the RecordBatch v2 bytes of one partition of a produce request.

        Returns once the WAL has them per its durability mode.  Raises
        `UnknownTopicOrPartition`, `CorruptMessage`, `MessageTooLarge`,
        `InvalidRecord` (nothing stored), `RequestTimedOut` (the pool stayed
        full or the WAL did not answer within ``timeout_s``; once offsets are
        assigned the write may still become visible, like any timed-out
        produce), `LogStorageError` (the WAL failed) or `LogClosed`.
        """
        (outcome,) = await self.append_many([(topic, partition, records)], timeout_s=timeout_s)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def append_many(
        self,
        appends: Sequence[tuple[str, int, bytes | bytearray | memoryview]],
        *,
        timeout_s: float,
        owned: bool = False,
    ) -> list[AppendResult | Exception]:
        """`append` for every ``(topic, partition, records)`` of one produce request.

        Returns one outcome per append, in order: its `AppendResult` or the
        exception `append` would raise.  The partitions that pass validation
        are assigned offsets together, in one step, and go to the WAL as one
        group (`WalWriter.append_group`): one hand-off to the WAL writer and
        one wake-up back for the whole request.  With ``owned=True`` the
        caller gives up writable ``records`` buffers (the request frame): the
        offsets are assigned in them in place and the partition buffers keep
        views of them instead of copies, so they must not change afterwards.
        Raises only `LogClosed` or `LogStorageError`, before anything is stored.
        """
        self._check_writable()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        outcomes: list[AppendResult | Exception | None] = [None] * len(appends)
        staged: list[_StagedAppend] = []
        try:
            async with asyncio.timeout_at(deadline):
                for index, (topic, partition, records) in enumerate(appends):
                    try:
                        p, info = await self._partition(topic, partition)
                        staged.append(self._validate(index, p, info, records, owned))
                    except Exception as exc:
                        outcomes[index] = exc
        except TimeoutError:
            for index, (topic, partition, _) in enumerate(appends):
                if outcomes[index] is None and not any(s.index == index for s in staged):
                    outcomes[index] = RequestTimedOut(
                        f"{topic}-{partition}: the partition did not open in time"
                    )
        staged = await self._charge(staged, outcomes, deadline)
        if staged:
            await self._log_and_wait(staged, outcomes, deadline, timeout_s)
        assert all(outcome is not None for outcome in outcomes)
        return outcomes  # type: ignore[return-value]

    def _validate(
        self,
        index: int,
        p: Partition,
        info: TopicInfo,
        records: bytes | bytearray | memoryview,
        owned: bool,
    ) -> _StagedAppend:
        """Check one partition's batches; its buffer is ours to edit in place from here on."""
        if owned and isinstance(records, memoryview) and not records.readonly:
            buf: bytearray | memoryview = records
        else:
            buf = bytearray(records)  # the caller may reuse its buffer
        try:
            batches = validate_produce(
                buf,
                max_message_bytes=info.config.max_message_bytes,
                name=p.name,
                decode_records=self.settings.decode_records,
            )
            if len(buf) > self._pool.capacity:
                raise MessageTooLarge(
                    f"{p.name}: {len(buf)} bytes do not fit the memory pool of "
                    f"{self._pool.capacity} bytes",
                    size=len(buf),
                    limit=self._pool.capacity,
                )
        except LogError:
            self._metrics.produce_rejected += 1
            raise
        return _StagedAppend(index, p, info, buf, batches)

    async def _charge(
        self,
        staged: list[_StagedAppend],
        outcomes: list[AppendResult | Exception | None],
        deadline: float,
    ) -> list[_StagedAppend]:
        """Charge the staged appends to the pool, in order; the rest time out with the first."""
        loop = asyncio.get_running_loop()
        for k, item in enumerate(staged):
            try:
                await self._pool.acquire(len(item.buf), max(deadline - loop.time(), 0.0))
            except RequestTimedOut as exc:
                for later in staged[k:]:
                    self._metrics.produce_timeouts += 1
                    outcomes[later.index] = exc
                return staged[:k]
            except BaseException:  # cancelled: give back what this request holds
                for earlier in staged[:k]:
                    self._pool.release(len(earlier.buf))
                raise
        return staged

    async def _log_and_wait(
        self,
        staged: list[_StagedAppend],
        outcomes: list[AppendResult | Exception | None],
        deadline: float,
        timeout_s: float,
    ) -> None:
        """Assign offsets, buffer and queue the WAL group in one step; wait for visibility.

        Once ``staged`` is charged, the charge is the buffer's (released by
        the flush) or, for an append refused here, given back here.
        """
        ready: list[_StagedAppend] = []
        for item in staged:
            try:
                self._check_writable(item.p)
            except LogError as exc:
                outcomes[item.index] = exc
                self._pool.release(len(item.buf))
            else:
                ready.append(item)
        if not ready:
            return
        try:
            pending = self._assign_and_log(ready)
        except Exception as exc:  # the WAL refused the group: nothing was assigned
            refusal: Exception = exc
            if isinstance(exc, WalError):  # it failed or is closed
                refusal = LogStorageError(self._failure.fail(exc).message)
            for item in ready:
                self._pool.release(len(item.buf))
                outcomes[item.index] = refusal
            return
        try:
            async with asyncio.timeout_at(deadline):
                for item, visible in zip(ready, pending, strict=True):
                    try:
                        await asyncio.shield(visible)
                    except LogError as exc:  # the WAL failed, or the topic was deleted
                        outcomes[item.index] = exc
                    else:
                        outcomes[item.index] = AppendResult(
                            item.base_offset, item.append_time, item.p.state.log_start_offset
                        )
        except TimeoutError:
            for item in ready:
                if outcomes[item.index] is None:
                    self._metrics.produce_timeouts += 1
                    outcomes[item.index] = RequestTimedOut(
                        f"{item.p.name}: the WAL did not acknowledge within {timeout_s}s; the "
                        "write may still become visible"
                    )
        m = self._metrics
        for item in ready:
            if isinstance(outcomes[item.index], AppendResult) and not item.duplicate:
                m.produce_requests += 1
                m.produce_batches += len(item.batches)
                m.produce_records += sum(header.record_count for _, header in item.batches)
                m.produce_bytes += len(item.buf)

    def _assign_and_log(self, ready: list[_StagedAppend]) -> list[asyncio.Future[None]]:
        """Check producers, assign offsets, stamp, buffer and queue in the WAL: one step, no await.

        Offsets are assigned in exactly WAL order without a lock: nothing else
        runs on the loop between the assignment and the WAL queueing the
        frames.  The producer-state check runs in the same step, so no other
        append comes between a producer's check and its offsets.  Returns
        each append's visibility future; a refused one holds its error, a
        producer's retry (``duplicate``) that of its original batch.
        """
        loop = asyncio.get_running_loop()
        now_ms = self._clock()
        next_offsets: dict[tuple[str, int], int] = {}
        wal_appends: list[WalAppend] = []
        logged: list[_StagedAppend] = []
        answered: dict[int, asyncio.Future[None]] = {}  # refused and duplicates, by index
        undo: list[tuple[Partition, dict[int, Any]]] = []
        try:
            for item in ready:
                p = item.p
                headers = [header for _, header in item.batches]
                try:
                    original = p.producers.check(headers, now_ms)
                except LogError as exc:
                    self._metrics.produce_rejected += 1
                    refused: asyncio.Future[None] = loop.create_future()
                    refused.set_exception(exc)
                    refused.exception()  # read by the caller unless it timed out first
                    answered[item.index] = refused
                    continue
                if original is not None:
                    item.duplicate = True
                    item.base_offset = original.first_offset
                    item.append_time = original.timestamp if item.info.log_append_time else -1
                    answered[item.index] = self._visible_future(p, original)
                    continue
                base_offset = next_offsets.get((p.topic, p.partition), p.next_offset)
                next_offset = assign_offsets_into(item.buf, base_offset, object_name=p.name)
                if item.info.log_append_time:
                    item.append_time = self._clock()
                    for pos, _ in item.batches:
                        stamp_log_append_time_into(
                            item.buf, item.append_time, pos, object_name=p.name
                        )
                item.base_offset = base_offset
                next_offsets[(p.topic, p.partition)] = next_offset
                wal_appends.append(
                    WalAppend(
                        p.topic,
                        p.partition,
                        base_offset,
                        item.buf,
                        next_offset - 1,
                        crcs_checked=True,
                    )
                )
                placed = batch_offsets(headers, base_offset)
                undo.append((p, p.producers.apply(placed, now_ms, item.append_time)))
                logged.append(item)
            # Queued before any partition changes: if the WAL refuses, nothing happened.
            if wal_appends:
                written = self.wal.append_group(wal_appends)
        except BaseException:
            for p, previous in reversed(undo):
                p.producers.restore(previous)
            raise
        logged_indexes = {item.index for item in logged}
        now = time.monotonic()
        appends: list[tuple[Partition, PendingAppend]] = []
        for item in logged:
            p = item.p
            view = memoryview(item.buf)
            offset = item.base_offset
            for pos, header in item.batches:
                last = offset + header.last_offset_delta
                max_timestamp = (
                    item.append_time if item.info.log_append_time else header.max_timestamp
                )
                p.buffer.append(
                    BufferedBatch(
                        offset, last, max_timestamp, view[pos : pos + header.total_size], now
                    )
                )
                offset = last + 1
            p.next_offset = offset
            pending = PendingAppend(offset - 1, loop.create_future())
            p.pending.append(pending)
            appends.append((p, pending))
            answered[item.index] = pending.visible
        if appends:
            asyncio.wrap_future(written, loop=loop).add_done_callback(
                functools.partial(self._on_wal_done, appends)
            )
        for item in ready:
            if item.index not in logged_indexes:
                self._pool.release(len(item.buf))  # refused or a retry: nothing buffered
        return [answered[item.index] for item in ready]

    def _visible_future(self, p: Partition, original: BatchMetadata) -> asyncio.Future[None]:
        """Done when the batch ``original`` (already assigned) is visible, or fails with it."""
        for pending in p.pending:
            if pending.last_offset >= original.last_offset:
                return pending.visible
        visible: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        visible.set_result(None)  # below the high watermark already
        return visible

    def _on_wal_done(
        self,
        appends: list[tuple[Partition, PendingAppend]],
        group: asyncio.Future[list[WalPosition]],
    ) -> None:
        error: BaseException | None
        error = WalError("the WAL append was cancelled") if group.cancelled() else group.exception()
        if error is not None:
            failure = self._failure.fail(error)
            # The WAL acknowledges nothing after its first failure, so neither
            # these appends nor any later one of their partitions become visible.
            for p, pending in appends:
                for later in p.pending:
                    if later.last_offset >= pending.last_offset and not later.visible.done():
                        later.visible.set_exception(LogStorageError(failure.message))
                        later.visible.exception()  # its producer may have timed out already
            return
        for p, pending in appends:
            pending.acked = True
            while p.pending and p.pending[0].acked:
                done = p.pending.popleft()
                p.high_watermark = done.last_offset + 1
                if not done.visible.done():
                    done.visible.set_result(None)
            if (
                p.flush_task is None
                and p.buffer.visible_bytes(p.high_watermark) >= self.settings.segment_bytes
            ):
                self._flusher.wake()

    def _on_wal_failure(self, loop: asyncio.AbstractEventLoop, failure: WalWriteFailed) -> None:
        """The WAL's failure listener, on its writer thread: fail on the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
            loop.call_soon_threadsafe(self._failure.fail, failure)

    def _check_writable(self, p: Partition | None = None) -> None:
        self._failure.check()
        if self._lifecycle != "running":
            raise LogClosed(f"the log is {self._lifecycle}; not accepting appends")
        if self.wal.out_of_space:
            # Refused before any offset is assigned; what the WAL holds queued
            # is written once there is space again.
            raise LogStorageError(
                f"the WAL's disk is full ({self.wal.directory}): appends are refused "
                "until space is freed"
            )
        if p is not None and p.deleted:
            raise deleted_error(p)

    def _check_readable(self) -> None:
        if self._lifecycle not in ("running", "closing"):
            raise LogClosed(f"the log is {self._lifecycle}")

    # --- reads -------------------------------------------------------------------

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one).

        Raises `UnknownTopicOrPartition`, `OffsetOutOfRange` (below the log
        start offset or above the high watermark), `LogStorageError` (the
        store failed or holds a damaged object) or `LogClosed`.
        """
        self._check_readable()
        p, _ = await self._partition(topic, partition)
        return await self._reader.read(p, offset, max_bytes)

    async def list_offsets(self, topic: str, partition: int, timestamp: int) -> OffsetLookup:
        """ListOffsets: -2 the log start offset, -1 the high watermark, else by timestamp.

        ``OffsetLookup(-1, -1)`` when no record has a timestamp at or after
        ``timestamp`` (`PartitionReader.list_offsets`).
        """
        p, _ = await self._partition(topic, partition)
        return await self._reader.list_offsets(p, timestamp)

    async def wait_readahead(self) -> None:
        """Wait until the read-ahead fetches under way have finished (for tests)."""
        await self._fetcher.wait_readahead()

    async def high_watermark(self, topic: str, partition: int) -> int:
        p, _ = await self._partition(topic, partition)
        return p.high_watermark

    async def log_start_offset(self, topic: str, partition: int) -> int:
        p, _ = await self._partition(topic, partition)
        return p.state.log_start_offset

    async def catalog_state(self, topic: str, partition: int) -> PartitionState:
        """The catalog state reads go by (as of the last refresh or commit)."""
        p, _ = await self._partition(topic, partition)
        return p.state

    async def partition_size(self, topic: str, partition: int) -> int:
        """Bytes of the partition's live segments and unflushed batches."""
        p, _ = await self._partition(topic, partition)
        return sum(s.size_bytes for s in p.state.segments) + p.buffer.bytes

    async def refresh(self, topic: str, partition: int) -> PartitionState:
        """Read the partition's new catalog commits now; the state reads go by from here on."""
        p, _ = await self._partition(topic, partition)
        await self._refresher.refresh(p)
        return p.state

    # --- flush and DeleteRecords ---------------------------------------------------

    async def flush(self, topic: str | None = None, partition: int | None = None) -> None:
        """Commit everything acknowledged so far (of one topic or partition, or all) and wait."""
        await self._flusher.flush_all(
            [
                p
                for p in self._partitions.values()
                if (topic is None or p.topic == topic)
                and (partition is None or p.partition == partition)
            ]
        )

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (-1: the high watermark).

        Returns the log start offset now in force (the current one when it
        is already past ``offset``).  `OffsetOutOfRange` for an offset above
        the high watermark or below -1.  The catalog refuses a log start above
        its own high watermark, so what the new start covers is flushed first.
        """
        self._check_readable()
        p, _ = await self._partition(topic, partition)
        target = p.high_watermark if offset == LATEST_TIMESTAMP else offset
        if not 0 <= target <= p.high_watermark:
            raise OffsetOutOfRange(
                f"{p.name}: cannot delete records below {offset}: the high watermark is "
                f"{p.high_watermark}",
                topic=topic,
                partition=partition,
                offset=offset,
                log_start_offset=p.state.log_start_offset,
                high_watermark=p.high_watermark,
            )
        if target <= p.state.log_start_offset:
            return p.state.log_start_offset
        await self._flusher.flush_until(p, target)
        if p.deleted:
            raise deleted_error(p)
        try:
            state = await self._io(_set_log_start, p.catalog, target)
        except (ObjectStoreError, CatalogError) as exc:
            raise LogStorageError(f"{p.name}: moving the log start to {target}: {exc}") from exc
        self._refresher.adopt(p, state)
        log.info("%s: records below %d deleted", p.name, p.state.log_start_offset)
        return p.state.log_start_offset

    # --- plumbing ----------------------------------------------------------------

    def _wake_flusher(self) -> None:
        self._flusher.wake()

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        return await run_in(self._executor, fn, *args)

    def _spawn(self, coro: Awaitable[T]) -> asyncio.Task[T]:
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # --- metrics ---------------------------------------------------------------

    def metrics(self) -> LogMetrics:
        """A snapshot of the counters, with the gauges filled in."""
        return dataclasses.replace(
            self._metrics,
            l1_hits=self._fetcher.l1.hits,
            l1_misses=self._fetcher.l1.misses,
            l2_hits=self._fetcher.l2.hits,
            l2_misses=self._fetcher.l2.misses,
            pool_used_bytes=self._pool.used,
            pool_capacity_bytes=self._pool.capacity,
            pool_waiters=self._pool.waiting,
            pool_waits=self._pool.waits,
            pool_wait_seconds=self._pool.wait_seconds,
            buffered_bytes=sum(p.buffer.bytes for p in self._partitions.values()),
            l1_bytes=self._fetcher.l1.weight,
            l1_segments=len(self._fetcher.l1),
            l2_bytes=self._fetcher.l2.weight,
            l2_indexes=len(self._fetcher.l2),
            partitions=len(self._partitions),
        )

    def cached_segments(self) -> list[str]:
        """Catalog keys of the segments in L1, least recently used first."""
        return self._fetcher.l1.keys()

    def cached_indexes(self) -> list[str]:
        """Catalog keys of the indexes in L2, least recently used first."""
        return self._fetcher.l2.keys()


def _set_log_start(catalog: PartitionCatalog, offset: int) -> PartitionState:
    """Commit log start ``offset``; a start already past it (retention won a race) stands."""
    try:
        catalog.set_log_start_offset(offset)
    except LogStartOffsetRegression:
        state = catalog.refresh()
        if state.log_start_offset < offset:
            raise
        return state
    return catalog.state
