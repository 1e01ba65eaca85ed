"""Deterministic Kafka batches for the WAL tests and bench.wal, shared with the kill -9 child.

A batch is a pure function of (partition, base offset, size, record count), so
a process that never saw the bytes -- the parent of a killed child -- can
rebuild exactly what was acknowledged and compare byte for byte.
"""

from __future__ import annotations

import random

from kfs_core.records.batch import Record, encode_batch

TIMESTAMP_BASE = 1_700_000_000_000


def make_batch(partition: int, base_offset: int, size: int | None = None, count: int = 1) -> bytes:
    """A RecordBatch v2 of ``count`` records at ``base_offset``; values total about ``size`` bytes."""
    rng = random.Random(partition * 1_000_003 + base_offset)
    if size is None:
        size = rng.randint(20, 2000)
    per_record = max(1, size // count)
    records = [
        Record(
            base_offset + i,
            TIMESTAMP_BASE + base_offset + i,
            f"k{partition}-{base_offset + i}".encode(),
            rng.randbytes(per_record),
        )
        for i in range(count)
    ]
    return encode_batch(records, base_offset=base_offset)
