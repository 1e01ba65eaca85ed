"""`WalWriter`: the daemon's write-ahead log -- appends, group commit, durability, checkpoints.

Every produced batch is framed (`kfs_core.formats.wal`) and appended here
before the producer is acknowledged.  The WAL is a directory of fixed-size
files (names and positions: `kfs_core.log.wal_files`).  Each file is created
under a temporary name, preallocated (``posix_fallocate``; ``ftruncate``
where unsupported) so appends never change the file size, fsynced, renamed
into place and the directory fsynced: a ``*.wal`` file is always complete and
zero-filled.  The next file is prepared (created, preallocated, fsynced) on a
helper thread while the current one fills, and keeps its temporary name
until the roll, so rolling costs the writer a rename and a directory fsync.
Files are recycled: a file the checkpoints leave with nothing to keep is
not deleted while fewer than `RECYCLED_FILES` wait for reuse; it is renamed
to a temporary name, and the next spare is that file, zeroed in place
(`wal_files.zero_range`: its blocks stay allocated and read as zeros).  A
deleted file frees its blocks, and on a filesystem mounted with
``discard`` the device then spends milliseconds discarding 16 MiB while
the WAL's next write waits behind it; a new file's blocks must also be
allocated again.  Where the filesystem cannot zero a range (tmpfs), the
writer deletes and creates files as before.
A frame never spans two files; when the next frame does not fit, the WAL
fsyncs the current file (sealing it) and rolls to a new one.  A frame larger
than the file size gets a file of its own, sized to fit, instead of being
refused: the file size is a disk-layout knob and must not quietly cap
``max.message.bytes``.

One writer thread owns the active file.  Producers frame their batches on
their own thread (CRC only: a frame is a list of buffers -- header, the
caller's batch bytes, footer -- so the batch is never copied), queue them
and wait on a future; the writer drains everything queued, writes it and
completes the futures.  The write bypasses the page cache where the
filesystem allows (``O_DIRECT``, `kfs_core.storage.direct_io`: one copy into
a warm, aligned staging buffer; nothing reads the WAL back while the daemon
runs), and is one ``pwritev`` of the frames' buffers otherwise.  `append_group` queues the
frames of several partitions (one produce request) as one entry with one
future: one hand-off to the writer and one wake-up back, however many
partitions the request names.  Each batch is still its own frame, so
recovery and torn-tail handling do not change.  Durability modes
(`Durability`) decide when a future completes:

``cautious`` (default)
    After ``fdatasync`` of the write.  This is group commit: frames that queue
    up while an fsync is running share the next one.  An acknowledged frame
    survives ``kill -9``, an OS crash and power loss (invariant 1).
``normal``
    After the write, before the fsync.  The writer fsyncs as soon as
    ``normal_sync_frames`` (50) frames are unsynced, or ``normal_sync_ms``
    (10 ms) after the first unsynced write, whichever comes first.  A process
    crash (``kill -9``) loses nothing -- the bytes are in the kernel page
    cache -- but an OS crash or power loss can lose the acknowledged frames of
    the last window: at most ``normal_sync_frames`` frames and at most
    ``normal_sync_ms`` plus one fsync's duration of acknowledged writes.
    The writer thread runs the fsync itself, so an append that arrives
    during one waits for it before its write.
``emergency``
    As ``cautious`` for the WAL.  In addition the WAL writes the pause flag
    ``{ns}/_control/emergency-pause`` into the object store (when it is given
    one) so maintenance jobs stop (`kfs_core.maintenance_pause`); starting in
    another mode clears it.

A full disk is not a failure.  Files are preallocated, so writes into them
never run out of space; only creating the next file can (ENOSPC, EDQUOT).
Then the writer waits and tries again (`out_of_space` is true meanwhile, and
`LogManager` refuses new appends with KAFKA_STORAGE_ERROR), the frames
already queued wait with it, and once an operator frees space it rolls and
writes them: nothing acknowledged or queued is lost and no restart is needed.

A failed write or fsync stops the WAL (`WalWriteFailed`): the waiters of
the failed group and every later append get the error, because after a failed
fsync the kernel may have dropped the dirty pages and a retry could report
durability that does not exist.  The daemon restarts and recovers.  The
error is also `WalWriter.failure`, and the writer thread hands it to every
callback registered with `WalWriter.add_failure_listener` -- a failure of a
timed fsync in ``normal`` mode or of a checkpoint reaches the owner even when
no producer is waiting.

Checkpoints.  `WalWriter.checkpoint` records that a partition is in the
object store up to an offset: a CHECKPOINT frame whose base offset is the
next offset still to flush (``flushed_offset + 1``, as `FrameType.CHECKPOINT`
defines it).  The WAL keeps, per WAL file, the highest last offset of each
partition's RECORD frames; a file whose every partition is at or below its
flushed offset is deleted -- never the active file.  A new file starts with a
copy of the checkpoints of the partitions that still have records in live
files, so deleting the file that held a checkpoint never makes recovery replay
more than it must.

Recovery.  `WalWriter.recover` runs once, before the first append: the scan,
the torn-tail repair and what is replayed are `kfs_core.log.wal_recovery`'s;
the writer takes over the files it found (or creates the first one), sets or
clears the pause flag and starts the writer thread.

This module is library code: no server imports, no Prometheus.  Metrics are
counters (`WalWriter.metrics`) and an optional ``fsync_observer`` callback
the daemon's metrics layer turns into a histogram.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from kfs_core.config import DURABILITY_MODES
from kfs_core.errors import (
    WalClosed,
    WalError,
    WalNotRecovered,
    WalWriteFailed,
)
from kfs_core.formats.wal import (
    WAL_FILE_SIZE,
    Buffer,
    FrameType,
    encode_record_frame,
    record_frame_parts,
)
from kfs_core.log.wal_files import (
    TEMP_SUFFIX,
    UNSUPPORTED,
    WalFile,
    WalPosition,
    batch_last_offset,
    change_and_fsync,
    fdatasync,
    fsync_directory,
    preallocate,
    wal_file_name,
    zero_range,
)
from kfs_core.log.wal_recovery import RecoveredWal, WalRecovery, recover_wal
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.storage.direct_io import (
    BLOCK,
    DirectAppender,
    DirectUnsupported,
    open_direct,
    read_tail,
)
from kfs_core.threads import name_os_thread

if TYPE_CHECKING:
    from kfs_core.config import Settings
    from kfs_core.storage.base import ObjectStore

__all__ = [
    "DEFAULT_FILE_SIZE",
    "Durability",
    "FailureListener",
    "FsyncObserver",
    "StageObserver",
    "WalAppend",
    "WalMetrics",
    "WalPosition",
    "WalWriter",
    "wal_file_name",
]

log = logging.getLogger(__name__)

Durability = Literal["cautious", "normal", "emergency"]
#: Called by the writer thread after every data fsync: (seconds it took, frames it covered).
FsyncObserver = Callable[[float, int], None]
#: Called by the writer thread with the time of one stage of an append: ``"queue_wait"`` per
#: entry (queued until the writer took it) and ``"write"`` per write (the fsync is separate).
StageObserver = Callable[[str, float], None]
#: Called once when a write or fsync fails and the WAL stops (see `add_failure_listener`).
FailureListener = Callable[[WalWriteFailed], None]

DEFAULT_FILE_SIZE = WAL_FILE_SIZE  # 16 MiB
MIN_FILE_SIZE = 1024  # small files are for tests; anything smaller is a mistake
#: Flushed files kept (under a temporary name) to become the next spares.  One
#: file is retired per file filled, so two cover a roll that finds the last
#: one not yet retired.
RECYCLED_FILES = 2
#: How a roll waits for disk space: the first pause, and the longest.
OUT_OF_SPACE_RETRY_MIN_S = 0.05
OUT_OF_SPACE_RETRY_MAX_S = 1.0
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)

# Looked up at call time so tests can slow down or fail the writer's fsyncs
# (recovery's torn-tail repair calls `wal_files.fdatasync` itself).
_fdatasync: Callable[[int], None] = fdatasync


# --- public values ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WalAppend:
    """One partition's batches for `WalWriter.append_group`: one RECORD frame.

    ``batch`` is one or more whole RecordBatch v2, offsets assigned, the first
    at ``base_offset``; it is written from the caller's buffer, so it must not
    change until the append returns.  ``last_offset`` is the last batch's last
    offset when the caller has validated the batches already; None makes the
    WAL read it from the batch headers (checking the base offset).
    ``crcs_checked`` says every batch's stored CRC was checked against its
    bytes (the produce path's `validate_produce`): the frame's CRC is then
    derived from those CRCs rather than computed over the batches again.
    """

    topic: str
    partition: int
    base_offset: int
    batch: Buffer
    last_offset: int | None = None
    crcs_checked: bool = False


@dataclass(frozen=True, slots=True)
class WalMetrics:
    """Counters since the writer was created; `WalWriter.metrics` returns a snapshot."""

    frames: int = 0  # frames written, checkpoints included
    bytes: int = 0  # frame bytes written
    writes: int = 0  # pwritev groups
    fsyncs: int = 0  # data fsyncs (fdatasync) of the WAL
    fsync_seconds: float = 0.0  # total time spent in them
    max_frames_per_fsync: int = 0
    checkpoints: int = 0
    files_created: int = 0
    files_deleted: int = 0
    files_recycled: int = 0  # flushed files kept for reuse as new ones instead of deleted
    out_of_space: int = 0  # times the disk was full when the next file was due


# --- internals -------------------------------------------------------------


class _State(enum.Enum):
    NEW = "new"  # created, recover() not yet run
    RECOVERING = "recovering"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(slots=True)
class _Frame:
    """One frame to write: its buffers (back to back) and what the file bookkeeping needs."""

    buffers: list[Buffer]
    size: int
    key: tuple[str, int]
    last_offset: int | None  # None: a checkpoint frame


@dataclass(slots=True)
class _Pending:
    """Frames queued for the writer as one entry, and the future their producer waits on."""

    frames: list[_Frame]
    future: Future[list[WalPosition]] = field(default_factory=Future)
    queued_at: float = field(default_factory=time.perf_counter)
    positions: list[WalPosition] = field(default_factory=list)


@dataclass(slots=True)
class _WriteGroup:
    """Frames written with one ``pwritev``, and the entries whose last frame is among them."""

    start: int  # file position of the first frame
    buffers: list[Buffer] = field(default_factory=list)
    frames: int = 0
    bytes: int = 0
    done: list[_Pending] = field(default_factory=list)


@dataclass(slots=True)
class _Spare:
    """The next WAL file, being prepared under its temporary name (`WalWriter._prepare_spare`)."""

    seq: int
    path: str  # the temporary name
    # The preparation, on the spare worker.  If it failed, the writer creates
    # the file itself, and meets the error.
    done: Future[None] = field(init=False)


def _resolve(item: _Pending) -> None:
    # An append_async caller shields its future, so nothing cancels it; be safe anyway.
    with contextlib.suppress(InvalidStateError):
        item.future.set_result(item.positions)


def _reject(item: _Pending, exc: BaseException) -> None:
    with contextlib.suppress(InvalidStateError):
        item.future.set_exception(exc)


def _notify(listener: FailureListener, failure: WalWriteFailed) -> None:
    try:
        listener(failure)
    except Exception:  # a listener's bug must not hide the failure from the others
        log.exception("WAL failure listener failed")


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


# --- the writer ------------------------------------------------------------


class WalWriter:
    """The WAL of one daemon: append (per durability mode), checkpoint, recover, close.

    Lifecycle: construct, `recover` (once; scans, repairs a torn tail, starts
    the writer thread), then `append` / `append_async` / `checkpoint` from any
    thread, then `close`.  Thread-safe.  Do not call the blocking `append`
    from an event loop thread; await `append_async` there.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        durability: Durability | str = "cautious",
        file_size: int = DEFAULT_FILE_SIZE,
        normal_sync_frames: int = 50,
        normal_sync_ms: float = 10,
        fsync_observer: FsyncObserver | None = None,
        stage_observer: StageObserver | None = None,
        control_store: ObjectStore | None = None,
        namespace: str = "default",
        direct_io: bool = True,
        accept_loss: bool = False,
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(
                f"durability {durability!r}: expected one of {', '.join(DURABILITY_MODES)}"
            )
        if file_size < MIN_FILE_SIZE:
            raise ValueError(f"WAL file size {file_size} is below the minimum {MIN_FILE_SIZE}")
        if normal_sync_frames < 1:
            raise ValueError(f"normal_sync_frames must be at least 1, got {normal_sync_frames}")
        if normal_sync_ms <= 0:
            raise ValueError(f"normal_sync_ms must be positive, got {normal_sync_ms}")
        self._directory = os.path.abspath(os.fspath(directory))
        self._accept_loss = accept_loss  # recovery cuts damaged data instead of refusing
        self._durability = cast(Durability, durability)
        self._sync_every_group = durability != "normal"
        self._file_size = file_size
        self._sync_frames = normal_sync_frames
        self._sync_seconds = normal_sync_ms / 1000
        self._fsync_observer = fsync_observer
        self._stage_observer = stage_observer
        self._control_store = control_store
        self._namespace = namespace
        # O_DIRECT appends (`kfs_core.storage.direct_io`) where the filesystem
        # has them and the file size is a whole number of blocks.
        self._direct_io = direct_io

        # Producers <-> writer: the queue and the lifecycle state.
        self._cond = threading.Condition()
        self._queue: deque[_Pending] = deque()
        self._state = _State.NEW
        self._failure: WalWriteFailed | None = None
        self._failure_listeners: list[FailureListener] = []
        self._thread: threading.Thread | None = None

        # Files and flushed offsets: the writer rolls, checkpoint() deletes.
        self._files_lock = threading.Lock()
        self._files: dict[int, WalFile] = {}
        self._active: WalFile | None = None
        self._flushed: dict[tuple[str, int], int] = {}
        # Flushed files waiting to be reused (temporary names), and whether to keep any.
        # Only the threads that retire files and prepare spares take this lock.
        self._recycle_lock = threading.Lock()
        self._recycled: list[str] = []
        self._recycling = True

        # Owned by the writer thread once it runs.
        self._fd = -1
        self._appender: DirectAppender | None = None  # the active file's, when it is direct
        self._direct_appender: DirectAppender | None = None  # kept across files (warm staging)
        self._spare: _Spare | None = None  # the next file, prepared ahead
        # One thread for the spares, started with the first: submitting to it
        # does not wait, as starting a thread at every roll did (0.16 ms at
        # the median, up to 0.6, while the appends queued behind the roll).
        self._spare_worker: ThreadPoolExecutor | None = None
        self._out_of_space: OSError | None = None  # set while a roll waits for disk space
        self._write_pos = 0
        self._unsynced_frames = 0
        self._unsynced_since = 0.0

        self._stats_lock = threading.Lock()
        # WalMetrics' fields, counted in place (a frozen copy per update cost 2 % of the GIL).
        self._stats: dict[str, Any] = {f.name: f.default for f in fields(WalMetrics)}

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> WalWriter:
        """The WAL for ``{settings.data_dir}/wal`` in ``settings.durability`` mode."""
        return cls(
            Path(settings.data_dir) / "wal",
            durability=settings.durability,
            namespace=settings.namespace,
            accept_loss=settings.wal_accept_loss,
            **options,
        )

    # --- properties -----------------------------------------------------------

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def durability(self) -> Durability:
        return self._durability

    @property
    def file_size(self) -> int:
        return self._file_size

    @property
    def metrics(self) -> WalMetrics:
        with self._stats_lock:
            return WalMetrics(**self._stats)

    @property
    def out_of_space(self) -> bool:
        """Whether the writer is waiting for disk space to start its next file.

        Frames already queued wait with it and are written once there is
        space; the owner should refuse new appends meanwhile (`LogManager`
        answers them KAFKA_STORAGE_ERROR).
        """
        return self._out_of_space is not None

    @property
    def failure(self) -> WalWriteFailed | None:
        """The write or fsync failure that stopped the WAL; None while it is healthy."""
        with self._cond:
            return self._failure

    def add_failure_listener(self, listener: FailureListener) -> None:
        """Call ``listener`` with the `WalWriteFailed` when a write or fsync fails.

        It runs once, on the writer thread (at once, on this thread, if the
        WAL has failed already); keep it short and thread-safe, e.g.
        ``loop.call_soon_threadsafe``.  An exception it raises is logged.
        """
        with self._cond:
            failure = self._failure
            if failure is None:
                self._failure_listeners.append(listener)
                return
        _notify(listener, failure)

    @property
    def pending_frames(self) -> int:
        """Frames queued and not yet taken by the writer."""
        with self._cond:
            return len(self._queue)

    @property
    def flushed_offsets(self) -> dict[tuple[str, int], int]:
        with self._files_lock:
            return dict(self._flushed)

    def flushed_offset(self, topic: str, partition: int) -> int:
        """The partition's highest checkpointed offset; -1 when the WAL has none."""
        with self._files_lock:
            return self._flushed.get((topic, partition), -1)

    @property
    def active_file(self) -> str | None:
        with self._files_lock:
            return None if self._active is None else os.path.basename(self._active.path)

    def wal_files(self) -> list[str]:
        """Names of the live WAL files, oldest first."""
        with self._files_lock:
            return [os.path.basename(f.path) for f in sorted(self._files.values(), key=_seq)]

    def __enter__(self) -> WalWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WalWriter({self._directory!r}, durability={self._durability!r})"

    # --- appends ----------------------------------------------------------------

    def append(
        self, topic: str, partition: int, base_offset: int, batch_bytes: Buffer
    ) -> WalPosition:
        """Append one produced batch (offsets assigned); return once durable per the mode.

        ``batch_bytes`` is one or more whole RecordBatch v2, the first starting
        at ``base_offset``.  Raises `WalNotRecovered`, `WalClosed`,
        `WalWriteFailed`, `CorruptRecordBatch` or ValueError.
        """
        item = _Pending([self._record(WalAppend(topic, partition, base_offset, batch_bytes))])
        self._submit(item)
        return item.future.result()[0]

    async def append_async(
        self, topic: str, partition: int, base_offset: int, batch_bytes: Buffer
    ) -> WalPosition:
        """`append` for an event loop: awaits the writer without blocking the loop.

        Cancelling the awaiting task does not withdraw the frame -- a queued
        frame is written regardless -- so treat a cancelled append as
        "outcome unknown", like a produce request that timed out.
        """
        item = _Pending([self._record(WalAppend(topic, partition, base_offset, batch_bytes))])
        self._submit(item)
        return (await asyncio.shield(asyncio.wrap_future(item.future)))[0]

    def append_group(self, appends: list[WalAppend]) -> Future[list[WalPosition]]:
        """Queue one RECORD frame per `WalAppend` as one entry; returns at once.

        The future gives the frames' positions, in order, once all of them
        are durable per the mode; frames of one group may land in two files.
        Raises, before queueing anything, what `append` raises for a bad
        batch or a WAL that is not open; write failures arrive through the
        future.  From an event loop, await ``asyncio.wrap_future(future)``
        (the frames are written whether or not anyone still waits).
        """
        if not appends:
            raise ValueError("append_group needs at least one append")
        item = _Pending([self._record(append) for append in appends])
        self._submit(item)
        return item.future

    def checkpoint(self, topic: str, partition: int, flushed_offset: int) -> WalPosition:
        """Record that every offset of the partition at or below ``flushed_offset`` is stored.

        Call after the segment commit.  Writes a CHECKPOINT frame (durable per
        the mode), then deletes the sealed WAL files that hold nothing
        unflushed.  A lower offset than an earlier checkpoint changes nothing.
        """
        item = self._checkpoint_frame(topic, partition, flushed_offset)
        self._submit(item)
        (position,) = item.future.result()
        self._retire_files(self._advance_checkpoint((topic, partition), flushed_offset))
        return position

    async def checkpoint_async(
        self, topic: str, partition: int, flushed_offset: int
    ) -> WalPosition:
        item = self._checkpoint_frame(topic, partition, flushed_offset)
        self._submit(item)
        (position,) = await asyncio.shield(asyncio.wrap_future(item.future))
        victims = self._advance_checkpoint((topic, partition), flushed_offset)
        if victims:
            # Renaming or unlinking files is quick, but it is disk I/O: keep it off
            # the loop.  Most checkpoints free no file, and they need no thread at all.
            await asyncio.to_thread(self._retire_files, victims)
        return position

    def _retire_files(self, victims: list[WalFile]) -> None:
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
            fsync_directory(self._directory)
        if victims:
            self._count(files_deleted=deleted, files_recycled=kept)

    def _keep_for_reuse(self, victim: WalFile) -> bool:
        if victim.size != self._file_size:
            return False  # a file sized for one large frame
        with self._recycle_lock:
            if not self._recycling or len(self._recycled) >= RECYCLED_FILES:
                return False
            temp = victim.path + TEMP_SUFFIX
            os.rename(victim.path, temp)
            self._recycled.append(temp)
        log.debug("kept flushed WAL file %s for reuse", victim.path)
        return True

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
                change_and_fsync(path, functools.partial(zero_range, size=self._file_size))
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
                    self._directory,
                    exc,
                )
        _create_temp_file(path, self._file_size)

    def _stop_recycling(self) -> None:
        """Keep no more flushed files, and delete those waiting (on close, or on tmpfs)."""
        with self._recycle_lock:
            self._recycling = False
            recycled, self._recycled = self._recycled, []
        for path in recycled:
            with contextlib.suppress(OSError):
                os.unlink(path)

    @staticmethod
    def _record(append: WalAppend) -> _Frame:
        topic, partition, base_offset, batch = (
            append.topic,
            append.partition,
            append.base_offset,
            append.batch,
        )
        last_offset = append.last_offset
        if last_offset is None:
            last_offset = batch_last_offset(batch, base_offset, f"{topic}-{partition}")
        elif not len(batch):
            raise ValueError("a WAL record needs at least one record batch")
        buffers = record_frame_parts(
            topic, partition, batch, base_offset=base_offset, checked=append.crcs_checked
        )
        return _Frame(buffers, sum(map(len, buffers)), (topic, partition), last_offset)

    @staticmethod
    def _checkpoint_frame(topic: str, partition: int, flushed_offset: int) -> _Pending:
        if flushed_offset < -1:
            raise ValueError(f"flushed offset {flushed_offset} is below -1 (nothing flushed)")
        frame = encode_record_frame(
            topic, partition, base_offset=flushed_offset + 1, frame_type=FrameType.CHECKPOINT
        )
        return _Pending([_Frame([frame], len(frame), (topic, partition), None)])

    def _advance_checkpoint(self, key: tuple[str, int], flushed_offset: int) -> list[WalFile]:
        """Record the partition's flushed offset; forget the files it leaves with nothing to keep.

        Returns them for the caller to retire (`_retire_files`: keep for
        reuse or delete): the sealed files whose every RECORD frame is now
        flushed (never the active one).
        """
        with self._files_lock:
            if flushed_offset > self._flushed.get(key, -1):
                self._flushed[key] = flushed_offset
            active = self._active
            victims = [
                f
                for f in self._files.values()
                if f is not active
                and all(self._flushed.get(k, -1) >= last for k, last in f.max_offsets.items())
            ]
            for victim in victims:
                del self._files[victim.seq]
        self._count(checkpoints=1)
        return victims

    def _submit(self, item: _Pending) -> None:
        with self._cond:
            state = self._state
            if state is _State.OPEN:
                self._queue.append(item)
                self._cond.notify()
                return
            if state in (_State.NEW, _State.RECOVERING):
                raise WalNotRecovered(
                    f"WAL {self._directory}: call recover() before appending",
                    directory=self._directory,
                )
            if state is _State.FAILED and self._failure is not None:
                failure = self._failure
                raise WalWriteFailed(failure.message, **failure.fields)
            raise WalClosed(f"WAL {self._directory} is closed", directory=self._directory)

    # --- the writer thread ------------------------------------------------------

    def _run(self) -> None:
        name_os_thread()
        batch: list[_Pending] = []
        try:
            while True:
                with self._cond:
                    while not self._queue and self._state is _State.OPEN:
                        timeout = self._sync_timeout()
                        if timeout is not None and timeout <= 0:
                            break
                        self._cond.wait(timeout)
                    batch = list(self._queue)
                    self._queue.clear()
                    closing = self._state is not _State.OPEN
                if batch:
                    self._write(batch)
                    batch = []
                if self._unsynced_frames and (closing or self._sync_due()):
                    self._sync()
                if closing:
                    with self._cond:
                        if not self._queue:
                            return
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear about it
            self._fail(exc, batch)
        finally:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = -1
            if self._direct_appender is not None:
                self._direct_appender.close()
                self._direct_appender = self._appender = None

    def _sync_timeout(self) -> float | None:
        if not self._unsynced_frames:
            return None
        return self._unsynced_since + self._sync_seconds - time.monotonic()

    def _sync_due(self) -> bool:
        if self._unsynced_frames >= self._sync_frames:
            return True
        return time.monotonic() - self._unsynced_since >= self._sync_seconds

    def _write(self, batch: list[_Pending]) -> None:
        if self._stage_observer is not None:
            now = time.perf_counter()
            for item in batch:
                self._observe("queue_wait", now - item.queued_at)
        group = _WriteGroup(self._write_pos)
        for item in batch:
            last_frame = item.frames[-1]
            for frame in item.frames:
                size = frame.size
                active = self._active
                assert active is not None
                if self._write_pos + size > active.size:
                    self._write_group(group, sync=True)  # seal the file before the next one exists
                    self._roll_when_there_is_space(size)
                    group = _WriteGroup(self._write_pos)
                    active = self._active
                    assert active is not None
                item.positions.append(WalPosition(active.seq, self._write_pos, size))
                self._write_pos += size
                if frame.last_offset is not None:
                    with self._files_lock:
                        if frame.last_offset > active.max_offsets.get(frame.key, -1):
                            active.max_offsets[frame.key] = frame.last_offset
                group.buffers += frame.buffers
                group.frames += 1
                group.bytes += size
                if frame is last_frame:
                    # Complete once the group holding its last frame is written (and synced).
                    group.done.append(item)
                if (
                    not self._sync_every_group
                    and self._unsynced_frames + group.frames >= self._sync_frames
                ):
                    self._write_group(group, sync=True)
                    group = _WriteGroup(self._write_pos)
        self._write_group(group, sync=self._sync_every_group)

    def _write_group(self, group: _WriteGroup, *, sync: bool) -> None:
        """Write ``group`` at its position, fsync if asked, complete the entries it finishes.

        Cautious and emergency waiters complete after the fsync, normal ones
        right after the write, before any fsync.
        """
        if group.frames:
            started = time.perf_counter()
            self._append(group.buffers, group.start)
            if self._stage_observer is not None:
                self._observe("write", time.perf_counter() - started)
            if not self._unsynced_frames:
                self._unsynced_since = time.monotonic()
            self._unsynced_frames += group.frames
            self._count(frames=group.frames, bytes=group.bytes, writes=1)
            if not self._sync_every_group:
                for item in group.done:
                    _resolve(item)
        if sync and self._unsynced_frames:
            self._sync()
        if self._sync_every_group:
            for item in group.done:
                _resolve(item)

    def _open_active(self, wal_file: WalFile, end: int) -> None:
        """Open ``wal_file`` for appends at ``end``: with ``O_DIRECT`` where possible."""
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        fd = None
        if self._direct_io and wal_file.size % BLOCK == 0:
            fd = open_direct(wal_file.path, flags)
        if fd is None:
            self._fd = os.open(wal_file.path, flags)
            self._appender = None
            return
        self._fd = fd
        if self._direct_appender is None:
            self._direct_appender = DirectAppender()
        self._direct_appender.start(fd, end, read_tail(wal_file.path, end))
        self._appender = self._direct_appender

    def _append(self, buffers: Sequence[Buffer], offset: int) -> None:
        """Write ``buffers`` back to back at ``offset``, the end of the active file's data."""
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
                active = self._active
                assert active is not None
                fd = os.open(active.path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
                os.close(self._fd)
                self._fd = fd
        _pwrite_all(self._fd, buffers, offset)

    def _observe(self, stage: str, seconds: float) -> None:
        assert self._stage_observer is not None
        try:
            self._stage_observer(stage, seconds)
        except Exception:  # a metrics bug must not stop the WAL
            log.exception("WAL stage observer failed")

    def _sync(self) -> None:
        frames = self._unsynced_frames
        started = time.perf_counter()
        _fdatasync(self._fd)
        seconds = time.perf_counter() - started
        self._unsynced_frames = 0
        with self._stats_lock:
            s = self._stats
            s["fsyncs"] += 1
            s["fsync_seconds"] += seconds
            s["max_frames_per_fsync"] = max(s["max_frames_per_fsync"], frames)
        if self._fsync_observer is not None:
            try:
                self._fsync_observer(seconds, frames)
            except Exception:  # a metrics bug must not stop the WAL
                log.exception("WAL fsync observer failed")

    def _roll(self, next_frame_size: int) -> None:
        """Make a new active file: the current one is written and fsynced already."""
        active = self._active
        assert active is not None and not self._unsynced_frames
        carry = self._carried_checkpoints()
        size = max(self._file_size, sum(map(len, carry)) + next_frame_size)
        new = self._create_file(active.seq + 1, size)
        os.close(self._fd)
        self._fd = -1
        self._open_active(new, 0)
        self._write_pos = 0
        with self._files_lock:
            self._files[new.seq] = new
            self._active = new
        if carry:
            self._append(carry, 0)
            self._write_pos = sum(map(len, carry))
            self._unsynced_since = time.monotonic()
            self._unsynced_frames = len(carry)
            self._count(frames=len(carry), bytes=self._write_pos, writes=1)
            self._sync()

    def _roll_when_there_is_space(self, next_frame_size: int) -> None:
        """`_roll`, waiting while the disk is full (ENOSPC, EDQUOT) instead of failing.

        Nothing is lost by waiting: the file being sealed is written and
        fsynced, the frames still to write stay queued, and every file
        operation of a failed roll is undone.  A full disk is something an
        operator fixes (retention, a bigger volume), so the writer tries again
        with a growing pause (up to `OUT_OF_SPACE_RETRY_MAX_S`) until space
        appears or the WAL closes; closing gives up, and what was still
        queued fails, unacknowledged.
        """
        pause = OUT_OF_SPACE_RETRY_MIN_S
        while True:
            try:
                self._roll(next_frame_size)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                if self._out_of_space is None:
                    log.error(
                        "WAL %s: no space for the next file (%s); appends are refused and "
                        "the queued ones wait until space is freed",
                        self._directory,
                        exc.strerror,
                    )
                    self._count(out_of_space=1)
                self._out_of_space = exc
                with self._cond:
                    if self._state is not _State.OPEN:
                        raise
                    self._cond.wait(pause)
                    if self._state is not _State.OPEN:
                        raise
                pause = min(pause * 2, OUT_OF_SPACE_RETRY_MAX_S)
                continue
            if self._out_of_space is not None:
                log.warning("WAL %s: space again; appends resume", self._directory)
                self._out_of_space = None
            return

    def _carried_checkpoints(self) -> list[bytes]:
        """CHECKPOINT frames for partitions that still have records in live files."""
        with self._files_lock:
            live = {key for f in self._files.values() for key in f.max_offsets}
            flushed = [(key, self._flushed[key]) for key in sorted(live) if key in self._flushed]
        return [
            encode_record_frame(
                topic, partition, base_offset=offset + 1, frame_type=FrameType.CHECKPOINT
            )
            for (topic, partition), offset in flushed
        ]

    def _create_file(self, seq: int, size: int) -> WalFile:
        """Put WAL file ``seq`` in place: the spare prepared for it, or a new one.

        The spare (`_prepare_spare`) spares the writer the preallocation and
        its fsync; the rename and the directory fsync, which make the file a
        WAL file, happen here, when the previous file is sealed.
        """
        path = os.path.join(self._directory, wal_file_name(seq))
        temp = path + TEMP_SUFFIX
        spare, self._spare = self._spare, None
        ready = False
        if spare is not None:
            failed = spare.done.exception()  # waits for it
            ready = failed is None and spare.seq == seq and size == self._file_size
            if not ready:
                with contextlib.suppress(OSError):
                    os.unlink(spare.path)
        if not ready:
            _create_temp_file(temp, size)
        os.replace(temp, path)
        fsync_directory(self._directory)
        self._count(files_created=1)
        if self._state is not _State.RECOVERING:
            self._prepare_spare(seq + 1)
        return WalFile(seq, path, size)

    def _prepare_spare(self, seq: int) -> None:
        """Prepare the next file (``{seq}.wal.tmp``, `_spare_file`) on the spare worker thread.

        It keeps its temporary name until `_create_file` renames it, so a
        crash leaves at most a ``*.wal.tmp`` that recovery removes, never a
        file that would make the active one look sealed.
        """
        spare = _Spare(seq, os.path.join(self._directory, wal_file_name(seq)) + TEMP_SUFFIX)
        if self._spare_worker is None:
            self._spare_worker = ThreadPoolExecutor(
                1, thread_name_prefix="kfs-wal-spare", initializer=name_os_thread
            )
        spare.done = self._spare_worker.submit(self._spare_file, spare.path)
        self._spare = spare

    def _discard_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.done.exception()  # waits for it
            with contextlib.suppress(OSError):
                os.unlink(spare.path)

    def _fail(self, exc: BaseException, batch: list[_Pending]) -> None:
        path = self._active.path if self._active is not None else self._directory
        failure = WalWriteFailed(
            f"WAL write or fsync failed in {path}: {exc!r}; nothing after it is acknowledged, "
            "restart to recover",
            path=path,
        )
        failure.__cause__ = exc  # the OSError, for owners that report it themselves
        log.error("%s", failure.message)
        with self._cond:
            self._state = _State.FAILED
            self._failure = failure
            pending = batch + list(self._queue)
            self._queue.clear()
            listeners, self._failure_listeners = self._failure_listeners, []
        for item in pending:
            _reject(item, WalWriteFailed(failure.message, **failure.fields))
        for listener in listeners:
            _notify(listener, failure)

    def _count(self, **deltas: int) -> None:
        with self._stats_lock:
            s = self._stats
            for name, delta in deltas.items():
                s[name] += delta

    # --- recovery ---------------------------------------------------------------

    def recover(self) -> WalRecovery:
        """Scan the WAL directory, repair a torn tail, start the writer; return what to replay.

        Raises `CorruptWal` (naming the file and byte offset) when a sealed
        file is damaged or a frame's content is not what a KFS writer wrote:
        the daemon must refuse to start -- unless the writer was made with
        ``accept_loss``, when the WAL is cut there (`WalRecovery.cut`).  Runs once.
        """
        with self._cond:
            if self._state is not _State.NEW:
                raise WalError(f"WAL {self._directory}: recover() runs once, before appending")
            self._state = _State.RECOVERING
        try:
            recovery = self._resume(
                recover_wal(self._directory, self._file_size, accept_loss=self._accept_loss)
            )
        except BaseException:
            with self._cond:
                self._state = _State.NEW
            raise
        with self._cond:
            self._state = _State.OPEN
        self._thread = threading.Thread(target=self._run, name="kfs-wal-writer", daemon=True)
        self._thread.start()
        return recovery

    def _resume(self, found: RecoveredWal) -> WalRecovery:
        """Adopt what recovery found: the live files, the flushed offsets, where appends go."""
        recovery = found.recovery
        files = dict(found.files)
        end = found.end
        if not files:
            files[0] = self._create_file(0, self._file_size)
            end = 0
        if self._control_store is not None:
            set_emergency_flag(
                self._control_store, self._namespace, self._durability == "emergency"
            )
        active = files[max(files)]
        self._open_active(active, end)
        self._write_pos = end
        with self._files_lock:
            self._files = files
            self._active = active
            self._flushed = dict(recovery.flushed_offsets)
        self._prepare_spare(active.seq + 1)
        torn = recovery.torn_tail
        log.info(
            "WAL %s recovered: %d files, %d frames, %d batches to replay%s",
            self._directory,
            len(recovery.files),
            recovery.frames_scanned,
            len(recovery.records),
            f", torn tail of {torn.discarded_bytes} bytes at {torn.path}:{torn.position}"
            if torn
            else "",
        )
        return recovery

    # --- shutdown ---------------------------------------------------------------

    def close(self) -> None:
        """Write and fsync every queued frame, stop the writer; later appends raise `WalClosed`.

        Raises `WalWriteFailed` if that last write or fsync fails.  Idempotent.
        """
        with self._cond:
            state = self._state
            if state is _State.OPEN:
                self._state = _State.CLOSING
                self._cond.notify()
            elif state is _State.NEW:
                self._state = _State.CLOSED
        if self._thread is not None:
            self._thread.join()
        self._discard_spare()
        if self._spare_worker is not None:
            self._spare_worker.shutdown(wait=True)
            self._spare_worker = None
        self._stop_recycling()
        with self._cond:
            failure = self._failure if self._state is _State.FAILED else None
            self._state = _State.CLOSED
        if state is _State.OPEN and failure is not None:
            raise WalWriteFailed(failure.message, **failure.fields)


def _seq(wal_file: WalFile) -> int:
    return wal_file.seq
