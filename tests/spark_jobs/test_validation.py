"""The validation job: seeded faults found in the right row and column, the GX report, exit codes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog, SegmentEntry, TopicRegistry, layout
from kfs_core.catalog.actions import AbortedRange
from kfs_core.formats.segment import SegmentWriter
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.records import Record, encode_batch
from kfs_core.records.batch import CONTROL_ABORT, CONTROL_COMMIT, encode_control_key
from kfs_core.storage import ObjectStore
from spark_jobs import common, validation
from spark_jobs.common import SegmentDescriptor
from spark_jobs.validation import ValidationOptions
from tests.spark_jobs.data import (
    BASE_TIMESTAMP_MS,
    WrittenPartition,
    batch_byte,
    flip_bit,
    point_index_off_batch,
    put_orphan,
    truncate,
    write_segment,
    write_topic,
)

NS = "ns"
TOPIC = "orders"

CRITICAL = {
    "segment_present",
    "header_ok",
    "footer_ok",
    "body_crc",
    "batch_crc",
    "batches_ok",
    "counts_ok",
    "catalog_ok",
    "no_overlap",
    "index_present",
    "index_ok",
    "transactions_ok",
    "key_present",
}


def _objects(store: ObjectStore) -> dict[str, str]:
    """Every object but the reports, with its etag: what a read-only job must leave alone."""
    return {info.key: info.etag for info in store.list(NS + "/") if "/_reports/" not in info.key}


def _run(spark: Any, store: ObjectStore, **options: Any) -> dict[str, Any]:
    options.setdefault("orphan_grace_s", 0.0)
    options.setdefault("data_docs", False)  # built and checked where a test asks for them
    return validation.run(ValidationOptions(store_url=store.url, namespace=NS, **options), spark)


def _expectations(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in summary["details"]["report"]["expectations"]}


@pytest.fixture
def written(store: ObjectStore) -> list[WrittenPartition]:
    """Two partitions of three 250-record segments (index entries every 100 records)."""
    return write_topic(store, NS, TOPIC, partitions=2, segments=3, records_per_segment=250)


def test_clean_namespace_passes(
    spark: Any, store: ObjectStore, written: list[WrittenPartition]
) -> None:
    before = _objects(store)
    summary = _run(spark, store, data_docs=True)

    assert summary["status"] == common.STATUS_OK, summary["message"]
    assert summary["exit_code"] == common.EXIT_OK
    assert summary["counts"]["segments"] == 6
    assert summary["counts"]["partitions"] == 2
    assert summary["spark"]["master"] == "local[2]"
    assert summary["counts"]["records"] == 1500
    assert summary["counts"]["orphans"] == 0
    report_key = summary["details"]["report_key"]
    assert report_key == f"{NS}/_reports/validation/{summary['run_id']}/report.json"
    report = json.loads(store.get(report_key))
    assert report["success"] is True
    assert report["run_id"] == summary["run_id"]
    assert report["critical_failures"] == []
    assert report["index_only_failure"] is False
    assert {"catalog", "segments", "listing", "expectations"} <= set(report["timings"])
    by_id = {e["id"]: e for e in report["expectations"]}
    assert {i for i, e in by_id.items() if e["critical"]} == CRITICAL
    assert all(e["success"] for e in by_id.values())
    assert by_id["segment_max_size"]["observed_value"] == max(
        s.size_bytes for part in written for s in part.segments
    )
    assert by_id["orphans"]["observed_value"] == 0
    # Data Docs were built locally and uploaded, index page first.
    docs_index = summary["details"]["data_docs_index"]
    assert docs_index == f"{NS}/_reports/validation/{summary['run_id']}/data_docs/index.html"
    assert b"<html" in store.get(docs_index).lower()
    docs = [k.key for k in store.list(f"{NS}/_reports/validation/{summary['run_id']}/data_docs/")]
    assert any(k.endswith(".css") for k in docs)
    assert any("/validations/" in k and k.endswith(".html") for k in docs)
    # The summary is stored too; nothing else was touched.
    assert json.loads(store.get(summary["report_key"]))["status"] == "ok"
    assert _objects(store) == before


def _flip_batch_bit(store: ObjectStore, part: WrittenPartition) -> str:
    entry = part.segments[1]
    key = part.object_key(entry)
    flip_bit(store, key, batch_byte(store, key, batch=1, offset_in_batch=80))
    return entry.key


def _truncate_segment(store: ObjectStore, part: WrittenPartition) -> str:
    entry = part.segments[2]
    truncate(store, part.object_key(entry), 10)
    return entry.key


def _delete_index(store: ObjectStore, part: WrittenPartition) -> str:
    entry = part.segments[0]
    store.delete(part.index_object_key(entry))
    return entry.key


def _index_off_batch(store: ObjectStore, part: WrittenPartition) -> str:
    entry = part.segments[1]
    point_index_off_batch(store, part.index_object_key(entry), entry=1)
    return entry.key


def _delete_segment(store: ObjectStore, part: WrittenPartition) -> str:
    entry = part.segments[1]
    store.delete(part.object_key(entry))
    return entry.key


def _orphan(store: ObjectStore, part: WrittenPartition) -> str:
    key = put_orphan(store, part, 10_000)
    return key[len(NS) + 1 :]


# fault -> (column, bad value, failing expectations, index-only, critical)
FAULTS: dict[
    str, tuple[Callable[[ObjectStore, WrittenPartition], str], str, Any, set[str], bool]
] = {
    "flipped_bit": (_flip_batch_bit, "crc_failures", 1, {"batch_crc", "body_crc"}, False),
    "truncated_segment": (
        _truncate_segment,
        "footer_ok",
        False,
        {"footer_ok", "batches_ok", "catalog_ok"},
        False,
    ),
    "deleted_index": (_delete_index, "index_missing", True, {"index_present"}, True),
    "index_off_batch": (_index_off_batch, "index_ok", False, {"index_ok"}, True),
    "missing_segment": (_delete_segment, "segment_missing", True, {"segment_present"}, False),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_seeded_fault_is_found(
    spark: Any, store: ObjectStore, written: list[WrittenPartition], fault: str
) -> None:
    damage, column, bad_value, failing, index_only = FAULTS[fault]
    bad_key = damage(store, written[1])
    before = _objects(store)

    summary = _run(spark, store)
    assert summary["status"] == common.STATUS_FAILED
    assert summary["exit_code"] == common.EXIT_FAILED
    report = summary["details"]["report"]
    # Exactly the damaged segment's row has a problem, in the right column.
    assert [r["key"] for r in report["problems"]] == [bad_key]
    row = report["problems"][0]
    assert row[column] == bad_value
    assert row["topic"] == TOPIC
    assert row["partition"] == 1
    assert report["counts"]["segments"] == 6
    assert set(report["failed_expectations"]) == failing
    assert set(report["critical_failures"]) == failing
    assert report["index_only_failure"] is index_only
    for check in failing:
        failing_rows = _expectations(summary)[check]["failing_rows"]
        assert [r["key"] for r in failing_rows] == [bad_key]
        assert failing_rows[0]["partition"] == 1
    assert _objects(store) == before


def test_truncated_segment_details(
    spark: Any, store: ObjectStore, written: list[WrittenPartition]
) -> None:
    bad_key = _truncate_segment(store, written[0])
    row = {r["key"]: r for r in validation.collect_rows(spark, store, NS)}[bad_key]
    assert row["footer_ok"] is False
    assert row["header_ok"] is True
    assert row["batches_ok"] is False  # the last batch runs past the end
    assert row["catalog_ok"] is False  # the size no longer matches
    assert row["size_bytes"] == written[0].segments[2].size_bytes - 10
    assert "footer" in row["error"]


def test_orphans_are_counted_and_not_critical(
    spark: Any, store: ObjectStore, written: list[WrittenPartition]
) -> None:
    orphan_key = _orphan(store, written[0])
    # A tombstoned segment's objects are still referenced: not orphans.
    catalog = PartitionCatalog(store, NS, TOPIC, 1)
    catalog.remove([written[1].segments[0]], log_start_offset=250)

    summary = _run(spark, store)
    assert summary["status"] == common.STATUS_OK  # only a non-critical expectation failed
    assert summary["exit_code"] == common.EXIT_OK
    assert summary["counts"]["orphans"] == 1
    report = summary["details"]["report"]
    assert report["failed_expectations"] == ["orphans"]
    assert report["critical_failures"] == []
    assert report["index_only_failure"] is False
    orphans = _expectations(summary)["orphans"]
    assert orphans["observed_value"] == 1
    assert orphans["critical"] is False
    assert [r["key"] for r in report["problems"] if r["row_type"] == "orphan"] == [orphan_key]

    assert _run(spark, store, fail_on="any")["exit_code"] == common.EXIT_FAILED
    assert _run(spark, store, max_orphans=1)["details"]["report"]["success"] is True
    # A fresh upload is an upload in flight, not an orphan.
    assert _run(spark, store, orphan_grace_s=3600)["counts"]["orphans"] == 0


def test_gaps_are_counted_overlaps_fail(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    write_topic(store, NS, "compacted", segments=3, records_per_segment=20, gap=5)
    # Overlap: the catalog says 0..19, the object really holds 0..29.
    from kfs_core.catalog import TopicRegistry

    TopicRegistry(store, NS).create_topic("overlap", 1)
    first = write_segment(store, NS, "overlap", 0, 0, 30)
    second = write_segment(store, NS, "overlap", 0, 20, 10)
    lying = first.model_copy(update={"last_offset": 19, "record_count": 20})
    PartitionCatalog(store, NS, "overlap", 0).add_segments([lying, second])

    rows = validation.collect_rows(spark, store, NS, orphan_grace_s=0)
    gaps = [(r["topic"], r["base_offset"], r["gap_before"]) for r in rows]
    assert gaps == [
        ("compacted", 0, 0),
        ("compacted", 25, 5),
        ("compacted", 50, 5),
        ("overlap", 0, 0),
        ("overlap", 20, 0),
    ]
    overlap = [r for r in rows if r["topic"] == "overlap"]
    assert [r["overlap_prev"] for r in overlap] == [False, True]
    assert overlap[0]["catalog_ok"] is False

    summary = _run(spark, store)
    assert summary["counts"]["gaps"] == 2
    assert set(summary["details"]["critical_failures"]) == {"no_overlap", "catalog_ok"}
    assert _run(spark, store, topics=("compacted",))["status"] == common.STATUS_OK


def test_control_batches_and_the_transaction_index_are_checked(
    spark: Any, local_store: ObjectStore
) -> None:
    """Markers are checked, and so is every aborted transaction the catalog lists."""
    store = local_store
    TopicRegistry(store, NS).create_topic("txn", 1)
    txn = {"producer_id": 9, "producer_epoch": 0, "is_transactional": True}

    def marker(offset: int, kind: int, value: bytes = struct.pack(">hi", 0, 3)) -> bytes:
        record = Record(offset, BASE_TIMESTAMP_MS, encode_control_key(kind), value)
        return encode_batch([record], base_offset=offset, is_control=True, **txn)

    def segment(batches: list[bytes]) -> SegmentEntry:
        writer = SegmentWriter(created_ms=BASE_TIMESTAMP_MS)
        for batch in batches:
            writer.append(batch)
        sealed = writer.finish()
        entry = SegmentEntry.for_sealed("txn", 0, sealed)
        store.put(layout.join(NS, entry.key), sealed.data)
        store.put(layout.join(NS, entry.index_key), sealed.index)
        return entry

    data = [Record(o, BASE_TIMESTAMP_MS, b"k", b"v") for o in (0, 1)]
    good = segment([encode_batch(data, base_offset=0, **txn), marker(2, CONTROL_ABORT)]).model_copy(
        update={"aborted": (AbortedRange(producer_id=9, first_offset=0, last_offset=2),)}
    )
    bad_marker = segment([marker(3, CONTROL_COMMIT, b"\x00\x05")])  # not version 0 + epoch
    missing = segment(
        [encode_batch([Record(4, BASE_TIMESTAMP_MS, b"k", b"v")], base_offset=4, **txn)]
    )
    missing = missing.model_copy(
        update={"aborted": (AbortedRange(producer_id=9, first_offset=4, last_offset=4),)}
    )
    PartitionCatalog(store, NS, "txn", 0).add_segments([good, bad_marker, missing])

    rows = validation.collect_rows(spark, store, NS, orphan_grace_s=0)
    assert [(r["control_batches"], r["txn_ok"]) for r in rows] == [
        (1, True),
        (1, False),
        (0, False),
    ]
    assert "marker value" in rows[1]["error"] and "no abort marker" in rows[2]["error"]
    summary = _run(spark, store)
    assert set(summary["details"]["critical_failures"]) == {"transactions_ok"}
    assert summary["counts"]["transaction_problems"] == 2


def test_results_dataframe(spark: Any, local_store: ObjectStore) -> None:
    parts = write_topic(local_store, NS, TOPIC, segments=2, records_per_segment=30)
    _flip_batch_bit(local_store, parts[0])
    frame = validation.validate(spark, local_store, NS, orphan_grace_s=0)
    assert tuple(frame.columns) == validation.COLUMNS
    bad = frame.where("crc_failures > 0").select("key", "batch_count", "body_crc_ok").collect()
    assert [(r["key"], r["batch_count"], r["body_crc_ok"]) for r in bad] == [
        (parts[0].segments[1].key, 3, False)
    ]


def test_suite_table_is_the_results_dataframe(spark: Any, local_store: ObjectStore) -> None:
    """The suite runs over `rows_pandas`, built on the driver.

    It is the same table as the Spark DataFrame, value for value and null for
    null (segment and orphan rows).
    """
    parts = write_topic(local_store, NS, TOPIC, segments=2, records_per_segment=30)
    _flip_batch_bit(local_store, parts[0])
    put_orphan(local_store, parts[0], 1_000)
    rows = validation.collect_rows(spark, local_store, NS, orphan_grace_s=0)
    assert {r["row_type"] for r in rows} == {"segment", "orphan"}
    table = validation.rows_pandas(rows)
    via_spark = validation.rows_dataframe(spark, rows).toPandas()
    assert tuple(table.columns) == validation.COLUMNS
    assert [str(t) for t in table.dtypes].count("object") == 0  # nullable dtypes throughout

    def cells(frame: Any) -> list[list[Any]]:
        return [
            [None if validation._plain(v) is None else validation._plain(v) for v in row]
            for row in frame.itertuples(index=False)
        ]

    assert cells(table) == cells(via_spark)
    assert len(validation.rows_pandas([])) == 0


def test_scan_chunks_split_by_bytes_in_order() -> None:
    def seg(base: int, size: int) -> SegmentDescriptor:
        key = layout.segment_key(TOPIC, 0, base)
        entry = SegmentEntry(
            base_offset=base,
            last_offset=base,
            record_count=1,
            size_bytes=size,
            index_size_bytes=16,
            min_timestamp=0,
            max_timestamp=0,
            codec=0,
            created_ms=0,
            key=key,
            index_key=layout.index_key_for(key),
        )
        return SegmentDescriptor(NS, TOPIC, 0, entry)

    segments = [seg(i, size) for i, size in enumerate([100, 1, 1, 1, 1, 100, 1, 5])]
    chunks = validation.scan_chunks(segments, slots=2, chunk_bytes=1 << 30)
    assert [d for chunk in chunks for d in chunk] == segments  # order kept, nothing lost
    assert [sum(d.size_bytes for d in c) for c in chunks] == [104, 106]
    # More bytes than a chunk holds: more chunks, a multiple of the slots.
    even = [seg(i, 10) for i in range(12)]
    assert [len(c) for c in validation.scan_chunks(even, slots=2, chunk_bytes=30)] == [3] * 4
    assert [len(c) for c in validation.scan_chunks(even, slots=3, chunk_bytes=25)] == [2] * 6
    assert [len(c) for c in validation.scan_chunks(even, slots=1)] == [12]
    assert len(validation.scan_chunks(segments[:1], slots=4)) == 1
    assert validation.scan_chunks([], slots=2) == []


def test_fail_on_none_and_dry_run(
    spark: Any, local_store: ObjectStore, capsys: pytest.CaptureFixture[str]
) -> None:
    store = local_store
    parts = write_topic(store, NS, TOPIC, segments=2, records_per_segment=30)
    _delete_index(store, parts[0])

    summary = _run(spark, store, fail_on="none")
    assert summary["status"] == common.STATUS_OK
    assert summary["details"]["critical_failures"] == ["index_present"]

    summary = _run(spark, store, dry_run=True)
    assert summary["exit_code"] == common.EXIT_FAILED
    assert summary["details"]["report_key"] is None
    assert summary["details"]["data_docs_index"] is None
    assert not list(store.list(f"{NS}/_reports/validation/{summary['run_id']}/"))
    assert store.exists(summary["report_key"])  # the run summary only
    assert "kfs validation FAILED" in capsys.readouterr().out


def test_main_exit_status_and_pause(spark: Any, local_store: ObjectStore) -> None:
    store = local_store
    parts = write_topic(store, NS, TOPIC, segments=2, records_per_segment=30)
    args = ["--store-url", store.url, "--namespace", NS, "--orphan-grace-s", "0"]
    assert validation.main([*args, "--no-data-docs"]) == common.EXIT_OK
    _flip_batch_bit(store, parts[0])
    assert validation.main(args) == common.EXIT_FAILED
    assert validation.main([*args, "--fail-on", "none"]) == common.EXIT_OK

    set_emergency_flag(store, NS, True)
    summary = validation.run(args, spark)
    assert summary["status"] == common.STATUS_PAUSED
    assert summary["exit_code"] == common.EXIT_OK
    assert summary["details"] == {}
    assert validation.main([*args, "--paused-exit-code", "99"]) == 99


def test_empty_namespace_passes(spark: Any, local_store: ObjectStore) -> None:
    summary = _run(spark, local_store, data_docs=True)
    assert summary["status"] == common.STATUS_OK
    assert summary["counts"]["segments"] == 0
    assert local_store.exists(summary["details"]["data_docs_index"])


@pytest.mark.slow
@pytest.mark.integration
def test_spark_submit_end_to_end(local_store: ObjectStore, tmp_path: Path) -> None:
    """spark-submit runs the job as an application; the exit status reaches the caller."""
    store = local_store
    parts = write_topic(store, NS, TOPIC, partitions=2, segments=2, records_per_segment=40)
    _delete_index(store, parts[1])
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("KFS_STORE_URL", None)
    proc = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(Path(validation.__file__)),
            "--store-url",
            store.url,
            "--namespace",
            NS,
            "--orphan-grace-s",
            "0",
        ],
        env=env,
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == common.EXIT_FAILED, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("kfs validation")]
    assert len(lines) == 1, proc.stdout
    assert "FAILED" in lines[0]
    assert "index_present" in lines[0]
    summaries = [i.key for i in store.list(f"{NS}/_reports/validation/") if i.key.count("/") == 3]
    assert len(summaries) == 1
    summary = json.loads(store.get(summaries[0]))
    assert summary["spark"]["master"] == "local[1]"
    assert summary["details"]["index_only_failure"] is True
    assert store.exists(summary["details"]["data_docs_index"])


def test_the_summary_and_report_round_trip_through_their_models(
    spark: Any, store: ObjectStore, written: list[WrittenPartition]
) -> None:
    """What the job stores is exactly `RunSummary` / `ValidationReport`, field for field."""
    from kfs_core.reports import ExpectationOutcome, RunSummary, ValidationReport

    _flip_batch_bit(store, written[0])
    summary = _run(spark, store)
    stored = store.get(summary["report_key"])
    model = RunSummary.model_validate_json(stored)
    assert model.to_json() == stored
    assert set(RunSummary.model_fields) == set(json.loads(stored))
    assert model.spark is not None and model.spark.master == "local[2]"
    raw = store.get(summary["details"]["report_key"])
    report = ValidationReport.model_validate_json(raw)
    assert report.to_json() == raw
    assert (
        report.model_dump()
        == json.loads(raw)
        == json.loads(json.dumps(summary["details"]["report"]))
    )
    doc = json.loads(raw)
    assert set(ValidationReport.model_fields) == set(doc)
    assert all(set(ExpectationOutcome.model_fields) == set(e) for e in doc["expectations"])
    assert {"batch_crc", "body_crc"} <= set(report.failed_expectations)
    assert report.problem_topics() == [TOPIC]


def test_a_run_id_that_reads_as_a_bad_timezone_offset_validates(
    spark: Any, local_store: ObjectStore
) -> None:
    # dateutil reads "...Z-9146ad" as an offset of -91:46; GX parsed run names as dates
    # when no run time was given, and the whole run failed (seen as a rare flake).
    write_topic(local_store, NS, TOPIC, segments=1, records_per_segment=10)
    summary = _run(spark, local_store, run_id="20261124T103000Z-9146ad", data_docs=True)
    assert summary["status"] == common.STATUS_OK, summary["message"]
    assert summary["run_id"] == "20261124T103000Z-9146ad"
