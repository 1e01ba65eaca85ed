"""`WalWriter`: the daemon's write-ahead log -- the writer thread, group commit, durability.

Every produced batch is framed (`kfs_core.formats.wal`) and appended here
before the producer is acknowledged.  The rest of the WAL lives next door:
the files and their names (`kfs_core.log.wal.files`), the ring of
fixed-size files -- creating, preparing spares, rolling, recycling
(`kfs_core.log.wal.ring`) --, the open file and how bytes reach it
(`kfs_core.log.wal.active_file`), the wait on a full disk
(`kfs_core.log.wal.out_of_space`), checkpoints and the files they free
(`kfs_core.log.wal.checkpoints`), and the start-up scan
(`kfs_core.log.wal.recovery`).

One writer thread owns the active file.  Producers frame their batches on
their own thread (CRC only: a frame is a list of buffers -- header, the
caller's batch bytes, footer -- so the batch is never copied), queue them
and wait on a future; the writer drains everything queued, writes it and
completes the futures.  The write bypasses the page cache where the
filesystem allows (``O_DIRECT``), and is one ``pwritev`` of the frames'
buffers otherwise (`ActiveFile`).  `append_group` queues the
frames of several partitions (one produce request) as one entry with one
future: one hand-off to the writer and one wake-up back, however many
partitions the request names.  Each batch is still its own frame, so
recovery and torn-tail handling do not change.  A frame never spans two
files: when the next one does not fit, the writer fsyncs the current file
(sealing it) and rolls to the next (`WalWriter._roll`).  Durability modes
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

A full disk is not a failure: the writer waits for space to create its next
file (`out_of_space`), and the frames queued wait with it.

A failed write or fsync stops the WAL (`WalWriteFailed`): the waiters of
the failed group and every later append get the error, because after a failed
fsync the kernel may have dropped the dirty pages and a retry could report
durability that does not exist.  The daemon restarts and recovers.  The
error is also `WalWriter.failure`, and the writer thread hands it to every
callback registered with `WalWriter.add_failure_listener` -- a failure of a
timed fsync in ``normal`` mode or of a checkpoint reaches the owner even when
no producer is waiting.

Recovery.  `WalWriter.recover` runs once, before the first append: the scan,
the torn-tail repair and what is replayed are `kfs_core.log.wal.recovery`'s;
the writer takes over the files it found (or creates the first one), sets or
clears the pause flag and starts the writer thread.

This module is library code: no server imports, no Prometheus.  Metrics are
counters (`WalWriter.metrics`) and an optional ``fsync_observer`` callback
the daemon's metrics layer turns into a histogram.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from kfs_core.config import DURABILITY_MODES
from kfs_core.errors import (
    WalClosed,
    WalError,
    WalNotRecovered,
    WalWriteFailed,
)
from kfs_core.formats.wal import WAL_FILE_SIZE, Buffer, record_frame_parts
from kfs_core.log.wal.active_file import ActiveFile
from kfs_core.log.wal.checkpoints import Checkpoints, checkpoint_frame
from kfs_core.log.wal.files import (
    WalPosition,
    batch_last_offset,
    fdatasync,
    wal_file_name,
)
from kfs_core.log.wal.out_of_space import OutOfSpace
from kfs_core.log.wal.recovery import RecoveredWal, WalRecovery, recover_wal
from kfs_core.log.wal.ring import FileRing
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.threads import name_os_thread

if TYPE_CHECKING:
    from kfs_core.config import Settings
    from kfs_core.storage.base import ObjectStore

__all__ = [
    "DEFAULT_FILE_SIZE",
    "BaseWal",
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

# Looked up at call time so tests can slow down or fail the writer's fsyncs
# (recovery's torn-tail repair calls `files.fdatasync` itself).
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


class _Counters:
    """`WalMetrics`' fields, counted in place (a frozen copy per update cost 2 % of the GIL)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[str, Any] = {f.name: f.default for f in fields(WalMetrics)}

    def count(self, **deltas: int) -> None:
        with self._lock:
            s = self._stats
            for name, delta in deltas.items():
                s[name] += delta

    def fsync(self, seconds: float, frames: int) -> None:
        with self._lock:
            s = self._stats
            s["fsyncs"] += 1
            s["fsync_seconds"] += seconds
            s["max_frames_per_fsync"] = max(s["max_frames_per_fsync"], frames)

    def snapshot(self) -> WalMetrics:
        with self._lock:
            return WalMetrics(**self._stats)


def _record_frame(append: WalAppend) -> _Frame:
    """The RECORD frame of ``append``, built on the caller's thread (CRC only, no copy)."""
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


def _checkpoint_entry(topic: str, partition: int, flushed_offset: int) -> _Pending:
    frame = checkpoint_frame(topic, partition, flushed_offset)
    return _Pending([_Frame([frame], len(frame), (topic, partition), None)])


# --- the writer ------------------------------------------------------------


class BaseWal(abc.ABC):
    """What `WalWriter` and `StoreWal` share: one-batch appends and ``with``, over two methods.

    A subclass provides `append_group` (queue the frames, return a future)
    and `close`; `append`, `append_async` and the context manager follow.
    """

    @abc.abstractmethod
    def append_group(self, appends: list[WalAppend]) -> Future[list[WalPosition]]:
        """Queue one RECORD frame per append; the future gives their positions once durable."""

    @abc.abstractmethod
    def close(self) -> None:
        """Write what is queued and stop."""

    def append(
        self, topic: str, partition: int, base_offset: int, batch_bytes: Buffer
    ) -> WalPosition:
        """Append one produced batch (offsets assigned); return once durable per the WAL.

        ``batch_bytes`` is one or more whole RecordBatch v2, the first starting
        at ``base_offset``.  Raises what `append_group` raises, and what its
        future fails with (`WalWriteFailed`, and for the store WAL its
        retriable refusals).
        """
        return self.append_group([WalAppend(topic, partition, base_offset, batch_bytes)]).result()[
            0
        ]

    async def append_async(
        self, topic: str, partition: int, base_offset: int, batch_bytes: Buffer
    ) -> WalPosition:
        """`append` for an event loop: awaits the WAL without blocking the loop.

        Cancelling the awaiting task does not withdraw the frame -- a queued
        frame is written regardless -- so treat a cancelled append as
        "outcome unknown", like a produce request that timed out.
        """
        future = self.append_group([WalAppend(topic, partition, base_offset, batch_bytes)])
        return (await asyncio.shield(asyncio.wrap_future(future)))[0]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class WalWriter(BaseWal):
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

        # Producers <-> writer: the queue and the lifecycle state.
        self._cond = threading.Condition()
        self._queue: deque[_Pending] = deque()
        self._state = _State.NEW
        self._failure: WalWriteFailed | None = None
        self._failure_listeners: list[FailureListener] = []
        self._thread: threading.Thread | None = None

        # The files (the writer rolls, checkpoints retire), the flushed offsets
        # (under the ring's lock) and the wait for disk space.
        self._counters = _Counters()
        self._ring = FileRing(self._directory, file_size, self._counters.count)
        self._checkpoints = Checkpoints(self._ring, self._counters.count)
        self._space = OutOfSpace(self._directory, self._counters.count)

        # Owned by the writer thread once it runs.
        # O_DIRECT appends (`kfs_core.storage.direct_io`) where the filesystem
        # has them and the file size is a whole number of blocks.
        self._file = ActiveFile(self._directory, direct_io=direct_io)
        self._write_pos = 0
        self._unsynced_frames = 0
        self._unsynced_since = 0.0

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
        return self._counters.snapshot()

    @property
    def out_of_space(self) -> bool:
        """Whether the writer is waiting for disk space to start its next file.

        Frames already queued wait with it and are written once there is
        space; the owner should refuse new appends meanwhile (the log's
        `Appender` answers them KAFKA_STORAGE_ERROR; `OutOfSpace`).
        """
        return self._space.error is not None

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
        return self._checkpoints.offsets()

    def flushed_offset(self, topic: str, partition: int) -> int:
        """The partition's highest checkpointed offset; -1 when the WAL has none."""
        return self._checkpoints.offset(topic, partition)

    @property
    def active_file(self) -> str | None:
        return self._ring.active_name()

    def wal_files(self) -> list[str]:
        """Names of the live WAL files, oldest first."""
        return self._ring.names()

    def __repr__(self) -> str:
        return f"WalWriter({self._directory!r}, durability={self._durability!r})"

    # --- appends ----------------------------------------------------------------

    def append_group(self, appends: list[WalAppend]) -> Future[list[WalPosition]]:
        """Queue one RECORD frame per `WalAppend` as one entry; returns at once.

        The future gives the frames' positions, in order, once all of them
        are durable per the mode; frames of one group may land in two files.
        Raises, before queueing anything, `WalNotRecovered`, `WalClosed`,
        `WalWriteFailed`, `CorruptRecordBatch` or ValueError (a bad batch, no
        appends); write failures arrive through the future.  From an event loop, await ``asyncio.wrap_future(future)``
        (the frames are written whether or not anyone still waits).
        """
        if not appends:
            raise ValueError("append_group needs at least one append")
        item = _Pending([_record_frame(append) for append in appends])
        self._submit(item)
        return item.future

    def forget_partition(self, topic: str, partition: int) -> None:
        """Nothing to do: this WAL refuses no partition on its own (`WalLike`)."""

    def checkpoint(self, topic: str, partition: int, flushed_offset: int) -> WalPosition:
        """Record that every offset of the partition at or below ``flushed_offset`` is stored.

        Call after the segment commit.  Writes a CHECKPOINT frame (durable per
        the mode), then deletes the sealed WAL files that hold nothing
        unflushed.  A lower offset than an earlier checkpoint changes nothing.
        """
        item = _checkpoint_entry(topic, partition, flushed_offset)
        self._submit(item)
        (position,) = item.future.result()
        self._ring.retire(self._checkpoints.advance((topic, partition), flushed_offset))
        return position

    async def checkpoint_async(
        self, topic: str, partition: int, flushed_offset: int
    ) -> WalPosition:
        item = _checkpoint_entry(topic, partition, flushed_offset)
        self._submit(item)
        (position,) = await asyncio.shield(asyncio.wrap_future(item.future))
        victims = self._checkpoints.advance((topic, partition), flushed_offset)
        if victims:
            # Renaming or unlinking files is quick, but it is disk I/O: keep it off
            # the loop.  Most checkpoints free no file, and they need no thread at all.
            await asyncio.to_thread(self._ring.retire, victims)
        return position

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
            self._file.close()

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
        ring = self._ring
        for item in batch:
            last_frame = item.frames[-1]
            for frame in item.frames:
                size = frame.size
                active = ring.active
                assert active is not None
                if self._write_pos + size > active.size:
                    self._write_group(group, sync=True)  # seal the file before the next one exists
                    self._space.roll(functools.partial(self._roll, size), self._wait_while_open)
                    group = _WriteGroup(self._write_pos)
                    active = ring.active
                    assert active is not None
                item.positions.append(WalPosition(active.seq, self._write_pos, size))
                self._write_pos += size
                if frame.last_offset is not None:
                    with ring.lock:
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
            self._file.append(group.buffers, group.start)
            if self._stage_observer is not None:
                self._observe("write", time.perf_counter() - started)
            if not self._unsynced_frames:
                self._unsynced_since = time.monotonic()
            self._unsynced_frames += group.frames
            self._counters.count(frames=group.frames, bytes=group.bytes, writes=1)
            if not self._sync_every_group:
                for item in group.done:
                    _resolve(item)
        if sync and self._unsynced_frames:
            self._sync()
        if self._sync_every_group:
            for item in group.done:
                _resolve(item)

    def _observe(self, stage: str, seconds: float) -> None:
        assert self._stage_observer is not None
        try:
            self._stage_observer(stage, seconds)
        except Exception:  # a metrics bug must not stop the WAL
            log.exception("WAL stage observer failed")

    def _sync(self) -> None:
        frames = self._unsynced_frames
        started = time.perf_counter()
        _fdatasync(self._file.fd)
        seconds = time.perf_counter() - started
        self._unsynced_frames = 0
        self._counters.fsync(seconds, frames)
        if self._fsync_observer is not None:
            try:
                self._fsync_observer(seconds, frames)
            except Exception:  # a metrics bug must not stop the WAL
                log.exception("WAL fsync observer failed")

    def _roll(self, next_frame_size: int) -> None:
        """Make the next file the active one: the current one is written and fsynced already.

        The ring puts the file in place (`FileRing.next_file`); it starts
        with the checkpoints carried over (`Checkpoints.carried_frames`).
        """
        assert not self._unsynced_frames
        carry = self._checkpoints.carried_frames()
        new = self._ring.next_file(sum(map(len, carry)) + next_frame_size)
        self._file.seal()
        self._file.open(new, 0)
        self._write_pos = 0
        self._ring.activate(new)
        if carry:
            self._file.append(carry, 0)
            self._write_pos = sum(map(len, carry))
            self._unsynced_since = time.monotonic()
            self._unsynced_frames = len(carry)
            self._counters.count(frames=len(carry), bytes=self._write_pos, writes=1)
            self._sync()

    def _wait_while_open(self, seconds: float) -> bool:
        """Wait up to ``seconds`` (a close ends it); whether the WAL is still open."""
        with self._cond:
            if self._state is not _State.OPEN:
                return False
            self._cond.wait(seconds)
            return self._state is _State.OPEN

    def _fail(self, exc: BaseException, batch: list[_Pending]) -> None:
        active = self._ring.active
        path = active.path if active is not None else self._directory
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
        active, end = self._ring.resume(found.files, found.end)
        if self._control_store is not None:
            set_emergency_flag(
                self._control_store, self._namespace, self._durability == "emergency"
            )
        self._file.open(active, end)
        self._write_pos = end
        self._checkpoints.adopt(recovery.flushed_offsets)
        self._ring.prepare_spare(active.seq + 1)
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
        self._ring.close()
        with self._cond:
            failure = self._failure if self._state is _State.FAILED else None
            self._state = _State.CLOSED
        if state is _State.OPEN and failure is not None:
            raise WalWriteFailed(failure.message, **failure.fields)
