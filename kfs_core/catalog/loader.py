"""Reading a partition's log: `LogLoader` builds its state, `CachedState` keeps it.

A cold load costs one pointer GET, then the checkpoint GET and a batch of
commit GETs issued together on a thread pool, as many as the checkpoint's
interval (the pointer gives its size; the commits after the checkpoint, the
first missing one ends the log): two round trips, and at most 82 requests
after 170,000 commits as after ten.  The price of a stretched interval
(`kfs_core.catalog.checkpoints.checkpoint_stretch`) is there: up to 80 GETs,
on average half of them for commits not written yet.  There is no listing
unless the pointer is missing or far behind.  A catalog caches its state
(`CachedState`); a refresh reads only newer commits, and a writer applies its
own commits without reading anything.

A reader whose newest commit is old re-reads the pointer before it believes
the log ends there (`LogLoader._confirm_end`), so a load that raced an expiry
cannot mistake a deleted commit for the end of the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from kfs_core.catalog.actions import Commit, decode_commit
from kfs_core.catalog.checkpoints import Checkpoints
from kfs_core.catalog.log_files import LogFiles
from kfs_core.catalog.state import CheckpointPointer, StateBuilder, decode_checkpoint
from kfs_core.errors import CatalogVersionNotFound, CorruptCatalog

log = logging.getLogger(__name__)

MAX_PROBE_BATCH = 64
#: A log whose newest commit is older than this is checked against the pointer
#: before a reader trusts that it ended.
HEAD_RECHECK_MS = 600_000
#: A writer whose cached state was last synchronised longer ago refreshes it
#: before committing (the daemon commits every flush, so it never does).
MAX_STATE_AGE_S = 30.0

#: A racing writer's own commit id, and the versions where the tail found it.
OwnCommit = tuple[str, list[int]]


class LogLoader:
    """Builds a partition's state from its checkpoint and the commits after it."""

    def __init__(
        self,
        files: LogFiles,
        checkpoints: Checkpoints,
        topic: str,
        partition: int,
        *,
        tombstone_retention_ms: int,
        clock: Callable[[], int],
    ) -> None:
        self.files = files
        self.checkpoints = checkpoints
        self.topic = topic
        self.partition = partition
        self.tombstone_retention_ms = tombstone_retention_ms
        self._clock = clock

    # --- the newest state ------------------------------------------------------------

    def load(self) -> StateBuilder:
        """The newest state, read cold: through the pointer, or by listing without it."""
        pointer = self.files.read_pointer()
        if pointer is not None:
            builder = self._load_from_pointer(pointer)
            if builder is not None:
                return builder
            log.warning(
                "%s names checkpoint %d, which is gone; listing the log",
                self.files.pointer_key,
                pointer.version,
            )
        return self._load_by_listing()

    def read_tail(
        self,
        builder: StateBuilder,
        *,
        first_batch: int,
        own_commit: OwnCommit | None = None,
    ) -> StateBuilder:
        """Apply every commit after ``builder``'s version, probing in growing parallel batches.

        Far behind (a stale pointer, a long-idle cache), one listing from the
        current version looks for a newer checkpoint to jump to rather than
        reading every commit.
        """
        files = self.files
        batch = max(1, first_batch)
        probed = 0
        listed = own_commit is not None  # a racing writer wants every commit, in order
        while True:
            start = builder.version + 1
            found = files.get_many([files.commit_key(v) for v in range(start, start + batch)])
            applied = self._apply_contiguous(builder, found, own_commit)
            if applied < batch:
                return self._confirm_end(builder)
            probed += batch
            if not listed and probed >= 4 * self.checkpoints.every(builder.checkpoint_bytes):
                listed = True
                after = files.commit_key(builder.version)
                newer = [
                    parsed[0]
                    for info in files.list(after)
                    if (parsed := files.parse(info.key)) is not None
                    and parsed[1]
                    and parsed[0] > builder.version
                ]
                jumped = self._newest_checkpoint(newer)
                if jumped is not None:
                    builder, batch = jumped, self.checkpoints.every(jumped.checkpoint_bytes)
                    continue
            batch = min(batch * 2, MAX_PROBE_BATCH)

    # --- older versions and single commits ---------------------------------------------

    def state_at(self, version: int) -> StateBuilder:
        """The state as of ``version``: `CatalogVersionNotFound` if expired or not yet written."""
        files = self.files
        builder = self._base_for(version)
        start = builder.version + 1
        for chunk_start in range(start, version + 1, MAX_PROBE_BATCH):
            chunk_stop = min(chunk_start + MAX_PROBE_BATCH, version + 1)
            found = files.get_many([files.commit_key(v) for v in range(chunk_start, chunk_stop)])
            for v, data in zip(range(chunk_start, chunk_stop), found, strict=True):
                if data is None:
                    raise CatalogVersionNotFound(
                        f"{self.topic}/{self.partition} version {version} is not available: "
                        f"commit {v} does not exist (expired, or not written yet)",
                        version=version,
                    )
                key = files.commit_key(v)
                builder.apply(decode_commit(data, key, v), key)
        return builder

    def read_commit(self, version: int) -> Commit:
        """One commit file, parsed."""
        key = self.files.commit_key(version)
        data = self.files.get_or_none(key)
        if data is None:
            raise CatalogVersionNotFound(f"commit {key} does not exist", version=version)
        return decode_commit(data, key, version)

    def read_commits(self, start: int, stop: int) -> list[Commit]:
        """Commits ``start`` .. ``stop - 1``, read in parallel."""
        files = self.files
        commits: list[Commit] = []
        for chunk in range(start, stop, MAX_PROBE_BATCH):
            versions = range(chunk, min(chunk + MAX_PROBE_BATCH, stop))
            found = files.get_many([files.commit_key(v) for v in versions])
            for v, data in zip(versions, found, strict=True):
                if data is None:
                    raise CatalogVersionNotFound(
                        f"commit {files.commit_key(v)} does not exist", version=v
                    )
                commits.append(decode_commit(data, files.commit_key(v), v))
        return commits

    # --- internals -------------------------------------------------------------------

    def _empty(self) -> StateBuilder:
        return StateBuilder(
            self.topic, self.partition, tombstone_retention_ms=self.tombstone_retention_ms
        )

    def _from_checkpoint(self, data: bytes, version: int) -> StateBuilder:
        key = self.files.checkpoint_key(version)
        return StateBuilder.from_checkpoint(
            decode_checkpoint(data, key, version),
            self.topic,
            self.partition,
            key,
            tombstone_retention_ms=self.tombstone_retention_ms,
            data=data,
        )

    def _load_from_pointer(self, pointer: CheckpointPointer) -> StateBuilder | None:
        """Checkpoint and first tail batch in one round trip; None if the checkpoint is gone."""
        files = self.files
        base = pointer.version
        every = self.checkpoints.every(pointer.size)
        keys = [files.checkpoint_key(base)]
        keys += [files.commit_key(v) for v in range(base + 1, base + 1 + every)]
        found = files.get_many(keys)
        if found[0] is None:
            return None
        builder = self._from_checkpoint(found[0], base)
        if self._apply_contiguous(builder, found[1:], None) < every:
            return self._confirm_end(builder)
        return self.read_tail(builder, first_batch=every)

    def _load_by_listing(self) -> StateBuilder:
        """The newest checkpoint a listing shows (or none) plus the commits after it."""
        checkpoints: list[int] = []
        commits: list[int] = []
        for info in self.files.list():
            parsed = self.files.parse(info.key)
            if parsed is not None:
                (checkpoints if parsed[1] else commits).append(parsed[0])
        builder = self._newest_checkpoint(checkpoints)
        if builder is None:
            builder = self._empty()
            if commits and min(commits) > 0:
                raise CorruptCatalog(
                    f"the log starts at commit {min(commits)} and there is no checkpoint",
                    object_name=self.files.prefix,
                    offset=0,
                )
        newer = [v for v in commits if v > builder.version]
        builder = self.read_tail(builder, first_batch=max(2, min(len(newer), MAX_PROBE_BATCH)))
        if newer and max(newer) > builder.version:
            raise CorruptCatalog(
                f"commit {builder.version + 1} is missing but commit {max(newer)} exists",
                object_name=self.files.commit_key(builder.version + 1),
                offset=0,
            )
        return builder

    def _newest_checkpoint(self, versions: Sequence[int]) -> StateBuilder | None:
        """A builder from the newest of these checkpoints that still exists."""
        for version in sorted(versions, reverse=True):
            data = self.files.get_or_none(self.files.checkpoint_key(version))
            if data is not None:  # else expired meanwhile: try an older one
                return self._from_checkpoint(data, version)
        return None

    def _apply_contiguous(
        self,
        builder: StateBuilder,
        found: Sequence[bytes | None],
        own_commit: OwnCommit | None,
    ) -> int:
        """Apply the found commits up to the first missing one; how many were applied."""
        applied = 0
        for data in found:
            if data is None:
                break
            version = builder.version + 1
            key = self.files.commit_key(version)
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
        pointer = self.files.read_pointer()
        if pointer is None or pointer.version <= builder.version:
            return builder
        log.info(
            "%s: log seemed to end at %d but the pointer names %d; reloading",
            self.files.prefix,
            builder.version,
            pointer.version,
        )
        reloaded = self._load_from_pointer(pointer)
        return reloaded if reloaded is not None else builder

    def _base_for(self, version: int) -> StateBuilder:
        """A builder at the newest checkpoint at or before ``version`` (or empty)."""
        files = self.files
        candidates: list[int] = []
        multiple = version - version % self.checkpoints.interval
        if multiple > 0:
            candidates.append(multiple)
        pointer = files.read_pointer()
        if pointer is not None and pointer.version <= version and pointer.version not in candidates:
            candidates.append(pointer.version)
        for candidate in sorted(candidates, reverse=True):
            data = files.get_or_none(files.checkpoint_key(candidate))
            if data is not None:
                return self._from_checkpoint(data, candidate)
        listed: list[int] = []
        stop = files.commit_key(version)
        for info in files.list():
            if info.key > stop:
                break
            parsed = files.parse(info.key)
            if parsed is not None and parsed[1]:
                listed.append(parsed[0])
        return self._newest_checkpoint(listed) or self._empty()


class CachedState:
    """The state a catalog keeps between calls, and when it last matched the store.

    Not thread-safe on its own: `PartitionCatalog` holds its lock around every use.
    """

    def __init__(self, loader: LogLoader, max_age_s: float = MAX_STATE_AGE_S) -> None:
        self.loader = loader
        self.max_age_s = max_age_s
        self._builder: StateBuilder | None = None
        self._synced_at = 0.0  # time.monotonic() of the last read or commit

    @property
    def builder(self) -> StateBuilder | None:
        """The cached state, None before the first load."""
        return self._builder

    def synced(self, builder: StateBuilder) -> None:
        """``builder`` is the newest state the store holds, as of now."""
        self._builder = builder
        self._synced_at = time.monotonic()

    def get(self) -> StateBuilder:
        """The cached state, loaded on first use."""
        if self._builder is None:
            return self.reload()
        return self._builder

    def reload(self) -> StateBuilder:
        """Forget the cache and load the newest state (a cold load)."""
        builder = self.loader.load()
        self.synced(builder)
        return builder

    def refreshed(self) -> StateBuilder:
        """The cache brought up to date, reading only commits after it."""
        builder = self.loader.read_tail(self.get(), first_batch=2)
        self.synced(builder)
        return builder

    def for_writing(self) -> tuple[StateBuilder, bool]:
        """The state to commit on, and whether it was read from the store just now."""
        if self._builder is None:
            return self.reload(), True
        if time.monotonic() - self._synced_at > self.max_age_s:
            return self.refreshed(), True
        return self._builder, False
