"""One partition's transactions: which are open, which were aborted, the last stable offset.

A transactional producer's batches carry the transactional bit; its
transaction at a partition begins with its first such batch there and ends
with a control batch -- a commit or abort marker -- that the transaction
coordinator has the partition's leader append (`LogManager.write_marker`).
As Kafka's ``ProducerStateManager`` and ``TransactionIndex`` do, the
partition keeps:

- the **open transactions**: per producer id, the offset of its open
  transaction's first batch.  A transaction stays open to readers until its
  marker is below the high watermark (acknowledged).
- the **aborted transactions**: ``(producer id, first offset, last offset)``
  for each transaction ended by an abort marker, the last offset being the
  marker's.  A ``read_committed`` Fetch returns those that overlap the
  records it returns, and the client drops the aborted producer's records
  in those ranges.
- the **last stable offset** (LSO): the first offset of the oldest
  transaction still open, or the high watermark when none is.
  ``read_committed`` reads stop there.

Everything here is a function of the log: `observe` takes the batches in
offset order (appends, and the replays of the WAL and of an earlier
holder's objects), and `load` takes what the catalog's segments recorded
(`kfs_core.catalog.actions.SegmentEntry`'s ``aborted`` and ``open_txns``).
It runs on the event loop with the rest of the partition: no locks.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kfs_core.records.batch import CONTROL_ABORT, CONTROL_COMMIT, decode_batch, parse_control_key
from kfs_core.records.header import BatchHeader

if TYPE_CHECKING:
    from kfs_core.catalog.actions import SegmentEntry

__all__ = ["AbortedTxn", "PartitionTransactions", "load_transactions", "marker_type"]


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """An aborted transaction's records at one partition: ``first_offset``..``last_offset``.

    ``last_offset`` is the abort marker's offset (Kafka's ``AbortedTxn``).
    Ordered by the marker's offset first.
    """

    last_offset: int
    first_offset: int
    producer_id: int


def marker_type(batch: bytes | memoryview, object_name: str = "<batch>") -> int:
    """`CONTROL_COMMIT` or `CONTROL_ABORT`: the type of a control batch's marker record.

    Raises `kfs_core.errors.CorruptRecordBatch` for a control batch
    without a readable marker.
    """
    decoded = decode_batch(batch, verify_crc=False, object_name=object_name)
    if not decoded.records:
        return -1  # an empty control batch (compaction keeps such headers): no marker
    _version, kind = parse_control_key(decoded.records[0].key)
    return kind


class PartitionTransactions:
    """The open and aborted transactions of one partition (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        # producer id -> first offset of its open transaction here
        self._open: dict[int, int] = {}
        # Ended by a marker not yet below the high watermark: (marker offset, first offset)
        self._ending: dict[int, tuple[int, int]] = {}
        self._aborted: list[AbortedTxn] = []  # by marker offset
        # Ended, their marker not in a committed segment yet: (first, marker, producer id)
        self._unsealed: list[tuple[int, int, int]] = []

    def __repr__(self) -> str:
        return (
            f"PartitionTransactions({self.name!r}, {len(self._open)} open, "
            f"{len(self._aborted)} aborted)"
        )

    # --- the log, as it grows ----------------------------------------------------

    def observe(self, first_offset: int, header: BatchHeader, batch: bytes | memoryview) -> None:
        """Take in one batch at ``first_offset``; ``batch`` is read only for a marker."""
        if not header.is_transactional:
            return
        pid = header.producer_id
        if not header.is_control:
            if pid not in self._open:
                self._open[pid] = first_offset
            return
        kind = marker_type(batch, self.name)
        if kind not in (CONTROL_COMMIT, CONTROL_ABORT):
            return
        self.end(pid, first_offset, commit=kind == CONTROL_COMMIT)

    def end(self, producer_id: int, marker_offset: int, *, commit: bool) -> None:
        """The producer's transaction ended with a marker at ``marker_offset``."""
        first = self._open.pop(producer_id, None)
        if first is None:
            return  # a marker for a transaction with no records here (Kafka writes it too)
        self._ending[producer_id] = (marker_offset, first)
        self._unsealed.append((first, marker_offset, producer_id))
        if not commit:
            entry = AbortedTxn(marker_offset, first, producer_id)
            bisect.insort(self._aborted, entry)

    def undo_open(self, opened: Iterable[int]) -> None:
        """Forget the transactions `observe` just opened (the WAL refused their append)."""
        for pid in opened:
            self._open.pop(pid, None)

    # --- reads -------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the oldest transaction still open to readers, else the HW."""
        for pid, (marker, _first) in list(self._ending.items()):
            if marker < high_watermark:
                del self._ending[pid]
        firsts = [*self._open.values(), *(first for _m, first in self._ending.values())]
        return min([high_watermark, *firsts])

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``[start, end)``, by marker offset."""
        at = bisect.bisect_left(self._aborted, AbortedTxn(start, -1, -1))
        return [t for t in self._aborted[at:] if t.first_offset < end]

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset, of the transactions open here (ended ones excluded)."""
        return dict(self._open)

    def is_open(self, producer_id: int) -> bool:
        return producer_id in self._open

    @property
    def aborted(self) -> Sequence[AbortedTxn]:
        return tuple(self._aborted)

    @property
    def any_aborted(self) -> bool:
        """Whether an aborted transaction is known (a fetch's check: no copy)."""
        return bool(self._aborted)

    # --- the catalog: what a segment records, and the load ---------------------------

    def for_segment(
        self, base_offset: int, last_offset: int
    ) -> tuple[list[AbortedTxn], dict[int, int]]:
        """What a segment of ``base_offset``..``last_offset`` records, as it is sealed.

        The aborted transactions whose marker it holds, and the transactions
        open at its last offset (producer id -> first offset), which a
        partition loaded from the catalog starts from (`load`).
        """
        aborted = [t for t in self._aborted if base_offset <= t.last_offset <= last_offset]
        open_at = {pid: first for pid, first in self._open.items() if first <= last_offset}
        open_at.update(
            {pid: first for first, marker, pid in self._unsealed if first <= last_offset < marker}
        )
        return aborted, open_at

    def sealed_through(self, last_offset: int) -> None:
        """Segments up to ``last_offset`` are committed: forget what `for_segment` needs no more."""
        self._unsealed = [u for u in self._unsealed if u[1] > last_offset]

    def load(self, aborted: Iterable[AbortedTxn], open_at_end: dict[int, int]) -> None:
        """Take what the committed segments recorded: their aborted list and what was open."""
        self._aborted = sorted(set(self._aborted) | set(aborted))
        for pid, first in open_at_end.items():
            self._open.setdefault(pid, first)

    def drop_below(self, log_start_offset: int) -> None:
        """Forget aborted transactions whose marker lies below the log start."""
        at = bisect.bisect_left(self._aborted, AbortedTxn(log_start_offset, -1, -1))
        del self._aborted[:at]


def load_transactions(txns: PartitionTransactions, segments: Sequence[SegmentEntry]) -> None:
    """Fill ``txns`` from a partition's live segments, in offset order (see `SegmentEntry`)."""
    aborted = [
        AbortedTxn(a.last_offset, a.first_offset, a.producer_id)
        for segment in segments
        for a in segment.aborted
    ]
    open_at_end = (
        {o.producer_id: o.first_offset for o in segments[-1].open_txns} if segments else {}
    )
    if aborted or open_at_end:
        txns.load(aborted, open_at_end)
