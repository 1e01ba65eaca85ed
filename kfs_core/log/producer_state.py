"""Idempotent producers: what each partition remembers of them, Kafka's rules, snapshots.

An idempotent producer numbers the records it sends to each partition
(producer id, epoch and base sequence in the RecordBatch v2 header) and
retries a batch that got no answer.  The partition remembers, per producer
id, its epoch and its last `BATCHES_TO_RETAIN` batches (sequence range and
offsets), as Kafka's ``ProducerStateManager`` does, so that:

==============================================  ===================================
a batch that...                                 is answered
==============================================  ===================================
has producer id -1                              appended, no checks
repeats one of the last 5 batches (same epoch,  success with the ORIGINAL offsets;
same first and last sequence)                   nothing is written
continues the last sequence (``last + 1``, or   appended
0 after int32 max)
comes from a producer the partition does not    appended, whatever its sequence
know (new, or expired)                          (Kafka >= 2.5, KIP-360)
starts a newer epoch at sequence 0              appended; the old batches are
                                                forgotten
starts a newer epoch at another sequence, or    `OutOfOrderSequence` (45)
leaves a gap / goes back in the same epoch
has an older epoch than the producer's          `InvalidProducerEpoch` (47)
is a transaction marker (a control batch the     appended unless its epoch is older
transaction coordinator writes)                 (`InvalidProducerEpoch`); a newer
                                                epoch becomes the producer's, its
                                                batches forgotten
==============================================  ===================================

Transactional batches follow the same sequence rules; which transactions
are open and which were aborted is `kfs_core.log.transactions`' to keep.

Like Kafka since 2.5, the broker never answers DUPLICATE_SEQUENCE_NUMBER (a
duplicate it still remembers succeeds, an older one is out of order) nor
UNKNOWN_PRODUCER_ID (an unknown producer may start at any sequence).

A producer is forgotten after ``producer_id_expiration_ms`` (Kafka's
``producer.id.expiration.ms``, one day) without a batch.

`ProducerStateTable` is one partition's state.  The log manager checks a
produce (`ProducerStateTable.check`) and records it (`ProducerStateTable.apply`)
in the same loop step as it assigns the offsets, so no other append can come
between.  The state is a function of the log: on start-up it is rebuilt from
the last snapshot, then the batch headers of the segments committed after
it, then the WAL replay.  `SnapshotStore` keeps one small JSON file per
partition, written after each flush's catalog commit and describing the
partition up to that flush's end offset (``through``): only batches already
in the object store, so a snapshot never remembers a batch a crash lost.

Replay and sequence gaps.  A batch read back from the log is remembered
without checks (`replay`): it is in the log, whatever its sequence.  But a
takeover in the ``store`` durability mode reads the previous holders' WAL
objects, which can hold a batch the holder refused (its PUT landed after
its lease lapsed, or its PUT failed in a way that hid its landing).  Such a
batch breaks its producer's sequence when a batch before it never landed:
the producer retries that earlier batch on the new holder, its sequence now
looks old, and a Kafka client treats OUT_OF_ORDER_SEQUENCE_NUMBER on the
first batch it has in flight as fatal.  Accepting the retry after the later
batch would reorder the producer's records; answering it with any retriable
error leaves it no way out but its delivery timeout.  So the log never takes
in a replayed batch that breaks its producer's sequence: `breaks_sequence`
finds it, and the replay stops there (`kfs_core.log.appender`).  That loses
nothing acknowledged: a holder acknowledges a batch only after every earlier
batch of the partition is in the store under its lease, and only after
checking it against the producer's last batch, so a batch whose producer's
previous batch is missing from the log below it was never acknowledged, and
neither was anything the same holder wrote after it.  The producer's
retries then append the missing batch and the later one, in order, once
each.

The check only trusts a producer entry the table knows to be exact: the
table tracks the offsets from which it has seen every batch of the log
(``_covered_from``, ``_covered_to``); an entry whose last batch lies below
that (from a snapshot, or before segments the rebuild skipped) may be older
than the log, and a batch that does not follow it is kept.  A producer the
table does not know may start anywhere, as on append (KIP-360).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kfs_core.errors import LogError
from kfs_core.records.header import BatchHeader

__all__ = [
    "BATCHES_TO_RETAIN",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "BatchMetadata",
    "InvalidProducerEpoch",
    "InvalidTxnState",
    "OutOfOrderSequence",
    "ProducerEntry",
    "ProducerSnapshot",
    "ProducerStateTable",
    "SnapshotStore",
    "batch_offsets",
    "end_sequence",
]

log = logging.getLogger(__name__)

BATCHES_TO_RETAIN: Final = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000  # producer.id.expiration.ms
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
INT32_MAX: Final = 2**31 - 1


class OutOfOrderSequence(LogError):
    """A sequence gap, a sequence going back, or a new epoch not starting at 0."""

    kafka_error_code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpoch(LogError):
    """A batch from an epoch older than the producer's latest: a fenced producer."""

    kafka_error_code = 47  # INVALID_PRODUCER_EPOCH (Kafka >= 2.7 answers produce so)


class InvalidTxnState(LogError):
    """A batch that does not fit the producer's transaction (a plain batch inside one)."""

    kafka_error_code = 48  # INVALID_TXN_STATE


def end_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record; sequences wrap from int32 max to 0."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def batch_offsets(
    headers: Iterable[BatchHeader], base_offset: int
) -> list[tuple[int, BatchHeader]]:
    """Each batch's first offset once a produce's batches are numbered from ``base_offset``."""
    placed: list[tuple[int, BatchHeader]] = []
    offset = base_offset
    for header in headers:
        placed.append((offset, header))
        offset += header.last_offset_delta + 1
    return placed


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One remembered batch: its sequence range and where the log put it."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # max timestamp (the stamped time on LogAppendTime topics)


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer at one partition: its epoch and last batches (oldest first)."""

    producer_id: int
    epoch: int
    batches: tuple[BatchMetadata, ...]
    last_seen_ms: int  # broker clock of its last batch

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def with_batch(self, epoch: int, batch: BatchMetadata, now_ms: int) -> ProducerEntry:
        """This entry after ``batch``; a new epoch forgets the old epoch's batches."""
        kept = self.batches if epoch == self.epoch else ()
        return ProducerEntry(
            self.producer_id, epoch, (*kept, batch)[-BATCHES_TO_RETAIN:], max(now_ms, 0)
        )


def _describe(header: BatchHeader) -> str:
    return (
        f"producer {header.producer_id} epoch {header.producer_epoch} "
        f"sequence {header.base_sequence}"
    )


class ProducerStateTable:
    """The idempotent producers of one partition (see the module docstring for the rules)."""

    def __init__(self, name: str, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.name = name
        self.expiration_ms = expiration_ms
        self._entries: dict[int, ProducerEntry] = {}
        self.changed = False  # since the last snapshot
        # Every batch of the log at offsets [_covered_from, _covered_to) went
        # through `apply`: entries whose last batch lies in there are exact.
        self._covered_from = 0
        self._covered_to = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"ProducerStateTable({self.name!r}, {len(self._entries)} producers)"

    def entry(self, producer_id: int, now_ms: int) -> ProducerEntry | None:
        """The producer's entry, or None when unknown or idle past the expiration."""
        entry = self._entries.get(producer_id)
        if entry is not None and now_ms - entry.last_seen_ms >= self.expiration_ms:
            del self._entries[producer_id]
            self.changed = True
            return None
        return entry

    def entries(self) -> list[ProducerEntry]:
        return list(self._entries.values())

    # --- produce ---------------------------------------------------------------

    def check(self, headers: Iterable[BatchHeader], now_ms: int) -> BatchMetadata | None:
        """May these batches (one partition of one produce) be appended?

        Returns None when they may, or the remembered batch a retry repeats
        (answer with its offsets, append nothing).  Raises
        `OutOfOrderSequence`, `InvalidProducerEpoch` or `InvalidTxnState`.
        Changes nothing but expired entries.
        """
        updated: dict[int, ProducerEntry] = {}
        for header in headers:
            pid = header.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            if header.is_control or header.base_sequence == NO_SEQUENCE:
                # The coordinator's: a marker, or a TxnOffsetCommit's batch. Epoch only.
                known = updated.get(pid) or self.entry(pid, now_ms)
                if known is not None and header.producer_epoch < known.epoch:
                    raise InvalidProducerEpoch(
                        f"{self.name}: {_describe(header)}: epoch {header.producer_epoch} is "
                        f"older than the producer's latest epoch {known.epoch}"
                        + (" (a transaction marker)" if header.is_control else "")
                    )
                continue
            first_seq = header.base_sequence
            last_seq = end_sequence(first_seq, header.last_offset_delta)
            current = self.entry(pid, now_ms)
            if current is not None:
                duplicate = current.find_duplicate(header.producer_epoch, first_seq, last_seq)
                if duplicate is not None:
                    return duplicate
            latest = updated.get(pid, current)
            self._check_batch(header, current, latest)
            if latest is None:
                latest = ProducerEntry(pid, header.producer_epoch, (), now_ms)
            placeholder = BatchMetadata(first_seq, last_seq, -1, -1, -1)
            updated[pid] = latest.with_batch(header.producer_epoch, placeholder, now_ms)
        return None

    def _check_batch(
        self, header: BatchHeader, current: ProducerEntry | None, latest: ProducerEntry | None
    ) -> None:
        """Kafka's ProducerAppendInfo.checkProducerEpoch and checkSequence, for a client append."""
        epoch = header.producer_epoch
        known_epoch = latest.epoch if latest is not None else NO_PRODUCER_EPOCH
        if epoch < known_epoch:
            raise InvalidProducerEpoch(
                f"{self.name}: {_describe(header)}: epoch {epoch} is older than the producer's "
                f"latest epoch {known_epoch}"
            )
        first_seq = header.base_sequence
        if epoch != known_epoch:
            if first_seq != 0 and known_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequence(
                    f"{self.name}: {_describe(header)}: a new epoch must start at sequence 0 "
                    f"(the producer's epoch was {known_epoch})"
                )
            return
        assert latest is not None
        # Kafka accepts any sequence from a producer it has no state for
        # (deleted by retention, expired, or new): KIP-360.
        if current is not None and not _in_sequence(latest.last_seq, first_seq):
            raise OutOfOrderSequence(
                f"{self.name}: {_describe(header)}: expected sequence "
                f"{end_sequence(latest.last_seq, 1) if latest.batches else 0}, the last one "
                f"written was {latest.last_seq}"
            )

    def apply(
        self, placed: Iterable[tuple[int, BatchHeader]], now_ms: int, append_time: int = -1
    ) -> dict[int, ProducerEntry | None]:
        """Remember batches stored at the given first offsets; no checks (see `check`).

        Batches at or below a producer's last remembered offset are already
        in, so replaying a batch twice changes nothing.  ``append_time`` is
        the stamped LogAppendTime (-1: the batch's max timestamp).  Returns
        what the touched entries were before, for `restore`.
        """
        previous: dict[int, ProducerEntry | None] = {}
        for first_offset, header in placed:
            last_offset = first_offset + header.last_offset_delta
            self._cover(first_offset, last_offset)
            pid = header.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            entry = self._entries.get(pid)
            if header.is_control:
                # A marker: a newer epoch (the coordinator bumped it) fences the older one.
                if entry is not None and header.producer_epoch > entry.epoch:
                    previous.setdefault(pid, entry)
                    self._entries[pid] = ProducerEntry(pid, header.producer_epoch, (), now_ms)
                    self.changed = True
                continue
            if header.base_sequence == NO_SEQUENCE:
                continue  # no sequence to remember (a coordinator's transactional batch)
            if entry is not None and last_offset <= entry.last_offset:
                continue
            if pid not in previous:
                previous[pid] = entry
            if entry is None:
                entry = ProducerEntry(pid, header.producer_epoch, (), now_ms)
            batch = BatchMetadata(
                header.base_sequence,
                end_sequence(header.base_sequence, header.last_offset_delta),
                first_offset,
                last_offset,
                append_time if append_time >= 0 else header.max_timestamp,
            )
            self._entries[pid] = entry.with_batch(header.producer_epoch, batch, now_ms)
            self.changed = True
        return previous

    def _cover(self, first_offset: int, last_offset: int) -> None:
        if first_offset > self._covered_to:  # offsets between were never seen here
            self._covered_from = first_offset
        self._covered_to = max(self._covered_to, last_offset + 1)

    def replay(self, headers: Iterable[BatchHeader], now_ms: int) -> None:
        """Remember batches read back from the log (their base offsets are assigned)."""
        self.apply(((header.base_offset, header) for header in headers), now_ms)

    def breaks_sequence(self, header: BatchHeader, now_ms: int) -> ProducerEntry | None:
        """The producer entry a batch read back from the log fails to continue, else None.

        Only an exact entry counts (see the module docstring): a batch of a
        producer the table does not know, or knows from an entry that may be
        older than the log, breaks nothing.  A batch breaks its producer's
        sequence where an append of it would be out of order: a gap in the
        same epoch, or a newer epoch that does not start at sequence 0.  A
        batch already remembered (the same sequences, or at or below the
        entry's last offset) breaks nothing either.
        """
        pid = header.producer_id
        if pid == NO_PRODUCER_ID or header.is_control:
            return None
        entry = self.entry(pid, now_ms)
        if entry is None or not entry.batches or entry.last_offset < self._covered_from:
            return None
        if header.base_offset <= entry.last_offset:
            return None
        first_seq = header.base_sequence
        epoch = header.producer_epoch
        if epoch > entry.epoch:
            return None if first_seq == 0 else entry
        if epoch < entry.epoch:
            return None  # a fenced producer's batch: not a gap in the one we know
        last_seq = end_sequence(first_seq, header.last_offset_delta)
        if entry.find_duplicate(epoch, first_seq, last_seq) is not None:
            return None
        return None if _in_sequence(entry.last_seq, first_seq) else entry

    def restore(self, previous: dict[int, ProducerEntry | None]) -> None:
        """Undo an `apply` (the WAL refused the append it recorded)."""
        for pid, entry in previous.items():
            if entry is None:
                self._entries.pop(pid, None)
            else:
                self._entries[pid] = entry

    def expire(self, now_ms: int) -> int:
        """Forget producers idle for ``expiration_ms``; how many."""
        stale = [
            pid
            for pid, entry in self._entries.items()
            if now_ms - entry.last_seen_ms >= self.expiration_ms
        ]
        for pid in stale:
            del self._entries[pid]
        if stale:
            self.changed = True
        return len(stale)

    def drop_below(self, log_start_offset: int) -> None:
        """Forget producers whose last batch lies below the log start (retention, DeleteRecords)."""
        gone = [pid for pid, e in self._entries.items() if e.last_offset < log_start_offset]
        for pid in gone:
            del self._entries[pid]
        if gone:
            self.changed = True

    # --- snapshots -----------------------------------------------------------------

    def snapshot(self, through: int, written_ms: int) -> ProducerSnapshot:
        """The state of the partition's offsets below ``through`` (batches above are left out)."""
        producers = []
        for entry in self._entries.values():
            batches = [b for b in entry.batches if b.last_offset < through]
            if not batches:
                continue  # all its batches are above: the WAL replay brings it back
            producers.append(
                SnapshotProducer(
                    producer_id=entry.producer_id,
                    epoch=entry.epoch,
                    last_seen_ms=entry.last_seen_ms,
                    batches=[
                        (b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                        for b in batches
                    ],
                )
            )
        return ProducerSnapshot(through=through, written_ms=written_ms, producers=producers)

    def load(self, snapshot: ProducerSnapshot, now_ms: int) -> None:
        """Take the producers of ``snapshot`` (replacing any known), then expire.

        Its entries are not exact (see the module docstring): the snapshot
        may be older than the log above it.
        """
        self._covered_from = self._covered_to = max(snapshot.through, self._covered_to)
        for p in snapshot.producers:
            batches = tuple(BatchMetadata(*b) for b in p.batches[-BATCHES_TO_RETAIN:])
            self._entries[p.producer_id] = ProducerEntry(
                p.producer_id, p.epoch, batches, p.last_seen_ms
            )
        self.expire(now_ms)


# --- the snapshot file -------------------------------------------------------------------

SNAPSHOT_VERSION: Final = 1

_Int = Annotated[int, Field(strict=True)]


class SnapshotProducer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    producer_id: Annotated[int, Field(strict=True, ge=0)]
    epoch: _Int
    last_seen_ms: _Int
    # (first sequence, last sequence, first offset, last offset, timestamp), oldest first
    batches: Annotated[list[tuple[_Int, _Int, _Int, _Int, _Int]], Field(min_length=1)]


class ProducerSnapshot(BaseModel):
    """``{data_dir}/wal/producer-state/{topic}-{partition}.json``: one partition's producers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Annotated[int, Field(strict=True, ge=SNAPSHOT_VERSION, le=SNAPSHOT_VERSION)] = (
        SNAPSHOT_VERSION
    )
    through: Annotated[int, Field(strict=True, ge=0)]  # covers the offsets below this one
    written_ms: _Int
    producers: list[SnapshotProducer]


class SnapshotStore:
    """Producer-state snapshots in a local directory, one file per partition.

    Written with a temporary file and a rename, without fsync: a snapshot
    lost or cut short by a power failure is ignored (with a warning) and the
    state rebuilt from the segments, so it never needs to be durable.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path(self, topic: str, partition: int) -> Path:
        return self.directory / f"{topic}-{partition}.json"

    def read(self, topic: str, partition: int) -> ProducerSnapshot | None:
        path = self.path(topic, partition)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return ProducerSnapshot.model_validate_json(data)
        except ValidationError as exc:
            log.warning(
                "%s: unreadable producer-state snapshot, rebuilding from the log (%s)",
                path,
                exc.errors()[0]["msg"] if exc.errors() else exc,
            )
            return None

    def write(self, topic: str, partition: int, snapshot: ProducerSnapshot) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path(topic, partition)
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(snapshot.model_dump_json().encode())
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def delete_topic(self, topic: str) -> int:
        """Remove every partition's snapshot of ``topic``; how many."""
        pattern = re.compile(rf"^{re.escape(topic)}-\d+\.json$")
        removed = 0
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.directory):
                if pattern.match(name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.directory / name)
                        removed += 1
        return removed
