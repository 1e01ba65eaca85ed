"""`kfs run` as a user runs it: a subprocess that starts the daemon, Airflow and the demo.

One instance (`launched`, started once for the module) answers most questions:
the banner, the Airflow login, the REST API, the demo-events stream.  The last
Airflow test stops it with SIGINT and starts it again on the same home with
KFS_DEMO=0.  The `--no-airflow` tests are quick: a child that dies, a port in
use, a second `kfs run` on the same home.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from testkit.ports import free_port
from testkit.waiting import wait_for

KFS_DAGS = {
    "kfs_compaction",
    "kfs_index_rebuild",
    "kfs_retention",
    "kfs_checkpoint",
    "kfs_validation",
    "kfs_tables",
}
BANNER_READY = re.compile(r"^KFS \S+ is ready on the embedded default")
LOGIN = re.compile(r"^\s+login\s+admin / (\S+)$")
# Airflow's components start in 10-20 s on a quiet machine; CI machines are not quiet.
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 120.0


@dataclass
class KfsRun:
    """A running `kfs run` and what it printed."""

    home: Path
    env: dict[str, str]
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "\n".join(self.lines + self.errors)

    def line(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        for text in list(self.lines):
            if match := pattern.match(text):
                return match
        return None

    @property
    def password(self) -> str:
        match = self.line(LOGIN)
        assert match, self.output
        return match.group(1)

    @property
    def airflow_url(self) -> str:
        return f"http://127.0.0.1:{self.env['KFS_AIRFLOW_PORT']}"

    @property
    def bootstrap(self) -> str:
        return self.env["KFS_LISTEN"]

    def wait_ready(self) -> None:
        wait_for(
            lambda: self.process.poll() is not None or self.line(BANNER_READY),
            timeout=START_TIMEOUT_S,
            interval=0.2,
            what="the kfs run banner",
        )
        assert self.process.poll() is None, f"kfs run exited:\n{self.output}"

    def stop(self, signum: int = signal.SIGINT) -> int:
        self.process.send_signal(signum)
        return self.process.wait(timeout=STOP_TIMEOUT_S)


def _pump(stream: Any, sink: list[str]) -> None:
    for text in stream:
        sink.append(text.rstrip("\n"))  # noqa: PERF401 - each line shows as soon as it is read


def kfs_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no AIRFLOW_* of the test session, free ports for everything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "KFS_"))}
    env.update(
        {
            "KFS_HOME": str(home),
            "KFS_LISTEN": f"127.0.0.1:{free_port()}",
            "KFS_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
            "KFS_AIRFLOW_PORT": str(free_port()),
            "KFS_JOBS_PORT": str(free_port()),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        }
    )
    # The DAGs are unpaused, as for a user, but unscheduled: on a 2-core CI machine
    # the only Spark jobs are the kfs_tables and kfs_validation runs `kfs run` triggers
    # on first start.
    for job in ("COMPACTION", "INDEX_REBUILD", "RETENTION", "CHECKPOINT", "VALIDATION", "TABLES"):
        env[f"KFS_SCHEDULE_{job}"] = "none"
    env.update(extra)
    return env


def start(home: Path, env: dict[str, str], *args: str) -> KfsRun:
    process = subprocess.Popen(
        [sys.executable, "-m", "kfs_core.cli", "run", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run = KfsRun(home, env, process)
    for stream, sink in ((process.stdout, run.lines), (process.stderr, run.errors)):
        threading.Thread(target=_pump, args=(stream, sink), daemon=True).start()
    return run


def finish(run: KfsRun) -> None:
    """Stop a run a test left running; kill what is left if it will not stop."""
    if run.process.poll() is None:
        try:
            run.stop(signal.SIGTERM)
        except subprocess.TimeoutExpired:
            for child in psutil.Process(run.process.pid).children(recursive=True):
                child.kill()
            run.process.kill()
            run.process.wait()


def descendants(run: KfsRun) -> list[psutil.Process]:
    return psutil.Process(run.process.pid).children(recursive=True)


def still_running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` alive now (a zombie has exited; it waits to be reaped)."""

    def alive(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return [p for p in processes if alive(p)]


def command_lines(processes: list[psutil.Process]) -> list[str]:
    lines = []
    for p in processes:
        try:
            lines.append(" ".join(p.cmdline()))
        except psutil.Error:
            continue
    return lines


def http(
    method: str, url: str, *, body: dict[str, Any] | None = None, token: str | None = None
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def login(run: KfsRun, password: str) -> tuple[int, Any]:
    return http(
        "POST",
        f"{run.airflow_url}/auth/token",
        body={"username": "admin", "password": password},
    )


def token(run: KfsRun) -> str:
    status, body = login(run, run.password)
    assert status == 201, body
    return str(body["access_token"])


def consume(bootstrap: str, topic: str, count: int, timeout_s: float = 120.0) -> list[Any]:
    """``count`` messages of ``topic`` from the beginning of every partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-run",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    messages: list[Any] = []
    errors: list[Any] = []
    try:

        def partitions() -> list[int]:
            described = consumer.list_topics(topic, timeout=10).topics[topic]
            return [] if described.error is not None else sorted(described.partitions)

        found = wait_for(partitions, timeout=timeout_s, interval=0.2, what=f"{topic}'s partitions")
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in found])

        def enough() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                messages.append(msg)
            elif msg is not None:
                errors.append(msg.error())
            return len(messages) >= count

        try:
            wait_for(enough, timeout=timeout_s, interval=0, what=f"{count} messages of {topic}")
        except TimeoutError as exc:
            raise AssertionError(
                f"{exc}; partitions {found}; consumer errors {errors[-5:]}"
            ) from None
    finally:
        consumer.close()
    return messages


# --- one kfs run with Airflow, shared by the tests below -------------------------------


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KfsRun]:
    home = tmp_path_factory.mktemp("kfs-run") / ".kfs"
    run = start(home, kfs_env(home))
    try:
        run.wait_ready()
        yield run
    finally:
        finish(run)


pytestmark = pytest.mark.integration


@pytest.mark.airflow
@pytest.mark.slow
def test_banner_names_every_address(launched: KfsRun) -> None:
    out = launched.output
    assert f"Kafka      {launched.bootstrap}" in out
    assert f"http://{launched.env['KFS_METRICS_LISTEN']}/metrics" in out
    assert f"Airflow    {launched.airflow_url}" in out
    assert "KFS page" in out
    assert "demo-events" in out
    assert len(launched.password) >= 12
    log_names = {p.name for p in (launched.home / "logs").glob("*.log")}
    assert {
        "kfs.log",
        "demo.log",
        "airflow-setup.log",
        "airflow-api-server.log",
        "airflow-scheduler.log",
        "airflow-dag-processor.log",
        "airflow-triggerer.log",
        "jobs-server.log",
    } <= log_names
    assert f"jobs       http://127.0.0.1:{launched.env['KFS_JOBS_PORT']}" in out
    # Airflow's chatter goes to the logs, not the terminal.
    assert "Uvicorn running" not in out


@pytest.mark.airflow
@pytest.mark.slow
def test_login_gives_a_token_and_anonymous_calls_are_refused(launched: KfsRun) -> None:
    status, body = login(launched, launched.password)
    assert status == 201, body
    assert body["access_token"]
    status, _ = login(launched, launched.password + "x")
    assert status == 401
    status, _ = http("GET", f"{launched.airflow_url}/api/v2/dags")
    assert status in (401, 403)
    status, body = http("GET", f"{launched.airflow_url}/api/v2/dags", token=token(launched))
    assert status == 200, body


@pytest.mark.airflow
@pytest.mark.slow
def test_spark_pool_exists(launched: KfsRun) -> None:
    status, body = http(
        "GET", f"{launched.airflow_url}/api/v2/pools/kfs_spark", token=token(launched)
    )
    assert status == 200, body
    assert body["slots"] == 2


@pytest.mark.airflow
@pytest.mark.slow
def test_kfs_plugin_is_loaded(launched: KfsRun) -> None:
    """The plugins folder is the repository's: the KFS page is there."""
    status, body = http("GET", f"{launched.airflow_url}/api/v2/plugins", token=token(launched))
    assert status == 200, body
    assert "kfs" in {p["name"] for p in body["plugins"]}, body


@pytest.mark.airflow
@pytest.mark.slow
def test_kfs_dags_are_listed(launched: KfsRun) -> None:
    auth = token(launched)
    seen: dict[str, Any] = {}

    def listed() -> bool:
        status, body = http("GET", f"{launched.airflow_url}/api/v2/dags?limit=100", token=auth)
        assert status == 200, body
        seen.clear()
        seen.update({d["dag_id"]: d for d in body["dags"]})
        return seen.keys() >= KFS_DAGS

    try:
        wait_for(listed, timeout=180, interval=1, what="the five kfs DAGs in the REST API")
    except TimeoutError:
        _, errors = http("GET", f"{launched.airflow_url}/api/v2/importErrors", token=auth)
        raise AssertionError(f"DAGs listed: {sorted(seen)}; import errors: {errors}") from None
    # A new user sees runs without unpausing anything.
    assert not any(seen[dag_id]["is_paused"] for dag_id in KFS_DAGS), seen


@pytest.mark.airflow
@pytest.mark.slow
def test_demo_events_receive_json_records(launched: KfsRun) -> None:
    messages = consume(launched.bootstrap, "demo-events", count=3)
    events = [json.loads(m.value()) for m in messages]
    assert all({"event_id", "ts", "user", "action"} <= e.keys() for e in events)
    assert all(m.key().decode() == e["user"] for m, e in zip(messages, events, strict=True))


@pytest.mark.airflow
@pytest.mark.slow
@pytest.mark.spark
def test_first_start_triggers_validation_and_tables_and_the_kfs_page_shows_them(
    launched: KfsRun,
) -> None:
    """A new user's path: a first data-quality report, read on the KFS page, with no clicks."""
    auth = token(launched)
    runs_url = f"{launched.airflow_url}/api/v2/dags/kfs_validation/dagRuns"

    def finished_run() -> dict[str, Any] | None:
        status, body = http("GET", runs_url, token=auth)
        assert status == 200, body
        done = [r for r in body["dag_runs"] if r["state"] in ("success", "failed")]
        return done[0] if done else None

    try:
        run = wait_for(finished_run, timeout=400, interval=2, what="the first kfs_validation run")
    except TimeoutError:
        raise AssertionError(launched.output) from None
    assert run["state"] == "success", run
    assert "first start" in (run.get("note") or ""), run
    assert (launched.home / "airflow" / "first-report-triggered").read_text().strip() == run[
        "dag_run_id"
    ]
    assert "triggered kfs_tables and kfs_validation" in launched.output
    # The task ran on the job server kfs run started, not through a spark-submit of its own.
    served = (launched.home / "logs" / "jobs-server.log").read_text()
    assert '"POST /jobs HTTP/1.1" 200' in served, served[-3000:]

    def overview_read() -> Any:
        # The page answers "loading" while its first read of the catalogs runs.
        status, overview = http("GET", f"{launched.airflow_url}/kfs/api/overview", token=auth)
        assert status == 200, overview
        return None if overview["loading"] else overview

    overview = wait_for(overview_read, timeout=60, interval=0.5, what="the KFS page's first read")
    assert "demo-events" in {t["name"] for t in overview["topics"]}, overview
    latest = next(r for r in overview["validation"] if r["success"] is not None)
    assert latest["success"] is True, latest
    assert latest["evaluated"] > 0 and latest["unsuccessful"] == 0, latest

    # The demo topic's Iceberg table, from the kfs_tables run triggered beside it.
    tables_url = f"{launched.airflow_url}/api/v2/dags/kfs_tables/dagRuns"

    def tables_run() -> dict[str, Any] | None:
        status, body = http("GET", tables_url, token=auth)
        assert status == 200, body
        done = [r for r in body["dag_runs"] if r["state"] in ("success", "failed")]
        return done[0] if done else None

    run = wait_for(tables_run, timeout=400, interval=2, what="the first kfs_tables run")
    assert run["state"] == "success", run

    def demo_table() -> dict[str, Any] | None:
        status, overview = http("GET", f"{launched.airflow_url}/kfs/api/overview", token=auth)
        assert status == 200, overview
        shown = [t for t in overview["tables"] if t["topic"] == "demo-events"]
        return shown[0] if shown and shown[0]["snapshot_id"] is not None else None

    table = wait_for(demo_table, timeout=120, interval=1, what="the demo table on the KFS page")
    assert table["rows"] > 0 and table["report_success"] is True, table
    assert table["data_docs_index"], table


@pytest.mark.airflow
@pytest.mark.slow
def test_sigint_stops_everything_and_a_restart_reuses_the_password(launched: KfsRun) -> None:
    """Runs last: it stops the shared instance."""
    children = descendants(launched)
    names = command_lines(children)
    for expected in (
        "kfs_core.cli serve",
        "kfs_core.cli.demo",
        "airflow scheduler",
        "airflow triggerer",
    ):
        assert any(expected in n for n in names), (expected, names)
    password = launched.password

    assert launched.stop(signal.SIGINT) == 0, launched.output
    alive = still_running(children)
    assert not alive, command_lines(alive)
    assert "kfs serve stopped (exit 0)" in (launched.home / "logs" / "kfs.log").read_text()
    assert "stopped (exit 0)" in launched.output

    again = start(launched.home, {**launched.env, "KFS_DEMO": "0"})
    try:
        again.wait_ready()
        assert again.password == password
        status, body = login(again, password)
        assert status == 201, body
        assert not any("kfs_core.cli.demo" in n for n in command_lines(descendants(again)))
        assert again.line(re.compile(r"^\s+demo\s")) is None, again.output
        assert again.stop(signal.SIGTERM) == 0, again.output
    finally:
        finish(again)


# --- without Airflow: quick --------------------------------------------------------------


def test_a_child_that_dies_stops_the_rest_and_names_its_log(tmp_path: Path) -> None:
    home = tmp_path / ".kfs"
    run = start(home, kfs_env(home, KFS_AIRFLOW="0"))
    try:
        run.wait_ready()
        assert "not started (--no-airflow)" in run.output
        children = descendants(run)
        names = command_lines(children)
        assert not any("airflow" in n for n in names), names

        # One supervisor per home.
        second = subprocess.run(
            [sys.executable, "-m", "kfs_core.cli", "run"],
            env=kfs_env(home, KFS_AIRFLOW="0"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 1
        assert f"another kfs run (pid {run.process.pid}) is using {home}" in second.stderr

        demo = next(p for p in children if "kfs_core.cli.demo" in " ".join(p.cmdline()))
        demo.kill()
        assert run.process.wait(timeout=STOP_TIMEOUT_S) == 1
        wait_for(lambda: "stopped (exit 1)" in run.output, timeout=10, what="the last line")
        assert (
            f"demo-events stream was killed by signal 9 during the run; its log: {home / 'logs' / 'demo.log'}"
            in run.output
        )
        alive = still_running(children)
        assert not alive, command_lines(alive)
        # The daemon was stopped, not killed: it flushed.
        assert "kfs serve stopped (exit 0)" in (home / "logs" / "kfs.log").read_text()
    finally:
        finish(run)


def test_a_port_in_use_is_a_one_line_error(tmp_path: Path) -> None:
    import socket

    home = tmp_path / ".kfs"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "kfs_core.cli", "run"],
            env=kfs_env(home, KFS_AIRFLOW_PORT=str(port)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"kfs: error: 127.0.0.1:{port}, for Airflow (KFS_AIRFLOW_PORT), is in use"
    )
    assert not (home / "logs").exists()  # nothing was started


def test_children_stop_even_when_kfs_run_is_killed(tmp_path: Path) -> None:
    """SIGKILL leaves no supervisor to stop anything: the children get a parent-death signal."""
    if not sys.platform.startswith("linux"):
        pytest.skip("parent-death signals are Linux's")
    home = tmp_path / ".kfs"
    run = start(home, kfs_env(home, KFS_AIRFLOW="0"))
    try:
        run.wait_ready()
        children = descendants(run)
        assert len(children) == 2, command_lines(children)  # the daemon and the demo
        run.process.kill()
        run.process.wait(timeout=10)
        wait_for(
            lambda: not still_running(children),
            timeout=60,
            what="the children of a killed kfs run to exit",
        )
        # SIGTERM, not SIGKILL: the daemon flushed.
        assert "kfs serve stopped (exit 0)" in (home / "logs" / "kfs.log").read_text()
    finally:
        finish(run)
