"""`check_segment_bytes`: every problem of a segment's bytes, collected, never raised."""

from __future__ import annotations

import struct

import pytest

from kfs_core.formats.segment import SEGMENT_HEADER_SIZE, SegmentReader, SegmentWriter
from kfs_core.formats.segment_check import check_segment_bytes
from tests.formats.batches import make_batches

pytestmark = pytest.mark.unit

NAME = "ns/orders/0/segment-00000000000000000010.kfs"


def sealed(specs: list[tuple[int, int]] | None = None) -> bytes:
    writer = SegmentWriter(created_ms=1)
    for batch in make_batches(specs or [(10, 3), (13, 2), (20, 4)]):
        writer.append(batch)
    return writer.finish().data


def test_a_sound_segment_passes_every_check() -> None:
    data = sealed()
    check = check_segment_bytes(data, NAME)
    assert check.ok and check.problems == []
    assert (check.header_ok, check.footer_ok, check.body_crc_ok) == (True, True, True)
    assert (check.batches_ok, check.counts_ok) == (True, True)
    assert (check.batch_count, check.record_count, check.offset_gaps) == (3, 9, 1)
    assert (check.first_offset, check.last_offset, check.crc_failures) == (10, 23, 0)
    reader_positions = [position for position, _ in SegmentReader(data, NAME).iter_batches()]
    assert [b.position for b in check.batches] == reader_positions
    assert all(b.crc_ok for b in check.batches)
    assert check.index_checkable


def test_a_flipped_record_bit_fails_the_body_and_one_batch_crc_and_goes_on() -> None:
    data = bytearray(sealed())
    data[SEGMENT_HEADER_SIZE + 70] ^= 0x10  # inside the first batch's records
    check = check_segment_bytes(bytes(data), NAME)
    assert check.body_crc_ok is False
    assert check.crc_failures == 1
    assert [b.crc_ok for b in check.batches] == [False, True, True]
    assert check.batches_ok is True  # the walk went on to the footer
    assert check.problems[0].startswith("body CRC-32C mismatch")
    assert check.problems[1].startswith(f"batch CRC-32C mismatch at byte {SEGMENT_HEADER_SIZE}")


def test_a_name_that_disagrees_with_the_header_is_a_header_problem() -> None:
    check = check_segment_bytes(sealed(), "ns/orders/0/segment-00000000000000000011.kfs")
    assert check.header_ok is False and check.header is not None
    assert "name says 11" in check.problems[0]
    assert check.batches_ok is True


def test_a_wrong_message_count_fails_the_counts() -> None:
    data = bytearray(sealed())
    struct.pack_into(">i", data, 16, 8)  # header message count
    check = check_segment_bytes(bytes(data), NAME)
    assert check.counts_ok is False
    assert check.problems == ["header message count 8, batches hold 9"]


@pytest.mark.parametrize("damage", ["truncate", "magic", "footer"])
def test_unopenable_bytes_are_problems_not_exceptions(damage: str) -> None:
    data = sealed()
    if damage == "truncate":
        data = data[:20]
    elif damage == "magic":
        data = b"XXXX" + data[4:]
    else:
        data = data[:-4] + b"XXXX"
    check = check_segment_bytes(data, NAME)
    assert not check.ok and not check.index_checkable
    if damage == "magic":
        assert check.header_ok is False and check.batch_count is None
    else:
        assert check.footer_ok is False
    if damage == "footer":
        # The batches are still walked, up to the end of the object.
        assert check.batch_count == 3 and check.body_crc_ok is None
