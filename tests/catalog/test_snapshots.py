"""Namespace snapshots and topic restore (kfs_core.catalog.snapshots), on both stores.

Segment objects here are opaque bytes of the size the catalog entry records:
a snapshot and a restore only ever look at catalog metadata, object presence
and object sizes, never inside a segment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from kfs_core.catalog import PartitionCatalog, SegmentEntry, TopicRegistry, layout
from kfs_core.catalog.restore import plan_restore, restore_topic
from kfs_core.catalog.snapshots import (
    InvalidSnapshotName,
    RestoreRefused,
    SnapshotExists,
    SnapshotNotFound,
    SnapshotObjectsMissing,
    auto_snapshot_name,
    delete_snapshot,
    list_snapshots,
    manifest_key,
    partition_state_key,
    prepare_snapshot,
    read_partition_state,
    read_snapshot,
    snapshot_partition,
    take_snapshot,
    validate_snapshot_name,
)
from kfs_core.storage.base import ByteRange, ObjectInfo, ObjectStore
from tests.catalog.conftest import NS, seg

TOPIC = "orders"


def put_segment(store: ObjectStore, entry: SegmentEntry) -> SegmentEntry:
    store.put(layout.join(NS, entry.key), b"s" * entry.size_bytes)
    store.put(layout.join(NS, entry.index_key), b"i" * entry.index_size_bytes)
    return entry


def make_topic(
    store: ObjectStore, topic: str = TOPIC, *, partitions: int = 1, segments: int = 4
) -> list[list[SegmentEntry]]:
    """A topic whose partitions hold ``segments`` segments of 10 offsets each (objects too)."""
    TopicRegistry(store, NS).create_topic(topic, partitions, {"retention.ms": 86_400_000})
    written = []
    for p in range(partitions):
        entries = [
            put_segment(store, seg(10 * i, topic=topic, partition=p, size=100 + i))
            for i in range(segments)
        ]
        if entries:
            PartitionCatalog(store, NS, topic, p).add_segments(entries)
        written.append(entries)
    return written


def catalog(store: ObjectStore, partition: int = 0, topic: str = TOPIC) -> PartitionCatalog:
    return PartitionCatalog(store, NS, topic, partition)


def offsets(state_segments: tuple[SegmentEntry, ...]) -> list[tuple[int, int, int]]:
    return [(s.base_offset, s.last_offset, s.size_bytes) for s in state_segments]


class HookStore(ObjectStore):
    """Delegates to a store; runs ``hook`` once, before the first put_if_absent matching ``when``."""

    def __init__(self, inner: ObjectStore, when: Callable[[str], bool], hook: Callable[[], None]):
        self.inner = inner
        self.url = inner.url
        self._when = when
        self._hook: Callable[[], None] | None = hook
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> ObjectInfo:
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        with self._lock:
            hook, self._hook = (self._hook, None) if self._when(key) else (None, self._hook)
        if hook is not None:
            hook()
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self.inner.get(key, byte_range)

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def is_commit(key: str) -> bool:
    return "/_log/" in key and key.endswith(".json") and ".checkpoint" not in key


# --- names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["daily", "before-upgrade_2.1", "A", "x" * 128, "2024.01.02"])
def test_valid_names(name: str) -> None:
    assert validate_snapshot_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "_manifests", ".hidden", "-x", "a/b", "a b", "..", "x" * 129, "é", None, 3]
)
def test_invalid_names(name: object) -> None:
    with pytest.raises(InvalidSnapshotName):
        validate_snapshot_name(name)


def test_auto_names_are_valid_and_sort_by_time() -> None:
    first = auto_snapshot_name(1_700_000_000_000)
    assert first == "auto-20231114T221320Z"
    assert validate_snapshot_name(first) == first
    assert auto_snapshot_name(1_700_000_001_000) > first


# --- taking and listing snapshots ---------------------------------------------------------


def test_snapshot_records_every_topic_and_partition(store: ObjectStore) -> None:
    make_topic(store, partitions=2, segments=3)
    make_topic(store, "empty", partitions=1, segments=0)
    manifest = take_snapshot(store, NS, "first", clock=lambda: 1234)
    assert (manifest.name, manifest.namespace, manifest.created_ms) == ("first", NS, 1234)
    assert [t.name for t in manifest.topics] == ["empty", TOPIC]
    orders = manifest.topic(TOPIC)
    assert orders is not None
    assert orders.topic_id == TopicRegistry(store, NS).get(TOPIC).topic_id
    assert [(p.partition, p.version, p.segments) for p in orders.partitions] == [
        (0, 0, 3),
        (1, 0, 3),
    ]
    assert (manifest.partition_count, manifest.segment_count) == (3, 6)
    empty = manifest.topic("empty")
    assert empty is not None and empty.partitions[0].version == -1
    # the partition copy is a full state in the checkpoint format
    saved = read_partition_state(store, NS, "first", TOPIC, orders.partitions[1])
    assert saved is not None
    assert saved.segments == catalog(store, 1).load().segments
    assert read_partition_state(store, NS, "first", "empty", empty.partitions[0]) is None
    # everything lives under {ns}/_snapshots/
    keys = [i.key for i in store.list(f"{NS}/_snapshots/")]
    assert manifest_key(NS, "first") in keys
    assert partition_state_key(NS, "first", TOPIC, 0) in keys
    assert f"{NS}/_snapshots/first/{TOPIC}/topic.json" in keys
    assert list_snapshots(store, NS) == [manifest]
    assert read_snapshot(store, NS, "first") == manifest


def test_snapshot_names_are_never_reused(store: ObjectStore) -> None:
    make_topic(store)
    take_snapshot(store, NS, "once")
    with pytest.raises(SnapshotExists, match="'once' already exists"):
        take_snapshot(store, NS, "once")
    with pytest.raises(InvalidSnapshotName):
        take_snapshot(store, NS, "../escape")


def test_snapshot_of_chosen_topics(store: ObjectStore) -> None:
    make_topic(store, "a")
    make_topic(store, "b")
    manifest = take_snapshot(store, NS, "only-b", topics=["b"])
    assert [t.name for t in manifest.topics] == ["b"]


def test_interrupted_snapshot_is_invisible_then_resumed(store: ObjectStore) -> None:
    make_topic(store, partitions=2)
    _records, tasks = prepare_snapshot(store, NS, "resumed")
    first = snapshot_partition(store, tasks[0])  # then the job "crashes"
    assert list_snapshots(store, NS) == []
    with pytest.raises(SnapshotNotFound):
        read_snapshot(store, NS, "resumed")
    catalog(store, 0).add_segments([put_segment(store, seg(40, size=7))])  # state moves on
    manifest = take_snapshot(store, NS, "resumed")
    orders = manifest.topic(TOPIC)
    assert orders is not None
    assert orders.partitions[0] == first  # the copy already written is kept
    assert [s.name for s in list_snapshots(store, NS)] == ["resumed"]


def test_list_snapshots_oldest_first_and_delete(store: ObjectStore) -> None:
    make_topic(store)
    take_snapshot(store, NS, "b-later", clock=lambda: 2000)
    take_snapshot(store, NS, "a-earlier", clock=lambda: 1000)
    assert [m.name for m in list_snapshots(store, NS)] == ["a-earlier", "b-later"]
    assert delete_snapshot(store, NS, "a-earlier") >= 3
    assert [m.name for m in list_snapshots(store, NS)] == ["b-later"]
    assert not list(store.list(f"{NS}/_snapshots/a-earlier/"))
    assert list_snapshots(store, "other-namespace") == []


# --- restoring --------------------------------------------------------------------------


def test_restore_round_trip(store: ObjectStore) -> None:
    (written,) = make_topic(store, segments=4)
    take_snapshot(store, NS, "good")
    cat = catalog(store)
    cat.remove([written[1].key, written[2].key])  # an accident: no log start move
    newer = put_segment(store, seg(40, size=55))
    cat.add_segments([newer])  # produced after the snapshot
    assert offsets(cat.load().segments) == [(0, 9, 100), (30, 39, 103), (40, 49, 55)]

    result = restore_topic(store, NS, TOPIC, "good")
    assert result.ok and not result.dry_run
    (outcome,) = result.outcomes
    assert outcome.status == "restored"
    assert outcome.removed == (newer.key,)
    assert len(outcome.added) == 2
    state = catalog(store).load()  # a fresh reader sees the snapshot's data again
    assert offsets(state.segments) == offsets(tuple(written))
    assert state.version == outcome.version
    assert state.high_watermark == 50  # never moves back: offsets are not reused
    restored = [s for s in state.segments if s.key in outcome.added]
    assert [s.base_offset for s in restored] == [10, 20]
    for s in restored:  # fresh keys in the partition's directory, objects present
        assert s.key.startswith(f"{TOPIC}/0/segment-000000000000000000") and "-r" in s.key
        assert store.head(layout.join(NS, s.key)).size == s.size_bytes
        assert store.head(layout.join(NS, s.index_key)).size == s.index_size_bytes
    assert {t.key for t in state.tombstones} == {written[1].key, written[2].key, newer.key}
    # a second restore has nothing to do
    again = restore_topic(store, NS, TOPIC, "good")
    assert [o.status for o in again.outcomes] == ["unchanged"]
    assert catalog(store).load().version == state.version


def test_restore_undoes_a_replace(store: ObjectStore) -> None:
    (written,) = make_topic(store, segments=3)
    take_snapshot(store, NS, "before-compaction")
    merged = put_segment(store, seg(0, count=20, suffix="-c1", size=150))
    catalog(store).replace([written[0], written[1]], [merged])
    restore_topic(store, NS, TOPIC, "before-compaction")
    state = catalog(store).load()
    assert offsets(state.segments) == offsets(tuple(written))
    assert merged.key in {t.key for t in state.tombstones}


def test_restore_refuses_when_objects_were_deleted(store: ObjectStore) -> None:
    (written,) = make_topic(store, segments=3)
    take_snapshot(store, NS, "snap")
    catalog(store).remove([written[1].key])
    store.delete(layout.join(NS, written[1].key))  # retention's grace has passed
    before = catalog(store).load()
    plan = plan_restore(store, NS, TOPIC, "snap")
    assert plan.missing_objects == (layout.join(NS, written[1].key),)
    with pytest.raises(SnapshotObjectsMissing, match=written[1].key) as exc:
        restore_topic(store, NS, TOPIC, "snap")
    assert "were deleted" in str(exc.value)
    assert exc.value.keys == [layout.join(NS, written[1].key)]
    assert catalog(store).load() == before  # nothing changed
    assert not [i.key for i in store.list(f"{NS}/{TOPIC}/0/") if "-r" in i.key]


def test_restore_cannot_go_below_the_log_start_offset(store: ObjectStore) -> None:
    (written,) = make_topic(store, segments=4)
    take_snapshot(store, NS, "snap")
    cat = catalog(store)
    cat.remove([written[0].key], log_start_offset=10)  # retention
    cat.remove([written[2].key])  # an accident
    before = cat.load()
    with pytest.raises(RestoreRefused, match=r"log start offset is now 10.*--allow-partial"):
        restore_topic(store, NS, TOPIC, "snap")
    assert catalog(store).load() == before
    result = restore_topic(store, NS, TOPIC, "snap", allow_partial=True)
    assert [s.base_offset for s in result.plan.unrestorable] == [0]
    state = catalog(store).load()
    assert [s.base_offset for s in state.segments] == [10, 20, 30]
    assert state.log_start_offset == 10


def test_restore_sets_configs_back(store: ObjectStore) -> None:
    make_topic(store)
    take_snapshot(store, NS, "snap")
    registry = TopicRegistry(store, NS)
    registry.alter_configs(TOPIC, {"retention.ms": 1, "retention.bytes": 5})
    plan = plan_restore(store, NS, TOPIC, "snap")
    assert (plan.config_set, plan.config_delete) == (
        {"retention.ms": "86400000"},
        ("retention.bytes",),
    )
    result = restore_topic(store, NS, TOPIC, "snap")
    assert result.configs_restored
    assert registry.get(TOPIC).configs == {"retention.ms": "86400000"}


def test_restore_dry_run_changes_nothing(store: ObjectStore) -> None:
    (written,) = make_topic(store)
    take_snapshot(store, NS, "snap")
    catalog(store).remove([written[3].key])
    TopicRegistry(store, NS).alter_configs(TOPIC, {"retention.ms": 1})
    before = catalog(store).load()
    keys_before = sorted(i.key for i in store.list(f"{NS}/{TOPIC}/"))
    result = restore_topic(store, NS, TOPIC, "snap", dry_run=True)
    assert result.dry_run and result.outcomes == ()
    assert [s.key for s in result.plan.partitions[0].restore] == [written[3].key]
    assert catalog(store).load() == before
    assert sorted(i.key for i in store.list(f"{NS}/{TOPIC}/")) == keys_before
    assert TopicRegistry(store, NS).get(TOPIC).configs == {"retention.ms": "1"}


def test_restore_refuses_unknown_snapshot_topic_and_recreated_topic(store: ObjectStore) -> None:
    make_topic(store)
    make_topic(store, "other")
    take_snapshot(store, NS, "snap", topics=["other"])
    with pytest.raises(SnapshotNotFound):
        restore_topic(store, NS, TOPIC, "nope")
    with pytest.raises(RestoreRefused, match="has no topic 'orders'"):
        restore_topic(store, NS, TOPIC, "snap")
    registry = TopicRegistry(store, NS)
    registry.delete_topic("other")
    with pytest.raises(RestoreRefused, match="does not exist"):
        restore_topic(store, NS, "other", "snap")
    registry.purge_topic("other")
    registry.create_topic("other")
    with pytest.raises(RestoreRefused, match="deleted and re-created"):
        restore_topic(store, NS, "other", "snap")


def test_restore_leaves_new_partitions_and_empty_ones(store: ObjectStore) -> None:
    make_topic(store, partitions=2, segments=2)
    catalog(store, 1).remove([catalog(store, 1).load().segments[0].key])
    TopicRegistry(store, NS).create_partitions(TOPIC, 3)
    catalog(store, 2).add_segments([put_segment(store, seg(0, partition=2))])
    take_snapshot(store, NS, "three")  # partition 2 has data now
    TopicRegistry(store, NS).create_partitions(TOPIC, 4)
    result = restore_topic(store, NS, TOPIC, "three")
    assert result.plan.untouched_partitions == (3,)
    assert [o.status for o in result.outcomes] == ["unchanged"] * 3


def test_restore_keeps_a_segment_the_daemon_adds_meanwhile(store: ObjectStore) -> None:
    (written,) = make_topic(store, segments=3)
    take_snapshot(store, NS, "snap")
    catalog(store).remove([written[1].key])
    late = put_segment(store, seg(30, size=9))

    def daemon_flush() -> None:
        catalog(store).add_segments([late])

    hooked = HookStore(store, is_commit, daemon_flush)
    result = restore_topic(hooked, NS, TOPIC, "snap")
    assert result.ok
    state = catalog(store).load()
    assert [s.base_offset for s in state.segments] == [0, 10, 20, 30]
    assert state.find(late.key) is not None


def test_restore_racing_compaction_aborts_that_partition_cleanly(store: ObjectStore) -> None:
    (written,) = make_topic(store, segments=3)
    take_snapshot(store, NS, "snap")
    cat = catalog(store)
    cat.remove([written[0].key])
    newer = put_segment(store, seg(30, size=9))
    cat.add_segments([newer])  # the restore will remove this one ...
    merged = put_segment(store, seg(30, suffix="-c1", size=8))

    def compaction() -> None:  # ... but compaction replaces it first
        catalog(store).replace([newer], [merged])

    hooked = HookStore(store, is_commit, compaction)
    result = restore_topic(hooked, NS, TOPIC, "snap")
    assert not result.ok
    (outcome,) = result.outcomes
    assert outcome.status == "conflict" and "rerun" in outcome.message
    state = catalog(store).load()
    assert state.find(merged.key) is not None  # compaction's commit stands
    assert not [i.key for i in store.list(f"{NS}/{TOPIC}/0/") if "-r" in i.key]  # copies gone
    assert restore_topic(store, NS, TOPIC, "snap").ok  # a rerun finishes the job
    assert offsets(catalog(store).load().segments) == offsets(tuple(written))
