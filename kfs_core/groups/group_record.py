"""A group's membership as a record of ``__consumer_offsets``: Kafka's GroupMetadata layouts.

The coordinator stores a group whenever its membership settles: when the
leader's SyncGroup makes a generation Stable, when a static member comes
back under a new member id, and when the group becomes Empty.  A daemon
that comes to coordinate the group (after a restart, or a take-over of the
offsets partition) reads it back: the members keep their member ids and
generation and go on heartbeating, as with a Kafka broker.  DeleteGroups
and the retention sweep write a tombstone (null value) for the key.

Classic encoding, big-endian; a string is an int16 length and UTF-8 (-1:
null, where nullable); bytes are an int32 length:

    key   GroupMetadataKey v2           value  GroupMetadataValue v3
      int16   version = 2                  int16   version = 3
      string  group                        string  protocol type
                                           int32   generation
                                           string? protocol (null when Empty)
                                           string? leader   (null when Empty)
                                           int64   current state timestamp (ms)
                                           int32   member count, then per member:
                                             string  member id
                                             string? group instance id
                                             string  client id
                                             string  client host
                                             int32   rebalance timeout (ms)
                                             int32   session timeout (ms)
                                             bytes   subscription (the chosen protocol's)
                                             bytes   assignment

Versions 0 to 2 (fewer member fields) are read too; version 4 (Kafka's
flexible encoding) is not written by Kafka's classic coordinator and is
refused.  Keys of versions 0 and 1 are committed offsets
(`kfs_core.groups.offset_log`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from kfs_core.groups.internal_topic import read_string, write_string

__all__ = [
    "GROUP_KEY_VERSION",
    "StoredGroup",
    "StoredMember",
    "decode_group_record",
    "encode_group_key",
    "encode_group_value",
]

GROUP_KEY_VERSION: Final = 2
_VALUE_VERSION: Final = 3

_I16 = struct.Struct(">h")  # a version; a string's length
_I32 = struct.Struct(">i")  # generation, member count, timeouts, a bytes field's length
_I64 = struct.Struct(">q")  # current state timestamp


@dataclass(frozen=True, slots=True)
class StoredMember:
    """One member of a stored group."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    """A group's membership as stored: no members means the group is Empty."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: tuple[StoredMember, ...] = ()


def encode_group_key(group: str) -> bytes:
    """GroupMetadataKey v2 of ``group``."""
    return _I16.pack(GROUP_KEY_VERSION) + write_string(group)


def encode_group_value(stored: StoredGroup) -> bytes:
    """GroupMetadataValue v3."""
    parts = [
        _I16.pack(_VALUE_VERSION),
        write_string(stored.protocol_type),
        _I32.pack(stored.generation),
        _nullable(stored.protocol),
        _nullable(stored.leader),
        _I64.pack(stored.state_timestamp_ms),
        _I32.pack(len(stored.members)),
    ]
    for member in stored.members:
        parts += [
            write_string(member.member_id),
            _nullable(member.instance_id),
            write_string(member.client_id),
            write_string(member.client_host),
            _I32.pack(member.rebalance_timeout_ms),
            _I32.pack(member.session_timeout_ms),
            _I32.pack(len(member.subscription)),
            member.subscription,
            _I32.pack(len(member.assignment)),
            member.assignment,
        ]
    return b"".join(parts)


def decode_group_record(key: bytes, value: bytes | None) -> tuple[str, StoredGroup | None] | None:
    """(group, stored group or None for a tombstone); None for other key versions.

    Raises `ValueError` or `struct.error` on a record that does not parse.
    """
    (version,) = _I16.unpack_from(key, 0)
    if version != GROUP_KEY_VERSION:
        return None
    group, _ = read_string(key, _I16.size)
    if value is None:
        return group, None
    return group, _decode_value(value)


def _decode_value(data: bytes) -> StoredGroup:
    reader = _Reader(data)
    version = reader.int16()
    if not 0 <= version <= _VALUE_VERSION:
        raise ValueError(f"GroupMetadataValue v{version} is not read by KFS")
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable()
    leader = reader.nullable()
    timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.count()):
        member_id = reader.string()
        instance_id = reader.nullable() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        if version >= 1:
            rebalance_timeout, session_timeout = reader.int32(), reader.int32()
        else:  # no rebalance timeout: Kafka takes the session timeout
            session_timeout = rebalance_timeout = reader.int32()
        members.append(
            StoredMember(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                reader.blob(),
                reader.blob(),
            )
        )
    if reader.pos != len(data):
        raise ValueError(f"{len(data) - reader.pos} byte(s) after the GroupMetadataValue")
    return StoredGroup(protocol_type, generation, protocol, leader, timestamp, tuple(members))


def _nullable(value: str | None) -> bytes:
    return _I16.pack(-1) if value is None else write_string(value)


class _Reader:
    """Reads the fields of one value in order; `ValueError`/`struct.error` past its end."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, layout: struct.Struct) -> int:
        (value,) = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return int(value)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def int64(self) -> int:
        return self._unpack(_I64)

    def count(self) -> int:
        count = self.int32()
        if count < 0 or count > len(self.data) - self.pos:
            raise ValueError(f"bad member count {count}")
        return count

    def string(self) -> str:
        text, self.pos = read_string(self.data, self.pos)
        return text

    def nullable(self) -> str | None:
        (length,) = _I16.unpack_from(self.data, self.pos)
        if length == -1:
            self.pos += _I16.size
            return None
        return self.string()

    def blob(self) -> bytes:
        length = self.int32()
        if length < 0 or self.pos + length > len(self.data):
            raise ValueError(f"bad bytes length {length}")
        out = self.data[self.pos : self.pos + length]
        self.pos += length
        return out
