"""CRC-32C of joined bytes from their parts' CRCs, and of whole batches from their stored CRCs."""

from __future__ import annotations

import os

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfs_core.formats.segment import SegmentReader, SegmentWriter
from kfs_core.formats.wal import WalReader, record_frame_parts
from kfs_core.records.crc import batches_crc, combine
from tests.formats.batches import make_batch, make_batches


@given(st.binary(max_size=300), st.binary(max_size=3000))
def test_combine_is_the_crc_of_the_joined_bytes(a: bytes, b: bytes) -> None:
    assert combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b)) == crc32c.crc32c(a + b)


def test_combine_over_a_megabyte() -> None:
    a, b = os.urandom(61), os.urandom(1 << 20)
    assert combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b)) == crc32c.crc32c(a + b)


@given(
    st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=6),
    st.binary(max_size=30),
)
def test_batches_crc_equals_a_pass_over_the_bytes(counts: list[int], before: bytes) -> None:
    batches = b"".join(
        make_batch(i * 100, [os.urandom(i % 7 + 1) for i in range(n)]) for i, n in enumerate(counts)
    )
    start = crc32c.crc32c(before)
    assert batches_crc(batches, start) == crc32c.crc32c(batches, start)
    assert batches_crc(memoryview(bytearray(batches))) == crc32c.crc32c(batches)


def test_batches_crc_trusts_the_stored_crcs() -> None:
    """What the callers promise matters: a batch damaged after its check is not read."""
    batch = bytearray(make_batches([(0, 3)])[0])
    batch[-1] ^= 0xFF
    assert batches_crc(batch) != crc32c.crc32c(batch)


@pytest.mark.parametrize("cut", [1, 20, 61])
def test_batches_crc_refuses_bytes_that_are_not_whole_batches(cut: int) -> None:
    batch = make_batches([(0, 2)])[0]
    with pytest.raises(ValueError, match="batch"):
        batches_crc(batch + batch[:cut])


def test_a_checked_wal_frame_is_the_same_bytes() -> None:
    batch = b"".join(make_batches([(7, 5), (12, 1)], value_size=900))
    computed = b"".join(record_frame_parts("t", 3, batch))
    derived = b"".join(record_frame_parts("t", 3, memoryview(batch), checked=True))
    assert derived == computed
    (frame,) = WalReader(derived).frames()
    assert frame.record().batch == batch


def test_a_checked_segment_is_the_same_bytes() -> None:
    batches = make_batches([(0, 10), (10, 4), (20, 1)], value_size=300)
    plain, checked = SegmentWriter(created_ms=1), SegmentWriter(created_ms=1)
    for batch in batches:
        plain.append(batch)
        checked.append(bytearray(batch), borrow=True, crcs_checked=True)
    data = checked.finish().data
    assert data == plain.finish().data
    SegmentReader(data).verify()
