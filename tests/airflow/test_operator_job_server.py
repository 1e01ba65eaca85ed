"""KfsSparkJobOperator on a real job server: ``kfs jobs serve`` (spark-submit'ed) over HTTP.

One server for the module, started the way an operator would (`kfs jobs serve
--listen`); the tasks run the real jobs on it against a local store that the
``kfs_default`` connection names, with ``jobs_server`` in its extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.airflow.conftest import kfs_connection_env
from tests.airflow.test_operators import FakeTaskInstance
from tests.spark_jobs.data import write_topic

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

NS = "default"


@pytest.fixture(scope="module")
def jobs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``kfs jobs serve`` on a free loopback port; its URL once it answers /healthz."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("jobs-server") / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KFS_")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kfs_core.cli", "jobs", "serve", "--listen",
             f"127.0.0.1:{port}", "--master", "local[2]"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the job server exited: {log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as answer:
                return bool(json.loads(answer.read())["status"] == "ok")
        except OSError:
            return False

    try:
        wait_for(healthy, timeout=180, interval=0.5, what="the job server")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        # SIGTERM reaches spark-submit's JVM (the server's Python is its child), which
        # stops the SparkContext and exits as JVMs do on a TERM ...
        assert proc.returncode in (0, 143), log_path.read_text()[-3000:]
        assert "Successfully stopped SparkContext" in log_path.read_text()
        # ... and the Python driver goes with it, freeing the port.
        wait_for(lambda: not _server_processes(port), timeout=30, what="the driver to exit")


def _server_processes(port: int) -> list[int]:
    """Pids of job server drivers listening on ``port`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"spark_jobs/server.py" in cmdline and f"127.0.0.1:{port}".encode() in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture
def served_store(jobs_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from kfs_core.storage import open_store

    url = (tmp_path / "store").as_uri()
    store = open_store(url)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(url, NS, jobs_server=jobs_server)
    )
    # No spark-submit may run: a PATH without it makes any attempt fail loudly.
    monkeypatch.setenv("PATH", "/nonexistent")
    yield store
    store.close()


def _execute(**kwargs: Any) -> tuple[FakeTaskInstance, Any]:
    from kfs_airflow.operators import KfsSparkJobOperator

    ti = FakeTaskInstance()
    operator = KfsSparkJobOperator(task_id="job", **kwargs)
    try:
        return ti, operator.execute({"ti": ti})
    except Exception as exc:  # noqa: BLE001 - the tests check whatever the task raised
        return ti, exc


def test_a_task_runs_its_job_on_the_server(served_store: Any) -> None:
    write_topic(served_store, NS, "orders", partitions=2, segments=2, records_per_segment=20)
    ti, summary = _execute(job="validation", job_args=["--orphan-grace-s", "0"])
    assert isinstance(summary, dict), summary
    assert summary["status"] == "ok" and summary["run_id"] == ti.xcom["kfs_run_id"]
    assert summary["counts"]["segments"] == 4 and summary["counts"]["partitions"] == 2
    ti, summary = _execute(job="checkpoint", topics="orders")
    assert isinstance(summary, dict) and summary["status"] == "ok", summary


def test_job_outcomes_on_the_server_map_to_task_outcomes(served_store: Any) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    parts = write_topic(
        served_store, NS, "orders", partitions=1, segments=2, records_per_segment=20
    )
    served_store.delete(parts[0].index_object_key(parts[0].segments[0]))
    ti, failed = _execute(job="validation", job_args=["--orphan-grace-s", "0"])
    assert isinstance(failed, AirflowFailException), failed  # found problems: no retry
    assert ti.xcom["summary"]["status"] == "failed"
    ti, usage = _execute(job="retention", topics="nope")
    assert isinstance(usage, AirflowFailException) and "unknown topic" in str(usage), usage
