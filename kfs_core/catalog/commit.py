"""The commit protocol: how a writer gets its actions into a partition's log, exactly once.

A commit is ``_log/{version:020d}.json`` created with ``put_if_absent``:
exactly one writer wins each version.  A writer that loses
(`ObjectAlreadyExists`) reads the commits it missed, validates its actions
again against the newer state (a replace whose inputs went away fails with
`ReplaceConflict` and is never retried into success) and tries the next
version, with jittered exponential backoff (`RetryPolicy`), a bounded number
of times (`CatalogCommitConflict` after that).  When a store error leaves the
outcome of a put unknown, the writer reads the version back and recognises
its own commit by the ``commit_id`` every commit carries; if it cannot find
out, `CatalogCommitStateUnknown` (with ``commit_id``) says so.

Fencing.  A daemon's own commits carry its leader epoch (``leader_epoch``):
such a commit is refused with `FencedLeaderEpoch` unless the newest state's
lease has that epoch, checked on every attempt against the state the attempt
builds on.  A lease commit after the one the writer knows takes a version
the writer's put then loses, so the writer reads it before its next attempt
and is fenced: a deposed owner never lands a commit after its successor's
lease.  Commits without an epoch (maintenance jobs) are never fenced.

Every put of a commit file goes through `CommitProtocol.commit`; the winner
of a checkpoint version also writes the checkpoint (`Checkpoints`), and a
failed checkpoint never fails the commit.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from kfs_core.catalog.actions import Action, Commit, decode_commit, encode_commit
from kfs_core.catalog.checkpoints import Checkpoints
from kfs_core.catalog.loader import CachedState, LogLoader
from kfs_core.catalog.log_files import LogFiles
from kfs_core.catalog.state import StateBuilder
from kfs_core.errors import (
    CatalogCommitConflict,
    CatalogCommitStateUnknown,
    CatalogError,
    CorruptCatalog,
    FencedLeaderEpoch,
    ObjectAlreadyExists,
    ObjectStoreError,
)

log = logging.getLogger(__name__)

#: What became of one put of a commit file: "retry" means nothing landed,
#: so the same version may be tried again.
PutOutcome = Literal["won", "lost", "retry"]


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


def default_writer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class CommitProtocol:
    """Commits actions to one partition's log as the next version, retrying lost races.

    Not thread-safe on its own: `PartitionCatalog` holds its lock around
    `commit`, which also updates the catalog's `CachedState`.
    """

    def __init__(
        self,
        files: LogFiles,
        loader: LogLoader,
        cache: CachedState,
        checkpoints: Checkpoints,
        *,
        writer: str,
        retry: RetryPolicy,
        clock: Callable[[], int],
    ) -> None:
        self.files = files
        self.loader = loader
        self.cache = cache
        self.checkpoints = checkpoints
        self.writer = writer
        self.retry = retry
        self._clock = clock
        self._rng = random.Random()

    def commit(
        self, actions: Sequence[Action], operation: str, *, leader_epoch: int | None = None
    ) -> CommitResult:
        """See `PartitionCatalog.commit`."""
        actions = tuple(actions)
        if not actions:
            raise ValueError("a commit needs at least one action")
        commit_id = uuid.uuid4().hex
        builder, fresh = self.cache.for_writing()
        attempt = 0
        while True:
            attempt += 1
            try:
                self._check_fence(builder, leader_epoch)
                ops = builder.plan(actions, writer_checks=True)
            except CatalogError:
                if fresh:
                    raise
                # The cache may predate a change that makes the actions
                # valid (a segment removed, one added, our own lease taken
                # through another catalog): judge the newest state.
                builder, fresh = self.cache.refreshed(), True
                self._check_fence(builder, leader_epoch)
                ops = builder.plan(actions, writer_checks=True)
            version = builder.version + 1
            timestamp_ms = self._clock()
            key = self.files.commit_key(version)
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
            outcome = self._try_put(key, data, version, commit_id)
            if outcome == "won":
                builder.apply_ops(ops, version, timestamp_ms)
                self.cache.synced(builder)
                return self._after_commit(builder, version, commit_id, attempt)
            if outcome == "lost":
                # Catch up with the winners; our own commit may be among
                # them if an earlier attempt's outcome was unknown.
                own: list[int] = []
                builder = self.loader.read_tail(builder, first_batch=2, own_commit=(commit_id, own))
                self.cache.synced(builder)
                fresh = True
                if own:
                    return self._after_commit(builder, own[0], commit_id, attempt)
            if attempt >= self.retry.max_attempts:
                raise CatalogCommitConflict(
                    f"{self.loader.topic}/{self.loader.partition}: lost the race for a commit "
                    f"{attempt} times in a row; giving up",
                    attempts=attempt,
                    commit_id=commit_id,
                )
            time.sleep(self.retry.delay(attempt, self._rng))

    def _check_fence(self, builder: StateBuilder, leader_epoch: int | None) -> None:
        """`FencedLeaderEpoch` unless ``leader_epoch`` is None or ``builder``'s lease epoch."""
        if leader_epoch is None or leader_epoch == builder.leader_epoch:
            return
        raise FencedLeaderEpoch(
            f"{self.loader.topic}/{self.loader.partition}: commit with leader epoch "
            f"{leader_epoch} refused, the catalog's leader epoch is {builder.leader_epoch} "
            f"(node {builder.leader_node_id} at version {builder.version})",
            topic=self.loader.topic,
            partition=self.loader.partition,
            leader_epoch=leader_epoch,
            catalog_epoch=builder.leader_epoch,
        )

    def _try_put(self, key: str, data: bytes, version: int, commit_id: str) -> PutOutcome:
        try:
            self.files.put_if_absent(key, data)
        except ObjectAlreadyExists:
            return "lost"
        except (ObjectStoreError, OSError) as exc:
            log.warning("commit %s: outcome unknown (%s); reading it back", key, exc)
            return self._resolve_unknown(key, version, commit_id, exc)
        return "won"

    def _resolve_unknown(
        self, key: str, version: int, commit_id: str, cause: Exception
    ) -> PutOutcome:
        last: Exception = cause
        for attempt in range(3):
            try:
                data = self.files.get_or_none(key)
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
        checkpointed = False
        if self.checkpoints.due(builder, version):
            try:
                self.checkpoints.write(builder)
                checkpointed = True
            except Exception:  # the commit stands; the next checkpoint catches up
                log.warning(
                    "checkpoint of %s at %d failed", self.files.prefix, version, exc_info=True
                )
        return CommitResult(version, commit_id, attempts, checkpointed)
