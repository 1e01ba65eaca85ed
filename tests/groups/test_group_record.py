"""GroupMetadata records of ``__consumer_offsets``: Kafka's byte layouts, read back."""

from __future__ import annotations

import struct

import pytest

from kfs_core.groups.group_record import (
    StoredGroup,
    StoredMember,
    decode_group_record,
    encode_group_key,
    encode_group_value,
)
from kfs_core.groups.offset_log import encode_offset_key

pytestmark = pytest.mark.unit

MEMBER = StoredMember(
    member_id="m-1",
    instance_id="host-a",
    client_id="app",
    client_host="/10.0.0.7",
    rebalance_timeout_ms=60_000,
    session_timeout_ms=45_000,
    subscription=b"\x00\x01sub",
    assignment=b"\x00\x01asg",
)
STABLE = StoredGroup("consumer", 7, "range", "m-1", 1_700_000_000_000, (MEMBER,))


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_the_key_and_value_are_kafkas_v2_and_v3_layouts() -> None:
    assert encode_group_key("orders-app") == b"\x00\x02" + _s("orders-app")
    expected = (
        b"\x00\x03"
        + _s("consumer")
        + struct.pack(">i", 7)
        + _s("range")
        + _s("m-1")
        + struct.pack(">q", 1_700_000_000_000)
        + struct.pack(">i", 1)
        + _s("m-1")
        + _s("host-a")
        + _s("app")
        + _s("/10.0.0.7")
        + struct.pack(">ii", 60_000, 45_000)
        + struct.pack(">i", 5)
        + b"\x00\x01sub"
        + struct.pack(">i", 5)
        + b"\x00\x01asg"
    )
    assert encode_group_value(STABLE) == expected


def test_values_round_trip_and_an_empty_group_has_null_protocol_and_leader() -> None:
    key = encode_group_key("g")
    assert decode_group_record(key, encode_group_value(STABLE)) == ("g", STABLE)
    empty = StoredGroup("consumer", 8, None, None, 5)
    value = encode_group_value(empty)
    assert b"\xff\xff\xff\xff" in value  # two null strings
    assert decode_group_record(key, value) == ("g", empty)
    assert decode_group_record(key, None) == ("g", None)


def test_older_value_versions_are_read() -> None:
    v0 = (
        b"\x00\x00"
        + _s("consumer")
        + struct.pack(">i", 2)
        + _s("range")
        + _s("m")
        + struct.pack(">i", 1)
        + _s("m")
        + _s("c")
        + _s("h")
        + struct.pack(">i", 10_000)  # session timeout only
        + struct.pack(">i", 0)
        + struct.pack(">i", 0)
    )
    _, stored = decode_group_record(encode_group_key("g"), v0) or ("", None)
    assert stored == StoredGroup(
        "consumer",
        2,
        "range",
        "m",
        -1,
        (StoredMember("m", None, "c", "h", 10_000, 10_000, b"", b""),),
    )


def test_offset_keys_are_not_group_records() -> None:
    assert decode_group_record(encode_offset_key("g", "t", 0), b"") is None


@pytest.mark.parametrize(
    "value",
    [
        b"\x00\x04" + _s("consumer"),  # flexible version 4
        encode_group_value(STABLE)[:-2],  # cut short
        encode_group_value(STABLE) + b"\x00",  # trailing bytes
        b"\x00\x03"
        + _s("consumer")
        + struct.pack(">i", 1)
        + b"\xff\xff" * 2
        + b"\x00" * 8
        + struct.pack(">i", 1_000_000),  # more members than bytes
    ],
)
def test_bad_values_raise_value_error_or_struct_error(value: bytes) -> None:
    with pytest.raises((ValueError, struct.error)):
        decode_group_record(encode_group_key("g"), value)
