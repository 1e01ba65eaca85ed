"""Zig-zag and unsigned varints: Kafka's golden values, round trips, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfs_core.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    ZIGZAG_ONE_BYTE,
    decode_uvarint,
    decode_varint,
    decode_varlong,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    read_zigzag,
    size_of_uvarint,
    size_of_varint,
    write_uvarint,
    write_varint,
    zigzag_decode,
    zigzag_encode,
)
from tests.records.kafka_python import decode_varint as kafka_python_decode_varint
from tests.records.kafka_python import encode_varint as kafka_python_encode_varint

pytestmark = pytest.mark.unit

# The values of Kafka's ByteUtilsTest: every boundary where the encoding
# grows by a byte, on both sides of zero.
VARINT_GOLDEN = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (-8193, "818001"),
    (1048575, "feff7f"),
    (-1048576, "ffff7f"),
    (1048576, "80808001"),
    (-1048577, "81808001"),
    (134217727, "feffff7f"),
    (-134217728, "ffffff7f"),
    (134217728, "8080808001"),
    (-134217729, "8180808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]
VARLONG_GOLDEN = [
    *VARINT_GOLDEN,
    (INT32_MAX + 1, "8080808010"),
    (INT32_MIN - 1, "8180808010"),
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]
UVARINT_GOLDEN = [
    (0, "00"),
    (1, "01"),
    (127, "7f"),
    (128, "8001"),
    (300, "ac02"),
    (16383, "ff7f"),
    (16384, "808001"),
    (2**32 - 1, "ffffffff0f"),
    (2**64 - 1, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "hex_bytes"), VARINT_GOLDEN)
def test_varint_golden(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)


@pytest.mark.parametrize(("value", "hex_bytes"), VARLONG_GOLDEN)
def test_varlong_golden(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    assert encode_varlong(value) == encoded
    assert decode_varlong(encoded) == (value, len(encoded))
    assert read_zigzag(encoded, 0) == (value, len(encoded))
    out = bytearray(b"\xaa")
    write_varint(out, value)
    assert bytes(out) == b"\xaa" + encoded


@pytest.mark.parametrize(("value", "hex_bytes"), UVARINT_GOLDEN)
def test_uvarint_golden(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    assert encode_uvarint(value) == encoded
    assert decode_uvarint(encoded) == (value, len(encoded))
    assert size_of_uvarint(value) == len(encoded)
    out = bytearray()
    write_uvarint(out, value)
    assert bytes(out) == encoded


def test_zigzag_mapping() -> None:
    assert [zigzag_encode(v) for v in (0, -1, 1, -2, 2, INT64_MIN)] == [0, 1, 2, 3, 4, 2**64 - 1]
    assert ZIGZAG_ONE_BYTE[:5] == (0, -1, 1, -2, 2)
    assert ZIGZAG_ONE_BYTE[127] == -64


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip_and_kafka_python_agrees(value: int) -> None:
    encoded = encode_varlong(value)
    assert decode_varlong(encoded + b"\xff") == (value, len(encoded))
    assert zigzag_decode(zigzag_encode(value)) == value
    theirs = bytearray()
    kafka_python_encode_varint(value, theirs.append)
    assert bytes(theirs) == encoded
    assert kafka_python_decode_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(INT32_MIN, INT32_MAX), st.binary(max_size=4))
def test_varint_decodes_at_an_offset(value: int, prefix: bytes) -> None:
    buf = prefix + encode_varint(value)
    assert decode_varint(buf, len(prefix)) == (value, len(buf))
    assert decode_varint(memoryview(buf), len(prefix)) == (value, len(buf))


@given(st.integers(0, 2**64 - 1))
def test_uvarint_round_trip(value: int) -> None:
    encoded = encode_uvarint(value)
    assert decode_uvarint(bytearray(encoded)) == (value, len(encoded))
    assert size_of_uvarint(value) == len(encoded)


@pytest.mark.parametrize(
    ("decode", "hex_bytes", "why"),
    [
        (decode_varint, "", "past the end"),
        (decode_varint, "80", "past the end"),
        (decode_varint, "ffffffff", "past the end"),
        (decode_varint, "808080808001", "longer than 5"),
        (decode_varint, "ffffffff1f", "overflows int32"),
        (decode_varlong, "ffffffffffffffffff", "past the end"),
        (decode_varlong, "8080808080808080808001", "longer than 10"),
        (decode_varlong, "ffffffffffffffffff7f", "overflows int64"),
        (decode_uvarint, "8080", "past the end"),
    ],
)
def test_malformed_varints_raise_value_error(decode, hex_bytes: str, why: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=why):
        decode(bytes.fromhex(hex_bytes), 0)


def test_read_zigzag_limits() -> None:
    with pytest.raises(ValueError, match="longer than 10"):
        read_zigzag(b"\x80" * 11 + b"\x01", 0)
    with pytest.raises(IndexError):
        read_zigzag(b"\x80\x80", 0)


@pytest.mark.parametrize(
    ("encode", "value"),
    [
        (encode_varint, INT32_MAX + 1),
        (encode_varint, INT32_MIN - 1),
        (encode_varlong, INT64_MAX + 1),
        (encode_varlong, INT64_MIN - 1),
        (encode_uvarint, -1),
        (encode_uvarint, 2**64),
    ],
)
def test_out_of_range_values_are_refused(encode, value: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="range"):
        encode(value)
    if encode is encode_varlong:
        with pytest.raises(ValueError, match="range"):
            write_varint(bytearray(), value)
