"""Idempotent-producer rules of `ProducerStateTable`, against Kafka's ProducerAppendInfo.

Each test is one rule of the table in `kfs_core.log.producer_state`: a retry
of the last 5 batches is a duplicate, gaps and old epochs are refused, a new
epoch starts at 0, sequences wrap at int32 max, unknown producers start
anywhere, idle producers expire; snapshots keep only batches below their
``through`` offset and survive a JSON round trip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kfs_core.log.producer_state import (
    BATCHES_TO_RETAIN,
    INT32_MAX,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    ProducerSnapshot,
    ProducerStateTable,
    SnapshotStore,
    batch_offsets,
    end_sequence,
)
from kfs_core.records.batch import CONTROL_COMMIT, Record, encode_batch, encode_control_key
from kfs_core.records.header import BatchHeader, read_batch_header

pytestmark = pytest.mark.unit

PID = 1000
NOW = 1_700_000_000_000
DAY_MS = 86_400_000


def header(
    seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    base_offset: int = 0,
    transactional: bool = False,
) -> BatchHeader:
    data = encode_batch(
        [Record(base_offset + i, NOW, None, b"v") for i in range(count)],
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1,
        is_transactional=transactional,
    )
    return read_batch_header(data)


class Log:
    """A table plus the offsets a log would assign, as `LogManager` drives it."""

    def __init__(self, expiration_ms: int = DAY_MS) -> None:
        self.table = ProducerStateTable("t-0", expiration_ms)
        self.next_offset = 0

    def produce(self, *headers: BatchHeader, now: int = NOW) -> int:
        """Check, then append: the base offset (the original one for a duplicate)."""
        original = self.table.check(headers, now)
        if original is not None:
            return original.first_offset
        base = self.next_offset
        placed = batch_offsets(headers, base)
        self.table.apply(placed, now)
        self.next_offset = placed[-1][0] + headers[-1].last_offset_delta + 1
        return base


def test_in_sequence_batches_are_appended() -> None:
    log = Log()
    assert [log.produce(header(0, 2)), log.produce(header(2, 3)), log.produce(header(5))] == [
        0,
        2,
        5,
    ]
    entry = log.table.entry(PID, NOW)
    assert entry is not None and entry.last_seq == 5 and entry.epoch == 0


def test_a_retry_of_any_of_the_last_five_batches_gets_its_original_offset() -> None:
    log = Log()
    offsets = [log.produce(header(seq * 2, 2)) for seq in range(7)]  # 7 batches of 2
    for seq in range(2, 7):  # the last 5 are remembered
        assert log.produce(header(seq * 2, 2)) == offsets[seq]
    assert log.next_offset == 14  # nothing written twice
    # The 6th-newest is forgotten: out of order, as Kafka answers.
    with pytest.raises(OutOfOrderSequence):
        log.produce(header(2, 2))
    assert len(log.table.entry(PID, NOW).batches) == BATCHES_TO_RETAIN  # type: ignore[union-attr]


def test_a_duplicate_must_match_the_whole_sequence_range() -> None:
    log = Log()
    log.produce(header(0, 3))
    with pytest.raises(OutOfOrderSequence):
        log.produce(header(0, 2))  # same start, other end: not the same batch


def test_a_gap_is_out_of_order_and_changes_nothing() -> None:
    log = Log()
    log.produce(header(0))
    with pytest.raises(OutOfOrderSequence, match="expected sequence 1"):
        log.produce(header(2))
    assert log.produce(header(1)) == 1


def test_an_older_epoch_is_fenced() -> None:
    log = Log()
    log.produce(header(0, epoch=1))
    with pytest.raises(InvalidProducerEpoch) as raised:
        log.produce(header(1, epoch=0))
    assert raised.value.kafka_error_code == 47


def test_a_new_epoch_starts_at_sequence_zero_and_forgets_the_old_batches() -> None:
    log = Log()
    log.produce(header(0, epoch=0))
    log.produce(header(1, epoch=0))
    with pytest.raises(OutOfOrderSequence, match="new epoch"):
        log.produce(header(2, epoch=1))
    assert log.produce(header(0, epoch=1)) == 2
    # The old epoch is over: its batches are no duplicates now, they are fenced.
    with pytest.raises(InvalidProducerEpoch):
        log.produce(header(1, epoch=0))


def test_an_unknown_producer_may_start_at_any_sequence() -> None:
    """Kafka >= 2.5 (KIP-360): no UNKNOWN_PRODUCER_ID, the producer's state may have expired."""
    log = Log()
    assert log.produce(header(41, pid=7)) == 0
    with pytest.raises(OutOfOrderSequence):
        log.produce(header(43, pid=7))


def test_sequences_wrap_at_int32_max() -> None:
    assert end_sequence(INT32_MAX - 1, 3) == 1
    assert end_sequence(INT32_MAX, 0) == INT32_MAX
    log = Log()
    log.produce(header(INT32_MAX - 1, 2))  # INT32_MAX - 1, INT32_MAX
    assert log.produce(header(0, 2)) == 2
    assert log.produce(header(INT32_MAX - 1, 2)) == 0  # still a duplicate
    log2 = Log()
    log2.produce(header(INT32_MAX - 1, 3))  # wraps inside the batch: ... 0
    assert log2.produce(header(1)) == 3


def test_two_batches_of_one_request_are_checked_in_order() -> None:
    log = Log()
    assert log.produce(header(0, 2), header(2, 1)) == 0
    with pytest.raises(OutOfOrderSequence):
        log.produce(header(3), header(5))
    assert log.next_offset == 3


def test_non_idempotent_batches_skip_every_check() -> None:
    log = Log()
    assert log.produce(header(0, pid=-1)) == 0
    assert log.produce(header(0, pid=-1)) == 1
    assert len(log.table) == 0


def marker(epoch: int, *, pid: int = PID) -> BatchHeader:
    """The header of a commit marker the transaction coordinator writes."""
    data = encode_batch(
        [Record(0, NOW, encode_control_key(CONTROL_COMMIT), b"\x00\x00\x00\x00\x00\x00")],
        producer_id=pid,
        producer_epoch=epoch,
        is_transactional=True,
        is_control=True,
    )
    return read_batch_header(data)


def test_transactional_batches_follow_the_sequence_across_transactions() -> None:
    log = Log()
    assert log.produce(header(0, 2, transactional=True)) == 0
    assert log.produce(marker(0)) == 2
    assert log.produce(header(2, transactional=True)) == 3  # the next transaction goes on
    with pytest.raises(OutOfOrderSequence):
        log.produce(header(5, transactional=True))


def test_a_marker_at_a_newer_epoch_fences_the_older_one() -> None:
    log = Log()
    log.produce(header(0, transactional=True))
    log.produce(marker(1))  # the coordinator aborted at a bumped epoch
    with pytest.raises(InvalidProducerEpoch):
        log.produce(header(1, transactional=True))  # the zombie at epoch 0
    with pytest.raises(InvalidProducerEpoch) as raised:
        log.produce(marker(0))
    assert raised.value.kafka_error_code == 47
    assert log.produce(header(0, epoch=1, transactional=True)) == 2


def test_a_marker_for_an_unknown_producer_leaves_it_unknown() -> None:
    log = Log()
    log.produce(marker(3, pid=9))
    assert log.table.entry(9, NOW) is None
    assert log.produce(header(7, pid=9, epoch=3)) == 1  # unknown: any sequence (KIP-360)


def test_idle_producers_expire() -> None:
    log = Log(expiration_ms=1000)
    log.produce(header(0), now=NOW)
    log.produce(header(1), now=NOW + 999)
    assert log.table.entry(PID, NOW + 1998) is not None
    assert log.table.entry(PID, NOW + 1999) is None  # idle 1000 ms
    assert log.produce(header(5), now=NOW + 2000) == 2  # unknown again: any sequence
    log.table.apply(batch_offsets([header(0, pid=8)], 3), NOW)
    assert log.table.expire(NOW + 2999) == 1 and len(log.table) == 1


def test_restore_undoes_an_apply() -> None:
    log = Log()
    log.produce(header(0))
    before = log.table.entry(PID, NOW)
    previous = log.table.apply(batch_offsets([header(1), header(0, pid=9)], 1), NOW)
    log.table.restore(previous)
    assert log.table.entry(PID, NOW) == before and log.table.entry(9, NOW) is None


def test_replay_is_idempotent() -> None:
    table = ProducerStateTable("t-0")
    batches = [header(i, base_offset=i) for i in range(3)]
    table.replay(batches, NOW)
    table.replay(batches, NOW)  # the segments and the WAL may both hold a batch
    entry = table.entry(PID, NOW)
    assert entry is not None and [b.first_offset for b in entry.batches] == [0, 1, 2]


# --- replay: batches that break their producer's sequence ----------------------------


def rebuilt(*headers: BatchHeader) -> ProducerStateTable:
    """A table rebuilt from a log holding ``headers`` (their base offsets assigned)."""
    table = ProducerStateTable("t-0")
    table.replay(headers, NOW)
    return table


def test_a_replayed_batch_after_a_missing_one_breaks_the_sequence() -> None:
    table = rebuilt(header(0, 2, base_offset=0), header(0, 2, pid=9, base_offset=2))
    gap = header(4, 2, base_offset=4)  # sequences 2..3 never landed
    entry = table.breaks_sequence(gap, NOW)
    assert entry is not None and (entry.last_seq, entry.last_offset) == (1, 1)
    assert table.breaks_sequence(header(2, 2, base_offset=4), NOW) is None  # continues
    assert table.breaks_sequence(header(0, 2, base_offset=4), NOW) is None  # a duplicate
    assert table.breaks_sequence(header(5, pid=3, base_offset=4), NOW) is None  # unknown pid
    assert table.breaks_sequence(header(7, pid=-1, base_offset=4), NOW) is None
    assert table.breaks_sequence(header(0, 1, base_offset=1), NOW) is None  # already in
    with pytest.raises(OutOfOrderSequence):  # appended, it would be out of order
        table.check([gap], NOW)


def test_a_newer_epoch_breaks_the_sequence_unless_it_starts_at_zero() -> None:
    table = rebuilt(header(0, 2, base_offset=0))
    assert table.breaks_sequence(header(0, epoch=1, base_offset=2), NOW) is None
    assert table.breaks_sequence(header(3, epoch=1, base_offset=2), NOW) is not None
    assert table.breaks_sequence(header(2, epoch=0, base_offset=2), NOW) is None


def test_only_an_exact_entry_can_be_broken() -> None:
    """An entry the table may know only in part (a snapshot, skipped segments) breaks nothing."""
    log = Log()
    log.produce(header(0, 2))  # offsets 0..1
    snapshot = log.table.snapshot(through=2, written_ms=NOW)
    from_snapshot = ProducerStateTable("t-0")
    from_snapshot.load(snapshot, NOW)
    gap = header(4, 2, base_offset=2)
    assert from_snapshot.breaks_sequence(gap, NOW) is None  # the log may hold newer ones
    # The segments the rebuild read start above what it saw before: offsets 2..9 unseen.
    skipped = rebuilt(header(0, 2, base_offset=0), header(0, 2, pid=9, base_offset=10))
    assert skipped.breaks_sequence(header(4, 2, base_offset=12), NOW) is None
    # Once the producer's own batch lies in the part seen whole, it is exact again.
    from_snapshot.replay([header(2, 2, base_offset=2)], NOW)
    assert from_snapshot.breaks_sequence(header(7, base_offset=4), NOW) is not None


def test_a_snapshot_keeps_only_batches_below_through(tmp_path: Path) -> None:
    log = Log()
    for seq in range(4):
        log.produce(header(seq))
    log.produce(header(0, pid=2))  # offset 4: all of producer 2 is above through
    snapshot = log.table.snapshot(through=3, written_ms=NOW)
    store = SnapshotStore(tmp_path / "producer-state")
    store.write("t", 0, snapshot)
    loaded = store.read("t", 0)
    assert loaded == snapshot and isinstance(loaded, ProducerSnapshot)
    table = ProducerStateTable("t-0")
    table.load(loaded, NOW)
    entry = table.entry(PID, NOW)
    assert entry is not None and [b.last_offset for b in entry.batches] == [0, 1, 2]
    assert table.entry(2, NOW) is None
    # Replaying the WAL above `through` completes it.
    table.replay([header(3, base_offset=3), header(0, pid=2, base_offset=4)], NOW)
    assert table.check([header(3)], NOW) is not None  # a duplicate again
    assert table.check([header(0, pid=2)], NOW) is not None


def test_unreadable_snapshots_are_ignored_and_topics_deleted(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.path("t", 0).write_text("{not json")
    assert store.read("t", 0) is None
    store.write("t", 1, ProducerSnapshot(through=0, written_ms=NOW, producers=[]))
    store.write("t-1", 0, ProducerSnapshot(through=0, written_ms=NOW, producers=[]))
    assert store.delete_topic("t") == 2  # t-0 and t-1, not topic "t-1"'s partition 0
    assert store.read("t-1", 0) is not None
