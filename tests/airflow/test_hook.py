"""KfsHook: settings from the ``kfs_default`` connection, the store, topics, job arguments."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from kfs_core.catalog.topics import TopicRegistry
from kfs_core.storage import open_store
from tests.airflow.conftest import kfs_connection_env

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


def _s3_connection(monkeypatch: pytest.MonkeyPatch, key: str, secret: str, **extra: str) -> None:
    conn = {
        "conn_type": "kfs",
        "login": key,
        "password": secret,
        "extra": {"store_url": "s3://kfs-data/prod", "namespace": "prod",
                  "s3_endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1", **extra},
    }  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", json.dumps(conn))


def _signing_credentials(store: Any) -> tuple[str, str, str | None]:
    """The key the store's boto3 client signs its requests with (no request is sent)."""
    credentials = store.client._request_signer._credentials.get_frozen_credentials()
    return credentials.access_key, credentials.secret_key, credentials.token


def test_get_store_hands_the_keys_to_the_store_and_leaves_the_environment_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kfs_airflow.hooks import KfsHook

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    _s3_connection(monkeypatch, "AKIAFIRST", "first-secret")
    environ = dict(os.environ)
    store = KfsHook().get_store()
    assert _signing_credentials(store) == ("AKIAFIRST", "first-secret", None)
    assert "first-secret" not in store.url + repr(store)
    store.close()
    assert dict(os.environ) == environ

    # The key is rotated in the connection: the next hook's store signs with the new one
    # (an os.environ.setdefault would have kept the first key for the whole process).
    _s3_connection(monkeypatch, "AKIAROTATED", "rotated-secret", aws_session_token="token")
    environ = dict(os.environ)
    with KfsHook() as hook:
        assert _signing_credentials(hook.get_store()) == (
            "AKIAROTATED", "rotated-secret", "token",
        )  # fmt: skip
        assert _signing_credentials(hook.get_conn()) == (
            "AKIAROTATED", "rotated-secret", "token",
        )  # fmt: skip
        assert hook.job_env()["AWS_SESSION_TOKEN"] == "token"  # spark-submit's own process
    assert dict(os.environ) == environ


def test_a_key_without_its_secret_is_a_connection_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from kfs_airflow.hooks import KfsConnectionError, KfsHook

    _s3_connection(monkeypatch, "AKIAONLY", "")
    with pytest.raises(KfsConnectionError, match="go together"):
        KfsHook().get_store()


def test_the_hook_reads_run_summaries_history_and_validation_reports(kfs_connection: str) -> None:
    from kfs_airflow.hooks import KfsHook

    from kfs_core.errors import ObjectNotFound
    from kfs_core.reports import VALIDATION_JOB, report_key, validation_report_key

    store = open_store(kfs_connection)
    old, embedded, by_key, broken, missing = (f"20240101T00000{i}Z-aaaaaa" for i in range(5))
    report = {"success": False, "failed_expectations": ["body_crc"],
              "problems": [{"topic": "t"}], "problems_truncated": False}  # fmt: skip

    def summary(run_id: str, **details: Any) -> None:
        doc = {"job": VALIDATION_JOB, "run_id": run_id, "status": "ok", "details": details}
        store.put(report_key("default", VALIDATION_JOB, run_id), json.dumps(doc).encode())

    summary(old, report={"success": True})
    summary(embedded, report=report)
    store.put(validation_report_key("default", by_key), json.dumps(report).encode())
    summary(by_key, report_key=validation_report_key("default", by_key))
    store.put(report_key("default", VALIDATION_JOB, broken), b"{")
    summary(missing, report_key=validation_report_key("default", missing))
    store.close()

    with KfsHook() as hook:
        assert hook.run_summary(VALIDATION_JOB, "20990101T000000Z-ffffff") is None
        found = hook.run_summary(VALIDATION_JOB, embedded)
        assert found is not None and found.run_id == embedded
        history = hook.report_history(VALIDATION_JOB)
        assert [run.run_id for run in history] == [missing, broken, by_key, embedded, old]
        assert [run.run_id for run in hook.report_history(VALIDATION_JOB, max_runs=2)] == [
            missing, broken,
        ]  # fmt: skip
        assert history[1].summary is None and type(history[1].error).__name__ == "JSONDecodeError"
        with pytest.raises(ObjectNotFound):
            hook.validation_report(history[0].summary)  # type: ignore[arg-type]
        from_key = hook.validation_report(history[2].summary)  # type: ignore[arg-type]
        from_details = hook.validation_report(history[3].summary)  # type: ignore[arg-type]
        assert from_key == from_details and from_key is not None
        assert from_key.problem_topics() == ["t"] and from_key.success is False
        latest = hook.latest_validation_report()
        assert latest is not None and latest[0].run_id == by_key
        assert hook.data_docs_file(by_key, "../report.json") is None
        with pytest.raises(ObjectNotFound):
            hook.data_docs_file(by_key, "index.html")


def test_a_failed_run_on_the_job_server_pickles_with_its_exit_code() -> None:
    import pickle

    from kfs_airflow.hooks import JobRunFailed

    failed = pickle.loads(pickle.dumps(JobRunFailed("retention", 2, "unknown topic 'nope'")))
    assert failed.exit_code == 2
    assert str(failed) == "kfs retention on the job server exited 2: unknown topic 'nope'"
