"""A small, independent Kafka RecordBatch v2 builder for the format tests.

Written from the Kafka protocol spec so the format tests do not depend on
`kfs_core.records`; `test_segment.py` cross-checks it against kafka-python.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence

import crc32c

CREATE_TIME_BASE = 1_700_000_000_000

_AFTER_CRC = struct.Struct(
    ">h"  # attributes
    "i"  # last offset delta
    "q"  # first timestamp
    "q"  # max timestamp
    "q"  # producer id
    "h"  # producer epoch
    "i"  # base sequence
    "i"  # record count
)
_BEFORE_CRC = struct.Struct(
    ">q"  # base offset
    "i"  # batch length
    "i"  # partition leader epoch
    "b"  # magic
    "I"  # crc
)


def varint(value: int) -> bytes:
    """Zig-zag varint, as Kafka records use."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes) -> bytes:
    body = b"".join(
        [
            b"\x00",  # attributes
            varint(timestamp_delta),
            varint(offset_delta),
            varint(-1) if key is None else varint(len(key)) + key,
            varint(len(value)) + value,
            varint(0),  # header count
        ]
    )
    return varint(len(body)) + body


def make_batch(
    base_offset: int,
    values: Sequence[bytes],
    *,
    keys: Sequence[bytes | None] | None = None,
    offset_deltas: Sequence[int] | None = None,
    first_timestamp: int = CREATE_TIME_BASE,
    codec: int = 0,
    attributes: int = 0,
) -> bytes:
    """One v2 batch; record i has timestamp first_timestamp + i.

    ``offset_deltas`` leaves gaps inside the batch, as compaction does;
    ``codec`` 0 (none) or 1 (gzip).
    """
    deltas = list(range(len(values))) if offset_deltas is None else list(offset_deltas)
    key_list = [None] * len(values) if keys is None else list(keys)
    records = b"".join(
        record(delta, i, key, value)
        for i, (delta, key, value) in enumerate(zip(deltas, key_list, values, strict=True))
    )
    if codec == 1:
        records = gzip.compress(records, mtime=0)
    elif codec != 0:
        raise ValueError("the test builder knows codecs 0 and 1")
    after_crc = (
        _AFTER_CRC.pack(
            attributes | codec,
            deltas[-1] if deltas else 0,
            first_timestamp,
            first_timestamp + max(len(values) - 1, 0),
            -1,
            -1,
            -1,
            len(values),
        )
        + records
    )
    batch_length = 4 + 1 + 4 + len(after_crc)  # epoch, magic, crc, rest
    return _BEFORE_CRC.pack(base_offset, batch_length, 0, 2, crc32c.crc32c(after_crc)) + after_crc


def make_batches(specs: Sequence[tuple[int, int]], *, value_size: int = 8) -> list[bytes]:
    """Batches from (base offset, record count) pairs, values of ``value_size`` bytes."""
    return [
        make_batch(base, [bytes([i % 251]) * value_size for i in range(count)])
        for base, count in specs
    ]
