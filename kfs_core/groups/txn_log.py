"""Transaction coordinator state, durable in the internal topic ``__transaction_state``.

Every state change of a transactional id is a record appended through the
normal partition log before the coordinator acts on it, as Kafka's
``TransactionStateManager`` does, so it survives ``kill -9``; the topic is
``cleanup.policy=compact`` and only the newest value per transactional id
matters.  A transactional id's records all go to one partition
(crc32(transactional id) mod the partition count); the daemon that leads
that partition is the id's coordinator.

Records use Kafka's own layouts (classic encoding, big-endian), so Kafka's
tools can read them:

    key   TransactionLogKey v0             value  TransactionLogValue v0
      int16   version = 0                     int16   version = 0
      string  transactional id                int64   producer id
                                              int16   producer epoch
                                              int32   transaction timeout (ms)
                                              int8    state (`TxnState`)
                                              array   partitions: (string topic,
                                                        array of int32 partition)
                                              int64   last update (ms)
                                              int64   transaction start (ms)

A null value (tombstone) removes an id that expired
(``transactional.id.expiration.ms``).
"""

from __future__ import annotations

import enum
import logging
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from kfs_core.groups.internal_topic import InternalTopic, read_string, write_string
from kfs_core.log.log_manager import LogManager
from kfs_core.records.batch import Record, encode_batch

__all__ = [
    "TRANSACTION_TOPIC",
    "TransactionLog",
    "TxnRecord",
    "TxnState",
    "decode_txn_record",
    "encode_txn_key",
    "encode_txn_value",
]

log = logging.getLogger(__name__)

TRANSACTION_TOPIC: Final = "__transaction_state"
DEFAULT_PARTITIONS: Final = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_TIMES = struct.Struct(">qq")  # last update, transaction start


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids, as the log stores them."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The state's name as Kafka's tools print it (``CompleteCommit``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """One transactional id's state as stored."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = 0
    start_ms: int = -1


def encode_txn_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + write_string(transactional_id)


def encode_txn_value(record: TxnRecord) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(record.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(
        _HEAD.pack(0, record.producer_id, record.producer_epoch, record.timeout_ms, record.state)
    )
    out += _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        out += write_string(topic)
        out += _I32.pack(len(partitions))
        for partition in partitions:
            out += _I32.pack(partition)
    out += _TIMES.pack(record.last_update_ms, record.start_ms)
    return bytes(out)


def decode_txn_record(key: bytes, value: bytes | None) -> tuple[str, TxnRecord | None]:
    """(transactional id, its state or None for a tombstone); raises ValueError when unreadable."""
    (version,) = _I16.unpack_from(key, 0)
    if version != 0:
        raise ValueError(f"TransactionLogKey v{version} is not written by KFS")
    transactional_id, _ = read_string(key, _I16.size)
    if value is None:
        return transactional_id, None
    value_version, pid, epoch, timeout, state = _HEAD.unpack_from(value, 0)
    if value_version != 0:
        raise ValueError(f"TransactionLogValue v{value_version} is not written by KFS")
    pos = _HEAD.size
    (topics,) = _I32.unpack_from(value, pos)
    pos += _I32.size
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(topics, 0)):
        topic, pos = read_string(value, pos)
        (count,) = _I32.unpack_from(value, pos)
        pos += _I32.size
        for _ in range(count):
            (partition,) = _I32.unpack_from(value, pos)
            pos += _I32.size
            partitions.add((topic, partition))
    last_update, start = _TIMES.unpack_from(value, pos)
    return transactional_id, TxnRecord(
        pid, epoch, timeout, TxnState(state), frozenset(partitions), last_update, start
    )


class TransactionLog(InternalTopic):
    """Appends state changes to ``__transaction_state`` and reads a partition's back."""

    def __init__(
        self,
        partition_log: LogManager,
        *,
        partitions: int = DEFAULT_PARTITIONS,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(
            partition_log, TRANSACTION_TOPIC, partitions=partitions, timeout_s=timeout_s
        )

    async def append(self, transactional_id: str, record: TxnRecord | None) -> None:
        """Store one state change durably; raises what the log raises."""
        await self.ensure_topic()
        batch = encode_batch(
            [
                Record(
                    offset=0,
                    timestamp=int(time.time() * 1000),
                    key=encode_txn_key(transactional_id),
                    value=None if record is None else encode_txn_value(record),
                )
            ]
        )
        await self._log.append(
            TRANSACTION_TOPIC,
            self.partition_for(transactional_id),
            batch,
            timeout_s=self._timeout_s,
        )

    async def load_partition(self, partition: int) -> dict[str, TxnRecord]:
        """The newest state of every transactional id stored in ``partition``.

        Raises what the log raises (`NotLeaderOrFollower` when another
        daemon leads the partition).
        """
        latest: dict[bytes, bytes | None] = {}
        async for batch, offset in self.batches(partition):
            for r in batch.records:
                if r.offset >= offset and r.key is not None:
                    latest[r.key] = r.value
        return dict(_decoded(latest.items()))


def _decoded(items: Iterable[tuple[bytes, bytes | None]]) -> Iterable[tuple[str, TxnRecord]]:
    for key, value in items:
        try:
            transactional_id, record = decode_txn_record(key, value)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            log.warning("skipping an unreadable %s record: %s", TRANSACTION_TOPIC, exc)
            continue
        if record is not None:
            yield transactional_id, record
