"""The partition log of the ``kfs serve`` daemon: WAL, buffers, flush, read path, caches.

The rooms, in the order a produced batch meets them:

- `log_manager`  — `LogManager`: the façade the server calls; the lifecycle
  (start-up replay, close), reads, DeleteRecords, metrics, the failed state.
- `partition_table` — `PartitionTable`: opening and loading partitions, the
  warm-up after a start, forgetting a deleted topic (partition ownership
  belongs here).
- `appender`     — `Appender`: the append path (offsets assigned in one step
  with no await, the WAL group, acknowledgement per durability mode), WAL
  replay into the buffers; `AppendResult` (control batches and the last
  stable offset belong here).
- `partition`    — `Partition`: one partition's state, shared by the parts below.
- `validate`     — the produce-side batch checks and their Kafka error codes.
- `producer_state` — idempotent producers: sequence checks and their snapshots.
- `pool`         — `MemoryPool`: the byte budget of all buffers, backpressure.
- `buffer`       — `PartitionBuffer`: a partition's batches not yet committed.
- `wal`          — the write-ahead log, a package of its own rooms:
  `wal.writer` (`WalWriter`: the writer thread, group commit, durability
  modes), `wal.active_file` (`ActiveFile`: the open file, ``O_DIRECT``),
  `wal.ring` (`FileRing`: the ring of fixed-size files, spares, rolls,
  recycling), `wal.checkpoints` (`Checkpoints`: flushed offsets and
  the files they free), `wal.out_of_space` (waiting for disk space),
  `wal.recovery` (`recover_wal`, `WalRecovery`: the start-up scan) and
  `wal.files` (what they share: file names, `WalPosition`, `WalFile`).
- `failure`      — `LogFailure`: the failed state after the WAL failed.
- `flusher`      — `Flusher`: seal, upload, commit, cache, checkpoint the WAL.
- `sealing`      — cutting batches into segment files, re-encoding them per
  `compression.type` / ``KFS_COMPRESSION_CODEC`` (no I/O).
- `catalog_refresh` — `CatalogRefresher`: others' catalog commits (compaction,
  retention) and the one way a partition's catalog state changes.
- `topic_cache`  — `TopicCache`, `TopicInfo`: the topic registry, cached.
- `reader`       — `PartitionReader`: Fetch and ListOffsets of a partition;
  `ReadResult`, `OffsetLookup`.
- `segment_fetcher` — `SegmentFetcher`: committed segments through L1, L2 and
  range GETs, read-ahead.
- `range_reads`  — planning a range GET of a segment from its index (no I/O).
- `cache`        — `LruCache`, `CachedSegment`: the L1 segment and L2 index caches.
- `metrics`      — `LogMetrics`: counters and gauges for the server to export.

The settings all of them read are `kfs_core.config.Settings` (one declaration
of every ``KFS_*`` setting and the log's tuning).

The errors the server maps to Kafka codes (``kafka_error_code``) live in
`kfs_core.errors`: `OffsetOutOfRange`, `CorruptMessage`,
`UnknownTopicOrPartition`, `RequestTimedOut`, `MessageTooLarge`,
`InvalidRecord`, `LogStorageError`, `LogClosed`.

Why reads never go to the WAL.  The design drew the read path as memory →
WAL → L1 → L2 → object store (docs/architecture.md, "Read path").  Here it is
memory → L1 → L2 → store, and that is the same thing: the WAL is only the
durability copy of what the partition buffers hold, never a place data lives
on its own.

- A batch enters its buffer when its offsets are assigned, before its WAL
  frame is written; it becomes readable when the WAL acknowledges the frame
  (the high watermark passes it).  So every readable offset is in a buffer
  from the moment it is readable.
- A batch leaves its buffer only when the catalog commit that makes its
  segment live has landed, in the same loop step that adopts the new catalog
  state (`Flusher._flush_partition`).  So every readable offset is in a
  buffer or in the catalog, never in neither; the pool makes producers wait
  rather than evict anything uncommitted.
- The WAL is read only by `WalWriter.recover`, and `LogManager.start` puts
  everything the catalog lacks back into the buffers (`Appender.replay`) and
  flushes it before the first fetch is served.

The WAL keeps a batch longer than the buffer does (until a checkpoint past it
and the deletion of its file), never the other way round.  Only a deleted
topic's batches leave both, on purpose (`PartitionTable.forget_topic`); its
offsets are not readable any more.  A WAL tier would matter if buffers were
evicted before their commit (to bound memory without making producers
wait); then reads would need an index from offset to WAL position.
"""

from kfs_core.log.appender import AppendResult
from kfs_core.log.log_manager import LogManager, StartReport
from kfs_core.log.metrics import LogMetrics
from kfs_core.log.reader import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    OffsetLookup,
    ReadResult,
)
from kfs_core.log.topic_cache import TopicInfo

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendResult",
    "LogManager",
    "LogMetrics",
    "OffsetLookup",
    "ReadResult",
    "StartReport",
    "TopicInfo",
]
