"""`TopicPurger`: the daemon's purges of deleted topics (`kfs_core.catalog.purge`).

A purge starts right after this daemon answered a DeleteTopics (`schedule`),
and a sweep (`run`) purges every topic still marked deleted when the log
starts and every ``PURGE_SWEEP_S`` after: one a ``kfs topics delete`` marked
while daemons ran, one whose purge a crash or a store outage interrupted.
One purge per topic runs at a time.

With several daemons, the purge lists the leases it took in this daemon's
heartbeats (`Fencing.hold_for_purge`).  A daemon that still holds one of the
partitions hands it over at its next tick, as to any newer holder, and takes
none of them while they are listed; a flush of its own is fenced, and its log
then sees the topic is deleted and forgets it, checkpointing its WAL past the
partition (`LogManager._on_fenced`), so nothing it acknowledged for the
deleted topic is ever replayed into a topic created later under the name.
Only once no other daemon lists them does the data go and the name become
free.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor
from typing import Any, Protocol

from kfs_core.catalog.purge import PurgeReport, empty_and_purge, fence_partitions
from kfs_core.catalog.state import PartitionState
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.errors import CatalogError, ObjectStoreError
from kfs_core.storage.base import ObjectStore
from kfs_core.threads import run_in

__all__ = ["PURGE_SWEEP_S", "Fencing", "TopicPurger"]

log = logging.getLogger(__name__)

#: How often the sweep looks for topics still marked deleted.
PURGE_SWEEP_S = 60.0

TopicPartition = tuple[str, int]


class Fencing(Protocol):
    """What a purge asks of the daemon's lease keeper (`kfs_core.cluster.leases.LeaseKeeper`)."""

    @property
    def node_id(self) -> int: ...

    async def hold_for_purge(
        self, epochs: Mapping[TopicPartition, int], *, timeout_s: float
    ) -> list[int]: ...

    def purge_refusal(self, state: PartitionState) -> str | None: ...

    def end_purge(self, tps: Iterable[TopicPartition]) -> None: ...


def _no_refusal(state: PartitionState) -> str | None:
    return None


class TopicPurger:
    """Runs purges of deleted topics on the log's I/O threads; one at a time per topic."""

    def __init__(
        self,
        store: ObjectStore,
        namespace: str,
        registry: TopicRegistry,
        executor: Executor,
        spawn: Callable[[Awaitable[Any]], object],
        *,
        node_id: int,
        fencing: Fencing | None,
        hand_over_timeout_s: float,
        wal_ends: Callable[[str], Mapping[int, int]],
    ) -> None:
        """``wal_ends(topic)``: per partition, one past the last offset a WAL holds for it."""
        self._store = store
        self._namespace = namespace
        self._registry = registry
        self._executor = executor
        self._spawn = spawn
        self._node_id = node_id
        self._fencing = fencing
        self._timeout_s = hand_over_timeout_s
        self._wal_ends = wal_ends
        self._incarnation = uuid.uuid4().hex
        self._refusal = fencing.purge_refusal if fencing is not None else _no_refusal
        self._running: dict[str, asyncio.Task[PurgeReport | None]] = {}

    def schedule(self, name: str) -> asyncio.Task[PurgeReport | None]:
        """Purge deleted topic ``name`` in the background (joins a purge of it under way)."""
        task = self._running.get(name)
        if task is None:
            task = asyncio.ensure_future(self._purge(name))
            self._running[name] = task
            task.add_done_callback(lambda _: self._running.pop(name, None))
            self._spawn(task)
        return task

    async def run(self, interval_s: float = PURGE_SWEEP_S) -> None:
        """The sweep: purge every topic marked deleted now, then every ``interval_s``."""
        while True:
            try:
                names = await run_in(self._executor, self._registry.deleted_topics)
            except (ObjectStoreError, CatalogError, OSError) as exc:
                log.warning("listing deleted topics to purge: %s", exc)
            else:
                for name in names:
                    self.schedule(name)
            await asyncio.sleep(interval_s)

    async def _purge(self, name: str) -> PurgeReport | None:
        try:
            record = await run_in(self._executor, self._registry.deleted_record, name)
            if record is None:
                return None
            epochs = await run_in(
                self._executor,
                lambda: fence_partitions(
                    self._store,
                    self._namespace,
                    record,
                    node_id=self._node_id,
                    incarnation=self._incarnation,
                    refusal=self._refusal,
                ),
            )
            held = {(name, p): epoch for p, epoch in epochs.items()}
            try:
                if self._fencing is not None and held:
                    late = await self._fencing.hold_for_purge(held, timeout_s=self._timeout_s)
                    if late:
                        log.warning(
                            "deleted topic %r: nodes %s still list its partitions after %.0f s; "
                            "their commits are fenced, purging",
                            name,
                            late,
                            self._timeout_s,
                        )
                # Read once the other holders stopped: nothing of the topic is written after.
                ends = await run_in(self._executor, self._wal_ends, name)
                return await run_in(
                    self._executor,
                    lambda: empty_and_purge(
                        self._store,
                        self._namespace,
                        record,
                        epochs,
                        ends,
                        registry=self._registry,
                    ),
                )
            finally:
                if self._fencing is not None:
                    self._fencing.end_purge(held)
        except (ObjectStoreError, CatalogError, OSError) as exc:
            log.warning("purging deleted topic %r: %s; the next sweep tries again", name, exc)
            return None
