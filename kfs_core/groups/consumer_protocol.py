"""The consumer protocol's embedded bytes: subscriptions and assignments.

Consumers put these inside JoinGroup (protocol metadata) and SyncGroup
(assignments) for protocol type ``consumer``; the coordinator relays them
untouched, and reads them only to describe a group (assigned partitions, lag)
and to know which topics a live group subscribes to.  Layout (Kafka's
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``, classic
encoding, big-endian):

    subscription
      int16    version                      0..3
      int32    topic count, then per topic: int16 length + UTF-8 name
      int32    user data length (-1 null) + bytes
      v1+      owned partitions: int32 count, per entry a topic name and
               int32 count + int32 partitions
      v2+      int32 generation id;  v3+ int16 length + rack (nullable)

    assignment
      int16    version                      0..3
      int32    count, per entry a topic name and int32 count + int32 partitions
      int32    user data length + bytes

Only the fields KFS reads are decoded; later fields and newer versions'
extra tails are ignored, as Kafka's own parser does.
"""

from __future__ import annotations

import struct

__all__ = ["ConsumerProtocolError", "parse_assignment", "parse_subscription"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """The bytes are not a consumer-protocol subscription or assignment."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.data):
            raise ConsumerProtocolError(f"truncated at byte {self.pos}")
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return int(value)

    def int16(self) -> int:
        return self._take(_I16)

    def int32(self) -> int:
        return self._take(_I32)

    def string(self) -> str:
        length = self.int16()
        if length < 0 or self.pos + length > len(self.data):
            raise ConsumerProtocolError(f"bad string length {length} at byte {self.pos}")
        start, self.pos = self.pos, self.pos + length
        try:
            return self.data[start : self.pos].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError(f"string at byte {start} is not UTF-8") from exc

    def count(self) -> int:
        n = self.int32()
        # Each element takes at least two bytes: a count beyond that is garbage.
        if n < 0 or n > (len(self.data) - self.pos) // 2:
            raise ConsumerProtocolError(f"bad array length {n} at byte {self.pos}")
        return n

    def topic_partitions(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for _ in range(self.count()):
            topic = self.string()
            result.setdefault(topic, []).extend(self.int32() for _ in range(self.count()))
        return result


def _version(reader: _Reader) -> int:
    version = reader.int16()
    if version < 0:
        raise ConsumerProtocolError(f"negative version {version}")
    return version


def parse_subscription(data: bytes) -> list[str]:
    """The topics a consumer's JoinGroup metadata subscribes to."""
    reader = _Reader(bytes(data))
    _version(reader)
    return [reader.string() for _ in range(reader.count())]


def parse_assignment(data: bytes) -> dict[str, list[int]]:
    """The partitions a SyncGroup assignment gives a consumer, by topic (empty bytes: none)."""
    if not data:
        return {}
    reader = _Reader(bytes(data))
    _version(reader)
    return reader.topic_partitions()
