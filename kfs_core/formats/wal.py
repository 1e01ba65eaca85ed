"""WAL frames: the crash-safe envelope for every write before it is acknowledged.

A WAL file is a fixed-size (16 MiB), zero-filled file that frames are
appended to back to back.  All integers are big-endian::

    offset   size  field
    0        4     payload length n, n >= 1                 (u32)
    4        4     header CRC-32C of bytes 0..4 (the length)   (u32)
    8        n     payload
    8+n      4     data CRC-32C of the payload                 (u32)
    12+n     4     trailer magic b"KFW1" (the 1 is the frame format version)

    after the last frame: zeros up to the end of the file (a length of 0
    can never start a frame, so it marks the end of data)

The header CRC makes the length trustworthy before anything is read through
it; the data CRC covers the payload; the trailer is written last, so a frame
cut short by a crash lacks it.  Scanning (`WalReader`, `scan_wal`) tells three
endings apart:

* clean: the data ends right after a frame, or only zeros follow it;
* torn tail: an incomplete or invalid frame with no valid frame anywhere
  after it -- the write the crash interrupted, never acknowledged.  The scan
  stops there and reports the position so the WAL manager can zero the rest
  and append from it;
* corruption: an invalid frame with a valid frame after it.  Acknowledged data
  is damaged, so this raises `CorruptWal` naming the byte offset; nothing is
  skipped silently.  In a file the manager knows is sealed (`sealed=True`),
  any invalid frame is corruption.

Files must be zero-filled when created: a recycled file still holding old
frames would make stale frames look valid.

KFS frame payloads (`WalRecord`)::

    offset   size  field
    0        1     frame type: 1 record batch, 2 checkpoint       (u8)
    1        2     topic length t                                 (u16)
    3        t     topic, UTF-8
    3+t      4     partition                                      (i32)
    7+t      8     base offset                                    (i64)
    15+t     ...   Kafka RecordBatch v2 bytes, offsets assigned (none for a checkpoint)
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from kfs_core.errors import CorruptWal
from kfs_core.records.crc import batches_crc

Buffer = bytes | bytearray | memoryview

FRAME_TRAILER = b"KFW1"
FRAME_VERSION = 1
WAL_FILE_SIZE = 16 << 20  # the WAL manager's default preallocated file size

FRAME_HEADER = struct.Struct(
    ">I"  # payload length
    "I"  # header CRC-32C of the length field
)
FRAME_HEADER_SIZE = FRAME_HEADER.size  # 8
LENGTH_SIZE = struct.calcsize(">I")  # 4: the bytes the header CRC covers

FRAME_FOOTER = struct.Struct(
    ">I"  # data CRC-32C of the payload
    "4s"  # trailer magic b"KFW1"
)
FRAME_FOOTER_SIZE = FRAME_FOOTER.size  # 8
TRAILER_OFFSET = struct.calcsize(">I")  # 4, relative to the footer
FRAME_OVERHEAD = FRAME_HEADER_SIZE + FRAME_FOOTER_SIZE  # 16
MAX_PAYLOAD = 2**32 - 1

RECORD_PREFIX = struct.Struct(
    ">B"  # frame type
    "H"  # topic length
)
RECORD_PARTITION = struct.Struct(
    ">i"  # partition
    "q"  # base offset
)
TOPIC_OFFSET = RECORD_PREFIX.size  # 3
MAX_TOPIC_BYTES = 2**16 - 1

_NONZERO = re.compile(rb"[^\x00]")
_ZEROS = bytes(1 << 16)
# crc32c's gil_release_mode: 0 keeps the GIL.  Frames are encoded on the
# daemon's event loop thread, and at ~20 GB/s a CRC is over long before a
# thread that took the released GIL (the WAL writer, a flush) would hand it
# back -- releasing it made each CRC of a large batch several times slower.
_KEEP_GIL = 0


# --- frames ----------------------------------------------------------------


def frame_parts(
    parts: Sequence[Buffer], head: bytes = b"", *, data_crc: int | None = None
) -> list[Buffer]:
    """One frame whose payload is ``head`` + ``parts``, as buffers to write back to back.

    Nothing of ``parts`` is copied: the frame header (and ``head``, a small
    prefix of the payload) becomes the first buffer, the footer the last, so
    a vectored write (``pwritev``) puts the frame on disk straight from the
    caller's buffers.  The buffers must not change until they are written.
    ``data_crc`` is the payload's CRC-32C when the caller knows it already;
    otherwise it is computed here.
    """
    length = len(head) + sum(map(len, parts))
    if data_crc is None:
        data_crc = crc32c.crc32c(head, 0, _KEEP_GIL)
        for part in parts:
            data_crc = crc32c.crc32c(part, data_crc, _KEEP_GIL)
    if length == 0:
        raise ValueError("a WAL frame payload must not be empty (length 0 marks the end)")
    if length > MAX_PAYLOAD:
        raise ValueError(f"WAL frame payload of {length} bytes exceeds the u32 length field")
    length_field = length.to_bytes(LENGTH_SIZE, "big")
    header = FRAME_HEADER.pack(length, crc32c.crc32c(length_field)) + head
    return [header, *parts, FRAME_FOOTER.pack(data_crc, FRAME_TRAILER)]


def encode_frame_parts(parts: Sequence[Buffer]) -> bytes:
    """One frame whose payload is ``parts`` concatenated, built with a single copy."""
    return b"".join(frame_parts(parts))


def encode_frame(payload: Buffer) -> bytes:
    return encode_frame_parts([payload])


def frame_size(payload_length: int) -> int:
    """Bytes a frame with a payload of ``payload_length`` bytes occupies."""
    return FRAME_OVERHEAD + payload_length


@dataclass(frozen=True, slots=True)
class WalFrame:
    """A valid frame: where it starts in the file and its payload (a view)."""

    position: int
    payload: memoryview

    @property
    def size(self) -> int:
        return FRAME_OVERHEAD + len(self.payload)

    @property
    def end(self) -> int:
        """File position just past the frame: where the next one starts."""
        return self.position + self.size

    @property
    def payload_position(self) -> int:
        return self.position + FRAME_HEADER_SIZE

    def record(self, object_name: str = "<wal>") -> WalRecord:
        return decode_wal_record(self.payload, object_name, offset=self.payload_position)


# --- scanning --------------------------------------------------------------


class WalEnd(enum.Enum):
    """How the valid data of a WAL file ends."""

    END_OF_DATA = "end of data"  # the bytes stop right after the last frame
    ZERO_PADDING = "zero padding"  # only zeros follow the last frame
    TORN = "torn tail"  # an incomplete/invalid frame with nothing valid after it


@dataclass(frozen=True, slots=True)
class WalScan:
    """Everything `scan_wal` found: the frames and where valid data ends."""

    frames: list[WalFrame]
    end: int
    ending: WalEnd
    reason: str

    @property
    def torn(self) -> bool:
        return self.ending is WalEnd.TORN


def _is_zero(view: memoryview, start: int, stop: int) -> bool:
    chunk = len(_ZEROS)
    for i in range(start, stop, chunk):
        j = min(i + chunk, stop)
        if view[i:j] != _ZEROS[: j - i]:
            return False
    return True


def find_valid_frame(data: Buffer, start: int, stop: int | None = None) -> int | None:
    """Position of the first complete, valid frame at or after ``start``, or None.

    Slow path, used only after an invalid frame, to tell a torn tail from
    corruption: every valid frame ends with the trailer, so the search ends
    at once when none follows, and zero runs (no frame starts with a zero
    length) are skipped.
    """
    view = memoryview(data)
    stop = len(view) if stop is None else stop
    tail = bytes(view[start:stop])
    last_trailer = tail.rfind(FRAME_TRAILER)
    # The smallest frame (1-byte payload) puts its trailer 13 bytes after its start.
    limit = last_trailer - (FRAME_HEADER_SIZE + 1 + TRAILER_OFFSET)
    size = len(tail)
    unpack_header = FRAME_HEADER.unpack_from
    p = 0
    while p <= limit:
        length, header_crc = unpack_header(tail, p)
        if length == 0:
            match = _NONZERO.search(tail, p, limit + LENGTH_SIZE)
            if match is None:
                return None
            # The first frame start with a nonzero length field is at most 3
            # bytes before the next nonzero byte.
            p = max(p + 1, match.start() - (LENGTH_SIZE - 1))
            continue
        payload_end = p + FRAME_HEADER_SIZE + length
        if (
            payload_end + FRAME_FOOTER_SIZE <= size
            and tail[payload_end + TRAILER_OFFSET : payload_end + FRAME_FOOTER_SIZE]
            == FRAME_TRAILER
            and crc32c.crc32c(tail[p : p + LENGTH_SIZE]) == header_crc
        ):
            data_crc = FRAME_FOOTER.unpack_from(tail, payload_end)[0]
            if crc32c.crc32c(memoryview(tail)[p + FRAME_HEADER_SIZE : payload_end]) == data_crc:
                return start + p
        p += 1
    return None


class WalReader:
    """Iterates over the valid frames of one WAL file, in order.

    After the iteration finishes, ``end`` is the file position where valid
    data ends (append or zero from there) and ``ending`` says why.  Raises
    `CorruptWal` (object name, byte offset of the bad frame and, as
    ``next_frame``, the valid frame found after it) on corruption; the frames
    before it have been yielded by then.
    """

    def __init__(
        self,
        data: Buffer,
        object_name: str = "<wal>",
        *,
        start: int = 0,
        sealed: bool = False,
    ) -> None:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if not 0 <= start <= len(view):
            raise ValueError(f"start {start} is outside the {len(view)}-byte WAL data")
        self._view = view
        self.object_name = object_name
        self.start = start
        self.sealed = sealed
        self.end: int | None = None
        self.ending: WalEnd | None = None
        self.reason = ""

    def __iter__(self) -> Iterator[WalFrame]:
        view = self._view
        size = len(view)
        pos = self.start
        unpack_header = FRAME_HEADER.unpack_from
        unpack_footer = FRAME_FOOTER.unpack_from
        while True:
            left = size - pos
            if left == 0:
                self._stop(pos, WalEnd.END_OF_DATA, "the data ends after the last frame")
                return
            if left < FRAME_HEADER_SIZE:
                if _is_zero(view, pos, size):
                    self._stop(pos, WalEnd.ZERO_PADDING, "zeros follow the last frame")
                else:
                    self._invalid(pos, None, f"{left} bytes left, too few for a frame header")
                return
            length, header_crc = unpack_header(view, pos)
            if length == 0:
                if header_crc == 0 and _is_zero(view, pos + FRAME_HEADER_SIZE, size):
                    self._stop(pos, WalEnd.ZERO_PADDING, "zeros follow the last frame")
                else:
                    self._invalid(pos, pos + 1, "a zero length with nonzero bytes after it")
                return
            if crc32c.crc32c(view[pos : pos + LENGTH_SIZE]) != header_crc:
                self._invalid(pos, pos + 1, f"header CRC-32C mismatch (length field {length})")
                return
            payload_end = pos + FRAME_HEADER_SIZE + length
            frame_end = payload_end + FRAME_FOOTER_SIZE
            if frame_end > size:
                self._invalid(
                    pos, None, f"a {frame_end - pos}-byte frame runs past the end at {size}"
                )
                return
            data_crc, trailer = unpack_footer(view, payload_end)
            if trailer != FRAME_TRAILER:
                self._invalid(pos, frame_end, f"trailer {bytes(trailer)!r}, expected the magic")
                return
            payload = view[pos + FRAME_HEADER_SIZE : payload_end]
            if crc32c.crc32c(payload) != data_crc:
                self._invalid(pos, frame_end, "data CRC-32C mismatch")
                return
            yield WalFrame(pos, payload)
            pos = frame_end

    def _stop(self, pos: int, ending: WalEnd, reason: str) -> None:
        self.end, self.ending, self.reason = pos, ending, reason

    def _invalid(self, pos: int, search_from: int | None, reason: str) -> None:
        """An invalid frame at ``pos``: corruption if a valid frame follows, else a torn tail.

        ``search_from`` is where a following frame may start: the end of this
        frame when its length is trustworthy, the next byte when it is not,
        None when the frame runs to the end of the data.
        """
        if search_from is not None:
            following = find_valid_frame(self._view, search_from)
            if following is not None:
                raise CorruptWal(
                    f"invalid frame: {reason}; a valid frame follows at byte {following}",
                    object_name=self.object_name,
                    offset=pos,
                    next_frame=following,
                )
        if self.sealed:
            raise CorruptWal(
                f"invalid frame in a sealed WAL file: {reason}",
                object_name=self.object_name,
                offset=pos,
                next_frame=None,
            )
        self._stop(pos, WalEnd.TORN, reason)

    def frames(self) -> list[WalFrame]:
        return list(self)

    def records(self) -> Iterator[WalRecord]:
        for frame in self:
            yield frame.record(self.object_name)


def scan_wal(
    data: Buffer, object_name: str = "<wal>", *, start: int = 0, sealed: bool = False
) -> WalScan:
    """All valid frames of a WAL file and where its valid data ends.

    Stops cleanly at zero padding, the end of the data or a torn tail; raises
    `CorruptWal` on an invalid frame followed by a valid one (or any invalid
    frame when ``sealed``).
    """
    reader = WalReader(data, object_name, start=start, sealed=sealed)
    frames = list(reader)
    assert reader.end is not None and reader.ending is not None
    return WalScan(frames, reader.end, reader.ending, reader.reason)


# --- KFS records -----------------------------------------------------------


class FrameType(enum.IntEnum):
    RECORD_BATCH = 1  # a produced batch, offsets assigned, not yet in a segment
    CHECKPOINT = 2  # partition flushed: every offset below base_offset is in the store


@dataclass(frozen=True, slots=True)
class WalRecord:
    frame_type: FrameType
    topic: str
    partition: int
    base_offset: int
    batch: bytes = b""

    def encode(self) -> bytes:
        return encode_wal_record(
            self.topic,
            self.partition,
            self.batch,
            base_offset=self.base_offset,
            frame_type=self.frame_type,
        )


def _record_head(
    topic: str,
    partition: int,
    batch_bytes: Buffer,
    base_offset: int | None,
    frame_type: FrameType,
) -> bytes:
    """The payload bytes before the batch: frame type, topic, partition, base offset."""
    topic_bytes = topic.encode("utf-8")
    if len(topic_bytes) > MAX_TOPIC_BYTES:
        raise ValueError(f"topic name of {len(topic_bytes)} bytes is too long for a WAL record")
    if base_offset is None:
        if len(batch_bytes) < 8:
            raise ValueError("base_offset is required when there is no batch to read it from")
        base_offset = int.from_bytes(batch_bytes[:8], "big", signed=True)
    return b"".join(
        [
            RECORD_PREFIX.pack(frame_type, len(topic_bytes)),
            topic_bytes,
            RECORD_PARTITION.pack(partition, base_offset),
        ]
    )


def _record_parts(
    topic: str,
    partition: int,
    batch_bytes: Buffer,
    base_offset: int | None,
    frame_type: FrameType,
) -> list[Buffer]:
    head = _record_head(topic, partition, batch_bytes, base_offset, frame_type)
    return [head, batch_bytes] if len(batch_bytes) else [head]


def encode_wal_record(
    topic: str,
    partition: int,
    batch_bytes: Buffer = b"",
    *,
    base_offset: int | None = None,
    frame_type: FrameType = FrameType.RECORD_BATCH,
) -> bytes:
    """The frame payload for one record; ``base_offset`` defaults to the batch's own."""
    return b"".join(_record_parts(topic, partition, batch_bytes, base_offset, frame_type))


def encode_record_frame(
    topic: str,
    partition: int,
    batch_bytes: Buffer = b"",
    *,
    base_offset: int | None = None,
    frame_type: FrameType = FrameType.RECORD_BATCH,
) -> bytes:
    """``encode_frame(encode_wal_record(...))`` with one copy of the batch, not two."""
    return encode_frame_parts(_record_parts(topic, partition, batch_bytes, base_offset, frame_type))


def record_frame_parts(
    topic: str,
    partition: int,
    batch_bytes: Buffer = b"",
    *,
    base_offset: int | None = None,
    frame_type: FrameType = FrameType.RECORD_BATCH,
    checked: bool = False,
) -> list[Buffer]:
    """`encode_record_frame` as buffers for a vectored write; the batch is not copied.

    ``b"".join(record_frame_parts(...)) == encode_record_frame(...)``.  With
    ``checked``, ``batch_bytes`` are whole v2 batches whose stored CRCs are
    right (checked on produce): the frame's CRC is derived from them
    (`kfs_core.records.crc.batches_crc`) instead of reading the batches again.
    """
    head = _record_head(topic, partition, batch_bytes, base_offset, frame_type)
    if not len(batch_bytes):
        return frame_parts([], head)
    data_crc = batches_crc(batch_bytes, crc32c.crc32c(head, 0, _KEEP_GIL)) if checked else None
    return frame_parts([batch_bytes], head, data_crc=data_crc)


def decode_wal_record(payload: Buffer, object_name: str = "<wal>", *, offset: int = 0) -> WalRecord:
    """Decode a frame payload; ``offset`` is its file position, for error messages.

    The batch bytes are copied, so the record outlives the WAL buffer.
    """
    view = memoryview(payload)
    if len(view) < TOPIC_OFFSET:
        raise CorruptWal(
            f"WAL record of {len(view)} bytes is shorter than its prefix",
            object_name=object_name,
            offset=offset,
        )
    type_code, topic_length = RECORD_PREFIX.unpack_from(view, 0)
    try:
        frame_type = FrameType(type_code)
    except ValueError:
        raise CorruptWal(
            f"unknown WAL frame type {type_code}", object_name=object_name, offset=offset
        ) from None
    partition_at = TOPIC_OFFSET + topic_length
    batch_at = partition_at + RECORD_PARTITION.size
    if len(view) < batch_at:
        raise CorruptWal(
            f"WAL record of {len(view)} bytes cannot hold a {topic_length}-byte topic",
            object_name=object_name,
            offset=offset + 1,
        )
    try:
        topic = str(view[TOPIC_OFFSET:partition_at], "utf-8")
    except UnicodeDecodeError:
        raise CorruptWal(
            "WAL record topic is not UTF-8", object_name=object_name, offset=offset + TOPIC_OFFSET
        ) from None
    partition, base_offset = RECORD_PARTITION.unpack_from(view, partition_at)
    return WalRecord(frame_type, topic, partition, base_offset, bytes(view[batch_at:]))
