"""`ActiveFile`: the WAL file the writer thread appends to, and how the bytes get there.

The writer thread (`kfs_core.log.wal.writer`) owns one open file at a time:
the ring's active file (`kfs_core.log.wal.ring`), opened at the end of its
data.  The write bypasses the page cache where the filesystem allows
(``O_DIRECT``, `kfs_core.storage.direct_io`: one copy into a warm, aligned
staging buffer, kept from file to file; nothing reads the WAL back while
the daemon runs) and the file size is a whole number of blocks; otherwise
it is one ``pwritev`` of the frames' buffers (`_pwrite_all`).  A filesystem
that refuses the first direct write turns direct writes off for good,
before anything was written.  Syncing the file is the writer's (group
commit), on `ActiveFile.fd`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Sequence

from kfs_core.formats.wal import Buffer
from kfs_core.log.wal.files import WalFile
from kfs_core.storage.direct_io import (
    BLOCK,
    DirectAppender,
    DirectUnsupported,
    open_direct,
    read_tail,
)

__all__ = ["ActiveFile"]

log = logging.getLogger(__name__)

_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


def _pwrite_all(fd: int, buffers: Sequence[Buffer], offset: int) -> None:
    """Write ``buffers`` back to back at ``offset``, resuming after short writes."""
    if not hasattr(os, "pwritev"):  # pragma: no cover - every supported platform has it
        data = b"".join(buffers)
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n
        return
    views = [memoryview(b) for b in buffers]
    i = 0
    while i < len(views):
        n = os.pwritev(fd, views[i : i + _IOV_MAX], offset)
        if n <= 0:
            raise OSError(errno.EIO, "pwritev wrote nothing")
        offset += n
        while n:
            if n >= len(views[i]):
                n -= len(views[i])
                i += 1
            else:
                views[i] = views[i][n:]
                n = 0


class ActiveFile:
    """The open WAL file of the writer thread (only that thread touches it).

    ``direct_io`` asks for ``O_DIRECT`` appends where the filesystem has
    them; ``directory`` names the WAL in log messages.
    """

    def __init__(self, directory: str, *, direct_io: bool) -> None:
        self._directory = directory
        self._direct_io = direct_io
        self.fd = -1
        self._path = ""
        self._appender: DirectAppender | None = None  # the active file's, when it is direct
        self._direct_appender: DirectAppender | None = None  # kept across files (warm staging)

    def open(self, wal_file: WalFile, end: int) -> None:
        """Open ``wal_file`` for appends at ``end``: with ``O_DIRECT`` where possible."""
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        self._path = wal_file.path
        fd = None
        if self._direct_io and wal_file.size % BLOCK == 0:
            fd = open_direct(wal_file.path, flags)
        if fd is None:
            self.fd = os.open(wal_file.path, flags)
            self._appender = None
            return
        self.fd = fd
        if self._direct_appender is None:
            self._direct_appender = DirectAppender()
        self._direct_appender.start(fd, end, read_tail(wal_file.path, end))
        self._appender = self._direct_appender

    def append(self, buffers: Sequence[Buffer], offset: int) -> None:
        """Write ``buffers`` back to back at ``offset``, the end of the file's data."""
        appender = self._appender
        if appender is not None:
            assert appender.end == offset, (appender.end, offset)
            try:
                appender.append(buffers)
                return
            except DirectUnsupported as exc:
                # Nothing was written: this filesystem takes no direct writes.
                log.info(
                    "WAL %s: O_DIRECT refused (%s); writing through the page cache",
                    self._directory,
                    exc,
                )
                self._direct_io = False
                self._appender = None
                fd = os.open(self._path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
                os.close(self.fd)
                self.fd = fd
        _pwrite_all(self.fd, buffers, offset)

    def seal(self) -> None:
        """Close the file (written and fsynced already) before the next one opens."""
        os.close(self.fd)
        self.fd = -1

    def close(self) -> None:
        """Close the file and free the staging buffer (the writer thread is ending)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        if self._direct_appender is not None:
            self._direct_appender.close()
            self._direct_appender = self._appender = None
