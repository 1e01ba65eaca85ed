"""Committed offsets, durable in the internal topic ``__consumer_offsets``.

Every commit is a record appended through the normal partition log (WAL,
then segments), so it survives ``kill -9`` and restart, and the topic's
``cleanup.policy=compact`` lets the compaction job keep only the newest
value per key.  A group's records all go to one partition
(crc32(group id) mod the partition count), so a group's history is ordered.

Records use Kafka's own layouts, so Kafka's tools can read them (classic
encoding, big-endian):

    key   OffsetCommitKey v1              value  OffsetCommitValue v3
      int16   version = 1                   int16   version = 3
      string  group (int16 length + UTF-8)  int64   committed offset
      string  topic                         int32   leader epoch (-1 none)
      int32   partition                     string  metadata
                                            int64   commit timestamp (ms)

A null value (tombstone) deletes the key: expired offsets, offsets of a
deleted group or topic, OffsetDelete.  The same partition holds each
group's membership (`kfs_core.groups.group_record`, key version 2), so a
daemon that comes to coordinate a group reads its members and offsets back
together (`load_partition`).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from kfs_core.groups.group_record import (
    StoredGroup,
    decode_group_record,
    encode_group_key,
    encode_group_value,
)
from kfs_core.groups.internal_topic import InternalTopic, read_string, write_string
from kfs_core.log.log_manager import LogManager
from kfs_core.records.batch import (
    CONTROL_COMMIT,
    Record,
    encode_batch,
    parse_control_key,
)

__all__ = [
    "OFFSETS_TOPIC",
    "CommittedOffset",
    "LoadedGroup",
    "OffsetLog",
    "decode_offset_record",
    "encode_offset_key",
    "encode_offset_value",
]

log = logging.getLogger(__name__)

OFFSETS_TOPIC: Final = "__consumer_offsets"
DEFAULT_PARTITIONS: Final = 4
_KEY_VERSION: Final = 1
_VALUE_VERSION: Final = 3

_I16 = struct.Struct(">h")
_OFFSET_VALUE = struct.Struct(">hqi")  # version, offset, leader epoch (then metadata, timestamp)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

PartitionKey = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One committed position of a group on a partition."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0


@dataclass(slots=True)
class LoadedGroup:
    """What ``__consumer_offsets`` holds of one group: its live offsets and its membership."""

    offsets: dict[PartitionKey, CommittedOffset] = field(default_factory=dict)
    membership: StoredGroup | None = None


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1 for (group, topic, partition)."""
    return (
        _I16.pack(_KEY_VERSION) + write_string(group) + write_string(topic) + _I32.pack(partition)
    )


def encode_offset_value(committed: CommittedOffset) -> bytes:
    """OffsetCommitValue v3."""
    return (
        _OFFSET_VALUE.pack(_VALUE_VERSION, committed.offset, committed.leader_epoch)
        + write_string(committed.metadata)
        + _I64.pack(committed.commit_timestamp)
    )


def decode_offset_record(
    key: bytes, value: bytes | None
) -> tuple[str, PartitionKey, CommittedOffset | None] | None:
    """(group, (topic, partition), offset or None for a tombstone); None for other key kinds."""
    (version,) = _I16.unpack_from(key, 0)
    if version not in (0, 1):  # 2 is a group's membership (`group_record`)
        return None
    group, pos = read_string(key, _I16.size)
    topic, pos = read_string(key, pos)
    (partition,) = _I32.unpack_from(key, pos)
    if value is None:
        return group, (topic, partition), None
    value_version, offset, leader_epoch = _OFFSET_VALUE.unpack_from(value, 0)
    if value_version < 3:
        raise ValueError(f"OffsetCommitValue v{value_version} is not written by KFS")
    metadata, pos = read_string(value, _OFFSET_VALUE.size)
    (timestamp,) = _I64.unpack_from(value, pos)
    return group, (topic, partition), CommittedOffset(offset, leader_epoch, metadata, timestamp)


class OffsetLog(InternalTopic):
    """Appends commits to ``__consumer_offsets`` and reads them all back on start."""

    def __init__(
        self,
        partition_log: LogManager,
        *,
        partitions: int = DEFAULT_PARTITIONS,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(partition_log, OFFSETS_TOPIC, partitions=partitions, timeout_s=timeout_s)
        # After a load: per partition, the commits of transactions still open there.
        self.open_transactions: dict[
            int, dict[int, dict[tuple[str, PartitionKey], CommittedOffset | None]]
        ] = {}

    async def append(
        self,
        group: str,
        entries: Iterable[tuple[PartitionKey, CommittedOffset | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        """Store ``entries`` (None deletes) durably, as one batch; raises what the log raises.

        With a ``producer_id`` the batch is transactional (TxnOffsetCommit):
        the offsets count once its transaction's commit marker follows.
        """
        await self.ensure_topic()
        now = int(time.time() * 1000)
        records = [
            Record(
                offset=index,
                timestamp=now,
                key=encode_offset_key(group, topic, partition),
                value=None if committed is None else encode_offset_value(committed),
            )
            for index, ((topic, partition), committed) in enumerate(entries)
        ]
        if not records:
            return
        batch = encode_batch(
            records,
            base_offset=0,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=producer_id >= 0,
        )
        append = self._log.append_internal if producer_id >= 0 else self._log.append
        await append(OFFSETS_TOPIC, self.partition_for(group), batch, timeout_s=self._timeout_s)

    async def append_group(self, group: str, stored: StoredGroup | None) -> None:
        """Store the group's membership durably (None: its tombstone); raises what the log raises."""
        await self.ensure_topic()
        record = Record(
            offset=0,
            timestamp=int(time.time() * 1000),
            key=encode_group_key(group),
            value=None if stored is None else encode_group_value(stored),
        )
        await self._log.append(
            OFFSETS_TOPIC,
            self.partition_for(group),
            encode_batch([record], base_offset=0),
            timeout_s=self._timeout_s,
        )

    async def load(self) -> dict[str, LoadedGroup]:
        """Every group's live offsets and membership, replayed from the log start of every partition.

        Replay keeps the newest raw value per raw key (what compaction would
        keep) and decodes only those at the end: most records of a busy log
        are superseded, and decoding is most of the cost.
        """
        groups: dict[str, LoadedGroup] = {}
        for partition in range(await self.existing_partitions()):
            groups.update(await self.load_partition(partition))
        return groups

    async def load_partition(self, partition: int) -> dict[str, LoadedGroup]:
        """The live offsets and membership of the groups whose records go to ``partition``.

        Raises what the log raises (`NotLeaderOrFollower` when another
        daemon leads the partition).  No topic yet: no groups.
        """
        groups: dict[str, LoadedGroup] = {}
        if not await self.existing_partitions():
            return groups
        for key, value in (await self._replay_partition(partition)).items():
            if value is not None:
                _apply(groups, key, value)
        return groups

    async def _replay_partition(self, partition: int) -> dict[bytes, bytes | None]:
        """The newest value per key; transactional commits count once their commit marker does.

        Those of a transaction still open at the end are left in
        ``self.open_transactions[partition]`` (producer id -> key -> value).
        """
        latest: dict[bytes, bytes | None] = {}
        open_txns: dict[int, dict[bytes, bytes | None]] = {}
        async for batch, offset in self.batches(partition):
            if batch.is_control:
                kind = parse_control_key(batch.records[0].key)[1] if batch.records else -1
                settled = open_txns.pop(batch.producer_id, {})
                if kind == CONTROL_COMMIT:
                    latest.update(settled)
                continue
            target = (
                open_txns.setdefault(batch.producer_id, {}) if batch.is_transactional else latest
            )
            for record in batch.records:
                if record.offset >= offset and record.key is not None:
                    target[record.key] = record.value
        self.open_transactions[partition] = {
            pid: dict(_decoded_offsets(values.items())) for pid, values in open_txns.items()
        }
        return latest


def _apply(groups: dict[str, LoadedGroup], key: bytes, value: bytes) -> None:
    try:
        offset = decode_offset_record(key, value)
        membership = decode_group_record(key, value) if offset is None else None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)
        return
    if offset is not None:
        group, where, committed = offset
        if committed is not None:
            groups.setdefault(group, LoadedGroup()).offsets[where] = committed
    elif membership is not None:
        group, stored = membership
        groups.setdefault(group, LoadedGroup()).membership = stored


def _decoded_offsets(
    items: Iterable[tuple[bytes, bytes | None]],
) -> Iterable[tuple[tuple[str, PartitionKey], CommittedOffset | None]]:
    """``((group, partition key), offset or None)`` for each readable offset record."""
    for key, value in items:
        try:
            decoded = decode_offset_record(key, value)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)
            continue
        if decoded is not None:
            group, where, committed = decoded
            yield (group, where), committed
