"""`LogManager`: the partition logs of the ``kfs serve`` daemon -- the façade the server calls.

The server calls `LogManager.append_many` (``append`` for one partition),
`read`, `list_offsets` and `topic`; the group coordinator and admin APIs a
few more.  Everything runs on one event loop; blocking work (object store
requests, catalog commits, sealing segments) runs on the manager's thread
pool, so the loop never waits on I/O.  The manager owns the lifecycle and
the parts; each part has its own module:

- `kfs_core.log.partition_table` -- `PartitionTable`: opening and loading
  partitions, the warm-up after a start, forgetting a deleted topic;
- `kfs_core.log.appender` -- `Appender`: the append path (offsets assigned
  in one step that never awaits, the WAL, acknowledgements);
- `kfs_core.log.flusher` -- `Flusher`: seal, upload, commit, checkpoint;
- `kfs_core.log.reader` -- `PartitionReader`: Fetch and ListOffsets;
- `kfs_core.log.catalog_refresh` -- `CatalogRefresher`: others' catalog commits;
- `kfs_core.log.topic_cache` -- `TopicCache`: the topic registry, cached;
- `kfs_core.log.topic_purger` -- `TopicPurger`: deleted topics' data removed;
- `kfs_core.log.wal` -- the WAL and its recovery;
- `kfs_core.log.partition` -- `Partition`, the per-partition state they share.

What stays here is what ties them together: the lifecycle (`start`,
`close`, the failed state), the reads and admin calls that look a partition
up and hand it to its part, DeleteRecords and the metrics snapshot.

Start-up.  `start` runs WAL recovery, skips what the catalog already has
(batches below its high watermark), replays the rest into the buffers
(`Appender.replay`) and flushes them before anything else happens; a
partition's new lease epoch is recorded to begin after what was replayed
(`_begin_epoch`), as after a takeover's replay of earlier holders.  Then,
in the background, it opens the other partitions the WAL's live files name
(`PartitionTable.warm_up`, at most ``warmup_partitions``), so their
producers' first requests after a restart do not wait for the catalogs to
load.

Leader epochs.  `end_offset_for_epoch` answers OffsetForLeaderEpoch from
the partition's catalog state; `open_soon` opens, in the background, the
partitions a client named that this daemon should lead and nobody holds.

Admin changes.  `adopt_topic` takes a registry record an admin request just
wrote (altered configs, added partitions) into the topic cache at once;
`delete_records` moves a partition's log start offset forwards with a
catalog commit (flushing first what it must cover), so reads below it get
`OffsetOutOfRange` from then on and retention removes the segments below.
`forget_topic` drops a deleted topic (`PartitionTable.forget_topic`) and
`purge_topic` removes its data and frees its name (`TopicPurger`).  A
partition fenced by another daemon's purge of its deleted topic is
forgotten the same way (`_on_fenced`).

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
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from kfs_core.catalog.config import ConfigValue
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.purge import PurgeReport
from kfs_core.catalog.state import PartitionState
from kfs_core.catalog.topics import TopicRecord, TopicRegistry
from kfs_core.clock import now_ms
from kfs_core.config import Settings
from kfs_core.errors import (
    CatalogError,
    FencedLeaderEpoch,
    LogClosed,
    LogStartOffsetRegression,
    LogStorageError,
    NotLeaderOrFollower,
    ObjectStoreError,
    OffsetOutOfRange,
    UnknownTopicOrPartition,
    WalError,
    WalWriteFailed,
)
from kfs_core.log.appender import Appender, AppendResult
from kfs_core.log.catalog_refresh import CatalogRefresher
from kfs_core.log.failure import LogFailure
from kfs_core.log.flusher import Flusher
from kfs_core.log.metrics import FlushObserver, LogMetrics
from kfs_core.log.partition import Partition, deleted_error
from kfs_core.log.partition_table import Ownership, PartitionTable
from kfs_core.log.pool import MemoryPool
from kfs_core.log.producer_state import SnapshotStore
from kfs_core.log.reader import (
    LATEST_TIMESTAMP,
    OffsetLookup,
    PartitionReader,
    ReadResult,
)
from kfs_core.log.segment_fetcher import SegmentFetcher
from kfs_core.log.topic_cache import TopicCache, TopicInfo
from kfs_core.log.topic_purger import Fencing, TopicPurger
from kfs_core.log.wal import RecoveredBatch, TornTail, WalLike
from kfs_core.records.batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    encode_batch,
    encode_control_key,
)
from kfs_core.storage.base import ObjectStore
from kfs_core.threads import name_os_thread, run_in

# AppendResult is what `append` returns; the server imports it from here.
__all__ = ["ActiveProducer", "AppendResult", "LogManager", "StartReport"]

log = logging.getLogger(__name__)

#: A transaction marker's value: version (0), the coordinator epoch.
_MARKER_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """One producer of a partition as DescribeProducers shows it (-1: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int


def _deposing_epochs(p: Partition) -> list[tuple[int, int]]:
    """The epochs of ``p``'s history whose holder served: frames of older ones above their start are stale.

    An epoch's start is where its holder began once it had replayed its
    predecessors (``leader_epoch_start``); the catalog holds records at or
    above it only if that holder served.  An epoch whose holder committed
    nothing of its own (it died or was fenced before serving) may still
    show the start its lease was taken at, below frames its predecessor
    acknowledged: it deposes nothing.  This lease's own epoch is left out.
    """
    return [
        (e.epoch, e.start_offset)
        for e in p.state.leader_epochs
        if (p.epoch is None or e.epoch < p.epoch) and e.start_offset < p.next_offset
    ]


class PreviousHolders(Protocol):
    """Where a partition's earlier holders kept acknowledged batches not yet committed.

    The ``store`` durability mode's WAL objects (`kfs_core.log.wal.store`).
    """

    def ticket(self) -> int:
        """A place in line for a listing begun after this call."""
        ...

    def list_for(self, ticket: int) -> None:
        """List (and read the headers) for ``ticket`` now, ahead of `read_partition`."""
        ...

    def topic_ends(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``, one past the last offset any WAL object holds."""
        ...

    def read_partition(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        *,
        ticket: int | None = None,
        epochs: Sequence[tuple[int, int]] = (),
    ) -> list[RecoveredBatch]:
        """The batches from ``from_offset`` on, in offset order, without gaps.

        Read from a listing begun after ``ticket`` was issued (by default,
        after this call); frames a later epoch of ``epochs`` (the leader
        epoch history as (epoch, start offset)) deposed are left out.
        """
        ...


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StartReport:
    """What `LogManager.start` found in the WAL."""

    partitions: int  # partitions the WAL held unflushed batches for
    replayed_batches: int  # batches put back into buffers (and flushed)
    skipped_batches: int  # batches the catalog already had
    wal_files: int  # WAL files scanned
    torn_tail: TornTail | None  # the unacknowledged write a crash cut short, now zeroed


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
        wal: WalLike,
        settings: Settings | None = None,
        registry: TopicRegistry | None = None,
        *,
        clock: Callable[[], int] | None = None,
        flush_observer: FlushObserver | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        ownership: Ownership | None = None,
        previous_holders: PreviousHolders | None = None,
        fencing: Fencing | None = None,
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
        self._background: set[asyncio.Task[Any]] = set()
        # Opening the partitions the WAL names, after `start` (`PartitionTable.warm_up`):
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
        self._table = PartitionTable(
            store,
            namespace,
            settings,
            wal=wal,
            topics=self._topics,
            fetcher=self._fetcher,
            snapshots=self._producer_snapshots,
            pool=self._pool,
            failure=self._failure,
            executor=self._executor,
            clock=self._clock,
            ownership=ownership,
        )
        self._previous_holders = previous_holders
        self._reading_ahead: asyncio.Task[None] | None = None  # `read_ahead_takeover`
        if previous_holders is not None:
            self._table.begin_replay = self._begin_replay
            self._table.replay = self._replay_previous_holders
        self._flusher = Flusher(
            self._table.partitions,
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
        self._appender = Appender(
            self._table,
            wal,
            settings,
            pool=self._pool,
            flusher=self._flusher,
            failure=self._failure,
            metrics=self._metrics,
            clock=self._clock,
            lifecycle=lambda: self._lifecycle,
        )
        self._flusher.on_fenced = self._refresher.on_fenced = self._on_fenced
        self._purger = TopicPurger(
            store,
            namespace,
            self.registry,
            self._executor,
            self._spawn,
            node_id=settings.node_id,
            fencing=fencing,
            hand_over_timeout_s=2 * settings.broker_session_timeout_ms / 1000,
            wal_ends=self._wal_ends,
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
        led_elsewhere: set[tuple[str, int]] = set()
        deleted: dict[tuple[str, int], int] = {}
        for record in recovery:
            key = (record.topic, record.partition)
            if key in led_elsewhere:
                continue
            if key in deleted or not await self._topic_exists(record.topic):
                deleted[key] = max(deleted.get(key, -1), record.last_offset)
                continue
            try:
                p = await self._table.open(record.topic, record.partition, recovering=True)
            except NotLeaderOrFollower as exc:
                # Another daemon took it (an unclean election, or the store
                # mode's replay of this daemon's objects): its log is theirs.
                log.warning("WAL replay skips %s-%d: %s", record.topic, record.partition, exc)
                led_elsewhere.add((record.topic, record.partition))
                continue
            touched[(p.topic, p.partition)] = p
            outcome = self._appender.replay(p, record)
            replayed += outcome.added
            skipped += outcome.skipped
        for p in touched.values():
            p.high_watermark = p.next_offset
        for p in touched.values():
            self._begin_epoch(p)
        log.info(
            "WAL replay: %d batches into %d partitions, %d already in the catalog",
            replayed,
            len(touched),
            skipped,
        )
        await self._flusher.flush_all(touched.values())
        if self._table.ownership is not None:
            self._table.ownership.recovered(list(touched))
        await self._skip_deleted(deleted)
        self._lifecycle = "running"
        self._spawn(self._flusher.run())
        self._spawn(self._refresher.run(self._table.partitions.values()))
        self._spawn(self._purger.run())
        self.warm_up = self._spawn(
            self._table.warm_up(
                sorted(self.wal.flushed_offsets), lambda: self._lifecycle == "running"
            )
        )
        return StartReport(len(touched), replayed, skipped, len(recovery.files), recovery.torn_tail)

    async def _topic_exists(self, topic: str) -> bool:
        """Whether WAL recovery should replay ``topic``: it exists (or the registry cannot say).

        Looked up before its partitions open, so the lease keeper assigns
        them knowing the topic's partition count, as every other daemon does.
        """
        try:
            await self._topics.get(topic)
        except UnknownTopicOrPartition:
            return False
        except LogStorageError:
            return True  # the open reports what the store says
        return True

    async def _skip_deleted(self, deleted: Mapping[tuple[str, int], int]) -> None:
        """Checkpoint the WAL past recovered batches of deleted topics: they are never replayed."""
        for (topic, partition), last in sorted(deleted.items()):
            log.info(
                "WAL replay skips %s-%d: the topic was deleted (offsets up to %d discarded)",
                topic,
                partition,
                last,
            )
            with contextlib.suppress(WalError):
                await self.wal.checkpoint_async(topic, partition, last)

    def _on_wal_failure(self, loop: asyncio.AbstractEventLoop, failure: WalWriteFailed) -> None:
        """The WAL's failure listener, on its writer thread: fail on the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
            loop.call_soon_threadsafe(self._failure.fail, failure)

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
                    # A partition being opened (a lease being taken) finishes
                    # opening: a lease commit must not be left half done.
                    opening = self._table.opening()
                    if opening:
                        await asyncio.wait(opening)
                    # Appends already queued in the WAL are acknowledged soon; the
                    # final flush should carry them.
                    queued = [x.visible for p in self._table.partitions.values() for x in p.pending]
                    if queued:
                        await asyncio.wait(queued)
                    if flush:
                        await self._flusher.flush_all(list(self._table.partitions.values()))
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
                *(
                    p.flush_task
                    for p in self._table.partitions.values()
                    if p.flush_task is not None
                ),
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

    # --- ownership (several daemons on one namespace) ----------------------------

    def _begin_replay(self, topic: str, partition: int) -> int:
        """Start listing the earlier holders' objects as the lease is taken; the ticket."""
        assert self._previous_holders is not None
        ticket = self._previous_holders.ticket()
        self._spawn(self._list_early(ticket))
        return ticket

    async def _list_early(self, ticket: int) -> None:
        assert self._previous_holders is not None
        # A failed listing is only a head start lost: the replay lists again.
        with contextlib.suppress(ObjectStoreError, OSError):
            await self._io(self._previous_holders.list_for, ticket)

    async def _replay_previous_holders(self, p: Partition, ticket: int | None) -> None:
        """Buffer and commit what earlier holders acknowledged above the catalog, before serving.

        The ``store`` durability mode's objects (`PreviousHolders`) hold every
        acknowledged batch until it is committed; the partition opens only
        once they are committed under this daemon's lease.  ``ticket``
        (`_begin_replay`, taken once the lease was held) dates the listing read.
        """
        assert self._previous_holders is not None
        records = await self._io(
            functools.partial(
                self._previous_holders.read_partition,
                p.topic,
                p.partition,
                p.next_offset,
                ticket=ticket,
                epochs=_deposing_epochs(p),
            )
        )
        if not records:
            return
        replayed = skipped = 0
        for record in records:
            # A batch breaking its producer's sequence was never acknowledged:
            # the replay ends there (`Appender.replay`).
            outcome = self._appender.replay(p, record, stop_at_gap=True)
            replayed += outcome.added
            skipped += outcome.skipped
            if outcome.stopped:
                break
        p.high_watermark = p.next_offset
        self._begin_epoch(p)
        await self._flusher.flush_until(p, p.high_watermark)
        log.info(
            "%s: took over at epoch %s with %d batch(es) an earlier holder acknowledged "
            "(%d already committed); offsets continue at %d",
            p.name,
            p.epoch,
            replayed,
            skipped,
            p.next_offset,
        )

    def _begin_epoch(self, p: Partition) -> None:
        """Record that ``p``'s lease epoch begins past the batches just replayed into it.

        Those were acknowledged under earlier epochs (the lease's start
        offset is the catalog's end below them), so a consumer that read them
        there must find its epoch ending above them (OffsetForLeaderEpoch).
        The first commit of them carries it (`Partition.epoch_start_due`):
        a holder that dies before leaves them to the next one's replay, and
        the history stays true.
        """
        history = p.state.leader_epochs
        if p.epoch is None or not history or history[-1].epoch != p.epoch:
            return
        if p.next_offset > history[-1].start_offset:
            p.epoch_start_due = p.next_offset

    async def release(self, topic: str, partition: int) -> None:
        """Hand a partition over: refuse appends, commit what was acknowledged, let it go.

        Clients of the partition get NOT_LEADER_OR_FOLLOWER from now on and
        find the new holder through Metadata.
        """
        p = self._table.partitions.get((topic, partition))
        if p is None:
            return
        p.leaving = True
        queued = [x.visible for x in p.pending]
        if queued:
            await asyncio.wait(queued)
        try:
            await self._flusher.flush_until(p, p.high_watermark)
        except FencedLeaderEpoch:
            return  # taken already: `Flusher.on_fenced` discarded it
        if self._table.partitions.get((topic, partition)) is not p:
            # Discarded meanwhile (another daemon took it): what was not committed
            # is the new holder's to replay, so no WAL checkpoint may pass it.
            return
        self._table.remove(p)
        if p.next_offset > 0 and self._failure.error is None:
            with contextlib.suppress(WalError):
                await self.wal.checkpoint_async(p.topic, p.partition, p.next_offset - 1)
        log.info("%s: handed over at offset %d", p.name, p.next_offset)

    async def take_over(self, keys: Sequence[tuple[str, int]]) -> None:
        """Open partitions another daemon held and left (stopped, or died), so they serve again."""
        outcomes = await asyncio.gather(
            *(self._table.lookup(topic, partition) for topic, partition in keys),
            return_exceptions=True,
        )
        for (topic, partition), outcome in zip(keys, outcomes, strict=True):
            # NOT_LEADER_OR_FOLLOWER: another daemon's to take, now the topic is known;
            # an unknown topic was deleted (its purge fences what the dead daemon held).
            if isinstance(outcome, BaseException) and not isinstance(
                outcome, (NotLeaderOrFollower, UnknownTopicOrPartition)
            ):
                log.warning("taking over %s-%d failed: %s", topic, partition, outcome)

    def read_ahead_takeover(self) -> None:
        """Another daemon may be dead: list and read the store WAL's headers a takeover needs.

        A takeover's replay (`_replay_previous_holders`) then finds the
        silent daemon's headers read; one read ahead at a time.
        """
        if self._previous_holders is None or self._lifecycle != "running":
            return
        if self._reading_ahead is not None and not self._reading_ahead.done():
            return
        self._reading_ahead = self._spawn(self._list_early(self._previous_holders.ticket()))

    def open_soon(self, topic: str, partitions: Iterable[int]) -> None:
        """Open, in the background, those of the topic's partitions not open here yet.

        For partitions a client named that are assigned to this daemon and
        held by nobody (`PartitionTable.open_soon`): each takes its lease,
        so Metadata soon shows its leader epoch.  Does nothing unless the log runs.
        """
        if self._lifecycle != "running":
            return
        opening = self._table.open_soon(
            ((topic, p) for p in partitions), lambda: self._lifecycle == "running"
        )
        if opening is not None:
            self._spawn(opening)

    async def end_offset_for_epoch(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(leader epoch, end offset)`` of ``epoch`` in the partition.

        From the catalog's epoch history (`kfs_core.catalog.epochs`); the
        newest epoch ends at the high watermark, the end of what was
        acknowledged (offsets assigned to appends the WAL has not confirmed
        may yet be given again).  (-1, -1) for a negative epoch or one newer
        than the newest.  `NotLeaderOrFollower` and `UnknownTopicOrPartition`
        as for any read.
        """
        p, _ = await self._table.lookup(topic, partition)
        return p.state.end_offset_for_epoch(epoch, p.high_watermark)

    def cached_partition_count(self, topic: str) -> int | None:
        """The partition count of a topic this log has looked up; None if it has not."""
        return self._topics.cached_partitions(topic)

    def holding(self, topic: str, partition: int) -> int | None:
        """The lease epoch of a partition open here (0 without leases); None if not open."""
        p = self._table.partitions.get((topic, partition))
        return None if p is None or p.leaving else (p.epoch or 0)

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        """The lease epoch of an open partition; None if it is not open here."""
        p = self._table.partitions.get((topic, partition))
        return None if p is None else p.epoch

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
        await self._table.open_partitions(keys, timeout_s)

    def _wal_ends(self, topic: str) -> dict[int, int]:
        """Per partition, one past the last offset of ``topic`` a WAL holds (for its purge).

        The earlier holders' ``store`` WAL objects, and this daemon's own WAL
        checkpoints (those of a forgotten topic's discarded batches).
        """
        ends = {} if self._previous_holders is None else self._previous_holders.topic_ends(topic)
        for (name, partition), last in self.wal.flushed_offsets.items():
            if name == topic:
                ends[partition] = max(ends.get(partition, 0), last + 1)
        return ends

    def _on_fenced(self, p: Partition) -> None:
        """Another daemon took the partition: drop it, and see whether its topic was deleted."""
        self._table.discard(p)
        self._spawn(self._forget_if_deleted(p))

    async def _forget_if_deleted(self, p: Partition) -> None:
        """A purge fenced ``p``: checkpoint the WAL past it and forget its topic.

        What this daemon acknowledged for the deleted topic and did not flush
        must never be replayed, not even into a topic created later under
        the name.
        """
        if not await self._deleted(p.topic):
            return
        if p.next_offset > 0 and self._failure.error is None:
            with contextlib.suppress(WalError):
                await self.wal.checkpoint_async(p.topic, p.partition, p.next_offset - 1)
        await self.forget_topic(p.topic)

    async def _deleted(self, topic: str) -> bool:
        """Whether the registry says ``topic`` is gone (a store error says it is not)."""
        try:
            await self._topics.get(topic, fresh=True)
        except UnknownTopicOrPartition:
            return True
        except LogStorageError:
            return False
        return False

    async def forget_topic(self, name: str) -> None:
        """Drop a deleted topic now: its partitions, unflushed batches and cached segments.

        Call once the registry has marked the topic deleted; what is dropped,
        and how a topic created later under the same name continues above the
        dropped offsets, is `PartitionTable.forget_topic`'s.
        """
        await self._table.forget_topic(name)

    def purge_topic(self, name: str) -> asyncio.Task[PurgeReport | None]:
        """Remove deleted topic ``name``'s data, then free its name, in the background."""
        return self._purger.schedule(name)

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
        The steps are `Appender.append_many`'s.
        """
        return await self._appender.append_many(appends, timeout_s=timeout_s, owned=owned)

    async def append_internal(
        self, topic: str, partition: int, batch: bytes, *, timeout_s: float
    ) -> AppendResult:
        """Append one batch a coordinator of this daemon built, without a produce's validation.

        Transaction markers (`write_marker`) and transactional offset
        commits (a producer id without a sequence) go this way; the
        producer's epoch is checked as for any batch.  Raises what `append` raises.
        """
        return await self._appender.append_internal(topic, partition, batch, timeout_s=timeout_s)

    async def write_marker(
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        timeout_s: float,
    ) -> AppendResult:
        """Append a transaction's commit or abort marker to one partition; its offset.

        The transaction coordinator's half of Kafka's WriteTxnMarkers: a
        control batch of one record (key: version 0 and the marker type;
        value: version 0 and ``coordinator_epoch``), transactional, from
        the producer id and epoch.  Raises what `append` raises, and
        `InvalidProducerEpoch` for an epoch older than the producer's.
        """
        value = _MARKER_VALUE.pack(0, coordinator_epoch)
        batch = encode_batch(
            [
                Record(
                    offset=0,
                    timestamp=self._clock(),
                    key=encode_control_key(CONTROL_COMMIT if commit else CONTROL_ABORT),
                    value=value,
                )
            ],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
            is_control=True,
        )
        return await self.append_internal(topic, partition, batch, timeout_s=timeout_s)

    async def producers(self, topic: str, partition: int) -> list[ActiveProducer]:
        """DescribeProducers: the partition's producers this daemon remembers, by producer id.

        Raises what `read` raises (NOT_LEADER_OR_FOLLOWER where another daemon leads it).
        """
        self._check_readable()
        p, _ = await self._table.lookup(topic, partition)
        open_txns = p.txns.open_transactions()
        return [
            ActiveProducer(
                producer_id=e.producer_id,
                producer_epoch=e.epoch,
                last_sequence=e.last_seq,
                last_timestamp=e.batches[-1].timestamp if e.batches else -1,
                current_txn_start_offset=open_txns.get(e.producer_id, -1),
            )
            for e in sorted(p.producers.entries(), key=lambda e: e.producer_id)
        ]

    def _check_readable(self) -> None:
        if self._lifecycle not in ("running", "closing"):
            raise LogClosed(f"the log is {self._lifecycle}")

    # --- reads -------------------------------------------------------------------

    async def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        *,
        read_committed: bool = False,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one).

        ``read_committed`` stops below the last stable offset and lists the
        aborted transactions among the batches (`PartitionReader.read`).  Raises `UnknownTopicOrPartition`, `OffsetOutOfRange` (below the log
        start offset or above the high watermark), `LogStorageError` (the
        store failed or holds a damaged object) or `LogClosed`.
        """
        self._check_readable()
        p, _ = await self._table.lookup(topic, partition)
        return await self._reader.read(p, offset, max_bytes, read_committed=read_committed)

    async def list_offsets(
        self, topic: str, partition: int, timestamp: int, *, read_committed: bool = False
    ) -> OffsetLookup:
        """ListOffsets: -2 the log start offset, -1 the high watermark, else by timestamp.

        ``read_committed``: -1 is the last stable offset.

        ``OffsetLookup(-1, -1)`` when no record has a timestamp at or after
        ``timestamp`` (`PartitionReader.list_offsets`).
        """
        p, _ = await self._table.lookup(topic, partition)
        return await self._reader.list_offsets(p, timestamp, read_committed=read_committed)

    async def wait_readahead(self) -> None:
        """Wait until the read-ahead fetches under way have finished (for tests)."""
        await self._fetcher.wait_readahead()

    async def high_watermark(self, topic: str, partition: int) -> int:
        p, _ = await self._table.lookup(topic, partition)
        return p.high_watermark

    async def log_start_offset(self, topic: str, partition: int) -> int:
        p, _ = await self._table.lookup(topic, partition)
        return p.state.log_start_offset

    async def catalog_state(self, topic: str, partition: int) -> PartitionState:
        """The catalog state reads go by (as of the last refresh or commit)."""
        p, _ = await self._table.lookup(topic, partition)
        return p.state

    async def partition_size(self, topic: str, partition: int) -> int:
        """Bytes of the partition's live segments and unflushed batches."""
        p, _ = await self._table.lookup(topic, partition)
        return sum(s.size_bytes for s in p.state.segments) + p.buffer.bytes

    async def refresh(self, topic: str, partition: int) -> PartitionState:
        """Read the partition's new catalog commits now; the state reads go by from here on."""
        p, _ = await self._table.lookup(topic, partition)
        await self._refresher.refresh(p)
        return p.state

    # --- flush and DeleteRecords ---------------------------------------------------

    async def flush(self, topic: str | None = None, partition: int | None = None) -> None:
        """Commit everything acknowledged so far (of one topic or partition, or all) and wait."""
        await self._flusher.flush_all(
            [
                p
                for p in self._table.partitions.values()
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
        p, _ = await self._table.lookup(topic, partition)
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
            state = await self._io(_set_log_start, p.catalog, target, p.epoch)
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

    def open_transactions(self) -> list[tuple[str, int, int, int]]:
        """``(topic, partition, open transactions, LSO lag)`` of each partition held open by one.

        The lag is the high watermark minus the last stable offset: the
        records ``read_committed`` readers wait for.
        """
        out = []
        for (topic, partition), p in sorted(self._table.partitions.items()):
            count = len(p.txns.open_transactions())
            if count:
                lag = p.high_watermark - p.txns.last_stable_offset(p.high_watermark)
                out.append((topic, partition, count, lag))
        return out

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
            buffered_bytes=sum(p.buffer.bytes for p in self._table.partitions.values()),
            l1_bytes=self._fetcher.l1.weight,
            l1_segments=len(self._fetcher.l1),
            l2_bytes=self._fetcher.l2.weight,
            l2_indexes=len(self._fetcher.l2),
            partitions=len(self._table.partitions),
        )

    def cached_segments(self) -> list[str]:
        """Catalog keys of the segments in L1, least recently used first."""
        return self._fetcher.l1.keys()

    def cached_indexes(self) -> list[str]:
        """Catalog keys of the indexes in L2, least recently used first."""
        return self._fetcher.l2.keys()


def _set_log_start(
    catalog: PartitionCatalog, offset: int, epoch: int | None = None
) -> PartitionState:
    """Commit log start ``offset``; a start already past it (retention won a race) stands."""
    try:
        catalog.set_log_start_offset(offset, leader_epoch=epoch)
    except LogStartOffsetRegression:
        state = catalog.refresh()
        if state.log_start_offset < offset:
            raise
        return state
    return catalog.state
