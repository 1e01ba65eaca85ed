"""The job server (`spark_jobs.server`) over real HTTP, on the session's SparkSession.

Jobs run through `kfs_core.jobs_client` and ``kfs jobs run --server`` against a
`JobServer` bound to a free loopback port in this process; the data is real
segments and catalogs in a local store.  `tests/airflow/test_operators.py`
covers the operator's side.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from kfs_core.cli import main as kfs_main
from kfs_core.jobs_client import JobServerError, cancel_on_server, run_on_server
from kfs_core.storage import ObjectStore
from spark_jobs.server import JOBS, JobServer
from testkit.waiting import wait_for
from tests.spark_jobs.data import write_topic

pytestmark = pytest.mark.spark

NS = "ns"
TOPIC = "orders"


@pytest.fixture
def server(spark: Any) -> Iterator[tuple[JobServer, str]]:
    job_server = JobServer(spark, max_jobs=2)
    http = job_server.serve("127.0.0.1", 0)
    host, port = http.server_address[:2]
    try:
        yield job_server, f"http://{host}:{port}"
    finally:
        job_server.close()


def _args(store: ObjectStore, *more: str) -> list[str]:
    return ["--store-url", store.url, "--namespace", NS, *more]


def _summary(store: ObjectStore, job: str, run_id: str) -> dict[str, Any]:
    return dict(json.loads(store.get(f"{NS}/_reports/{job}/{run_id}.json")))


def test_jobs_run_on_the_warm_session_with_their_exit_status(
    server: tuple[JobServer, str], local_store: ObjectStore
) -> None:
    _, url = server
    parts = write_topic(local_store, NS, TOPIC, partitions=2, segments=2, records_per_segment=40)

    ok = run_on_server(url, "validation", _args(local_store, "--orphan-grace-s", "0"))
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("kfs validation OK: 4 segments in 2 partitions passed")
    assert _summary(local_store, "validation", ok.run_id)["status"] == "ok"

    merged = run_on_server(url, "compaction", _args(local_store, "--run-id", "merge-1"))
    assert (merged.exit_code, merged.run_id) == (0, "merge-1"), merged.output
    assert "kfs compaction OK" in merged.output

    # A missing index: the job ran and found a problem (exit 1), its line says which.
    entry = parts[1].segments[0]
    local_store.delete(parts[1].index_object_key(entry))
    state = run_on_server(url, "index_rebuild", _args(local_store, "--dry-run"))
    assert state.exit_code == 0, state.output
    failed = run_on_server(url, "validation", _args(local_store, "--orphan-grace-s", "0"))
    assert failed.exit_code == 1 and "kfs validation FAILED" in failed.output
    assert _summary(local_store, "validation", failed.run_id)["status"] == "failed"


def test_bad_requests_get_one_line_errors(
    server: tuple[JobServer, str], local_store: ObjectStore
) -> None:
    _, url = server
    write_topic(local_store, NS, TOPIC, partitions=1, segments=1, records_per_segment=10)

    unknown_topic = run_on_server(url, "retention", _args(local_store, "--topics", "nope"))
    assert unknown_topic.exit_code == 2
    assert unknown_topic.errors == "spark_jobs.retention: error: unknown topic 'nope'"
    assert unknown_topic.output.startswith("kfs retention ERROR: UnknownTopic")
    bad_flag = run_on_server(url, "checkpoint", _args(local_store, "--no-such-flag"))
    assert bad_flag.exit_code == 2 and "unrecognized arguments: --no-such-flag" in bad_flag.errors
    assert bad_flag.run_id == ""  # refused before any run began
    helped = run_on_server(url, "checkpoint", ["--help"])
    assert helped.exit_code == 0 and helped.output.startswith("usage: spark_jobs.checkpoint")

    with pytest.raises(JobServerError, match="unknown job 'compactoin'; jobs: checkpoint,"):
        run_on_server(url, "compactoin", [])

    def post(body: bytes, **headers: str) -> tuple[int, str]:
        request = urllib.request.Request(url + "/jobs", data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read()).get("error", "")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())["error"]

    json_type = {"Content-Type": "application/json"}
    code, error = post(b"{not json", **json_type)
    assert code == 400 and error.startswith("the body is not JSON")
    # Never from a web page: a browser's simple POST, or one carrying an Origin.
    job = json.dumps({"job": "checkpoint", "args": _args(local_store)}).encode()
    assert post(job, **{"Content-Type": "text/plain"}) == (
        415,
        "the body must be application/json",
    )
    assert post(job, Origin="http://evil.example", **json_type) == (
        403,
        "requests from web pages are refused",
    )
    with urllib.request.urlopen(url + "/healthz", timeout=10) as answer:
        health = json.loads(answer.read())
    assert health == {"status": "ok", "running": [], "jobs": list(JOBS)}
    assert cancel_on_server(url, "no-such-run") is False
    with pytest.raises(JobServerError, match="cannot reach the job server"):
        run_on_server("http://127.0.0.1:9", "validation", [])


def test_a_cancelled_run_stops_and_says_so(
    server: tuple[JobServer, str], local_store: ObjectStore
) -> None:
    job_server, url = server
    write_topic(local_store, NS, TOPIC, partitions=2, segments=4, records_per_segment=200)
    finished: list[Any] = []
    # Throttled to a crawl: the rewrite would take minutes, so only the cancel ends it.
    args = _args(local_store, "--run-id", "slow-1", "--max-read-mb-per-s", "0.001")
    worker = threading.Thread(
        target=lambda: finished.append(run_on_server(url, "compaction", args)), daemon=True
    )
    worker.start()
    wait_for(lambda: "slow-1" in job_server.running, timeout=60, what="the run to start")
    assert cancel_on_server(url, "slow-1") is True
    worker.join(timeout=120)
    assert not worker.is_alive(), "the cancelled run did not end"
    (run,) = finished
    assert run.exit_code == 3, run.output
    assert "run slow-1 was cancelled" in run.errors
    assert _summary(local_store, "compaction", "slow-1")["status"] == "error"
    assert job_server.running == {}


def test_kfs_jobs_run_with_server_prints_the_run_and_exits_with_its_status(
    server: tuple[JobServer, str], local_store: ObjectStore
) -> None:
    _, url = server
    write_topic(local_store, NS, TOPIC, partitions=1, segments=2, records_per_segment=20)
    runner = CliRunner()
    env = {"KFS_STORE_URL": local_store.url, "KFS_NAMESPACE": NS}
    ok = runner.invoke(
        kfs_main, ["jobs", "run", "--server", url, "checkpoint", "--run-id=cli-1"], env=env
    )
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.startswith("kfs checkpoint OK:") and "(run cli-1," in ok.stdout
    usage = runner.invoke(
        kfs_main,
        ["jobs", "run", "checkpoint", "--topics", "nope"],
        env={**env, "KFS_JOBS_SERVER": url},
    )
    assert usage.exit_code == 2
    # As in a process of its own: the error summary on stdout, the one-line reason on stderr.
    assert usage.stdout.startswith("kfs checkpoint ERROR: UnknownTopic: unknown topic 'nope'")
    assert usage.stderr == "spark_jobs.checkpoint: error: unknown topic 'nope'\n"
    down = runner.invoke(
        kfs_main, ["jobs", "run", "--server", "http://127.0.0.1:9", "checkpoint"], env=env
    )
    assert down.exit_code == 1
    assert down.stderr.startswith("kfs: error: cannot reach the job server at http://127.0.0.1:9")


def test_two_runs_at_once_each_get_their_own_outcome(
    server: tuple[JobServer, str], tmp_path: Any
) -> None:
    """Two validations (each with its own Great Expectations context) at the same time."""
    from kfs_core.storage import open_store

    _, url = server
    stores = [open_store((tmp_path / name).as_uri()) for name in ("a", "b")]
    try:
        write_topic(stores[0], NS, TOPIC, partitions=2, segments=2, records_per_segment=30)
        parts = write_topic(stores[1], NS, TOPIC, partitions=1, segments=3, records_per_segment=30)
        stores[1].delete(parts[0].index_object_key(parts[0].segments[1]))
        results: dict[int, Any] = {}
        threads = [
            threading.Thread(
                target=lambda i=i: results.__setitem__(
                    i, run_on_server(url, "validation", _args(stores[i], "--orphan-grace-s", "0"))
                )
            )
            for i in (0, 1)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
        assert results[0].exit_code == 0, results[0].output
        assert "4 segments in 2 partitions passed" in results[0].output
        assert results[1].exit_code == 1 and "FAILED" in results[1].output, results[1].output
        assert results[0].run_id != results[1].run_id
        for i, store in enumerate(stores):
            report = _summary(store, "validation", results[i].run_id)
            assert report["status"] == ("ok" if i == 0 else "failed")
    finally:
        for store in stores:
            store.close()


def test_a_run_waiting_for_a_slot_can_be_cancelled_before_it_starts(
    spark: Any, local_store: ObjectStore
) -> None:
    job_server = JobServer(spark, max_jobs=1)
    http = job_server.serve("127.0.0.1", 0)
    url = "http://{}:{}".format(*http.server_address[:2])
    write_topic(local_store, NS, TOPIC, partitions=2, segments=4, records_per_segment=200)
    finished: dict[str, Any] = {}

    def submit(run_id: str, *more: str) -> None:
        args = _args(local_store, "--run-id", run_id, *more)
        finished[run_id] = run_on_server(url, "compaction", args)

    try:
        slow = threading.Thread(target=submit, args=("slow-2", "--max-read-mb-per-s", "0.001"))
        slow.start()
        wait_for(lambda: "slow-2" in job_server.running, timeout=60, what="the first run")
        queued = threading.Thread(target=submit, args=("queued-1",))
        queued.start()
        wait_for(lambda: "queued-1" in job_server.running, timeout=60, what="the second run")
        assert cancel_on_server(url, "queued-1") is True
        queued.join(timeout=60)
        assert not queued.is_alive() and finished["queued-1"].exit_code == 3
        assert finished["queued-1"].errors == "spark_jobs.server: run queued-1 was cancelled"
        # It never started: no summary, and the first run is still going.
        assert not local_store.exists(f"{NS}/_reports/compaction/queued-1.json")
        assert "slow-2" in job_server.running
        assert cancel_on_server(url, "slow-2") is True
        slow.join(timeout=120)
        assert not slow.is_alive() and finished["slow-2"].exit_code == 3
    finally:
        job_server.close()
