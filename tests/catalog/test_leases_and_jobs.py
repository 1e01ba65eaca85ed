"""Maintenance commits and leases: a job's commit never undoes, hides or is fenced by a lease.

Compaction, retention and restore commit without a leader epoch, so they
land whoever owns the partition; what keeps them safe is that every attempt
is judged against the newest state, lease commits included, and that no job
action touches the lease.  Each test has a job read the partition before a
move and commit after it (a kill -9 takeover's lease and replay, a graceful
hand-over), and checks the lease, the owners' next commits and every later
reader: a refresh, a cold load from a checkpoint, a load after the commits
below a checkpoint have expired, and a named snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kfs_core.catalog import (
    AddSegment,
    PartitionCatalog,
    PartitionState,
    RemoveSegment,
    SegmentEntry,
    TopicRegistry,
    layout,
)
from kfs_core.catalog.restore import restore_topic
from kfs_core.catalog.snapshots import read_partition_state, read_snapshot, take_snapshot
from kfs_core.errors import FencedLeaderEpoch, LogStartOffsetRegression
from kfs_core.storage.base import ObjectStore
from tests.catalog.conftest import NS, PARTITION, TOPIC, seg
from tests.catalog.test_snapshots import HookStore, put_segment


def catalog(store: ObjectStore, **options: Any) -> PartitionCatalog:
    return PartitionCatalog(store, NS, TOPIC, PARTITION, **options)


def owned(base: int, epoch: int, count: int = 10) -> SegmentEntry:
    """A segment as the daemon leading at ``epoch`` names it."""
    return seg(base, count, suffix=layout.epoch_suffix(epoch))


def lease_of(state: PartitionState) -> tuple[int, int, str]:
    return state.leader_epoch, state.leader_node_id, state.leader_incarnation


def moved(store: ObjectStore) -> tuple[PartitionCatalog, PartitionCatalog]:
    """Node 1 led at epoch 1 and committed three segments; node 2 took over and replayed one.

    Returns (the deposed owner's catalog, the new owner's), each with the
    state it last wrote cached.
    """
    old = catalog(store, writer="node-1")
    old.take_lease(1, "boot-1")
    old.add_segments([owned(0, 1), owned(10, 1), owned(20, 1)], leader_epoch=1)
    new = catalog(store, writer="node-2")
    new.take_lease(2, "boot-2")
    new.add_segments([owned(30, 2)], leader_epoch=2)  # the dead holder's WAL, replayed
    return old, new


#: Each job's commit, planned from a state read before the move.
JOB_COMMITS: dict[str, Callable[[PartitionCatalog], object]] = {
    "compaction replace": lambda job: job.replace(
        [owned(0, 1), owned(10, 1)], [seg(0, 20, suffix="-m1")]
    ),
    "retention remove": lambda job: job.remove([owned(0, 1)], log_start_offset=10),
    "retention log start": lambda job: job.set_log_start_offset(10),
    "topic config": lambda job: job.set_topic_config({"retention.ms": 1000}),
    "restore": lambda job: job.commit(
        [
            RemoveSegment(key=owned(10, 1).key, base_offset=10, removed_ms=1),
            AddSegment(segment=seg(10, suffix="-r1")),
        ],
        operation="restore",
    ),
}


@pytest.mark.parametrize("commit", JOB_COMMITS.values(), ids=JOB_COMMITS.keys())
def test_a_job_commit_planned_before_a_takeover_lands_after_it_and_keeps_the_lease(
    store: ObjectStore, commit: Callable[[PartitionCatalog], object]
) -> None:
    catalog(store).take_lease(1, "boot-1")
    catalog(store).add_segments([owned(0, 1), owned(10, 1), owned(20, 1)], leader_epoch=1)
    job = catalog(store, writer="job")
    job.load()  # the job reads the partition while node 1 leads it
    new = catalog(store, writer="node-2")
    new.take_lease(2, "boot-2")
    new.add_segments([owned(30, 2)], leader_epoch=2)

    commit(job)  # lost the version race to the lease and the replay, judged again, landed

    after = catalog(store).load()
    assert lease_of(after) == (2, 2, "boot-2")
    assert after.find(owned(30, 2).key) is not None
    # The new owner's cache predates the job's commit: it loses a race, re-reads, lands.
    new.add_segments([owned(40, 2)], leader_epoch=2)
    # The deposed owner is fenced whatever landed in between.
    with pytest.raises(FencedLeaderEpoch):
        catalog(store).add_segments([owned(40, 1)], leader_epoch=1)
    final = catalog(store).load()
    assert lease_of(final) == (2, 2, "boot-2") and final.high_watermark == 50
    assert catalog(store).take_lease(3, "boot-3").leader_epoch == 3  # the next epoch follows


def test_a_deposed_owner_after_a_job_commit_is_fenced_and_changes_nothing(
    store: ObjectStore,
) -> None:
    old, _ = moved(store)
    catalog(store, writer="job").replace([owned(0, 1), owned(10, 1)], [seg(0, 20, suffix="-m1")])
    before = catalog(store).load()
    with pytest.raises(FencedLeaderEpoch):
        old.add_segments([owned(30, 1)], leader_epoch=1)  # its cache predates both
    assert catalog(store).load() == before


def test_a_replace_racing_the_replay_of_a_takeover_keeps_both(store: ObjectStore) -> None:
    """Compaction puts its replace just as the new owner puts its replay's commit."""
    old = catalog(store, writer="node-1")
    old.take_lease(1, "boot-1")
    old.add_segments([owned(0, 1), owned(10, 1)], leader_epoch=1)
    new = catalog(store, writer="node-2")
    new.take_lease(2, "boot-2")
    job = catalog(store, writer="job")
    job.load()  # the lease, not the replay

    def replay_first() -> None:
        new.add_segments([owned(20, 2)], leader_epoch=2)

    hooked = HookStore(store, lambda key: "/_log/" in key, replay_first)
    catalog(hooked, writer="job").replace([owned(0, 1), owned(10, 1)], [seg(0, 20, suffix="-m1")])
    state = catalog(store).load()
    assert [s.key for s in state.segments] == [seg(0, 20, suffix="-m1").key, owned(20, 2).key]
    assert lease_of(state) == (2, 2, "boot-2")


def test_retention_below_a_log_start_the_new_owner_moved_keeps_the_lease(
    store: ObjectStore,
) -> None:
    """DeleteRecords on the new owner (a fenced commit), then retention from an older state."""
    _, new = moved(store)
    job = catalog(store, writer="job")
    job.load()
    new.set_log_start_offset(25, leader_epoch=2)
    with pytest.raises(LogStartOffsetRegression):  # its log start would move back: refused
        job.remove([owned(0, 1)], log_start_offset=10)
    job.remove([owned(0, 1), owned(10, 1)])  # what lies wholly below the new log start
    state = catalog(store).load()
    assert state.log_start_offset == 25 and lease_of(state) == (2, 2, "boot-2")
    assert [s.base_offset for s in state.segments] == [20, 30]


def test_a_checkpoint_taken_before_a_lease_commit_never_hides_it(store: ObjectStore) -> None:
    """The checkpoint job's state predates a hand-over; its checkpoint lands after the lease."""
    _, new = moved(store)
    job = catalog(store, writer="checkpoint-job")
    job.load()
    version_before = job.state.version

    def hand_over() -> None:  # node 3 takes the partition as the checkpoint is written
        catalog(store, writer="node-3").take_lease(3, "boot-3")

    checkpointer = catalog(
        HookStore(store, lambda key: key.endswith(".checkpoint.json"), hand_over)
    )
    checkpointer.load()
    written = checkpointer.checkpoint()
    assert written == version_before  # the state it had read: the lease came after
    cold = catalog(store).load()  # that checkpoint, then the lease commit after it
    assert lease_of(cold) == (3, 3, "boot-3")
    assert catalog(store).checkpoint() == version_before + 1  # the lease's version
    expired = catalog(store).expire_commits(version_before + 1, min_age_ms=0)
    assert expired.checkpoint_version == version_before + 1 and expired.deleted > 0
    assert lease_of(catalog(store).load()) == (3, 3, "boot-3")
    with pytest.raises(FencedLeaderEpoch):
        new.add_segments([owned(40, 2)], leader_epoch=2)


def test_expiry_keeps_each_lease_in_the_kept_checkpoint_or_after_it(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=4)
    for epoch in range(1, 6):  # a lease, then a flush, five times over
        writer.take_lease(epoch, f"boot-{epoch}")
        writer.add_segments([owned(10 * epoch, epoch)], leader_epoch=epoch)
    head = writer.state.version  # 9: checkpoints at 4 and 8
    for cut in range(head + 1):
        catalog(store).expire_commits(cut, min_age_ms=0)
        state = catalog(store).load()
        assert lease_of(state) == (5, 5, "boot-5"), cut
        assert state.version == head
    assert catalog(store).take_lease(6, "boot-6").leader_epoch == 6


def test_a_named_snapshot_keeps_the_lease_and_a_restore_leaves_the_current_one(
    store: ObjectStore,
) -> None:
    TopicRegistry(store, NS).create_topic(TOPIC, 1)
    owner = catalog(store, writer="node-1")
    owner.take_lease(1, "boot-1")
    first = [put_segment(store, owned(0, 1)), put_segment(store, owned(10, 1))]
    owner.add_segments(first, leader_epoch=1)
    take_snapshot(store, NS, "before")
    (partition,) = read_snapshot(store, NS, "before").topics[0].partitions
    snapshot = read_partition_state(store, NS, "before", TOPIC, partition)
    assert snapshot is not None
    assert (snapshot.leader_epoch, snapshot.leader_node_id, snapshot.leader_incarnation) == (
        1,
        1,
        "boot-1",
    )
    catalog(store).remove([first[1]])  # an accident, then the partition moves
    new = catalog(store, writer="node-2")
    new.take_lease(2, "boot-2")
    new.add_segments([put_segment(store, owned(20, 2))], leader_epoch=2)

    result = restore_topic(store, NS, TOPIC, "before")

    assert result.ok
    state = catalog(store).load()
    assert [s.base_offset for s in state.segments] == [0, 10]
    assert lease_of(state) == (2, 2, "boot-2")  # the snapshot's epoch 1 is not restored
    new.add_segments([put_segment(store, owned(30, 2))], leader_epoch=2)
