"""`LogMetrics`: plain counters and gauges of the partition log, for the server to export.

`LogManager.metrics()` returns a snapshot: counters count since the manager
was created, gauges are filled in at snapshot time.  Nothing here imports a
metrics library; the server's Prometheus layer reads the fields (and may pass
a ``flush_observer`` to the manager to build a flush-duration histogram).

Store requests are counted by the log manager itself, for segment and index
objects only: the catalog counts its own (`PartitionCatalog.io_stats`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FlushObserver", "LogMetrics"]

#: Called after every flush of a partition: (seconds it took, bytes, segments).
FlushObserver = Callable[[float, int, int], None]


@dataclass(slots=True)
class LogMetrics:
    """Counters since creation, and gauges as of the snapshot."""

    # produce
    produce_requests: int = 0  # appends that succeeded
    produce_batches: int = 0
    produce_records: int = 0
    produce_bytes: int = 0
    produce_rejected: int = 0  # appends refused by validation
    produce_timeouts: int = 0
    # fetch
    fetch_requests: int = 0
    fetch_bytes: int = 0
    fetch_from_memory: int = 0  # fetches answered by a partition buffer
    fetch_from_cache: int = 0  # ... by an L1 segment
    fetch_from_store: int = 0  # ... by range GETs
    # flush
    flushes: int = 0  # partition flushes committed
    flush_segments: int = 0
    flush_bytes: int = 0  # segment bytes uploaded and committed
    flush_seconds_total: float = 0.0
    flush_seconds_max: float = 0.0
    flush_retries: int = 0  # failed uploads or commits that were retried
    flush_recompressed_batches: int = 0  # batches stored in another codec than produced
    catalog_commits: int = 0
    catalog_refreshes: int = 0
    wal_checkpoints: int = 0
    # caches
    l1_hits: int = 0
    l1_misses: int = 0
    l2_hits: int = 0
    l2_misses: int = 0
    readahead_segments: int = 0  # whole segments prefetched into L1
    # object store (segment and index objects)
    store_gets: int = 0
    store_get_bytes: int = 0
    store_puts: int = 0
    store_put_bytes: int = 0
    store_errors: int = 0
    # produce requests that waited for room in the pool, and their time waiting in all
    pool_waits: int = 0
    pool_wait_seconds: float = 0.0
    # gauges
    pool_used_bytes: int = 0
    pool_capacity_bytes: int = 0
    pool_waiters: int = 0
    buffered_bytes: int = 0
    l1_bytes: int = 0
    l1_segments: int = 0
    l2_bytes: int = 0
    l2_indexes: int = 0
    partitions: int = 0
