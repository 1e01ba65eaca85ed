"""spark_jobs.retention: planning, commits racing other writers, the grace periods, the job.

Time is never waited for: the job takes a ``clock`` and every test passes a
fixed "now".  ``NOW`` is the real time when the module is imported (catalog
tombstones expire relative to real commit times, so "now" must not be far in
the past); the data's record timestamps are from 2023 (`BASE_TIMESTAMP_MS`),
so a ``retention.ms`` computed from ``NOW`` picks exactly the segments to expire.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from kfs_core.catalog import (
    PartitionCatalog,
    PartitionState,
    SegmentEntry,
    TopicConfig,
    TopicRegistry,
    layout,
)
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.storage import ObjectStore
from spark_jobs import retention
from spark_jobs.common import UsageError
from spark_jobs.retention import (
    RetentionOptions,
    SweepTask,
    apply_retention,
    parse_duration_ms,
    plan_retention,
    sweep_partition,
)
from tests.catalog.conftest import seg
from tests.catalog.test_snapshots import HookStore, is_commit
from tests.spark_jobs.data import (
    BASE_TIMESTAMP_MS,
    WrittenPartition,
    put_orphan,
    write_segment,
    write_topic,
)

NS = "ns"
HOUR = 3_600_000
NOW = (time.time_ns() // 1_000_000 // 1000) * 1000
RECORDS = 250  # per segment: segment i holds offsets 250*i .. 250*i + 249


def expire_before(segment: int) -> str:
    """A retention.ms under which segments 0 .. segment-1 are expired at NOW, the rest not."""
    newest_expired = BASE_TIMESTAMP_MS + RECORDS * segment - 1  # max timestamp of segment-1
    return str(NOW - newest_expired - 1)


def options(store: ObjectStore, **kw: Any) -> RetentionOptions:
    return RetentionOptions(store_url=store.url, namespace=NS, **kw)


def run(store: ObjectStore, spark: Any, now: int = NOW, **kw: Any) -> dict[str, Any]:
    return retention.run(options(store, **kw), spark, clock=lambda: now)


def state(store: ObjectStore, topic: str = "events", partition: int = 0) -> PartitionState:
    return PartitionCatalog(store, NS, topic, partition).load()


def exists(store: ObjectStore, part: WrittenPartition, entry: SegmentEntry) -> bool:
    return store.exists(part.object_key(entry)) and store.exists(part.index_object_key(entry))


# --- planning (no Spark, no store) ------------------------------------------------------


def partition_state(segments: list[SegmentEntry], log_start: int = 0) -> PartitionState:
    hw = max((s.last_offset + 1 for s in segments), default=log_start)
    return PartitionState("orders", 0, 5, tuple(segments), (), log_start, hw)


def four(sizes: tuple[int, ...] = (100, 100, 100, 100)) -> list[SegmentEntry]:
    """Segments at offsets 0, 10, 20, 30 whose newest records are 1, 2, 3, 4 s after t=1000 s."""
    return [
        seg(10 * i, size=size, created_ms=1_000_000 + 1000 * (i + 1))
        for i, size in enumerate(sizes)
    ]


def config(**overrides: Any) -> TopicConfig:
    return TopicConfig.from_configs(overrides)


def test_plan_by_time_removes_an_expired_prefix() -> None:
    plan = plan_retention(partition_state(four()), config(**{"retention.ms": 1500}), 1_004_000)
    assert [s.base_offset for s in plan.remove] == [0, 10]  # 3 s and 2 s old; 20 is 1 s old
    assert plan.reasons == ("time", "time")
    assert (plan.log_start_offset, plan.new_log_start_offset) == (0, 20)
    # a segment with newer data stops the prefix even if later ones are old
    segments = four()
    segments[1] = seg(10, created_ms=2_000_000)
    plan = plan_retention(partition_state(segments), config(**{"retention.ms": 1500}), 1_004_000)
    assert [s.base_offset for s in plan.remove] == [0]


def test_plan_never_removes_the_segment_holding_hw_minus_1() -> None:
    plan = plan_retention(partition_state(four()), config(**{"retention.ms": 0}), 10**13)
    assert [s.base_offset for s in plan.remove] == [0, 10, 20]
    assert plan.new_log_start_offset == 30  # below the high watermark, 40
    one = plan_retention(partition_state(four()[:1]), config(**{"retention.ms": 0}), 10**13)
    assert one.remove == () and one.new_log_start_offset is None
    empty = plan_retention(partition_state([]), config(**{"retention.ms": 0}), 10**13)
    assert empty.remove == ()


def test_plan_minus_one_keeps_forever() -> None:
    plan = plan_retention(partition_state(four()), config(**{"retention.ms": -1}), 10**13)
    assert plan.remove == ()  # retention.bytes defaults to -1 as well
    week = plan_retention(partition_state(four()), config(), 1_001_000 + 7 * 24 * HOUR)
    assert week.remove == ()  # the default retention.ms, 7 days, must be exceeded
    after = plan_retention(partition_state(four()), config(), 1_001_001 + 7 * 24 * HOUR)
    assert [s.base_offset for s in after.remove] == [0]


def test_plan_by_bytes_follows_kafka() -> None:
    sizes = (100, 100, 100, 100)
    cases = {400: [], 399: [], 300: [0], 250: [0], 200: [0, 10], 0: [0, 10, 20]}
    for limit, removed in cases.items():
        plan = plan_retention(
            partition_state(four(sizes)), config(**{"retention.bytes": limit}), 1_004_000
        )
        assert [s.base_offset for s in plan.remove] == removed, limit
        assert set(plan.reasons) <= {"size"}
        # what remains never drops below the limit (Kafka's rule), unless only the newest is left
        assert sum(sizes) - plan.bytes >= limit or len(plan.remove) == 3


def test_plan_time_then_bytes() -> None:
    plan = plan_retention(
        partition_state(four((50, 100, 100, 100))),
        config(**{"retention.ms": 2500, "retention.bytes": 150}),
        1_004_000,
    )
    assert plan.reasons == ("time", "size")  # 200 bytes stay: one more would leave 100 < 150


def test_plan_below_log_start_for_any_policy() -> None:
    compacted = config(**{"cleanup.policy": "compact", "retention.ms": 0})
    plan = plan_retention(partition_state(four(), log_start=15), compacted, 10**13)
    assert [s.base_offset for s in plan.remove] == [0]  # 10..19 holds the log start: stays
    assert plan.reasons == ("log_start",)
    assert plan.new_log_start_offset is None  # 10 < 15: the log start never moves back


def test_durations() -> None:
    assert parse_duration_ms("1h") == HOUR
    assert parse_duration_ms("30m") == HOUR // 2
    assert parse_duration_ms("7d") == 168 * HOUR
    assert parse_duration_ms("250") == parse_duration_ms("250ms") == 250
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_ms("1 week")


def test_orphan_grace_below_an_hour_is_refused(
    local_store: ObjectStore, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UsageError, match="minimum is 1h"):
        options(local_store, orphan_grace_ms=HOUR - 1)
    with pytest.raises(UsageError, match="--delete-grace"):
        options(local_store, delete_grace_ms=2 * HOUR)
    args = ["--store-url", local_store.url, "--namespace", NS, "--orphan-grace", "30m"]
    assert retention.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "spark_jobs.retention: error: --orphan-grace 30m is too short: the minimum is 1h, "
        "because the daemon uploads segments before it commits them"
    )
    assert not list(local_store.list(""))  # refused before anything was written


# --- commits racing other writers (driver side, no Spark) -------------------------------


def test_concurrent_daemon_add_loses_nothing(store: ObjectStore) -> None:
    (part,) = write_topic(
        store, NS, "events", segments=3, configs={"retention.ms": expire_before(2)}
    )
    added: list[SegmentEntry] = []

    def daemon_flush() -> None:
        entry = write_segment(store, NS, "events", 0, 3 * RECORDS, 10)
        PartitionCatalog(store, NS, "events", 0).add_segments([entry])
        added.append(entry)

    hooked = HookStore(store, is_commit, daemon_flush)
    cfg = TopicConfig.from_configs({"retention.ms": expire_before(2)})
    outcome = apply_retention(hooked, NS, "events", 0, cfg, NOW)
    assert outcome.status == "removed"
    assert outcome.version == outcome.plan.version + 2  # the daemon's commit came first
    after = state(store)
    assert [s.key for s in after.segments] == [part.segments[2].key, added[0].key]
    assert after.log_start_offset == 2 * RECORDS
    assert after.high_watermark == 3 * RECORDS + 10


def test_segment_replaced_meanwhile_aborts_the_partition(store: ObjectStore) -> None:
    (part,) = write_topic(store, NS, "events", segments=3)
    merged = write_segment(store, NS, "events", 0, 0, 2 * RECORDS)
    merged = merged.model_copy(
        update={
            "key": merged.key.replace(".kfs", "-c1.kfs"),
            "index_key": merged.index_key.replace(".index", "-c1.index"),
        }
    )

    def compaction() -> None:
        PartitionCatalog(store, NS, "events", 0).replace(part.segments[:2], [merged])

    hooked = HookStore(store, is_commit, compaction)
    cfg = TopicConfig.from_configs({"retention.ms": expire_before(2)})
    outcome = apply_retention(hooked, NS, "events", 0, cfg, NOW)
    assert outcome.status == "conflict"
    assert "changed while retention committed" in outcome.message
    after = state(store)
    assert [s.key for s in after.segments] == [merged.key, part.segments[2].key]
    assert after.log_start_offset == 0


# --- the job ---------------------------------------------------------------------------------


def test_retention_by_time(spark: Any, store: ObjectStore) -> None:
    parts = write_topic(
        store, NS, "events", partitions=2, segments=4, configs={"retention.ms": expire_before(2)}
    )
    write_topic(store, NS, "forever", segments=2, configs={"retention.ms": "-1"})
    summary = run(store, spark)
    assert summary["status"] == "ok", summary["message"]
    assert summary["counts"]["segments_removed"] == 4
    assert summary["counts"]["log_start_advanced"] == 2
    for part in parts:
        after = state(store, "events", part.partition)
        assert [s.key for s in after.segments] == [s.key for s in part.segments[2:]]
        assert after.log_start_offset == 2 * RECORDS
        assert after.high_watermark == 4 * RECORDS
        assert {t.key for t in after.tombstones} == {s.key for s in part.segments[:2]}
        assert all(exists(store, part, s) for s in part.segments)  # the grace has not passed
    assert len(state(store, "forever").segments) == 2
    (report,) = [p for p in summary["details"]["partitions"] if p["partition"] == 0]
    assert [r["reason"] for r in report["removed"]] == ["time", "time"]
    assert report["log_start_offset"] == {"from": 0, "to": 2 * RECORDS}
    assert json.loads(store.get(summary["report_key"]))["counts"] == summary["counts"]
    # idempotent: nothing more to do at the same time
    version = state(store).version
    again = run(store, spark)
    assert again["counts"]["segments_removed"] == 0
    assert state(store).version == version


def test_retention_by_bytes(spark: Any, store: ObjectStore) -> None:
    (part,) = write_topic(store, NS, "events", segments=4)
    keep = sum(s.size_bytes for s in part.segments[2:])
    TopicRegistry(store, NS).alter_configs("events", {"retention.ms": -1, "retention.bytes": keep})
    summary = run(store, spark)
    assert summary["counts"]["segments_removed"] == 2
    after = state(store)
    assert after.size_bytes == keep
    assert after.log_start_offset == 2 * RECORDS


def test_everything_expired_keeps_the_newest_segment(spark: Any, store: ObjectStore) -> None:
    (part,) = write_topic(store, NS, "events", segments=3, configs={"retention.ms": "1"})
    run(store, spark)
    after = state(store)
    assert [s.key for s in after.segments] == [part.segments[-1].key]  # holds HW - 1
    assert after.log_start_offset == 2 * RECORDS < after.high_watermark == 3 * RECORDS


def test_removed_objects_are_deleted_only_after_the_grace(spark: Any, store: ObjectStore) -> None:
    (part,) = write_topic(
        store, NS, "events", segments=3, configs={"retention.ms": expire_before(1)}
    )
    gone, *live = part.segments
    run(store, spark)
    assert exists(store, part, gone)
    TopicRegistry(store, NS).alter_configs("events", {"retention.ms": -1})  # the clock moves on
    early = run(store, spark, now=NOW + HOUR - 1000)
    assert early["counts"]["objects_pending"] == 2 and early["counts"]["objects_deleted"] == 0
    assert exists(store, part, gone)
    late = run(store, spark, now=NOW + HOUR)
    assert late["counts"]["objects_deleted"] == 2
    assert not store.exists(part.object_key(gone))
    assert not store.exists(part.index_object_key(gone))
    assert all(exists(store, part, s) for s in live)
    (report,) = late["details"]["partitions"]
    assert report["deleted"] == sorted([part.object_key(gone), part.index_object_key(gone)])
    # a shorter grace on request
    (other,) = write_topic(store, NS, "quick", segments=2, configs={"retention.ms": "1"})
    run(store, spark, topics=("quick",))
    run(store, spark, now=NOW + 60_000, topics=("quick",), delete_grace_ms=60_000)
    assert not store.exists(other.object_key(other.segments[0]))
    assert state(store, "quick").segments == (other.segments[1],)


def test_orphans_are_deleted_only_after_the_orphan_grace(spark: Any, store: ObjectStore) -> None:
    (part,) = write_topic(store, NS, "events", segments=2, configs={"retention.ms": "-1"})
    orphan = put_orphan(store, part, 500)
    other = layout.join(part.prefix, "notes.txt")
    store.put(other, b"not ours")
    young = run(store, spark, now=NOW + 23 * HOUR)
    assert young["counts"]["orphans_deleted"] == 0
    assert store.exists(orphan)
    old = run(store, spark, now=NOW + 25 * HOUR)
    assert old["counts"]["orphans_deleted"] == 1
    assert not store.exists(orphan)
    assert store.exists(other)  # not a KFS object: reported, never deleted
    (report,) = old["details"]["partitions"]
    assert report["orphans_deleted"] == [orphan] and report["unknown"] == [other]
    assert all(exists(store, part, s) for s in part.segments)  # live objects are never touched
    assert list(store.list(part.prefix + "_log/"))  # nor the catalog
    # a longer grace protects it longer
    orphan2 = put_orphan(store, part, 600)
    run(store, spark, now=NOW + 25 * HOUR, orphan_grace_ms=48 * HOUR)
    assert store.exists(orphan2)


def test_dry_run_changes_nothing(
    spark: Any, store: ObjectStore, capsys: pytest.CaptureFixture[str]
) -> None:
    (part,) = write_topic(
        store, NS, "events", segments=3, configs={"retention.ms": expire_before(2)}
    )
    orphan = put_orphan(store, part, 900)
    before = state(store)
    keys = sorted(i.key for i in store.list(f"{NS}/events/"))
    summary = run(store, spark, now=NOW + 25 * HOUR, dry_run=True)
    assert summary["dry_run"] and summary["status"] == "ok"
    assert summary["counts"]["segments_removed"] == 2  # would remove
    assert summary["counts"]["orphans_deleted"] == 1  # would delete
    (report,) = summary["details"]["partitions"]
    assert report["status"] == "would_remove"
    assert [r["key"] for r in report["removed"]] == [s.key for s in part.segments[:2]]
    assert report["orphans_deleted"] == [orphan]
    assert summary["message"].startswith("would remove 2 segments")
    out = capsys.readouterr().out
    assert f"would remove {part.segments[0].key} (offsets 0..249" in out
    assert f"would delete {orphan} (orphan)" in out
    assert state(store) == before
    assert sorted(i.key for i in store.list(f"{NS}/events/")) == keys


def test_the_pause_flag_stops_the_job(spark: Any, store: ObjectStore) -> None:
    (part,) = write_topic(store, NS, "events", segments=3, configs={"retention.ms": "1"})
    set_emergency_flag(store, NS, True)
    summary = run(store, spark)
    assert summary["status"] == "paused"
    assert state(store).segments == tuple(part.segments)
    # a flag raised after the commits stops the deletions in the executors
    set_emergency_flag(store, NS, False)
    run(store, spark)
    set_emergency_flag(store, NS, True)
    swept = sweep_partition(store, SweepTask(NS, "events", 0, NOW + HOUR, HOUR, 24 * HOUR, False))
    assert swept.paused and swept.deleted == []
    assert all(exists(store, part, s) for s in part.segments)


def test_retention_while_the_daemon_keeps_adding(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    write_topic(store, NS, "events", segments=3, configs={"retention.ms": expire_before(2)})
    stop = threading.Event()
    added: list[SegmentEntry] = []

    def daemon() -> None:
        catalog = PartitionCatalog(store, NS, "events", 0)
        offset = 3 * RECORDS
        while not stop.is_set():
            entry = write_segment(store, NS, "events", 0, offset, 5, created_ms=NOW)
            catalog.add_segments([entry])
            added.append(entry)
            offset += 5
            stop.wait(0.02)  # 50 flushes a second: 25 times a busy partition's rate

    thread = threading.Thread(target=daemon)
    thread.start()
    try:
        summary = run(store, spark)
    finally:
        stop.set()
        thread.join()
    assert summary["counts"]["segments_removed"] == 2, summary["details"]["partitions"][0].get(
        "message"
    )
    after = state(store)
    live = {s.key for s in after.segments}
    assert {s.key for s in added} <= live  # every concurrent add survived
    assert after.high_watermark == 3 * RECORDS + 5 * len(added)
    assert after.log_start_offset == 2 * RECORDS
