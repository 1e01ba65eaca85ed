"""The partition log of the ``kfs serve`` daemon: WAL, buffers, flush, read path, caches.

- `manager`     — `LogManager`: append, read, list offsets, topics (and
  `forget_topic` for deleted ones), flush, recovery, the failed state after a
  WAL failure; `LogSettings`, `AppendResult`, `ReadResult`, `OffsetLookup`.
- `wal_manager` — `WalManager`: the write-ahead log (files, group commit,
  checkpoints, recovery).
- `validate`    — the produce-side batch checks and their Kafka error codes.
- `buffer`      — `PartitionBuffer`: a partition's batches not yet committed.
- `pool`        — `MemoryPool`: the byte budget of all buffers, backpressure.
- `reader`      — `SegmentFetcher`: committed segments through L1, L2 and range GETs,
  read-ahead.
- `segments`    — sealing buffers into segments (re-encoding batches per
  `compression.type` / ``KFS_COMPRESSION_CODEC``), planning range reads.
- `cache`       — `LruCache`, `CachedSegment`: the L1 segment and L2 index caches.
- `metrics`     — `LogMetrics`: counters and gauges for the server to export.

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
  state (`LogManager._flush_partition`).  So every readable offset is in a
  buffer or in the catalog, never in neither; the pool makes producers wait
  rather than evict anything uncommitted.
- The WAL is read only by `WalManager.recover`, and `LogManager.start` puts
  everything the catalog lacks back into the buffers (and flushes it) before
  the first fetch is served.

The WAL keeps a batch longer than the buffer does (until a checkpoint past it
and the deletion of its file), never the other way round.  Only a deleted
topic's batches leave both, on purpose (`LogManager.forget_topic`); its
offsets are not readable any more.  A WAL tier would matter if buffers were
evicted before their commit (to bound memory without making producers
wait); then reads would need an index from offset to WAL position.
"""

from kfs_core.log.manager import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AppendResult,
    LogManager,
    LogSettings,
    OffsetLookup,
    ReadResult,
    StartReport,
    TopicInfo,
)
from kfs_core.log.metrics import LogMetrics

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "AppendResult",
    "LogManager",
    "LogMetrics",
    "LogSettings",
    "OffsetLookup",
    "ReadResult",
    "StartReport",
    "TopicInfo",
]
