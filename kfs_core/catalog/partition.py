"""`PartitionCatalog`: one partition's commit log in the object store.

The catalog is a façade over four parts, each in its own module:

- `kfs_core.catalog.commit` — the commit protocol: put-if-absent versions,
  retries of lost races, `ReplaceConflict`, `CatalogCommitConflict` versus
  `CatalogCommitStateUnknown`.  Every commit file is written there.
- `kfs_core.catalog.loader` — loading: the pointer, the checkpoint and the
  commits after it; the cached state and its refresh.
- `kfs_core.catalog.checkpoints` — checkpoint cadence and writing, and the
  expiry of commits below a checkpoint.
- `kfs_core.catalog.log_files` — the ``_log/`` keys, counted store requests
  (`IoStats`) and the shared I/O thread pool.

`PartitionCatalog` owns the lock that serialises them and keeps the public
methods: load, refresh, commit (and its forms: add, replace, remove,
log start offset, topic config, lease, leader epoch start), checkpoint, snapshots by version,
expiry.  The commit forms a daemon uses for its partitions take its
``leader_epoch``, which fences them once another daemon's lease is newer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kfs_core.catalog import layout
from kfs_core.catalog.actions import (
    Action,
    AddSegment,
    Commit,
    RemoveSegment,
    ReplaceSegments,
    SegmentEntry,
    SegmentRef,
    SetLeaderEpochStart,
    SetLogStartOffset,
    SetTopicConfig,
    TakeLease,
)
from kfs_core.catalog.checkpoints import (
    COMMIT_EXPIRY_MIN_AGE_MS,
    DEFAULT_CHECKPOINT_INTERVAL,
    Checkpoints,
    ExpireResult,
)
from kfs_core.catalog.commit import CommitProtocol, CommitResult, RetryPolicy, default_writer_id
from kfs_core.catalog.config import ConfigValue, validate_configs, validate_topic_name
from kfs_core.catalog.loader import MAX_STATE_AGE_S, CachedState, LogLoader
from kfs_core.catalog.log_files import IoStats, LogFiles
from kfs_core.catalog.state import TOMBSTONE_RETENTION_MS, PartitionState
from kfs_core.clock import now_ms
from kfs_core.errors import CatalogVersionNotFound, LeaseStartMoved, RemoveConflict
from kfs_core.storage.base import ObjectStore

__all__ = ["CommitResult", "ExpireResult", "IoStats", "PartitionCatalog", "RetryPolicy"]


class PartitionCatalog:
    """The commit log of one partition: load, refresh, commit, checkpoint, expire.

    Thread-safe; one instance per partition per process is the intended use
    (it caches the state).  Several instances, in one process or many, may
    write the same partition concurrently: put-if-absent decides every race.
    """

    def __init__(
        self,
        store: ObjectStore,
        namespace: str,
        topic: str,
        partition: int,
        *,
        checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL,
        tombstone_retention_ms: int = TOMBSTONE_RETENTION_MS,
        writer: str | None = None,
        clock: Callable[[], int] | None = None,
        retry: RetryPolicy | None = None,
        max_state_age_s: float = MAX_STATE_AGE_S,
    ) -> None:
        validate_topic_name(topic)
        if partition < 0:
            raise ValueError(f"partition must be >= 0, got {partition}")
        if checkpoint_interval < 1:
            raise ValueError(f"checkpoint_interval must be >= 1, got {checkpoint_interval}")
        self.store = store
        self.namespace = namespace
        self.topic = topic
        self.partition = partition
        self.checkpoint_interval = checkpoint_interval
        self.tombstone_retention_ms = tombstone_retention_ms
        self.writer = writer or default_writer_id()
        self.retry = retry or RetryPolicy()
        self.max_state_age_s = max_state_age_s
        self._clock = clock or now_ms
        self._lock = threading.RLock()
        self._files = LogFiles(store, namespace, topic, partition)
        self._checkpoints = Checkpoints(self._files, checkpoint_interval)
        self._loader = LogLoader(
            self._files,
            self._checkpoints,
            topic,
            partition,
            tombstone_retention_ms=tombstone_retention_ms,
            clock=self._clock,
        )
        self._cache = CachedState(self._loader, max_state_age_s)
        self._committer = CommitProtocol(
            self._files,
            self._loader,
            self._cache,
            self._checkpoints,
            writer=self.writer,
            retry=self.retry,
            clock=self._clock,
        )

    def __repr__(self) -> str:
        return f"PartitionCatalog({self.store!r}, {self.namespace!r}, {self.topic!r}, {self.partition})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Crosses process boundaries (Spark, multiprocessing) without its cache.
        return (
            _rebuild,
            (
                self.store,
                self.namespace,
                self.topic,
                self.partition,
                {
                    "checkpoint_interval": self.checkpoint_interval,
                    "tombstone_retention_ms": self.tombstone_retention_ms,
                    "writer": self.writer,
                    "retry": self.retry,
                    "max_state_age_s": self.max_state_age_s,
                },
            ),
        )

    # --- keys ------------------------------------------------------------------

    def commit_key(self, version: int) -> str:
        return self._files.commit_key(version)

    def checkpoint_key(self, version: int) -> str:
        return self._files.checkpoint_key(version)

    @property
    def pointer_key(self) -> str:
        return self._files.pointer_key

    def object_key(self, key: str) -> str:
        """The store key of a segment or index key (which is relative to the namespace)."""
        return layout.join(self.namespace, key)

    # --- reading ---------------------------------------------------------------

    @property
    def state(self) -> PartitionState:
        """The cached state; loaded from the store on first use, never refreshed here."""
        with self._lock:
            return self._cache.get().snapshot()

    def load(self) -> PartitionState:
        """Forget the cache and load the newest state from the store (a cold load)."""
        with self._lock:
            return self._cache.reload().snapshot()

    def refresh(self) -> PartitionState:
        """Bring the cached state up to date, reading only commits after it."""
        with self._lock:
            if self._cache.builder is None:
                return self.load()
            return self._cache.refreshed().snapshot()

    def state_at(self, version: int) -> PartitionState:
        """The state as of ``version``: `CatalogVersionNotFound` if expired or not yet written."""
        if version < 0:
            raise CatalogVersionNotFound(f"no version {version}", version=version)
        with self._lock:
            cached = self._cache.builder
            if cached is not None and cached.version == version:
                return cached.snapshot()
        return self._loader.state_at(version).snapshot()

    def read_commit(self, version: int) -> Commit:
        """One commit file, parsed."""
        return self._loader.read_commit(version)

    def read_commits(self, start: int, stop: int) -> list[Commit]:
        """Commits ``start`` .. ``stop - 1`` (for audits and tests), read in parallel."""
        return self._loader.read_commits(start, stop)

    def io_stats(self) -> IoStats:
        return self._files.stats()

    def reset_io_stats(self) -> None:
        self._files.reset_stats()

    # --- writing ---------------------------------------------------------------

    def commit(
        self,
        actions: Sequence[Action],
        *,
        operation: str = "commit",
        leader_epoch: int | None = None,
    ) -> CommitResult:
        """Commit ``actions`` atomically as the next version, retrying lost races.

        Raises the typed validation errors (`SegmentOverlap`, `ReplaceConflict`,
        `RemoveConflict`, `LogStartOffsetRegression`, `InvalidCatalogAction`,
        `LeaseConflict`) as soon as the actions do not apply to the newest
        state, `CatalogCommitConflict` after ``retry.max_attempts`` lost races
        and `CatalogCommitStateUnknown` if a store error hides whether it
        landed.  With ``leader_epoch`` (a daemon's commit for a partition it
        leads), `FencedLeaderEpoch` unless the newest lease has that epoch.
        """
        with self._lock:
            return self._committer.commit(actions, operation, leader_epoch=leader_epoch)

    def add_segments(
        self,
        segments: Sequence[SegmentEntry],
        *,
        leader_epoch: int | None = None,
        epoch_start: int | None = None,
    ) -> CommitResult:
        """Make ``segments`` live in one commit (one flush cycle's worth).

        ``epoch_start`` moves the start of ``leader_epoch`` in the same
        commit, before them (`set_leader_epoch_start`).
        """
        actions: list[Action] = []
        if epoch_start is not None:
            if leader_epoch is None:
                raise ValueError("epoch_start needs the leader_epoch it starts")
            actions.append(SetLeaderEpochStart(epoch=leader_epoch, start_offset=epoch_start))
        actions.extend(AddSegment(segment=s) for s in segments)
        return self.commit(actions, operation="add_segments", leader_epoch=leader_epoch)

    def replace(
        self,
        inputs: Iterable[SegmentEntry | str],
        outputs: Sequence[SegmentEntry],
        *,
        removed_ms: int | None = None,
        leader_epoch: int | None = None,
    ) -> CommitResult:
        """Swap live ``inputs`` (entries or keys) for ``outputs`` atomically: compaction.

        `ReplaceConflict` if any input is not live when the commit lands.
        """
        with self._lock:
            refs = tuple(self._ref(s) for s in inputs)
        action = ReplaceSegments(
            inputs=refs,
            outputs=tuple(outputs),
            removed_ms=self._clock() if removed_ms is None else removed_ms,
        )
        return self.commit([action], operation="replace", leader_epoch=leader_epoch)

    def remove(
        self,
        segments: Iterable[SegmentEntry | str | int],
        *,
        removed_ms: int | None = None,
        log_start_offset: int | None = None,
        leader_epoch: int | None = None,
    ) -> CommitResult:
        """Turn live segments (entries, keys or base offsets) into tombstones.

        With ``log_start_offset``, the same commit moves the log start offset
        (what retention does).  `RemoveConflict` if a segment is not live.
        """
        when = self._clock() if removed_ms is None else removed_ms
        actions: list[Action] = []
        with self._lock:
            for segment in segments:
                ref = self._ref(segment)
                actions.append(
                    RemoveSegment(key=ref.key, base_offset=ref.base_offset, removed_ms=when)
                )
        if log_start_offset is not None:
            actions.append(SetLogStartOffset(offset=log_start_offset))
        return self.commit(actions, operation="remove", leader_epoch=leader_epoch)

    def set_log_start_offset(self, offset: int, *, leader_epoch: int | None = None) -> CommitResult:
        """Move the log start offset forwards (`LogStartOffsetRegression` otherwise)."""
        return self.commit(
            [SetLogStartOffset(offset=offset)],
            operation="set_log_start_offset",
            leader_epoch=leader_epoch,
        )

    def set_topic_config(self, configs: Mapping[str, ConfigValue]) -> CommitResult:
        """Record the topic config overrides in effect for this partition from now on."""
        action = SetTopicConfig(configs=validate_configs(configs))
        return self.commit([action], operation="topic_config")

    def take_lease(self, node_id: int, incarnation: str) -> PartitionState:
        """Lead the partition: commit a lease with the newest lease's epoch plus one.

        Reads the newest state first, so the epoch is taken from the store,
        not the cache; the lease records the log's end there as the epoch's
        start, and is taken again at the new end if a commit landed first
        (`LeaseStartMoved`).  Returns the state with the new lease.
        `LeaseConflict` if another writer took that epoch first (the caller
        decides whether to try again); never retried into success.
        """
        with self._lock:
            attempt = 0
            while True:
                attempt += 1
                state = self._cache.refreshed()
                action = TakeLease(
                    epoch=state.leader_epoch + 1,
                    node_id=node_id,
                    incarnation=incarnation,
                    start_offset=state.high_watermark,
                )
                try:
                    self._committer.commit([action], "lease")
                except LeaseStartMoved:
                    if attempt >= self.retry.max_attempts:
                        raise
                    continue
                return self._cache.get().snapshot()

    def set_leader_epoch_start(self, epoch: int, start_offset: int) -> CommitResult:
        """Move the start of this daemon's epoch ``epoch`` (the newest lease) to ``start_offset``.

        For a holder that replayed, above the catalog's end, records earlier
        epochs acknowledged: it commits this before them, so the history says
        where its own epoch begins.  Fenced by ``epoch`` like the holder's other commits.
        """
        action = SetLeaderEpochStart(epoch=epoch, start_offset=start_offset)
        return self.commit([action], operation="leader_epoch_start", leader_epoch=epoch)

    def checkpoint_every(self, checkpoint_bytes: int) -> int:
        """Commits between checkpoints after a checkpoint of ``checkpoint_bytes``."""
        return self._checkpoints.every(checkpoint_bytes)

    def checkpoint(self) -> int:
        """Write a checkpoint of the newest state and move the pointer; its version (-1: empty)."""
        with self._lock:
            builder = self._cache.refreshed()
            if builder.version < 0:
                return -1
            self._checkpoints.write(builder)
            return builder.version

    def expire_commits(
        self, before_version: int, *, min_age_ms: int = COMMIT_EXPIRY_MIN_AGE_MS
    ) -> ExpireResult:
        """Delete commit and checkpoint files below the newest checkpoint at or before the cut.

        That checkpoint is kept, verified readable and named by the pointer
        before anything is deleted; files go oldest first, so every instant
        leaves a readable log.  Files younger than ``min_age_ms`` stop the
        expiry (a writer holding an older state could otherwise re-create an
        expired version); pass 0 only when no writer can be running.
        """
        return self._checkpoints.expire(before_version, min_age_ms)

    # --- internals -----------------------------------------------------------------

    def _ref(self, segment: SegmentEntry | str | int) -> SegmentRef:
        if isinstance(segment, SegmentEntry):
            return SegmentRef.of(segment)
        for cached in (self._cache.get(), None):
            # None: no cached state, or it lacks the segment: perhaps added since
            builder = self._cache.refreshed() if cached is None else cached
            live = (
                builder.live_segment(segment)
                if isinstance(segment, str)
                else builder.segment_at_base(segment)
            )
            if live is not None:
                return SegmentRef.of(live)
        raise RemoveConflict(
            f"no live segment {segment!r} in {self.topic}/{self.partition}", keys=[segment]
        )


def _rebuild(
    store: ObjectStore, namespace: str, topic: str, partition: int, options: dict[str, Any]
) -> PartitionCatalog:
    return PartitionCatalog(store, namespace, topic, partition, **options)
