"""KfsSparkJobOperator, KfsNewSegmentsSensor and its trigger, and the DAG helpers, without a JVM.

The operator tests put a fake ``spark-submit`` first on ``PATH``: it records the
command line and environment it was given, writes the run summary a job
would (or none) and exits with the status under test, so the operator's
outcome mapping is checked in a second instead of a JVM start.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog
from kfs_core.storage import open_store
from tests.spark_jobs.data import write_segment, write_topic

pytestmark = pytest.mark.airflow

NS = "default"


class FakeTaskInstance:
    """What the operators use of ``context["ti"]``."""

    dag_id = "kfs_test"
    run_id = "manual__2024-01-01T00:00:00+00:00"
    task_id = "job"
    map_index = -1
    try_number = 1

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def get_first_reschedule_date(self, context: Any) -> None:
        return None


FAKE_SPARK_SUBMIT = """\
#!{python}
# Records its command line, writes the summary a KFS job would, exits as told.
import json, os, sys, urllib.parse
from pathlib import Path

argv = sys.argv[1:]
Path(os.environ["FAKE_RECORD"]).write_text(json.dumps(
    {{"argv": argv, "env": {{k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PATH")}}}}
))
app = next(i for i, a in enumerate(argv) if a.endswith(".py"))
job, args = Path(argv[app]).stem, argv[app + 1:]
value = lambda flag: args[args.index(flag) + 1]
status = os.environ["FAKE_STATUS"]
if status != "none":
    root = Path(urllib.parse.urlsplit(value("--store-url")).path)
    key = f"{{value('--namespace')}}/_reports/{{job}}/{{value('--run-id')}}.json"
    summary = {{"job": job, "run_id": value("--run-id"), "status": status,
               "message": f"fake {{status}}", "exit_code": int(os.environ["FAKE_EXIT"]),
               "counts": {{"segments": 3}}, "report_key": key,
               "details": {{"index_only_failure": True, "report": {{"big": list(range(100))}}}}}}
    (root / key).parent.mkdir(parents=True, exist_ok=True)
    (root / key).write_text(json.dumps(summary))
sys.exit(int(os.environ["FAKE_EXIT"]))
"""


@pytest.fixture
def fake_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake spark-submit first on PATH; returns the file it records its call in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "spark-submit"
    script.write_text(FAKE_SPARK_SUBMIT.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    record = tmp_path / "call.json"
    monkeypatch.setenv("FAKE_RECORD", str(record))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    return record


def _operator(**kwargs: Any) -> Any:
    from kfs_airflow.operators import KfsSparkJobOperator

    return KfsSparkJobOperator(task_id="job", **kwargs)


def _execute(operator: Any, monkeypatch: pytest.MonkeyPatch, status: str, exit_code: int) -> Any:
    monkeypatch.setenv("FAKE_STATUS", status)
    monkeypatch.setenv("FAKE_EXIT", str(exit_code))
    ti = FakeTaskInstance()
    try:
        return ti, operator.execute({"ti": ti})
    except Exception as exc:  # noqa: BLE001 - the tests check whatever the task raised
        return ti, exc


# --- KfsSparkJobOperator ---------------------------------------------------------------


def test_operator_submits_the_job_file_with_the_connection_args(
    kfs_connection: str, fake_spark: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import spark_jobs

    operator = _operator(job="validation", topics="orders, events", dry_run="True",
                         job_args=["--fail-on", "any"])  # fmt: skip
    ti, summary = _execute(operator, monkeypatch, "ok", 0)
    assert isinstance(summary, dict), summary
    call = json.loads(fake_spark.read_text())
    argv = call["argv"]
    assert argv[argv.index("--master") + 1] == "local[2]"  # the spark_default connection
    app = str(Path(spark_jobs.__file__).parent / "validation.py")
    run_id = ti.xcom["kfs_run_id"]
    assert argv[argv.index(app) + 1 :] == [
        "--store-url", kfs_connection, "--namespace", NS, "--topics", "orders,events",
        "--dry-run", "--fail-on", "any", "--run-id", run_id,
    ]  # fmt: skip
    assert call["env"]["PYSPARK_PYTHON"] == sys.executable
    # The summary is read back from the store, trimmed for XCom.
    assert summary["run_id"] == run_id and summary["status"] == "ok"
    assert summary["details"] == {"index_only_failure": True}  # "report" is too big
    assert ti.xcom["summary"] == summary


@pytest.mark.parametrize(
    ("status", "exit_code", "expected", "retried"),
    [
        ("failed", 1, "AirflowFailException", False),  # the job found problems: no retry
        ("error", 2, "AirflowFailException", False),  # bad arguments (an unknown topic)
        ("none", 2, "AirflowFailException", False),  # argparse refused before any summary
        ("error", 3, "AirflowException", True),  # the job broke: retry
        ("none", 3, "AirflowException", True),  # spark-submit broke: retry
    ],
)
def test_operator_maps_job_outcomes_to_task_outcomes(
    kfs_connection: str,
    fake_spark: Path,
    monkeypatch: pytest.MonkeyPatch,
    status: str,
    exit_code: int,
    expected: str,
    retried: bool,
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    ti, exc = _execute(_operator(job="index_rebuild"), monkeypatch, status, exit_code)
    assert type(exc).__name__ == expected, exc
    assert isinstance(exc, AirflowFailException) is not retried
    if status != "none":
        # Pushed before failing, for downstream tasks with a trigger rule.
        assert ti.xcom["summary"]["status"] == status
        assert f"fake {status}" in str(exc)
    else:
        assert "summary" not in ti.xcom


def test_operator_runs_local_without_a_spark_connection(
    kfs_connection: str, fake_spark: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT")
    _ti, summary = _execute(_operator(job="retention"), monkeypatch, "ok", 0)
    assert isinstance(summary, dict), summary
    argv = json.loads(fake_spark.read_text())["argv"]
    assert argv[argv.index("--master") + 1] == "local[*]"  # not the provider's "yarn"


def test_spark_submit_env_finds_the_interpreters_spark_submit() -> None:
    from kfs_airflow.hooks.spark_submit import spark_submit_env

    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "spark-submit").exists()
    env = spark_submit_env({"PATH": "/usr/bin:/bin"})
    assert env["PATH"] == f"{bin_dir}{os.pathsep}/usr/bin:/bin"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    # Already resolvable, or an interpreter chosen by the deployment: left alone.
    env = spark_submit_env({"PATH": str(bin_dir), "PYSPARK_PYTHON": "/opt/py/bin/python3"})
    assert "PATH" not in env
    assert env["PYSPARK_PYTHON"] == "/opt/py/bin/python3"


def test_operator_rejects_an_unknown_job() -> None:
    with pytest.raises(ValueError, match="unknown KFS job"):
        _operator(job="vacuum")


# --- KfsNewSegmentsSensor ----------------------------------------------------------------


@pytest.fixture
def topic(kfs_connection: str) -> str:
    store = open_store(kfs_connection)
    try:
        write_topic(store, NS, "orders", segments=2, records_per_segment=20)
    finally:
        store.close()
    return kfs_connection


def _add_segment(store_url: str, created_ms: int) -> int:
    """One more segment at the end of orders/0; the new catalog version."""
    store = open_store(store_url)
    try:
        catalog = PartitionCatalog(store, NS, "orders", 0)
        base = catalog.load().high_watermark
        entry = write_segment(store, NS, "orders", 0, base, 20, created_ms=created_ms)
        return catalog.add_segments([entry]).version
    finally:
        store.close()


def _sensor(**kwargs: Any) -> Any:
    from kfs_airflow.sensors import KfsNewSegmentsSensor

    return KfsNewSegmentsSensor(task_id="wait", poke_interval=1, timeout=60, **kwargs)


def test_sensor_waits_for_a_catalog_version_beyond_the_given_one(topic: str) -> None:
    context = {"ti": FakeTaskInstance()}
    first = _sensor(since_versions=-1).poke(context)  # anything committed counts
    assert first.is_done
    versions = first.xcom_value["versions"]
    assert list(versions) == ["orders/0"]

    waiting = _sensor(topics="orders", since_versions=versions)
    assert not waiting.poke(context).is_done
    version = _add_segment(topic, int(time.time() * 1000))
    done = waiting.poke(context)
    assert done.is_done
    assert done.xcom_value["changed"] == ["orders/0"]
    assert done.xcom_value["versions"]["orders/0"] == version > versions["orders/0"]


def test_sensor_counts_segments_created_after_an_instant(topic: str) -> None:
    context = {"ti": FakeTaskInstance()}
    since = dt.datetime.now(dt.UTC)
    assert not _sensor(created_after=since.isoformat()).poke(context).is_done
    _add_segment(topic, int(time.time() * 1000) + 1)
    assert _sensor(created_after=since).poke(context).xcom_value["new_segments"] == 1
    assert not _sensor(created_after=since, min_segments=2).poke(context).is_done


def test_sensor_defaults_to_segments_since_the_run_started(topic: str) -> None:
    class DagRun:
        start_date = dt.datetime.now(dt.UTC)

    context = {"ti": FakeTaskInstance(), "dag_run": DagRun()}
    assert not _sensor().poke(context).is_done
    _add_segment(topic, int(time.time() * 1000) + 1)
    assert _sensor().poke(context).is_done


def test_sensor_in_reschedule_mode_gives_back_its_slot(topic: str) -> None:
    from airflow.sdk.exceptions import AirflowRescheduleException

    sensor = _sensor(since_versions={"orders/0": 10**6}, mode="reschedule")
    ti = FakeTaskInstance()
    with pytest.raises(AirflowRescheduleException):
        sensor.execute({"ti": ti})


def test_deferrable_sensor_hands_the_wait_to_its_trigger(topic: str) -> None:
    from airflow.sdk.exceptions import TaskDeferred
    from kfs_airflow.sensors import KfsNewSegmentsTrigger

    sensor = _sensor(since_versions=-1, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"ti": FakeTaskInstance()})
    trigger = deferred.value.trigger
    assert isinstance(trigger, KfsNewSegmentsTrigger)
    classpath, kwargs = trigger.serialize()
    assert classpath == "kfs_airflow.sensors.KfsNewSegmentsTrigger"
    assert kwargs["since_versions"] == -1
    again = KfsNewSegmentsTrigger(**kwargs)  # what the triggerer does

    async def first_event() -> Any:
        return await anext(again.run())

    event = asyncio.run(first_event())
    assert event.payload["status"] == "done"
    assert sensor.execute_complete({}, event.payload) == event.payload["found"]


def test_trigger_reports_errors_as_an_event(topic: str) -> None:
    from kfs_airflow.sensors import KfsNewSegmentsTrigger

    trigger = KfsNewSegmentsTrigger(kfs_conn_id="kfs_default", topics=["nope"],
                                    since_versions=-1, created_after_ms=None)  # fmt: skip

    async def first_event() -> Any:
        return await anext(trigger.run())

    event = asyncio.run(first_event())
    assert event.payload["status"] == "error"
    assert "nope" in event.payload["message"]


# --- DAG helpers ----------------------------------------------------------------------------


def test_topic_batches_follow_the_param_and_the_catalog(
    topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowFailException
    from kfs_airflow.dags_support import topic_batches

    store = open_store(topic)
    try:
        for name in ("events", "audit"):
            write_topic(store, NS, name, segments=1, records_per_segment=5)
    finally:
        store.close()
    assert topic_batches("") == ["audit", "events", "orders"]
    assert topic_batches(" orders ,events") == ["orders", "events"]
    assert topic_batches(None, per_task=2) == ["audit,events", "orders"]
    monkeypatch.setenv("KFS_TOPICS_PER_TASK", "3")
    assert topic_batches(None) == ["audit,events,orders"]
    with pytest.raises(AirflowFailException, match="unknown topics nope"):
        topic_batches("orders,nope")


def test_compaction_announces_only_what_it_rewrote() -> None:
    from airflow.sdk.exceptions import AirflowSkipException
    from kfs_airflow.dags_support import announce_compaction

    class Outlet:
        def __init__(self) -> None:
            self.extra: dict[str, Any] = {}

    nothing = {"topics": ["a"], "dry_run": False, "counts": {"partitions_merged": 0}}
    with pytest.raises(AirflowSkipException):
        announce_compaction([nothing, None], Outlet())
    merged = {"topics": ["b"], "dry_run": False, "report_key": "k",
              "counts": {"partitions_merged": 2, "segments_in": 9, "segments_out": 2}}  # fmt: skip
    outlet = Outlet()
    extra = announce_compaction([nothing, merged], outlet)
    assert extra["topics"] == ["a", "b"] and extra["partitions_rewritten"] == 2
    assert outlet.extra == extra
    with pytest.raises(AirflowSkipException):  # a dry run changed nothing
        announce_compaction([{**merged, "dry_run": True}], Outlet())


def test_index_repair_conf_names_the_topics_of_the_report(kfs_connection: str) -> None:
    from kfs_airflow.dags_support import index_repair_conf

    store = open_store(kfs_connection)
    try:
        report = {"problems": [{"topic": "b"}, {"topic": "a"}, {"topic": "b"}],
                  "problems_truncated": False}  # fmt: skip
        store.put(f"{NS}/_reports/validation/r1/report.json", json.dumps(report).encode())
        store.put(f"{NS}/_reports/validation/r2/report.json",
                  json.dumps({**report, "problems_truncated": True}).encode())  # fmt: skip
    finally:
        store.close()

    def summary(index_only: bool, run: str) -> dict[str, Any]:
        key = f"{NS}/_reports/validation/{run}/report.json"
        return {"details": {"index_only_failure": index_only, "report_key": key}}

    assert index_repair_conf(None) is None
    assert index_repair_conf(summary(False, "r1")) is None
    assert index_repair_conf(summary(True, "r1")) == {"topics": "a,b", "dry_run": False}
    assert index_repair_conf(summary(True, "r2")) == {"topics": "", "dry_run": False}


def test_ensure_spark_pool_creates_it_once_and_never_resizes_it(airflow_db: Path) -> None:
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session
    from kfs_airflow.dags_support import SPARK_POOL_SLOTS, ensure_spark_pool

    name = "kfs_spark_test_pool"
    assert ensure_spark_pool(name) is True
    with create_session() as session:
        assert Pool.get_pool(name, session=session).slots == SPARK_POOL_SLOTS
        Pool.create_or_update_pool(name, 5, "resized", include_deferred=False, session=session)
    assert ensure_spark_pool(name) is False
    with create_session() as session:
        assert Pool.get_pool(name, session=session).slots == 5
        Pool.delete_pool(name, session=session)


def test_the_pool_listener_creates_the_pool_when_a_job_starts(
    airflow_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.jobs.job import Job
    from airflow.listeners.listener import get_listener_manager
    from airflow.models.pool import Pool
    from airflow.sdk.execution_time.task_runner import TaskRunnerMarker
    from airflow.utils.session import create_session
    from kfs_airflow import dags_support

    monkeypatch.setattr(dags_support, "SPARK_POOL", "kfs_spark_listener_pool")
    manager = get_listener_manager()
    listener = dags_support.SparkPoolListener()
    manager.add_listener(listener)
    try:
        # A task process may not use the metadata database: it creates nothing.
        manager.hook.on_starting(component=TaskRunnerMarker())
        with create_session() as session:
            assert Pool.get_pool("kfs_spark_listener_pool", session=session) is None
        Job()  # what a scheduler, dag-processor or triggerer creates first; it calls on_starting
    finally:
        manager.pm.unregister(listener)
    with create_session() as session:
        pool = Pool.get_pool("kfs_spark_listener_pool", session=session)
        assert pool is not None and pool.slots == dags_support.SPARK_POOL_SLOTS
        Pool.delete_pool("kfs_spark_listener_pool", session=session)
