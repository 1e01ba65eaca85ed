"""`PartitionCatalog` against both stores: commits, loads, checkpoints, pointer, expiry."""

from __future__ import annotations

import pickle
import time

import pytest

from kfs_core.catalog import PartitionCatalog, RetryPolicy, SegmentEntry
from kfs_core.catalog.checkpoints import (
    CHECKPOINT_STRETCH_BYTES,
    MAX_CHECKPOINT_STRETCH,
    checkpoint_stretch,
)
from kfs_core.catalog.layout import POINTER_NAME, parse_log_name
from kfs_core.catalog.log_files import IoStats
from kfs_core.catalog.state import encode_pointer
from kfs_core.errors import (
    CatalogCommitConflict,
    CatalogCommitStateUnknown,
    CatalogVersionNotFound,
    CorruptCatalog,
    InvalidConfig,
    LogStartOffsetRegression,
    RemoveConflict,
    ReplaceConflict,
    SegmentOverlap,
)
from kfs_core.storage.base import ObjectStore
from tests.catalog.conftest import NS, PARTITION, TOPIC, FaultyStore, seg


def catalog(store: ObjectStore, **options: object) -> PartitionCatalog:
    return PartitionCatalog(store, NS, TOPIC, PARTITION, **options)  # type: ignore[arg-type]


def fill(cat: PartitionCatalog, commits: int, start: int = 0) -> list[SegmentEntry]:
    """``commits`` commits of one 10-offset segment each, from offset ``start``."""
    segments = [seg(start + 10 * i) for i in range(commits)]
    for s in segments:
        cat.add_segments([s])
    return segments


def cold_load(store: ObjectStore, writer: PartitionCatalog) -> IoStats:
    """What a new reader's load of ``writer``'s log cost; it must find the writer's state."""
    reader = catalog(store, checkpoint_interval=writer.checkpoint_interval)
    assert reader.load() == writer.state
    stats = reader.io_stats()
    assert stats.lists == 0
    return stats


def log_names(store: ObjectStore) -> list[str]:
    prefix = f"{NS}/{TOPIC}/{PARTITION}/_log/"
    return [info.key[len(prefix) :] for info in store.list(prefix)]


# --- committing and loading ------------------------------------------------------------


def test_commits_are_numbered_from_zero_and_load_back(store: ObjectStore) -> None:
    writer = catalog(store)
    assert writer.state.version == -1
    first = writer.add_segments([seg(0), seg(10)])
    second = writer.add_segments([seg(20)])
    assert (first.version, second.version) == (0, 1)
    assert (first.attempts, first.checkpointed) == (1, False)
    assert first.commit_id != second.commit_id
    reader = catalog(store)
    state = reader.load()
    assert state == writer.state
    assert [s.base_offset for s in state.segments] == [0, 10, 20]
    assert state.high_watermark == 30
    commit = reader.read_commit(0)
    assert commit.operation == "add_segments"
    assert commit.commit_id == first.commit_id
    assert commit.writer == writer.writer


def test_every_action_through_the_catalog(store: ObjectStore) -> None:
    cat = catalog(store)
    fill(cat, 6)
    merged = seg(0, 20, suffix="-c1")
    cat.replace([seg(0), seg(10).key], [merged])
    when = time.time_ns() // 1_000_000 - 1000
    cat.remove([20], removed_ms=when)  # by base offset
    cat.remove([seg(30).key], log_start_offset=40)  # by key, with the log start
    cat.set_topic_config({"retention.ms": 1000})
    state = catalog(store).load()
    assert state == cat.state
    assert [s.key for s in state.segments] == [merged.key, seg(40).key, seg(50).key]
    assert {t.key for t in state.tombstones} == {seg(b).key for b in (0, 10, 20, 30)}
    assert {t.removed_ms for t in state.tombstones if t.base_offset == 20} == {when}
    assert state.log_start_offset == 40
    assert dict(state.config) == {"retention.ms": "1000"}
    with pytest.raises(InvalidConfig):
        cat.set_topic_config({"retention.ms": "never"})


def test_validation_errors_commit_nothing(store: ObjectStore) -> None:
    cat = catalog(store)
    fill(cat, 2)
    with pytest.raises(SegmentOverlap):
        cat.add_segments([seg(5, suffix="-x")])
    with pytest.raises(LogStartOffsetRegression):
        cat.set_log_start_offset(21)
    cat.set_log_start_offset(10)
    with pytest.raises(LogStartOffsetRegression):
        cat.set_log_start_offset(5)
    with pytest.raises(RemoveConflict):
        cat.remove([99])
    assert catalog(store).load().version == 2
    assert cat.state.log_start_offset == 10
    with pytest.raises(ValueError, match="at least one action"):
        cat.commit([])


def test_a_writer_does_not_reread_its_own_commits(store: ObjectStore) -> None:
    cat = catalog(store, checkpoint_interval=1000)
    cat.add_segments([seg(0)])
    cat.reset_io_stats()
    fill(cat, 20, start=10)
    stats = cat.io_stats()
    assert (stats.gets, stats.lists, stats.puts) == (0, 0, 20)


def test_refresh_reads_only_newer_commits(store: ObjectStore) -> None:
    writer, reader = catalog(store), catalog(store)
    fill(writer, 3)
    reader.load()
    fill(writer, 3, start=30)
    reader.reset_io_stats()
    assert reader.refresh() == writer.state
    stats = reader.io_stats()
    assert stats.lists == 0
    assert stats.gets - stats.misses == 3
    assert stats.gets <= 3 + 4  # growing probe batches end at the first miss


# --- checkpoints and the pointer ----------------------------------------------------


def test_writers_checkpoint_every_interval_and_move_the_pointer(store: ObjectStore) -> None:
    cat = catalog(store, checkpoint_interval=5)
    results = [cat.add_segments([s]) for s in [seg(10 * i) for i in range(12)]]
    assert [r.version for r in results if r.checkpointed] == [5, 10]
    names = log_names(store)
    assert [n for n in names if n.endswith(".checkpoint.json")] == [
        "00000000000000000005.checkpoint.json",
        "00000000000000000010.checkpoint.json",
    ]
    assert names[-1] == POINTER_NAME
    pointer = store.get(cat.pointer_key)
    assert b'"version":10' in pointer


def test_cold_load_costs_pointer_checkpoint_and_one_probe_batch(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 96)  # versions 0..95, newest checkpoint 90
    assert len(writer.state.segments) == 96
    stats = cold_load(store, writer)
    assert stats.gets == 1 + 1 + 10  # pointer, checkpoint 90, probes 91..100
    assert stats.gets - stats.misses == 1 + 1 + 5


def test_checkpoint_stretch_doubles_with_the_checkpoint_size() -> None:
    step = CHECKPOINT_STRETCH_BYTES
    sizes = [0, step, step + 1, 2 * step, 2 * step + 1, 4 * step + 1, 1000 * step]
    assert [checkpoint_stretch(size) for size in sizes] == [1, 1, 2, 2, 4, 8, 8]
    assert MAX_CHECKPOINT_STRETCH == 8


def long_partition(cat: PartitionCatalog, segments: int) -> None:
    """``segments`` 10-offset segments in commits of 1,000, from offset 0."""
    for first in range(0, segments, 1_000):
        cat.add_segments([seg(10 * i) for i in range(first, min(segments, first + 1_000))])


def test_a_long_partition_checkpoints_less_often_and_still_loads_in_two_round_trips(
    store: ObjectStore,
) -> None:
    writer = catalog(store, checkpoint_interval=5)
    long_partition(writer, 10_000)  # versions 0..9, 6,000 segments in the checkpoint at 5
    first = store.get(writer.checkpoint_key(5))
    assert len(first) > 4 * CHECKPOINT_STRETCH_BYTES  # so the interval is 8 times 5
    assert writer.checkpoint_every(len(first)) == 40
    results = [writer.add_segments([seg(100_000 + 10 * i)]) for i in range(100)]  # 10..109
    assert [r.version for r in results if r.checkpointed] == [40, 80]
    pointer = store.get(writer.pointer_key)
    assert b'"version":80' in pointer
    assert len(writer.state.segments) == 10_100
    stats = cold_load(store, writer)
    assert stats.gets == 1 + 1 + 40  # pointer, checkpoint 80, probes 81..120 in one batch
    assert stats.gets - stats.misses == 1 + 1 + 29


def test_a_short_partition_keeps_the_interval_it_was_given(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=5)
    long_partition(writer, 500)  # one commit: a checkpoint far below the stretch size
    results = [writer.add_segments([seg(5_000 + 10 * i)]) for i in range(20)]  # 1..20
    assert [r.version for r in results if r.checkpointed] == [5, 10, 15, 20]


def test_stale_pointer_still_finds_the_newest_version(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 36)
    store.put(writer.pointer_key, encode_pointer(10, 1))  # two checkpoints behind
    assert catalog(store).load() == writer.state


def test_very_stale_pointer_jumps_ahead_with_one_listing(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=5)
    fill(writer, 120)
    store.put(writer.pointer_key, encode_pointer(5, 1))
    reader = catalog(store, checkpoint_interval=5)
    assert reader.load() == writer.state
    stats = reader.io_stats()
    assert stats.lists == 1
    assert stats.gets < 60  # not one GET per commit


def test_missing_pointer_falls_back_to_a_listing(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 25)
    store.delete(writer.pointer_key)
    reader = catalog(store)
    assert reader.load() == writer.state
    assert reader.io_stats().lists == 1


def test_no_checkpoint_at_all_replays_from_version_zero(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=100)
    fill(writer, 7)
    assert not store.exists(writer.pointer_key)
    assert catalog(store).load() == writer.state


def test_pointer_to_a_missing_checkpoint_falls_back_to_a_listing(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 25)
    store.put(writer.pointer_key, encode_pointer(50, 1))  # names a checkpoint that is not there
    assert catalog(store).load() == writer.state


def test_unreadable_pointer_is_only_a_lost_hint(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 15)
    store.put(writer.pointer_key, b"garbage")
    assert catalog(store).load() == writer.state


def test_corrupt_commit_is_reported_with_its_key(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=100)
    fill(writer, 5)
    store.put(writer.commit_key(3), b'{"format":1,"version":3,')
    with pytest.raises(CorruptCatalog) as caught:
        catalog(store).load()
    assert caught.value.object_name == writer.commit_key(3)
    assert writer.commit_key(3) in str(caught.value)


def test_corrupt_checkpoint_is_reported_with_its_key(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 12)
    key = writer.checkpoint_key(10)
    store.delete(key)
    store.put(key, b"not json")
    with pytest.raises(CorruptCatalog) as caught:
        catalog(store).load()
    assert caught.value.object_name == key


def test_missing_commit_in_the_middle_is_corruption(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=100)
    fill(writer, 6)
    store.delete(writer.commit_key(2))
    with pytest.raises(CorruptCatalog, match="commit 2 is missing but commit 5 exists"):
        catalog(store).load()


def test_failed_checkpoint_does_not_fail_the_commit(faulty: FaultyStore) -> None:
    cat = catalog(faulty, checkpoint_interval=5)
    faulty.fail("put_if_absent", lambda key: key.endswith(".checkpoint.json"))
    results = [cat.add_segments([s]) for s in [seg(10 * i) for i in range(6)]]
    assert results[5].version == 5 and not results[5].checkpointed
    assert cat.checkpoint() == 5
    fresh = catalog(faulty.inner)
    assert fresh.load() == cat.state
    assert fresh.io_stats().lists == 0


def test_explicit_checkpoint_of_an_empty_partition(store: ObjectStore) -> None:
    assert catalog(store).checkpoint() == -1


def test_checkpoints_drop_expired_tombstones(store: ObjectStore) -> None:
    now = [1_000_000]
    cat = catalog(store, checkpoint_interval=5, tombstone_retention_ms=1000, clock=lambda: now[0])
    fill(cat, 3)
    cat.remove([0])
    assert len(cat.state.tombstones) == 1
    now[0] += 1001
    fill(cat, 2, start=30)  # version 5: checkpoint
    checkpoint = store.get(cat.checkpoint_key(5))
    assert b'"tombstones":[]' in checkpoint
    assert cat.state.tombstones == ()


# --- racing writers ------------------------------------------------------------------


def test_replace_conflicts_when_an_input_was_removed_meanwhile(store: ObjectStore) -> None:
    compactor, retention = catalog(store), catalog(store)
    fill(compactor, 3)
    retention.load()
    retention.remove([10])
    with pytest.raises(ReplaceConflict, match="no longer live"):
        compactor.replace([seg(0), seg(10)], [seg(0, 20, suffix="-c1")])
    state = catalog(store).load()
    assert [s.base_offset for s in state.segments] == [0, 20]
    assert state.version == 3


def test_a_lost_race_is_retried_on_the_newer_state(store: ObjectStore) -> None:
    a, b = catalog(store), catalog(store)
    fill(a, 1)
    b.load()
    a.add_segments([seg(10)])
    result = b.add_segments([seg(20)])
    assert (result.version, result.attempts) == (2, 2)
    assert [s.base_offset for s in catalog(store).load().segments] == [0, 10, 20]


def test_a_lost_race_revalidates_adds(store: ObjectStore) -> None:
    a, b = catalog(store), catalog(store)
    a.load()
    b.load()
    a.add_segments([seg(0)])
    with pytest.raises(SegmentOverlap):
        b.add_segments([seg(5, suffix="-b")])


def test_a_stale_cache_is_refreshed_before_an_action_is_refused(store: ObjectStore) -> None:
    daemon, jobs = catalog(store), catalog(store)
    fill(daemon, 1)
    jobs.load()
    fill(daemon, 3, start=10)  # the jobs' cache has not seen these
    jobs.remove([10])  # by base offset: found after a refresh
    jobs.replace([seg(20), seg(30)], [seg(20, 20, suffix="-c1")])  # inputs unknown to the cache
    assert [s.key for s in catalog(store).load().segments] == [
        seg(0).key,
        seg(20, suffix="-c1").key,
    ]


def test_too_many_lost_races_give_up(store: ObjectStore) -> None:
    a = catalog(store)
    b = catalog(store, retry=RetryPolicy(max_attempts=1))
    a.load()
    b.load()
    a.add_segments([seg(0)])
    with pytest.raises(CatalogCommitConflict) as caught:
        b.add_segments([seg(10)])
    assert caught.value.retriable


def test_stale_writer_refreshes_before_committing(store: ObjectStore) -> None:
    a = catalog(store)
    b = catalog(store, max_state_age_s=0.0)
    b.load()
    a.add_segments([seg(0)])
    assert b.add_segments([seg(10)]).attempts == 1


@pytest.mark.parametrize("mode", ["before", "after"])
def test_unknown_commit_outcome_is_resolved_by_commit_id(faulty: FaultyStore, mode: str) -> None:
    cat = catalog(faulty)
    fill(cat, 2)
    faulty.fail("put_if_absent", lambda key: key == cat.commit_key(2), mode=mode)
    result = cat.add_segments([seg(20)])
    assert result.version == 2
    fill(cat, 1, start=30)
    commits = catalog(faulty.inner).read_commits(0, 4)
    assert [c.commit_id for c in commits].count(result.commit_id) == 1
    assert catalog(faulty.inner).load() == cat.state


def test_unknown_outcome_found_while_catching_up(faulty: FaultyStore) -> None:
    # Our put lands but its answer is lost; reading it back fails too, so the
    # writer retries, loses to itself and finds its own commit id in the log.
    cat = catalog(faulty)
    fill(cat, 1)
    faulty.fail("put_if_absent", lambda key: key == cat.commit_key(1), mode="after")
    faulty.fail("get", lambda key: key == cat.commit_key(1), times=1)
    result = cat.add_segments([seg(10)])
    assert result.version == 1
    assert len(catalog(faulty.inner).load().segments) == 2


def test_unknowable_commit_outcome_is_commit_state_unknown(faulty: FaultyStore) -> None:
    cat = catalog(faulty, retry=RetryPolicy(base_delay_s=0.0))
    fill(cat, 1)
    faulty.fail("put_if_absent", lambda key: key == cat.commit_key(1), mode="after")
    faulty.fail("get", lambda key: key == cat.commit_key(1), times=-1)
    with pytest.raises(CatalogCommitStateUnknown) as caught:
        cat.add_segments([seg(10)])
    assert caught.value.commit_id
    assert caught.value.version == 1
    assert not caught.value.retriable
    assert pickle.loads(pickle.dumps(caught.value)).commit_id == caught.value.commit_id


# --- versions, snapshots and expiry ----------------------------------------------------


def test_state_at_any_version(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 27)
    reader = catalog(store, checkpoint_interval=10)
    for version in (0, 4, 9, 10, 15, 20, 26):
        state = reader.state_at(version)
        assert state.version == version
        assert [s.base_offset for s in state.segments] == [10 * i for i in range(version + 1)]
    with pytest.raises(CatalogVersionNotFound):
        reader.state_at(27)
    with pytest.raises(CatalogVersionNotFound):
        reader.state_at(-1)


def test_expire_commits_keeps_a_checkpoint_and_the_log_readable(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 35)
    result = writer.expire_commits(25, min_age_ms=0)
    assert (result.checkpoint_version, result.complete) == (20, True)
    assert result.deleted == 20 + 1  # commits 0..19 and checkpoint 10
    names = log_names(store)
    assert names[0] == "00000000000000000020.checkpoint.json"
    versions = [parsed[0] for n in names if (parsed := parse_log_name(n)) and not parsed[1]]
    assert versions == list(range(20, 35))
    assert b'"version":30' in store.get(writer.pointer_key)  # ahead already: left alone
    assert catalog(store).load() == writer.state
    assert catalog(store).state_at(22).version == 22
    with pytest.raises(CatalogVersionNotFound):
        catalog(store).state_at(15)
    store.delete(writer.pointer_key)
    assert catalog(store).load() == writer.state  # listing finds checkpoint 30 / 20


def test_expire_commits_moves_a_stale_pointer_before_deleting(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 25)
    store.put(writer.pointer_key, encode_pointer(10, 1))
    writer.expire_commits(20, min_age_ms=0)
    assert b'"version":20' in store.get(writer.pointer_key)
    assert catalog(store).load() == writer.state


def test_expire_commits_leaves_young_files_alone(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 25)
    result = writer.expire_commits(25)  # default minimum age: an hour
    assert (result.deleted, result.complete) == (0, False)
    assert len([n for n in log_names(store) if not n.startswith("_")]) == 27


def test_expire_commits_without_a_checkpoint_does_nothing(store: ObjectStore) -> None:
    writer = catalog(store, checkpoint_interval=100)
    fill(writer, 5)
    assert writer.expire_commits(4, min_age_ms=0).deleted == 0
    assert catalog(store).load() == writer.state


def test_a_reader_behind_an_expiry_notices_and_reloads(store: ObjectStore) -> None:
    # The reader's cached head is old (by its clock), so when the log seems to
    # end it asks the pointer, which expiry moved past the deleted commits.
    writer = catalog(store, checkpoint_interval=10)
    fill(writer, 5)
    two_hours = 2 * 3_600_000
    reader = catalog(store, clock=lambda: time.time_ns() // 1_000_000 + two_hours)
    reader.load()
    fill(writer, 30, start=50)
    writer.expire_commits(30, min_age_ms=0)
    assert reader.refresh() == writer.state
    assert reader.add_segments([seg(1000)]).version == 35


def test_catalog_pickles_without_its_cache(store: ObjectStore) -> None:
    cat = catalog(store, checkpoint_interval=7)
    fill(cat, 2)
    clone = pickle.loads(pickle.dumps(cat))
    assert clone.checkpoint_interval == 7
    assert clone.load() == cat.state


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="checkpoint_interval"):
        PartitionCatalog(None, NS, TOPIC, 0, checkpoint_interval=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition"):
        PartitionCatalog(None, NS, TOPIC, -1)  # type: ignore[arg-type]
