"""`Checkpoints`: what the WAL knows is in the object store, and which files that frees.

`WalWriter.checkpoint` records that a partition is in the object store up
to an offset: a CHECKPOINT frame whose base offset is the next offset still
to flush (``flushed_offset + 1``, as `FrameType.CHECKPOINT` defines it;
`checkpoint_frame`).  The WAL keeps, per WAL file, the highest last offset
of each partition's RECORD frames (`WalFile.max_offsets`, kept by the
writer as it writes); a file whose every partition is at or below its
flushed offset is retired (`Checkpoints.advance`, then
`FileRing.retire`: recycled or deleted) -- never the active file.  A new
file starts with a copy of the checkpoints of the partitions that still have
records in live files (`Checkpoints.carried_frames`), so deleting the file
that held a checkpoint never makes recovery replay more than it must.

The flushed offsets live under the file ring's lock (`FileRing.lock`): which
files may go depends on both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kfs_core.formats.wal import FrameType, encode_record_frame
from kfs_core.log.wal.files import WalFile
from kfs_core.log.wal.ring import FileRing

__all__ = ["Checkpoints", "checkpoint_frame"]


def checkpoint_frame(topic: str, partition: int, flushed_offset: int) -> bytes:
    """The CHECKPOINT frame saying the partition is stored through ``flushed_offset``."""
    if flushed_offset < -1:
        raise ValueError(f"flushed offset {flushed_offset} is below -1 (nothing flushed)")
    return encode_record_frame(
        topic, partition, base_offset=flushed_offset + 1, frame_type=FrameType.CHECKPOINT
    )


class Checkpoints:
    """The flushed offset of each partition, and the files of ``ring`` they leave with nothing.

    ``count`` adds to the writer's `WalMetrics` counters (``checkpoints``).
    Thread-safe: every access holds ``ring.lock``.
    """

    def __init__(self, ring: FileRing, count: Callable[..., None]) -> None:
        self._ring = ring
        self._count = count
        self._flushed: dict[tuple[str, int], int] = {}

    def adopt(self, flushed: Mapping[tuple[str, int], int]) -> None:
        """Take over the flushed offsets recovery found."""
        with self._ring.lock:
            self._flushed = dict(flushed)

    def offsets(self) -> dict[tuple[str, int], int]:
        with self._ring.lock:
            return dict(self._flushed)

    def offset(self, topic: str, partition: int) -> int:
        """The partition's highest checkpointed offset; -1 when the WAL has none."""
        with self._ring.lock:
            return self._flushed.get((topic, partition), -1)

    def advance(self, key: tuple[str, int], flushed_offset: int) -> list[WalFile]:
        """Record the partition's flushed offset; forget the files it leaves with nothing to keep.

        Returns them for the caller to retire (`FileRing.retire`: keep for
        reuse or delete): the sealed files whose every RECORD frame is now
        flushed (never the active one).
        """
        ring = self._ring
        with ring.lock:
            if flushed_offset > self._flushed.get(key, -1):
                self._flushed[key] = flushed_offset
            active = ring.active
            victims = [
                f
                for f in ring.files.values()
                if f is not active
                and all(self._flushed.get(k, -1) >= last for k, last in f.max_offsets.items())
            ]
            for victim in victims:
                del ring.files[victim.seq]
        self._count(checkpoints=1)
        return victims

    def carried_frames(self) -> list[bytes]:
        """CHECKPOINT frames for partitions that still have records in live files."""
        with self._ring.lock:
            live = {key for f in self._ring.files.values() for key in f.max_offsets}
            flushed = [(key, self._flushed[key]) for key in sorted(live) if key in self._flushed]
        return [
            checkpoint_frame(topic, partition, offset) for (topic, partition), offset in flushed
        ]
