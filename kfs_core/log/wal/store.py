"""The ``store`` durability mode's WAL: one object store PUT per interval, and its replay.

In ``store`` mode a produce is acknowledged once its records are in the
object store, so losing the machine loses nothing.  `StoreWal` stands in for
`WalWriter` (same names, same meaning, see `kfs_core.log.wal.WalLike`): the
appends of every partition queued during one interval
(``KFS_STORE_WAL_INTERVAL_MS``, counted from the first queued append) become
one object, written with one ``put_parts``; the futures complete once the PUT
returned and the partition's lease is still valid.  `StoreWalReader` is the
other side: a daemon taking a partition reads the chain of batches above the
catalog's end from every writer's objects, and sweeps objects that no
partition needs any more.

Object key: ``{ns}/_wal/{node_id}/{incarnation}/{seq:020}.wal``.  All
integers are big-endian::

    offset   size  field
    0        4     magic b"KFWO"
    4        2     format version, 1                                  (u16)
    6        2     flags, 0                                           (u16)
    8        4     header length h, the CRC included                  (u32)
    12       4     writer's node id                                   (i32)
    16       8     object sequence number, per incarnation            (u64)
    24       1     incarnation length i                               (u8)
    25       i     incarnation, UTF-8
    25+i     4     entry count n                                      (u32)
    29+i     ...   n entries, one per frame, in body order:
                     2   topic length t                               (u16)
                     t   topic, UTF-8
                     4   partition                                    (i32)
                     4   leader epoch the append was accepted under   (i32)
                     8   first offset                                 (i64)
                     8   last offset                                  (i64)
                     8   frame position in the object                 (u64)
                     4   frame size                                   (u32)
    h-4      4     CRC-32C of bytes 0..h-4                            (u32)
    h        ...   the frames, back to back, in the local WAL's RECORD frame
                   format (`kfs_core.formats.wal`); the first at h, each
                   entry's frame right after the previous one's

The CRC at its end covers the header; every frame carries its own header and
data CRC, so a reader checks the frames it fetches without reading the others.  The table
of contents lets a reader skip an object with one ranged GET of its header,
and fetch only the frames of the partition it replays.

Replay (`StoreWalReader.read_partition`) follows the chain from the
catalog's end: each step the frame that starts at the next offset (the first
one may straddle it), the highest leader epoch winning when several do and
an epoch never lower than the one before -- a deposed owner's late, never
acknowledged write loses to the new owner's -- and, at one epoch, the later
object of the writer (a rewrite after a PUT whose answer was lost).  It stops
at the first gap.

A failed PUT does not stop the WAL (unlike a failed fsync, `WalWriteFailed`):
its appends fail with the retriable `StoreWalUnavailable` and later objects
are tried again.  Because the log assigned offsets to the failed appends,
the writer then refuses (with the same error) every later frame of those
partitions that does not start at or below the first lost offset, so an
acknowledged frame never sits above a hole.  The log drops the partition to go
on (`StoreWal.forget_partition`), and every frame that partition had queued
by then is refused as well, whichever of the writer thread and the log gets
there first: written, such a frame would be an unacknowledged record above
the hole -- the next holder would replay it, and an idempotent producer
retrying the lost batch below it would meet a sequence gap.  So the store
holds a partition's frames of one holder without a hole, and a frame is
acknowledged only under the lease epoch it was queued under.

What a replay makes of a producer whose sequence the chain still breaks is
the log's (`kfs_core.log.appender`, "Replay").
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import crc32c

from kfs_core.errors import (
    CorruptWal,
    NotLeaderOrFollower,
    ObjectNotFound,
    ObjectStoreError,
    StoreWalUnavailable,
    WalClosed,
    WalError,
    WalNotRecovered,
    WalWriteFailed,
)
from kfs_core.formats.wal import Buffer, FrameType, WalReader, record_frame_parts
from kfs_core.log.wal.files import WalPosition, batch_last_offset
from kfs_core.log.wal.recovery import RecoveredBatch, WalRecovery
from kfs_core.log.wal.writer import (
    BaseWal,
    FailureListener,
    FsyncObserver,
    StageObserver,
    WalAppend,
    WalMetrics,
)
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.namespace import WAL_DIR
from kfs_core.storage.base import ByteRange
from kfs_core.threads import name_os_thread

if TYPE_CHECKING:
    from kfs_core.config import Settings
    from kfs_core.storage.base import ObjectInfo, ObjectStore

__all__ = [
    "OBJECT_MAGIC",
    "OBJECT_VERSION",
    "StoreWal",
    "StoreWalMetrics",
    "StoreWalReader",
    "WalObjectEntry",
    "WalObjectHeader",
    "decode_header",
    "encode_header",
    "wal_object_key",
    "wal_prefix",
]

log = logging.getLogger(__name__)

# --- the object format -------------------------------------------------------

OBJECT_MAGIC = b"KFWO"
OBJECT_VERSION = 1
OBJECT_SUFFIX = ".wal"

HEAD = struct.Struct(
    ">4s"  # magic b"KFWO"
    "H"  # format version
    "H"  # flags, 0
    "I"  # header length h, the CRC included
    "i"  # writer's node id
    "Q"  # object sequence number
    "B"  # incarnation length
)
HEADER_LENGTH_AT = struct.calcsize(">4sHH")  # 8
HEADER_LENGTH = struct.Struct(">I")
ENTRY_COUNT = struct.Struct(">I")  # entry count
TOPIC_LENGTH = struct.Struct(">H")  # an entry's topic length
ENTRY = struct.Struct(
    ">i"  # partition
    "i"  # leader epoch
    "q"  # first offset
    "q"  # last offset
    "Q"  # frame position in the object
    "I"  # frame size
)
HEADER_CRC = struct.Struct(">I")  # CRC-32C of the header before it
MAX_INCARNATION_BYTES = 255
#: The first ranged GET of an object's header; a longer header costs one more.
HEADER_READ_BYTES = 16 << 10
#: Header (and frame) reads a takeover replay keeps in flight at once (each one ranged GET).
HEADER_READERS = 16
_NO_EPOCH = -(2**31)

_KEY = re.compile(r"^(?P<node>\d+)/(?P<incarnation>[^/]+)/(?P<seq>\d{20})\.wal$")


@dataclass(frozen=True, slots=True)
class WalObjectEntry:
    """One frame of a WAL object, as its header lists it."""

    topic: str
    partition: int
    leader_epoch: int
    first_offset: int
    last_offset: int
    position: int  # of the frame, from the start of the object
    size: int  # of the frame

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(frozen=True, slots=True)
class WalObjectHeader:
    """A WAL object's header: who wrote it, and its table of contents."""

    node_id: int
    incarnation: str
    seq: int
    entries: tuple[WalObjectEntry, ...]
    length: int  # header bytes, the CRC included: the first frame starts here

    def entries_for(self, topic: str, partition: int) -> list[WalObjectEntry]:
        return [e for e in self.entries if e.partition == partition and e.topic == topic]


def wal_prefix(namespace: str) -> str:
    """``{ns}/_wal/``: where every writer's WAL objects live."""
    return f"{namespace}/{WAL_DIR}/"


def wal_object_key(namespace: str, node_id: int, incarnation: str, seq: int) -> str:
    """``{ns}/_wal/{node_id}/{incarnation}/{seq:020}.wal``."""
    return f"{wal_prefix(namespace)}{node_id}/{incarnation}/{seq:020}{OBJECT_SUFFIX}"


def _topic_bytes(topic: str) -> bytes:
    data = topic.encode("utf-8")
    if len(data) > 0xFFFF:
        raise ValueError(f"topic name of {len(data)} bytes is too long for a WAL object")
    return data


def _check_incarnation(incarnation: str) -> bytes:
    data = incarnation.encode("utf-8")
    if not data or len(data) > MAX_INCARNATION_BYTES or "/" in incarnation:
        raise ValueError(
            f"incarnation {incarnation!r}: expected 1 to {MAX_INCARNATION_BYTES} bytes, no '/'"
        )
    if incarnation in (".", "..") or incarnation.startswith(".kfs-tmp"):
        raise ValueError(f"incarnation {incarnation!r} is not a valid key segment")
    return data


def encode_header(
    node_id: int,
    incarnation: str,
    seq: int,
    entries: Sequence[tuple[str, int, int, int, int, int]],
) -> bytes:
    """The header of an object whose frames follow it, in order.

    ``entries`` are ``(topic, partition, leader_epoch, first_offset,
    last_offset, frame_size)``; positions follow from the sizes.
    """
    incarnation_bytes = _check_incarnation(incarnation)
    topics = [_topic_bytes(e[0]) for e in entries]
    length = (
        HEAD.size
        + len(incarnation_bytes)
        + ENTRY_COUNT.size
        + sum(TOPIC_LENGTH.size + len(t) + ENTRY.size for t in topics)
        + HEADER_CRC.size
    )
    out = bytearray(
        HEAD.pack(OBJECT_MAGIC, OBJECT_VERSION, 0, length, node_id, seq, len(incarnation_bytes))
    )
    out += incarnation_bytes
    out += ENTRY_COUNT.pack(len(entries))
    position = length
    for topic, (_, partition, epoch, first, last, size) in zip(topics, entries, strict=True):
        out += TOPIC_LENGTH.pack(len(topic))
        out += topic
        out += ENTRY.pack(partition, epoch, first, last, position, size)
        position += size
    out += HEADER_CRC.pack(crc32c.crc32c(out))
    return bytes(out)


def header_length(data: Buffer, object_name: str) -> int:
    """The header length an object's first bytes announce (checked against the magic)."""
    view = memoryview(data)
    if len(view) < HEAD.size or bytes(view[:4]) != OBJECT_MAGIC:
        raise CorruptWal(
            f"not a WAL object: magic {bytes(view[:4])!r}, expected {OBJECT_MAGIC!r}",
            object_name=object_name,
            offset=0,
        )
    (length,) = HEADER_LENGTH.unpack_from(view, HEADER_LENGTH_AT)
    return int(length)


def decode_header(data: Buffer, object_name: str = "<wal object>") -> WalObjectHeader:
    """Decode and check the header at the start of ``data`` (the rest is ignored).

    Raises `CorruptWal` naming ``object_name`` and the byte offset: a wrong
    magic or version, a header CRC mismatch, entries that do not fit or do
    not follow each other.
    """
    view = memoryview(data)
    length = header_length(view, object_name)
    _magic, version, _flags, _, node_id, seq, inc_length = HEAD.unpack_from(view, 0)
    if version != OBJECT_VERSION:
        raise CorruptWal(
            f"WAL object format version {version}, expected {OBJECT_VERSION}",
            object_name=object_name,
            offset=4,
        )
    if length > len(view) or length < HEAD.size + ENTRY_COUNT.size + HEADER_CRC.size:
        raise CorruptWal(
            f"header length {length} does not fit the {len(view)} bytes read",
            object_name=object_name,
            offset=HEADER_LENGTH_AT,
        )
    crc_at = length - HEADER_CRC.size
    (stored_crc,) = HEADER_CRC.unpack_from(view, crc_at)
    if crc32c.crc32c(view[:crc_at]) != stored_crc:
        raise CorruptWal("header CRC-32C mismatch", object_name=object_name, offset=crc_at)

    def corrupt(reason: str, at: int) -> CorruptWal:
        return CorruptWal(reason, object_name=object_name, offset=at)

    pos = HEAD.size
    try:
        incarnation = str(view[pos : pos + inc_length], "utf-8")
        pos += inc_length
        (count,) = ENTRY_COUNT.unpack_from(view, pos)
        pos += ENTRY_COUNT.size
        entries: list[WalObjectEntry] = []
        expected_position = length
        for _ in range(count):
            at = pos
            (topic_length,) = TOPIC_LENGTH.unpack_from(view, pos)
            pos += TOPIC_LENGTH.size
            topic = str(view[pos : pos + topic_length], "utf-8")
            pos += topic_length
            partition, epoch, first, last, position, size = ENTRY.unpack_from(view, pos)
            pos += ENTRY.size
            if pos > crc_at:
                raise corrupt("the entries run into the header CRC", at)
            if position != expected_position or first > last:
                raise corrupt(
                    f"entry {topic}-{partition} {first}..{last} at {position}: "
                    f"expected a frame at {expected_position}",
                    at,
                )
            expected_position = position + size
            entries.append(WalObjectEntry(topic, partition, epoch, first, last, position, size))
    except UnicodeDecodeError:
        raise corrupt("a name in the header is not UTF-8", pos) from None
    except struct.error:
        raise corrupt("the entries run past the header", pos) from None
    if pos != crc_at:
        raise corrupt(f"{crc_at - pos} bytes between the last entry and the CRC", pos)
    return WalObjectHeader(node_id, incarnation, seq, tuple(entries), length)


# --- the writer --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreWalMetrics(WalMetrics):
    """`WalMetrics` of a `StoreWal`: ``writes`` and ``files_created`` count objects.

    No fsyncs; ``files_deleted`` counts objects deleted after checkpoints.
    """

    objects: int = 0  # objects written
    put_seconds: float = 0.0  # total time in the PUTs that succeeded
    put_failures: int = 0  # PUTs that failed: their appends were refused
    lease_refusals: int = 0  # appends written but refused: their lease had ended
    delete_failures: int = 0


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(slots=True)
class _Frame:
    buffers: list[Buffer]
    size: int
    topic: str
    partition: int
    epoch: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class _Pending:
    frames: list[_Frame]
    size: int
    serial: int = 0  # its place in queue order, set under the queue's lock
    future: Future[list[WalPosition]] = field(default_factory=Future)
    queued_at: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _LiveObject:
    """An object this writer wrote and has not deleted: how many partitions still need it."""

    key: str
    unflushed: int


def _resolve(item: _Pending, positions: list[WalPosition]) -> None:
    with contextlib.suppress(InvalidStateError):
        item.future.set_result(positions)


def _reject(item: _Pending, exc: BaseException) -> None:
    with contextlib.suppress(InvalidStateError):
        item.future.set_exception(exc)


class _Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[str, Any] = {f.name: f.default for f in fields(StoreWalMetrics)}

    def count(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                self._stats[name] += delta

    def snapshot(self) -> StoreWalMetrics:
        with self._lock:
            return StoreWalMetrics(**self._stats)


def _no_epoch(topic: str, partition: int) -> int:
    return 0


def _always_valid(topic: str, partition: int) -> bool:
    return True


class StoreWal(BaseWal):
    """The ``store`` mode WAL of one daemon incarnation: a drop-in for `WalWriter`.

    Lifecycle: construct, `recover` (once; starts the threads, returns
    nothing to replay), then `append_group` / `checkpoint` from any thread,
    then `close`.  ``epoch_of(topic, partition)`` is the leader epoch an
    append is accepted under (read on the caller's thread, when it
    appends); ``lease_valid(topic, partition)`` is asked after the PUT
    returned, and an append of a partition whose lease ended meanwhile, or
    whose epoch is no longer the one it was queued under, fails with
    `NotLeaderOrFollower`.  ``directory`` is a local directory for what
    the log keeps beside the WAL (producer-state snapshots); nothing of the
    WAL is written there.
    """

    def __init__(
        self,
        store: ObjectStore,
        namespace: str,
        node_id: int,
        incarnation: str,
        directory: str | os.PathLike[str],
        *,
        interval_ms: float = 20,
        epoch_of: Callable[[str, int], int] = _no_epoch,
        lease_valid: Callable[[str, int], bool] = _always_valid,
        max_object_bytes: int = 64 << 20,
        fsync_observer: FsyncObserver | None = None,
        stage_observer: StageObserver | None = None,
        delete_retry_s: float = 1.0,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        if node_id < 0:
            raise ValueError(f"node_id must not be negative, got {node_id}")
        _check_incarnation(incarnation)
        self._store = store
        self._namespace = namespace
        self._node_id = node_id
        self._incarnation = incarnation
        self._directory = os.path.abspath(os.fspath(directory))
        self._interval = interval_ms / 1000
        self._epoch_of = epoch_of
        self._lease_valid = lease_valid
        self._max_object_bytes = max_object_bytes
        self._fsync_observer = fsync_observer
        self._stage_observer = stage_observer
        self._delete_retry_s = delete_retry_s
        self._counters = _Counters()

        # Producers <-> writer thread.
        self._cond = threading.Condition()
        self._queue: deque[_Pending] = deque()
        self._queued_bytes = 0
        self._queued_frames = 0
        self._state = _State.NEW
        self._failure: WalWriteFailed | None = None
        self._failure_listeners: list[FailureListener] = []
        self._writer: threading.Thread | None = None
        self._next_serial = 0  # the serial of the next item queued
        # Partitions the log forgot (`forget_partition`) since the writer last
        # looked: the first serial queued after that.
        self._forgotten: dict[tuple[str, int], int] = {}

        # Owned by the writer thread.
        self._next_seq = 0
        self._outage_failures = 0  # PUTs failed since the last one that succeeded
        # Partitions whose frames a failed PUT lost: the first lost offset.
        self._lost_from: dict[tuple[str, int], int] = {}
        # Partitions the log forgot: items queued before this serial are refused.
        self._dropped_before: dict[tuple[str, int], int] = {}

        # Checkpoints and the objects they free (under ``_lock``).
        self._lock = threading.Lock()
        self._flushed: dict[tuple[str, int], int] = {}
        self._live: dict[int, _LiveObject] = {}
        self._by_partition: dict[tuple[str, int], deque[tuple[int, int]]] = {}

        # Deletions run on their own thread, off the producers' and the writer's path.
        self._gc_cond = threading.Condition()
        self._doomed: list[str] = []
        self._gc_stop = False
        self._gc: threading.Thread | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, store: ObjectStore, incarnation: str, **options: Any
    ) -> StoreWal:
        """The store WAL of ``settings.node_id`` / ``incarnation`` in ``settings.namespace``.

        ``directory`` is ``{settings.data_dir}/wal``, the local WAL's place,
        so the log's producer-state snapshots stay where they are whatever
        the mode.
        """
        return cls(
            store,
            settings.namespace,
            settings.node_id,
            incarnation,
            Path(settings.data_dir) / "wal",
            interval_ms=settings.store_wal_interval_ms,
            **options,
        )

    # --- properties ---------------------------------------------------------------

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def durability(self) -> str:
        return "store"

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def incarnation(self) -> str:
        return self._incarnation

    @property
    def prefix(self) -> str:
        """``{ns}/_wal/{node_id}/{incarnation}/``: this writer's objects."""
        return f"{wal_prefix(self._namespace)}{self._node_id}/{self._incarnation}/"

    @property
    def metrics(self) -> StoreWalMetrics:
        return self._counters.snapshot()

    @property
    def out_of_space(self) -> bool:
        """Always False: the store WAL needs no local disk space."""
        return False

    @property
    def failure(self) -> WalWriteFailed | None:
        """What stopped the WAL (an unexpected error of its thread); failed PUTs do not."""
        with self._cond:
            return self._failure

    def add_failure_listener(self, listener: FailureListener) -> None:
        """Call ``listener`` once if the WAL stops (never for a failed PUT); see `failure`."""
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
            return self._queued_frames

    @property
    def flushed_offsets(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._flushed)

    def flushed_offset(self, topic: str, partition: int) -> int:
        """The partition's highest checkpointed offset; -1 when there is none."""
        with self._lock:
            return self._flushed.get((topic, partition), -1)

    @property
    def active_file(self) -> str | None:
        return None

    def wal_files(self) -> list[str]:
        """Keys of this writer's objects not yet deleted (or queued for deletion), oldest first."""
        with self._lock:
            return [self._live[seq].key for seq in sorted(self._live)]

    def __repr__(self) -> str:
        return f"StoreWal({self.prefix!r})"

    # --- appends --------------------------------------------------------------------

    def append_group(self, appends: list[WalAppend]) -> Future[list[WalPosition]]:
        """Queue one RECORD frame per `WalAppend`; returns at once.

        The future gives each frame's position (object sequence number,
        byte position, size) once the object holding them is in the store
        and every partition's lease held; it fails with `StoreWalUnavailable`
        (retriable) when the PUT failed and with `NotLeaderOrFollower` when a
        lease ended first.  Raises before queueing what `WalWriter.append_group`
        raises for a bad batch or a WAL that is not open.
        """
        if not appends:
            raise ValueError("append_group needs at least one append")
        frames = [self._frame(a) for a in appends]
        item = _Pending(frames, sum(f.size for f in frames))
        with self._cond:
            state = self._state
            if state is _State.OPEN:
                item.serial = self._next_serial
                self._next_serial += 1
                self._queue.append(item)
                self._queued_bytes += item.size
                self._queued_frames += len(frames)
                self._cond.notify()
                return item.future
            if state is _State.NEW:
                raise WalNotRecovered(
                    f"store WAL {self.prefix}: call recover() before appending",
                    directory=self._directory,
                )
            if state is _State.FAILED and self._failure is not None:
                raise WalWriteFailed(self._failure.message, **self._failure.fields)
            raise WalClosed(f"store WAL {self.prefix} is closed", directory=self._directory)

    def _frame(self, append: WalAppend) -> _Frame:
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
        return _Frame(
            buffers,
            sum(map(len, buffers)),
            topic,
            partition,
            self._epoch_of(topic, partition),
            base_offset,
            last_offset,
        )

    # --- checkpoints ----------------------------------------------------------------

    def checkpoint(self, topic: str, partition: int, flushed_offset: int) -> None:
        """Record that every offset of the partition at or below ``flushed_offset`` is stored.

        Objects whose every frame is flushed are deleted on a background
        thread.  A lower offset than an earlier checkpoint changes nothing.
        Nothing is written: the catalog is the record of what is flushed.
        """
        key = (topic, partition)
        victims: list[str] = []
        with self._lock:
            if flushed_offset <= self._flushed.get(key, -1):
                return
            self._flushed[key] = flushed_offset
            objects = self._by_partition.get(key)
            while objects and objects[0][1] <= flushed_offset:
                seq, _ = objects.popleft()
                live = self._live[seq]
                live.unflushed -= 1
                if live.unflushed == 0:
                    victims.append(self._live.pop(seq).key)
            if objects is not None and not objects:
                del self._by_partition[key]
        self._counters.count(checkpoints=1)
        if victims:
            self._delete_later(victims)

    async def checkpoint_async(self, topic: str, partition: int, flushed_offset: int) -> None:
        """`checkpoint`; it never blocks, so this is the same call for an event loop."""
        self.checkpoint(topic, partition, flushed_offset)

    def forget_partition(self, topic: str, partition: int) -> None:
        """The log dropped the partition: refuse its frames queued so far, forget its lost offsets.

        Frames queued before this call were assigned offsets by the dropped
        partition; written, they would sit in the store unacknowledged, where
        a failed PUT may have left a hole below them, and a takeover would
        replay them above it.  The writer refuses them (`StoreWalUnavailable`)
        however its thread and this call interleave: what counts is queue
        order.  Frames queued after it (the partition opened again) go on.
        """
        with self._cond:
            self._forgotten[(topic, partition)] = self._next_serial

    # --- the writer thread ---------------------------------------------------------

    def _run_writer(self) -> None:
        name_os_thread()
        batch: list[_Pending] = []
        try:
            while True:
                with self._cond:
                    while not self._queue and self._state is _State.OPEN:
                        self._cond.wait()
                    if self._queue and self._state is _State.OPEN:
                        deadline = self._queue[0].queued_at + self._interval
                        while (
                            self._state is _State.OPEN
                            and self._queued_bytes < self._max_object_bytes
                        ):
                            left = deadline - time.monotonic()
                            if left <= 0:
                                break
                            self._cond.wait(left)
                    batch = list(self._queue)
                    self._queue.clear()
                    self._queued_bytes = self._queued_frames = 0
                    forgotten, self._forgotten = self._forgotten, {}
                    closing = self._state is not _State.OPEN
                for pk, serial in forgotten.items():
                    self._lost_from.pop(pk, None)
                    self._dropped_before[pk] = serial
                if batch:
                    self._write(batch)
                    batch = []
                if closing:
                    with self._cond:
                        if not self._queue:
                            return
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear about it
            self._fail(exc, batch)

    def _write(self, batch: list[_Pending]) -> None:
        now = time.monotonic()
        if self._stage_observer is not None:
            for item in batch:
                self._observe("queue_wait", now - item.queued_at)
        items = [item for item in batch if self._current(item) and self._contiguous(item)]
        if not items:
            return
        seq = self._next_seq
        self._next_seq += 1
        key = wal_object_key(self._namespace, self._node_id, self._incarnation, seq)
        frames = [frame for item in items for frame in item.frames]
        header = encode_header(
            self._node_id,
            self._incarnation,
            seq,
            [(f.topic, f.partition, f.epoch, f.base_offset, f.last_offset, f.size) for f in frames],
        )
        parts: list[Buffer] = [header]
        for frame in frames:
            parts += frame.buffers
        size = len(header) + sum(f.size for f in frames)
        started = time.perf_counter()
        try:
            self._store.put_parts(key, parts)
        except ObjectStoreError as exc:
            self._put_failed(key, items, exc)
            return
        seconds = time.perf_counter() - started
        if self._outage_failures:
            log.warning(
                "store WAL %s: PUTs succeed again after %d failed object(s)",
                self.prefix,
                self._outage_failures,
            )
            self._outage_failures = 0
        self._counters.count(
            objects=1,
            writes=1,
            files_created=1,
            frames=len(frames),
            bytes=size,
            put_seconds=seconds,
        )
        self._observe("write", seconds)
        if self._fsync_observer is not None:
            try:
                self._fsync_observer(seconds, len(frames))
            except Exception:  # a metrics bug must not stop the WAL
                log.exception("store WAL fsync observer failed")
        self._track(seq, key, frames)
        self._complete(seq, len(header), items)

    def _current(self, item: _Pending) -> bool:
        """False (and the item refused) if the log dropped a partition of it after queueing it."""
        dropped = self._dropped_before
        if not dropped:
            return True
        for frame in item.frames:
            pk = (frame.topic, frame.partition)
            before = dropped.get(pk)
            if before is None:
                continue
            if item.serial >= before:
                del dropped[pk]  # queued by the partition opened again: later ones are too
                continue
            _reject(
                item,
                StoreWalUnavailable(
                    f"{frame.topic}-{frame.partition}: the log dropped the partition after "
                    f"offsets {frame.base_offset}..{frame.last_offset} were queued; they are "
                    "not written"
                ),
            )
            return False
        return True

    def _contiguous(self, item: _Pending) -> bool:
        """False (and the item refused) if it would put a frame above offsets a failed PUT lost."""
        lost = self._lost_from
        if not lost:
            return True
        for frame in item.frames:
            first_lost = lost.get((frame.topic, frame.partition))
            if first_lost is not None and frame.base_offset > first_lost:
                error = StoreWalUnavailable(
                    f"{frame.topic}-{frame.partition}: offsets from {first_lost} were not "
                    "written to the store WAL; appends above them are refused until the "
                    "log starts again from there"
                )
                self._lose(item, error)
                return False
        for frame in item.frames:
            first_lost = lost.get((frame.topic, frame.partition))
            if first_lost is not None and frame.base_offset <= first_lost:
                lost.pop((frame.topic, frame.partition), None)  # the log rewound: go on
        return True

    def _lose(self, item: _Pending, error: BaseException) -> None:
        """Refuse ``item``: each of its partitions has a hole from its first frame on."""
        for frame in item.frames:
            key = (frame.topic, frame.partition)
            self._lost_from[key] = min(
                self._lost_from.get(key, frame.base_offset), frame.base_offset
            )
        _reject(item, error)

    def _put_failed(self, key: str, items: list[_Pending], exc: ObjectStoreError) -> None:
        self._outage_failures += 1
        self._counters.count(put_failures=1)
        if self._outage_failures == 1:  # once per outage; the recovery is logged too
            log.error(
                "store WAL: PUT of %s failed: %s; its appends are refused (retriable) and "
                "later objects are tried again",
                key,
                exc,
            )
        for item in items:
            error = StoreWalUnavailable(f"the store WAL object {key} could not be written: {exc}")
            error.__cause__ = exc
            self._lose(item, error)
        # A PUT that failed late may have landed all the same: it holds nothing acknowledged.
        self._delete_later([key])

    def _track(self, seq: int, key: str, frames: list[_Frame]) -> None:
        """Remember which partitions need the object, so checkpoints can free it."""
        highest: dict[tuple[str, int], int] = {}
        for frame in frames:
            pk = (frame.topic, frame.partition)
            highest[pk] = max(highest.get(pk, -1), frame.last_offset)
        with self._lock:
            unflushed = 0
            for pk, last in highest.items():
                if last > self._flushed.get(pk, -1):
                    unflushed += 1
                    self._by_partition.setdefault(pk, deque()).append((seq, last))
            if unflushed:
                self._live[seq] = _LiveObject(key, unflushed)
        if not unflushed:
            self._delete_later([key])

    def _complete(self, seq: int, position: int, items: list[_Pending]) -> None:
        """Resolve the items written, unless their partition's lease ended meanwhile."""
        valid: dict[tuple[str, int], bool] = {}
        refused = 0
        for item in items:
            positions: list[WalPosition] = []
            error: NotLeaderOrFollower | None = None
            for frame in item.frames:
                positions.append(WalPosition(seq, position, frame.size))
                position += frame.size
                pk = (frame.topic, frame.partition)
                ok = valid.get(pk)
                if ok is None:
                    ok = valid[pk] = self._lease_holds(*pk)
                if ok and self._epoch_now(*pk) != frame.epoch:
                    ok = False  # queued under another epoch (or none): not this lease's append
                if not ok and error is None:
                    error = NotLeaderOrFollower(
                        f"{frame.topic}-{frame.partition}: this daemon's lease ended before "
                        "its WAL object was written",
                        topic=frame.topic,
                        partition=frame.partition,
                    )
            if error is None:
                _resolve(item, positions)
            else:
                refused += 1
                _reject(item, error)
        if refused:
            self._counters.count(lease_refusals=refused)

    def _epoch_now(self, topic: str, partition: int) -> int | None:
        try:
            return int(self._epoch_of(topic, partition))
        except Exception:  # not knowing is not holding; a bug there must not stop the WAL
            log.exception("store WAL: the epoch of %s-%d could not be read", topic, partition)
            return None

    def _lease_holds(self, topic: str, partition: int) -> bool:
        try:
            return bool(self._lease_valid(topic, partition))
        except Exception:  # not knowing is not holding; a bug there must not stop the WAL
            log.exception("store WAL: the lease check of %s-%d failed", topic, partition)
            return False

    def _observe(self, stage: str, seconds: float) -> None:
        if self._stage_observer is None:
            return
        try:
            self._stage_observer(stage, seconds)
        except Exception:  # a metrics bug must not stop the WAL
            log.exception("store WAL stage observer failed")

    def _fail(self, exc: BaseException, batch: list[_Pending]) -> None:
        failure = WalWriteFailed(
            f"store WAL {self.prefix} stopped: {exc!r}; nothing after it is acknowledged",
            path=self.prefix,
        )
        failure.__cause__ = exc
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

    # --- deletions ------------------------------------------------------------------

    def _delete_later(self, keys: list[str]) -> None:
        with self._gc_cond:
            self._doomed += keys
            self._gc_cond.notify()

    def _run_gc(self) -> None:
        name_os_thread()
        failing = False
        while True:
            with self._gc_cond:
                while not self._doomed and not self._gc_stop:
                    self._gc_cond.wait()
                keys, self._doomed = self._doomed, []
                stopping = self._gc_stop
            left: list[str] = []
            for key in keys:
                try:
                    self._store.delete(key)
                except ObjectStoreError as exc:
                    left.append(key)
                    self._counters.count(delete_failures=1)
                    if not failing:
                        log.warning("store WAL: deleting %s failed: %s; will retry", key, exc)
                    failing = True
                else:
                    self._counters.count(files_deleted=1)
                    failing = False
            if stopping:
                if left:
                    log.warning(
                        "store WAL: %d flushed object(s) not deleted at close; the sweep "
                        "of another daemon (or the next start) removes them",
                        len(left),
                    )
                return
            if left:
                with self._gc_cond:
                    self._doomed[:0] = left
                    self._gc_cond.wait(self._delete_retry_s)

    # --- recovery and shutdown ------------------------------------------------------

    def recover(self) -> WalRecovery:
        """Start the WAL; nothing to replay (takeovers replay with `StoreWalReader`).

        Creates ``directory``, clears the emergency pause flag (another mode
        set it) and starts the writer and the deletion thread.  Runs once.
        """
        with self._cond:
            if self._state is not _State.NEW:
                raise WalError(f"store WAL {self.prefix}: recover() runs once, before appending")
        os.makedirs(self._directory, exist_ok=True)
        set_emergency_flag(self._store, self._namespace, False)
        with self._cond:
            self._state = _State.OPEN
        self._writer = threading.Thread(target=self._run_writer, name="kfs-store-wal", daemon=True)
        self._gc = threading.Thread(target=self._run_gc, name="kfs-store-wal-gc", daemon=True)
        self._writer.start()
        self._gc.start()
        log.info("store WAL %s open, one object every %g ms", self.prefix, self._interval * 1000)
        return WalRecovery(
            records=[],
            flushed_offsets={},
            files=[],
            frames_scanned=0,
            torn_tail=None,
            removed_temp_files=[],
        )

    def close(self) -> None:
        """Write every queued frame, stop the threads; later appends raise `WalClosed`.

        Raises `WalWriteFailed` if the WAL had stopped.  Idempotent.
        """
        with self._cond:
            state = self._state
            if state is _State.OPEN:
                self._state = _State.CLOSING
                self._cond.notify()
            elif state is _State.NEW:
                self._state = _State.CLOSED
        if self._writer is not None:
            self._writer.join()
        with self._gc_cond:
            self._gc_stop = True
            self._gc_cond.notify()
        if self._gc is not None:
            self._gc.join()
        with self._cond:
            failure = self._failure if self._state is _State.FAILED else None
            self._state = _State.CLOSED
        if state is _State.OPEN and failure is not None:
            raise WalWriteFailed(failure.message, **failure.fields)


def _notify(listener: FailureListener, failure: WalWriteFailed) -> None:
    try:
        listener(failure)
    except Exception:  # a listener's bug must not hide the failure from the others
        log.exception("store WAL failure listener failed")


# --- the reader: replay on takeover, and the sweep ----------------------------


@dataclass(frozen=True, slots=True)
class _Candidate:
    key: str
    order: int  # the object's place in key order: later objects of one writer win ties
    seq: int
    entry: WalObjectEntry


def _deposed(entry: WalObjectEntry, epochs: Sequence[tuple[int, int]]) -> bool:
    """Whether a later epoch of the history began at or below the frame's first offset."""
    return any(
        epoch > entry.leader_epoch and start <= entry.first_offset for epoch, start in epochs
    )


class StoreWalReader:
    """Reads every writer's WAL objects of one namespace: replay on takeover, and the sweep.

    Headers are cached by key (objects never change), so replaying many
    partitions with one reader costs one header read per object, not one
    per object and partition; the headers a listing shows and the cache
    lacks are read `HEADER_READERS` at a time, and a key gone from a listing
    leaves the cache.  Listings are shared the same way (`objects`): a
    takeover of many partitions at once lists the prefix about twice, not
    once per partition.
    """

    def __init__(
        self, store: ObjectStore, namespace: str, *, header_read_bytes: int = HEADER_READ_BYTES
    ) -> None:
        self._store = store
        self._namespace = namespace
        self._prefix = wal_prefix(namespace)
        self._header_read_bytes = max(header_read_bytes, HEAD.size)
        # Read and filled by several threads at once (takeovers, the sweep, the
        # read-ahead, `_prefetch`'s pool): changed and walked under its lock.
        self._headers: dict[str, WalObjectHeader] = {}
        self._headers_lock = threading.Lock()
        # Calls of `objects` get a ticket each; a listing serves the tickets
        # issued before it started (``_listing[0]`` is the first it does not).
        self._tickets = 0
        self._tickets_lock = threading.Lock()
        self._listing_lock = threading.Lock()
        self._listing: tuple[int, list[ObjectInfo]] | None = None

    def ticket(self) -> int:
        """A place in line: `objects` with it is served by a listing begun after this call.

        A new holder takes one as soon as it holds the lease and lists at
        once (`list_for`), while it loads the partition's catalog; its
        replay (`read_partition` with the ticket) then misses nothing that
        landed before the lease was taken.
        """
        with self._tickets_lock:
            self._tickets += 1
            return self._tickets - 1

    def list_for(self, ticket: int) -> None:
        """Make sure a listing serving ``ticket`` is done, its headers read (see `ticket`)."""
        for _ in self.objects(ticket):
            pass

    def objects(self, ticket: int | None = None) -> Iterator[tuple[ObjectInfo, int, str, int]]:
        """Every WAL object as ``(info, node_id, incarnation, seq)``, in key order.

        From a listing that started after this call did (or after ``ticket``
        was issued), so nothing that landed before is missed; calls made
        while a listing is under way wait for it and share the next one.
        """
        if ticket is None:
            ticket = self.ticket()
        with self._listing_lock:
            if self._listing is None or self._listing[0] <= ticket:
                with self._tickets_lock:
                    first_unserved = self._tickets
                listing = list(self._store.list(self._prefix))
                self._prefetch(listing)
                self._listing = (first_unserved, listing)
            listed = self._listing[1]
        for info in listed:
            match = _KEY.match(info.key[len(self._prefix) :])
            if match is None:
                continue
            yield info, int(match["node"]), match["incarnation"], int(match["seq"])

    def _prefetch(self, listing: list[ObjectInfo]) -> None:
        """Read the listed headers not cached yet, several at once; forget the unlisted.

        A header that cannot be read here (deleted since the listing,
        damaged, a store error) is left to `header`, which raises or skips
        it where the replay meets it.
        """
        keys = {info.key for info in listing}
        with self._headers_lock:
            for key in [k for k in self._headers if k not in keys]:
                del self._headers[key]
            missing = [
                i
                for i in listing
                if i.key not in self._headers and _KEY.match(i.key[len(self._prefix) :])
            ]
        if len(missing) < 2:
            return

        def read(info: ObjectInfo) -> None:
            with contextlib.suppress(Exception):
                self.header(info)

        with ThreadPoolExecutor(HEADER_READERS, thread_name_prefix="kfs-wal-headers") as pool:
            list(pool.map(read, missing))

    def header(self, info: ObjectInfo) -> WalObjectHeader:
        """The object's header: one ranged GET (two for a header longer than the first read)."""
        cached = self._headers.get(info.key)
        if cached is not None:
            return cached
        if info.size < HEAD.size:
            raise CorruptWal(
                f"a {info.size}-byte object is too short for a WAL object header",
                object_name=info.key,
                offset=0,
            )
        first = self._store.get(info.key, ByteRange(0, min(self._header_read_bytes, info.size)))
        length = header_length(first, info.key)
        if length > len(first):
            if length > info.size:
                raise CorruptWal(
                    f"header length {length} exceeds the {info.size}-byte object",
                    object_name=info.key,
                    offset=HEADER_LENGTH_AT,
                )
            first += self._store.get(info.key, ByteRange(len(first), length - len(first)))
        header = decode_header(first, info.key)
        with self._headers_lock:
            self._headers[info.key] = header
        return header

    def topic_ends(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``, one past the last offset any writer's WAL object holds.

        For the purge of a deleted topic (`kfs_core.catalog.purge`): a topic
        created later under the name starts above every offset the deleted
        one acknowledged.  Partitions with no frame are left out.
        """
        ends: dict[int, int] = {}
        for info, _node, _incarnation, _seq in self.objects():
            try:
                header = self.header(info)
            except ObjectNotFound:
                continue  # its writer deleted it since the listing: everything in it is flushed
            for entry in header.entries:
                if entry.topic == topic:
                    ends[entry.partition] = max(ends.get(entry.partition, 0), entry.last_offset + 1)
        return ends

    def read_partition(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        *,
        exclude_incarnation: str | None = None,
        ticket: int | None = None,
        epochs: Sequence[tuple[int, int]] = (),
    ) -> list[RecoveredBatch]:
        """The chain of frames of the partition from ``from_offset`` on, for `Appender.replay`.

        Reads the headers of every writer's objects (but ``exclude_incarnation``'s,
        the caller's own), then only the frames of the chain: the frame that
        holds ``from_offset``, then each time the one that starts at the next
        offset -- the highest leader epoch (not lower than the previous
        frame's) winning, then the later object of one writer.  Stops at the
        first offset no frame starts at; ``ticket`` (`ticket`) dates the
        listing it reads, by default this call.  ``epochs`` is the
        partition's leader epoch history as ``(epoch, start offset)``, the
        caller's own epoch left out: a frame of epoch ``E`` that starts at or
        above where a later epoch began was written by a deposed holder (its
        lease had passed on; nothing in it was acknowledged) and is never
        part of the chain.  Raises `CorruptWal` naming the key
        and byte offset for a damaged header or frame, and `ObjectNotFound`
        when an object of the chain was deleted between its header read and
        its frames' (its writer flushed it meanwhile: read again).
        """
        candidates: dict[int, list[_Candidate]] = {}
        straddling: list[_Candidate] = []
        for order, (info, _node, incarnation, seq) in enumerate(self.objects(ticket)):
            if incarnation == exclude_incarnation:
                continue
            try:
                header = self.header(info)
            except ObjectNotFound:
                continue  # its writer deleted it since the listing: everything in it is flushed
            for entry in header.entries_for(topic, partition):
                if entry.last_offset < from_offset or _deposed(entry, epochs):
                    continue
                candidate = _Candidate(info.key, order, seq, entry)
                if entry.first_offset < from_offset:
                    straddling.append(candidate)
                else:
                    candidates.setdefault(entry.first_offset, []).append(candidate)
        chain: list[_Candidate] = []
        offset, floor = from_offset, _NO_EPOCH
        first_step = straddling + candidates.get(from_offset, [])
        while True:
            options = first_step if not chain else candidates.get(offset, [])
            options = [c for c in options if c.entry.leader_epoch >= floor]
            if not options:
                break
            best = max(options, key=lambda c: (c.entry.leader_epoch, c.order))
            chain.append(best)
            floor = best.entry.leader_epoch
            offset = best.entry.last_offset + 1
        return self._fetch(topic, partition, chain)

    def _fetch(self, topic: str, partition: int, chain: list[_Candidate]) -> list[RecoveredBatch]:
        """The frames of ``chain``: one ranged GET per run of adjacent frames of one object.

        The runs are read `HEADER_READERS` at a time (a chain spans one
        object per group commit of its writers), and come back in order.
        """
        runs: list[list[_Candidate]] = []
        for c in chain:
            last = runs[-1][-1] if runs else None
            if last is not None and c.key == last.key and c.entry.position == last.entry.end:
                runs[-1].append(c)
            else:
                runs.append([c])

        def read(run: list[_Candidate]) -> list[RecoveredBatch]:
            start = run[0].entry.position
            data = self._store.get(run[0].key, ByteRange(start, run[-1].entry.end - start))
            return [self._frame(topic, partition, c, data, start) for c in run]

        if len(runs) < 2:
            return [batch for run in runs for batch in read(run)]
        with ThreadPoolExecutor(
            min(HEADER_READERS, len(runs)), thread_name_prefix="kfs-wal-frames"
        ) as pool:
            return [batch for batches in pool.map(read, runs) for batch in batches]

    def _frame(
        self, topic: str, partition: int, c: _Candidate, data: bytes, start: int
    ) -> RecoveredBatch:
        e = c.entry
        at = e.position - start
        view = memoryview(data)[at : at + e.size]
        if len(view) != e.size:
            raise CorruptWal(
                f"the object ends inside the frame of {topic}-{partition} at {e.first_offset}",
                object_name=c.key,
                offset=e.position,
            )
        reader = WalReader(view, c.key, sealed=True)
        try:
            frames = list(reader)
        except CorruptWal as exc:
            raise CorruptWal(exc.message, object_name=c.key, offset=e.position) from None
        if len(frames) != 1 or frames[0].size != e.size:
            raise CorruptWal(
                "the header's entry does not match the frame there",
                object_name=c.key,
                offset=e.position,
            )
        record = frames[0].record(c.key)
        if (
            record.frame_type is not FrameType.RECORD_BATCH
            or record.topic != topic
            or record.partition != partition
            or record.base_offset != e.first_offset
        ):
            raise CorruptWal(
                f"frame holds {record.topic}-{record.partition} at {record.base_offset}, the "
                f"header says {topic}-{partition} at {e.first_offset}",
                object_name=c.key,
                offset=e.position,
            )
        try:
            last = batch_last_offset(record.batch, record.base_offset, c.key)
        except (ValueError, CorruptWal) as exc:
            raise CorruptWal(str(exc), object_name=c.key, offset=e.position) from None
        if last != e.last_offset:
            raise CorruptWal(
                f"the batches end at {last}, the header says {e.last_offset}",
                object_name=c.key,
                offset=e.position,
            )
        return RecoveredBatch(
            topic,
            partition,
            record.base_offset,
            last,
            record.batch,
            WalPosition(c.seq, e.position, e.size),
        )

    def sweep(
        self,
        committed_next_offset: Callable[[str, int], int | None],
        live_incarnations: Collection[str],
    ) -> int:
        """Delete the objects of dead incarnations that no partition needs; how many.

        An object can go when every frame lies below its partition's
        committed next offset (``committed_next_offset`` returns None for a
        topic that is gone: its frames can go).  Objects of
        ``live_incarnations`` are their writers' to delete.  A damaged
        object is logged and left alone.
        """
        committed: dict[tuple[str, int], int | None] = {}
        deleted = 0
        for info, _node, incarnation, _seq in list(self.objects()):
            if incarnation in live_incarnations:
                continue
            try:
                header = self.header(info)
            except ObjectNotFound:
                continue  # deleted since the listing
            except CorruptWal as exc:
                log.error("store WAL sweep: leaving the damaged object %s alone: %s", info.key, exc)
                continue
            needed = False
            for e in header.entries:
                pk = (e.topic, e.partition)
                if pk not in committed:
                    committed[pk] = committed_next_offset(*pk)
                next_offset = committed[pk]
                if next_offset is not None and e.last_offset >= next_offset:
                    needed = True
                    break
            if not needed:
                self._store.delete(info.key)
                with self._headers_lock:
                    self._headers.pop(info.key, None)
                deleted += 1
        return deleted
