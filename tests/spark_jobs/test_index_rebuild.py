"""The index rebuild job: fixes missing, unreadable and inconsistent indexes; never a segment."""

from __future__ import annotations

from typing import Any

import pytest

from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.storage import ObjectStore
from spark_jobs import common, index_rebuild, validation
from spark_jobs.common import JobOptions
from spark_jobs.validation import ValidationOptions
from tests.spark_jobs.data import (
    WrittenPartition,
    batch_byte,
    flip_bit,
    point_index_off_batch,
    set_index_interval,
    truncate,
    write_topic,
)

NS = "ns"
TOPIC = "orders"


def _rebuild(spark: Any, store: ObjectStore, **options: Any) -> dict[str, Any]:
    return index_rebuild.run(JobOptions(store_url=store.url, namespace=NS, **options), spark)


def _snapshot(store: ObjectStore, suffix: str) -> dict[str, bytes]:
    return {
        info.key: store.get(info.key)
        for info in store.list(NS + "/")
        if info.key.endswith(suffix) and "/_reports/" not in info.key
    }


def _seed_index_faults(store: ObjectStore, parts: list[WrittenPartition]) -> set[str]:
    """Damage four indexes four ways; the segment keys whose index is bad."""
    p0, p1 = parts
    store.delete(p0.index_object_key(p0.segments[0]))  # missing
    point_index_off_batch(store, p0.index_object_key(p0.segments[1]), entry=0)  # inconsistent
    truncate(store, p1.index_object_key(p1.segments[0]), 5)  # unreadable: size
    store.put(p1.index_object_key(p1.segments[2]), b"not an index at all")  # unreadable: magic
    return {p0.segments[0].key, p0.segments[1].key, p1.segments[0].key, p1.segments[2].key}


def test_rebuild_fixes_index_faults(spark: Any, store: ObjectStore) -> None:
    parts = write_topic(store, NS, TOPIC, partitions=2, segments=3, records_per_segment=250)
    original_indexes = _snapshot(store, ".index")
    segments = _snapshot(store, ".kfs")
    bad = _seed_index_faults(store, parts)
    assert validation.run(
        ValidationOptions(store_url=store.url, namespace=NS, data_docs=False), spark
    )["details"]["index_only_failure"]

    summary = _rebuild(spark, store)
    assert summary["status"] == common.STATUS_OK, summary["message"]
    assert summary["counts"] == {
        "segments": 6,
        "healthy": 2,
        "needs_rebuild": 4,
        "rebuilt": 4,
        "unfixable": 0,
        "gone": 0,
    }
    rebuilt = {f["key"]: f for f in summary["details"]["rebuilt"]}
    assert set(rebuilt) == bad
    assert {f["key"]: f["state"] for f in summary["details"]["needs_rebuild"]} == {
        parts[0].segments[0].key: index_rebuild.MISSING,
        parts[0].segments[1].key: index_rebuild.INCONSISTENT,
        parts[1].segments[0].key: index_rebuild.UNREADABLE,
        parts[1].segments[2].key: index_rebuild.UNREADABLE,
    }
    # Byte for byte what the segment writer wrote; segments untouched.
    assert _snapshot(store, ".index") == original_indexes
    assert _snapshot(store, ".kfs") == segments
    after = validation.run(ValidationOptions(store_url=store.url, namespace=NS), spark)
    assert after["status"] == common.STATUS_OK
    assert after["details"]["report"]["success"] is True

    # Idempotent: a second run finds nothing to do and writes nothing.
    etags = {i.key: i.etag for i in store.list(NS + "/") if "/_reports/" not in i.key}
    again = _rebuild(spark, store)
    assert again["counts"]["needs_rebuild"] == 0
    assert again["counts"]["rebuilt"] == 0
    assert {i.key: i.etag for i in store.list(NS + "/") if "/_reports/" not in i.key} == etags


def test_dry_run_changes_nothing(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    parts = write_topic(store, NS, TOPIC, partitions=2, segments=3, records_per_segment=50)
    bad = _seed_index_faults(store, parts)
    before = {i.key: i.etag for i in store.list(NS + "/")}

    summary = _rebuild(spark, store, dry_run=True)
    assert summary["status"] == common.STATUS_OK
    assert summary["dry_run"] is True
    assert summary["counts"]["needs_rebuild"] == 4
    assert summary["counts"]["rebuilt"] == 0
    assert {f["key"] for f in summary["details"]["needs_rebuild"]} == bad
    assert "would rebuild 4" in summary["message"]
    after = {i.key: i.etag for i in store.list(NS + "/") if "/_reports/" not in i.key}
    assert after == before


def test_keeps_the_old_interval(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    parts = write_topic(store, NS, TOPIC, segments=1, records_per_segment=300, index_interval=40)
    key = parts[0].index_object_key(parts[0].segments[0])
    original = store.get(key)
    point_index_off_batch(store, key, entry=2)

    summary = _rebuild(spark, store)
    assert summary["counts"]["rebuilt"] == 1
    assert summary["details"]["rebuilt"][0]["interval"] == 40
    assert store.get(key) == original
    # An index whose header says another (valid) interval is fine as it is.
    set_index_interval(store, key, 100)
    assert _rebuild(spark, store)["counts"]["needs_rebuild"] == 0


def test_damaged_segment_is_unfixable(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    parts = write_topic(store, NS, TOPIC, segments=3, records_per_segment=50)
    part = parts[0]
    damaged, missing, healthy = part.segments
    # A flipped bit inside a batch: the index can still be checked (it is fine)...
    flip_bit(store, part.object_key(damaged), batch_byte(store, part.object_key(damaged), 1, 70))
    # ...but once the index is gone too, it must not be rebuilt over damaged bytes.
    store.delete(part.index_object_key(damaged))
    store.delete(part.object_key(missing))
    store.delete(part.index_object_key(healthy))
    segment_bytes = _snapshot(store, ".kfs")

    summary = _rebuild(spark, store)
    assert summary["status"] == common.STATUS_FAILED
    assert summary["exit_code"] == common.EXIT_FAILED
    assert summary["counts"]["rebuilt"] == 1
    assert summary["counts"]["unfixable"] == 2
    unfixable = {f["key"]: f["state"] for f in summary["details"]["unfixable"]}
    assert unfixable == {
        damaged.key: index_rebuild.SEGMENT_CORRUPT,
        missing.key: index_rebuild.SEGMENT_MISSING,
    }
    assert not store.exists(part.index_object_key(damaged))
    assert store.exists(part.index_object_key(healthy))
    assert _snapshot(store, ".kfs") == segment_bytes


def test_main_and_pause(
    spark: Any, local_store: ObjectStore, capsys: pytest.CaptureFixture[str]
) -> None:
    store = local_store
    parts = write_topic(store, NS, TOPIC, segments=2, records_per_segment=50)
    index_key = parts[0].index_object_key(parts[0].segments[0])
    store.delete(index_key)
    args = ["--store-url", store.url, "--namespace", NS, "--topics", TOPIC]

    set_emergency_flag(store, NS, True)
    assert index_rebuild.main(args) == common.EXIT_OK
    assert "PAUSED" in capsys.readouterr().out
    assert not store.exists(index_key)

    set_emergency_flag(store, NS, False)
    assert index_rebuild.main(args) == common.EXIT_OK
    assert store.exists(index_key)
    assert "rebuilt 1 of 1 indexes" in capsys.readouterr().out
    assert index_rebuild.main([*args[:4], "--topics", "missing"]) == common.EXIT_USAGE
