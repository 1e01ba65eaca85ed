"""`CatalogRefresher`: keeps each open partition's catalog state current.

Compaction replaces segments and retention removes them, in other processes.
The refresher reads the new catalog commits of every partition being read
each ``catalog_refresh_ms`` (idle ones each ``idle_refresh_ms``), and on
demand when a segment object has vanished under a fetch (`refresh`).

`CatalogRefresher.adopt` is the one way a partition's catalog state changes,
whoever brings the new state (a refresh, the flusher's commit, DeleteRecords):
a segment that leaves the catalog is dropped from both caches at once and
never served again.  The daemon is the only writer of adds for its
partitions, so nothing is ever missing from a state it committed itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor

from kfs_core.catalog.state import PartitionState
from kfs_core.errors import CatalogError, LogStorageError, ObjectStoreError
from kfs_core.log.metrics import LogMetrics
from kfs_core.log.partition import Partition
from kfs_core.log.segment_fetcher import SegmentFetcher
from kfs_core.threads import run_in

__all__ = ["CatalogRefresher"]

log = logging.getLogger(__name__)


class CatalogRefresher:
    """Reads the catalog commits others made to the open partitions, and adopts states."""

    def __init__(
        self,
        fetcher: SegmentFetcher,
        executor: Executor,
        metrics: LogMetrics,
        *,
        refresh_ms: int,
        idle_refresh_ms: int,
        concurrency: int,
    ) -> None:
        self._fetcher = fetcher
        self._executor = executor
        self._metrics = metrics
        self._period_s = refresh_ms / 1000
        self._idle_s = idle_refresh_ms / 1000
        self._slots = asyncio.Semaphore(concurrency)
        #: Called (by the log) when a refresh shows another daemon took the partition.
        self.on_fenced: Callable[[Partition], None] | None = None

    async def refresh(self, p: Partition) -> None:
        """Read the partition's new catalog commits now (`LogStorageError` if the store fails)."""
        async with self._slots:
            try:
                state = await run_in(self._executor, p.catalog.refresh)
            except (ObjectStoreError, CatalogError) as exc:
                self._metrics.store_errors += 1
                raise LogStorageError(f"refreshing the catalog of {p.name}: {exc}") from exc
        self._metrics.catalog_refreshes += 1
        p.refreshed_at = time.monotonic()
        self.adopt(p, state)

    def adopt(self, p: Partition, state: PartitionState) -> None:
        """Make ``state`` the one reads go by; segments that left it leave the caches too."""
        if state.version < p.state.version:
            return  # a slower refresh finishing after a newer commit
        # A flush's commit removes nothing, and this costs nothing then; a
        # compaction's or a retention sweep's costs a pass over the segments.
        gone = state.gone_since(p.state)
        if gone:
            self._fetcher.forget(gone)
            log.info("%s: %d segment(s) left the catalog: %s", p.name, len(gone), gone[0].key)
        p.state = state
        if p.epoch is not None and state.leader_epoch > p.epoch and self.on_fenced is not None:
            log.warning(
                "%s: another daemon took the partition (epoch %d; this one held %d)",
                p.name,
                state.leader_epoch,
                p.epoch,
            )
            self.on_fenced(p)

    async def run(self, partitions: Iterable[Partition]) -> None:
        """Refresh the partitions due, forever (``partitions`` is read anew every period)."""
        while True:
            await asyncio.sleep(self._period_s)
            now = time.monotonic()
            due = [
                p
                for p in partitions
                if now - p.last_read_at < self._idle_s or now - p.refreshed_at >= self._idle_s
            ]
            await asyncio.gather(*(self._refresh_quietly(p) for p in due))

    async def _refresh_quietly(self, p: Partition) -> None:
        try:
            await self.refresh(p)
        except LogStorageError as exc:
            log.warning("%s", exc)
