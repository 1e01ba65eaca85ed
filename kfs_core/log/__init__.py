"""The partition log of the ``kfs serve`` daemon: WAL, buffers, flush, read path, caches.

- `manager`     — `LogManager`: append, read, list offsets, topics, flush,
  recovery; `LogSettings`, `AppendResult`, `ReadResult`, `OffsetLookup`.
- `wal_manager` — `WalManager`: the write-ahead log (files, group commit,
  checkpoints, recovery).
- `validate`    — the produce-side batch checks and their Kafka error codes.
- `buffer`      — `PartitionBuffer`: a partition's batches not yet committed.
- `pool`        — `MemoryPool`: the byte budget of all buffers, backpressure.
- `reader`      — `SegmentFetcher`: committed segments through L1, L2 and range GETs,
  read-ahead.
- `segments`    — sealing buffers into segments, planning range reads.
- `cache`       — `LruCache`, `CachedSegment`: the L1 segment and L2 index caches.
- `metrics`     — `LogMetrics`: counters and gauges for the server to export.

The errors the server maps to Kafka codes (``kafka_error_code``) live in
`kfs_core.errors`: `OffsetOutOfRange`, `CorruptMessage`,
`UnknownTopicOrPartition`, `RequestTimedOut`, `MessageTooLarge`,
`InvalidRecord`, `LogStorageError`, `LogClosed`.
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
