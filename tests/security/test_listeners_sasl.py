"""TLS listeners and SASL (PLAIN, SCRAM-SHA-256/512) with real clients over real sockets.

A `kfs serve` with several listeners at once (Kafka's ``listeners`` shape):
confluent-kafka and kafka-python produce and consume over SSL, mutual TLS,
SASL_SSL with SCRAM-SHA-512 and PLAIN, and SASL_PLAINTEXT with
SCRAM-SHA-256, each connection told the address of its own listener by
Metadata.  Users are kept in the store: two daemons on one namespace share
them, a restart keeps them, a new password takes effect without a restart.
Wrong passwords, unknown users and unsupported mechanisms get
SASL_AUTHENTICATION_FAILED / UNSUPPORTED_SASL_MECHANISM, counted in the
metrics, while other clients carry on.  SIGHUP reloads the certificate.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import ssl
import time
import uuid
import warnings
from typing import Any

import pytest

from testkit.daemon import Daemon, DaemonFactory, add_user
from testkit.pki import Pki
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.security.conftest import tls_args
from tests.server.conftest import confluent_kafka

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import kafka
    import kafka.errors

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PASSWORD = "correct horse battery staple"


def _listeners(**ports: int) -> str:
    return ",".join(f"{protocol}://127.0.0.1:{port}" for protocol, port in ports.items())


def _start(daemons: DaemonFactory, pki: Pki, name: str, *, mutual: bool = False,
           store_url: str | None = None, **protocols: int) -> Daemon:  # fmt: skip
    args = ["--listeners", _listeners(**protocols), *tls_args(pki, mutual=mutual)]
    return daemons.start(name=name, extra_args=args, store_url=store_url)


def _confluent(port: int, protocol: str, pki: Pki, **extra: str) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": protocol,
        "log_level": 2,
    }
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(pki.ca)
    return conf | extra


def _round_trip(
    conf: dict[str, Any], topic: str, count: int = 20, *, group: bool = True
) -> list[bytes]:
    """Produce ``count`` values with confluent-kafka over ``conf``, consume them back.

    ``group=False`` assigns the partitions and commits nothing, so the daemon
    writes nothing to ``__consumer_offsets``.
    """
    producer = confluent_kafka.Producer({**conf, "acks": "all", "message.timeout.ms": 20_000})
    errors: list[Any] = []
    values = [b"%s-%d" % (topic.encode(), i) for i in range(count)]
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors
    consumer = confluent_kafka.Consumer(
        {
            **conf,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": group,
        }
    )
    got: list[bytes] = []
    try:
        if group:
            consumer.subscribe([topic])
        else:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                             for p in partitions])  # fmt: skip
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def _sasl(mechanism: str, user: str = "alice", password: str = PASSWORD) -> dict[str, str]:
    return {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def _auth_fails(conf: dict[str, Any]) -> str:
    """What librdkafka reports (its error callback) for a connection whose login is refused."""
    errors: list[Any] = []
    producer = confluent_kafka.Producer({**conf, "error_cb": errors.append})

    def refused() -> bool:
        producer.poll(0.2)
        return any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors)

    wait_for(refused, timeout=20, what="an authentication error")
    return " ".join(e.str() for e in errors)


def test_ssl_and_plaintext_listeners_each_advertise_themselves(
    daemons: DaemonFactory, pki: Pki
) -> None:
    ssl_port, plain_port = free_port(), free_port()
    _start(daemons, pki, "two", SSL=ssl_port, PLAINTEXT=plain_port)
    for port, protocol in ((ssl_port, "SSL"), (plain_port, "PLAINTEXT")):
        conf = _confluent(port, protocol, pki)
        brokers = confluent_kafka.admin.AdminClient(conf).list_topics(timeout=10).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", port)]
        values = _round_trip(conf, f"over-{protocol.lower()}")
        assert sorted(values) == sorted(
            b"over-%s-%d" % (protocol.lower().encode(), i) for i in range(20)
        )
    # kafka-python over TLS too
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{ssl_port}", security_protocol="SSL",
        ssl_cafile=str(pki.ca), acks="all",
    )  # fmt: skip
    metadata = producer.send("over-ssl", b"kafka-python").get(30)
    producer.close()
    assert metadata.offset == 20


def test_mutual_tls_wants_a_certificate_the_ca_signed(daemons: DaemonFactory, pki: Pki) -> None:
    port = free_port()
    daemon = _start(daemons, pki, "mtls", mutual=True, SSL=port)
    good = _confluent(port, "SSL", pki, **{
        "ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)})  # fmt: skip
    assert len(_round_trip(good, "mtls")) == 20
    for cert, key in (
        (None, None),
        (pki.rogue_cert, pki.rogue_key),
        (pki.expired_cert, pki.expired_key),
    ):
        conf = _confluent(port, "SSL", pki, **({"ssl.certificate.location": str(cert),
                                                "ssl.key.location": str(key)} if cert else {}))  # fmt: skip
        with pytest.raises(confluent_kafka.KafkaException):
            confluent_kafka.admin.AdminClient(conf).list_topics(timeout=5)
    assert daemon.alive() and len(_round_trip(good, "mtls-after", 5)) == 5
    # kafka-python with its client certificate too.
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SSL", ssl_cafile=str(pki.ca),
        ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key), acks="all",
    )  # fmt: skip
    assert producer.send("mtls", b"kafka-python").get(30).offset == 20
    producer.close()


def test_scram_and_plain_over_sasl_ssl_and_sasl_plaintext(daemons: DaemonFactory, pki: Pki) -> None:
    sasl_ssl, sasl_plain = free_port(), free_port()
    daemon = _start(daemons, pki, "sasl", SASL_SSL=sasl_ssl, SASL_PLAINTEXT=sasl_plain)
    add_user(daemon, "alice", PASSWORD)
    scram512 = _confluent(sasl_ssl, "SASL_SSL", pki, **_sasl("SCRAM-SHA-512"))
    assert len(_round_trip(scram512, "orders")) == 20
    plain = _confluent(sasl_ssl, "SASL_SSL", pki, **_sasl("PLAIN"))
    assert len(_round_trip(plain, "orders-plain")) == 20
    scram256 = _confluent(sasl_plain, "SASL_PLAINTEXT", pki, **_sasl("SCRAM-SHA-256"))
    assert len(_round_trip(scram256, "orders-256")) == 20
    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        consumer = kafka.KafkaConsumer(
            "orders", bootstrap_servers=f"127.0.0.1:{sasl_ssl}", security_protocol="SASL_SSL",
            ssl_cafile=str(pki.ca), sasl_mechanism=mechanism, sasl_plain_username="alice",
            sasl_plain_password=PASSWORD, auto_offset_reset="earliest", consumer_timeout_ms=10_000,
        )  # fmt: skip
        assert len(list(consumer)) == 20
        consumer.close()

    before = daemon.http("/metrics")[1]
    assert 'kfs_sasl_authentications_total{mechanism="SCRAM-SHA-512",result="success"}' in before
    for conf in (
        _confluent(sasl_ssl, "SASL_SSL", pki, **_sasl("SCRAM-SHA-512", password="wrong")),
        _confluent(sasl_ssl, "SASL_SSL", pki, **_sasl("PLAIN", password="wrong")),
        _confluent(sasl_ssl, "SASL_SSL", pki, **_sasl("SCRAM-SHA-256", user="mallory")),
    ):
        assert "Authentication failed" in _auth_fails(conf)
    metrics = daemon.http("/metrics")[1]
    # At least one: librdkafka may try again before its producer is gone.
    failures = re.search(
        r'^kfs_sasl_authentications_total\{mechanism="PLAIN",result="failure"\} (\S+)$',
        metrics,
        re.M,
    )
    assert failures is not None and float(failures.group(1)) >= 1, metrics
    # A client speaking plain Kafka to a SASL port, or TLS to a plaintext one, gets nowhere;
    # the good client carries on.
    with pytest.raises(confluent_kafka.KafkaException):
        confluent_kafka.admin.AdminClient(_confluent(sasl_plain, "PLAINTEXT", pki)).list_topics(
            timeout=5
        )
    with pytest.raises(confluent_kafka.KafkaException):
        confluent_kafka.admin.AdminClient(
            _confluent(sasl_plain, "SASL_SSL", pki, **_sasl("PLAIN"))).list_topics(timeout=5)  # fmt: skip
    assert len(_round_trip(scram512, "after-abuse", 5)) == 5
    assert "secret" not in daemon.log() and PASSWORD not in daemon.log()


def test_users_are_shared_by_daemons_survive_restart_and_change_without_one(
    daemons: DaemonFactory, pki: Pki
) -> None:
    first_port, second_port = free_port(), free_port()
    first = _start(daemons, pki, "first", SASL_PLAINTEXT=first_port)
    second = _start(daemons, pki, "second", store_url=first.store_url, SASL_PLAINTEXT=second_port)
    add_user(first, "bob", PASSWORD, "SCRAM-SHA-512")
    # One writer per partition: only the first daemon writes __consumer_offsets.
    for port, group in ((first_port, True), (second_port, False)):
        conf = _confluent(port, "SASL_PLAINTEXT", pki, **_sasl("SCRAM-SHA-512", "bob"))
        assert len(_round_trip(conf, f"shared-{port}", 5, group=group)) == 5
    # Only SCRAM-SHA-512 was stored: SCRAM-SHA-256 has no credential to check.
    assert "Authentication failed" in _auth_fails(
        _confluent(first_port, "SASL_PLAINTEXT", pki, **_sasl("SCRAM-SHA-256", "bob")))  # fmt: skip
    second.stop()
    second.start()
    conf = _confluent(second_port, "SASL_PLAINTEXT", pki, **_sasl("SCRAM-SHA-512", "bob"))
    assert len(_round_trip(conf, "after-restart", 5, group=False)) == 5

    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-m", "kfs_core.cli", "--store-url", first.store_url, "--namespace",
         "test", "users", "set-password", "bob"], input="new password\n", text=True, check=True,
    )  # fmt: skip

    def old_refused() -> bool:
        try:
            confluent_kafka.admin.AdminClient(conf).list_topics(timeout=5)
        except confluent_kafka.KafkaException:
            return True
        return False

    wait_for(old_refused, timeout=30, what="the old password refused")
    new = _confluent(second_port, "SASL_PLAINTEXT", pki,
                     **_sasl("SCRAM-SHA-512", "bob", "new password"))  # fmt: skip
    assert len(_round_trip(new, "new-password", 5, group=False)) == 5


def test_sighup_reloads_the_certificate_and_keeps_open_connections(
    daemons: DaemonFactory, pki: Pki, tmp_path: Any
) -> None:
    cert, key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    port = free_port()
    args = ["--listeners", f"SSL://127.0.0.1:{port}", "--tls-cert-file", str(cert),
            "--tls-key-file", str(key)]  # fmt: skip
    daemon = daemons.start(name="reload", extra_args=args)

    def served_serial() -> int:
        context = ssl.create_default_context(cafile=str(pki.ca))
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        from cryptography import x509

        return int(x509.load_der_x509_certificate(der).serial_number)

    producer = confluent_kafka.Producer(_confluent(port, "SSL", pki, acks="all"))
    producer.produce("reloaded", b"before")
    assert producer.flush(30) == 0
    old = served_serial()
    new_cert, new_key = pki.server("server-2")
    shutil.copy(new_cert, cert)
    shutil.copy(new_key, key)
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: served_serial() != old, timeout=10, what="the new certificate served")
    producer.produce("reloaded", b"after")  # the connection opened before the reload
    assert producer.flush(30) == 0
    # A broken file on the next reload keeps the current certificate.
    key.write_text("not a key")
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "TLS reload failed" in daemon.log(), timeout=10, what="the refused reload")
    assert served_serial() != old and daemon.alive()


def test_kfs_commands_reach_a_sasl_listener_with_a_command_config(
    daemons: DaemonFactory, pki: Pki, tmp_path: Any
) -> None:
    import subprocess
    import sys

    port = free_port()
    daemon = _start(daemons, pki, "cli", SASL_SSL=port)
    add_user(daemon, "alice", PASSWORD)
    properties = tmp_path / "client.properties"
    properties.write_text(
        "# as for Kafka's own tools\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{PASSWORD}";\n'
        f"ssl.ca.location={pki.ca}\n"
    )
    kfs = [sys.executable, "-m", "kfs_core.cli"]
    at = ["--bootstrap", f"127.0.0.1:{port}", "--command-config", str(properties)]
    subprocess.run([*kfs, "produce", "cli-topic", "--value", "one", "--value", "two", *at],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    consumed = subprocess.run(
        [*kfs, "consume", "cli-topic", "--from-beginning", "--max-messages", "2", *at],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert consumed.stdout.split() == ["one", "two"]
    listed = subprocess.run(
        [*kfs, "groups", "list", *at], check=False, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    properties.write_text("bootstrap.servers=elsewhere:9092\n")
    bad = subprocess.run(
        [*kfs, "consume", "cli-topic", *at], check=False, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode != 0 and "is not a security setting" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_clients_re_authenticate_before_the_session_ends(daemons: DaemonFactory, pki: Pki) -> None:
    """KIP-368: with KFS_CONNECTIONS_MAX_REAUTH_MS the client logs in again on the same connection."""
    port = free_port()
    args = [
        "--listeners",
        f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "--connections-max-reauth-ms",
        "2000",
    ]
    daemon = daemons.start(name="reauth", extra_args=args)
    add_user(daemon, "alice", PASSWORD)
    conf = _confluent(port, "SASL_PLAINTEXT", pki, **_sasl("SCRAM-SHA-512"))
    producer = confluent_kafka.Producer({**conf, "acks": "all"})
    errors: list[Any] = []

    def successes() -> float:
        line = 'kfs_sasl_authentications_total{mechanism="SCRAM-SHA-512",result="success"} '
        text = daemon.http("/metrics")[1]
        return float(text.split(line)[1].split()[0]) if line in text else 0.0

    producer.produce("reauth", b"first", on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0
    first = successes()
    deadline = time.monotonic() + 20
    while successes() < first + 2 and time.monotonic() < deadline:  # produce across sessions
        producer.produce("reauth", b"more", on_delivery=lambda err, msg: err and errors.append(err))
        producer.flush(10)
        time.sleep(0.2)  # paces the producer; the loop waits on the metric
    assert successes() >= first + 2, "no re-authentication within 20 s"
    assert not errors and daemon.alive()
    assert "the SASL session expired" not in daemon.log()
