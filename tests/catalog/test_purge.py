"""`kfs_core.catalog.purge`: a deleted topic's data goes, then its name is free.

On both stores (local directory and S3 through moto): the segments, their
indexes and stray uploads are deleted, the catalogs stay with the log start
at the old end, the holder's epoch is fenced, a repeated purge is harmless,
and a partition a dead daemon with a local WAL held waits for it.
"""

from __future__ import annotations

import pytest

from kfs_core.catalog import PartitionCatalog, TopicRegistry
from kfs_core.catalog.layout import join
from kfs_core.catalog.purge import (
    PURGE_INCARNATION_PREFIX,
    dead_holder_refusal,
    empty_and_purge,
    fence_partitions,
    purge_deleted_topic,
)
from kfs_core.cluster.view import NodeInfo
from kfs_core.errors import FencedLeaderEpoch, TopicAlreadyExists
from kfs_core.storage.base import ObjectStore
from tests.catalog.conftest import NS, seg

TOPIC = "doomed"


def write_partition(store: ObjectStore, partition: int, bases: list[int]) -> PartitionCatalog:
    """Segments at ``bases`` (10 records each), their objects in the store, committed."""
    catalog = PartitionCatalog(store, NS, TOPIC, partition)
    entries = [seg(b, topic=TOPIC, partition=partition) for b in bases]
    for entry in entries:
        store.put(join(NS, entry.key), b"segment")
        store.put(join(NS, entry.index_key), b"index")
    catalog.add_segments(entries)
    return catalog


def data_keys(store: ObjectStore) -> list[str]:
    return sorted(i.key for i in store.list(f"{NS}/{TOPIC}/") if "/_log/" not in i.key)


def test_a_purge_deletes_the_data_keeps_the_offsets_and_frees_the_name(
    store: ObjectStore,
) -> None:
    registry = TopicRegistry(store, NS)
    registry.create_topic(TOPIC, partitions=3)
    write_partition(store, 0, [0, 10])
    write_partition(store, 1, [0])
    store.put(f"{NS}/{TOPIC}/1/segment-00000000000000000010.kfs", b"an upload never committed")
    registry.delete_topic(TOPIC)
    with pytest.raises(TopicAlreadyExists, match="marked for deletion"):
        registry.create_topic(TOPIC)

    report = purge_deleted_topic(store, NS, TOPIC, node_id=7, incarnation="i")

    assert (report.purged, report.partitions, report.waiting) == (True, 3, [])
    assert (report.segments_removed, report.objects_deleted) == (3, 7)
    assert data_keys(store) == []
    assert registry.deleted_topics() == []
    for partition, end in ((0, 20), (1, 10), (2, 0)):
        state = PartitionCatalog(store, NS, TOPIC, partition).refresh()
        assert (state.segments, state.log_start_offset, state.high_watermark) == ((), end, end)
        assert state.leader_node_id == 7
        assert state.leader_incarnation == PURGE_INCARNATION_PREFIX + "i"
    # The name is free: a new topic, empty, continuing above the old offsets.
    registry.create_topic(TOPIC, partitions=3)
    assert PartitionCatalog(store, NS, TOPIC, 0).refresh().log_start_offset == 20


def test_the_holder_is_fenced_and_a_second_purge_changes_nothing(store: ObjectStore) -> None:
    registry = TopicRegistry(store, NS)
    registry.create_topic(TOPIC)
    holder = write_partition(store, 0, [0])
    held = holder.take_lease(3, "holder")
    registry.delete_topic(TOPIC)

    assert purge_deleted_topic(store, NS, TOPIC, node_id=7, incarnation="i").purged
    with pytest.raises(FencedLeaderEpoch):  # the old holder's next flush
        holder.add_segments([seg(10, topic=TOPIC)], leader_epoch=held.leader_epoch)

    again = purge_deleted_topic(store, NS, TOPIC, node_id=7, incarnation="i")
    assert (again.purged, again.partitions) == (False, 0)  # not marked deleted any more


def test_a_purge_that_lost_its_lease_leaves_the_partition_and_the_name(
    store: ObjectStore,
) -> None:
    registry = TopicRegistry(store, NS)
    registry.create_topic(TOPIC, partitions=2)
    write_partition(store, 0, [0])
    registry.delete_topic(TOPIC)
    record = registry.deleted_record(TOPIC)
    assert record is not None
    epochs = fence_partitions(store, NS, record, node_id=1, incarnation="first")
    # Another purger takes partition 0 at a newer epoch before the first empties it.
    PartitionCatalog(store, NS, TOPIC, 0).take_lease(2, "second")

    report = empty_and_purge(store, NS, record, epochs)
    assert (report.purged, report.waiting) == (False, [0])
    assert registry.deleted_topics() == [TOPIC]
    assert data_keys(store) != []
    # The next purge finishes it.
    assert purge_deleted_topic(store, NS, TOPIC, node_id=2, incarnation="second").purged
    assert data_keys(store) == []


def node(node_id: int, incarnation: str, durability: str, state: str = "running") -> NodeInfo:
    return NodeInfo(node_id, incarnation, {}, durability, state)  # type: ignore[arg-type]


def test_a_partition_a_dead_daemon_with_a_local_wal_held_waits_for_it(
    store: ObjectStore,
) -> None:
    registry = TopicRegistry(store, NS)
    registry.create_topic(TOPIC, partitions=2)
    write_partition(store, 0, [0]).take_lease(4, "dead-one")
    write_partition(store, 1, [0]).take_lease(5, "in-store")
    registry.delete_topic(TOPIC)
    nodes = {4: node(4, "dead-one", "cautious"), 5: node(5, "in-store", "store")}

    def refusal(state):  # type: ignore[no-untyped-def]
        return dead_holder_refusal(state, nodes, set(), unclean_leader_election=False)

    report = purge_deleted_topic(store, NS, TOPIC, node_id=7, incarnation="i", refusal=refusal)
    assert (report.purged, report.waiting) == (False, [0])
    assert PartitionCatalog(store, NS, TOPIC, 1).refresh().segments == ()
    assert PartitionCatalog(store, NS, TOPIC, 0).refresh().segments != ()

    # Restarted (a new incarnation recovered that WAL): the purge goes on.
    nodes[4] = node(4, "restarted", "cautious")
    assert purge_deleted_topic(store, NS, TOPIC, node_id=7, incarnation="i", refusal=refusal).purged


def test_the_dead_holder_rule() -> None:
    catalog_state = type("S", (), {})()
    catalog_state.leader_epoch, catalog_state.leader_node_id = 3, 4
    catalog_state.leader_incarnation = "a"
    dead = {4: node(4, "a", "cautious")}

    def rule(nodes, live=frozenset(), unclean=False):  # type: ignore[no-untyped-def]
        return dead_holder_refusal(catalog_state, nodes, live, unclean_leader_election=unclean)

    assert "dead node 4" in rule(dead)
    assert rule(dead, live={4}) is None  # live: it hands the partition over
    assert rule(dead, unclean=True) is None  # the operator accepts the loss
    assert rule({4: node(4, "a", "cautious", "stopped")}) is None  # flushed on its way out
    assert rule({4: node(4, "a", "store")}) is None  # its WAL is in the store
    assert rule({4: node(4, "b", "cautious")}) is None  # restarted since
    assert rule({}) is None  # never seen
    catalog_state.leader_epoch = 0
    assert rule(dead) is None  # nobody ever held it
