"""The fixed 61-byte header of a Kafka RecordBatch (magic 2).

    offset  size  field
    0       8     base offset           (outside the CRC: the broker rewrites it)
    8       4     batch length          (bytes after this field)
    12      4     partition leader epoch
    16      1     magic = 2
    17      4     CRC-32C of attributes .. end of batch
    21      2     attributes            (bits 0-2 codec, 3 timestamp type,
                                         4 transactional, 5 control,
                                         6 first timestamp is a delete horizon)
    23      4     last offset delta
    27      8     first timestamp
    35      8     max timestamp
    43      8     producer id
    51      2     producer epoch
    53      4     base sequence
    57      4     record count
    61            records (compressed as a whole when codec != 0)

The reference document's "49 bytes" is a miscount of these same fields.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from kfs_core.errors import CorruptRecordBatch

BATCH_HEADER = struct.Struct(
    ">q"  # base offset
    "i"  # batch length
    "i"  # partition leader epoch
    "b"  # magic
    "I"  # crc (unsigned)
    "h"  # attributes
    "i"  # last offset delta
    "q"  # first timestamp
    "q"  # max timestamp
    "q"  # producer id
    "h"  # producer epoch
    "i"  # base sequence
    "i"  # record count
)
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
assert BATCH_HEADER_SIZE == 61
LOG_OVERHEAD = 12  # base offset + batch length: what precedes batch_length's count
MAGIC_V2 = 2
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end of the batch
MAGIC_OFFSET = 16

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
# KIP-534: the log cleaner stores the tombstone delete horizon in the first
# timestamp field and sets this bit; record timestamps stay base + delta.
DELETE_HORIZON_BIT = 0x40


class BatchAttributes:
    """What the attributes and offset fields say: shared by `BatchHeader` and `RecordBatch`."""

    __slots__ = ()
    attributes: int
    base_offset: int
    last_offset_delta: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0


@dataclass(frozen=True, slots=True)
class BatchHeader(BatchAttributes):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def total_size(self) -> int:
        """Bytes of the whole batch, header included."""
        return LOG_OVERHEAD + self.batch_length


def read_batch_header(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, object_name: str = "<batch>"
) -> BatchHeader:
    """Decode the header at ``buf[pos:]``; check magic and that the batch fits.

    Raises `CorruptRecordBatch` naming ``object_name`` and the byte offset.
    Does not check the CRC: see `verify_batch_crc`.
    """
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordBatch(
            f"truncated batch header: {len(buf) - pos} bytes left, need {BATCH_HEADER_SIZE}",
            object_name=object_name,
            offset=pos,
        )
    header = BatchHeader(*BATCH_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordBatch(
            f"batch magic {header.magic}, expected {MAGIC_V2}",
            object_name=object_name,
            offset=pos + MAGIC_OFFSET,
        )
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordBatch(
            f"batch length {header.batch_length} is shorter than a header",
            object_name=object_name,
            offset=pos + 8,
        )
    if pos + header.total_size > len(buf):
        raise CorruptRecordBatch(
            f"truncated batch: length {header.batch_length} runs past the end "
            f"({len(buf) - pos - LOG_OVERHEAD} bytes left)",
            object_name=object_name,
            offset=pos + 8,
        )
    return header


def batch_crc(buf: bytes | bytearray | memoryview, pos: int, total_size: int) -> int:
    """CRC-32C over attributes .. end of the batch that starts at ``pos``."""
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + total_size]
    return int(crc32c.crc32c(view))


def verify_batch_crc(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    *,
    object_name: str = "<batch>",
) -> None:
    actual = batch_crc(buf, pos, header.total_size)
    if actual != header.crc:
        raise CorruptRecordBatch(
            f"batch CRC-32C mismatch: stored {header.crc:#010x}, computed {actual:#010x} "
            f"(base offset {header.base_offset})",
            object_name=object_name,
            offset=pos + CRC_OFFSET,
        )
