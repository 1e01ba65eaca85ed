"""The WAL directory's lock: one daemon per WAL, and who held it last.

A daemon holds an exclusive ``flock`` on ``{data_dir}/kfs.lock`` for its
whole life; the kernel drops it when the process ends however it ends
(``kill -9`` included).  A second daemon started on the same directory gets
`WalDirectoryInUse` at once.  The file also records the incarnation of the
daemon holding it (`kfs_core.cluster`): the next holder reads it before
writing its own, and so knows for certain that this incarnation is not
running any more -- it can take that incarnation's partitions without
waiting for its heartbeat to go stale.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from kfs_core.errors import KfsError

__all__ = ["LOCK_FILE", "WalDirectoryInUse", "WalDirectoryLock"]

LOCK_FILE = "kfs.lock"


class WalDirectoryInUse(KfsError):
    """Another running daemon holds the WAL directory's lock."""


class WalDirectoryLock:
    """An exclusive lock on a WAL directory, held until `release` or the process ends."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, incarnation: str) -> str | None:
        """Take the lock, record ``incarnation``; the previous holder's incarnation, if any.

        Raises `WalDirectoryInUse` when another process holds it.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WalDirectoryInUse(
                f"another kfs serve is using the WAL directory {self.path.parent} "
                f"(it holds {self.path}); stop it, or give this one its own KFS_DATA_DIR"
            ) from None
        previous = os.pread(fd, 256, 0).decode("ascii", "replace").strip() or None
        os.ftruncate(fd, 0)
        os.pwrite(fd, incarnation.encode("ascii") + b"\n", 0)
        os.fsync(fd)
        self._fd = fd
        return previous

    def release(self) -> None:
        """Give the lock up (closing the file releases it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
