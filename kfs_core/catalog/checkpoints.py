"""Checkpoints of a partition's log: how often, writing them, and expiring the log below them.

Checkpoints.  The writer of version ``v`` with ``v % interval == 0``
writes ``_log/{v:020d}.checkpoint.json`` (live segments and unexpired
tombstones) and moves ``_log/_last_checkpoint`` forwards.  A failed checkpoint
never fails the commit: the next one, or the checkpoint job, catches up.
``interval`` is ``checkpoint_interval`` stretched by the size of the last
checkpoint (`checkpoint_stretch`): a partition of ten thousand segments has a
checkpoint of 3 MB, which every tenth commit would mean 300 KB written for
each commit of a kilobyte, so it comes every 80th.

Expiry.  `Checkpoints.expire` deletes commits and checkpoints below a
checkpoint, oldest first, after moving the pointer to it, so the log is
readable at every instant.  A reader whose newest commit is old re-reads the
pointer before it believes the log ends there (`kfs_core.catalog.loader`), so
a load that raced an expiry cannot mistake a deleted commit for the end of
the log.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from kfs_core.catalog.log_files import LogFiles
from kfs_core.catalog.state import StateBuilder, decode_checkpoint, encode_pointer
from kfs_core.errors import CatalogVersionNotFound, ObjectAlreadyExists

DEFAULT_CHECKPOINT_INTERVAL = 10  # Delta Lake's checkpointInterval
#: Checkpoints larger than this are written less often: see `checkpoint_stretch`.
CHECKPOINT_STRETCH_BYTES = 256 * 1024
MAX_CHECKPOINT_STRETCH = 8
#: `expire_commits` leaves commit files younger than this alone by default.
#: It must exceed `HEAD_RECHECK_MS` plus clock skew, so that a reader that
#: stops at a missing commit either sees a young head (nothing younger can
#: have been expired) or re-reads the pointer.
COMMIT_EXPIRY_MIN_AGE_MS = 3_600_000


@dataclass(frozen=True)
class ExpireResult:
    checkpoint_version: int  # the checkpoint kept as the log's new beginning (-1: none)
    deleted: int  # commit and checkpoint files deleted
    complete: bool  # False if younger files (min_age_ms) stopped the expiry early


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


class Checkpoints:
    """One partition's checkpoint cadence, checkpoint writing and commit expiry."""

    def __init__(self, files: LogFiles, interval: int) -> None:
        self.files = files
        self.interval = interval

    def every(self, checkpoint_bytes: int) -> int:
        """Commits between checkpoints after a checkpoint of ``checkpoint_bytes``."""
        return self.interval * checkpoint_stretch(checkpoint_bytes)

    def due(self, builder: StateBuilder, version: int) -> bool:
        """Whether the writer of ``version`` (now ``builder``'s newest) checkpoints it."""
        every = self.every(builder.checkpoint_bytes)
        return version > 0 and version % every == 0 and builder.version == version

    def write(self, builder: StateBuilder) -> None:
        """Checkpoint ``builder``'s version and move the pointer forwards to it."""
        data = builder.encode_checkpoint()
        builder.checkpoint_bytes = len(data)
        key = self.files.checkpoint_key(builder.version)
        # Someone may have checkpointed this version already: checkpoints are immutable.
        with contextlib.suppress(ObjectAlreadyExists):
            self.files.put_if_absent(key, data)
        pointer = self.files.read_pointer()
        if pointer is None or pointer.version < builder.version:
            self.files.put(self.files.pointer_key, encode_pointer(builder.version, len(data)))

    def expire(self, before_version: int, min_age_ms: int) -> ExpireResult:
        """Delete commit and checkpoint files below the newest checkpoint at or before the cut.

        See `PartitionCatalog.expire_commits`.
        """
        files = self.files
        entries: list[tuple[int, bool, str, float, int]] = []
        for info in files.list():
            parsed = files.parse(info.key)
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
        data = files.get_or_none(keep_key)
        if data is None:
            raise CatalogVersionNotFound(
                f"checkpoint {keep_key} disappeared during expiry", version=keep_version
            )
        decode_checkpoint(data, keep_key, keep_version)  # never cut the log down to a bad base
        pointer = files.read_pointer()
        if pointer is None or pointer.version < keep_version:
            files.put(files.pointer_key, encode_pointer(keep_version, keep_size))
        cutoff = time.time() - min_age_ms / 1000.0
        deleted = 0
        for version, _, key, last_modified, _ in entries:
            if version >= keep_version:
                break
            if last_modified > cutoff:
                return ExpireResult(keep_version, deleted, False)
            files.delete(key)
            deleted += 1
        return ExpireResult(keep_version, deleted, True)
