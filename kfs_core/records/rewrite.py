"""Rewriting a run of record batches into new ones: compaction's byte-level step.

`BatchRewriter` takes a partition's batches in offset order, each with the
offsets to leave out, and emits the batches that replace them:

- control batches and empty ones are copied byte for byte, and so are
  transactional batches unless the rewriter knows the partition's aborted
  transactions (`AbortedTransactions`; key compaction, below the last stable
  offset, where every transaction has ended): then an aborted transaction's
  batches are left out, as Kafka's cleaner removes them, and a committed
  one's records are key-compacted like any others, their batch keeping its
  header (producer id, epoch, sequence, transactional flag);
- CreateTime batches (`rebatchable`) have their surviving records merged
  into new batches of about ``target_bytes`` uncompressed, by
  `kfs_core.records.merge.BatchMerger`, which moves records without decoding
  them; a source batch is never split, and a new batch starts before one of
  another leader epoch or one that would stretch its offset deltas past int32;
- LogAppendTime batches (and any with a delete horizon) keep their own
  boundaries and header: decoded, filtered and re-encoded with the new codec.

A batch whose records are all left out disappears, unless the caller marks
it its producer's last (``keep_header``): then it stays, empty, with its
header; offsets are never renumbered.

Transaction markers go too, as Kafka's cleaner removes them, once they are
no newer than ``marker_horizon_ms`` (the cleaning point less
``delete.retention.ms``, as for tombstones) and no batch of their
transaction is left: an abort marker whose transaction began within this
rewrite (the aborted batches are all gone, unless one stayed as its
producer's last), a commit marker whose transaction lay wholly within it
(after an earlier marker of the same producer) and kept no record.  A marker
that is its producer's last batch stays (``keep_header``).  Markers whose
transaction began before this rewrite's first batch stay: another rewrite
may keep that transaction's records.  Records without a key are never left out.  The compaction job
(``spark_jobs.compaction``) reads the segments and writes what is emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet

from kfs_core.records.batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CREATE_TIME,
    decode_batch,
    parse_control_key,
    reencode_batch,
)
from kfs_core.records.header import BatchHeader
from kfs_core.records.merge import BatchMerger

__all__ = ["AbortedTransactions", "BatchRewriter", "key_compactable", "rebatchable"]

INT32_MAX = 2**31 - 1


class AbortedTransactions:
    """A partition's aborted transactions: which transactional batches they hold.

    ``ranges`` are ``(producer id, first offset, last offset)``, the last
    being the abort marker's (the catalog's ``AbortedRange``).
    """

    def __init__(self, ranges: Iterable[tuple[int, int, int]] = ()) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first, last in ranges:
            self._by_producer.setdefault(producer_id, []).append((first, last))

    def holds(self, header: BatchHeader) -> bool:
        """Whether the transactional batch ``header`` is one of an aborted transaction."""
        spans = self._by_producer.get(header.producer_id, ())
        return any(first <= header.base_offset <= last for first, last in spans)

    def first_offset(self, producer_id: int, marker_offset: int) -> int | None:
        """The first offset of the aborted transaction whose marker is at ``marker_offset``."""
        for first, last in self._by_producer.get(producer_id, ()):
            if last == marker_offset:
                return first
        return None


def key_compactable(header: BatchHeader, aborted: AbortedTransactions | None = None) -> bool:
    """Whether the batch's records enter the key map and may be dropped.

    Transactional batches do only where the aborted transactions are known
    (``aborted``), and then only a committed transaction's.
    """
    if header.is_control:
        return False
    if header.is_transactional:
        return aborted is not None and not aborted.holds(header)
    return True


def rebatchable(header: BatchHeader) -> bool:
    """Whether the batch's records may be merged into new batches with others."""
    return (
        key_compactable(header)
        and header.timestamp_type == CREATE_TIME
        and not header.has_delete_horizon
        and header.record_count > 0
    )


class _Rebatcher:
    """Merges the surviving records of consecutive batches into new batches of ~target bytes.

    Records are never decoded into objects: `BatchMerger` rewrites each one's
    offset and timestamp deltas and copies the rest.  A source batch is never
    split: a new batch starts before one that would take it past the target
    (or that has another leader epoch, or would stretch its offset deltas
    past int32).
    """

    def __init__(
        self,
        codec: int,
        target_bytes: int,
        emit: Callable[[bytes], None],
        compression_level: int | None = None,
    ) -> None:
        self._target = target_bytes
        self._emit = emit
        self._merger = BatchMerger(codec, compression_level)

    def add(
        self,
        buf: memoryview,
        position: int,
        header: BatchHeader,
        drop: AbstractSet[int],
        object_name: str,
    ) -> None:
        merger = self._merger
        if merger.base_offset is not None and (
            header.partition_leader_epoch != merger.partition_leader_epoch
            or header.last_offset - merger.base_offset > INT32_MAX
        ):
            self.flush()
        records = merger.rebase(buf, position, header, drop=drop, object_name=object_name)
        if merger.record_count and merger.size + records.size > self._target:
            self.flush()  # and rebase again, relative to the batch this one now starts
            records = merger.rebase(buf, position, header, drop=drop, object_name=object_name)
        merger.add(header, records)

    def flush(self) -> None:
        """Emit the pending batch (nothing if every record of its sources was dropped)."""
        batch = self._merger.finish()
        if batch is not None:
            self._emit(batch)


class BatchRewriter:
    """Rewrites batches handed in offset order; ``emit`` receives each new batch's bytes.

    ``codec`` and ``compression_level`` (None: the codec's default) are those
    of every rebuilt batch; ``target_bytes`` is the uncompressed size merged
    batches aim at.  Call `flush` after the last batch.
    """

    def __init__(
        self,
        codec: int,
        target_bytes: int,
        emit: Callable[[bytes], None],
        compression_level: int | None = None,
        aborted: AbortedTransactions | None = None,
        marker_horizon_ms: int | None = None,
    ) -> None:
        self._codec = codec
        self._level = compression_level
        self._sink = emit
        self._emits = 0
        self._rebatcher = _Rebatcher(codec, target_bytes, self._emit, compression_level)
        self._aborted = aborted
        self.aborted_batches = 0  # left out: their transaction was aborted
        # Markers (only where the aborted transactions are known: below the last stable offset).
        self._horizon = marker_horizon_ms if aborted is not None else None
        self._start: int | None = None  # the first offset handed in
        self._bounded: set[int] = set()  # producers with a marker earlier in this rewrite
        self._retained: set[int] = set()  # producers whose open transaction kept a batch
        self.removed_markers: list[int] = []  # offsets of the markers left out
        self.removed_abort_markers: list[int] = []  # of them, the abort markers

    def _emit(self, batch: bytes) -> None:
        self._emits += 1
        self._sink(batch)

    def add(
        self,
        buf: memoryview,
        position: int,
        header: BatchHeader,
        drop: AbstractSet[int],
        object_name: str,
        *,
        keep_header: bool = False,
    ) -> bool:
        """Rewrite the batch at ``buf[position:]`` without the offsets in ``drop``.

        True when the batch was copied byte for byte (control, transactional
        or empty).  The CRC is not checked here: the caller verified the bytes.
        ``keep_header``: the batch is its producer's last (Kafka's cleaner
        keeps it, empty if it must, so that the producer's last sequence and
        epoch survive): it keeps its own header and boundaries, whatever it loses.
        """
        if self._start is None:
            self._start = header.base_offset
        aborted = self._aborted
        data_batch = header.producer_id >= 0 and not header.is_control
        if header.is_control and self._horizon is not None:
            if self._marker_goes(buf, position, header, object_name, keep_header):
                return False
            self._rebatcher.flush()
            self._emit(bytes(buf[position : position + header.total_size]))
            return True
        if data_batch and header.is_transactional and aborted is not None:
            emits = self._emits
            try:
                if aborted.holds(header):
                    self.aborted_batches += 1
                    if keep_header:
                        self._filter_whole(
                            buf, position, header, None, object_name, keep_empty=True
                        )
                    return False
                # A committed transaction's batch keeps its header, whatever it loses.
                return self._filter_whole(buf, position, header, drop, object_name)
            finally:
                if self._emits != emits:
                    self._retained.add(header.producer_id)
        if keep_header and data_batch and key_compactable(header):
            return self._filter_whole(buf, position, header, drop, object_name, keep_empty=True)
        if not key_compactable(header) or header.record_count == 0:
            self._rebatcher.flush()  # keep the order of offsets
            self._emit(bytes(buf[position : position + header.total_size]))
            return True
        if rebatchable(header):
            self._rebatcher.add(buf, position, header, drop, object_name)
            return False
        self._rebatcher.flush()
        batch = decode_batch(buf, position, verify_crc=False, object_name=object_name)
        kept = (
            [r for r in batch.records if r.key is None or r.offset not in drop]
            if drop
            else batch.records
        )
        if kept:
            self._emit(
                reencode_batch(batch, self._codec, records=kept, compression_level=self._level)
            )
        return False

    def _marker_goes(
        self, buf: memoryview, position: int, header: BatchHeader, object_name: str, keep: bool
    ) -> bool:
        """Whether the marker at ``position`` is left out (see the module's docstring)."""
        producer_id = header.producer_id
        bounded = producer_id in self._bounded
        retained = producer_id in self._retained
        self._bounded.add(producer_id)
        self._retained.discard(producer_id)
        assert self._horizon is not None and self._aborted is not None
        if keep or retained or header.max_timestamp > self._horizon:
            return False
        batch = decode_batch(buf, position, verify_crc=False, object_name=object_name)
        if len(batch.records) != 1:
            return False
        _, kind = parse_control_key(batch.records[0].key)
        if kind == CONTROL_ABORT:
            first = self._aborted.first_offset(producer_id, header.base_offset)
            assert self._start is not None
            if first is None or first < self._start:
                return False
            self.removed_abort_markers.append(header.base_offset)
        elif kind != CONTROL_COMMIT or not bounded:
            return False
        self.removed_markers.append(header.base_offset)
        return True

    def _filter_whole(
        self,
        buf: memoryview,
        position: int,
        header: BatchHeader,
        drop: AbstractSet[int] | None,
        object_name: str,
        *,
        keep_empty: bool = False,
    ) -> bool:
        """The batch with its own header and boundaries; ``drop`` None: without any record."""
        self._rebatcher.flush()  # keep the order of offsets
        offsets = range(header.base_offset, header.base_offset + header.last_offset_delta + 1)
        if drop is not None and not any(o in drop for o in offsets):
            self._emit(bytes(buf[position : position + header.total_size]))
            return True
        batch = decode_batch(buf, position, verify_crc=False, object_name=object_name)
        kept = (
            []
            if drop is None
            else [r for r in batch.records if r.key is None or r.offset not in drop]
        )
        if kept or keep_empty:
            self._emit(reencode_batch(batch, records=kept, compression_level=self._level))
        return False

    def flush(self) -> None:
        """Emit the pending merged batch, if any."""
        self._rebatcher.flush()
