"""Kafka RecordBatch v2: encode, decode, iterate, and the broker's in-place edits.

A batch is the 61-byte header of `kfs_core.records.header` followed by its
records, compressed as one block when the codec bits are non-zero:

    batch   = header(61) records
    records = record{record count}          (after decompression)
    record  = length            varint      bytes of the record after this field
              attributes        int8        unused, 0
              timestamp delta   varlong     timestamp - batch first timestamp
              offset delta      varint      offset - batch base offset
              key length        varint      -1 = null key
              key               bytes
              value length      varint      -1 = null value
              value             bytes
              header count      varint
              header*           key length varint, key utf-8 (never null),
                                value length varint (-1 = null), value bytes

Varints are zig-zag (`kfs_core.records.varint`).  The CRC-32C covers
attributes .. end of batch, so the base offset and the partition leader epoch
can be rewritten by the broker without touching it (`rewrite_base_offset`,
`assign_offsets_into`); anything else the broker edits needs a new CRC
(`stamp_log_append_time_into`).

`decode_batch` is on the fetch and validation paths: it reads the header with
one `struct.unpack_from`, decodes one- and two-byte varints inline, and raises
`CorruptRecordBatch` naming the object and byte offset for any inconsistency.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kfs_core.errors import CorruptRecordBatch
from kfs_core.records.codecs import CODEC_NONE, compress, decompress
from kfs_core.records.header import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    DELETE_HORIZON_BIT,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchAttributes,
    BatchHeader,
    batch_crc,
    read_batch_header,
    verify_batch_crc,
)
from kfs_core.records.varint import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    ZIGZAG_ONE_BYTE,
    read_zigzag,
    write_varint,
)

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "Record",
    "RecordBatch",
    "assemble_batch",
    "assign_offsets_into",
    "decode_batch",
    "encode_batch",
    "encode_control_key",
    "iter_batch_headers",
    "iter_batches",
    "parse_control_key",
    "records_section",
    "reencode_batch",
    "rewrite_base_offset",
    "rewrite_base_offset_into",
    "set_partition_leader_epoch_into",
    "stamp_log_append_time_into",
]

BytesLike = bytes | bytearray | memoryview
WritableBuffer = bytearray | memoryview

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# Control record key: version i16, type i16.  Type 0 aborts a transaction,
# type 1 commits it.
CONTROL_KEY = struct.Struct(
    ">h"  # version
    "h"  # type
)
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

# Fields the broker edits in place, each a struct of its own.
BASE_OFFSET = struct.Struct(">q")
BASE_OFFSET_OFFSET = 0
PARTITION_LEADER_EPOCH = struct.Struct(">i")
PARTITION_LEADER_EPOCH_OFFSET = struct.calcsize(">qi")  # 12
CRC = struct.Struct(">I")
ATTRIBUTES = struct.Struct(">h")
MAX_TIMESTAMP = struct.Struct(">q")
MAX_TIMESTAMP_OFFSET = ATTRIBUTES_OFFSET + struct.calcsize(">hiq")  # 35
RECORD_COUNT_OFFSET = BATCH_HEADER_SIZE - struct.calcsize(">i")  # 57
assert MAX_TIMESTAMP_OFFSET == 35

# The shortest record body: attributes, timestamp delta, offset delta, null
# key, null value and header count, one byte each.
_MIN_RECORD_BODY = 6
_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_OFFSET = BASE_OFFSET.size
_ZZ = ZIGZAG_ONE_BYTE


@dataclass(slots=True)
class Record:
    """One record of a batch, with absolute offset and timestamp.

    ``timestamp`` is the batch's first timestamp plus the record's delta, as
    stored.  In a LogAppendTime batch Kafka clients report the batch's max
    timestamp instead: see `RecordBatch.effective_timestamp`.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


@dataclass(slots=True)
class RecordBatch(BatchAttributes):
    """A decoded batch: every header field plus its records."""

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]
    crc: int = 0
    size_in_bytes: int = 0  # of the encoded batch, header included

    @property
    def magic(self) -> int:
        return MAGIC_V2

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def record_count(self) -> int:
        return len(self.records)

    def effective_timestamp(self, record: Record) -> int:
        """The timestamp a Kafka consumer sees for ``record``."""
        if self.attributes & TIMESTAMP_TYPE_BIT:
            return self.max_timestamp
        return record.timestamp


# --- encoding --------------------------------------------------------------


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    codec: int = CODEC_NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    first_timestamp: int | None = None,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Build one batch of ``records`` and its CRC-32C.

    Record offsets are absolute: each one's delta is ``offset - base_offset``,
    and they must increase.  By default the first timestamp is the first
    record's, the max timestamp the largest record timestamp and the last
    offset delta the last record's; pass them to keep the values of an
    existing batch (a LogAppendTime max timestamp, the last offset delta of a
    compacted batch that producer sequence numbers depend on).

    Without records the batch is a bare header with codec none and first
    timestamp -1, as Kafka writes the empty batches compaction keeps.
    """
    if codec & ~CODEC_MASK:
        raise ValueError(f"codec {codec} does not fit the 3 codec bits")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp type {timestamp_type}, expected 0 or 1")
    attributes = codec
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    return _assemble(
        records,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        last_offset_delta=last_offset_delta,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        compression_level=compression_level,
    )


def reencode_batch(
    batch: RecordBatch,
    codec: int | None = None,
    *,
    records: Sequence[Record] | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode ``batch`` again with ``codec`` (default: its own), keeping its header.

    Base offset, leader epoch, attribute bits other than the codec, producer
    id/epoch/sequence, last offset delta and first timestamp are kept as they
    are.  With ``records`` - a subset of the batch's records, as key
    compaction keeps them - the max timestamp of a CreateTime batch becomes
    the largest kept record's, as Kafka's cleaner does; the last offset delta
    is kept, so producer sequence numbers stay valid and no offset is reused.
    No records at all give a bare header with codec none (see `encode_batch`).
    """
    new_codec = batch.codec if codec is None else codec
    if new_codec & ~CODEC_MASK:
        raise ValueError(f"codec {new_codec} does not fit the 3 codec bits")
    first_timestamp: int | None = batch.first_timestamp
    max_timestamp = batch.max_timestamp
    if records is None:
        records = batch.records
    elif records and not batch.attributes & TIMESTAMP_TYPE_BIT:
        max_timestamp = max(r.timestamp for r in records)
    if not records and not batch.attributes & DELETE_HORIZON_BIT:
        first_timestamp = None
    return _assemble(
        records,
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=(batch.attributes & ~CODEC_MASK) | new_codec,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        last_offset_delta=batch.last_offset_delta,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        compression_level=compression_level,
    )


def _assemble(
    records: Sequence[Record],
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    first_timestamp: int | None,
    max_timestamp: int | None,
    last_offset_delta: int | None,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    compression_level: int | None,
) -> bytes:
    if records:
        if first_timestamp is None:
            first_timestamp = records[0].timestamp
        if max_timestamp is None:
            max_timestamp = max(r.timestamp for r in records)
        if last_offset_delta is None:
            last_offset_delta = records[-1].offset - base_offset
        body = _encode_records(records, base_offset, first_timestamp)
        codec = attributes & CODEC_MASK
        payload = compress(codec, body, level=compression_level) if codec else body
    else:
        # An empty batch (kept after compaction for its producer state) is a
        # bare header with codec none and no first timestamp, as Kafka's
        # DefaultRecordBatch.writeEmptyHeader writes it; some readers would
        # try to decompress an empty payload otherwise.
        attributes &= ~CODEC_MASK
        if first_timestamp is None:
            first_timestamp = NO_TIMESTAMP
        if max_timestamp is None:
            max_timestamp = NO_TIMESTAMP
        if last_offset_delta is None:
            last_offset_delta = 0
        payload = b""
    if len(records) > INT32_MAX or not 0 <= last_offset_delta <= INT32_MAX:
        raise ValueError(f"last offset delta {last_offset_delta} outside 0..{INT32_MAX}")
    if records and records[-1].offset - base_offset > last_offset_delta:
        raise ValueError(
            f"record offset {records[-1].offset} beyond last offset "
            f"{base_offset + last_offset_delta}"
        )
    return _frame(
        payload,
        len(records),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        last_offset_delta=last_offset_delta,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def assemble_batch(
    body: BytesLike,
    record_count: int,
    *,
    base_offset: int,
    codec: int,
    first_timestamp: int,
    max_timestamp: int,
    last_offset_delta: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression_level: int | None = None,
) -> bytes:
    """A CreateTime batch around ``body``: ``record_count`` records already encoded.

    The records' deltas must be relative to ``base_offset`` and
    ``first_timestamp`` (`kfs_core.records.merge` builds such bodies); the
    body is compressed with ``codec`` and framed with a fresh CRC.  No
    producer id, epoch or sequence, no transactional or control bit.
    """
    if codec & ~CODEC_MASK:
        raise ValueError(f"codec {codec} does not fit the 3 codec bits")
    if not 0 < record_count <= INT32_MAX or not 0 <= last_offset_delta <= INT32_MAX:
        raise ValueError(
            f"{record_count} records, last offset delta {last_offset_delta}: outside 1..{INT32_MAX}"
        )
    payload = compress(codec, body, level=compression_level) if codec else body
    return _frame(
        payload,
        record_count,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=codec,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        last_offset_delta=last_offset_delta,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
    )


def _frame(
    payload: BytesLike,
    record_count: int,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    first_timestamp: int,
    max_timestamp: int,
    last_offset_delta: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    """Header + ``payload`` (the records, compressed or not) with the CRC-32C set."""
    total = BATCH_HEADER_SIZE + len(payload)
    buf = bytearray(total)
    BATCH_HEADER.pack_into(
        buf,
        0,
        base_offset,
        total - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,  # CRC, computed below over the finished bytes
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    buf[BATCH_HEADER_SIZE:] = payload
    CRC.pack_into(buf, CRC_OFFSET, batch_crc(buf, 0, total))
    return bytes(buf)


def _encode_records(records: Sequence[Record], base_offset: int, first_timestamp: int) -> bytearray:
    out = bytearray()
    body = bytearray()
    previous_delta = -1
    for record in records:
        offset_delta = record.offset - base_offset
        if offset_delta <= previous_delta or offset_delta > INT32_MAX:
            raise ValueError(
                f"record offset {record.offset} is not above the previous one "
                f"and within int32 of base offset {base_offset}"
            )
        previous_delta = offset_delta
        timestamp_delta = record.timestamp - first_timestamp
        if not INT64_MIN <= timestamp_delta <= INT64_MAX:
            raise ValueError(f"timestamp {record.timestamp} too far from {first_timestamp}")
        body.clear()
        body.append(record.attributes & 0xFF)
        write_varint(body, timestamp_delta)
        write_varint(body, offset_delta)
        key = record.key
        if key is None:
            body.append(1)  # zig-zag -1
        else:
            write_varint(body, len(key))
            body += key
        value = record.value
        if value is None:
            body.append(1)
        else:
            write_varint(body, len(value))
            body += value
        write_varint(body, len(record.headers))
        for header_key, header_value in record.headers:
            # surrogateescape: header keys decoded from arbitrary bytes
            # encode back to the same bytes.
            raw_key = header_key.encode("utf-8", "surrogateescape")
            write_varint(body, len(raw_key))
            body += raw_key
            if header_value is None:
                body.append(1)
            else:
                write_varint(body, len(header_value))
                body += header_value
        write_varint(out, len(body))
        out += body
    return out


# --- decoding --------------------------------------------------------------


class _BadRecord(Exception):
    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


def decode_batch(
    buf: BytesLike,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    object_name: str = "<batch>",
) -> RecordBatch:
    """Decode the batch that starts at ``buf[pos]``.

    Checks magic, length and (unless ``verify_crc`` is false) the CRC, then
    decompresses and parses exactly the number of records the header
    announces.  Any failure raises `CorruptRecordBatch` with ``object_name``
    and the byte offset in ``buf``; for a compressed batch the offset is where
    its compressed records start and the message names the position inside
    the decompressed data.
    """
    header = read_batch_header(buf, pos, object_name=object_name)
    if verify_crc:
        verify_batch_crc(buf, pos, header, object_name=object_name)
    return _decode_body(buf, pos, header, object_name)


def records_section(
    buf: BytesLike, pos: int, header: BatchHeader, *, object_name: str = "<batch>"
) -> bytes:
    """The records of the batch at ``buf[pos]`` as bytes, decompressed; no record is parsed.

    Raises `CorruptRecordBatch` for a negative record count or a payload the
    codec cannot decompress.
    """
    return _records_section(buf, pos, header, object_name)[0]


def _records_section(
    buf: BytesLike, pos: int, header: BatchHeader, object_name: str
) -> tuple[bytes, int]:
    """(records, where they start in ``buf``; -1 when decompressed)."""
    count = header.record_count
    if count < 0:
        raise CorruptRecordBatch(
            f"negative record count {count}",
            object_name=object_name,
            offset=pos + RECORD_COUNT_OFFSET,
        )
    start = pos + BATCH_HEADER_SIZE
    end = pos + header.total_size
    codec = header.attributes & CODEC_MASK
    if codec == CODEC_NONE:
        return bytes(buf[start:end]), start
    if count == 0 and end == start:
        return b"", start
    return decompress(codec, memoryview(buf)[start:end], object_name=object_name, offset=start), -1


def _decode_body(buf: BytesLike, pos: int, header: BatchHeader, object_name: str) -> RecordBatch:
    count = header.record_count
    start = pos + BATCH_HEADER_SIZE
    data, where = _records_section(buf, pos, header, object_name)
    try:
        records = _parse_records(data, count, header.base_offset, header.first_timestamp)
    except _BadRecord as exc:
        if where >= 0:
            raise CorruptRecordBatch(
                str(exc), object_name=object_name, offset=where + exc.pos
            ) from None
        raise CorruptRecordBatch(
            f"{exc} (byte {exc.pos} of the decompressed records)",
            object_name=object_name,
            offset=start,
        ) from None
    return RecordBatch(
        header.base_offset,
        header.partition_leader_epoch,
        header.attributes,
        header.last_offset_delta,
        header.first_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        records,
        header.crc,
        header.total_size,
    )


def _parse_records(data: bytes, count: int, base_offset: int, first_timestamp: int) -> list[Record]:
    # Hot loop.  Each varint is decoded inline when it takes one byte (through
    # the zig-zag table) or two (lengths up to 8 KiB), by `read_zigzag`
    # otherwise.  A field running past its record's end is caught by the
    # length check closing each record, a read past the data by IndexError.
    zz = _ZZ
    records: list[Record] = []
    append = records.append
    end = len(data)
    pos = 0
    index = 0
    record_start = 0
    try:
        while index < count:
            if pos >= end:
                raise _BadRecord(f"record count {count} but the records end after {index}", pos)
            record_start = pos
            b = data[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                length, pos = read_zigzag(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BODY or record_end > end:
                raise _BadRecord(
                    f"record {index} has length {length}, {end - pos} bytes left", record_start
                )
            attributes = data[pos]
            if attributes > 0x7F:
                attributes -= 0x100
            pos += 1
            b = data[pos]
            if b < 0x80:
                timestamp_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                timestamp_delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                timestamp_delta, pos = read_zigzag(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                offset_delta, pos = read_zigzag(data, pos)
            b = data[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                n = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                n, pos = read_zigzag(data, pos)
            if n >= 0:
                key: bytes | None = data[pos : pos + n]
                pos += n
            elif n == -1:
                key = None
            else:
                raise _BadRecord(f"record {index} has key length {n}", record_start)
            b = data[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                n = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                n, pos = read_zigzag(data, pos)
            if n >= 0:
                value: bytes | None = data[pos : pos + n]
                pos += n
            elif n == -1:
                value = None
            else:
                raise _BadRecord(f"record {index} has value length {n}", record_start)
            b = data[pos]
            if b < 0x80:
                header_count = zz[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                header_count = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                header_count, pos = read_zigzag(data, pos)
            headers: list[tuple[str, bytes | None]] = []
            if header_count:
                if header_count < 0 or header_count > record_end - pos:
                    raise _BadRecord(
                        f"record {index} has header count {header_count}", record_start
                    )
                pos = _parse_headers(data, pos, header_count, headers, index, record_start)
            if pos != record_end:
                raise _BadRecord(
                    f"record {index} declares {length} bytes but its fields take "
                    f"{length + pos - record_end}",
                    record_start,
                )
            append(
                Record(
                    base_offset + offset_delta,
                    first_timestamp + timestamp_delta,
                    key,
                    value,
                    headers,
                    attributes,
                )
            )
            index += 1
    except (IndexError, ValueError) as exc:
        raise _BadRecord(f"record {index} is malformed: {exc}", record_start) from None
    if pos != end:
        raise _BadRecord(f"{end - pos} bytes left over after the last of {count} records", pos)
    return records


def _parse_headers(
    data: bytes,
    pos: int,
    count: int,
    headers: list[tuple[str, bytes | None]],
    index: int,
    record_start: int,
) -> int:
    zz = _ZZ
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            n = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            u = (b & 0x7F) | (data[pos + 1] << 7)
            n = (u >> 1) ^ -(u & 1)
            pos += 2
        else:
            n, pos = read_zigzag(data, pos)
        if n < 0:
            raise _BadRecord(f"record {index} has a header key of length {n}", record_start)
        # surrogateescape: keep non-UTF-8 key bytes (librdkafka allows them)
        # so the record encodes back to identical bytes.
        header_key = data[pos : pos + n].decode("utf-8", "surrogateescape")
        pos += n
        b = data[pos]
        if b < 0x80:
            n = zz[b]
            pos += 1
        elif data[pos + 1] < 0x80:
            u = (b & 0x7F) | (data[pos + 1] << 7)
            n = (u >> 1) ^ -(u & 1)
            pos += 2
        else:
            n, pos = read_zigzag(data, pos)
        if n >= 0:
            headers.append((header_key, data[pos : pos + n]))
            pos += n
        elif n == -1:
            headers.append((header_key, None))
        else:
            raise _BadRecord(f"record {index} has a header value of length {n}", record_start)
    return pos


# --- walking concatenated batches ------------------------------------------


def iter_batch_headers(
    buf: BytesLike,
    pos: int = 0,
    end: int | None = None,
    *,
    verify_crc: bool = True,
    allow_truncated_tail: bool = False,
    object_name: str = "<batch>",
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in ``buf[pos:end]``.

    Records are not parsed: the headers are what index building and validation need.

    ``allow_truncated_tail`` stops quietly at a last batch cut short, as a
    fetch response limited by max_bytes may end; otherwise that is corruption.
    """
    limit = len(buf) if end is None else min(end, len(buf))
    view = memoryview(buf)[:limit] if limit != len(buf) else buf
    while pos < limit:
        if allow_truncated_tail and _is_truncated(view, pos, limit):
            return
        header = read_batch_header(view, pos, object_name=object_name)
        if verify_crc:
            verify_batch_crc(view, pos, header, object_name=object_name)
        yield pos, header
        pos += header.total_size


def iter_batches(
    buf: BytesLike,
    pos: int = 0,
    end: int | None = None,
    *,
    verify_crc: bool = True,
    allow_truncated_tail: bool = False,
    object_name: str = "<batch>",
) -> Iterator[RecordBatch]:
    """Decode each batch of ``buf[pos:end]`` in turn (see `decode_batch`)."""
    for batch_pos, header in iter_batch_headers(
        buf,
        pos,
        end,
        verify_crc=verify_crc,
        allow_truncated_tail=allow_truncated_tail,
        object_name=object_name,
    ):
        yield _decode_body(buf, batch_pos, header, object_name)


def _is_truncated(buf: BytesLike, pos: int, limit: int) -> bool:
    if limit - pos < LOG_OVERHEAD:
        return True
    length: int = _BATCH_LENGTH.unpack_from(buf, pos + _BATCH_LENGTH_OFFSET)[0]
    return length >= 0 and pos + LOG_OVERHEAD + length > limit


# --- the broker's edits ----------------------------------------------------


def rewrite_base_offset(batch: BytesLike, new_base_offset: int) -> bytes:
    """A copy of the batch with its base offset set; the CRC stays valid."""
    out = bytearray(batch)
    rewrite_base_offset_into(out, new_base_offset)
    return bytes(out)


def rewrite_base_offset_into(
    buf: WritableBuffer, new_base_offset: int, pos: int = 0, *, object_name: str = "<batch>"
) -> BatchHeader:
    """Set the base offset of the batch at ``buf[pos]`` in place.

    The field lies outside the CRC.  Returns the batch's header as it was
    before the edit (its ``total_size`` leads to the next batch).
    """
    header = read_batch_header(buf, pos, object_name=object_name)
    BASE_OFFSET.pack_into(buf, pos + BASE_OFFSET_OFFSET, new_base_offset)
    return header


def assign_offsets_into(
    buf: WritableBuffer,
    next_offset: int,
    *,
    object_name: str = "<batch>",
    leader_epoch: int | None = None,
) -> int:
    """Give every batch in ``buf`` its offsets, as a broker does on produce.

    Batch after batch, the base offset becomes ``next_offset``, which then
    moves past the batch's last offset delta.  With ``leader_epoch``, each
    batch's partition leader epoch becomes it too, as a Kafka leader stamps
    its own: consumers remember the epoch of what they read and ask
    OffsetForLeaderEpoch about it after a leader change.  Returns the
    offset after the last batch.  CRCs are not checked or changed (both
    fields lie before the part they cover).
    """
    pos = 0
    limit = len(buf)
    while pos < limit:
        header = rewrite_base_offset_into(buf, next_offset, pos, object_name=object_name)
        if leader_epoch is not None:
            PARTITION_LEADER_EPOCH.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        next_offset += header.last_offset_delta + 1
        pos += header.total_size
    return next_offset


def set_partition_leader_epoch_into(
    buf: WritableBuffer, epoch: int, pos: int = 0, *, object_name: str = "<batch>"
) -> None:
    """Set the partition leader epoch in place; it lies outside the CRC."""
    read_batch_header(buf, pos, object_name=object_name)
    PARTITION_LEADER_EPOCH.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def stamp_log_append_time_into(
    buf: WritableBuffer, timestamp_ms: int, pos: int = 0, *, object_name: str = "<batch>"
) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` and recompute its CRC.

    What a broker does for a topic with ``message.timestamp.type=LogAppendTime``:
    set the timestamp-type bit and the max timestamp; records are untouched.
    """
    header = read_batch_header(buf, pos, object_name=object_name)
    ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_BIT)
    MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    CRC.pack_into(buf, pos + CRC_OFFSET, batch_crc(buf, pos, header.total_size))


# --- control records -------------------------------------------------------


def encode_control_key(control_type: int, version: int = 0) -> bytes:
    """Key of a transaction marker: `CONTROL_COMMIT` or `CONTROL_ABORT`."""
    return CONTROL_KEY.pack(version, control_type)


def parse_control_key(key: bytes | None) -> tuple[int, int]:
    """``(version, type)`` of a control record's key."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordBatch(f"control record key {key!r} is shorter than 4 bytes")
    version, control_type = CONTROL_KEY.unpack_from(key)
    return int(version), int(control_type)
