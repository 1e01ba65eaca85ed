"""The leader epoch history: where each lease epoch began, and what OffsetForLeaderEpoch answers.

The answers follow Kafka's ``LeaderEpochFileCache.endOffsetFor``; the
history comes from ``lease`` commits (their ``start_offset``, or their place
in the log for leases written before the field) and ``leader_epoch_start``
commits, and lives on in checkpoints, after the commits that made it
expired, and in snapshots.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kfs_core.catalog import (
    AddSegment,
    Commit,
    EpochEntry,
    PartitionCatalog,
    SetLeaderEpochStart,
    SetLogStartOffset,
    TakeLease,
)
from kfs_core.catalog.actions import decode_commit, encode_commit
from kfs_core.catalog.epochs import UNDEFINED, end_offset_for, record, trim
from kfs_core.catalog.snapshots import read_partition_state, read_snapshot, take_snapshot
from kfs_core.catalog.state import StateBuilder, decode_checkpoint
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.errors import (
    CorruptCatalog,
    FencedLeaderEpoch,
    InvalidCatalogAction,
    LeaseStartMoved,
)
from kfs_core.storage.base import ObjectInfo, ObjectStore
from tests.catalog.conftest import NS, PARTITION, TOPIC, FaultyStore, seg


def entries(*pairs: tuple[int, int]) -> tuple[EpochEntry, ...]:
    return tuple(EpochEntry(epoch=e, start_offset=s) for e, s in pairs)


def catalog(store: ObjectStore, **options: Any) -> PartitionCatalog:
    return PartitionCatalog(store, NS, TOPIC, PARTITION, **options)


def commit(version: int, *actions: Any) -> Commit:
    return Commit(
        version=version, commit_id=f"c{version}", writer="w", timestamp_ms=version,
        operation="test", actions=actions,
    )  # fmt: skip


# --- Kafka's answers -------------------------------------------------------------------

# Epochs 2 at 0, 4 at 100, 7 at 250; the log ends at 300 and starts at 0.
HISTORY = entries((2, 0), (4, 100), (7, 250))


@pytest.mark.parametrize(
    ("requested", "answer"),
    [
        (7, (7, 300)),  # the newest epoch ends at the log's end
        (4, (4, 250)),  # an older one where the next begins
        (2, (2, 100)),
        (5, (4, 250)),  # between epochs: the largest at or below, the next one's start
        (6, (4, 250)),
        (3, (2, 100)),
        (1, (1, 0)),  # older than every known epoch: itself, the first one's start
        (0, (0, 0)),
        (8, UNDEFINED),  # newer than the newest
        (-1, UNDEFINED),  # no epoch named
        (-7, UNDEFINED),
    ],
)
def test_end_offsets_are_kafkas(requested: int, answer: tuple[int, int]) -> None:
    assert end_offset_for(HISTORY, requested, 300, 0) == answer


def test_an_epoch_without_records_of_its_own_is_passed_over() -> None:
    # Epoch 3 began where 4 did: nothing of it is in the log.
    history = entries((2, 0), (3, 100), (4, 100))
    assert end_offset_for(history, 3, 150, 0) == (2, 100)
    assert end_offset_for(history, 2, 150, 0) == (2, 100)


def test_the_log_start_offset_cuts_the_history() -> None:
    # Retention moved the log start to 120: epoch 2 is gone, epoch 4 begins there.
    assert end_offset_for(HISTORY, 2, 300, 120) == (2, 120)
    assert end_offset_for(HISTORY, 4, 300, 120) == (4, 250)
    assert end_offset_for(HISTORY, 7, 300, 260) == (7, 300)
    assert end_offset_for(HISTORY, 4, 300, 260) == (4, 260)


def test_a_partition_that_never_had_a_lease_is_epoch_zero() -> None:
    assert end_offset_for((), 0, 42, 5) == (0, 42)
    assert end_offset_for((), 1, 42, 5) == UNDEFINED
    # Records from before the first lease are epoch 0's.
    assert end_offset_for(entries((1, 40)), 0, 90, 0) == (0, 40)


def test_record_replaces_the_newest_epoch_and_settles_the_ones_before() -> None:
    history = record((), 1, 0)
    history = record(history, 2, 0)  # epoch 1 had nothing yet, but 2 may still move
    assert history == entries((1, 0), (2, 0))
    history = record(history, 2, 30)  # epoch 2 begins past what it replayed: 1's records
    assert history == entries((1, 0), (2, 30))
    history = record(history, 3, 30)  # 2 may have nothing of its own, but 3 may still move
    assert history == entries((1, 0), (2, 30), (3, 30))
    history = record(history, 4, 30)  # 3 is settled, so 2 had nothing: it goes
    assert history == entries((1, 0), (3, 30), (4, 30))
    history = record(history, 4, 45)
    history = record(history, 5, 20)  # a lease below the newest start begins there
    assert history == entries((1, 0), (3, 30), (4, 45), (5, 45))
    # What ended at or below the log start goes.
    assert trim(history, 29) == history
    assert trim(history, 44) == entries((3, 30), (4, 45), (5, 45))
    assert trim(history, 45) == entries((5, 45))


# --- the state: leases, epoch starts, replay ---------------------------------------------


def test_a_lease_records_the_log_end_and_old_leases_count_from_their_place() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply(commit(0, TakeLease(epoch=1, node_id=1, incarnation="a", start_offset=0)), "_log/0")
    b.apply(commit(1, AddSegment(segment=seg(0, 10))), "_log/1")
    # A lease written before leases recorded their start: its place in the log says 10.
    b.apply(commit(2, TakeLease(epoch=2, node_id=2, incarnation="b")), "_log/2")
    b.apply(commit(3, AddSegment(segment=seg(10, 5))), "_log/3")
    b.apply(commit(4, TakeLease(epoch=3, node_id=1, incarnation="c", start_offset=15)), "_log/4")
    state = b.snapshot()
    assert state.leader_epochs == entries((1, 0), (2, 10), (3, 15))
    assert state.end_offset_for_epoch(2, 20) == (2, 15)
    assert state.end_offset_for_epoch(3, 20) == (3, 20)


def test_a_writer_must_give_the_log_end_as_the_lease_start() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply_ops(b.plan([AddSegment(segment=seg(0, 10))]), 0, 1)
    with pytest.raises(LeaseStartMoved):
        b.plan([TakeLease(epoch=1, node_id=1, incarnation="a", start_offset=0)])
    b.plan([TakeLease(epoch=1, node_id=1, incarnation="a", start_offset=10)])
    # A replay applies what the log holds.
    b.apply(commit(1, TakeLease(epoch=1, node_id=1, incarnation="a", start_offset=7)), "_log/1")
    assert b.snapshot().leader_epochs == entries((1, 7))


def test_only_the_newest_epoch_may_start_later_and_never_below_the_log_end() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply_ops(b.plan([TakeLease(epoch=1, node_id=1, incarnation="a", start_offset=0)]), 0, 1)
    b.apply_ops(b.plan([AddSegment(segment=seg(0, 10))]), 1, 2)
    b.apply_ops(b.plan([TakeLease(epoch=2, node_id=2, incarnation="b", start_offset=10)]), 2, 3)
    with pytest.raises(InvalidCatalogAction, match="newest"):
        b.plan([SetLeaderEpochStart(epoch=1, start_offset=12)])
    b.apply_ops(b.plan([AddSegment(segment=seg(10, 5))]), 3, 4)
    with pytest.raises(InvalidCatalogAction, match="below the high watermark 15"):
        b.plan([SetLeaderEpochStart(epoch=2, start_offset=14)])
    b.apply_ops(b.plan([SetLeaderEpochStart(epoch=2, start_offset=15)]), 4, 5)
    assert b.snapshot().leader_epochs == entries((1, 0), (2, 15))
    with pytest.raises(ValueError):
        SetLeaderEpochStart(epoch=0, start_offset=1)
    with pytest.raises(ValueError):
        SetLeaderEpochStart(epoch=1, start_offset=-1)


def test_the_log_start_offset_trims_the_history() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    for version, (epoch, base) in enumerate([(1, 0), (2, 10), (3, 20)]):
        lease = TakeLease(epoch=epoch, node_id=1, incarnation="a", start_offset=base)
        b.apply_ops(b.plan([lease, AddSegment(segment=seg(base, 10))]), version, version)
    assert b.snapshot().leader_epochs == entries((1, 0), (2, 10), (3, 20))
    b.apply_ops(b.plan([SetLogStartOffset(offset=20)]), 3, 3)
    assert b.snapshot().leader_epochs == entries((3, 20))


def test_lease_and_epoch_start_actions_encode_as_documented() -> None:
    old = TakeLease(epoch=1, node_id=1, incarnation="run-a")
    new = TakeLease(epoch=2, node_id=1, incarnation="run-b", start_offset=40)
    start = SetLeaderEpochStart(epoch=2, start_offset=55)
    data = encode_commit(commit(0, old, new, start))
    lines = data.decode().splitlines()
    assert lines[1] == '{"action":"lease","epoch":1,"node_id":1,"incarnation":"run-a"},'
    assert lines[2] == (
        '{"action":"lease","epoch":2,"node_id":1,"incarnation":"run-b","start_offset":40},'
    )
    assert lines[3] == '{"action":"leader_epoch_start","epoch":2,"start_offset":55}'
    decoded = decode_commit(data, "_log/0")
    assert decoded.actions == (old, new, start)
    assert decoded.actions[0].start_offset is None  # type: ignore[union-attr]


# --- checkpoints, expiry, snapshots ------------------------------------------------------


def history_log(cat: PartitionCatalog, leases: int) -> None:
    """``leases`` leases by two daemons in turn, ten records each in between."""
    for i in range(leases):
        cat.take_lease(1 + i % 2, f"boot-{i}")
        cat.add_segments([seg(10 * i, 10)], leader_epoch=i + 1)


def test_the_history_survives_checkpoints_and_the_expiry_of_its_commits(
    store: ObjectStore,
) -> None:
    writer = catalog(store, checkpoint_interval=4)
    history_log(writer, 6)
    expected = entries(*((i + 1, 10 * i) for i in range(6)))
    assert writer.state.leader_epochs == expected
    writer.checkpoint()
    result = writer.expire_commits(writer.state.version, min_age_ms=0)
    assert result.deleted > 0 and result.checkpoint_version == writer.state.version
    loaded = catalog(store).load()
    assert loaded.leader_epochs == expected
    assert loaded.end_offset_for_epoch(3, 60) == (3, 30)
    # The next lease goes on from the checkpointed history.
    writer.take_lease(1, "boot-next")
    assert catalog(store).load().leader_epochs == (*expected, EpochEntry(epoch=7, start_offset=60))


def test_a_checkpoint_from_before_histories_counts_its_lease_from_the_log_start() -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply_ops(b.plan([AddSegment(segment=seg(0, 10))]), 0, 1)
    b.apply(commit(1, TakeLease(epoch=3, node_id=1, incarnation="a", start_offset=10)), "_log/1")
    document = json.loads(b.encode_checkpoint())
    del document["leader_epochs"]
    old = json.dumps(document).encode()
    checkpoint = decode_checkpoint(old, "cp", 1)
    restored = StateBuilder.from_checkpoint(checkpoint, TOPIC, PARTITION, "cp")
    assert restored.snapshot().leader_epochs == entries((3, 0))


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([{"epoch": 3, "start_offset": 0}, {"epoch": 2, "start_offset": 5}], "out of order"),
        ([{"epoch": 2, "start_offset": 9}, {"epoch": 3, "start_offset": 5}], "out of order"),
        ([{"epoch": 2, "start_offset": 0}], "is not the lease's"),
    ],
)
def test_a_damaged_history_in_a_checkpoint_is_corruption(
    history: list[dict[str, int]], problem: str
) -> None:
    b = StateBuilder(TOPIC, PARTITION)
    b.apply(commit(0, TakeLease(epoch=3, node_id=1, incarnation="a", start_offset=0)), "_log/0")
    document = json.loads(b.encode_checkpoint())
    document["leader_epochs"] = history
    data = json.dumps(document).encode()
    with pytest.raises(CorruptCatalog, match=problem) as caught:
        StateBuilder.from_checkpoint(decode_checkpoint(data, "cp", 0), TOPIC, PARTITION, "cp")
    assert caught.value.object_name == "cp"


def test_a_snapshot_keeps_the_lease_and_its_history(store: ObjectStore) -> None:
    TopicRegistry(store, NS).create_topic(TOPIC, 1)
    history_log(catalog(store), 3)
    manifest = take_snapshot(store, NS, "epochs")
    topic = read_snapshot(store, NS, "epochs").topic(TOPIC)
    assert topic is not None and manifest.partition_count == 1
    saved = read_partition_state(store, NS, "epochs", TOPIC, topic.partitions[0])
    assert saved is not None
    assert (saved.leader_epoch, saved.leader_node_id) == (3, 1)
    assert saved.leader_epochs == entries((1, 0), (2, 10), (3, 20))


# --- take_lease ------------------------------------------------------------------------


class CommitsFirst(FaultyStore):
    """A store on which another writer's commit lands just before the first lease commit."""

    raced = False

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        if not self.raced and b'"action":"lease"' in data:
            self.raced = True
            catalog(self.inner).add_segments([seg(0, 10)], leader_epoch=0)
        return self.inner.put_if_absent(key, data)


def test_take_lease_takes_the_lease_again_at_the_new_end_after_a_commit_landed_first(
    store: ObjectStore,
) -> None:
    racing = CommitsFirst(store)
    cat = catalog(racing)
    state = cat.take_lease(4, "boot")
    assert racing.raced
    assert (state.leader_epoch, state.high_watermark) == (1, 10)
    assert state.leader_epochs == entries((1, 10))
    assert cat.read_commit(1).actions == (
        TakeLease(epoch=1, node_id=4, incarnation="boot", start_offset=10),
    )


def test_the_epoch_start_commit_is_fenced_by_its_epoch(store: ObjectStore) -> None:
    cat = catalog(store)
    cat.take_lease(1, "a")
    cat.add_segments([seg(0, 10)], leader_epoch=1)
    cat.set_leader_epoch_start(1, 25)
    assert cat.state.leader_epochs == entries((1, 25))
    # Its holder died before committing offsets 10 to 24; the next lease is
    # taken on the log end 10, and its epoch begins no earlier than 25.
    catalog(store).take_lease(2, "b")
    with pytest.raises(FencedLeaderEpoch):
        cat.set_leader_epoch_start(1, 30)
    assert catalog(store).load().leader_epochs == entries((1, 25), (2, 25))
