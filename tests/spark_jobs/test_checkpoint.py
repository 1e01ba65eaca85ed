"""spark_jobs.checkpoint: checkpoints, commit expiry (the catalog stays readable), snapshots.

Commit ages come from catalog clocks set in the past, never from waiting; the
job's "now" is a fixed ``clock``.  ``min_commit_age_ms=0`` lets the tests
expire commit files written a moment ago (the command line refuses that).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog, PartitionState, TopicRegistry, layout
from kfs_core.catalog.restore import restore_topic
from kfs_core.catalog.snapshots import (
    SnapshotObjectsMissing,
    list_snapshots,
    read_snapshot,
)
from kfs_core.errors import CatalogVersionNotFound
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.storage.base import ByteRange, ObjectInfo, ObjectStore
from spark_jobs import checkpoint
from spark_jobs.checkpoint import (
    CheckpointOptions,
    CheckpointTask,
    checkpoint_partition,
    expiry_cut,
)
from spark_jobs.common import UsageError
from tests.catalog.conftest import seg
from tests.spark_jobs.data import write_topic

NS = "ns"
DAY = 86_400_000
NOW = time.time_ns() // 1_000_000


def fill(
    store: ObjectStore,
    commits: int,
    *,
    start: int = 0,
    topic: str = "t",
    clock_ms: int | None = None,
) -> PartitionCatalog:
    """``commits`` commits of one segment each; the writer checkpoints only at version 100."""
    if not TopicRegistry(store, NS).exists(topic):
        TopicRegistry(store, NS).create_topic(topic)
    clock = (lambda: clock_ms) if clock_ms is not None else None
    writer = PartitionCatalog(store, NS, topic, 0, checkpoint_interval=100, clock=clock)
    for i in range(start, start + commits):
        writer.add_segments([seg(10 * i, topic=topic)])
    return writer


def fresh(store: ObjectStore, topic: str = "t") -> PartitionState:
    return PartitionCatalog(store, NS, topic, 0).load()


def log_files(store: ObjectStore, topic: str = "t") -> list[tuple[int, bool]]:
    prefix = layout.log_prefix(NS, topic, 0)
    parsed = (layout.parse_log_name(i.key[len(prefix) :]) for i in store.list(prefix))
    return [p for p in parsed if p is not None]


def options(store: ObjectStore, **kw: Any) -> CheckpointOptions:
    kw.setdefault("min_commit_age_ms", 0)
    return CheckpointOptions(store_url=store.url, namespace=NS, **kw)


def run(store: ObjectStore, spark: Any, now: int = NOW, **kw: Any) -> dict[str, Any]:
    return checkpoint.run(options(store, **kw), spark, clock=lambda: now)


# --- the expiry cut ------------------------------------------------------------------------


def test_expiry_cut_keeps_the_union_of_both_rules(store: ObjectStore) -> None:
    fill(store, 30, clock_ms=NOW - 8 * DAY)  # versions 0..29: over a week old
    writer = fill(store, 20, start=30)  # versions 30..49: now
    assert expiry_cut(writer, 49, NOW, 10, 7 * DAY) == 29  # the age rule keeps more
    assert expiry_cut(writer, 49, NOW, 30, 7 * DAY) == 19  # the version rule keeps more
    assert expiry_cut(writer, 49, NOW, 10, 0) == 39  # versions only
    assert expiry_cut(writer, 49, NOW, 0, 7 * DAY) == 29  # age only
    assert expiry_cut(writer, 49, NOW, 100, 7 * DAY) == -1
    assert expiry_cut(writer, 49, NOW, 10, 9 * DAY) == -1  # nothing that old
    writer.checkpoint()
    PartitionCatalog(store, NS, "t", 0).expire_commits(49, min_age_ms=0)
    assert expiry_cut(writer, 49, NOW, 10, 7 * DAY) == 39  # expired commits count as old


# --- checkpoints and expiry ------------------------------------------------------------------


def test_checkpoints_and_expiry_keep_the_catalog_loadable(spark: Any, store: ObjectStore) -> None:
    fill(store, 25)
    before = fresh(store)
    first = run(store, spark, retain_versions=5, retain_ms=0)
    assert first["status"] == "ok", first["message"]
    assert first["counts"]["checkpoints_written"] == 1
    assert first["counts"]["commit_files_expired"] == 0  # no checkpoint at or before the cut yet
    assert (24, True) in log_files(store)
    assert fresh(store) == before

    fill(store, 10, start=25)
    middle = fresh(store)
    second = run(store, spark, retain_versions=5, retain_ms=0)
    assert second["counts"]["checkpoints_written"] == 1  # 10 commits since version 24
    assert second["counts"]["commit_files_expired"] == 24  # commits 0..23
    (report,) = second["details"]["partitions"]
    assert (report["cut"], report["kept_checkpoint"]) == (29, 24)
    assert min(v for v, _ in log_files(store)) == 24
    assert (24, True) in log_files(store)
    assert fresh(store) == middle
    reader = PartitionCatalog(store, NS, "t", 0)
    assert reader.state_at(24).high_watermark == 250
    with pytest.raises(CatalogVersionNotFound):
        reader.state_at(23)

    third = run(store, spark, retain_versions=5, retain_ms=0)  # idempotent: nothing new
    assert third["counts"]["checkpoints_written"] == 0
    assert third["counts"]["commit_files_expired"] == 0
    assert fresh(store) == middle


def test_fewer_commits_than_the_threshold_are_left_alone(spark: Any, store: ObjectStore) -> None:
    fill(store, 9)
    summary = run(store, spark)
    assert summary["counts"]["checkpoints_written"] == 0
    assert not [f for f in log_files(store) if f[1]]
    summary = run(store, spark, min_commits=9)
    assert summary["counts"]["checkpoints_written"] == 1


def test_dry_run_writes_nothing(spark: Any, store: ObjectStore) -> None:
    writer = fill(store, 30)
    writer.checkpoint()
    fill(store, 15, start=30)
    files = log_files(store)
    summary = run(store, spark, retain_versions=5, retain_ms=0, dry_run=True, snapshot="dry")
    assert summary["counts"]["checkpoints_written"] == 1  # would write
    assert summary["counts"]["commit_files_expired"] == 29  # would expire 0..28
    assert summary["details"]["snapshot"]["taken"] is False
    assert summary["message"].startswith("would checkpoint 1 of 1 partitions")
    assert log_files(store) == files
    assert list_snapshots(store, NS) == []


class WatchedStore(ObjectStore):
    """Delegates to a store and loads the partition afresh after every delete."""

    def __init__(self, inner: ObjectStore, expected: PartitionState) -> None:
        self.inner = inner
        self.url = inner.url
        self.expected = expected
        self.checks = 0

    def delete(self, key: str) -> None:
        self.inner.delete(key)
        assert fresh(self.inner) == self.expected, f"unreadable after deleting {key}"
        self.checks += 1

    def put(self, key: str, data: bytes) -> ObjectInfo:
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self.inner.get(key, byte_range)

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after)


def test_the_catalog_is_readable_after_every_single_delete(store: ObjectStore) -> None:
    writer = fill(store, 20)
    writer.checkpoint()
    fill(store, 12, start=20)
    watched = WatchedStore(store, fresh(store))
    task = CheckpointTask(NS, "t", 0, NOW, 10, 5, 0, 0, False)
    result = checkpoint_partition(watched, task)
    assert result.error == ""
    assert (result.checkpointed, result.cut, result.kept_checkpoint) == (31, 26, 19)
    assert result.expired == watched.checks == 19


def test_expiry_while_a_writer_commits(local_store: ObjectStore) -> None:
    store = local_store
    writer = fill(store, 20)
    writer.checkpoint()
    stop = threading.Event()

    def daemon() -> None:
        i = 20
        while not stop.is_set():
            writer.add_segments([seg(10 * i, topic="t")])
            i += 1
            stop.wait(0.002)

    thread = threading.Thread(target=daemon)
    thread.start()
    try:
        for _ in range(3):
            result = checkpoint_partition(
                store, CheckpointTask(NS, "t", 0, NOW, 10, 5, 0, 0, False)
            )
            assert result.error == ""
            fresh(store)  # loads at every point
    finally:
        stop.set()
        thread.join()
    state = fresh(store)
    assert state == writer.refresh()
    assert [s.base_offset for s in state.segments] == [10 * i for i in range(len(state.segments))]


# --- snapshots -------------------------------------------------------------------------------


def test_named_snapshot_and_restore_round_trip(spark: Any, store: ObjectStore) -> None:
    (part,) = write_topic(store, NS, "orders", segments=3, records_per_segment=20)
    summary = run(store, spark, snapshot="before-cleanup")
    assert summary["counts"]["snapshots_taken"] == 1
    assert summary["details"]["snapshot"]["segments"] == 3
    manifest = read_snapshot(store, NS, "before-cleanup")
    assert manifest.topic("orders") is not None

    catalog = PartitionCatalog(store, NS, "orders", 0)
    catalog.remove([part.segments[0].key, part.segments[1].key])
    restore_topic(store, NS, "orders", "before-cleanup")
    restored = PartitionCatalog(store, NS, "orders", 0).load()
    assert [(s.base_offset, s.size_bytes) for s in restored.segments] == [
        (s.base_offset, s.size_bytes) for s in part.segments
    ]
    data = store.get(layout.join(NS, restored.segments[0].key))
    assert data == store.get(part.object_key(part.segments[0]))  # the same bytes, copied

    catalog.remove([restored.segments[2].key])
    store.delete(part.object_key(part.segments[2]))  # retention deleted it after the grace
    with pytest.raises(SnapshotObjectsMissing, match=r"segment-00000000000000000040\.kfs"):
        restore_topic(store, NS, "orders", "before-cleanup")

    with pytest.raises(UsageError, match="already exists"):
        run(store, spark, snapshot="before-cleanup")


def test_automatic_snapshots(spark: Any, store: ObjectStore) -> None:
    fill(store, 3)
    first = run(store, spark, now=NOW, snapshot_every_ms=DAY, keep_auto_snapshots=2)
    name = first["details"]["snapshot"]["name"]
    assert name.startswith("auto-")
    assert (
        run(store, spark, now=NOW + DAY - 1, snapshot_every_ms=DAY)["counts"]["snapshots_taken"]
        == 0
    )
    run(store, spark, now=NOW + DAY, snapshot_every_ms=DAY, keep_auto_snapshots=2)
    third = run(store, spark, now=NOW + 2 * DAY, snapshot_every_ms=DAY, keep_auto_snapshots=2)
    assert third["details"]["auto_snapshots_deleted"] == [name]
    names = [m.name for m in list_snapshots(store, NS)]
    assert len(names) == 2 and name not in names
    run(store, spark, now=NOW + 2 * DAY, snapshot="manual", keep_auto_snapshots=2)
    assert "manual" in [m.name for m in list_snapshots(store, NS)]  # never pruned


def test_the_pause_flag_stops_the_job(spark: Any, store: ObjectStore) -> None:
    fill(store, 25)
    files = log_files(store)
    set_emergency_flag(store, NS, True)
    summary = run(store, spark, snapshot="paused", retain_versions=1, retain_ms=0)
    assert summary["status"] == "paused"
    assert log_files(store) == files
    assert list_snapshots(store, NS) == []
    task = CheckpointTask(NS, "t", 0, NOW, 10, 1, 0, 0, False)
    assert checkpoint_partition(store, task).paused
    assert log_files(store) == files


def test_command_line_refusals(
    local_store: ObjectStore, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--store-url", local_store.url, "--namespace", NS]
    with pytest.raises(SystemExit) as exc:
        checkpoint.main([*base, "--min-commit-age", "1m"])
    assert exc.value.code == 2
    assert "the minimum is 10m" in capsys.readouterr().err
    assert checkpoint.main([*base, "--snapshot", "no/slashes"]) == 2
    assert capsys.readouterr().err.strip().startswith("spark_jobs.checkpoint: error: snapshot name")
    assert checkpoint.main([*base, "--snapshot", "auto-mine"]) == 2
    assert "reserved" in capsys.readouterr().err
