"""Produce-side checks: is this buffer of RecordBatch v2 bytes fit to be stored?

`validate_produce` walks the batches a client sent for one partition and
raises the typed error the server turns into a Kafka error code, before
anything is assigned, logged or buffered:

==============================================  ========================  ====
problem                                         error                     code
==============================================  ========================  ====
no batch, a truncated batch, a batch length     `CorruptMessage`          2
shorter than a header, magic other than 2, a
CRC-32C mismatch
a batch larger than ``max.message.bytes``       `MessageTooLarge`         10
record count not ``last offset delta + 1``,     `InvalidRecord`           87
no records, a control batch, a producer id
without a base sequence
==============================================  ========================  ====

These are the checks Kafka's ``LogValidator`` makes on the batch headers of a
v2 produce.  Records themselves are decoded only with ``decode_records=True``
(Kafka decodes them; in Python that costs microseconds per record, so the
daemon leaves it off by default and relies on the CRC).
"""

from __future__ import annotations

import struct

import crc32c

from kfs_core.errors import CorruptMessage, CorruptRecordBatch, InvalidRecord, MessageTooLarge
from kfs_core.records.batch import decode_batch
from kfs_core.records.header import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    BatchHeader,
    read_batch_header,
)

__all__ = ["validate_produce"]

Buffer = bytes | bytearray | memoryview

# The two fields every message format version starts with; the magic byte sits
# at the same place (16) in v0, v1 and v2, so it can be checked first.
_LENGTH = struct.Struct(">i")
_LENGTH_OFFSET = 8
_NO_PRODUCER_ID = -1
# crc32c's gil_release_mode 0: keep the GIL.  This runs on the daemon's event
# loop, where a CRC of a large batch takes tens of microseconds; releasing the
# GIL for it let the WAL writer or a flush thread take it, and getting it back
# cost several times the CRC itself.
_KEEP_GIL = 0


def validate_produce(
    buf: Buffer,
    *,
    max_message_bytes: int,
    name: str = "<produce>",
    decode_records: bool = False,
) -> list[tuple[int, BatchHeader]]:
    """Check every batch in ``buf``; return ``(position, header)`` for each.

    ``name`` (``topic-partition``) goes into error messages.  Raises
    `CorruptMessage`, `MessageTooLarge` or `InvalidRecord` (see the module
    docstring); nothing is modified.
    """
    size = len(buf)
    if size == 0:
        raise CorruptMessage(f"{name}: the produce request carries no record batch")
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < size:
        left = size - pos
        if left < MAGIC_OFFSET + 1:
            raise CorruptMessage(
                f"{name}: {left} bytes after the last batch, too few for a batch header"
            )
        magic = buf[pos + MAGIC_OFFSET]
        if magic != MAGIC_V2:
            raise CorruptMessage(
                f"{name}: batch at byte {pos} has magic {magic}; only RecordBatch v2 "
                "(magic 2) is accepted"
            )
        (length,) = _LENGTH.unpack_from(buf, pos + _LENGTH_OFFSET)
        if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or length > left - LOG_OVERHEAD:
            raise CorruptMessage(
                f"{name}: batch at byte {pos} declares length {length}, but "
                f"{left - LOG_OVERHEAD} bytes follow and a header needs "
                f"{BATCH_HEADER_SIZE - LOG_OVERHEAD}"
            )
        total = LOG_OVERHEAD + length
        if total > max_message_bytes:
            raise MessageTooLarge(
                f"{name}: batch at byte {pos} is {total} bytes, above max.message.bytes "
                f"{max_message_bytes}",
                size=total,
                limit=max_message_bytes,
            )
        try:
            header = read_batch_header(buf, pos, object_name=name)
        except CorruptRecordBatch as exc:
            raise CorruptMessage(str(exc)) from None
        crc = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + total], 0, _KEEP_GIL)
        if crc != header.crc:
            raise CorruptMessage(
                f"{name}: batch at byte {pos}: CRC-32C mismatch: stored {header.crc:#010x}, "
                f"computed {crc:#010x}"
            )
        _check_header(header, pos, name)
        if decode_records:
            try:
                decode_batch(buf, pos, verify_crc=False, object_name=name)
            except CorruptRecordBatch as exc:
                raise InvalidRecord(str(exc)) from None
        batches.append((pos, header))
        pos += total
    return batches


def _check_header(header: BatchHeader, pos: int, name: str) -> None:
    where = f"{name}: batch at byte {pos}"
    if header.is_control:
        raise InvalidRecord(f"{where} is a control batch; clients may not write control records")
    if header.record_count <= 0:
        raise InvalidRecord(f"{where} reports {header.record_count} records")
    if header.last_offset_delta + 1 != header.record_count:
        raise InvalidRecord(
            f"{where} holds {header.record_count} records but its last offset delta is "
            f"{header.last_offset_delta}: a produced batch numbers its records 0..count-1"
        )
    if header.producer_id != _NO_PRODUCER_ID and header.base_sequence < 0:
        raise InvalidRecord(f"{where} has producer id {header.producer_id} but no base sequence")
