"""WAL frames: golden bytes, round trips, torn tails, zero padding and mid-file corruption."""

from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfs_core.errors import CorruptWal
from kfs_core.formats.wal import (
    FRAME_OVERHEAD,
    WAL_FILE_SIZE,
    FrameType,
    WalEnd,
    WalReader,
    WalRecord,
    decode_wal_record,
    encode_frame,
    encode_record_frame,
    encode_wal_record,
    find_valid_frame,
    record_frame_parts,
    scan_wal,
)
from tests.formats import golden

pytestmark = pytest.mark.unit

NAME = "wal/00000000000000000007.wal"


def frames_of(payloads: list[bytes]) -> tuple[bytes, list[int]]:
    """The concatenated frames and each frame's start position."""
    positions = []
    out = bytearray()
    for payload in payloads:
        positions.append(len(out))
        out += encode_frame(payload)
    return bytes(out), positions


def random_payloads(n: int, seed: int = 1, max_size: int = 300) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(1, max_size)) for _ in range(n)]


def flip(data: bytes, byte: int, bit: int = 0) -> bytes:
    out = bytearray(data)
    out[byte] ^= 1 << bit
    return bytes(out)


# --- golden bytes ----------------------------------------------------------


def test_golden_frame() -> None:
    expected = b"".join(
        [
            struct.pack(">I", 5),  # payload length
            struct.pack(">I", 0x7D965FDB),  # CRC-32C of the length field (pinned)
            b"hello",  # payload
            struct.pack(">I", 0x9A71BB4C),  # CRC-32C of the payload (pinned)
            b"KFW1",  # trailer magic
        ]
    )
    assert encode_frame(b"hello") == expected
    assert [bytes(f.payload) for f in scan_wal(expected).frames] == [b"hello"]


def test_golden_record_payload() -> None:
    expected = b"".join(
        [
            struct.pack(">B", 1),  # frame type: record batch
            struct.pack(">H", 6),  # topic length
            b"orders",  # topic
            struct.pack(">i", 3),  # partition
            struct.pack(">q", 9),  # base offset (read from the batch)
            golden.BATCH_B,  # the Kafka batch, as produced
        ]
    )
    assert encode_wal_record("orders", 3, golden.BATCH_B) == expected
    assert decode_wal_record(expected) == WalRecord(
        FrameType.RECORD_BATCH, "orders", 3, 9, golden.BATCH_B
    )
    assert encode_record_frame("orders", 3, golden.BATCH_B) == encode_frame(expected)
    # For a vectored write: the same bytes, with the caller's batch buffer itself in the middle.
    batch = memoryview(golden.BATCH_B)
    parts = record_frame_parts("orders", 3, batch)
    assert b"".join(parts) == encode_frame(expected)
    assert any(part is batch for part in parts)


# --- records ---------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(list(FrameType)),
    st.text(min_size=1, max_size=249),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.binary(max_size=200),
)
def test_record_round_trip(
    frame_type: FrameType, topic: str, partition: int, base_offset: int, batch: bytes
) -> None:
    record = WalRecord(frame_type, topic, partition, base_offset, batch)
    payload = record.encode()
    assert decode_wal_record(payload) == record
    frame = encode_record_frame(
        topic, partition, batch, base_offset=base_offset, frame_type=frame_type
    )
    assert frame == encode_frame(payload)
    parts = record_frame_parts(
        topic, partition, batch, base_offset=base_offset, frame_type=frame_type
    )
    assert b"".join(parts) == frame
    (only,) = scan_wal(frame).frames
    assert only.record() == record


def test_checkpoint_record_has_no_batch() -> None:
    payload = encode_wal_record("t", 0, base_offset=500, frame_type=FrameType.CHECKPOINT)
    assert decode_wal_record(payload) == WalRecord(FrameType.CHECKPOINT, "t", 0, 500, b"")
    with pytest.raises(ValueError, match="base_offset"):
        encode_wal_record("t", 0)


@pytest.mark.parametrize(
    ("payload", "offset", "message"),
    [
        (b"\x01\x00", 1000, "shorter than its prefix"),
        (b"\x09\x00\x01t" + bytes(12), 1000, "unknown WAL frame type 9"),
        (b"\x01\x00\x09t" + bytes(12), 1001, "cannot hold"),
        (b"\x01\x00\x01\xff" + bytes(12), 1003, "UTF-8"),
    ],
)
def test_bad_record_payloads_raise(payload: bytes, offset: int, message: str) -> None:
    with pytest.raises(CorruptWal, match=message) as info:
        decode_wal_record(payload, NAME, offset=1000)
    assert (info.value.object_name, info.value.offset) == (NAME, offset)


def test_empty_payload_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        encode_frame(b"")


# --- clean endings -----------------------------------------------------------


def test_many_frames_round_trip() -> None:
    payloads = random_payloads(2_000)
    data, positions = frames_of(payloads)
    scan = scan_wal(data, NAME)
    assert [bytes(f.payload) for f in scan.frames] == payloads
    assert [f.position for f in scan.frames] == positions
    assert (scan.end, scan.ending, scan.torn) == (len(data), WalEnd.END_OF_DATA, False)


def test_zero_padded_fixed_size_file() -> None:
    payloads = random_payloads(500, seed=2, max_size=4_000)
    data, _ = frames_of(payloads)
    wal_file = data + bytes(WAL_FILE_SIZE - len(data))
    scan = scan_wal(wal_file, NAME, sealed=True)
    assert [bytes(f.payload) for f in scan.frames] == payloads
    assert (scan.end, scan.ending) == (len(data), WalEnd.ZERO_PADDING)


@pytest.mark.parametrize("padding", [0, 1, 7, 8, 9, 4096])
def test_any_amount_of_padding_is_clean(padding: int) -> None:
    data, _ = frames_of(random_payloads(3))
    scan = scan_wal(data + bytes(padding))
    assert scan.end == len(data)
    assert scan.ending is (WalEnd.ZERO_PADDING if padding else WalEnd.END_OF_DATA)


def test_empty_and_all_zero_files() -> None:
    assert (scan_wal(b"").end, scan_wal(b"").ending) == (0, WalEnd.END_OF_DATA)
    scan = scan_wal(bytes(WAL_FILE_SIZE))
    assert (scan.frames, scan.end, scan.ending) == ([], 0, WalEnd.ZERO_PADDING)


def test_reader_resumes_from_a_start_position_and_reports_the_end() -> None:
    data, positions = frames_of(random_payloads(10))
    reader = WalReader(memoryview(bytearray(data + bytes(100))), NAME, start=positions[4])
    assert (reader.end, reader.ending) == (None, None)  # not scanned yet
    assert [f.position for f in reader] == positions[4:]
    assert (reader.end, reader.ending) == (len(data), WalEnd.ZERO_PADDING)
    records_data = encode_record_frame("t", 1, golden.BATCH_A)
    assert [r.base_offset for r in WalReader(records_data).records()] == [5]


# --- torn tails --------------------------------------------------------------


@pytest.mark.parametrize("padded", [False, True])
def test_torn_tail_at_every_byte_of_the_last_frame(padded: bool) -> None:
    payloads = random_payloads(20, seed=3)
    body, _positions = frames_of(payloads[:-1])
    last = encode_frame(payloads[-1])
    for cut in range(len(last)):
        data = body + last[:cut]
        if padded:
            data += bytes(4096)
        scan = scan_wal(data, NAME)
        assert [bytes(f.payload) for f in scan.frames] == payloads[:-1], cut
        assert scan.end == len(body), cut
        if not any(last[:cut]):
            # The bytes that landed are zeros: indistinguishable from padding.
            assert scan.ending in (WalEnd.END_OF_DATA, WalEnd.ZERO_PADDING)
        else:
            assert scan.ending is WalEnd.TORN, cut
            with pytest.raises(CorruptWal) as info:
                scan_wal(data, NAME, sealed=True)
            assert info.value.offset == len(body)


def test_torn_frame_whose_middle_never_landed() -> None:
    # Sectors persisted out of order: header and trailer on disk, the middle zeros.
    body, _ = frames_of(random_payloads(5))
    last = bytearray(encode_frame(os.urandom(2_000)))
    last[600:1_400] = bytes(800)
    scan = scan_wal(body + bytes(last) + bytes(10_000))
    assert (scan.end, scan.ending) == (len(body), WalEnd.TORN)
    assert "data CRC" in scan.reason


def test_garbage_trailer_at_the_very_end() -> None:
    body, _ = frames_of(random_payloads(5))
    last = encode_frame(b"x" * 100)[:-4] + b"\xde\xad\xbe\xef"
    scan = scan_wal(body + last)
    assert (scan.end, scan.ending) == (len(body), WalEnd.TORN)
    assert "trailer" in scan.reason


def test_garbage_after_padding_without_a_valid_frame_is_a_torn_tail() -> None:
    body, _ = frames_of(random_payloads(5))
    data = body + bytes(64) + os.urandom(300) + bytes(64)
    scan = scan_wal(data)
    assert (scan.end, scan.ending) == (len(body), WalEnd.TORN)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=30), st.data())
def test_any_prefix_yields_exactly_the_whole_frames(
    payloads: list[bytes], data: st.DataObject
) -> None:
    wal, positions = frames_of(payloads)
    cut = data.draw(st.integers(0, len(wal)))
    scan = scan_wal(wal[:cut] + bytes(data.draw(st.integers(0, 64))))
    ends = [p + FRAME_OVERHEAD + len(x) for p, x in zip(positions, payloads, strict=True)]
    complete = [x for x, end in zip(payloads, ends, strict=True) if end <= cut]
    assert [bytes(f.payload) for f in scan.frames] == complete
    assert scan.end == max([0] + [e for e in ends if e <= cut])


# --- corruption in the middle ------------------------------------------------


def test_every_bit_flip_in_a_middle_frame_raises_at_that_frame() -> None:
    payloads = random_payloads(9, seed=4, max_size=40)
    data, positions = frames_of(payloads)
    victim = 4
    start, end = positions[victim], positions[victim + 1]
    for byte in range(start, end):
        for bit in range(8):
            with pytest.raises(CorruptWal) as info:
                scan_wal(flip(data, byte, bit), NAME)
            assert (info.value.object_name, info.value.offset) == (NAME, start), (byte, bit)
            assert info.value.fields["next_frame"] == end


@pytest.mark.parametrize("padded", [False, True])
def test_corrupt_frame_followed_by_a_valid_one_is_never_a_torn_tail(padded: bool) -> None:
    payloads = random_payloads(50, seed=5)
    data, positions = frames_of(payloads)
    damaged = bytearray(data)
    damaged[positions[48] + 20] ^= 0x40  # the second to last frame
    if padded:
        damaged += bytes(1 << 20)
    reader = WalReader(bytes(damaged), NAME)
    seen: list[int] = []
    with pytest.raises(CorruptWal, match="data CRC") as info:
        for frame in reader:
            seen.append(frame.position)  # noqa: PERF401 - frames before the damage stay in seen
    assert seen == positions[:48]  # everything before the damage was delivered
    assert (info.value.offset, info.value.fields["next_frame"]) == (positions[48], positions[49])
    assert f"{NAME}: corrupt at byte {positions[48]}" in str(info.value)


def test_zeroed_header_in_the_middle_is_corruption() -> None:
    data, positions = frames_of(random_payloads(10, seed=6))
    damaged = bytearray(data)
    damaged[positions[3] : positions[3] + 8] = bytes(8)
    with pytest.raises(CorruptWal) as info:
        scan_wal(bytes(damaged), NAME)
    assert (info.value.offset, info.value.fields["next_frame"]) == (positions[3], positions[4])


def test_resync_over_a_large_damaged_frame_is_quick() -> None:
    payloads = [os.urandom(100), os.urandom(1 << 20), os.urandom(100)]
    data, positions = frames_of(payloads)
    damaged = bytes(flip(data, positions[1] + 2, 3)) + bytes(WAL_FILE_SIZE - len(data))
    with pytest.raises(CorruptWal, match="header CRC") as info:
        scan_wal(damaged, NAME)
    assert (info.value.offset, info.value.fields["next_frame"]) == (positions[1], positions[2])


def test_find_valid_frame() -> None:
    data, positions = frames_of(random_payloads(4, seed=7))
    assert find_valid_frame(data, 0) == 0
    assert find_valid_frame(data, 1) == positions[1]
    assert find_valid_frame(data, positions[3] + 1) is None
    assert find_valid_frame(bytes(100) + data, 0) == 100
    assert find_valid_frame(bytes(1000), 0) is None
