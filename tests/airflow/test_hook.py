"""KfsHook: settings from the ``kfs_default`` connection, the store, topics, job arguments."""

from __future__ import annotations

import json
import socket
import time

import pytest

from kfs_core.catalog.topics import TopicRegistry
from kfs_core.storage import open_store
from tests.airflow.conftest import kfs_connection_env
from tests.conftest import _free_port

pytestmark = pytest.mark.airflow


def test_hook_reads_the_connection_and_lists_topics(kfs_connection: str) -> None:
    from kfs_airflow.hooks import KfsHook

    TopicRegistry(open_store(kfs_connection), "default").create_topic("orders", partitions=2)
    hook = KfsHook()
    assert hook.store_url == kfs_connection
    assert hook.namespace == "default"
    assert hook.list_topics() == ["orders"]
    assert hook.job_args(topics=["orders"], dry_run=True) == [
        "--store-url", kfs_connection, "--namespace", "default", "--topics", "orders", "--dry-run",
    ]  # fmt: skip
    assert hook.test_connection()[0] is True


def test_hook_passes_s3_settings_to_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    from kfs_airflow.hooks import KfsHook

    conn = {
        "conn_type": "kfs",
        "login": "AKIAEXAMPLE",
        "password": "secret",
        "extra": {"store_url": "s3://kfs-data/prod", "namespace": "prod",
                  "s3_endpoint_url": "http://minio:9000", "region_name": "eu-west-1"},
    }  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", json.dumps(conn))
    hook = KfsHook()
    assert hook.job_args(topics="a,b")[-4:] == [
        "--s3-endpoint-url", "http://minio:9000", "--topics", "a,b",
    ]  # fmt: skip
    assert hook.job_env() == {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }


def test_a_connection_without_a_store_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from kfs_airflow.hooks import KfsConnectionError, KfsHook

    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(""))
    with pytest.raises(KfsConnectionError, match="no store_url"):
        KfsHook().get_store()
    assert KfsHook().test_connection()[0] is False


def test_the_kfs_connection_type_is_registered_with_airflow() -> None:
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert "kfs" in ProvidersManager().providers
    hook = ProvidersManagerTaskRuntime().hooks["kfs"]
    assert hook is not None
    assert hook.hook_class_name == "kfs_airflow.hooks.KfsHook"
    assert hook.connection_id_attribute_name == "kfs_conn_id"


def test_consumer_groups_need_the_daemons_address(kfs_connection: str) -> None:
    from kfs_airflow.groups import DaemonNotConfigured
    from kfs_airflow.hooks import KfsHook

    hook = KfsHook()
    assert hook.bootstrap_servers == ""
    with pytest.raises(DaemonNotConfigured, match="daemon address not configured"):
        hook.consumer_groups()


def test_consumer_groups_give_up_at_once_on_a_refused_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kfs_airflow.groups import DaemonUnreachable
    from kfs_airflow.hooks import KfsHook

    nobody = f"127.0.0.1:{_free_port()}"
    env = kfs_connection_env("file:///unused", bootstrap_servers=f" {nobody} ")
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
    hook = KfsHook()
    assert hook.bootstrap_servers == nobody
    started = time.monotonic()
    with pytest.raises(DaemonUnreachable, match=f"cannot reach the daemon at {nobody}: "):
        hook.consumer_groups(timeout_s=30)
    assert time.monotonic() - started < 10, "all brokers down must end the wait, not the deadline"


def test_consumer_groups_stop_at_the_deadline_when_the_daemon_is_silent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port that accepts connections and never answers: the read ends at its deadline."""
    from kfs_airflow.groups import DaemonUnreachable
    from kfs_airflow.hooks import KfsHook

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes handshakes; nobody ever reads
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        env = kfs_connection_env("file:///unused", bootstrap_servers=address)
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
        started = time.monotonic()
        with pytest.raises(DaemonUnreachable, match=f"no answer from the daemon at {address}"):
            KfsHook().consumer_groups(timeout_s=1.0)
        assert time.monotonic() - started < 5
