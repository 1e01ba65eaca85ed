"""`LogManager`: the partition log of the ``kfs serve`` daemon -- produce, fetch, flush, caches.

The server calls four coroutines: `LogManager.append`, `LogManager.read`,
`LogManager.list_offsets` and `LogManager.topic`.  Everything else runs in
the background on the same event loop; blocking work (object store requests,
catalog commits, sealing segments) runs on the manager's thread pool, so the
loop never waits on I/O.

Write path.  ``append_many`` takes every partition of one produce request
(``append`` is the one-partition case).  It validates each partition's
batches (`validate_produce`), charges their size to the `MemoryPool`
(waiting while it is full), then, in one step with no await inside, assigns
offsets in place, stamps LogAppendTime when the topic asks for it, puts the
batches into the partitions' `PartitionBuffer` and queues one WAL group (a
frame per partition, `WalManager.append_group`).  Nothing else runs on the
loop in between, so offsets are assigned in exactly WAL order without a
lock, and the step ends once the frames are queued, not when they are
durable, so concurrent producers share fsyncs.  When the WAL acknowledges
(per its durability mode), each partition's high watermark moves past its
batches and the producer gets an `AppendResult` per partition.

Idempotent producers.  In that same step each partition's
`ProducerStateTable` checks the producer id, epoch and sequence of its
batches (`kfs_core.log.producer_state`): a retry of one of a producer's
last 5 batches is answered with the original offsets once they are
visible and is not written again; a gap or an old epoch is refused.  The
state is rebuilt on start-up from a snapshot written after each flush
(``{wal}/producer-state/``), the segments committed since, and the WAL.

Flush.  A background task seals a partition's acknowledged batches into
segments (`seal_segments`) when they reach ``segment_bytes``, are older than
``flush_interval_ms``, when the pool is 75 % full, on `flush` and on
`close`.  Then: PUT each segment, PUT its index, ONE catalog commit for all
segments of the cycle, drop the batches from the buffer and the pool, and
checkpoint the WAL.  Failed uploads and commits are retried with backoff for
as long as it takes; nothing leaves memory before its commit landed, and
until then fetches read it from the buffer.  Partitions flush concurrently,
at most ``flush_concurrency`` at a time.  Sealing stores each batch as
produced unless the topic's ``compression.type`` names a codec, or it is
``producer`` and ``compression_codec`` (``KFS_COMPRESSION_CODEC``) names one
for the batches producers left uncompressed: then the batch is re-encoded
(`segments.Recompression`), and fetches after the commit return it so.
The segments of one cycle upload side by side (``upload_concurrency``),
each before its index; a busy partition seals several per cycle.

Read path, cheapest first: the partition buffer (offsets not yet committed),
then the committed segments through `SegmentFetcher` (`reader`): L1 whole
segments, L2 indexes, then at most two GETs -- index and one range -- for an
uncached fetch, one with the index cached.  The catalog state in memory
names the segment; nothing is listed.  Segments just flushed go into L1 (the
next thing lagging tail consumers read).

A consumer whose fetch starts where its previous one ended is sequential:
the next ``readahead_segments`` segments are fetched whole into L1 in the
background.

Catalog changes by others.  Compaction replaces segments and retention
removes them; the manager refreshes the catalog state of every partition
being read each ``catalog_refresh_ms`` (idle ones each ``idle_refresh_ms``)
and whenever a segment object has vanished under a fetch.  A segment that
leaves the catalog is dropped from both caches and never served again; a
fetch below a new log start offset gets `OffsetOutOfRange`.  The daemon is
the only writer of adds for its partitions.

Start-up.  `start` runs WAL recovery, skips what the catalog already has
(batches below its high watermark), replays the rest into the buffers and
flushes them before anything else happens.

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

WAL failure.  A failed WAL write or fsync (`WalWriteFailed`, from an append,
a checkpoint or the WAL's failure listener) puts the manager into its failed
state (`LogManager.failed`): every append from then on, and every one still
waiting for the WAL, gets `LogStorageError` (KAFKA_STORAGE_ERROR); reads go
on; the owner's ``on_failure`` is called once, and should stop the daemon so
that recovery replays the WAL.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import functools
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from kfs_core.catalog.actions import SegmentEntry
from kfs_core.catalog.config import ConfigValue, TopicConfig
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import PartitionState
from kfs_core.catalog.topics import TopicRecord, TopicRegistry
from kfs_core.errors import (
    CatalogError,
    CorruptionError,
    InvalidCatalogAction,
    InvalidTopicName,
    LogClosed,
    LogError,
    LogStartOffsetRegression,
    LogStorageError,
    MessageTooLarge,
    ObjectNotFound,
    ObjectStoreError,
    OffsetOutOfRange,
    RequestTimedOut,
    SegmentOverlap,
    TopicAlreadyExists,
    UnknownTopic,
    UnknownTopicOrPartition,
    WalError,
    WalWriteFailed,
)
from kfs_core.formats.index import IndexReader
from kfs_core.log.buffer import BufferedBatch, PartitionBuffer
from kfs_core.log.cache import CachedSegment
from kfs_core.log.metrics import FlushObserver, LogMetrics
from kfs_core.log.pool import MemoryPool
from kfs_core.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    ProducerStateTable,
    SnapshotStore,
    batch_offsets,
)
from kfs_core.log.reader import SegmentFetcher, run_in
from kfs_core.log.segments import (
    DAEMON_CODECS,
    Recompression,
    Sealed,
    body_end,
    seal_segments,
)
from kfs_core.log.validate import validate_produce
from kfs_core.log.wal_manager import (
    RecoveredBatch,
    TornTail,
    WalAppend,
    WalManager,
    WalPosition,
)
from kfs_core.records.batch import (
    assign_offsets_into,
    decode_batch,
    iter_batch_headers,
    stamp_log_append_time_into,
)
from kfs_core.records.header import BatchHeader, read_batch_header
from kfs_core.storage.base import ObjectStore

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "AppendResult",
    "LogManager",
    "LogSettings",
    "OffsetLookup",
    "ReadResult",
    "SettingsLike",
    "StartReport",
    "TopicInfo",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ListOffsets timestamps with a special meaning (Kafka's ``ListOffsetsRequest``).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

# How long "this topic does not exist" is believed before the registry is asked again.
_NEGATIVE_TOPIC_TTL_S = 1.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- configuration and results ----------------------------------------------


class SettingsLike(Protocol):
    """The `kfs_core.config.Settings` fields the log reads."""

    @property
    def segment_bytes(self) -> int: ...
    @property
    def flush_interval_ms(self) -> int: ...
    @property
    def pool_bytes(self) -> int: ...
    @property
    def cache_size(self) -> int: ...
    @property
    def index_cache_size(self) -> int: ...
    @property
    def readahead_segments(self) -> int: ...
    @property
    def compression_codec(self) -> str: ...


_FROM_SETTINGS = (
    "segment_bytes",
    "flush_interval_ms",
    "pool_bytes",
    "cache_size",
    "index_cache_size",
    "readahead_segments",
    "compression_codec",
)


@dataclass(frozen=True)
class LogSettings:
    """Tuning of the partition log; the first seven fields come from `Settings` (``KFS_*``)."""

    segment_bytes: int = 4 << 20  # seal a buffer at this size (KafScale's 4 MiB)
    flush_interval_ms: int = 500  # ... or when its oldest batch is this old
    pool_bytes: int = 512 << 20  # all buffered, uncommitted batches
    cache_size: int = 1 << 30  # L1: whole segments
    index_cache_size: int = 256 << 20  # L2: parsed indexes (estimated memory)
    readahead_segments: int = 2  # whole segments prefetched for sequential consumers
    # Codec for batches producers left uncompressed, under compression.type=producer.
    compression_codec: str = "none"
    pressure_ratio: float = 0.75  # pool fill that starts an emergency flush
    flush_concurrency: int = 8  # partitions flushing at once
    upload_concurrency: int = 4  # segments of one partition's flush uploaded at once
    readahead_concurrency: int = 4  # segments prefetched at once
    io_threads: int = 32  # the thread pool for store requests and commits
    index_interval: int = 100  # messages between index entries
    catalog_refresh_ms: int = 1000  # refresh period of partitions being read
    idle_refresh_ms: int = 30_000  # ... and of the others
    topic_refresh_ms: int = 5000  # topic configs and partition counts
    retry_base_ms: int = 50  # first backoff of a failed upload or commit
    retry_max_ms: int = 5000  # longest backoff
    cache_flushed_segments: bool = True  # put freshly flushed segments into L1
    decode_records: bool = False  # decode every produced record (Kafka does; slow here)
    # Forget an idempotent producer idle this long (Kafka's producer.id.expiration.ms).
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    # Without a producer-state snapshot, rebuild from at most this much of the newest segments.
    producer_rebuild_bytes: int = 16 << 20

    def __post_init__(self) -> None:
        for name in (
            "segment_bytes",
            "flush_interval_ms",
            "pool_bytes",
            "flush_concurrency",
            "upload_concurrency",
            "readahead_concurrency",
            "io_threads",
            "index_interval",
            "catalog_refresh_ms",
            "idle_refresh_ms",
            "topic_refresh_ms",
            "retry_base_ms",
            "retry_max_ms",
            "producer_id_expiration_ms",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("cache_size", "index_cache_size", "readahead_segments"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.compression_codec not in DAEMON_CODECS:
            raise ValueError(
                f"compression codec {self.compression_codec!r}: expected one of "
                f"{', '.join(DAEMON_CODECS)}"
            )

    @classmethod
    def from_settings(cls, settings: SettingsLike, **overrides: Any) -> LogSettings:
        """The daemon's settings (``KFS_SEGMENT_BYTES`` ...) plus any tuning ``overrides``."""
        values: dict[str, Any] = {name: getattr(settings, name) for name in _FROM_SETTINGS}
        expiration = getattr(settings, "producer_id_expiration_ms", None)  # KFS_PRODUCER_ID_...
        if expiration is not None:
            values["producer_id_expiration_ms"] = expiration
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What a produce response reports for one partition."""

    base_offset: int
    log_append_time: int  # the stamped time for LogAppendTime topics, else -1 (as Kafka)
    log_start_offset: int


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


@dataclass(frozen=True, slots=True)
class OffsetLookup:
    """A ListOffsets answer: the offset, and the record's timestamp (-1 for earliest/latest).

    ``offset`` is -1 when no record has a timestamp at or after the one asked for.
    """

    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the log sees it: partition count and effective config."""

    name: str
    topic_id: str
    partitions: int
    config: TopicConfig

    @classmethod
    def of(cls, record: TopicRecord) -> TopicInfo:
        return cls(
            record.name,
            record.topic_id,
            record.partitions,
            TopicConfig.from_configs(record.configs),
        )

    @property
    def log_append_time(self) -> bool:
        return self.config.message_timestamp_type == "LogAppendTime"


@dataclass(frozen=True, slots=True)
class StartReport:
    """What `LogManager.start` found in the WAL."""

    partitions: int  # partitions the WAL held unflushed batches for
    replayed_batches: int  # batches put back into buffers (and flushed)
    skipped_batches: int  # batches the catalog already had
    wal_files: int  # WAL files scanned
    torn_tail: TornTail | None  # the unacknowledged write a crash cut short, now zeroed


# --- per-partition and per-topic state --------------------------------------


@dataclass(eq=False, slots=True)
class _StagedAppend:
    """One partition of a produce request on its way: validated, then charged, then logged."""

    index: int  # its place in the request
    p: _Partition
    info: TopicInfo
    buf: bytearray | memoryview  # ours to edit in place
    batches: list[tuple[int, BatchHeader]]
    base_offset: int = -1  # assigned by `LogManager._assign_and_log`
    append_time: int = -1  # stamped LogAppendTime, else -1
    duplicate: bool = False  # a producer's retry: answered with the original offsets


@dataclass(eq=False, slots=True)
class _PendingAppend:
    """An append queued in the WAL, in offset order; visible once it and all before it are acked."""

    last_offset: int
    visible: asyncio.Future[None]
    acked: bool = False


class _Partition:
    """Everything the manager keeps for one partition."""

    def __init__(
        self, topic: str, partition: int, catalog: PartitionCatalog, state: PartitionState
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self.catalog = catalog
        self.state = state
        self.live_keys = frozenset(s.key for s in state.segments)
        self.next_offset = state.high_watermark  # the next offset to assign
        self.high_watermark = state.high_watermark  # everything below is acknowledged
        self.buffer = PartitionBuffer()
        self.pending: deque[_PendingAppend] = deque()
        self.flush_task: asyncio.Task[None] | None = None
        self.next_sequential_read = -1  # where a consumer continuing its last fetch starts
        self.last_read_at = 0.0
        self.refreshed_at = time.monotonic()
        self.deleted = False  # its topic was deleted (`LogManager.forget_topic`)
        self.producers = ProducerStateTable(self.name)  # replaced by `_load_partition`

    def is_live(self, key: str) -> bool:
        """Whether the catalog state reads go by lists the segment ``key``."""
        return key in self.live_keys


@dataclass(slots=True)
class _TopicEntry:
    info: TopicInfo | None  # None: the registry said the topic does not exist
    fetched_at: float
    refreshing: bool = False
    revision: int = -1  # of the registry record behind ``info``


# --- the manager --------------------------------------------------------------


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
        wal: WalManager,
        settings: LogSettings | SettingsLike | None = None,
        registry: TopicRegistry | None = None,
        *,
        clock: Callable[[], int] | None = None,
        flush_observer: FlushObserver | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        if settings is None:
            settings = LogSettings()
        elif not isinstance(settings, LogSettings):
            settings = LogSettings.from_settings(settings)
        self.store = store
        self.namespace = namespace
        self.wal = wal
        self.settings = settings
        self.registry = registry if registry is not None else TopicRegistry(store, namespace)
        self._clock = clock or _now_ms
        self._flush_observer = flush_observer
        self._on_failure = on_failure
        self._metrics = LogMetrics()
        self._pool = MemoryPool(
            settings.pool_bytes,
            pressure_ratio=settings.pressure_ratio,
            on_pressure=self._wake_flusher,
        )
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._opening: dict[tuple[str, int], asyncio.Task[_Partition]] = {}
        self._topics: dict[str, _TopicEntry] = {}
        # Bumped by forget_topic: registry answers and catalog loads begun
        # before it are about the deleted topic and must not be kept.
        self._topic_generations: dict[str, int] = {}
        self._executor = ThreadPoolExecutor(settings.io_threads, thread_name_prefix="kfs-log-io")
        self._fetcher = SegmentFetcher(
            store,
            namespace,
            self._executor,
            self._metrics,
            cache_size=settings.cache_size,
            index_cache_size=settings.index_cache_size,
            readahead_concurrency=settings.readahead_concurrency,
        )
        self._flush_wakeup = asyncio.Event()
        self._flush_slots = asyncio.Semaphore(settings.flush_concurrency)
        self._refresh_slots = asyncio.Semaphore(max(1, settings.io_threads // 4))
        self._background: set[asyncio.Task[Any]] = set()
        self._lifecycle: Literal["new", "starting", "running", "closing", "closed"] = "new"
        self._failed: BaseException | None = None  # the WAL's error, once it failed
        self._failure: LogStorageError | None = None  # what producers get from then on
        self._rng = random.Random()
        self._producer_snapshots = SnapshotStore(Path(wal.directory) / "producer-state")

    def __repr__(self) -> str:
        return f"LogManager({self.store!r}, {self.namespace!r}, {self._lifecycle})"

    @property
    def failed(self) -> BaseException | None:
        """The WAL failure that stopped appends (a `WalWriteFailed`); None while healthy."""
        return self._failed

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
        touched: dict[tuple[str, int], _Partition] = {}
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
        await self._flush_partitions(touched.values())
        self._lifecycle = "running"
        self._spawn(self._flush_loop())
        self._spawn(self._refresh_loop())
        return StartReport(len(touched), replayed, skipped, len(recovery.files), recovery.torn_tail)

    def _replay(self, p: _Partition, record: RecoveredBatch) -> tuple[int, int]:
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
        committed stays in the WAL and the next `start` replays it.  Neither
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
                        await self._flush_partitions(list(self._partitions.values()))
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
            self._executor.shutdown(wait=False, cancel_futures=True)
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
        try:
            return await self._topic_info(name)
        except UnknownTopicOrPartition:
            if not auto_create:
                raise
        try:
            return await self.create_topic(name, partitions, configs)
        except TopicAlreadyExists:  # another creator won the race
            return await self._topic_info(name, fresh=True)

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, ConfigValue] | None = None,
    ) -> TopicInfo:
        """Create a topic in the registry (`TopicAlreadyExists`, `InvalidTopicName` ... as it raises)."""
        record = await self._io(self.registry.create_topic, name, partitions, configs)
        return self.adopt_topic(record)

    def adopt_topic(self, record: TopicRecord) -> TopicInfo:
        """Serve ``record`` (just written to the registry: new configs, more partitions) at once."""
        info = TopicInfo.of(record)
        self._topics[record.name] = _TopicEntry(info, time.monotonic(), revision=record.revision)
        return info

    async def _topic_info(self, name: str, *, fresh: bool = False) -> TopicInfo:
        entry = self._topics.get(name)
        if entry is not None and not fresh:
            age = time.monotonic() - entry.fetched_at
            if entry.info is None:
                if age < min(_NEGATIVE_TOPIC_TTL_S, self.settings.topic_refresh_ms / 1000):
                    raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name)
            else:
                if age >= self.settings.topic_refresh_ms / 1000 and not entry.refreshing:
                    # Serve the cached record; refresh it off the request path.
                    entry.refreshing = True
                    self._spawn(self._load_topic_quietly(name))
                return entry.info
        return await self._load_topic(name)

    async def _load_topic(self, name: str) -> TopicInfo:
        generation = self._topic_generations.get(name, 0)
        try:
            record = await self._io(self.registry.get, name)
        except (UnknownTopic, InvalidTopicName):
            self._topics[name] = _TopicEntry(None, time.monotonic())
            raise UnknownTopicOrPartition(f"unknown topic {name!r}", topic=name) from None
        except (ObjectStoreError, CatalogError) as exc:
            raise LogStorageError(f"reading topic {name!r} from the registry: {exc}") from exc
        if self._topic_generations.get(name, 0) != generation:
            # Deleted while the registry answered: the answer may predate the delete.
            raise UnknownTopicOrPartition(f"topic {name!r} was deleted", topic=name)
        cached = self._topics.get(name)
        if (
            cached is not None
            and cached.info is not None
            and cached.info.topic_id == record.topic_id
            and cached.revision > record.revision
        ):
            return cached.info  # adopted a newer revision while the registry answered
        return self.adopt_topic(record)

    async def _load_topic_quietly(self, name: str) -> None:
        try:
            await self._load_topic(name)
        except UnknownTopicOrPartition:
            log.info("topic %s is gone from the registry", name)
        except LogStorageError as exc:
            log.warning("refreshing topic %s: %s", name, exc)
            entry = self._topics.get(name)
            if entry is not None:
                entry.refreshing = False

    async def open_partitions(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> None:
        """Load the catalog state of those ``(topic, partition)`` not loaded yet.

        Returns at once (without yielding to the loop) when all are loaded.
        A server awaits it before it reads the next request of a connection,
        so that request's appends cannot overtake these: `append_many` then
        finds its partitions open and assigns offsets without waiting.
        Errors and timeouts are left for `append_many` to report per partition.
        """
        missing = {key for key in keys if key not in self._partitions}
        if not missing:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                for topic, partition in sorted(missing):
                    with contextlib.suppress(Exception):
                        await self._partition(topic, partition)

    async def _partition(self, topic: str, partition: int) -> tuple[_Partition, TopicInfo]:
        info = await self._topic_info(topic)
        if not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartition(
                f"topic {topic!r} has {info.partitions} partition(s); there is no partition "
                f"{partition}",
                topic=topic,
                partition=partition,
            )
        return await self._open_partition(topic, partition), info

    async def _open_partition(self, topic: str, partition: int) -> _Partition:
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

    def _opened(self, key: tuple[str, int], task: asyncio.Task[_Partition]) -> None:
        self._opening.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here: a caller may have given up waiting

    async def _load_partition(self, topic: str, partition: int) -> _Partition:
        generation = self._topic_generations.get(topic, 0)
        catalog = PartitionCatalog(self.store, self.namespace, topic, partition)
        try:
            state = await self._io(catalog.load)
        except (ObjectStoreError, CatalogError) as exc:
            raise LogStorageError(f"loading the catalog of {topic}-{partition}: {exc}") from exc
        producers = await self._load_producers(topic, partition, state)
        if self._topic_generations.get(topic, 0) != generation:
            raise UnknownTopicOrPartition(
                f"topic {topic!r} was deleted", topic=topic, partition=partition
            )
        p = _Partition(topic, partition, catalog, state)
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
        self._topic_generations[name] = self._topic_generations.get(name, 0) + 1
        self._topics[name] = _TopicEntry(None, time.monotonic())
        dropped = [p for (topic, _), p in self._partitions.items() if topic == name]
        for p in dropped:
            del self._partitions[(p.topic, p.partition)]
            self._drop(p)
        try:
            await self._io(self._producer_snapshots.delete_topic, name)
        except OSError as exc:
            log.warning("topic %r: removing its producer-state snapshots: %s", name, exc)
        if self._failed is not None:
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
                    self._fail(outcome)
                log.warning(
                    "%s: WAL checkpoint of the deleted topic failed (%s); a restart replays "
                    "its last batches into the deleted topic, and retention removes them",
                    p.name,
                    outcome,
                )
        if dropped:
            log.info("forgot topic %r: %d partition(s) dropped", name, len(dropped))

    def _drop(self, p: _Partition) -> None:
        """Discard a deleted topic's partition: buffer, pending appends, flush, cached segments."""
        p.deleted = True
        self._pool.release(p.buffer.drop_through(p.next_offset))
        for pending in p.pending:
            if not pending.visible.done():
                pending.visible.set_exception(_deleted(p))
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
        group (`WalManager.append_group`): one hand-off to the WAL writer and
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
        p: _Partition,
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
                refusal = LogStorageError(self._fail(exc).message)
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
        undo: list[tuple[_Partition, dict[int, Any]]] = []
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
                    WalAppend(p.topic, p.partition, base_offset, item.buf, next_offset - 1)
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
        appends: list[tuple[_Partition, _PendingAppend]] = []
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
            pending = _PendingAppend(offset - 1, loop.create_future())
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

    def _visible_future(self, p: _Partition, original: BatchMetadata) -> asyncio.Future[None]:
        """Done when the batch ``original`` (already assigned) is visible, or fails with it."""
        for pending in p.pending:
            if pending.last_offset >= original.last_offset:
                return pending.visible
        visible: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        visible.set_result(None)  # below the high watermark already
        return visible

    def _on_wal_done(
        self,
        appends: list[tuple[_Partition, _PendingAppend]],
        group: asyncio.Future[list[WalPosition]],
    ) -> None:
        error: BaseException | None
        error = WalError("the WAL append was cancelled") if group.cancelled() else group.exception()
        if error is not None:
            failure = self._fail(error)
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
                self._wake_flusher()

    def _fail(self, error: BaseException) -> LogStorageError:
        """Enter the failed state (once): refuse appends from now on, and tell the owner."""
        if self._failure is None:
            self._failed = error
            self._failure = LogStorageError(
                f"the WAL failed ({error}); appends are refused until the daemon restarts"
            )
            log.error("%s", self._failure.message)
            if self._on_failure is not None:
                try:
                    self._on_failure(error)
                except Exception:  # the failed state stands whatever the callback does
                    log.exception("the log's on_failure callback failed")
        return self._failure

    def _on_wal_failure(self, loop: asyncio.AbstractEventLoop, failure: WalWriteFailed) -> None:
        """The WAL's failure listener, on its writer thread: fail on the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
            loop.call_soon_threadsafe(self._fail, failure)

    def _check_writable(self, p: _Partition | None = None) -> None:
        if self._failure is not None:
            raise LogStorageError(self._failure.message)
        if self._lifecycle != "running":
            raise LogClosed(f"the log is {self._lifecycle}; not accepting appends")
        if p is not None and p.deleted:
            raise _deleted(p)

    def _check_readable(self) -> None:
        if self._lifecycle not in ("running", "closing"):
            raise LogClosed(f"the log is {self._lifecycle}")

    # --- fetch -----------------------------------------------------------------

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one).

        Raises `UnknownTopicOrPartition`, `OffsetOutOfRange` (below the log
        start offset or above the high watermark), `LogStorageError` (the
        store failed or holds a damaged object) or `LogClosed`.
        """
        self._check_readable()
        p, _ = await self._partition(topic, partition)
        p.last_read_at = time.monotonic()
        for attempt in range(2):
            high_watermark = p.high_watermark
            log_start = p.state.log_start_offset
            if offset == high_watermark:
                return ReadResult(b"", high_watermark, log_start)
            if not log_start <= offset < high_watermark:
                raise OffsetOutOfRange(
                    f"{p.name}: offset {offset} is outside [{log_start}, {high_watermark}]",
                    topic=topic,
                    partition=partition,
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
                await self._refresh_partition(p)
                continue
            except (ObjectStoreError, CorruptionError) as exc:
                raise LogStorageError(f"{p.name}: reading offset {offset}: {exc}") from exc
            self._metrics.fetch_requests += 1
            self._metrics.fetch_bytes += len(records)
            return ReadResult(records, p.high_watermark, p.state.log_start_offset)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read_at(self, p: _Partition, offset: int, max_bytes: int) -> bytes:
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

    def _read_ahead(self, p: _Partition, segment: SegmentEntry) -> None:
        """Prefetch the ``readahead_segments`` segments after ``segment`` into L1."""
        count = self.settings.readahead_segments
        if count > 0:
            segments = p.state.segments
            i = bisect.bisect_right(segments, segment.base_offset, key=_base_offset)
            self._fetcher.read_ahead(segments[i : i + count], p.is_live)

    async def wait_readahead(self) -> None:
        """Wait until the read-ahead fetches under way have finished (for tests)."""
        await self._fetcher.wait_readahead()

    # --- offsets ---------------------------------------------------------------

    async def list_offsets(self, topic: str, partition: int, timestamp: int) -> OffsetLookup:
        """ListOffsets: -2 the log start offset, -1 the high watermark, else by timestamp.

        For a timestamp >= 0: the first offset (at or above the log start)
        whose record timestamp is at or after it, and that timestamp; the
        catalog's per-segment max timestamp picks the segment, batch headers
        the batch.  ``OffsetLookup(-1, -1)`` when there is none.
        """
        p, _ = await self._partition(topic, partition)
        p.last_read_at = time.monotonic()
        if timestamp == LATEST_TIMESTAMP:
            return OffsetLookup(p.high_watermark, -1)
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetLookup(p.state.log_start_offset, -1)
        if timestamp < 0:
            raise ValueError(f"timestamp {timestamp}: expected -1, -2 or a time in ms")
        log_start = p.state.log_start_offset
        memory_first = p.buffer.first_offset
        try:
            for segment in p.state.segments:
                if memory_first is not None and segment.base_offset >= memory_first:
                    break
                if segment.last_offset < log_start or segment.max_timestamp < timestamp:
                    continue
                cached = await self._fetcher.load(segment, p.is_live)
                found = await self._io(_find_in_segment, cached, timestamp, log_start)
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
        await self._flush_until(p, target)
        if p.deleted:
            raise _deleted(p)
        try:
            state = await self._io(_set_log_start, p.catalog, target)
        except (ObjectStoreError, CatalogError) as exc:
            raise LogStorageError(f"{p.name}: moving the log start to {target}: {exc}") from exc
        self._set_state(p, state)
        log.info("%s: records below %d deleted", p.name, p.state.log_start_offset)
        return p.state.log_start_offset

    # --- catalog refresh -------------------------------------------------------

    async def refresh(self, topic: str, partition: int) -> PartitionState:
        """Read the partition's new catalog commits now; the state reads go by from here on."""
        p, _ = await self._partition(topic, partition)
        await self._refresh_partition(p)
        return p.state

    async def _refresh_partition(self, p: _Partition) -> None:
        async with self._refresh_slots:
            try:
                state = await self._io(p.catalog.refresh)
            except (ObjectStoreError, CatalogError) as exc:
                self._metrics.store_errors += 1
                raise LogStorageError(f"refreshing the catalog of {p.name}: {exc}") from exc
        self._metrics.catalog_refreshes += 1
        p.refreshed_at = time.monotonic()
        self._set_state(p, state)

    def _set_state(self, p: _Partition, state: PartitionState) -> None:
        """Adopt a newer catalog state; segments that left it leave the caches too."""
        if state.version < p.state.version:
            return  # a slower refresh finishing after a newer commit
        live = frozenset(s.key for s in state.segments)
        gone = [s for s in p.state.segments if s.key not in live]
        if gone:
            self._fetcher.forget(gone)
            log.info("%s: %d segment(s) left the catalog: %s", p.name, len(gone), gone[0].key)
        p.state = state
        p.live_keys = live

    async def _refresh_loop(self) -> None:
        period = self.settings.catalog_refresh_ms / 1000
        idle = self.settings.idle_refresh_ms / 1000
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            due = [
                p
                for p in self._partitions.values()
                if now - p.last_read_at < idle or now - p.refreshed_at >= idle
            ]
            await asyncio.gather(*(self._refresh_quietly(p) for p in due))

    async def _refresh_quietly(self, p: _Partition) -> None:
        try:
            await self._refresh_partition(p)
        except LogStorageError as exc:
            log.warning("%s", exc)

    # --- flush -----------------------------------------------------------------

    async def flush(self, topic: str | None = None, partition: int | None = None) -> None:
        """Commit everything acknowledged so far (of one topic or partition, or all) and wait."""
        await self._flush_partitions(
            [
                p
                for p in self._partitions.values()
                if (topic is None or p.topic == topic)
                and (partition is None or p.partition == partition)
            ]
        )

    async def _flush_partitions(self, partitions: Iterable[_Partition]) -> None:
        await asyncio.gather(*(self._flush_until(p, p.high_watermark) for p in partitions))

    async def _flush_until(self, p: _Partition, target: int) -> None:
        while (first := p.buffer.first_offset) is not None and first < target:
            task = p.flush_task if p.flush_task is not None else self._start_flush(p)
            await asyncio.wait([task])  # waiting, not owning: cancelling us leaves it running
            if task.cancelled():
                if p.deleted:
                    return  # dropped with its topic
                raise asyncio.CancelledError
            if (error := task.exception()) is not None:
                raise error

    def _wake_flusher(self) -> None:
        self._flush_wakeup.set()

    async def _flush_loop(self) -> None:
        # Ticks find buffers that grew old; size, pressure and flush ends wake it early.
        tick = max(0.005, min(0.1, self.settings.flush_interval_ms / 4000))
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(tick):
                    await self._flush_wakeup.wait()
            self._flush_wakeup.clear()
            self._schedule_flushes()

    def _schedule_flushes(self) -> None:
        now = time.monotonic()
        urgent = self._pool.under_pressure
        for p in self._partitions.values():
            if p.flush_task is None and self._flush_due(p, now, urgent):
                self._start_flush(p)

    def _flush_due(self, p: _Partition, now: float, urgent: bool) -> bool:
        visible = p.buffer.visible_bytes(p.high_watermark)
        if visible == 0:
            return False
        if urgent or visible >= self.settings.segment_bytes:
            return True
        oldest = next(iter(p.buffer))
        return now - oldest.appended_at >= self.settings.flush_interval_ms / 1000

    def _start_flush(self, p: _Partition) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._flush_partition(p))
        p.flush_task = task
        task.add_done_callback(functools.partial(self._flush_done, p))
        return task

    def _flush_done(self, p: _Partition, task: asyncio.Task[None]) -> None:
        p.flush_task = None
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("%s: flush failed unexpectedly", p.name, exc_info=exc)
        self._wake_flusher()  # more may have become due while it ran

    async def _flush_partition(self, p: _Partition) -> None:
        """Seal, upload, commit once, release, checkpoint: one flush cycle of one partition."""
        async with self._flush_slots:
            batches = p.buffer.visible(p.high_watermark)
            if not batches:
                return
            started = time.monotonic()
            created_ms = self._clock()
            recompression = await self._recompression(p.topic)
            sealed = await self._retry(
                f"{p.name}: sealing {len(batches)} batches",
                lambda: self._io(
                    functools.partial(
                        seal_segments,
                        p.topic,
                        p.partition,
                        batches,
                        segment_bytes=self.settings.segment_bytes,
                        index_interval=self.settings.index_interval,
                        created_ms=created_ms,
                        recompression=recompression,
                    )
                ),
            )
            _share_segment_bytes(sealed)
            # Nothing is visible before the commit, so the segments of a cycle
            # upload side by side (each before its index): one partition that
            # takes hundreds of MB/s must not wait for one PUT after another.
            slots = asyncio.Semaphore(self.settings.upload_concurrency)
            await asyncio.gather(*(self._upload(p, s, slots) for s in sealed))
            entries = [s.entry for s in sealed]
            state = await self._retry(
                f"{p.name}: committing {len(entries)} segment(s)",
                lambda: self._io(_commit_segments, p.catalog, entries),
            )
            self._metrics.catalog_commits += 1
            last_offset = entries[-1].last_offset
            # One loop step from here to the release: a fetch sees the batches in
            # the buffer or in the catalog state, never in neither.
            self._set_state(p, state)
            self._pool.release(p.buffer.drop_through(last_offset))
            if not p.deleted:
                self._cache_sealed(p, sealed)
            seconds = time.monotonic() - started
            size = sum(s.entry.size_bytes for s in sealed)
            m = self._metrics
            m.flushes += 1
            m.flush_segments += len(sealed)
            m.flush_bytes += size
            m.flush_recompressed_batches += sum(s.recoded_batches for s in sealed)
            m.flush_seconds_total += seconds
            m.flush_seconds_max = max(m.flush_seconds_max, seconds)
            if self._flush_observer is not None:
                try:
                    self._flush_observer(seconds, size, len(sealed))
                except Exception:  # a metrics bug must not stop flushing
                    log.exception("flush observer failed")
        if not p.deleted:
            await self._snapshot_producers(p, last_offset + 1)
        if self._failed is not None or p.deleted:
            return  # a failed WAL takes no frames; forget_topic checkpointed a deleted topic
        try:
            await self.wal.checkpoint_async(p.topic, p.partition, last_offset)
            self._metrics.wal_checkpoints += 1
        except WalError as exc:
            if isinstance(exc, WalWriteFailed):
                self._fail(exc)
            # The commit stands; the next start replays a little more and skips it.
            log.warning("%s: WAL checkpoint at %d failed: %s", p.name, last_offset, exc)

    async def _snapshot_producers(self, p: _Partition, through: int) -> None:
        """Write the producer state of the offsets below ``through`` (all committed), if it changed."""
        producers = p.producers
        now = self._clock()
        producers.expire(now)
        producers.drop_below(p.state.log_start_offset)
        if not producers.changed:
            return
        snapshot = producers.snapshot(through, now)
        # Batches above ``through`` still need a snapshot once they are flushed.
        producers.changed = any(e.last_offset >= through for e in producers.entries())
        try:
            await self._io(self._producer_snapshots.write, p.topic, p.partition, snapshot)
        except OSError as exc:
            producers.changed = True
            log.warning("%s: writing the producer-state snapshot: %s", p.name, exc)

    async def _upload(self, p: _Partition, sealed: Sealed, slots: asyncio.Semaphore) -> None:
        """PUT one sealed segment, then its index, retrying until they land."""
        segment_key = self._object_key(sealed.entry.key)
        index_key = self._object_key(sealed.entry.index_key)
        async with slots:
            await self._retry(
                f"{p.name}: uploading {segment_key}",
                functools.partial(self._put, segment_key, sealed.segment.data),
            )
            await self._retry(
                f"{p.name}: uploading {index_key}",
                functools.partial(self._put, index_key, sealed.segment.index),
            )

    async def _recompression(self, topic: str) -> Recompression:
        """How a flush stores the topic's batches: its compression.type, then KFS_COMPRESSION_CODEC."""
        try:
            compression_type = (await self._topic_info(topic)).config.compression_type
        except LogError as exc:
            # The bytes are valid either way; store them as produced.
            log.debug("%s: no topic config for this flush (%s); storing as produced", topic, exc)
            compression_type = "producer"
        return Recompression.for_topic(compression_type, self.settings.compression_codec)

    def _cache_sealed(self, p: _Partition, sealed: Sequence[Sealed]) -> None:
        """Segments just committed are what lagging tail consumers read next: cache them."""
        for s in sealed:
            if not p.is_live(s.entry.key):
                continue
            cached = None
            if self.settings.cache_flushed_segments:
                cached = CachedSegment(
                    self._object_key(s.entry.key),
                    s.segment.data,
                    (*s.positions, body_end(s.entry)),
                    tuple(b.last_offset for b in s.batches),
                )
            index = IndexReader(s.segment.index, self._object_key(s.entry.index_key))
            self._fetcher.remember(s.entry, cached, index)

    async def _retry(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt`` until it succeeds, backing off: a flush never drops data."""
        failures = 0
        while True:
            try:
                return await attempt()
            except Exception as exc:  # every failure is retried; cancellation is not caught
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

    # --- store I/O -------------------------------------------------------------

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        return await run_in(self._executor, fn, *args)

    async def _put(self, key: str, data: bytes) -> None:
        try:
            await self._io(self.store.put, key, data)
        except Exception:
            self._metrics.store_errors += 1
            raise
        self._metrics.store_puts += 1
        self._metrics.store_put_bytes += len(data)

    def _object_key(self, key: str) -> str:
        return self._fetcher.object_key(key)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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


# --- helpers ---------------------------------------------------------------------


def _base_offset(segment: SegmentEntry) -> int:
    return segment.base_offset


def _deleted(p: _Partition) -> UnknownTopicOrPartition:
    return UnknownTopicOrPartition(
        f"topic {p.topic!r} was deleted", topic=p.topic, partition=p.partition
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


def _commit_segments(catalog: PartitionCatalog, entries: list[SegmentEntry]) -> PartitionState:
    """Add ``entries`` in one commit; idempotent when an earlier attempt's outcome was unknown."""
    try:
        catalog.add_segments(entries)
    except (SegmentOverlap, InvalidCatalogAction):
        # If an attempt whose outcome was unknown did land, our keys are there
        # now (or, compacted meanwhile, already tombstones): that is success.
        state = catalog.refresh()
        known = {s.key for s in state.segments} | {t.key for t in state.tombstones}
        if all(entry.key in known for entry in entries):
            return state
        raise
    return catalog.state


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
