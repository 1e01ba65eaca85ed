"""The tiny golden segment and index, built field by field with CRCs pinned.

Nothing here calls `kfs_core`: every byte is spelled out so a change to the
writer that moves a byte fails `test_golden.py`.  The checked-in fixtures
`data/tiny-segment.kfs.bin` and `data/tiny-segment.index.bin` hold exactly
these bytes; regenerate them (only on a deliberate format change) with::

    .venv/bin/python -m tests.formats.golden
"""

from __future__ import annotations

import struct
from pathlib import Path

DATA = Path(__file__).parent / "data"
SEGMENT_FIXTURE = DATA / "tiny-segment.kfs.bin"
INDEX_FIXTURE = DATA / "tiny-segment.index.bin"

CREATED_MS = 1_700_000_000_123
INDEX_INTERVAL = 2

# Batch A: offsets 5 and 6, CreateTime 1_700_000_000_000 and +1, no compression.
BATCH_A_RECORDS = b"".join(
    [
        # record offset 5: length 7, attributes 0, timestamp delta 0, offset delta 0,
        # key null (-1), value length 1, b"a", 0 headers  (all zig-zag varints)
        bytes([0x0E, 0x00, 0x00, 0x00, 0x01, 0x02]) + b"a" + bytes([0x00]),
        # record offset 6: length 9, attributes 0, timestamp delta 1, offset delta 1,
        # key length 1, b"k", value length 2, b"bc", 0 headers
        bytes([0x12, 0x00, 0x02, 0x02, 0x02]) + b"k" + bytes([0x04]) + b"bc" + bytes([0x00]),
    ]
)
BATCH_A = b"".join(
    [
        struct.pack(">q", 5),  # base offset
        struct.pack(">i", 49 + len(BATCH_A_RECORDS)),  # batch length: bytes after this field
        struct.pack(">i", 0),  # partition leader epoch
        struct.pack(">b", 2),  # magic
        struct.pack(">I", 0xE69868A3),  # CRC-32C of attributes .. end (pinned)
        struct.pack(">h", 0),  # attributes: no codec, CreateTime
        struct.pack(">i", 1),  # last offset delta
        struct.pack(">q", 1_700_000_000_000),  # first timestamp
        struct.pack(">q", 1_700_000_000_001),  # max timestamp
        struct.pack(">q", -1),  # producer id
        struct.pack(">h", -1),  # producer epoch
        struct.pack(">i", -1),  # base sequence
        struct.pack(">i", 2),  # record count
        BATCH_A_RECORDS,
    ]
)

# Batch B: offset 9 (7 and 8 compacted away), CreateTime 1_700_000_000_005.
BATCH_B_RECORDS = (
    # record offset 9: length 9, attributes 0, timestamp delta 0, offset delta 0,
    # key null, value length 3, b"xyz", 0 headers
    bytes([0x12, 0x00, 0x00, 0x00, 0x01, 0x06]) + b"xyz" + bytes([0x00])
)
BATCH_B = b"".join(
    [
        struct.pack(">q", 9),  # base offset
        struct.pack(">i", 49 + len(BATCH_B_RECORDS)),  # batch length
        struct.pack(">i", 0),  # partition leader epoch
        struct.pack(">b", 2),  # magic
        struct.pack(">I", 0x2281A97D),  # CRC-32C (pinned)
        struct.pack(">h", 0),  # attributes
        struct.pack(">i", 0),  # last offset delta
        struct.pack(">q", 1_700_000_000_005),  # first timestamp
        struct.pack(">q", 1_700_000_000_005),  # max timestamp
        struct.pack(">q", -1),  # producer id
        struct.pack(">h", -1),  # producer epoch
        struct.pack(">i", -1),  # base sequence
        struct.pack(">i", 1),  # record count
        BATCH_B_RECORDS,
    ]
)
BATCH_A_POSITION = 32
BATCH_B_POSITION = 32 + len(BATCH_A)  # 111

SEGMENT = b"".join(
    [
        # header, 32 bytes
        b"KAFS",  # magic
        struct.pack(">H", 1),  # version
        struct.pack(">H", 0),  # flags: codec none
        struct.pack(">q", 5),  # base offset
        struct.pack(">i", 3),  # message count: 2 + 1
        struct.pack(">q", CREATED_MS),  # created ms
        struct.pack(">I", 0),  # reserved
        # body
        BATCH_A,
        BATCH_B,
        # footer, 16 bytes
        struct.pack(">I", 0x0FFEF496),  # CRC-32C of the body (pinned)
        struct.pack(">q", 9),  # last offset
        b"END!",  # footer magic
    ]
)

INDEX = b"".join(
    [
        # header, 16 bytes
        b"IDX\x00",  # magic
        struct.pack(">H", 1),  # version
        struct.pack(">i", 2),  # entry count
        struct.pack(">i", INDEX_INTERVAL),  # interval
        struct.pack(">H", 0),  # reserved
        # entries, 12 bytes each
        struct.pack(">q", 5) + struct.pack(">i", BATCH_A_POSITION),  # first batch, always
        struct.pack(">q", 9) + struct.pack(">i", BATCH_B_POSITION),  # 2 messages later
    ]
)


def main() -> None:
    DATA.mkdir(exist_ok=True)
    SEGMENT_FIXTURE.write_bytes(SEGMENT)
    INDEX_FIXTURE.write_bytes(INDEX)


if __name__ == "__main__":
    main()
