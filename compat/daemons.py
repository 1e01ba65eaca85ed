"""The daemons the compat suites run against: one on PLAINTEXT, one on SASL_SSL with ACLs.

`plaintext_daemon` is `kfs serve` as `make run` starts it (no authorizer).
`sasl_ssl_daemon` has a SASL_SSL listener (TLS from `testkit.pki`), the
``acl`` authorizer, and a SCRAM-SHA-512 super user, ``admin``, whose client
properties (`SaslSsl.properties`) are what Kafka's Java tools take with
``--command-config`` and librdkafka-based clients read as configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testkit.daemon import Daemon, DaemonFactory, add_user
from testkit.pki import Pki
from testkit.ports import free_port

__all__ = ["ADMIN", "SaslSsl", "plaintext_daemon", "sasl_ssl_daemon"]

ADMIN = ("admin", "compat-admin-secret")


@dataclass(frozen=True)
class SaslSsl:
    """A SASL_SSL daemon and how a client logs in to it."""

    daemon: Daemon
    bootstrap: str
    properties: Path  # Java client properties: SASL_SSL, SCRAM-SHA-512, the CA as a PEM truststore
    user: str
    password: str
    ca: Path


def plaintext_daemon(factory: DaemonFactory) -> Daemon:
    return factory.start(name="compat-plaintext")


def sasl_ssl_daemon(factory: DaemonFactory, pki: Pki, scratch: Path) -> SaslSsl:
    port = free_port()
    user, password = ADMIN
    daemon = factory.start(
        name="compat-sasl-ssl",
        extra_args=[
            "--listeners", f"SASL_SSL://127.0.0.1:{port}",
            "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
            "--authorizer", "acl", "--super-users", f"User:{user}",
        ],
    )  # fmt: skip
    add_user(daemon, user, password)
    properties = scratch / "sasl-ssl.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki.ca}\n"
    )
    return SaslSsl(daemon, f"127.0.0.1:{port}", properties, user, password, pki.ca)
