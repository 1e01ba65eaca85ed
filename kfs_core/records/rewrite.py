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
header; offsets are never renumbered.  Records without a key are never left out.  The compaction job
(``spark_jobs.compaction``) reads the segments and writes what is emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet

from kfs_core.records.batch import CREATE_TIME, decode_batch, reencode_batch
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
    ) -> None:
        self._codec = codec
        self._level = compression_level
        self._emit = emit
        self._rebatcher = _Rebatcher(codec, target_bytes, emit, compression_level)
        self._aborted = aborted
        self.aborted_batches = 0  # left out: their transaction was aborted

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
        aborted = self._aborted
        data_batch = header.producer_id >= 0 and not header.is_control
        if data_batch and header.is_transactional and aborted is not None:
            if aborted.holds(header):
                self.aborted_batches += 1
                if keep_header:
                    self._filter_whole(buf, position, header, None, object_name, keep_empty=True)
                return False
            # A committed transaction's batch keeps its header, whatever it loses.
            return self._filter_whole(buf, position, header, drop, object_name)
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
