"""`LogFailure`: the partition log's failed state after the WAL failed.

A failed WAL write or fsync (`WalWriteFailed`, from an append, a checkpoint
or the WAL's failure listener) fails the whole log, once: every append from
then on gets `LogStorageError` (KAFKA_STORAGE_ERROR), reads go on, and the
owner's ``on_failure`` is called so it can stop the daemon -- recovery
replays the WAL on the next start.  The append path and the flusher both
report failures here and both ask it before writing to the WAL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kfs_core.errors import LogStorageError

__all__ = ["LogFailure"]

log = logging.getLogger(__name__)


class LogFailure:
    """Whether the WAL failed, and what producers are told from then on."""

    def __init__(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        self._on_failure = on_failure
        self.error: BaseException | None = None  # the WAL's error, once it failed
        self._refusal: LogStorageError | None = None  # what producers get from then on

    def fail(self, error: BaseException) -> LogStorageError:
        """Enter the failed state (once): refuse appends from now on, and tell the owner."""
        if self._refusal is None:
            self.error = error
            self._refusal = LogStorageError(
                f"the WAL failed ({error}); appends are refused until the daemon restarts"
            )
            log.error("%s", self._refusal.message)
            if self._on_failure is not None:
                try:
                    self._on_failure(error)
                except Exception:  # the failed state stands whatever the callback does
                    log.exception("the log's on_failure callback failed")
        return self._refusal

    def check(self) -> None:
        """Raise `LogStorageError` once the WAL has failed."""
        if self._refusal is not None:
            raise LogStorageError(self._refusal.message)
