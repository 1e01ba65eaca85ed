"""`kfs_core.reports`: job names, statuses, exit codes, report keys, the models of job reports."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from kfs_core import reports
from kfs_core.reports import RunSummary, ValidationReport
from kfs_core.storage import ObjectStore, open_store

NS = "ns"


def test_report_keys() -> None:
    run = "20240102T030405Z-1a2b3c"
    assert reports.reports_prefix(NS, "compaction") == "ns/_reports/compaction/"
    assert reports.report_key(NS, "compaction", run) == f"ns/_reports/compaction/{run}.json"
    assert reports.run_files_prefix(NS, "retention", run) == f"ns/_reports/retention/{run}/"
    assert reports.validation_report_key(NS, run) == f"ns/_reports/validation/{run}/report.json"
    assert reports.data_docs_prefix(NS, run) == f"ns/_reports/validation/{run}/data_docs/"
    # An empty namespace is allowed, as in the catalog's keys.
    assert reports.report_key("", "validation", run) == f"_reports/validation/{run}.json"
    assert reports.run_id_of(NS, "compaction", reports.report_key(NS, "compaction", run)) == run
    for other in (
        f"ns/_reports/compaction/{run}/report.json",  # a run's own file, not its summary
        f"ns/_reports/validation/{run}.json",  # another job
        "ns/_reports/compaction/.hidden.json",  # not a run id
        f"ns/_reports/compaction/{run}.txt",
    ):
        assert reports.run_id_of(NS, "compaction", other) is None, other


def test_run_ids_sort_by_start_time() -> None:
    early = reports.new_run_id(dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC))
    late = reports.new_run_id(dt.datetime(2024, 1, 2, 3, 4, 6, tzinfo=dt.UTC))
    assert early.startswith("20240102T030405Z-") and early < late
    assert reports.is_run_id(early) and reports.is_run_id(reports.new_run_id())
    assert (
        not reports.is_run_id("../x") and not reports.is_run_id("a/b") and not reports.is_run_id("")
    )


def test_statuses_map_to_exit_codes() -> None:
    assert reports.exit_code_for(reports.STATUS_OK) == reports.EXIT_OK == 0
    assert reports.exit_code_for(reports.STATUS_FAILED) == reports.EXIT_FAILED == 1
    assert reports.exit_code_for(reports.STATUS_PAUSED) == reports.EXIT_OK
    assert reports.exit_code_for(reports.STATUS_PAUSED, paused_exit_code=75) == 75
    assert reports.exit_code_for(reports.STATUS_ERROR) == reports.EXIT_ERROR == 3
    assert reports.exit_code_for("anything else") == reports.EXIT_ERROR
    assert reports.EXIT_USAGE == 2
    assert reports.JOBS == (
        "checkpoint", "compaction", "index_rebuild", "retention", "tables", "validation",
    )  # fmt: skip


def test_redact_url() -> None:
    assert reports.redact_url("http://user:secret@host:9000/x") == "http://host:9000/x"
    assert reports.redact_url("file:///srv/kfs") == "file:///srv/kfs"


def _run_demo_job(store: ObjectStore) -> tuple[dict[str, object], bytes]:
    from spark_jobs import common

    options = common.JobOptions(store_url=store.url, namespace=NS, topics=("a", "b"))

    def body(ctx: common.JobContext) -> common.JobResult:
        with ctx.phase("work"):
            pass
        return common.JobResult(
            common.STATUS_FAILED,
            "2 problems",
            counts={"problems": 2, "partitions": 3},
            details={"report_key": "ns/_reports/demo/x/report.json", "rows": [{"topic": "a"}]},
        )

    summary = common.execute("demo", options, body)
    return summary, store.get(str(summary["report_key"]))


def test_a_stored_run_summary_round_trips_through_the_model(tmp_path: object) -> None:
    store = open_store(str(tmp_path))
    returned, stored = _run_demo_job(store)
    summary = RunSummary.model_validate_json(stored)
    assert summary.to_json() == stored  # byte for byte: the model is the stored form
    assert summary.model_dump() == returned == json.loads(stored)
    assert set(RunSummary.model_fields) == set(json.loads(stored))  # no field left undeclared
    assert (summary.job, summary.status, summary.exit_code) == ("demo", "failed", 1)
    assert summary.topics == ["a", "b"] and summary.counts == {"problems": 2, "partitions": 3}
    assert summary.spark is None and "work" in summary.timings
    assert summary.detail_str("report_key") == "ns/_reports/demo/x/report.json"
    assert summary.detail_str("rows") is None


def test_a_partial_summary_reads_with_defaults_and_keeps_unknown_fields() -> None:
    """What a killed run or an older/newer writer leaves behind still reads."""
    summary = RunSummary.model_validate({"job": "validation", "status": "ok", "future": [1]})
    assert (summary.run_id, summary.counts, summary.details, summary.exit_code) == (
        "",
        {},
        {},
        None,
    )
    assert summary.started_at is None and summary.dry_run is False
    assert summary.model_dump(exclude_unset=True) == {
        "job": "validation", "status": "ok", "future": [1],
    }  # fmt: skip
    report = ValidationReport.model_validate({"problems": [{"topic": "b"}, {"topic": "a"}]})
    assert report.success is None and report.statistics.evaluated_expectations == 0
    assert report.problem_topics() == ["a", "b"]


def test_bad_field_types_are_refused() -> None:
    with pytest.raises(ValueError, match="counts"):
        RunSummary.model_validate({"counts": {"segments": "many"}})


def test_table_docs_keys_stay_inside_the_snapshots_data_docs() -> None:
    run = "20240101T000000Z-aaaaaa"
    assert reports.table_docs_key("ns", run, "orders_eu", "3", "index.html") == (
        f"ns/_reports/tables/{run}/orders_eu/3/data_docs/index.html"
    )
    for table, commit, path in [
        ("..", "3", "index.html"),
        ("orders", "x", "index.html"),
        ("orders/x", "3", "index.html"),
        ("orders", "3", "../../report.json"),
        ("orders", "3", ""),
        ("orders", "3", "a\\b"),
    ]:
        assert reports.table_docs_key("ns", run, table, commit, path) is None
    assert reports.table_docs_key("ns", "../x", "orders", "3", "index.html") is None
