"""spark_jobs.common: options, descriptors, executors, summaries, the pause flag, exit codes."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kfs_core.errors import UnknownTopic
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.storage import ObjectStore
from spark_jobs import common
from spark_jobs.common import JobContext, JobOptions, JobResult, SegmentDescriptor
from tests.spark_jobs.data import write_topic

NS = "ns"


def _segment_size(store: ObjectStore, descriptor: SegmentDescriptor) -> tuple[str, int]:
    return descriptor.key, store.head(descriptor.segment_object_key).size


def test_parser_builds_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFS_STORE_URL", raising=False)
    monkeypatch.setenv("KFS_NAMESPACE", "from-env")
    parser = common.job_parser("demo", "Demo job.\n\nMore text.")
    options = common.coerce_options(
        ["--store-url", "/tmp/x", "--topics", "a, b,", "--dry-run", "--master", "local[1]"],
        parser,
        JobOptions,
    )
    assert options == JobOptions(
        store_url="/tmp/x",
        namespace="from-env",
        topics=("a", "b"),
        dry_run=True,
        master="local[1]",
    )
    assert common.coerce_options(options, parser, JobOptions) is options
    with pytest.raises(SystemExit) as exc:
        common.coerce_options([], parser, JobOptions)  # no store URL anywhere
    assert exc.value.code == common.EXIT_USAGE


def test_run_id_and_report_key() -> None:
    run_id = common.new_run_id()
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", run_id)
    assert common.new_run_id() != run_id
    assert common.report_key("ns", "validation", run_id) == f"ns/_reports/validation/{run_id}.json"


def test_redact_url() -> None:
    assert (
        common.redact_url("s3://b/p?endpoint_url=http://h:1") == "s3://b/p?endpoint_url=http://h:1"
    )
    assert common.redact_url("http://user:secret@host:9000/x") == "http://host:9000/x"


def test_descriptors_and_executors(spark: Any, store: ObjectStore) -> None:
    write_topic(store, NS, "orders", partitions=2, segments=2, records_per_segment=30)
    write_topic(store, NS, "audit", partitions=1, segments=1, records_per_segment=5)

    assert common.list_partitions(store, NS) == [("audit", 0), ("orders", 0), ("orders", 1)]
    descriptors = common.read_descriptors(store, NS, ["orders"])
    assert [(d.topic, d.partition, d.base_offset) for d in descriptors] == [
        ("orders", 0, 0),
        ("orders", 0, 30),
        ("orders", 1, 0),
        ("orders", 1, 30),
    ]
    assert descriptors[1].segment_object_key == f"{NS}/orders/0/segment-{30:020d}.kfs"
    assert descriptors[1].index_object_key.endswith(".index")
    assert descriptors[1].partition_prefix == f"{NS}/orders/0/"

    frame = common.descriptors_dataframe(spark, descriptors)
    assert frame.count() == 4
    assert frame.groupBy("partition").count().orderBy("partition").collect()[1]["count"] == 2

    # The store crosses into the executors pickled; results come back in input order.
    sizes = common.map_in_executors(spark, store, descriptors, _segment_size)
    assert sizes == [(d.key, d.size_bytes) for d in descriptors]
    assert common.map_in_executors(spark, store, [], _segment_size) == []

    with pytest.raises(UnknownTopic):
        common.read_descriptors(store, NS, ["no-such-topic"])


def test_execute_stores_summary(store: ObjectStore, capsys: pytest.CaptureFixture[str]) -> None:
    options = JobOptions(store_url=store.url, namespace=NS, topics=("t",))
    seen: list[JobContext] = []

    def body(ctx: JobContext) -> JobResult:
        seen.append(ctx)
        with ctx.phase("work"):
            pass
        return JobResult(common.STATUS_FAILED, "2 problems", counts={"problems": 2})

    summary = common.execute("demo", options, body)
    assert seen[0].report_prefix == f"{NS}/_reports/demo/{summary['run_id']}/"
    assert summary["status"] == "failed"
    assert summary["exit_code"] == common.EXIT_FAILED
    assert summary["counts"] == {"problems": 2}
    assert "work" in summary["timings"]
    assert summary["spark"] is None  # the body never asked for a session
    stored = json.loads(store.get(summary["report_key"]))
    assert stored == json.loads(json.dumps(summary))
    line = capsys.readouterr().out.strip()
    assert line.startswith("kfs demo FAILED: 2 problems [problems=2]")
    assert "\n" not in line


def test_execute_honours_the_pause_flag(store: ObjectStore) -> None:
    set_emergency_flag(store, NS, True)
    options = JobOptions(store_url=store.url, namespace=NS, paused_exit_code=75)

    def body(ctx: JobContext) -> JobResult:
        raise AssertionError("a paused job must not run")

    summary = common.execute("demo", options, body)
    assert summary["status"] == common.STATUS_PAUSED
    assert summary["exit_code"] == 75
    assert "emergency" in summary["message"]
    assert store.exists(summary["report_key"])
    set_emergency_flag(store, NS, False)
    assert common.execute("demo", options, lambda ctx: JobResult())["status"] == "ok"


def test_execute_records_errors(local_store: ObjectStore) -> None:
    options = JobOptions(store_url=local_store.url, namespace=NS)

    def body(ctx: JobContext) -> JobResult:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        common.execute("demo", options, body, run_id="20240101T000000Z-abcdef")
    stored = json.loads(local_store.get(common.report_key(NS, "demo", "20240101T000000Z-abcdef")))
    assert stored["status"] == common.STATUS_ERROR
    assert stored["exit_code"] == common.EXIT_ERROR
    assert "boom" in stored["message"]


def _demo_run(options: Any, spark: Any = None) -> dict[str, Any]:
    opts = common.coerce_options(options, common.job_parser("demo"), JobOptions)

    def body(ctx: JobContext) -> JobResult:
        common.list_partitions(ctx.store, ctx.namespace, ctx.options.topics)
        return JobResult(message="fine")

    return common.execute("demo", opts, body, spark)


def test_main_exit_codes(local_store: ObjectStore, capsys: pytest.CaptureFixture[str]) -> None:
    parser = common.job_parser("demo")
    args = ["--store-url", local_store.url, "--namespace", NS]
    assert common.main(_demo_run, parser, args) == common.EXIT_OK
    assert common.main(_demo_run, parser, [*args, "--topics", "nope"]) == common.EXIT_USAGE
    assert "unknown topic 'nope'" in capsys.readouterr().err
    assert common.main(_demo_run, parser, ["--store-url", "ftp://x", "--namespace", NS]) == 2
    set_emergency_flag(local_store, NS, True)
    assert common.main(_demo_run, parser, args) == common.EXIT_OK
    assert common.main(_demo_run, parser, [*args, "--paused-exit-code", "99"]) == 99


def test_get_spark_reuses_the_active_session(spark: Any) -> None:
    assert common.get_spark("anything", master="local[1]") is spark


def test_s3_endpoint_option_applies_to_s3_urls_only(tmp_path: Any) -> None:
    options = JobOptions(store_url="s3://bucket/prefix", namespace=NS, s3_endpoint_url="http://h:9")
    s3 = options.open_store()
    assert s3.url == "s3://bucket/prefix?endpoint_url=http%3A%2F%2Fh%3A9"
    local = JobOptions(store_url=str(tmp_path), namespace=NS, s3_endpoint_url="http://h:9")
    assert local.open_store().url == f"file://{tmp_path}"
