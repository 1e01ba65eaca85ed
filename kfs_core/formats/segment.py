"""The `.kfs` segment file: a header, raw Kafka RecordBatch v2 bytes, a footer.

Byte-compatible with KafScale's segment layout (see docs/architecture.md, "Formats").
All integers are big-endian::

    offset      size  field
    0           4     magic b"KAFS"
    4           2     version = 1                      (u16)
    6           2     flags: bits 0-2 codec of every batch, 0 when mixed or none
    8           8     base offset                      (i64)
    16          4     message count: sum of the batches' record counts (i32)
    20          8     created, Unix ms                 (i64)
    28          4     reserved = 0                     (u32)
    32          n     body: RecordBatch v2, RecordBatch v2, ... exactly as produced
    32+n        4     CRC-32C of the body              (u32)
    36+n        8     last offset                      (i64)
    44+n        4     footer magic b"END!"

Index positions (`index.py`) count from byte 0 of the file, so the first batch
always sits at `SEGMENT_HEADER_SIZE`.  The header carries no checksum of its
own: readers check its magic, version and ranges, and `SegmentReader.verify`
cross-checks its fields against the batches.  The created timestamp cannot be
checked at all.

`SegmentWriter` builds a segment and its sparse index from whole batches;
`SegmentReader` opens one (magic, version, size, footer magic and body CRC
first).  `decode_segment_header` / `decode_segment_footer` serve the read path,
which range-GETs the first 32 or last 16 bytes of an object, and
`iter_batch_headers` walks the batches in any range of body bytes.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c

from kfs_core.errors import CorruptRecordBatch, CorruptSegment
from kfs_core.formats.index import IndexEntry, IndexSampler, encode_index
from kfs_core.records.crc import batches_crc
from kfs_core.records.header import (
    CODEC_MASK,
    CRC_OFFSET,
    LOG_OVERHEAD,
    BatchHeader,
    batch_crc,
    read_batch_header,
)

Buffer = bytes | bytearray | memoryview

SEGMENT_MAGIC = b"KAFS"
SEGMENT_VERSION = 1
FOOTER_MAGIC = b"END!"
SEGMENT_SUFFIX = ".kfs"
INDEX_SUFFIX = ".index"

SEGMENT_HEADER = struct.Struct(
    ">4s"  # magic b"KAFS"
    "H"  # version
    "H"  # flags (bits 0-2: Kafka codec of the batches)
    "q"  # base offset
    "i"  # message count
    "q"  # created ms
    "I"  # reserved
)
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size  # 32
VERSION_OFFSET = struct.calcsize(">4s")  # 4
FLAGS_OFFSET = struct.calcsize(">4sH")  # 6
BASE_OFFSET_OFFSET = struct.calcsize(">4sHH")  # 8
MESSAGE_COUNT_OFFSET = struct.calcsize(">4sHHq")  # 16
CREATED_MS_OFFSET = struct.calcsize(">4sHHqi")  # 20
RESERVED_OFFSET = struct.calcsize(">4sHHqiq")  # 28

SEGMENT_FOOTER = struct.Struct(
    ">I"  # CRC-32C of the body
    "q"  # last offset
    "4s"  # footer magic b"END!"
)
SEGMENT_FOOTER_SIZE = SEGMENT_FOOTER.size  # 16
FOOTER_LAST_OFFSET_OFFSET = struct.calcsize(">I")  # 4, relative to the footer
FOOTER_MAGIC_OFFSET = struct.calcsize(">Iq")  # 12, relative to the footer

# Inside a RecordBatch: where the last offset delta sits (records/header.py).
LAST_OFFSET_DELTA_OFFSET = struct.calcsize(">qiibIh")  # 23
_BATCH_LENGTH = struct.Struct(">i")  # batch length, right after the base offset

SEGMENT_OVERHEAD = SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE  # 48
# Index positions are i32, so no batch may start past this, and the header's
# message count is an i32.
MAX_SEGMENT_SIZE = 2**31 - 1
MAX_MESSAGE_COUNT = 2**31 - 1
MAX_CODEC = 4  # zstd; 5-7 are not Kafka codecs
NO_TIMESTAMP = -1  # Kafka's "no timestamp"

assert SEGMENT_HEADER_SIZE == 32
assert SEGMENT_FOOTER_SIZE == 16

# An optional suffix after the base offset: -e{epoch} (a leader's), -c/-m{run}
# (compaction), -r{hex} (restore); see `kfs_core.catalog.layout`.
_OBJECT_NAME = re.compile(r"segment-(\d{20})(?:-[0-9a-z]+)?\.(kfs|index)")


# --- header and footer -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    base_offset: int
    message_count: int
    created_ms: int
    flags: int = 0
    version: int = SEGMENT_VERSION
    reserved: int = 0

    @property
    def codec(self) -> int:
        """The Kafka codec shared by every batch; 0 when mixed or uncompressed."""
        return self.flags & CODEC_MASK


@dataclass(frozen=True, slots=True)
class SegmentFooter:
    body_crc: int
    last_offset: int


def encode_segment_header(header: SegmentHeader) -> bytes:
    return SEGMENT_HEADER.pack(
        SEGMENT_MAGIC,
        header.version,
        header.flags,
        header.base_offset,
        header.message_count,
        header.created_ms,
        header.reserved,
    )


def decode_segment_header(buf: Buffer, object_name: str = "<segment>") -> SegmentHeader:
    """Decode and check the 32-byte header at the start of ``buf``.

    Checks magic, version, the codec bits and that base offset and message
    count are not negative; raises `CorruptSegment` naming the field's offset.
    """
    if len(buf) < SEGMENT_HEADER_SIZE:
        raise CorruptSegment(
            f"truncated segment header: {len(buf)} bytes, need {SEGMENT_HEADER_SIZE}",
            object_name=object_name,
            offset=len(buf),
        )
    magic, version, flags, base_offset, count, created_ms, reserved = SEGMENT_HEADER.unpack_from(
        buf, 0
    )
    if magic != SEGMENT_MAGIC:
        raise CorruptSegment(
            f"segment magic {magic!r}, expected {SEGMENT_MAGIC!r}",
            object_name=object_name,
            offset=0,
        )
    if version != SEGMENT_VERSION:
        raise CorruptSegment(
            f"segment version {version}, this build reads {SEGMENT_VERSION}",
            object_name=object_name,
            offset=VERSION_OFFSET,
        )
    if flags & CODEC_MASK > MAX_CODEC:
        raise CorruptSegment(
            f"segment flags {flags:#06x} name codec {flags & CODEC_MASK}, not a Kafka codec",
            object_name=object_name,
            offset=FLAGS_OFFSET,
        )
    if base_offset < 0:
        raise CorruptSegment(
            f"negative base offset {base_offset}",
            object_name=object_name,
            offset=BASE_OFFSET_OFFSET,
        )
    if count < 0:
        raise CorruptSegment(
            f"negative message count {count}",
            object_name=object_name,
            offset=MESSAGE_COUNT_OFFSET,
        )
    return SegmentHeader(base_offset, count, created_ms, flags, version, reserved)


def encode_segment_footer(footer: SegmentFooter) -> bytes:
    return SEGMENT_FOOTER.pack(footer.body_crc, footer.last_offset, FOOTER_MAGIC)


def decode_segment_footer(
    buf: Buffer, object_name: str = "<segment>", *, file_offset: int = 0
) -> SegmentFooter:
    """Decode and check the 16-byte footer at the start of ``buf``.

    ``file_offset`` is where ``buf`` starts in the segment file (its size minus
    16 for a suffix range GET), so errors name the right byte.
    """
    if len(buf) < SEGMENT_FOOTER_SIZE:
        raise CorruptSegment(
            f"truncated segment footer: {len(buf)} bytes, need {SEGMENT_FOOTER_SIZE}",
            object_name=object_name,
            offset=file_offset + len(buf),
        )
    body_crc, last_offset, magic = SEGMENT_FOOTER.unpack_from(buf, 0)
    if magic != FOOTER_MAGIC:
        raise CorruptSegment(
            f"footer magic {magic!r}, expected {FOOTER_MAGIC!r} (truncated or overwritten?)",
            object_name=object_name,
            offset=file_offset + FOOTER_MAGIC_OFFSET,
        )
    return SegmentFooter(body_crc, last_offset)


def segment_object_name(base_offset: int) -> str:
    """``segment-{base:020}.kfs``: zero padding makes key order offset order."""
    return f"segment-{base_offset:020d}{SEGMENT_SUFFIX}"


def index_object_name(base_offset: int) -> str:
    return f"segment-{base_offset:020d}{INDEX_SUFFIX}"


def parse_object_name(name: str) -> int:
    """The base offset in a segment or index object name (the last path part)."""
    match = _OBJECT_NAME.fullmatch(name.rsplit("/", 1)[-1])
    if match is None:
        raise ValueError(f"not a segment or index object name: {name!r}")
    return int(match.group(1))


# --- metadata --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentMeta:
    """What the catalog records about a segment.

    Timestamps come from the batch headers, not the records: ``max_timestamp``
    is exact, ``min_timestamp`` is the smallest batch first timestamp (a
    record may carry an earlier one).  Both are -1 when no batch has one.
    """

    base_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    min_timestamp: int
    max_timestamp: int
    flags: int
    size: int
    created_ms: int

    @property
    def codec(self) -> int:
        return self.flags & CODEC_MASK


class _BatchStats:
    """Per-batch running totals shared by the writer and `SegmentReader.verify`."""

    __slots__ = ("batch_count", "codec", "max_ts", "min_ts", "record_count")

    def __init__(self) -> None:
        self.batch_count = 0
        self.record_count = 0
        self.min_ts = NO_TIMESTAMP
        self.max_ts = NO_TIMESTAMP
        self.codec: int | None = None  # None: no batch yet; -1: mixed

    def add(self, header: BatchHeader) -> None:
        self.batch_count += 1
        self.record_count += header.record_count
        # LogAppendTime batches stamp every record with the max timestamp, and
        # a KIP-534 delete horizon replaces the first timestamp.
        if header.timestamp_type == 1 or header.has_delete_horizon:
            first_ts = header.max_timestamp
        else:
            first_ts = header.first_timestamp
        if first_ts >= 0 and (self.min_ts < 0 or first_ts < self.min_ts):
            self.min_ts = first_ts
        self.max_ts = max(self.max_ts, header.max_timestamp)
        codec = header.codec
        if self.codec is None:
            self.codec = codec
        elif self.codec != codec:
            self.codec = -1

    @property
    def flags(self) -> int:
        return self.codec if self.codec is not None and self.codec > 0 else 0


# --- writer ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SealedSegment:
    """A finished segment: the `.kfs` bytes, its `.index` bytes and metadata.

    The `.kfs` bytes are ``parts`` (header, the batches as appended, footer),
    joined into one ``bytes`` only when `data` is first asked for: a writer
    that can write the parts one after another (`ObjectStore.put_parts`)
    never pays for the join, nor for the fresh memory it needs.
    """

    parts: tuple[Buffer, ...]
    index: bytes
    meta: SegmentMeta
    index_entries: tuple[IndexEntry, ...]
    _joined: list[bytes] = field(default_factory=list, repr=False, compare=False)

    @property
    def data(self) -> bytes:
        """The `.kfs` object's bytes (joined from `parts` once, then kept)."""
        if not self._joined:
            self._joined.append(b"".join(self.parts))
        return self._joined[0]

    @property
    def joined(self) -> bool:
        """Whether `data` has been joined already (then write that, not the parts)."""
        return bool(self._joined)


class SegmentWriter:
    """Builds one segment from whole RecordBatch v2 buffers with offsets assigned.

    Work is per batch, never per record: `append` decodes the 61-byte batch
    header and extends a running CRC-32C over the batch; `finish` hands back
    header, batches and footer as the segment's parts, uncopied
    (`SealedSegment.data` joins them on demand).  Batch CRCs are not re-checked here (the
    produce path already did); `SegmentReader.verify` checks them.
    """

    def __init__(
        self,
        base_offset: int | None = None,
        created_ms: int | None = None,
        index_interval: int = 100,
    ) -> None:
        if base_offset is not None and base_offset < 0:
            raise ValueError(f"base offset must not be negative, got {base_offset}")
        self._base_offset = base_offset
        self._created_ms = time.time_ns() // 1_000_000 if created_ms is None else created_ms
        self._chunks: list[bytes | memoryview] = []
        self._position = SEGMENT_HEADER_SIZE  # where the next batch goes
        self._body_crc = 0
        self._last_offset: int | None = None
        self._stats = _BatchStats()
        self._sampler = IndexSampler(index_interval)
        self._finished = False

    @property
    def base_offset(self) -> int | None:
        return self._base_offset

    @property
    def size(self) -> int:
        """Bytes of the segment file if it were finished now (footer included)."""
        return self._position + SEGMENT_FOOTER_SIZE

    @property
    def message_count(self) -> int:
        return self._stats.record_count

    @property
    def batch_count(self) -> int:
        return self._stats.batch_count

    @property
    def last_offset(self) -> int | None:
        return self._last_offset

    @property
    def index_interval(self) -> int:
        return self._sampler.interval

    def append(
        self, batch_bytes: Buffer, *, borrow: bool = False, crcs_checked: bool = False
    ) -> int:
        """Add one or more concatenated batches; returns the first one's file position.

        Raises `CorruptRecordBatch` for bytes that are not whole v2 batches and
        `ValueError` for offsets that do not strictly increase (or start below
        the segment's base offset) or a segment that would outgrow 2 GiB.
        Nothing is added unless every batch in ``batch_bytes`` passes.

        A mutable ``batch_bytes`` is copied, unless ``borrow`` says the caller
        will not change it while the sealed segment is in use: then the
        segment's parts are views of it, never copied unless `SealedSegment.data`
        is asked for (the daemon's flush borrows its buffered batches).

        ``crcs_checked`` says the batches' stored CRCs are right (the produce
        path checked them, or an encoder computed them): the body CRC is then
        extended from them (`kfs_core.records.crc.batches_crc`) without
        reading the batches.
        """
        if self._finished:
            raise ValueError("segment already finished")
        buf: bytes | memoryview
        if isinstance(batch_bytes, bytes):
            buf = batch_bytes
        elif borrow:
            buf = memoryview(batch_bytes).cast("B")
        else:
            buf = bytes(batch_bytes)  # the caller may reuse its buffer
        headers = self._check_batches(buf)
        start = self._position
        if self._base_offset is None:
            self._base_offset = headers[0].base_offset
        position = start
        for header in headers:
            self._sampler.add(header.base_offset, position, header.record_count)
            self._stats.add(header)
            position += header.total_size
        self._position = position
        self._last_offset = headers[-1].last_offset
        if crcs_checked:
            self._body_crc = batches_crc(buf, self._body_crc)
        else:
            self._body_crc = crc32c.crc32c(buf, self._body_crc)
        self._chunks.append(buf)
        return start

    def _check_batches(self, buf: bytes | memoryview) -> list[BatchHeader]:
        headers: list[BatchHeader] = []
        previous = self._last_offset
        floor = self._base_offset
        pos = 0
        while pos < len(buf):
            header = read_batch_header(buf, pos, object_name="<appended batch>")
            if header.last_offset_delta < 0 or header.record_count > header.last_offset_delta + 1:
                raise CorruptRecordBatch(
                    f"last offset delta {header.last_offset_delta} cannot hold "
                    f"{header.record_count} records",
                    object_name="<appended batch>",
                    offset=pos + LAST_OFFSET_DELTA_OFFSET,
                )
            if previous is not None and header.base_offset <= previous:
                raise ValueError(
                    f"batch base offset {header.base_offset} does not follow "
                    f"last offset {previous}: offsets must strictly increase"
                )
            if floor is not None and header.base_offset < floor:
                raise ValueError(
                    f"batch base offset {header.base_offset} is below the segment "
                    f"base offset {floor}"
                )
            headers.append(header)
            previous = header.last_offset
            pos += header.total_size
        if not headers:
            raise ValueError("no batch to append")
        if self._position + len(buf) + SEGMENT_FOOTER_SIZE > MAX_SEGMENT_SIZE:
            raise ValueError("segment would exceed 2 GiB: index positions are i32")
        if self._stats.record_count + sum(h.record_count for h in headers) > MAX_MESSAGE_COUNT:
            raise ValueError("segment would hold more than 2**31-1 messages")
        return headers

    def finish(self) -> SealedSegment:
        """Seal the segment; the writer accepts nothing afterwards."""
        if self._finished:
            raise ValueError("segment already finished")
        if self._base_offset is None or self._last_offset is None:
            raise ValueError("cannot finish an empty segment: append a batch first")
        self._finished = True
        stats = self._stats
        header = SegmentHeader(
            base_offset=self._base_offset,
            message_count=stats.record_count,
            created_ms=self._created_ms,
            flags=stats.flags,
        )
        footer = SegmentFooter(self._body_crc, self._last_offset)
        parts = (encode_segment_header(header), *self._chunks, encode_segment_footer(footer))
        self._chunks = []
        entries = self._sampler.entries
        meta = SegmentMeta(
            base_offset=self._base_offset,
            last_offset=self._last_offset,
            record_count=stats.record_count,
            batch_count=stats.batch_count,
            min_timestamp=stats.min_ts,
            max_timestamp=stats.max_ts,
            flags=stats.flags,
            size=sum(len(part) for part in parts),
            created_ms=self._created_ms,
        )
        return SealedSegment(
            parts=parts,
            index=encode_index(entries, self._sampler.interval),
            meta=meta,
            index_entries=tuple(entries),
        )


# --- reader ----------------------------------------------------------------


def iter_batch_headers(
    buf: Buffer,
    object_name: str = "<segment>",
    *,
    start: int = 0,
    end: int | None = None,
    file_offset: int = 0,
    allow_partial: bool = False,
) -> Iterator[tuple[int, BatchHeader]]:
    """Walk the batch headers in ``buf[start:end]``; yield (file position, header).

    ``file_offset`` is where ``buf`` starts in the segment file (for a range
    GET of body bytes), so positions and error offsets are file positions.
    With ``allow_partial`` a batch cut off by ``end`` ends the walk quietly (a
    range read that stopped mid-batch); otherwise it raises `CorruptSegment`.
    Batch CRCs are not checked.
    """
    view = memoryview(buf)
    stop = len(view) if end is None else end
    view = view[:stop]
    pos = start
    while pos < stop:
        if allow_partial and (
            stop - pos < LOG_OVERHEAD
            or pos + LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(view, pos + 8)[0] > stop
        ):
            return
        try:
            header = read_batch_header(view, pos, object_name=object_name)
        except CorruptRecordBatch as exc:
            raise _as_segment_error(exc, file_offset) from exc
        yield file_offset + pos, header
        pos += header.total_size


def _as_segment_error(exc: CorruptRecordBatch, file_offset: int = 0) -> CorruptSegment:
    return CorruptSegment(exc.message, object_name=exc.object_name, offset=exc.offset + file_offset)


class SegmentReader:
    """An open `.kfs` segment held in memory.

    On open: size, header (magic, version, flags), footer magic and, unless
    ``verify=False``, the body CRC-32C.  Skip the body CRC only where the bytes
    were checked before (an L1 cache hit) or are about to be checked batch by
    batch anyway.  `verify` does the full check the validation job needs.
    Every failure raises `CorruptSegment` with the object name and byte offset.
    """

    def __init__(self, data: Buffer, object_name: str = "<segment>", *, verify: bool = True):
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._view = view
        self.object_name = object_name
        size = len(view)
        if size < SEGMENT_OVERHEAD:
            raise CorruptSegment(
                f"truncated segment: {size} bytes, a segment is at least {SEGMENT_OVERHEAD}",
                object_name=object_name,
                offset=size,
            )
        self._body_end = size - SEGMENT_FOOTER_SIZE
        self.header = decode_segment_header(view, object_name)
        self.footer = decode_segment_footer(
            view[self._body_end :], object_name, file_offset=self._body_end
        )
        self._body_crc_checked = False
        if verify:
            self.check_body_crc()

    @property
    def data(self) -> memoryview:
        return self._view

    @property
    def size(self) -> int:
        return len(self._view)

    @property
    def body(self) -> memoryview:
        """The concatenated batches."""
        return self._view[SEGMENT_HEADER_SIZE : self._body_end]

    @property
    def body_end(self) -> int:
        """File position just past the last batch (where the footer starts)."""
        return self._body_end

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.footer.last_offset

    @property
    def message_count(self) -> int:
        return self.header.message_count

    def check_body_crc(self) -> None:
        """Compare the body's CRC-32C with the footer's; done once per reader."""
        if self._body_crc_checked:
            return
        actual = crc32c.crc32c(self.body)
        if actual != self.footer.body_crc:
            position, reason = self._locate_body_damage()
            raise CorruptSegment(
                f"body CRC-32C mismatch: footer {self.footer.body_crc:#010x}, computed "
                f"{actual:#010x}; {reason}",
                object_name=self.object_name,
                offset=position,
            )
        self._body_crc_checked = True

    def _locate_body_damage(self) -> tuple[int, str]:
        """After a body CRC mismatch, find the first batch that fails a batch-level check."""
        try:
            _, last_position, last_offset = self._walk_batches(body_suspect=True)
        except CorruptSegment as exc:
            return exc.offset, exc.message
        if last_position is not None and last_offset != self.footer.last_offset:
            return last_position, (
                f"the last batch ends at offset {last_offset}, the footer says "
                f"{self.footer.last_offset}"
            )
        return SEGMENT_HEADER_SIZE, (
            "every batch passes its own checks, so the damage is outside the batch "
            "CRCs (a batch's base offset or leader epoch) or in the footer CRC at byte "
            f"{self._body_end}"
        )

    def iter_batches(self, start: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (file position, header) for each batch from ``start`` (a batch start)."""
        return iter_batch_headers(
            self._view,
            self.object_name,
            start=SEGMENT_HEADER_SIZE if start is None else start,
            end=self._body_end,
        )

    def batch_bytes(self, position: int, header: BatchHeader) -> memoryview:
        return self._view[position : position + header.total_size]

    def verify(self) -> SegmentMeta:
        """Check everything: body CRC, each batch's CRC and offsets, header and footer.

        Beyond what opening checks: every batch CRC-32C, offsets strictly
        increasing and not below the header's base offset, the header's
        message count, flags and reserved field, the footer's last offset and,
        when the object name is a segment name, its base offset.  Returns the
        metadata recomputed from the batches.
        """
        self.check_body_crc()
        header = self.header
        if header.reserved != 0:
            raise CorruptSegment(
                f"reserved header field is {header.reserved:#x}, expected 0",
                object_name=self.object_name,
                offset=RESERVED_OFFSET,
            )
        try:
            named_base = parse_object_name(self.object_name)
        except ValueError:
            named_base = None
        if named_base is not None and named_base != header.base_offset:
            raise CorruptSegment(
                f"header base offset {header.base_offset}, the object name says {named_base}",
                object_name=self.object_name,
                offset=BASE_OFFSET_OFFSET,
            )
        return self._check_batches()

    def _walk_batches(self, *, body_suspect: bool) -> tuple[_BatchStats, int | None, int]:
        """Check each batch's CRC and offsets; (stats, last batch position, last offset).

        ``body_suspect``: the body failed its CRC, so a first batch below the
        header's base offset blames the batch, not the (unchecksummed) header.
        """
        name = self.object_name
        view = self._view
        header = self.header
        stats = _BatchStats()
        previous_last: int | None = None
        last_position: int | None = None
        last_offset = header.base_offset
        for position, batch in self.iter_batches():
            if batch_crc(view, position, batch.total_size) != batch.crc:
                raise CorruptSegment(
                    f"batch CRC-32C mismatch (base offset {batch.base_offset})",
                    object_name=name,
                    offset=position + CRC_OFFSET,
                )
            if batch.last_offset_delta < 0 or batch.record_count > batch.last_offset_delta + 1:
                raise CorruptSegment(
                    f"batch last offset delta {batch.last_offset_delta} cannot hold "
                    f"{batch.record_count} records",
                    object_name=name,
                    offset=position + LAST_OFFSET_DELTA_OFFSET,
                )
            if previous_last is None:
                if batch.base_offset < header.base_offset:
                    raise CorruptSegment(
                        f"first batch base offset {batch.base_offset} is below the segment "
                        f"base offset {header.base_offset}",
                        object_name=name,
                        offset=position if body_suspect else BASE_OFFSET_OFFSET,
                    )
            elif batch.base_offset <= previous_last:
                raise CorruptSegment(
                    f"batch base offset {batch.base_offset} does not follow the previous "
                    f"batch's last offset {previous_last}",
                    object_name=name,
                    offset=position,
                )
            previous_last = last_offset = batch.last_offset
            last_position = position
            stats.add(batch)
        return stats, last_position, last_offset

    def _check_batches(self) -> SegmentMeta:
        name = self.object_name
        header = self.header
        stats, _, last_offset = self._walk_batches(body_suspect=False)
        if stats.batch_count == 0:
            raise CorruptSegment(
                "segment holds no batch", object_name=name, offset=SEGMENT_HEADER_SIZE
            )
        if stats.record_count != header.message_count:
            raise CorruptSegment(
                f"header message count {header.message_count}, batches hold {stats.record_count}",
                object_name=name,
                offset=MESSAGE_COUNT_OFFSET,
            )
        if last_offset != self.footer.last_offset:
            raise CorruptSegment(
                f"footer last offset {self.footer.last_offset}, last batch ends at {last_offset}",
                object_name=name,
                offset=self._body_end + FOOTER_LAST_OFFSET_OFFSET,
            )
        if header.flags != stats.flags:
            # Version 1 defines only the codec bits, so any other bit is damage.
            raise CorruptSegment(
                f"header flags {header.flags:#06x}, batches say codec {stats.flags}",
                object_name=name,
                offset=FLAGS_OFFSET,
            )
        return SegmentMeta(
            base_offset=header.base_offset,
            last_offset=last_offset,
            record_count=stats.record_count,
            batch_count=stats.batch_count,
            min_timestamp=stats.min_ts,
            max_timestamp=stats.max_ts,
            flags=header.flags,
            size=self.size,
            created_ms=header.created_ms,
        )
