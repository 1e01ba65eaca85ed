"""The WAL directory as the writer, its file ring and recovery see it: names, positions, files.

The WAL lives in one directory (``{data_dir}/wal/``) as files named by a
zero-padded sequence number, ``00000000000000000007.wal`` (`wal_file_name`),
so name order is sequence order.  A ``*.wal.tmp`` file is one being created;
it never holds an acknowledged frame.  Here too: `WalPosition` (where a frame
is), `WalFile` (a live file and the highest offset each partition has in it,
which decides when the file may be deleted), the last offset of a RECORD
frame's batches, the two syscalls both sides need, and the file preparation
the file ring and recovery do (`preallocate`, `zero_range`, `change_and_fsync`).

Why a module of its own: the writer imports `kfs_core.log.wal.recovery` to
resume from what it found, so recovery must not import the writer; what both
need lives below the two of them, here.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kfs_core.formats.wal import Buffer
from kfs_core.records.batch import iter_batch_headers

__all__ = [
    "TEMP_SUFFIX",
    "UNSUPPORTED",
    "WAL_NAME",
    "WAL_SUFFIX",
    "WalFile",
    "WalPosition",
    "batch_last_offset",
    "change_and_fsync",
    "fdatasync",
    "fsync_directory",
    "preallocate",
    "wal_file_name",
    "zero_range",
]

#: What `preallocate` and `zero_range` meet where the filesystem or platform lacks the call.
UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})

WAL_SUFFIX = ".wal"
TEMP_SUFFIX = ".tmp"  # a file being created: never holds an acknowledged frame
WAL_NAME = re.compile(r"^(\d{20})\.wal$")

#: ``fdatasync`` where the platform has it: the file size never changes, so the
#: metadata ``fsync`` would also write is not needed for durability.
fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


def fsync_directory(path: str) -> None:
    """Make a directory's entries durable (fsync): what was created or removed in it."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def wal_file_name(seq: int) -> str:
    """``00000000000000000007.wal``: 20 digits, so name order is sequence order."""
    return f"{seq:020d}{WAL_SUFFIX}"


@dataclass(frozen=True, slots=True)
class WalPosition:
    """Where a frame was written: file sequence number, byte position, frame size."""

    file_seq: int
    position: int
    size: int

    @property
    def file_name(self) -> str:
        return wal_file_name(self.file_seq)

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(slots=True)
class WalFile:
    """A live WAL file: recovery finds it, the writer appends to it and deletes it."""

    seq: int
    path: str
    size: int
    # Highest last offset of each partition's RECORD frames in this file.
    max_offsets: dict[tuple[str, int], int] = field(default_factory=dict)


def batch_last_offset(batch: Buffer, base_offset: int, object_name: str) -> int:
    """Last offset of one or more concatenated RecordBatch v2; checks the base offset.

    Raises `CorruptRecordBatch` for bytes that are not whole batches and
    ValueError when the first batch does not start at ``base_offset``.
    """
    last: int | None = None
    for pos, header in iter_batch_headers(batch, verify_crc=False, object_name=object_name):
        if pos == 0 and header.base_offset != base_offset:
            raise ValueError(
                f"base_offset {base_offset} differs from the batch's own {header.base_offset}"
            )
        last = header.last_offset
    if last is None:
        raise ValueError("a WAL record needs at least one record batch")
    return last


def change_and_fsync(path: str, change: Callable[[int], None]) -> None:
    """Open the existing file ``path``, call ``change`` with its descriptor, fsync it, close it."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        change(fd)
        os.fsync(fd)
    finally:
        os.close(fd)


def preallocate(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in UNSUPPORTED:
            raise
        os.ftruncate(fd, size)  # a sparse file: still zero-filled, still a fixed size


_FALLOC_FL_ZERO_RANGE = 0x10  # linux/falloc.h
_libc = ctypes.CDLL(None, use_errno=True)
_fallocate = getattr(_libc, "fallocate", None)
if _fallocate is not None:
    _fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    _fallocate.restype = ctypes.c_int


def zero_range(fd: int, size: int) -> None:
    """Make the first ``size`` bytes of ``fd`` read as zeros without freeing their blocks.

    ``fallocate(FALLOC_FL_ZERO_RANGE)``: the filesystem marks the extents
    unwritten, which writes no data and frees nothing (so a ``discard``
    mount sends the device no discard).  Raises OSError -- EOPNOTSUPP on a
    filesystem without it (tmpfs), ENOSYS on a platform without
    ``fallocate`` -- and the file is then not known to be zeroed.
    """
    if _fallocate is None:
        raise OSError(errno.ENOSYS, "fallocate is not available on this platform")
    while _fallocate(fd, _FALLOC_FL_ZERO_RANGE, 0, size) != 0:
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, f"fallocate(FALLOC_FL_ZERO_RANGE): {os.strerror(err)}")
