"""A partition's leader epoch history: where each lease epoch began, and OffsetForLeaderEpoch.

Kafka keeps, per partition, the start offset of every leader epoch (its
``LeaderEpochFileCache``, KIP-101), and a consumer that saw records of epoch
``E`` asks the leader, after a leader change, where ``E`` ended
(OffsetForLeaderEpoch, KIP-320).  In KFS a leader epoch is a lease epoch, so
the history comes from the catalog: each ``lease`` commit starts an epoch at
the log's end (its ``start_offset``), and a ``leader_epoch_start`` commit moves
the newest epoch's start past the records its holder replayed from earlier
holders before it served (`kfs_core.catalog.actions`).  `StateBuilder` keeps
the history (`record`, `trim`) and checkpoints carry it, so it outlives the
commits it came from; `end_offset_for` answers the API.

The history as stored is one `EpochEntry` per epoch, epochs increasing,
start offsets never decreasing.  Two rules keep it short, both Kafka's: an
epoch that ended where it began (no record of its own) goes once the epoch
after it is settled -- only the newest epoch's start can still move -- and
once the log start offset passes an epoch's successor, the epoch goes too.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import StrictInt

from kfs_core.catalog.actions import NonNegative, _Model

__all__ = ["UNDEFINED", "EpochEntry", "end_offset_for", "record", "trim"]

#: Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET: no epoch is known for the request.
UNDEFINED: tuple[int, int] = (-1, -1)


class EpochEntry(_Model):
    """Leader epoch ``epoch`` began at offset ``start_offset`` (its first record's, or the end)."""

    epoch: StrictInt
    start_offset: NonNegative


History = tuple[EpochEntry, ...]


def record(history: Sequence[EpochEntry], epoch: int, start_offset: int) -> History:
    """The history once epoch ``epoch`` begins (or, for the newest epoch, begins again) there.

    Entries of ``epoch`` or later go first (a replay of a newer lease's start
    moves it); the entries before are settled, so an empty one among them goes.
    An epoch never begins before the one before it: a lease taken on a log
    end below the newest epoch's start (its holder moved the start, then died
    before committing the records it replayed) begins at that start, since
    the records in between are earlier epochs' and are replayed again.
    """
    kept = [e for e in history if e.epoch < epoch]
    if kept:
        start_offset = max(start_offset, kept[-1].start_offset)
    return _settled((*kept, EpochEntry(epoch=epoch, start_offset=start_offset)))


def trim(history: Sequence[EpochEntry], log_start_offset: int) -> History:
    """``history`` without the epochs whose successor begins at or below the log start offset."""
    first = 0
    while first + 1 < len(history) and history[first + 1].start_offset <= log_start_offset:
        first += 1
    return tuple(history[first:])


def _settled(history: Sequence[EpochEntry]) -> History:
    """Drop each epoch that a later one, other than the newest, begins at or before.

    The newest epoch's start may still move forwards (`record` again), so
    the epoch before it stays until a newer lease settles it.
    """
    kept: list[EpochEntry] = []
    for i, entry in enumerate(history):
        if i < len(history) - 1:
            while kept and kept[-1].start_offset >= entry.start_offset:
                kept.pop()
        kept.append(entry)
    return tuple(kept)


def end_offset_for(
    history: Sequence[EpochEntry], requested: int, log_end_offset: int, log_start_offset: int
) -> tuple[int, int]:
    """OffsetForLeaderEpoch: ``(leader epoch, end offset)`` of epoch ``requested``.

    As Kafka's ``LeaderEpochFileCache.endOffsetFor``: the newest epoch ends at
    ``log_end_offset``; an older one at the start of the first epoch after
    it, paired with the largest known epoch at or below it -- or, when it is
    older than every epoch still known, with ``requested`` itself.
    `UNDEFINED` for a negative epoch (none named) and for one newer than the
    newest.  A partition that never had a lease has been epoch 0 all along.
    """
    if requested < 0:
        return UNDEFINED
    epochs = _effective(history, log_start_offset)
    if requested == epochs[-1].epoch:
        return requested, log_end_offset
    later = next((e for e in epochs if e.epoch > requested), None)
    if later is None:
        return UNDEFINED
    floor = [e for e in epochs if e.epoch <= requested]
    return (floor[-1].epoch if floor else requested), later.start_offset


def _effective(history: Sequence[EpochEntry], log_start_offset: int) -> History:
    """Kafka's view of the history: monotonic, and starting at the log start offset.

    Every epoch that a later one begins at or before is gone (nothing of it
    is in the log), and so is every epoch that ended at or below the log
    start offset; the one the log start offset falls in begins there.
    """
    kept: list[EpochEntry] = []
    for entry in history or (EpochEntry(epoch=0, start_offset=log_start_offset),):
        while kept and kept[-1].start_offset >= entry.start_offset:
            kept.pop()
        kept.append(entry)
    below = [e for e in kept if e.start_offset <= log_start_offset]
    if below:
        kept = [
            below[-1].model_copy(update={"start_offset": log_start_offset}),
            *kept[len(below) :],
        ]
    return tuple(kept)
