"""WAL recovery: the scan of the WAL directory at start-up, and what it found.

`recover_wal` runs once, before the first append (`WalWriter.recover` calls
it and resumes from its result).  It removes the ``*.wal.tmp`` files a crash
left -- a file being created or the writer's spare, never holding a frame --
and scans every ``*.wal`` file in sequence order, validating each frame
(`kfs_core.formats.wal`).  In a sealed (non-last) file any invalid frame is
corruption: `CorruptWal` names the file and the byte offset and the daemon
must refuse to start.  The last file may end in a torn tail -- the write a
crash interrupted, never acknowledged -- which is zeroed and fsynced (its
position and size are reported in `WalRecovery.torn_tail` and logged), and
appends continue from there; a last file cut short outside KFS is extended
back to the file size, so appends never change a file's size.

Damage is never repaired silently.  Only when the operator says so
(``accept_loss``, the daemon's ``KFS_WAL_ACCEPT_LOSS``) does recovery cut the
WAL at the first damaged frame: the bytes from there to the end of that file
are zeroed, every later file is removed, appends continue at the cut, and
`WalRecovery.cut` (and an error in the log) names the file, the byte offset
and how much was discarded.  Records those bytes held that had not reached
the store are lost; everything before the cut is replayed as usual.

Recovery returns every RECORD frame whose last offset is above its
partition's highest checkpoint, in WAL order.  Replay is idempotent by
construction: a batch flushed before its checkpoint frame reached the disk
is returned again, with its topic, partition, base and last offset, so the
daemon can skip offsets below the catalog's high watermark.

Public values: `WalRecovery` (what the daemon replays, and a report of the
scan), `RecoveredBatch`, `TornTail`, `WalCut`; `RecoveredWal` adds what the writer
needs to resume (the live files and where appends continue).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kfs_core.errors import CorruptionError, CorruptWal
from kfs_core.formats.wal import FrameType, WalEnd, WalFrame, WalReader
from kfs_core.log.wal.files import (
    TEMP_SUFFIX,
    WAL_NAME,
    WAL_SUFFIX,
    WalFile,
    WalPosition,
    batch_last_offset,
    change_and_fsync,
    fdatasync,
    fsync_directory,
    preallocate,
)

__all__ = [
    "RecoveredBatch",
    "RecoveredWal",
    "TornTail",
    "WalCut",
    "WalRecovery",
    "recover_wal",
]

log = logging.getLogger(__name__)

_ZERO_CHUNK = bytes(1 << 20)


@dataclass(frozen=True, slots=True)
class RecoveredBatch:
    """A RECORD frame recovery hands back for replay: not yet known to be in the store."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int  # from the last batch header: what a catalog high-watermark check needs
    batch: bytes  # the RecordBatch v2 bytes exactly as appended
    position: WalPosition


@dataclass(frozen=True, slots=True)
class TornTail:
    """The incomplete frame recovery found at the end of the last file, and zeroed."""

    path: str
    position: int  # where valid data ends; appends continue here
    discarded_bytes: int  # nonzero bytes from ``position`` on that were zeroed
    reason: str


@dataclass(frozen=True, slots=True)
class WalCut:
    """Where an operator-accepted cut removed damaged WAL data, and how much went with it."""

    path: str
    position: int  # the damaged frame: appends continue here
    reason: str
    discarded_bytes: int  # nonzero bytes zeroed in this file
    removed_files: list[str]  # the later files removed
    removed_bytes: int  # their sizes

    def describe(self) -> str:
        later = (
            f" and {len(self.removed_files)} later file(s) ({self.removed_bytes} bytes)"
            if self.removed_files
            else ""
        )
        return (
            f"WAL {self.path} damaged at byte {self.position} ({self.reason}): cut there as "
            f"KFS_WAL_ACCEPT_LOSS allows; discarded {self.discarded_bytes} bytes of it{later}; "
            "records they held that were not yet in the store are lost"
        )


@dataclass(frozen=True, slots=True)
class WalRecovery:
    """What `WalWriter.recover` found.  Iterating yields the batches to replay."""

    records: list[RecoveredBatch]
    flushed_offsets: dict[tuple[str, int], int]  # highest checkpoint per (topic, partition)
    files: list[str]  # the WAL files scanned, in order
    frames_scanned: int
    torn_tail: TornTail | None
    removed_temp_files: list[str]
    cut: WalCut | None = None  # damage the operator accepted losing (``accept_loss``)

    def __iter__(self) -> Iterator[RecoveredBatch]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


@dataclass(frozen=True, slots=True)
class RecoveredWal:
    """`recover_wal`'s result: the report, and the state a writer resumes from."""

    recovery: WalRecovery
    # The live files by sequence number, with their per-partition highest
    # offsets (which decide when a checkpoint lets a file go); empty for a new WAL.
    files: dict[int, WalFile]
    end: int  # where valid data ends in the last file: the next frame goes here


def recover_wal(
    directory: str | os.PathLike[str], file_size: int, *, accept_loss: bool = False
) -> RecoveredWal:
    """Scan the WAL in ``directory`` (created if missing) and repair a torn tail.

    ``file_size`` is the size a cut-short last file is extended back to.
    Raises `CorruptWal` (naming the file and byte offset) when a sealed file
    is damaged or a frame's content is not what a KFS writer wrote; nothing
    has been repaired then.  With ``accept_loss`` the WAL is cut at that
    frame instead (see the module's docstring) and the cut is reported.
    """
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    removed = _remove_temp_files(directory)
    found = sorted(
        (int(m.group(1)), m.group(0))
        for m in map(WAL_NAME.match, os.listdir(directory))
        if m is not None
    )
    candidates: list[RecoveredBatch] = []
    flushed: dict[tuple[str, int], int] = {}
    files: dict[int, WalFile] = {}
    frames_scanned = 0
    torn: TornTail | None = None
    cut: WalCut | None = None
    end = 0
    for i, (seq, name) in enumerate(found):
        path = os.path.join(directory, name)
        last = i == len(found) - 1
        data = Path(path).read_bytes()
        reader = WalReader(data, path, sealed=not last)
        wal_file = WalFile(seq, path, len(data))
        try:
            for frame in reader:
                frames_scanned += 1
                batch = _take_frame(frame, path, flushed, wal_file)
                if batch is not None:
                    candidates.append(
                        RecoveredBatch(*batch, WalPosition(seq, frame.position, frame.size))
                    )
        except CorruptWal as damage:
            if not accept_loss:
                raise
            later = [os.path.join(directory, n) for _, n in found[i + 1 :]]
            cut = _cut(path, data, damage, later)
            end = cut.position
        files[seq] = wal_file
        if cut is None and last:
            assert reader.end is not None
            end = reader.end
            if reader.ending is WalEnd.TORN:
                torn = _repair_torn_tail(path, data, reader.end, reader.reason)
        if (cut is not None or last) and wal_file.size < file_size:
            # Cut short outside KFS: refill it.
            change_and_fsync(path, functools.partial(preallocate, size=file_size))
            wal_file.size = file_size
        del data
        if cut is not None:
            break
    records = [r for r in candidates if r.last_offset > flushed.get((r.topic, r.partition), -1)]
    recovery = WalRecovery(
        records=records,
        flushed_offsets=flushed,
        files=[name for _, name in found][: len(files)],
        frames_scanned=frames_scanned,
        torn_tail=torn,
        removed_temp_files=removed,
        cut=cut,
    )
    return RecoveredWal(recovery, files, end)


def _take_frame(
    frame: WalFrame,
    path: str,
    flushed: dict[tuple[str, int], int],
    wal_file: WalFile,
) -> tuple[str, int, int, int, bytes] | None:
    """Account one valid frame; a RECORD frame's (topic, partition, base, last, batch).

    A checkpoint raises its partition's flushed offset (and returns None).
    Raises `CorruptWal` when a RECORD frame holds no valid batch header.
    """
    record = frame.record(path)
    key = (record.topic, record.partition)
    if record.frame_type is FrameType.CHECKPOINT:
        flushed[key] = max(flushed.get(key, -1), record.base_offset - 1)
        return None
    try:
        last_offset = batch_last_offset(record.batch, record.base_offset, path)
    except (CorruptionError, ValueError) as exc:
        raise CorruptWal(
            f"RECORD frame holds no valid batch header: {exc}",
            object_name=path,
            offset=frame.position,
        ) from None
    if last_offset > wal_file.max_offsets.get(key, -1):
        wal_file.max_offsets[key] = last_offset
    # Flushed offsets only grow: what is flushed already never comes back.
    if last_offset <= flushed.get(key, -1):
        return None
    return record.topic, record.partition, record.base_offset, last_offset, record.batch


def _cut(path: str, data: bytes, damage: CorruptWal, later: list[str]) -> WalCut:
    """Zero ``path`` from the damaged frame on and remove the ``later`` files: the accepted loss."""
    position = damage.offset
    assert position is not None
    garbage_end = _zero_from(path, data, position)
    removed_bytes = 0
    for name in later:
        removed_bytes += os.path.getsize(name)
        os.unlink(name)
    if later:
        fsync_directory(os.path.dirname(path))
    cut = WalCut(path, position, damage.message, garbage_end - position, later, removed_bytes)
    log.error("%s", cut.describe())
    return cut


def _remove_temp_files(directory: str) -> list[str]:
    """A ``*.wal.tmp`` is a spare or a file whose creation a crash interrupted: no frames."""
    removed = sorted(n for n in os.listdir(directory) if n.endswith(WAL_SUFFIX + TEMP_SUFFIX))
    for name in removed:
        os.unlink(os.path.join(directory, name))
        log.info("removed %s, a WAL file prepared but not yet in use", name)
    return removed


def _repair_torn_tail(path: str, data: bytes, end: int, reason: str) -> TornTail:
    """Zero the torn frame so a later scan of the (then sealed) file finds only padding."""
    garbage_end = _zero_from(path, data, end)
    torn = TornTail(path, end, garbage_end - end, reason)
    log.warning(
        "WAL %s: torn tail at byte %d (%s): zeroed %d bytes of an unacknowledged write",
        path,
        end,
        reason,
        torn.discarded_bytes,
    )
    return torn


def _zero_from(path: str, data: bytes, start: int) -> int:
    """Zero ``path`` (whose bytes are ``data``) from ``start`` to its last nonzero byte, durably.

    Returns where the zeroed range ends.
    """
    garbage_end = max(len(data.rstrip(b"\0")), start)
    fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        _zero_range(fd, start, garbage_end)
        fdatasync(fd)
    finally:
        os.close(fd)
    return garbage_end


def _zero_range(fd: int, start: int, stop: int) -> None:
    while start < stop:
        n = os.pwrite(fd, memoryview(_ZERO_CHUNK)[: min(len(_ZERO_CHUNK), stop - start)], start)
        start += n
