"""`kfs_core.cli.embedded` in-process: the env file, the admin password, Airflow's environment.

`tests/cli/test_run.py` starts `kfs run` itself; these are the pieces it is made of.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from kfs_core.cli.demo import demo_event
from kfs_core.cli.embedded import (
    PASSWORDS_FILE,
    EmbeddedError,
    RunOptions,
    admin_password,
    airflow_environment,
    read_env_file,
)
from kfs_core.config import Settings
from tests.conftest import REPO


def options(tmp_path: Path) -> RunOptions:
    settings = Settings(
        store_url=(tmp_path / "store").as_uri(),
        namespace="ns1",
        data_dir=str(tmp_path / "data"),
        listen="127.0.0.1:19092",
        metrics_listen="127.0.0.1:19644",
    )
    return RunOptions(settings, home=tmp_path / ".kfs", airflow_port=18080, repository=REPO)


def test_read_env_file_is_compose_env_file_syntax(tmp_path: Path) -> None:
    path = tmp_path / "a.env"
    path.write_text(
        "# a comment\n"
        "\n"
        "A=1\n"
        'B = "two words"\n'
        "C='x=y'\n"
        'JSON={"conn_type": "spark", "host": "local[*]"}\n'
    )
    assert read_env_file(path) == {
        "A": "1",
        "B": "two words",
        "C": "x=y",
        "JSON": '{"conn_type": "spark", "host": "local[*]"}',
    }


def test_read_env_file_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "a.env"
    path.write_text("A=1\nnot a setting\n")
    with pytest.raises(EmbeddedError, match=r"a\.env:2: expected KEY=VALUE"):
        read_env_file(path)


def test_repository_env_file_holds_no_machine_specific_settings() -> None:
    values = read_env_file(REPO / "infra" / "airflow" / "airflow.env")
    assert values["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert values["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert values["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    assert values["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    assert json.loads(values["AIRFLOW_CONN_SPARK_DEFAULT"]) == {
        "conn_type": "spark",
        "host": "local[*]",
    }
    # Paths, ports, database URLs and secrets differ between kfs run and compose.
    for key in values:
        assert not key.endswith(("_FOLDER", "_HOME", "_CONN", "_PORT", "_SECRET", "_KEY")), key
        assert key != "AIRFLOW_HOME"


def test_admin_password_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    first = admin_password(tmp_path)
    path = tmp_path / PASSWORDS_FILE
    assert len(first) >= 12
    assert json.loads(path.read_text()) == {"admin": first}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert admin_password(tmp_path) == first


def test_admin_password_is_added_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / PASSWORDS_FILE
    path.write_text(json.dumps({"bob": "secret"}))
    password = admin_password(tmp_path)
    assert json.loads(path.read_text()) == {"bob": "secret", "admin": password}


def test_admin_password_refuses_a_damaged_file(tmp_path: Path) -> None:
    (tmp_path / PASSWORDS_FILE).write_text("{not json")
    with pytest.raises(EmbeddedError, match="not JSON"):
        admin_password(tmp_path)


def test_airflow_environment_points_airflow_at_this_home_and_daemon(tmp_path: Path) -> None:
    o = options(tmp_path)
    env = airflow_environment(o, {"PATH": "/usr/bin"})
    home = tmp_path / ".kfs" / "airflow"
    assert env["AIRFLOW_HOME"] == str(home)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{home / 'airflow.db'}"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(REPO / "dags")
    assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == str(REPO / "plugins")
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == str(home / PASSWORDS_FILE)
    assert env["AIRFLOW__API__PORT"] == "18080"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert json.loads(env["AIRFLOW_CONN_KFS_DEFAULT"]) == {
        "conn_type": "kfs",
        "extra": {
            "store_url": (tmp_path / "store").as_uri(),
            "namespace": "ns1",
            "bootstrap_servers": "127.0.0.1:19092",  # the daemon's --listen
            "jobs_server": "http://127.0.0.1:7079",  # the tasks run on kfs run's job server
        },
    }
    # spark-submit and the Python with kfs_core come first.
    assert env["PATH"].split(":")[:2] == [str(Path(sys.executable).parent), "/usr/bin"]
    assert env["PYSPARK_PYTHON"] == sys.executable
    # From infra/airflow/airflow.env:
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"


def test_airflow_environment_precedence(tmp_path: Path) -> None:
    """Precedence: env file < the caller's environment < what kfs run must decide itself."""
    o = options(tmp_path)
    env = airflow_environment(
        o,
        {
            "AIRFLOW__CORE__PARALLELISM": "3",  # a tuning the caller may make
            "AIRFLOW_HOME": "/somewhere/else",  # would split the database from the password
            "AIRFLOW__CORE__DAGS_FOLDER": "/other/dags",
        },
    )
    assert env["AIRFLOW__CORE__PARALLELISM"] == "3"
    assert env["AIRFLOW_HOME"] == str(tmp_path / ".kfs" / "airflow")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(REPO / "dags")


def test_airflow_environment_passes_an_s3_endpoint(tmp_path: Path) -> None:
    o = RunOptions(
        Settings(store_url="s3://bucket/kfs", s3_endpoint_url="http://minio:9000"),
        home=tmp_path / ".kfs",
        repository=REPO,
    )
    extra = json.loads(airflow_environment(o, {})["AIRFLOW_CONN_KFS_DEFAULT"])["extra"]
    assert extra == {
        "store_url": "s3://bucket/kfs",
        "namespace": "default",
        "s3_endpoint_url": "http://minio:9000",
        "bootstrap_servers": "127.0.0.1:9092",
        "jobs_server": "http://127.0.0.1:7079",
    }
    # Without the job server the tasks spark-submit their jobs: no jobs_server in the extra.
    alone = RunOptions(Settings(), home=tmp_path / ".kfs", repository=REPO, jobs_server=False)
    extra = json.loads(airflow_environment(alone, {})["AIRFLOW_CONN_KFS_DEFAULT"])["extra"]
    assert "jobs_server" not in extra


def test_run_options_addresses_for_wildcard_listeners(tmp_path: Path) -> None:
    o = RunOptions(
        Settings(listen="0.0.0.0:9093", metrics_listen=":9645"),
        home=tmp_path,
        airflow_host="0.0.0.0",
        airflow_port=8081,
    )
    assert o.bootstrap == "127.0.0.1:9093"
    assert o.metrics_url == "http://127.0.0.1:9645"
    assert o.airflow_url == "http://127.0.0.1:8081"


def test_demo_event_is_keyed_json() -> None:
    import random

    key, value = demo_event(7, random.Random(1))
    event = json.loads(value)
    assert event["event_id"] == 7
    assert key.decode() == event["user"] and event["user"].startswith("user-")
    assert {"ts", "action", "page"} <= event.keys()
    assert ("amount" in event) == (event["action"] == "purchase")


def test_demo_topic_creation_gives_way_to_a_stop_signal() -> None:
    """With the daemon gone (kfs run killed), SIGTERM must not wait out CreateTopics."""
    import time

    from kfs_core.cli.demo import ensure_topic
    from testkit.ports import free_port

    nobody = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    assert ensure_topic(nobody, should_stop=lambda: True, timeout_s=30) is False
    assert time.monotonic() - started < 5
    # Without a stop, it gives up after its timeout (librdkafka's or its own).
    from confluent_kafka import KafkaException

    with pytest.raises((TimeoutError, KafkaException)):
        ensure_topic(nobody, timeout_s=0.5)
