"""`PartitionTable`: the partitions a daemon has open -- opening, loading, warm-up, forgetting.

Every part of the log reaches a partition through this table: the append
path (`kfs_core.log.appender`), the reads and the flusher hold the same
`Partition` objects (`kfs_core.log.partition`), keyed by ``(topic,
partition)`` in `PartitionTable.partitions`.  A partition is opened on first
use: `lookup` checks the topic (`TopicCache`) and the partition number, and
`open` loads its catalog state and rebuilds its idempotent producers.  One
load runs per partition however many requests arrive meanwhile; they all
await it (``_opening``).

Loading.  `_load` reads the catalog (`PartitionCatalog.load`, on the I/O
threads) and the producer state (`_load_producers`: the snapshot written
after each flush, ``{wal}/producer-state/``, then the segments committed
since, within ``producer_rebuild_bytes``).  A topic deleted while its
partition loaded is refused.  The WAL checkpoints by topic name, so a
partition of a topic created again under a deleted one's name continues
above the old checkpoint, never below it.

Warm-up.  After `LogManager.start` has replayed the WAL, `warm_up` opens
in the background the other partitions the WAL's live files name (at most
``warmup_partitions``), so their producers' first requests after a restart
do not wait for the catalogs to load.  `open_soon` does the same for the
partitions a client's Metadata or CreateTopics names that are assigned
here and held by nobody: opening takes their lease, so the next Metadata
answer carries their leader epoch.

Deleted topics.  `forget_topic` (called once the registry marked the topic
deleted) drops its partitions at once -- lookups, appends and reads answer
`UnknownTopicOrPartition` without waiting for the topic cache -- discards
their unflushed batches and checkpoints the WAL past them.

Ownership.  With several daemons on one namespace (`kfs_core.cluster`),
a partition is opened only under a lease: `_load` asks the `Ownership`
(the daemon's `LeaseKeeper`) to acquire it first -- a ``lease`` commit in
its catalog, whose epoch the `Partition` keeps -- and `lookup` refuses a
partition whose lease this daemon no longer holds (NOT_LEADER_OR_FOLLOWER).
After loading, ``replay`` (the log's hook) brings in what a previous holder
acknowledged and did not seal (the ``store`` durability mode).  A partition
handed over or fenced leaves the table through `remove` or `discard`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from kfs_core.catalog.actions import SegmentEntry, SetLogStartOffset
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import PartitionState
from kfs_core.config import Settings
from kfs_core.errors import (
    CatalogError,
    CorruptionError,
    LogStorageError,
    NotLeaderOrFollower,
    ObjectNotFound,
    ObjectStoreError,
    UnknownTopicOrPartition,
    WalWriteFailed,
)
from kfs_core.log.cache import CachedSegment
from kfs_core.log.failure import LogFailure
from kfs_core.log.partition import Partition, deleted_error, not_leader
from kfs_core.log.pool import MemoryPool
from kfs_core.log.producer_state import ProducerStateTable, SnapshotStore
from kfs_core.log.segment_fetcher import SegmentFetcher
from kfs_core.log.topic_cache import TopicCache, TopicInfo
from kfs_core.log.transactions import load_transactions
from kfs_core.log.wal import WalLike
from kfs_core.records.header import read_batch_header
from kfs_core.storage.base import ObjectStore
from kfs_core.threads import run_in

__all__ = ["WARMUP_CONCURRENCY", "PartitionTable"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Partitions the warm-up after a start opens at once (`PartitionTable.warm_up`).
WARMUP_CONCURRENCY = 4
#: Segment reads a producer-state rebuild keeps in flight at once.
PRODUCER_REBUILD_READS = 16


class Lease(Protocol):
    """A lease this daemon took: the partition's leader epoch."""

    @property
    def epoch(self) -> int:
        """The lease's epoch, Kafka's leader epoch."""
        ...

    @property
    def catalog(self) -> object | None:
        """The catalog the lease was just taken through (a `PartitionCatalog`), or None."""
        ...

    @property
    def moved(self) -> bool:
        """Whether the lease was just taken from another daemon."""
        ...


class Ownership(Protocol):
    """Which partitions this daemon may serve (`kfs_core.cluster.leases.LeaseKeeper`)."""

    async def acquire(self, topic: str, partition: int, *, recovering: bool = False) -> Lease:
        """Take (or confirm) the partition's lease; `NotLeaderOrFollower` if it is not ours.

        ``recovering``: this daemon's own WAL holds acknowledged records of it
        (recovery after a crash): taken whatever the assignment says.
        """
        ...

    def local_epoch(self, topic: str, partition: int) -> int | None:
        """The epoch this daemon holds the partition at, while its lease is valid."""
        ...

    def lost(self, topic: str, partition: int) -> None:
        """The partition's lease is gone (fenced, or handed over)."""
        ...

    def recovered(self, keys: Sequence[tuple[str, int]]) -> None:
        """WAL recovery flushed these partitions (taken ``recovering``): they may be handed over."""
        ...


class PartitionTable:
    """The open partitions of one `LogManager`, and how a partition gets into and out of it.

    All coroutines run on the manager's loop; catalog and store reads run
    on its I/O threads (``executor``).  ``partitions`` is shared, by
    reference, with the flusher and the reads.
    """

    def __init__(
        self,
        store: ObjectStore,
        namespace: str,
        settings: Settings,
        *,
        wal: WalLike,
        topics: TopicCache,
        fetcher: SegmentFetcher,
        snapshots: SnapshotStore,
        pool: MemoryPool,
        failure: LogFailure,
        executor: ThreadPoolExecutor,
        clock: Callable[[], int],
        ownership: Ownership | None = None,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.settings = settings
        self.wal = wal
        self._topics = topics
        self._fetcher = fetcher
        self._producer_snapshots = snapshots
        self._pool = pool
        self._failure = failure
        self._executor = executor
        self._clock = clock
        self.ownership = ownership
        # Set by the log: buffers what a previous holder acknowledged and did
        # not seal, before the partition serves (see the module docstring).
        # ``begin_replay`` runs as soon as the lease is held, so the reading
        # can start while the catalog loads; what it returns goes to ``replay``.
        self.begin_replay: Callable[[str, int], int] | None = None
        self.replay: Callable[[Partition, int | None], Awaitable[None]] | None = None
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._opening: dict[tuple[str, int], asyncio.Task[Partition]] = {}
        self._soon: set[tuple[str, int]] = set()  # queued by `open_soon`

    async def open_partitions(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> None:
        """Load the catalog state of those ``(topic, partition)`` not loaded yet.

        Returns at once (without yielding to the loop) when all are loaded.
        A server awaits it before it reads the next request of a connection,
        so that request's appends cannot overtake these: `Appender.append_many`
        then finds its partitions open and assigns offsets without waiting.
        The missing ones load at once, so a request to several pays for one
        object store round trip per step of a load, not one per partition.
        Errors and timeouts are left for `append_many` to report per partition.
        """
        missing = {key for key in keys if key not in self.partitions}
        if not missing:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(
                    *(self.lookup(topic, partition) for topic, partition in sorted(missing)),
                    return_exceptions=True,
                )

    async def lookup(self, topic: str, partition: int) -> tuple[Partition, TopicInfo]:
        """The partition, opened if it is not yet, and its topic.

        `UnknownTopicOrPartition` for a topic the registry lacks or a
        partition number beyond its partitions.
        """
        info = await self._topics.get(topic)
        if not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartition(
                f"topic {topic!r} has {info.partitions} partition(s); there is no partition "
                f"{partition}",
                topic=topic,
                partition=partition,
            )
        return await self.open(topic, partition), info

    async def open(self, topic: str, partition: int, *, recovering: bool = False) -> Partition:
        """The partition, loading it first (once, however many callers wait) if it is not open.

        `NotLeaderOrFollower` when this daemon does not hold its lease (and,
        unless ``recovering`` -- WAL recovery, see `Ownership.acquire` -- may
        not take it).
        """
        key = (topic, partition)
        p = self.partitions.get(key)
        if p is not None:
            self.check_owned(p)
            return p
        task = self._opening.get(key)
        if task is None:
            # One catalog load per partition, however many requests arrive meanwhile.
            task = asyncio.ensure_future(self._load(topic, partition, recovering))
            self._opening[key] = task
            task.add_done_callback(functools.partial(self._opened, key))
        return await asyncio.shield(task)

    def opening(self) -> list[asyncio.Task[Partition]]:
        """The loads under way (`open`), for a closing log to wait for."""
        return list(self._opening.values())

    def check_owned(self, p: Partition) -> None:
        """Raise `NotLeaderOrFollower` unless this daemon holds ``p``'s lease now."""
        if p.leaving:
            raise not_leader(p)
        if self.ownership is not None and self.ownership.local_epoch(p.topic, p.partition) != (
            p.epoch
        ):
            raise not_leader(p)

    def _opened(self, key: tuple[str, int], task: asyncio.Task[Partition]) -> None:
        self._opening.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here: a caller may have given up waiting

    async def _load(self, topic: str, partition: int, recovering: bool = False) -> Partition:
        generation = self._topics.generation(topic)
        epoch = replay_ticket = None
        catalog = None
        moved = False
        if self.ownership is not None:
            lease = await self.ownership.acquire(topic, partition, recovering=recovering)
            epoch = lease.epoch
            moved = lease.moved
            if isinstance(lease.catalog, PartitionCatalog):
                catalog = lease.catalog  # current as of the take: a refresh reads what followed
            if self.begin_replay is not None:
                replay_ticket = self.begin_replay(topic, partition)
        if catalog is None:
            catalog = PartitionCatalog(self.store, self.namespace, topic, partition)
        try:
            state = await self._io(catalog.refresh)  # a cold load for a new catalog
        except (ObjectStoreError, CatalogError) as exc:
            raise LogStorageError(f"loading the catalog of {topic}-{partition}: {exc}") from exc
        if epoch is not None and state.leader_epoch != epoch:
            if self.ownership is not None:
                self.ownership.lost(topic, partition)
            raise NotLeaderOrFollower(
                f"{topic}-{partition}: another daemon took the partition (epoch "
                f"{state.leader_epoch}) as this one took it at epoch {epoch}",
                topic=topic,
                partition=partition,
            )
        producers = await self._load_producers(topic, partition, state)
        if self._topics.generation(topic) != generation:
            raise UnknownTopicOrPartition(
                f"topic {topic!r} was deleted", topic=topic, partition=partition
            )
        p = Partition(topic, partition, catalog, state)
        p.epoch = epoch
        if moved:
            p.moved_at = time.monotonic()
        p.producers = producers
        load_transactions(p.txns, state.segments)
        # The WAL checkpoints by topic name.  If it says more is flushed than
        # the catalog holds, those offsets belonged to a deleted topic of this
        # name whose last batches were discarded (forget_topic): continue
        # above them, so no checkpoint of the old topic covers a new batch.
        # With a lease, the catalog's log starts there too: another holder's
        # replay begins at the catalog's end and must find no gap.
        flushed = self.wal.flushed_offset(topic, partition)
        if flushed >= p.next_offset:
            log.info(
                "%s: the WAL has offsets up to %d of an earlier topic of this name; "
                "offsets continue at %d",
                p.name,
                flushed,
                flushed + 1,
            )
            if epoch is not None:
                action = SetLogStartOffset(offset=flushed + 1, past_end=True)
                try:
                    await self._io(
                        functools.partial(
                            catalog.commit, [action], operation="purge", leader_epoch=epoch
                        )
                    )
                except (ObjectStoreError, CatalogError) as exc:
                    raise LogStorageError(
                        f"starting {topic}-{partition} at {flushed + 1}: {exc}"
                    ) from exc
                p.state = catalog.state
            p.next_offset = p.high_watermark = flushed + 1
            p.producers = ProducerStateTable(p.name, self.settings.producer_id_expiration_ms)
        if self.replay is not None and epoch is not None:
            await self.replay(p, replay_ticket)
        self.partitions[(topic, partition)] = p
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
        gate = asyncio.Semaphore(PRODUCER_REBUILD_READS)

        async def read(segment: SegmentEntry) -> CachedSegment | None:
            async with gate:
                try:
                    # Not into L1: these reads are start-up's, not a consumer's.
                    return await self._fetcher.load(segment, lambda _: False)
                except (ObjectNotFound, CorruptionError) as exc:
                    log.warning("%s: producer state skips %s: %s", table.name, segment.key, exc)
                    return None
                except ObjectStoreError as exc:
                    raise LogStorageError(f"{table.name}: reading {segment.key}: {exc}") from exc

        # Read several at once (a takeover waits for this), replayed in offset order.
        chosen.reverse()
        loaded = await asyncio.gather(*(read(segment) for segment in chosen))
        for segment, cached in zip(chosen, loaded, strict=True):
            if cached is None:
                continue
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
        under the same name continues above those offsets (`_load`).
        """
        self._topics.forget(name)
        dropped = [p for (topic, _), p in self.partitions.items() if topic == name]
        for p in dropped:
            del self.partitions[(p.topic, p.partition)]
            self._drop(p)
            if self.ownership is not None:
                self.ownership.lost(p.topic, p.partition)
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
        self._discard(p, deleted_error)

    def remove(self, p: Partition) -> None:
        """Take a partition handed over to another daemon out of the table (flushed already)."""
        if self.partitions.get((p.topic, p.partition)) is p:
            del self.partitions[(p.topic, p.partition)]
        self._fetcher.forget(p.state.segments)
        if self.ownership is not None:
            self.ownership.lost(p.topic, p.partition)

    def discard(self, p: Partition) -> None:
        """Drop a partition another daemon took (fenced): its unsealed batches go too.

        They are the new holder's to replay (``store`` mode) or lost with
        the accepted unclean election; pending appends get NOT_LEADER_OR_FOLLOWER.
        """
        p.leaving = True
        if self.partitions.get((p.topic, p.partition)) is p:
            del self.partitions[(p.topic, p.partition)]
        self._discard(p, not_leader)
        if self.ownership is not None:
            self.ownership.lost(p.topic, p.partition)

    def _discard(self, p: Partition, error: Callable[[Partition], Exception]) -> None:
        self._pool.release(p.buffer.drop_through(p.next_offset))
        for pending in p.pending:
            if not pending.visible.done():
                pending.visible.set_exception(error(p))
                pending.visible.exception()  # its producer may have timed out already
        p.pending.clear()
        if p.flush_task is not None:
            p.flush_task.cancel()  # an upload or commit may still land: retention removes it
        self._fetcher.forget(p.state.segments)

    async def warm_up(self, keys: Sequence[tuple[str, int]], running: Callable[[], bool]) -> int:
        """Open the partitions the WAL's live files name, in the background; return how many.

        Those are the partitions written to shortly before the start.  Their
        producers come back within a second or two, and the first request to
        touch a partition waits for its catalog to load: some 50 ms for one
        of 10,000 segments on the local store, so a request to four such
        partitions waited a quarter of a second.  Loading them here usually
        gets there first; a request that comes sooner shares the load under
        way (`open`).

        The first ``warmup_partitions`` of them not open yet are tried, in key
        order, so a daemon with thousands of partitions in its WAL does not
        read every catalog on every start.  `WARMUP_CONCURRENCY` load at once:
        an object store's request latencies overlap (the checks of a catalog's
        entries hold the GIL, so more would not help on the local store).  A
        partition that cannot be opened (its topic deleted, the store failing)
        is left to its first request, which reports the error.  The workers
        stop once ``running()`` turns false (the log is closing).
        """
        started = time.monotonic()
        closed = [key for key in keys if key not in self.partitions]
        opened = await self._open_each(
            closed[: self.settings.warmup_partitions], running, logging.INFO, "warm-up"
        )
        if opened:
            log.info(
                "warm-up: opened %d partitions named in the WAL in %.2f s",
                opened,
                time.monotonic() - started,
            )
        return opened

    def open_soon(
        self, keys: Iterable[tuple[str, int]], running: Callable[[], bool]
    ) -> Coroutine[Any, Any, int] | None:
        """The opening, in the background, of those ``keys`` not open or on their way yet.

        For partitions assigned to this daemon that nobody holds yet, when a
        client names their topic (Metadata, CreateTopics): opened now, each
        takes its lease, so the client's next Metadata shows their leader
        epoch rather than -1, and their first produce or fetch does not wait
        for the load.  None when there is nothing to open; the caller runs
        the coroutine as a task.  `WARMUP_CONCURRENCY` open at once; a
        partition that cannot be opened (another daemon's after all, the
        store failing) is left to its first request, which reports the error.
        """
        fresh = [
            key
            for key in dict.fromkeys(keys)
            if key not in self.partitions and key not in self._opening and key not in self._soon
        ]
        if not fresh:
            return None
        self._soon.update(fresh)
        return self._open_soon(fresh, running)

    async def _open_soon(self, keys: list[tuple[str, int]], running: Callable[[], bool]) -> int:
        try:
            return await self._open_each(keys, running, logging.DEBUG, "opening ahead")
        finally:
            self._soon.difference_update(keys)

    async def _open_each(
        self, keys: Sequence[tuple[str, int]], running: Callable[[], bool], level: int, what: str
    ) -> int:
        """Open ``keys``, `WARMUP_CONCURRENCY` at once, until ``running()`` turns false; how many."""
        todo = iter(keys)
        opened = 0

        async def worker() -> None:
            nonlocal opened
            for topic, partition in todo:
                if not running():
                    return
                try:
                    await self.lookup(topic, partition)
                except Exception as exc:  # noqa: BLE001 - the first request reports it
                    log.log(level, "%s: %s-%d stays closed: %s", what, topic, partition, exc)
                else:
                    opened += 1

        await asyncio.gather(*(worker() for _ in range(WARMUP_CONCURRENCY)))
        return opened

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        return await run_in(self._executor, fn, *args)
