"""spark_jobs.compaction: merging, key compaction against a Kafka model, races, pause, dry run.

Every partition is read back record by record (offset, timestamp, key,
value, headers) after a run, each segment verified and its index checked
(`read_partition`), and compared with what was written or with the plain-Python
model of Kafka's cleaner in `tests.spark_jobs.kafka_model`.  Time is never
waited for: the job takes a ``clock`` and the tests pass a fixed "now".
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfs_core.catalog import PartitionCatalog, SegmentEntry, TopicConfig, TopicRegistry, layout
from kfs_core.catalog.actions import AbortedRange, OpenTransaction
from kfs_core.formats.index import IndexReader
from kfs_core.formats.index_check import check_index
from kfs_core.formats.segment import SegmentReader, SegmentWriter
from kfs_core.log.producer_state import ProducerStateTable
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.records import CODEC_NONE, CODEC_ZSTD, Record, decode_batch, encode_batch
from kfs_core.records.batch import CONTROL_ABORT, CONTROL_COMMIT, encode_control_key
from kfs_core.records.header import read_batch_header
from kfs_core.storage import ObjectStore
from kfs_core.storage.local import LocalObjectStore
from spark_jobs import common, compaction, validation
from spark_jobs.common import SegmentDescriptor, UsageError
from spark_jobs.compaction import (
    CompactionOptions,
    PartitionPlan,
    ReadThrottle,
    TokenBucket,
    is_cleaned_key,
    map_key,
    plan_key_compaction,
    plan_merge,
)
from spark_jobs.validation import ValidationOptions
from tests.spark_jobs.data import BASE_TIMESTAMP_MS, flip_bit, write_topic
from tests.spark_jobs.kafka_model import CleanerConfig, CompactedLog, ModelRecord

NS = "ns"
BASE = BASE_TIMESTAMP_MS
DAY = 86_400_000
#: "Now" for the runs: far enough after the data that no lag applies unless a test sets one.
NOW = BASE + 10 * DAY
SEGMENT_FLAGS = ("header_ok", "footer_ok", "body_crc_ok", "batches_ok", "counts_ok", "catalog_ok")


# --- writing and reading partitions --------------------------------------------------------


def create_topic(
    store: ObjectStore, topic: str, partitions: int = 1, **configs: str | int | float
) -> None:
    TopicRegistry(store, NS).create_topic(
        topic, partitions, {k.replace("_", "."): v for k, v in configs.items()}
    )


def batch_of(records: Sequence[Record], codec: int = CODEC_NONE, **kw: Any) -> bytes:
    return encode_batch(records, base_offset=records[0].offset, codec=codec, **kw)


def seal(
    store: ObjectStore,
    topic: str,
    partition: int,
    batches: Sequence[bytes],
    *,
    created_ms: int = BASE,
) -> SegmentEntry:
    """Put one segment of ``batches`` and its index (not committed)."""
    writer = SegmentWriter(created_ms=created_ms)
    for batch in batches:
        writer.append(batch)
    sealed = writer.finish()
    entry = SegmentEntry.for_sealed(topic, partition, sealed)
    store.put(layout.join(NS, entry.key), sealed.data)
    store.put(layout.join(NS, entry.index_key), sealed.index)
    return entry


def append_segments(
    store: ObjectStore,
    topic: str,
    partition: int,
    segments: Sequence[Sequence[Record]],
    *,
    batch_size: int = 3,
    codec: int = CODEC_NONE,
) -> list[SegmentEntry]:
    """Seal each record list as one segment (batches of ``batch_size``) and commit them."""
    entries = [
        seal(
            store,
            topic,
            partition,
            [
                batch_of(records[i : i + batch_size], codec)
                for i in range(0, len(records), batch_size)
            ],
        )
        for records in segments
        if records
    ]
    PartitionCatalog(store, NS, topic, partition).add_segments(entries)
    return entries


def to_records(model: Sequence[ModelRecord]) -> list[Record]:
    return [Record(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in model]


def read_partition(
    store: ObjectStore, topic: str, partition: int = 0
) -> tuple[list[ModelRecord], list[SegmentEntry]]:
    """Every record of the live segments, each segment verified and its index checked."""
    state = PartitionCatalog(store, NS, topic, partition).load()
    records: list[ModelRecord] = []
    for entry in state.segments:
        name = layout.join(NS, entry.key)
        reader = SegmentReader(store.get(name), name)
        meta = reader.verify()
        assert (meta.base_offset, meta.last_offset, meta.size) == (
            entry.base_offset,
            entry.last_offset,
            entry.size_bytes,
        )
        index = IndexReader(store.get(layout.join(NS, entry.index_key)))
        assert check_index(reader, index) == []
        for position, _ in reader.iter_batches():
            batch = decode_batch(reader.data, position)
            records.extend(
                ModelRecord(
                    r.offset, batch.effective_timestamp(r), r.key, r.value, tuple(r.headers)
                )
                for r in batch.records
            )
    return records, list(state.segments)


def raw_batches(store: ObjectStore, topic: str, partition: int = 0) -> list[bytes]:
    """Every batch of the live segments, as bytes."""
    batches: list[bytes] = []
    for entry in PartitionCatalog(store, NS, topic, partition).load().segments:
        reader = SegmentReader(store.get(layout.join(NS, entry.key)))
        batches.extend(bytes(reader.batch_bytes(p, h)) for p, h in reader.iter_batches())
    return batches


def run(store: ObjectStore, spark: Any, now: int = NOW, **kw: Any) -> dict[str, Any]:
    options = CompactionOptions(store_url=store.url, namespace=NS, **kw)
    return compaction.run(options, spark, clock=lambda: now)


def run_with_hook(
    store: ObjectStore, spark: Any, hook: Any, now: int = NOW, **kw: Any
) -> dict[str, Any]:
    options = CompactionOptions(store_url=store.url, namespace=NS, **kw)
    return compaction.run(options, spark, clock=lambda: now, before_commit=hook)


def objects(store: ObjectStore) -> dict[str, str]:
    """Every object but the run summaries, with its etag."""
    return {i.key: i.etag for i in store.list(NS + "/") if "/_reports/" not in i.key}


def assert_valid(spark: Any, store: ObjectStore) -> None:
    """The validation job's per-segment checks pass on every live segment (gaps allowed)."""
    rows = validation.collect_rows(spark, store, NS, orphan_grace_s=3600.0)
    segments = [r for r in rows if r["row_type"] == "segment"]
    assert segments
    for row in segments:
        assert all(row[flag] is True for flag in SEGMENT_FLAGS), row
        assert row["index_ok"] is True and row["index_missing"] is False, row
        assert row["overlap_prev"] is False and row["crc_failures"] == 0, row


def partition_report(summary: dict[str, Any], topic: str, partition: int = 0) -> dict[str, Any]:
    return next(
        p
        for p in summary["details"]["partitions"]
        if p["topic"] == topic and p["partition"] == partition
    )


# --- planning and helpers (no Spark) ------------------------------------------------------


def descriptor(
    base: int, count: int = 10, size: int = 1000, *, suffix: str = "", ts: int = BASE
) -> SegmentDescriptor:
    key = layout.segment_key("t", 0, base, suffix)
    entry = SegmentEntry(
        base_offset=base,
        last_offset=base + count - 1,
        record_count=count,
        size_bytes=size,
        index_size_bytes=16,
        min_timestamp=ts - 10,
        max_timestamp=ts,
        codec=0,
        created_ms=ts,
        key=key,
        index_key=layout.index_key_for(key),
    )
    return SegmentDescriptor(NS, "t", 0, entry)


def config(**overrides: Any) -> TopicConfig:
    return TopicConfig.from_configs({k.replace("_", "."): v for k, v in overrides.items()})


def bases(plan: PartitionPlan) -> list[list[int]]:
    return [[d.base_offset for d in group] for group in plan.groups]


def test_plan_merge_takes_runs_of_small_segments() -> None:
    cfg = config(segment_bytes=3000)
    sizes = [1000, 1000, 1000, 1000, 1000, 5000, 900, 900, 900, 4000, 100, 100, 100, 100]
    segments = [descriptor(10 * i, size=s) for i, s in enumerate(sizes)]
    plan = plan_merge("t", 0, 3, segments, cfg, min_inputs=4)
    # 0..40 is a run of five (3000 bytes per group), 60..80 only three, 100..130 four.
    assert plan.action == compaction.KIND_MERGE
    assert bases(plan) == [[0, 10, 20], [30, 40], [100, 110, 120, 130]]
    assert plan.codec == CODEC_ZSTD  # compression.type=producer
    assert plan_merge("t", 0, 3, segments[5:9], cfg, min_inputs=4).action == compaction.SKIP
    # A group of one is not worth rewriting: four segments of 2000 bytes never pair up.
    lonely = [descriptor(10 * i, size=2000) for i in range(4)]
    skip = plan_merge("t", 0, 3, lonely, cfg, min_inputs=4)
    assert skip.action == compaction.SKIP and skip.groups == ()


def test_plan_key_compaction_follows_the_cleaner() -> None:
    clean = [descriptor(0, suffix="-c1", ts=BASE + 100), descriptor(10, suffix="-c1", ts=BASE + 50)]
    dirty = [descriptor(20 + 10 * i, ts=BASE + 1000 * (i + 1)) for i in range(4)]
    cfg = config(cleanup_policy="compact", delete_retention_ms=30, min_cleanable_dirty_ratio=0.5)
    plan = plan_key_compaction("t", 0, 7, clean + dirty, cfg, NOW)
    assert plan.action == compaction.KIND_COMPACT
    assert plan.clean_keys == {clean[0].key, clean[1].key}
    assert (plan.clean_bytes, plan.dirty_bytes, plan.dirty_ratio) == (2000, 3000, 0.6)
    assert (plan.cleaning_point_ms, plan.horizon_ms) == (BASE + 100, BASE + 70)
    # the newest segment (50) is never cleaned
    assert [d.base_offset for d in plan.inputs] == [0, 10, 20, 30, 40]
    assert plan.first_uncleanable_offset == 50
    # the lag: segment 30 (max timestamp BASE + 2000) is within it, so cleaning stops there
    lagged = plan_key_compaction(
        "t", 0, 7, clean + dirty, config(cleanup_policy="compact", min_compaction_lag_ms=1500, min_cleanable_dirty_ratio=0),
        BASE + 3000,
    )  # fmt: skip
    assert [d.base_offset for d in lagged.inputs] == [0, 10, 20]
    assert lagged.first_uncleanable_offset == 30
    # the dirty ratio gate: 3000 / 5000 < 0.7
    gated = plan_key_compaction(
        "t", 0, 7, clean + dirty,
        config(cleanup_policy="compact", min_cleanable_dirty_ratio=0.7), NOW,
    )  # fmt: skip
    assert gated.action == compaction.SKIP and "dirty ratio 0.600" in gated.reason
    nothing = plan_key_compaction("t", 0, 7, [*clean, dirty[0]], cfg, NOW)
    assert nothing.action == compaction.SKIP and nothing.reason == "nothing dirty to clean"


def test_max_compaction_lag_cleans_a_partition_below_the_dirty_ratio() -> None:
    """Kafka's max.compaction.lag.ms (KIP-354): a dirty key waits at most that long."""
    clean = [descriptor(0, suffix="-c1", ts=BASE), descriptor(10, suffix="-c1", ts=BASE)]
    dirty = [descriptor(20, ts=BASE + 1000), descriptor(30, ts=BASE + 2000)]
    gate = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": 0.9}
    # Below the ratio (1000 / 3000): skipped.
    assert plan_key_compaction("t", 0, 7, clean + dirty, config(**gate), BASE + 5000).action == (
        compaction.SKIP
    )
    # The first dirty segment's oldest record (BASE + 990) waited longer than the lag:
    # cleaned despite the ratio; the newest segment (30) stays out, as always.
    overdue = plan_key_compaction(
        "t", 0, 7, clean + dirty, config(**gate, max_compaction_lag_ms=3000), BASE + 5000
    )
    assert overdue.action == compaction.KIND_COMPACT
    assert [d.base_offset for d in overdue.inputs] == [0, 10, 20]
    # Not yet overdue: skipped.
    waiting = plan_key_compaction(
        "t", 0, 7, clean + dirty, config(**gate, max_compaction_lag_ms=4011), BASE + 5000
    )
    assert waiting.action == compaction.SKIP


def test_key_marks_and_map_keys() -> None:
    assert compaction.run_suffix("c", "20240102T030405Z-1A2b3c") == "-c20240102t030405z1a2b3c"
    assert is_cleaned_key(layout.segment_key("t", 0, 5, "-c20240102t030405z1a2b3c"))
    assert not is_cleaned_key(layout.segment_key("t", 0, 5, "-m20240102t030405z1a2b3c"))
    assert not is_cleaned_key(layout.segment_key("t", 0, 5))
    assert map_key(b"k" * 32) == b"k" * 32
    long_a, long_b = map_key(b"a" * 33), map_key(b"a" * 32 + b"b")
    assert len(long_a) == 33 and long_a != long_b  # never equal to a raw key (at most 32)


def test_token_bucket_paces_reads_without_sleeping() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(1000.0, clock=lambda: now[0], sleep=sleep)
    assert bucket.acquire(600) == 0.0  # within the one-second burst
    assert bucket.acquire(900) == pytest.approx(0.5)  # 500 in debt at 1000/s
    now[0] += 2.0  # idle time refills to the burst, never beyond
    assert bucket.acquire(1000) == 0.0
    assert bucket.acquire(3000) == pytest.approx(3.0)
    assert slept == [pytest.approx(0.5), pytest.approx(3.0)]
    throttle = ReadThrottle()
    assert throttle.bucket(0) is None
    assert throttle.bucket(5.0) is throttle.bucket(5.0)


def test_options_are_checked() -> None:
    with pytest.raises(UsageError, match="min-inputs"):
        CompactionOptions(store_url="file:///x", namespace=NS, min_inputs=1)
    with pytest.raises(UsageError, match="max-read"):
        CompactionOptions(store_url="file:///x", namespace=NS, max_read_mb_per_s=-1)
    with pytest.raises(UsageError, match="compression-level"):
        CompactionOptions(store_url="file:///x", namespace=NS, compression_level=23)
    args = compaction.build_parser().parse_args(
        ["--store-url", "file:///x", "--max-read-mb-per-s", "12.5", "--min-inputs", "6",
         "--compression-level", "-5"]
    )  # fmt: skip
    options = CompactionOptions.from_namespace(args)
    assert (options.read_bytes_per_s, options.min_inputs) == (12.5 * 2**20, 6)
    assert options.compression_level == -5


def test_compression_levels() -> None:
    assert compaction.output_level(CODEC_ZSTD) == compaction.DEFAULT_ZSTD_LEVEL == 1
    assert compaction.output_level(CODEC_NONE) is None  # every other codec: its own default
    assert compaction.output_level(CODEC_ZSTD, 19) == 19
    plan = plan_merge("t", 0, 1, [descriptor(i * 10) for i in range(4)], config())
    tasks, _ = compaction.build_tasks([plan], NS, "run1", 0.0)
    assert [t.compression_level for t in tasks] == [1]
    tasks, _ = compaction.build_tasks([plan], NS, "run1", 0.0, compression_level=9)
    assert [t.compression_level for t in tasks] == [9]


# --- merging ------------------------------------------------------------------------------------


def merge_data(store: ObjectStore, topic: str, partitions: int = 1) -> dict[int, list[bytes]]:
    """12 small segments per partition; the special batches' bytes, per partition.

    Every record has headers; segment 5 holds a transaction (two transactional
    batches and a commit marker).
    """
    create_topic(store, topic, partitions, segment_bytes=20_000)
    special: dict[int, list[bytes]] = {}
    for partition in range(partitions):
        offset = 0
        entries = []
        for s in range(12):
            batches = []
            for b in range(8):
                if s == 5 and b == 4:  # a transaction in the middle of the segment
                    txn = dict(producer_id=77, producer_epoch=3, is_transactional=True)
                    special[partition] = [
                        batch_of([Record(offset, BASE + offset, b"t", b"in txn")], base_sequence=0, **txn),
                        batch_of([Record(offset + 1, BASE + offset, b"t", b"too")], base_sequence=1, **txn),
                        batch_of(
                            [Record(offset + 2, BASE + offset, encode_control_key(CONTROL_COMMIT), struct.pack(">hi", 0, 9))],
                            is_control=True,
                            **txn,
                        ),
                    ]  # fmt: skip
                    batches.extend(special[partition])
                    offset += 3
                records = [
                    Record(
                        offset + i,
                        BASE + offset + i,
                        f"key-{(offset + i) % 13}".encode(),
                        f"value {offset + i} of partition {partition} ".encode() * 4,
                        [("trace", f"t{offset + i}".encode()), ("empty", None)],
                    )
                    for i in range(4)
                ]
                batches.append(batch_of(records))
                offset += 4
            entries.append(seal(store, topic, partition, batches))
        PartitionCatalog(store, NS, topic, partition).add_segments(entries)
    return special


def test_merge_small_segments(spark: Any, store: ObjectStore) -> None:
    special = merge_data(store, "events")
    before, inputs = read_partition(store, "events")
    assert len(inputs) == 12

    summary = run(store, spark)

    assert summary["status"] == common.STATUS_OK, summary["message"]
    after, outputs = read_partition(store, "events")
    assert after == before  # offsets, timestamps, keys, values, headers
    assert 1 < len(outputs) < 12
    assert all(o.size_bytes <= 20_000 for o in outputs)
    assert all(o.key.split("/")[-1].split("-")[2].startswith("m") for o in outputs)
    assert outputs[0].base_offset == 0
    batches = raw_batches(store, "events")
    assert all(b in batches for b in special[0])  # transaction batches untouched, byte for byte
    assert len(batches) < 12 * 8 / 4  # many small batches became a few big zstd ones
    counts = summary["counts"]
    assert counts["partitions_merged"] == 1 and counts["segments_in"] == 12
    assert counts["segments_out"] == len(outputs)
    assert counts["bytes_in"] == sum(s.size_bytes for s in inputs)
    assert counts["bytes_out"] == sum(s.size_bytes for s in outputs)
    assert counts["bytes_saved"] == counts["bytes_in"] - counts["bytes_out"] > 0
    assert counts["records_in"] == counts["records_out"] == len(before)
    storage = summary["details"]["storage"]
    assert storage["saved_bytes"] == counts["bytes_saved"] and 0 < storage["saved_ratio"] < 1
    # the inputs are tombstones now: retention deletes their objects after its grace
    state = PartitionCatalog(store, NS, "events", 0).load()
    assert {t.key for t in state.tombstones} == {s.key for s in inputs}
    assert all(store.exists(layout.join(NS, s.key)) for s in inputs)

    checked = validation.run(
        ValidationOptions(store_url=store.url, namespace=NS, data_docs=False), spark
    )
    assert checked["status"] == common.STATUS_OK, checked["message"]


def test_merge_keeps_what_it_cannot_batch(spark: Any, local_store: ObjectStore) -> None:
    """LogAppendTime batches keep their header and timestamps.

    Also: --min-inputs is honoured; a topic's compression.type is used; a second
    run finds nothing left to merge.
    """
    store = local_store
    create_topic(store, "logs", compression_type="lz4")
    segments = []
    for s in range(5):
        records = [Record(10 * s + i, BASE + i, None, b"x" * 50) for i in range(10)]
        log_append = s == 2
        segments.append(
            seal(
                store,
                "logs",
                0,
                [batch_of(records, timestamp_type=1, max_timestamp=BASE + 999)]
                if log_append
                else [batch_of(records[:5]), batch_of(records[5:])],
            )
        )
    PartitionCatalog(store, NS, "logs", 0).add_segments(segments)
    before, _ = read_partition(store, "logs")
    assert {r.timestamp for r in before[20:30]} == {BASE + 999}

    assert run(store, spark, min_inputs=6)["counts"]["partitions_merged"] == 0
    summary = run(store, spark, min_inputs=5)

    assert summary["counts"]["partitions_merged"] == 1
    after, outputs = read_partition(store, "logs")
    assert after == before and len(outputs) == 1
    assert outputs[0].codec == 3  # lz4 everywhere: the LogAppendTime batch was recompressed too
    again = run(store, spark)
    assert again["counts"]["partitions_merged"] == 0
    assert read_partition(store, "logs")[1] == outputs


# --- key compaction ------------------------------------------------------------------------------


def model_records(
    segments: Sequence[Sequence[tuple[Any, ...]]], start: int = 0
) -> list[list[ModelRecord]]:
    """Model records from (key, value, timestamp offset[, headers]) tuples, offsets from ``start``."""
    out: list[list[ModelRecord]] = []
    offset = start
    for segment in segments:
        records = []
        for key, value, ts, *headers in segment:
            records.append(
                ModelRecord(offset, BASE + ts, key, value, tuple(headers[0]) if headers else ())
            )
            offset += 1
        out.append(records)
    return out


def write_model_segments(
    store: ObjectStore,
    log: CompactedLog,
    topic: str,
    segments: Sequence[Sequence[ModelRecord]],
    *,
    batch_sizes: Sequence[int] = (),
    codecs: Sequence[int] = (),
) -> None:
    for i, records in enumerate(segments):
        log.append(records)
        append_segments(
            store,
            topic,
            0,
            [to_records(records)],
            batch_size=batch_sizes[i] if batch_sizes else 3,
            codec=codecs[i] if codecs else CODEC_NONE,
        )


KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"k" * 40, None])
RECORD = st.tuples(
    KEYS,
    st.none() | st.binary(max_size=5),
    st.integers(0, 60_000),
    st.lists(
        st.tuples(st.sampled_from(["h", "trace-id"]), st.none() | st.binary(max_size=3)),
        max_size=2,
    ),
)
SEGMENTS = st.lists(
    st.tuples(
        st.lists(RECORD, min_size=1, max_size=6),
        st.integers(1, 4),
        st.sampled_from([CODEC_NONE, CODEC_ZSTD]),
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    first=SEGMENTS,
    second=st.lists(
        st.tuples(
            st.lists(RECORD, min_size=1, max_size=6),
            st.integers(1, 4),
            st.sampled_from([CODEC_NONE, CODEC_ZSTD]),
        ),
        max_size=3,
    ),
    lag=st.sampled_from([0, 0, 20_000, 45_000]),
    # short enough that tombstones often expire between the two cleanings
    retention=st.integers(0, 15_000),
    now=st.integers(60_000, 90_000),
    later=st.integers(0, 60_000),
)
def test_key_compaction_agrees_with_the_kafka_model(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    first: list[tuple[list[tuple[Any, ...]], int, int]],
    second: list[tuple[list[tuple[Any, ...]], int, int]],
    lag: int,
    retention: int,
    now: int,
    later: int,
) -> None:
    """Two cleanings with data appended between them, against `CompactedLog`."""
    store = LocalObjectStore(tmp_path_factory.mktemp("compact") / "store")
    create_topic(
        store,
        "kv",
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0,  # the model has no bytes; the gate has its own test
        delete_retention_ms=retention,
        min_compaction_lag_ms=lag,
    )
    cfg = CleanerConfig(delete_retention_ms=retention, min_compaction_lag_ms=lag)
    log = CompactedLog()
    for phase, (segments, now_ms) in enumerate([(first, BASE + now), (second, BASE + now + later)]):
        specs = model_records([s for s, _, _ in segments], start=log.next_offset)
        write_model_segments(
            store,
            log,
            "kv",
            specs,
            batch_sizes=[b for _, b, _ in segments],
            codecs=[c for _, _, c in segments],
        )
        summary = run(store, spark, now=now_ms)
        cleaned = log.clean(now_ms, cfg)
        assert summary["status"] == common.STATUS_OK, summary["message"]
        assert summary["counts"]["partitions_compacted"] == int(cleaned), (phase, summary)
        records, _ = read_partition(store, "kv")
        assert records == log.records(), phase
    store.close()


def test_tombstones_live_delete_retention_past_the_cleaning_point(
    spark: Any, local_store: ObjectStore
) -> None:
    store = local_store
    create_topic(
        store, "kv", cleanup_policy="compact", delete_retention_ms=1000, min_cleanable_dirty_ratio=0
    )
    log = CompactedLog()
    cfg = CleanerConfig(delete_retention_ms=1000)
    write_model_segments(
        store,
        log,
        "kv",
        model_records(
            [
                [(b"a", b"1", 0), (b"b", b"1", 0), (None, b"keyless", 10)],
                [(b"a", None, 100), (b"c", b"1", 100)],  # a is deleted at t=100
                [(b"c", b"2", 200)],  # the newest segment: never cleaned
            ]
        ),
    )
    # 1st cleaning: the tombstone is dirty, so it stays (and a=1 goes)
    assert run(store, spark)["counts"]["partitions_compacted"] == 1
    log.clean(NOW, cfg)
    records, segments = read_partition(store, "kv")
    assert records == log.records()
    assert [(r.key, r.value) for r in records] == [
        (b"b", b"1"), (None, b"keyless"), (b"a", None), (b"c", b"1"), (b"c", b"2"),
    ]  # fmt: skip
    assert [r.offset for r in records] == [1, 2, 3, 4, 5]  # offset 0 is a gap now
    assert is_cleaned_key(segments[0].key) and not is_cleaned_key(segments[1].key)

    # Later cleanings, one new segment each.  The cleaning point is the newest timestamp of
    # the clean part before the run: 100, 200, 900, then 1100 - the first that is
    # delete.retention.ms (1000) past the tombstone (t=100).
    for offset, (key, ts, kept) in enumerate(
        [(b"d", 900, True), (b"e", 1100, True), (b"f", 1200, True), (b"g", 1300, False)], start=6
    ):
        write_model_segments(store, log, "kv", model_records([[(key, b"1", ts)]], start=offset))
        summary = run(store, spark)
        assert summary["counts"]["partitions_compacted"] == 1
        assert log.clean(NOW, cfg)
        records, _ = read_partition(store, "kv")
        assert records == log.records()
        assert ((b"a", None) in [(r.key, r.value) for r in records]) is kept, key
    assert summary["counts"]["records_removed"] == 1  # the tombstone, nothing else
    assert_valid(spark, store)


def test_min_compaction_lag_leaves_recent_segments_alone(
    spark: Any, local_store: ObjectStore
) -> None:
    store = local_store
    create_topic(store, "kv", cleanup_policy="compact", min_compaction_lag_ms=60_000)
    log = CompactedLog()
    write_model_segments(
        store,
        log,
        "kv",
        model_records(
            [
                [(b"a", b"1", 0), (b"a", b"2", 10)],
                [(b"a", b"3", 20), (b"b", b"1", 30)],
                [(b"a", b"4", 100_000), (b"b", b"2", 100_010)],  # within the lag at `now`
                [(b"b", b"3", 100_020), (b"a", b"5", 20)],  # after it: untouched
                [(b"c", b"1", 100_030)],
            ]
        ),
    )
    _, before = read_partition(store, "kv")
    now = BASE + 150_000  # segments 2.. have records newer than now - lag

    summary = run(store, spark, now=now)

    log.clean(now, CleanerConfig(min_compaction_lag_ms=60_000))
    records, after = read_partition(store, "kv")
    assert records == log.records()
    # a=3 survives: the newer a=4 is in a segment the lag protects, so the map never saw it
    assert [(r.key, r.value) for r in records][:2] == [(b"a", b"3"), (b"b", b"1")]
    assert after[1:] == before[2:]  # the same objects, not rewritten
    report = partition_report(summary, "kv")
    assert report["first_uncleanable_offset"] == before[2].base_offset
    assert report["inputs"] == [before[0].key, before[1].key]


def test_dirty_ratio_gates_the_cleaning(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    # min.cleanable.dirty.ratio 0.5; uncompressed, so that sizes stay what they were written as
    create_topic(store, "kv", cleanup_policy="compact", compression_type="uncompressed")
    # distinct keys: the first cleaning keeps everything, so the clean part stays big
    big = [[(f"k{40 * s + i}".encode(), b"v" * 200, i) for i in range(40)] for s in range(3)]
    log = CompactedLog()
    write_model_segments(store, log, "kv", model_records(big))
    assert run(store, spark)["counts"]["partitions_compacted"] == 1
    write_model_segments(
        store, log, "kv", model_records([[(b"k1", b"new", 50)], [(b"k2", b"new", 60)]], start=120)
    )
    objects_before = objects(store)

    summary = run(store, spark)

    report = partition_report(summary, "kv")
    assert report["status"] == "skipped" and report["dirty_ratio"] < 0.5
    assert "below min.cleanable.dirty.ratio 0.5" in report["reason"]
    assert objects(store) == objects_before
    TopicRegistry(store, NS).alter_configs("kv", {"min.cleanable.dirty.ratio": "0.01"})
    assert run(store, spark)["counts"]["partitions_compacted"] == 1
    log.clean(NOW, CleanerConfig())
    assert read_partition(store, "kv")[0] == log.records()


def test_compacted_topic_keeps_keyless_records_and_markers(
    spark: Any, local_store: ObjectStore
) -> None:
    """A committed transaction's records are key-compacted like any others; markers stay."""
    store = local_store
    create_topic(store, "kv", cleanup_policy="compact", compression_type="gzip")
    txn = dict(producer_id=5, producer_epoch=0, is_transactional=True)
    marker = Record(5, BASE, encode_control_key(CONTROL_COMMIT), struct.pack(">hi", 0, 1))
    special = [
        batch_of([Record(3, BASE, b"a", b"txn-old")], **txn),
        batch_of([Record(4, BASE, None, b"txn-keyless")], **txn),
        batch_of([marker], is_control=True, **txn),
    ]
    entries = [
        seal(store, "kv", 0, [batch_of([Record(0, BASE, b"a", b"1"), Record(1, BASE, None, b"x")])]),
        seal(store, "kv", 0, [batch_of([Record(2, BASE, b"a", b"2")]), *special]),
        seal(store, "kv", 0, [batch_of([Record(6, BASE, b"a", b"3"), Record(7, BASE, None, b"y")])]),
        seal(store, "kv", 0, [batch_of([Record(8, BASE, b"z", b"newest")])]),
    ]  # fmt: skip
    PartitionCatalog(store, NS, "kv", 0).add_segments(entries)

    summary = run(store, spark)

    assert summary["counts"]["records_removed"] == 3  # a=1, a=2 and the committed a=txn-old
    records, outputs = read_partition(store, "kv")
    assert [(r.offset, r.key, r.value) for r in records] == [
        (1, None, b"x"),
        (4, None, b"txn-keyless"),
        (5, marker.key, marker.value),
        (6, b"a", b"3"),
        (7, None, b"y"),
        (8, b"z", b"newest"),
    ]
    batches = raw_batches(store, "kv")
    assert all(b in batches for b in special[1:])  # untouched transactional batches: as they were
    assert outputs[0].base_offset == 0 and outputs[0].codec == 0  # gzip mixed with copies
    assert_valid(spark, store)
    assert run(store, spark)["counts"]["partitions_compacted"] == 0  # a rerun: nothing dirty


def test_compaction_removes_aborted_transactions_and_carries_their_index(
    spark: Any, local_store: ObjectStore
) -> None:
    """As Kafka's cleaner: an aborted transaction's records go; its abort marker and entry stay."""
    store = local_store
    create_topic(store, "kv", cleanup_policy="compact")
    txn = dict(producer_id=9, producer_epoch=0, is_transactional=True)
    abort = Record(4, BASE, encode_control_key(CONTROL_ABORT), struct.pack(">hi", 0, 1))
    aborted = (AbortedRange(producer_id=9, first_offset=2, last_offset=4),)
    entries = [
        seal(store, "kv", 0, [batch_of([Record(0, BASE, b"a", b"1"), Record(1, BASE, b"b", b"1")])]),
        seal(store, "kv", 0, [
            batch_of([Record(2, BASE, b"a", b"aborted"), Record(3, BASE, b"c", b"aborted")], **txn),
            batch_of([abort], is_control=True, **txn),
        ]).model_copy(update={"aborted": aborted}),
        seal(store, "kv", 0, [batch_of([Record(5, BASE, b"a", b"2")])]),
        seal(store, "kv", 0, [batch_of([Record(6, BASE, b"z", b"newest")])]),
    ]  # fmt: skip
    PartitionCatalog(store, NS, "kv", 0).add_segments(entries)

    summary = run(store, spark)

    records, segments = read_partition(store, "kv")
    assert [(r.offset, r.key, r.value) for r in records] == [
        (1, b"b", b"1"),
        (4, abort.key, abort.value),
        (5, b"a", b"2"),
        (6, b"z", b"newest"),
    ]
    assert partition_report(summary, "kv")["aborted_batches_removed"] == 1
    assert [s.aborted for s in segments if s.base_offset <= 4 <= s.last_offset] == [aborted]
    assert_valid(spark, store)


def test_a_producers_last_batch_outlives_compaction(spark: Any, local_store: ObjectStore) -> None:
    """Kept empty, as Kafka's cleaner keeps it: producer state rebuilt from segments knows it."""
    store = local_store
    create_topic(store, "kv", cleanup_policy="compact")
    idem = dict(producer_id=5, producer_epoch=2)
    entries = [
        seal(store, "kv", 0, [
            batch_of([Record(0, BASE, b"a", b"1")], base_sequence=0, **idem),
            batch_of([Record(1, BASE, b"b", b"1"), Record(2, BASE, b"c", b"1")], base_sequence=1, **idem),
        ]),
        seal(store, "kv", 0, [batch_of([Record(3, BASE, b"a", b"2"), Record(4, BASE, b"b", b"2"), Record(5, BASE, b"c", b"2")])]),
        seal(store, "kv", 0, [batch_of([Record(6, BASE, b"z", b"newest")])]),
    ]  # fmt: skip
    PartitionCatalog(store, NS, "kv", 0).add_segments(entries)

    run(store, spark)

    records, _ = read_partition(store, "kv")
    assert [r.offset for r in records] == [3, 4, 5, 6]
    headers = [read_batch_header(memoryview(b)) for b in raw_batches(store, "kv")]
    kept = [h for h in headers if h.producer_id == 5]
    assert [(h.base_offset, h.record_count, h.base_sequence, h.last_offset) for h in kept] == [
        (1, 0, 1, 2)
    ]
    table = ProducerStateTable("kv-0")
    table.replay(headers, NOW)
    [entry] = [e for e in table.entries() if e.producer_id == 5]
    assert (entry.epoch, entry.last_seq, entry.last_offset) == (2, 2, 2)
    assert_valid(spark, store)


def test_nothing_at_or_above_the_last_stable_offset_is_cleaned() -> None:
    dirty = [descriptor(10 * i, ts=BASE + i) for i in range(5)]
    newest = dirty[-1].entry.model_copy(
        update={"open_txns": (OpenTransaction(producer_id=3, first_offset=25),)}
    )
    segments = [*dirty[:-1], SegmentDescriptor(NS, "t", 0, newest)]
    cfg = config(cleanup_policy="compact", min_cleanable_dirty_ratio=0)
    plan = plan_key_compaction("t", 0, 7, segments, cfg, NOW)
    assert [d.base_offset for d in plan.inputs] == [0, 10]  # 20..29 holds the open transaction
    assert plan.first_uncleanable_offset == 20
    held = plan_key_compaction("t", 0, 7, [segments[2], segments[-1]], cfg, NOW)
    assert held.action == compaction.SKIP
    assert "the last stable offset" in held.reason


# --- races, faults, pause, dry run ---------------------------------------------------------------


def small_topic(store: ObjectStore, topic: str = "events", partitions: int = 2) -> None:
    create_topic(store, topic, partitions, segment_bytes=100_000)
    for partition in range(partitions):
        segments = [
            [Record(10 * s + i, BASE + i, b"k", b"v" * 30) for i in range(10)] for s in range(5)
        ]
        append_segments(store, topic, partition, segments)


def test_a_rewrite_that_lost_its_input_to_retention_is_a_conflict(store: ObjectStore) -> None:
    """Retention deleting an input mid-rewrite (delete grace 0) is the partition moving on."""
    from types import SimpleNamespace

    from spark_jobs.compaction.commit import CONFLICT, ERROR, commit_one
    from spark_jobs.compaction.plan import KIND_MERGE

    small_topic(store, partitions=1)
    live = PartitionCatalog(store, NS, "events", 0).load().segments
    plan = SimpleNamespace(
        topic="events",
        partition=0,
        inputs=[SimpleNamespace(entry=s, key=s.key) for s in live[:2]],
        groups=[0],
        action=KIND_MERGE,
    )
    lost_read = SimpleNamespace(error="ObjectNotFound: segment gone", paused=False, outputs=[])
    ctx = SimpleNamespace(store=store, namespace=NS, check_paused=lambda: False)
    # The inputs are still live: a failed read is an error, as before.
    assert commit_one(ctx, plan, [lost_read], {}, False, None).status == ERROR
    PartitionCatalog(store, NS, "events", 0).remove([live[0].key])
    outcome = commit_one(ctx, plan, [lost_read], {}, False, None)
    assert outcome.status == CONFLICT
    assert "left the catalog" in outcome.message and "segment gone" in outcome.message


def test_replace_conflict_aborts_only_its_partition(spark: Any, store: ObjectStore) -> None:
    small_topic(store)
    before = {p: read_partition(store, "events", p) for p in range(2)}
    removed: list[str] = []

    def retention_meanwhile(plan: PartitionPlan) -> None:
        if plan.partition == 0:  # retention removes the oldest input before the commit
            PartitionCatalog(store, NS, plan.topic, 0).remove([plan.inputs[0].key])
            removed.append(plan.inputs[0].key)

    summary = run_with_hook(store, spark, retention_meanwhile)

    assert summary["status"] == common.STATUS_OK, summary["message"]
    assert summary["counts"]["conflicts"] == 1 and summary["counts"]["partitions_merged"] == 1
    assert "changed meanwhile" in summary["message"]
    report = partition_report(summary, "events", 0)
    assert report["status"] == "conflict" and "no longer live" in report["message"]
    records, segments = read_partition(store, "events", 0)
    assert [s.key for s in segments] == [s.key for s in before[0][1]][1:]  # only retention's change
    assert records == before[0][0][10:]
    assert report["orphans"] and all(store.exists(k) for k in report["orphans"])
    assert all(not k.endswith(s.key) for k in report["orphans"] for s in segments)
    assert summary["counts"]["orphaned_objects"] == len(report["orphans"])
    records, segments = read_partition(store, "events", 1)
    assert records == before[1][0] and len(segments) == 1
    # a rerun finishes the job with new keys
    again = run(store, spark)
    assert again["counts"]["partitions_merged"] == 1
    assert read_partition(store, "events", 0)[0] == before[0][0][10:]


def test_unreadable_segment_fails_only_its_partition(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    small_topic(store)
    damaged = PartitionCatalog(store, NS, "events", 0).load().segments[2]
    flip_bit(store, layout.join(NS, damaged.key), 100)
    before = objects(store)

    summary = run(store, spark)

    assert summary["status"] == common.STATUS_FAILED
    assert summary["exit_code"] == common.EXIT_FAILED
    assert summary["counts"]["errors"] == 1 and summary["counts"]["partitions_merged"] == 1
    report = partition_report(summary, "events", 0)
    assert report["status"] == "error" and "CRC" in report["message"]
    state = PartitionCatalog(store, NS, "events", 0).load()
    assert damaged in state.segments and len(state.segments) == 5
    assert all(before[k] == v for k, v in objects(store).items() if k in before)


def test_key_scan_failure_blocks_the_commit(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    create_topic(store, "kv", 2, cleanup_policy="compact")
    for partition in range(2):
        append_segments(
            store,
            "kv",
            partition,
            [[Record(3 * s + i, BASE, b"k", b"v") for i in range(3)] for s in range(3)],
        )
    damaged = PartitionCatalog(store, NS, "kv", 1).load().segments[0]
    store.delete(layout.join(NS, damaged.key))

    summary = run(store, spark)

    assert summary["status"] == common.STATUS_FAILED
    report = partition_report(summary, "kv", 1)
    assert report["status"] == "error" and report["message"].startswith("key scan:")
    assert damaged in PartitionCatalog(store, NS, "kv", 1).load().segments
    assert partition_report(summary, "kv", 0)["status"] == "compacted"


def test_dry_run_changes_nothing(spark: Any, store: ObjectStore) -> None:
    small_topic(store)
    create_topic(store, "kv", cleanup_policy="compact")
    append_segments(store, "kv", 0, [[Record(0, BASE, b"a", b"1")], [Record(1, BASE, b"a", b"2")]])
    before = objects(store)

    summary = run(store, spark, dry_run=True)

    assert summary["status"] == common.STATUS_OK and "(dry run)" in summary["message"]
    assert summary["counts"]["partitions_planned"] == 3
    assert summary["counts"]["segments_in"] == 11
    assert objects(store) == before
    assert compaction.main(["--store-url", store.url, "--namespace", NS, "--dry-run"]) == 0
    assert objects(store) == before
    assert partition_report(summary, "kv")["action"] == "compact"


def test_the_pause_flag_stops_the_job(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    small_topic(store)
    set_emergency_flag(store, NS, True)
    before = objects(store)
    summary = run(store, spark)
    assert summary["status"] == common.STATUS_PAUSED and objects(store) == before
    args = ["--store-url", store.url, "--namespace", NS, "--paused-exit-code", "75"]
    assert compaction.main(args) == 75
    set_emergency_flag(store, NS, False)

    # raised while the job runs: the partition being committed finishes, the next one stops
    summary = run_with_hook(store, spark, lambda plan: set_emergency_flag(store, NS, True))

    assert summary["status"] == common.STATUS_PAUSED
    assert summary["counts"]["partitions_merged"] == 1
    paused = partition_report(summary, "events", 1)
    assert paused["status"] == "paused" and paused["orphans"]
    assert len(PartitionCatalog(store, NS, "events", 1).load().segments) == 5


def test_executor_tasks_check_the_pause_flag(local_store: ObjectStore) -> None:
    store = local_store
    small_topic(store, partitions=1)
    state = PartitionCatalog(store, NS, "events", 0).load()
    plan = compaction.plan_partition(state, config(segment_bytes=100_000), NS, NOW)
    tasks, _ = compaction.build_tasks([plan], NS, "run1", 0.0)
    set_emergency_flag(store, NS, True)
    result = compaction.rewrite_group(store, tasks[0])
    assert result.paused and result.outputs == []
    set_emergency_flag(store, NS, False)
    result = compaction.rewrite_group(store, tasks[0])
    assert not result.paused and len(result.outputs) == 1
    assert result.outputs[0].key.endswith(f"-mrun1{layout.SEGMENT_SUFFIX}")


def test_unknown_topic_is_a_usage_error(local_store: ObjectStore) -> None:
    args = ["--store-url", local_store.url, "--namespace", NS, "--topics", "nope", "--dry-run"]
    assert compaction.main(args) == common.EXIT_USAGE


@pytest.mark.slow
@pytest.mark.integration
def test_spark_submit_end_to_end(local_store: ObjectStore, tmp_path: Path) -> None:
    """spark-submit runs the file as ``__main__``; its executor functions must still pickle."""
    store = local_store
    write_topic(store, NS, "events", segments=5, records_per_segment=20)
    write_topic(store, NS, "kv", segments=3, configs={"cleanup.policy": "compact"})
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(Path(compaction.__file__).with_name("__main__.py")),
            "--store-url",
            store.url,
            "--namespace",
            NS,
        ],
        env=env,
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == common.EXIT_OK, proc.stderr[-3000:]
    assert "kfs compaction OK: merged 1 and key-compacted 1 of 2 partitions" in proc.stdout
    assert len(PartitionCatalog(store, NS, "events", 0).load().segments) == 1
