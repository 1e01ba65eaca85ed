"""`FileRing`: the WAL's files -- the live ones, the active one, the spare, the recycled ones.

The WAL is a directory of fixed-size files (names and positions:
`kfs_core.log.wal.files`).  Each file is created under a temporary name,
preallocated (``posix_fallocate``; ``ftruncate`` where unsupported) so
appends never change the file size, fsynced, renamed into place and the
directory fsynced: a ``*.wal`` file is always complete and zero-filled.
The next file is prepared (created, preallocated, fsynced) on a helper
thread while the current one fills (`FileRing.prepare_spare`), and keeps its
temporary name until the roll, so rolling costs the writer a rename and a
directory fsync (`FileRing.next_file`).

Files are recycled: a file the checkpoints leave with nothing to keep is
not deleted while fewer than `RECYCLED_FILES` wait for reuse; it is renamed
to a temporary name, and the next spare is that file, zeroed in place
(`kfs_core.log.wal.files.zero_range`: its blocks stay allocated and read as
zeros).  A deleted file frees its blocks, and on a filesystem mounted with
``discard`` the device then spends milliseconds discarding 16 MiB while the
WAL's next write waits behind it; a new file's blocks must also be allocated
again.  Where the filesystem cannot zero a range (tmpfs), the ring deletes
and creates files as before.

A frame never spans two files; when the next frame does not fit, the writer
fsyncs the current file (sealing it) and rolls to a new one.  A frame larger
than the file size gets a file of its own, sized to fit, instead of being
refused: the file size is a disk-layout knob and must not quietly cap
``max.message.bytes``.

Who does what.  The ring owns the files and their bookkeeping (``files``,
``active``, each file's highest offset per partition) under ``lock``, which
the checkpoints (`kfs_core.log.wal.checkpoints`) share; the writer thread
(`kfs_core.log.wal.writer`) owns the active file's descriptor and decides
when to roll.  A full disk while creating the next file is
`kfs_core.log.wal.out_of_space`'s.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from kfs_core.log.wal.files import (
    TEMP_SUFFIX,
    UNSUPPORTED,
    WalFile,
    change_and_fsync,
    fsync_directory,
    preallocate,
    wal_file_name,
    zero_range,
)
from kfs_core.threads import name_os_thread

__all__ = ["RECYCLED_FILES", "FileRing"]

log = logging.getLogger(__name__)

#: Flushed files kept (under a temporary name) to become the next spares.  One
#: file is retired per file filled, so two cover a roll that finds the last
#: one not yet retired.
RECYCLED_FILES = 2


@dataclass(slots=True)
class _Spare:
    """The next WAL file, being prepared under its temporary name (`FileRing.prepare_spare`)."""

    seq: int
    path: str  # the temporary name
    # The preparation, on the spare worker.  If it failed, the writer creates
    # the file itself, and meets the error.
    done: Future[None] = field(init=False)


def _create_temp_file(path: str, size: int) -> None:
    """A zero-filled, preallocated file of ``size`` bytes at ``path``, fsynced."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        preallocate(fd, size)
        os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)  # a full disk must not keep what it could not finish
        raise
    finally:
        os.close(fd)


def _seq(wal_file: WalFile) -> int:
    return wal_file.seq


class FileRing:
    """The files of one WAL directory: create, roll to, retire (recycle or delete), list.

    ``count`` adds to the writer's `WalMetrics` counters (``files_created``,
    ``files_deleted``, ``files_recycled``).  Files are created by the writer
    thread, spares on the spare worker, and retired by whichever thread
    checkpoints; ``lock`` guards ``files`` and ``active``.
    """

    def __init__(self, directory: str, file_size: int, count: Callable[..., None]) -> None:
        self.directory = directory
        self.file_size = file_size
        self._count = count
        # The files: the writer rolls, checkpoints retire (`Checkpoints` shares the lock).
        self.lock = threading.Lock()
        self.files: dict[int, WalFile] = {}
        self.active: WalFile | None = None
        # Flushed files waiting to be reused (temporary names), and whether to keep any.
        # Only the threads that retire files and prepare spares take this lock.
        self._recycle_lock = threading.Lock()
        self._recycled: list[str] = []
        self._recycling = True
        # Owned by the writer thread once it runs.
        self._spare: _Spare | None = None  # the next file, prepared ahead
        # One thread for the spares, started with the first: submitting to it
        # does not wait, as starting a thread at every roll did (0.16 ms at
        # the median, up to 0.6, while the appends queued behind the roll).
        self._spare_worker: ThreadPoolExecutor | None = None

    def resume(self, found: Mapping[int, WalFile], end: int) -> tuple[WalFile, int]:
        """Take over the files recovery found; return the active one and where appends go.

        The last file is the active one, appends continue at ``end`` in it;
        with no file at all, the first is created (its spare comes later:
        `prepare_spare`).
        """
        files = dict(found)
        if not files:
            files[0] = self.create_file(0, self.file_size, prepare_next=False)
            end = 0
        active = files[max(files)]
        with self.lock:
            self.files = files
            self.active = active
        return active, end

    def activate(self, new: WalFile) -> None:
        """Make ``new`` (from `next_file`, open for appends now) the active file."""
        with self.lock:
            self.files[new.seq] = new
            self.active = new

    def active_name(self) -> str | None:
        with self.lock:
            return None if self.active is None else os.path.basename(self.active.path)

    def names(self) -> list[str]:
        """Names of the live WAL files, oldest first."""
        with self.lock:
            return [os.path.basename(f.path) for f in sorted(self.files.values(), key=_seq)]

    # --- new files -----------------------------------------------------------------

    def next_file(self, needed: int) -> WalFile:
        """Put the file after the active one in place, with room for ``needed`` bytes at least.

        That is the file size, or more for a frame (and the checkpoints
        carried ahead of it) that would not fit in one.  Not active yet:
        the writer opens it, then calls `activate`.
        """
        active = self.active
        assert active is not None
        return self.create_file(active.seq + 1, max(self.file_size, needed), prepare_next=True)

    def create_file(self, seq: int, size: int, *, prepare_next: bool) -> WalFile:
        """Put WAL file ``seq`` in place: the spare prepared for it, or a new one.

        The spare (`prepare_spare`) spares the writer the preallocation and
        its fsync; the rename and the directory fsync, which make the file a
        WAL file, happen here, when the previous file is sealed.  With
        ``prepare_next`` the spare for the file after it is started.
        """
        path = os.path.join(self.directory, wal_file_name(seq))
        temp = path + TEMP_SUFFIX
        spare, self._spare = self._spare, None
        ready = False
        if spare is not None:
            failed = spare.done.exception()  # waits for it
            ready = failed is None and spare.seq == seq and size == self.file_size
            if not ready:
                with contextlib.suppress(OSError):
                    os.unlink(spare.path)
        if not ready:
            _create_temp_file(temp, size)
        os.replace(temp, path)
        fsync_directory(self.directory)
        self._count(files_created=1)
        if prepare_next:
            self.prepare_spare(seq + 1)
        return WalFile(seq, path, size)

    def prepare_spare(self, seq: int) -> None:
        """Prepare the next file (``{seq}.wal.tmp``, `_spare_file`) on the spare worker thread.

        It keeps its temporary name until `create_file` renames it, so a
        crash leaves at most a ``*.wal.tmp`` that recovery removes, never a
        file that would make the active one look sealed.
        """
        spare = _Spare(seq, os.path.join(self.directory, wal_file_name(seq)) + TEMP_SUFFIX)
        if self._spare_worker is None:
            self._spare_worker = ThreadPoolExecutor(
                1, thread_name_prefix="kfs-wal-spare", initializer=name_os_thread
            )
        spare.done = self._spare_worker.submit(self._spare_file, spare.path)
        self._spare = spare

    def _spare_file(self, path: str) -> None:
        """Put a zero-filled, preallocated file at ``path``: a recycled one if one waits.

        A file that fails is deleted and a new one created instead; a
        filesystem that cannot zero a range in place (tmpfs) stops the
        recycling, and flushed files are deleted from then on.
        """
        with self._recycle_lock:
            recycled = self._recycled.pop(0) if self._recycled else None
        if recycled is not None:
            try:
                os.rename(recycled, path)
                change_and_fsync(path, functools.partial(zero_range, size=self.file_size))
                return
            except OSError as exc:
                for stale in (path, recycled):
                    with contextlib.suppress(OSError):
                        os.unlink(stale)
                if exc.errno not in UNSUPPORTED:
                    raise
                self._stop_recycling()
                log.info(
                    "WAL %s: this filesystem cannot zero a file in place (%s); "
                    "flushed WAL files are deleted, not reused",
                    self.directory,
                    exc,
                )
        _create_temp_file(path, self.file_size)

    # --- flushed files -------------------------------------------------------------

    def retire(self, victims: list[WalFile]) -> None:
        """Set aside flushed files for reuse (up to `RECYCLED_FILES` waiting), delete the rest."""
        kept = deleted = 0
        for victim in victims:
            with contextlib.suppress(FileNotFoundError):
                if self._keep_for_reuse(victim):
                    kept += 1
                    continue
                os.unlink(victim.path)
                deleted += 1
                log.debug("deleted flushed WAL file %s", victim.path)
        if kept:
            # Renamed before it is zeroed: a crash never leaves a zeroed file
            # under a WAL name, only a *.wal.tmp that recovery removes.
            fsync_directory(self.directory)
        if victims:
            self._count(files_deleted=deleted, files_recycled=kept)

    def _keep_for_reuse(self, victim: WalFile) -> bool:
        if victim.size != self.file_size:
            return False  # a file sized for one large frame
        with self._recycle_lock:
            if not self._recycling or len(self._recycled) >= RECYCLED_FILES:
                return False
            temp = victim.path + TEMP_SUFFIX
            os.rename(victim.path, temp)
            self._recycled.append(temp)
        log.debug("kept flushed WAL file %s for reuse", victim.path)
        return True

    def _stop_recycling(self) -> None:
        """Keep no more flushed files, and delete those waiting (on close, or on tmpfs)."""
        with self._recycle_lock:
            self._recycling = False
            recycled, self._recycled = self._recycled, []
        for path in recycled:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def close(self) -> None:
        """Remove the spare and the recycled files, stop the spare worker (the writer has stopped)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.done.exception()  # waits for it
            with contextlib.suppress(OSError):
                os.unlink(spare.path)
        if self._spare_worker is not None:
            self._spare_worker.shutdown(wait=True)
            self._spare_worker = None
        self._stop_recycling()
