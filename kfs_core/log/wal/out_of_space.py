"""`OutOfSpace`: a full disk is not a failure -- the WAL waits for space and goes on.

Files are preallocated, so writes into them never run out of space; only
creating the next file can (ENOSPC, EDQUOT).  Then the writer waits and
tries again (`WalWriter.out_of_space` is true meanwhile, and the log's
append path refuses new appends with KAFKA_STORAGE_ERROR), the frames
already queued wait with it, and once an operator frees space it rolls and
writes them: nothing acknowledged or queued is lost and no restart is
needed.  Closing the WAL gives up the wait.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable

__all__ = ["OUT_OF_SPACE_RETRY_MAX_S", "OUT_OF_SPACE_RETRY_MIN_S", "OutOfSpace"]

log = logging.getLogger(__name__)

#: How a roll waits for disk space: the first pause, and the longest.
OUT_OF_SPACE_RETRY_MIN_S = 0.05
OUT_OF_SPACE_RETRY_MAX_S = 1.0


class OutOfSpace:
    """Whether the WAL in ``directory`` waits for disk space, and the waiting itself.

    ``count`` adds to the writer's `WalMetrics` counters (``out_of_space``).
    """

    def __init__(self, directory: str, count: Callable[..., None]) -> None:
        self._directory = directory
        self._count = count
        self.error: OSError | None = None  # set while a roll waits for disk space

    def roll(self, roll: Callable[[], None], wait: Callable[[float], bool]) -> None:
        """Call ``roll``, waiting while the disk is full (ENOSPC, EDQUOT) instead of failing.

        Nothing is lost by waiting: the file being sealed is written and
        fsynced, the frames still to write stay queued, and every file
        operation of a failed roll is undone.  A full disk is something an
        operator fixes (retention, a bigger volume), so this tries again with
        a growing pause (up to `OUT_OF_SPACE_RETRY_MAX_S`) until space appears
        or the WAL closes: ``wait(seconds)`` pauses and says whether the WAL
        is still open; when it is not, the error is raised, and what was
        still queued fails, unacknowledged.
        """
        pause = OUT_OF_SPACE_RETRY_MIN_S
        while True:
            try:
                roll()
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                if self.error is None:
                    log.error(
                        "WAL %s: no space for the next file (%s); appends are refused and "
                        "the queued ones wait until space is freed",
                        self._directory,
                        exc.strerror,
                    )
                    self._count(out_of_space=1)
                self.error = exc
                if not wait(pause):
                    raise
                pause = min(pause * 2, OUT_OF_SPACE_RETRY_MAX_S)
                continue
            if self.error is not None:
                log.warning("WAL %s: space again; appends resume", self._directory)
                self.error = None
            return
