"""What the coordinators' internal topics share: a compacted topic keyed by id, read back whole.

``__consumer_offsets`` (`kfs_core.groups.offset_log`) and
``__transaction_state`` (`kfs_core.groups.txn_log`) are ordinary
partitions of the log: created compacted on first use, each key on the
partition ``crc32(key) mod partitions``, their records appended through
the normal append path, and a partition read back from its log start to
its high watermark when a daemon comes to coordinate it.  Their records use
Kafka's classic encoding, whose strings are an int16 length and UTF-8.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import AsyncIterator

from kfs_core.errors import UnknownTopicOrPartition
from kfs_core.log.log_manager import LogManager
from kfs_core.records.batch import RecordBatch, iter_batches

__all__ = ["InternalTopic", "read_string", "write_string"]

_I16 = struct.Struct(">h")
_READ_BYTES = 8 * 1024 * 1024


def write_string(value: str) -> bytes:
    """A Kafka classic string: int16 length, then UTF-8."""
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def read_string(data: bytes, pos: int) -> tuple[str, int]:
    """The string at ``pos`` and the position after it; ValueError when it does not fit."""
    (length,) = _I16.unpack_from(data, pos)
    pos += _I16.size
    if length < 0 or pos + length > len(data):
        raise ValueError(f"bad string length {length}")
    return data[pos : pos + length].decode("utf-8"), pos + length


class InternalTopic:
    """One compacted internal topic of the log: its partitions, creation and read-back."""

    def __init__(
        self, partition_log: LogManager, topic: str, *, partitions: int, timeout_s: float
    ) -> None:
        self._log = partition_log
        self.topic = topic
        self._partitions = partitions
        self._timeout_s = timeout_s
        self._topic_ready = False

    @property
    def partitions(self) -> int:
        return self._partitions

    def partition_for(self, key: str) -> int:
        """The partition whose records ``key``'s go to."""
        return zlib.crc32(key.encode("utf-8")) % self._partitions

    async def ensure_topic(self) -> int:
        """Create the topic (compacted) unless it exists; its partition count.

        Another daemon may create it first: the cache then reads the registry afresh.
        """
        if not self._topic_ready:
            info = await self._log.topic(
                self.topic,
                auto_create=True,
                partitions=self._partitions,
                configs={"cleanup.policy": "compact"},
            )
            self._partitions = info.partitions
            self._topic_ready = True
        return self._partitions

    async def existing_partitions(self) -> int:
        """How many partitions the topic has; 0 before it exists."""
        try:
            info = await self._log.topic(self.topic)
        except UnknownTopicOrPartition:
            return 0
        self._partitions = info.partitions
        self._topic_ready = True
        return info.partitions

    async def batches(self, partition: int) -> AsyncIterator[tuple[RecordBatch, int]]:
        """Every batch of ``partition`` from its log start, with the offset the read stood at.

        Raises what the log raises (`NotLeaderOrFollower` when another daemon
        leads the partition); a records offset below the second value was
        read before (a batch may start below the offset asked for).
        """
        offset = await self._log.log_start_offset(self.topic, partition)
        high_watermark = await self._log.high_watermark(self.topic, partition)
        name = f"{self.topic}-{partition}"
        while offset < high_watermark:
            result = await self._log.read(self.topic, partition, offset, _READ_BYTES)
            if not result.records:
                break
            for batch in iter_batches(result.records, object_name=name):
                yield batch, offset
                offset = max(offset, batch.next_offset)
