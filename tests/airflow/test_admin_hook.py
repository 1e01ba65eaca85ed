"""KfsAdminHook: the daemon's consumer groups, at the address the ``kfs_default`` connection names."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from testkit.ports import free_port
from tests.airflow.conftest import kfs_connection_env

pytestmark = pytest.mark.airflow


def test_consumer_groups_need_the_daemons_address(kfs_connection: str) -> None:
    from kfs_airflow.hooks import DaemonNotConfigured, KfsAdminHook

    hook = KfsAdminHook()
    assert hook.bootstrap_servers == ""
    with pytest.raises(DaemonNotConfigured, match="daemon address not configured"):
        hook.consumer_groups()


def test_consumer_groups_give_up_at_once_on_a_refused_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kfs_airflow.hooks import KfsAdminHook

    from kfs_core.kafka_admin import DaemonUnreachable

    nobody = f"127.0.0.1:{free_port()}"
    env = kfs_connection_env("file:///unused", bootstrap_servers=f" {nobody} ")
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
    hook = KfsAdminHook()
    assert hook.bootstrap_servers == nobody
    started = time.monotonic()
    with pytest.raises(DaemonUnreachable, match=f"cannot reach the daemon at {nobody}: "):
        hook.consumer_groups(timeout_s=30)
    assert time.monotonic() - started < 10, "all brokers down must end the wait, not the deadline"


def test_consumer_groups_stop_at_the_deadline_when_the_daemon_is_silent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port that accepts connections and never answers: the read ends at its deadline."""
    from kfs_airflow.hooks import KfsAdminHook

    from kfs_core.kafka_admin import DaemonUnreachable

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes handshakes; nobody ever reads
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        env = kfs_connection_env("file:///unused", bootstrap_servers=address)
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
        started = time.monotonic()
        with pytest.raises(DaemonUnreachable, match=f"no answer from the daemon at {address}"):
            KfsAdminHook().consumer_groups(timeout_s=1.0)
        assert time.monotonic() - started < 5


@pytest.mark.integration
def test_consumer_groups_through_a_sasl_ssl_listener(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The connection's extra carries the daemon's TLS/SASL settings; the password is masked."""
    from kfs_airflow.hooks import KfsAdminHook

    from testkit.daemon import DaemonFactory, add_user
    from testkit.pki import make_pki

    pki = make_pki(tmp_path / "pki")
    port = free_port()
    factory = DaemonFactory(tmp_path)
    try:
        daemon = factory.start(name="sasl", extra_args=[
            "--listeners", f"SASL_SSL://127.0.0.1:{port}",
            "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key)])  # fmt: skip
        add_user(daemon, "airflow", "airflow secret")
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(
            daemon.store_url, "test", bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
            sasl_username="airflow", sasl_password="airflow secret", ssl_ca_location=str(pki.ca),
        ))  # fmt: skip
        hook = KfsAdminHook()
        assert hook.daemon_security()["sasl.username"] == "airflow"
        assert hook.consumer_groups(timeout_s=20) == []  # answered over SASL_SSL
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(
            daemon.store_url, "test", bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
            sasl_username="airflow", sasl_password="wrong", ssl_ca_location=str(pki.ca),
        ))  # fmt: skip
        from kfs_core.kafka_admin import DaemonUnreachable

        with pytest.raises(DaemonUnreachable) as refused:
            KfsAdminHook().consumer_groups(timeout_s=10)
        assert "wrong" not in str(refused.value)
    finally:
        factory.close()
