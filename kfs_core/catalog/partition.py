"""`PartitionCatalog`: one partition's commit log in the object store.

Writing.  A commit is ``_log/{version:020d}.json`` created with
``put_if_absent``: exactly one writer wins each version.  A writer that loses
(`ObjectAlreadyExists`) reads the commits it missed, validates its actions
again against the newer state (a replace whose inputs went away fails with
`ReplaceConflict` and is never retried into success) and tries the next
version, with jittered exponential backoff, a bounded number of times
(`CatalogCommitConflict` after that).  When a store error leaves the outcome
of a put unknown, the writer reads the version back and recognises its own
commit by the ``commit_id`` every commit carries; if it cannot find out,
`CatalogCommitStateUnknown` (with ``commit_id``) says so.

Checkpoints.  The writer of version ``v`` with ``v % interval == 0``
writes ``_log/{v:020d}.checkpoint.json`` (live segments and unexpired
tombstones) and moves ``_log/_last_checkpoint`` forwards.  A failed checkpoint
never fails the commit: the next one, or the checkpoint job, catches up.
``interval`` is ``checkpoint_interval`` stretched by the size of the last
checkpoint (`checkpoint_stretch`): a partition of ten thousand segments has a
checkpoint of 3 MB, which every tenth commit would mean 300 KB written for
each commit of a kilobyte, so it comes every 80th.

Reading.  A cold load costs one pointer GET, then the checkpoint GET and a
batch of commit GETs issued together on a thread pool, as many as the
checkpoint's interval (the pointer gives its size; the commits after the
checkpoint, the first missing one ends the log): two round trips, and at most
82 requests after 170,000 commits as after ten.  The price of a stretched
interval is there: up to 80 GETs, on average half of them for commits not
written yet.  There is no listing unless the pointer is missing or far
behind.  The catalog caches its state; `refresh` reads only newer commits,
and a writer applies its own commits without reading anything.

Expiry.  `expire_commits` deletes commits and checkpoints below a checkpoint,
oldest first, after moving the pointer to it, so the log is readable at every
instant.  A reader whose newest commit is old re-reads the pointer before it
believes the log ends there, so a load that raced an expiry cannot mistake a
deleted commit for the end of the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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
    SetLogStartOffset,
    SetTopicConfig,
    decode_commit,
    encode_commit,
)
from kfs_core.catalog.config import ConfigValue, validate_configs, validate_topic_name
from kfs_core.catalog.state import (
    TOMBSTONE_RETENTION_MS,
    CheckpointPointer,
    PartitionState,
    StateBuilder,
    decode_checkpoint,
    decode_pointer,
    encode_pointer,
)
from kfs_core.clock import now_ms
from kfs_core.errors import (
    CatalogCommitConflict,
    CatalogCommitStateUnknown,
    CatalogError,
    CatalogVersionNotFound,
    CorruptCatalog,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStoreError,
    RemoveConflict,
)
from kfs_core.storage.base import ObjectStore
from kfs_core.threads import name_os_thread

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 10  # Delta Lake's checkpointInterval
#: Checkpoints larger than this are written less often: see `checkpoint_stretch`.
CHECKPOINT_STRETCH_BYTES = 256 * 1024
MAX_CHECKPOINT_STRETCH = 8
MAX_PROBE_BATCH = 64
#: `expire_commits` leaves commit files younger than this alone by default.
#: It must exceed `HEAD_RECHECK_MS` plus clock skew, so that a reader that
#: stops at a missing commit either sees a young head (nothing younger can
#: have been expired) or re-reads the pointer.
COMMIT_EXPIRY_MIN_AGE_MS = 3_600_000
#: A log whose newest commit is older than this is checked against the pointer
#: before a reader trusts that it ended.
HEAD_RECHECK_MS = 600_000
#: A writer whose cached state was last synchronised longer ago refreshes it
#: before committing (the daemon commits every flush, so it never does).
MAX_STATE_AGE_S = 30.0
IO_THREADS = 32


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a writer retries a commit it lost to another writer."""

    max_attempts: int = 64
    base_delay_s: float = 0.002
    max_delay_s: float = 0.5

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Full jitter: uniform in [0, min(max, base * 2**attempt)]."""
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2 ** min(attempt, 30)))


@dataclass(frozen=True)
class CommitResult:
    version: int
    commit_id: str
    attempts: int  # 1 when the first put won
    checkpointed: bool  # whether this commit also wrote a checkpoint


@dataclass(frozen=True)
class IoStats:
    """Store requests this catalog made (since creation or `reset_io_stats`)."""

    gets: int = 0  # including those that found nothing
    misses: int = 0  # GETs answered "not found"
    puts: int = 0
    lists: int = 0  # listing calls (each may be several pages)
    deletes: int = 0
    bytes_read: int = 0


@dataclass(frozen=True)
class ExpireResult:
    checkpoint_version: int  # the checkpoint kept as the log's new beginning (-1: none)
    deleted: int  # commit and checkpoint files deleted
    complete: bool  # False if younger files (min_age_ms) stopped the expiry early


# --- the shared I/O pool -----------------------------------------------------

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _reset_pool_after_fork() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()  # the parent's threads do not exist here


os.register_at_fork(after_in_child=_reset_pool_after_fork)


def _io_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=IO_THREADS, thread_name_prefix="kfs-catalog", initializer=name_os_thread
            )
        return _pool


def checkpoint_stretch(checkpoint_bytes: int) -> int:
    """By how much a partition whose last checkpoint had this size stretches its interval.

    1 up to `CHECKPOINT_STRETCH_BYTES`, then doubling with each doubling of
    the size, to at most `MAX_CHECKPOINT_STRETCH`: below the cap a checkpoint
    costs each commit at most ``CHECKPOINT_STRETCH_BYTES / checkpoint_interval``
    bytes, however long the partition.  Powers of two, so the versions a
    longer interval checkpoints are ones a shorter interval checkpoints too.
    """
    stretch = 1
    while (
        stretch < MAX_CHECKPOINT_STRETCH and checkpoint_bytes > CHECKPOINT_STRETCH_BYTES * stretch
    ):
        stretch *= 2
    return stretch


def default_writer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


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
        self._prefix = layout.log_prefix(namespace, topic, partition)
        self._pointer_key = self._prefix + layout.POINTER_NAME
        self._lock = threading.RLock()
        self._builder: StateBuilder | None = None
        self._synced_at = 0.0  # time.monotonic() of the last read or commit
        self._stats_lock = threading.Lock()
        self._stats: dict[str, int] = dict.fromkeys(IoStats.__dataclass_fields__, 0)
        self._rng = random.Random()

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
        return self._prefix + layout.commit_name(version)

    def checkpoint_key(self, version: int) -> str:
        return self._prefix + layout.checkpoint_name(version)

    @property
    def pointer_key(self) -> str:
        return self._pointer_key

    def object_key(self, key: str) -> str:
        """The store key of a segment or index key (which is relative to the namespace)."""
        return layout.join(self.namespace, key)

    # --- reading ---------------------------------------------------------------

    @property
    def state(self) -> PartitionState:
        """The cached state; loaded from the store on first use, never refreshed here."""
        with self._lock:
            return self._cached().snapshot()

    def load(self) -> PartitionState:
        """Forget the cache and load the newest state from the store (a cold load)."""
        with self._lock:
            self._builder = self._load_builder()
            self._synced()
            return self._builder.snapshot()

    def refresh(self) -> PartitionState:
        """Bring the cached state up to date, reading only commits after it."""
        with self._lock:
            if self._builder is None:
                return self.load()
            return self._refreshed().snapshot()

    def state_at(self, version: int) -> PartitionState:
        """The state as of ``version``: `CatalogVersionNotFound` if expired or not yet written."""
        if version < 0:
            raise CatalogVersionNotFound(f"no version {version}", version=version)
        with self._lock:
            if self._builder is not None and self._builder.version == version:
                return self._builder.snapshot()
        builder = self._base_for(version)
        start = builder.version + 1
        for chunk_start in range(start, version + 1, MAX_PROBE_BATCH):
            chunk_stop = min(chunk_start + MAX_PROBE_BATCH, version + 1)
            found = self._get_many([self.commit_key(v) for v in range(chunk_start, chunk_stop)])
            for v, data in zip(range(chunk_start, chunk_stop), found, strict=True):
                if data is None:
                    raise CatalogVersionNotFound(
                        f"{self.topic}/{self.partition} version {version} is not available: "
                        f"commit {v} does not exist (expired, or not written yet)",
                        version=version,
                    )
                key = self.commit_key(v)
                builder.apply(decode_commit(data, key, v), key)
        return builder.snapshot()

    def read_commit(self, version: int) -> Commit:
        """One commit file, parsed."""
        key = self.commit_key(version)
        data = self._get_or_none(key)
        if data is None:
            raise CatalogVersionNotFound(f"commit {key} does not exist", version=version)
        return decode_commit(data, key, version)

    def read_commits(self, start: int, stop: int) -> list[Commit]:
        """Commits ``start`` .. ``stop - 1`` (for audits and tests), read in parallel."""
        commits: list[Commit] = []
        for chunk in range(start, stop, MAX_PROBE_BATCH):
            versions = range(chunk, min(chunk + MAX_PROBE_BATCH, stop))
            found = self._get_many([self.commit_key(v) for v in versions])
            for v, data in zip(versions, found, strict=True):
                if data is None:
                    raise CatalogVersionNotFound(
                        f"commit {self.commit_key(v)} does not exist", version=v
                    )
                commits.append(decode_commit(data, self.commit_key(v), v))
        return commits

    def io_stats(self) -> IoStats:
        with self._stats_lock:
            return IoStats(**self._stats)

    def reset_io_stats(self) -> None:
        with self._stats_lock:
            self._stats = dict.fromkeys(self._stats, 0)

    # --- writing ---------------------------------------------------------------

    def commit(self, actions: Sequence[Action], *, operation: str = "commit") -> CommitResult:
        """Commit ``actions`` atomically as the next version, retrying lost races.

        Raises the typed validation errors (`SegmentOverlap`, `ReplaceConflict`,
        `RemoveConflict`, `LogStartOffsetRegression`, `InvalidCatalogAction`)
        as soon as the actions do not apply to the newest state,
        `CatalogCommitConflict` after ``retry.max_attempts`` lost races and
        `CatalogCommitStateUnknown` if a store error hides whether it landed.
        """
        actions = tuple(actions)
        if not actions:
            raise ValueError("a commit needs at least one action")
        commit_id = uuid.uuid4().hex
        with self._lock:
            builder, fresh = self._builder_for_writing()
            attempt = 0
            while True:
                attempt += 1
                try:
                    ops = builder.plan(actions, writer_checks=True)
                except CatalogError:
                    if fresh:
                        raise
                    # The cache may predate a change that makes the actions
                    # valid (a segment removed, one added): judge the newest state.
                    builder, fresh = self._refreshed(), True
                    ops = builder.plan(actions, writer_checks=True)
                version = builder.version + 1
                timestamp_ms = self._clock()
                key = self.commit_key(version)
                data = encode_commit(
                    Commit(
                        version=version,
                        commit_id=commit_id,
                        writer=self.writer,
                        timestamp_ms=timestamp_ms,
                        operation=operation,
                        actions=actions,
                    )
                )
                outcome = self._try_put_commit(key, data, version, commit_id)
                if outcome == "won":
                    builder.apply_ops(ops, version, timestamp_ms)
                    self._synced()
                    return self._after_commit(builder, version, commit_id, attempt)
                if outcome == "lost":
                    # Catch up with the winners; our own commit may be among
                    # them if an earlier attempt's outcome was unknown.
                    own: list[int] = []
                    builder = self._read_tail(builder, first_batch=2, own_commit=(commit_id, own))
                    self._builder, fresh = builder, True
                    self._synced()
                    if own:
                        return self._after_commit(builder, own[0], commit_id, attempt)
                if attempt >= self.retry.max_attempts:
                    raise CatalogCommitConflict(
                        f"{self.topic}/{self.partition}: lost the race for a commit "
                        f"{attempt} times in a row; giving up",
                        attempts=attempt,
                        commit_id=commit_id,
                    )
                time.sleep(self.retry.delay(attempt, self._rng))

    def add_segments(self, segments: Sequence[SegmentEntry]) -> CommitResult:
        """Make ``segments`` live in one commit (one flush cycle's worth)."""
        return self.commit([AddSegment(segment=s) for s in segments], operation="add_segments")

    def replace(
        self,
        inputs: Iterable[SegmentEntry | str],
        outputs: Sequence[SegmentEntry],
        *,
        removed_ms: int | None = None,
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
        return self.commit([action], operation="replace")

    def remove(
        self,
        segments: Iterable[SegmentEntry | str | int],
        *,
        removed_ms: int | None = None,
        log_start_offset: int | None = None,
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
        return self.commit(actions, operation="remove")

    def set_log_start_offset(self, offset: int) -> CommitResult:
        """Move the log start offset forwards (`LogStartOffsetRegression` otherwise)."""
        return self.commit([SetLogStartOffset(offset=offset)], operation="set_log_start_offset")

    def set_topic_config(self, configs: Mapping[str, ConfigValue]) -> CommitResult:
        """Record the topic config overrides in effect for this partition from now on."""
        action = SetTopicConfig(configs=validate_configs(configs))
        return self.commit([action], operation="topic_config")

    def checkpoint_every(self, checkpoint_bytes: int) -> int:
        """Commits between checkpoints after a checkpoint of ``checkpoint_bytes``."""
        return self.checkpoint_interval * checkpoint_stretch(checkpoint_bytes)

    def checkpoint(self) -> int:
        """Write a checkpoint of the newest state and move the pointer; its version (-1: empty)."""
        with self._lock:
            builder = self._refreshed()
            if builder.version < 0:
                return -1
            self._write_checkpoint(builder)
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
        entries: list[tuple[int, bool, str, float, int]] = []
        for info in self._list(self._prefix):
            parsed = layout.parse_log_name(info.key[len(self._prefix) :])
            if parsed is None:
                continue
            version, is_checkpoint = parsed
            if version > before_version:
                break
            entries.append((version, is_checkpoint, info.key, info.last_modified, info.size))
        checkpoints = [e for e in entries if e[1]]
        if not checkpoints:
            return ExpireResult(-1, 0, True)
        keep_version, _, keep_key, _, keep_size = checkpoints[-1]
        data = self._get_or_none(keep_key)
        if data is None:
            raise CatalogVersionNotFound(
                f"checkpoint {keep_key} disappeared during expiry", version=keep_version
            )
        decode_checkpoint(data, keep_key, keep_version)  # never cut the log down to a bad base
        pointer = self._read_pointer()
        if pointer is None or pointer.version < keep_version:
            self._put(self._pointer_key, encode_pointer(keep_version, keep_size))
        cutoff = time.time() - min_age_ms / 1000.0
        deleted = 0
        for version, _, key, last_modified, _ in entries:
            if version >= keep_version:
                break
            if last_modified > cutoff:
                return ExpireResult(keep_version, deleted, False)
            self._delete(key)
            deleted += 1
        return ExpireResult(keep_version, deleted, True)

    # --- internals: commit -----------------------------------------------------

    def _try_put_commit(self, key: str, data: bytes, version: int, commit_id: str) -> str:
        """ "won", "lost", or "retry" (nothing landed, try the same version again)."""
        try:
            self._put_if_absent(key, data)
        except ObjectAlreadyExists:
            return "lost"
        except (ObjectStoreError, OSError) as exc:
            log.warning("commit %s: outcome unknown (%s); reading it back", key, exc)
            return self._resolve_unknown(key, version, commit_id, exc)
        return "won"

    def _resolve_unknown(self, key: str, version: int, commit_id: str, cause: Exception) -> str:
        last: Exception = cause
        for attempt in range(3):
            try:
                data = self._get_or_none(key)
            except (ObjectStoreError, OSError) as exc:
                last = exc
                time.sleep(self.retry.delay(attempt + 1, self._rng))
                continue
            if data is None:
                return "retry"
            try:
                found = decode_commit(data, key, version)
            except CorruptCatalog:
                return "lost"  # someone's (unreadable) commit holds the version
            return "won" if found.commit_id == commit_id else "lost"
        raise CatalogCommitStateUnknown(
            f"commit {key}: the store failed ({last}) and reading the version back failed "
            f"too; commit id {commit_id} may or may not be in the log",
            key=key,
            version=version,
            commit_id=commit_id,
        ) from last

    def _after_commit(
        self, builder: StateBuilder, version: int, commit_id: str, attempts: int
    ) -> CommitResult:
        self._builder = builder
        checkpointed = False
        every = self.checkpoint_every(builder.checkpoint_bytes)
        if version > 0 and version % every == 0 and builder.version == version:
            try:
                self._write_checkpoint(builder)
                checkpointed = True
            except Exception:  # noqa: BLE001 - the commit stands; the next checkpoint catches up
                log.warning("checkpoint of %s at %d failed", self._prefix, version, exc_info=True)
        return CommitResult(version, commit_id, attempts, checkpointed)

    def _builder_for_writing(self) -> tuple[StateBuilder, bool]:
        """The state to commit on, and whether it was read from the store just now."""
        if self._builder is None:
            self._builder = self._load_builder()
            self._synced()
            return self._builder, True
        if time.monotonic() - self._synced_at > self.max_state_age_s:
            return self._refreshed(), True
        return self._builder, False

    def _refreshed(self) -> StateBuilder:
        builder = self._read_tail(self._cached(), first_batch=2)
        self._builder = builder
        self._synced()
        return builder

    def _ref(self, segment: SegmentEntry | str | int) -> SegmentRef:
        if isinstance(segment, SegmentEntry):
            return SegmentRef.of(segment)
        for builder in (self._cached(), None):
            if builder is None:  # not in the cache: perhaps added since
                builder = self._refreshed()
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

    def _write_checkpoint(self, builder: StateBuilder) -> None:
        data = builder.encode_checkpoint()
        builder.checkpoint_bytes = len(data)
        key = self.checkpoint_key(builder.version)
        # Someone may have checkpointed this version already: checkpoints are immutable.
        with contextlib.suppress(ObjectAlreadyExists):
            self._put_if_absent(key, data)
        pointer = self._read_pointer()
        if pointer is None or pointer.version < builder.version:
            self._put(self._pointer_key, encode_pointer(builder.version, len(data)))

    # --- internals: loading ------------------------------------------------------

    def _cached(self) -> StateBuilder:
        if self._builder is None:
            self._builder = self._load_builder()
            self._synced()
        return self._builder

    def _synced(self) -> None:
        self._synced_at = time.monotonic()

    def _empty(self) -> StateBuilder:
        return StateBuilder(
            self.topic, self.partition, tombstone_retention_ms=self.tombstone_retention_ms
        )

    def _from_checkpoint(self, data: bytes, version: int) -> StateBuilder:
        key = self.checkpoint_key(version)
        return StateBuilder.from_checkpoint(
            decode_checkpoint(data, key, version),
            self.topic,
            self.partition,
            key,
            tombstone_retention_ms=self.tombstone_retention_ms,
            data=data,
        )

    def _read_pointer(self) -> CheckpointPointer | None:
        data = self._get_or_none(self._pointer_key)
        if data is None:
            return None
        try:
            return decode_pointer(data, self._pointer_key)
        except CorruptCatalog as exc:
            # Only a hint: a listing finds the checkpoints without it.
            log.warning("ignoring unreadable checkpoint pointer: %s", exc)
            return None

    def _load_builder(self) -> StateBuilder:
        pointer = self._read_pointer()
        if pointer is not None:
            builder = self._load_from_pointer(pointer)
            if builder is not None:
                return builder
            log.warning(
                "%s names checkpoint %d, which is gone; listing the log",
                self._pointer_key,
                pointer.version,
            )
        return self._load_by_listing()

    def _load_from_pointer(self, pointer: CheckpointPointer) -> StateBuilder | None:
        """Checkpoint and first tail batch in one round trip; None if the checkpoint is gone."""
        base = pointer.version
        every = self.checkpoint_every(pointer.size)
        keys = [self.checkpoint_key(base)]
        keys += [self.commit_key(v) for v in range(base + 1, base + 1 + every)]
        found = self._get_many(keys)
        if found[0] is None:
            return None
        builder = self._from_checkpoint(found[0], base)
        if self._apply_contiguous(builder, found[1:], None) < every:
            return self._confirm_end(builder)
        return self._read_tail(builder, first_batch=every)

    def _load_by_listing(self) -> StateBuilder:
        """The newest checkpoint a listing shows (or none) plus the commits after it."""
        checkpoints: list[int] = []
        commits: list[int] = []
        for info in self._list(self._prefix):
            parsed = layout.parse_log_name(info.key[len(self._prefix) :])
            if parsed is not None:
                (checkpoints if parsed[1] else commits).append(parsed[0])
        builder = self._newest_checkpoint(checkpoints)
        if builder is None:
            builder = self._empty()
            if commits and min(commits) > 0:
                raise CorruptCatalog(
                    f"the log starts at commit {min(commits)} and there is no checkpoint",
                    object_name=self._prefix,
                    offset=0,
                )
        newer = [v for v in commits if v > builder.version]
        builder = self._read_tail(builder, first_batch=max(2, min(len(newer), MAX_PROBE_BATCH)))
        if newer and max(newer) > builder.version:
            raise CorruptCatalog(
                f"commit {builder.version + 1} is missing but commit {max(newer)} exists",
                object_name=self.commit_key(builder.version + 1),
                offset=0,
            )
        return builder

    def _newest_checkpoint(self, versions: Sequence[int]) -> StateBuilder | None:
        """A builder from the newest of these checkpoints that still exists."""
        for version in sorted(versions, reverse=True):
            data = self._get_or_none(self.checkpoint_key(version))
            if data is not None:  # else expired meanwhile: try an older one
                return self._from_checkpoint(data, version)
        return None

    def _read_tail(
        self,
        builder: StateBuilder,
        *,
        first_batch: int,
        own_commit: tuple[str, list[int]] | None = None,
    ) -> StateBuilder:
        """Apply every commit after ``builder``'s version, probing in growing parallel batches.

        Far behind (a stale pointer, a long-idle cache), one listing from the
        current version looks for a newer checkpoint to jump to rather than
        reading every commit.
        """
        batch = max(1, first_batch)
        probed = 0
        listed = own_commit is not None  # a racing writer wants every commit, in order
        while True:
            start = builder.version + 1
            found = self._get_many([self.commit_key(v) for v in range(start, start + batch)])
            applied = self._apply_contiguous(builder, found, own_commit)
            if applied < batch:
                return self._confirm_end(builder)
            probed += batch
            if not listed and probed >= 4 * self.checkpoint_every(builder.checkpoint_bytes):
                listed = True
                after = self.commit_key(builder.version)
                newer = [
                    parsed[0]
                    for info in self._list(self._prefix, after)
                    if (parsed := layout.parse_log_name(info.key[len(self._prefix) :])) is not None
                    and parsed[1]
                    and parsed[0] > builder.version
                ]
                jumped = self._newest_checkpoint(newer)
                if jumped is not None:
                    builder, batch = jumped, self.checkpoint_every(jumped.checkpoint_bytes)
                    continue
            batch = min(batch * 2, MAX_PROBE_BATCH)

    def _apply_contiguous(
        self,
        builder: StateBuilder,
        found: Sequence[bytes | None],
        own_commit: tuple[str, list[int]] | None,
    ) -> int:
        """Apply the found commits up to the first missing one; how many were applied."""
        applied = 0
        for data in found:
            if data is None:
                break
            version = builder.version + 1
            key = self.commit_key(version)
            commit = decode_commit(data, key, version)
            builder.apply(commit, key)
            if own_commit is not None and commit.commit_id == own_commit[0]:
                own_commit[1].append(version)
            applied += 1
        return applied

    def _confirm_end(self, builder: StateBuilder) -> StateBuilder:
        """The log seems to end at ``builder.version``; check the pointer if that is old news.

        An expiry deletes only old commits, after moving the pointer past
        them; if our newest commit is recent, nothing after it can have been
        expired.
        """
        if builder.version >= 0 and self._clock() - builder.timestamp_ms < HEAD_RECHECK_MS:
            return builder
        pointer = self._read_pointer()
        if pointer is None or pointer.version <= builder.version:
            return builder
        log.info(
            "%s: log seemed to end at %d but the pointer names %d; reloading",
            self._prefix,
            builder.version,
            pointer.version,
        )
        reloaded = self._load_from_pointer(pointer)
        return reloaded if reloaded is not None else builder

    def _base_for(self, version: int) -> StateBuilder:
        """A builder at the newest checkpoint at or before ``version`` (or empty)."""
        candidates: list[int] = []
        multiple = version - version % self.checkpoint_interval
        if multiple > 0:
            candidates.append(multiple)
        pointer = self._read_pointer()
        if pointer is not None and pointer.version <= version and pointer.version not in candidates:
            candidates.append(pointer.version)
        for candidate in sorted(candidates, reverse=True):
            data = self._get_or_none(self.checkpoint_key(candidate))
            if data is not None:
                return self._from_checkpoint(data, candidate)
        listed: list[int] = []
        stop = self.commit_key(version)
        for info in self._list(self._prefix):
            if info.key > stop:
                break
            parsed = layout.parse_log_name(info.key[len(self._prefix) :])
            if parsed is not None and parsed[1]:
                listed.append(parsed[0])
        return self._newest_checkpoint(listed) or self._empty()

    # --- internals: counted store access ------------------------------------------

    def _count(self, name: str, amount: int = 1) -> None:
        with self._stats_lock:
            self._stats[name] += amount

    def _get_or_none(self, key: str) -> bytes | None:
        self._count("gets")
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            self._count("misses")
            return None
        self._count("bytes_read", len(data))
        return data

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if len(keys) <= 1:
            return [self._get_or_none(k) for k in keys]
        futures: list[Future[bytes | None]] = [
            _io_pool().submit(self._get_or_none, k) for k in keys
        ]
        return [f.result() for f in futures]

    def _put(self, key: str, data: bytes) -> None:
        self._count("puts")
        self.store.put(key, data)

    def _put_if_absent(self, key: str, data: bytes) -> None:
        self._count("puts")
        self.store.put_if_absent(key, data)

    def _list(self, prefix: str, start_after: str | None = None) -> Iterable[Any]:
        self._count("lists")
        return self.store.list(prefix, start_after)

    def _delete(self, key: str) -> None:
        self._count("deletes")
        self.store.delete(key)


def _rebuild(
    store: ObjectStore, namespace: str, topic: str, partition: int, options: dict[str, Any]
) -> PartitionCatalog:
    return PartitionCatalog(store, namespace, topic, partition, **options)
