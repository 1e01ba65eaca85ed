"""`KfsAdminHook`: the daemon's Kafka admin client, from the ``kfs`` connection.

The consumer groups live in the daemon (``kfs serve``), not in the store, so
the KFS page asks the daemon for them over the Kafka protocol, through the
admin wrapper `kfs groups` uses too (`kfs_core.kafka_admin`).  The connection's
extra names the daemon::

    extra     {"bootstrap_servers": "kfs:9092",            # the daemon's Kafka address;
                                                           # optional (no consumer groups)
               "security_protocol": "SASL_SSL",            # the daemon's listener, if not
               "sasl_mechanism": "SCRAM-SHA-512",          # PLAINTEXT; optional
               "sasl_username": "airflow",
               "sasl_password": "...",                     # masked by Airflow in logs
               "ssl_ca_location": "/etc/kfs/ca.pem"}

The address is read apart from the store settings (`kfs_airflow.hooks.kfs`):
the groups need no store, the store no daemon.  confluent-kafka is imported
where it is used: DAG files import this package, and parsing a DAG stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kfs_airflow.hooks.base import KfsBaseHook

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from kfs_core.kafka_admin import ConsumerGroup, OpenTransaction

__all__ = ["ADMIN_TIMEOUT_S", "DaemonNotConfigured", "KfsAdminHook"]

#: How long the consumer-group read may take in all (the page waits for it).
ADMIN_TIMEOUT_S = 5.0

#: The extra's keys for the daemon's TLS/SASL listener (librdkafka's names with ``_``).
_DAEMON_SECURITY_KEYS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_ca_location",
    "ssl_certificate_location",
    "ssl_key_location",
)


class DaemonNotConfigured(Exception):
    """The ``kfs`` connection names no daemon address (``bootstrap_servers``)."""


class KfsAdminHook(KfsBaseHook):
    """The daemon a ``kfs`` connection names, asked over the Kafka protocol."""

    hook_name = "KFS daemon (Kafka admin)"

    @property
    def bootstrap_servers(self) -> str:
        """The daemon's Kafka address (``bootstrap.servers``); "" when the connection has none."""
        return str(self._extra.get("bootstrap_servers") or "").strip()

    def _check_configured(self) -> None:
        if not self.bootstrap_servers:
            raise DaemonNotConfigured(
                f'daemon address not configured: add "bootstrap_servers" (the address of '
                f'`kfs serve`, e.g. "127.0.0.1:9092") to connection {self.kfs_conn_id!r}\'s extra'
            )

    def daemon_security(self) -> dict[str, str]:
        """The librdkafka TLS/SASL settings for the daemon from the extra (Kafka's names, ``_`` for ``.``).

        The SASL password sits in the extra under ``sasl_password``: Airflow's secrets
        masker hides any extra value whose key says "password" in logs and the UI; the
        connection's own password field is the store's (AWS) secret.
        """
        extra = self._extra
        return {
            key.replace("_", "."): str(extra[key])
            for key in _DAEMON_SECURITY_KEYS
            if extra.get(key) not in (None, "")
        }

    def get_conn(self) -> AdminClient:
        """A new admin client on the daemon (Airflow's name for it); see `get_admin_client`."""
        return self.get_admin_client()

    def get_admin_client(self, **config: Any) -> AdminClient:
        """A confluent-kafka AdminClient on the daemon, with short socket timeouts.

        ``config`` adds librdkafka settings (``error_cb`` ...).  Raises
        `DaemonNotConfigured` when the connection has no ``bootstrap_servers``.
        """
        from kfs_core.kafka_admin import admin_client

        self._check_configured()
        timeout_ms = int(ADMIN_TIMEOUT_S * 1000)
        client: AdminClient = admin_client(
            self.bootstrap_servers,
            client_id="kfs-airflow",
            security=self.daemon_security(),
            **{
                "socket.timeout.ms": timeout_ms,
                "socket.connection.setup.timeout.ms": timeout_ms,
                **config,
            },
        )
        return client

    def consumer_groups(self, *, timeout_s: float = ADMIN_TIMEOUT_S) -> list[ConsumerGroup]:
        """The daemon's consumer groups: state, members, committed offset and lag per partition.

        Raises `DaemonNotConfigured` without ``bootstrap_servers`` and
        `kfs_core.kafka_admin.DaemonUnreachable` when the daemon does not answer
        within ``timeout_s``.
        """
        from kfs_core.kafka_admin import BrokerWatch, read_consumer_groups

        watch = BrokerWatch()
        admin = self.get_admin_client(error_cb=watch)
        return read_consumer_groups(
            admin, watch, bootstrap=self.bootstrap_servers, timeout_s=timeout_s
        )

    def open_transactions(self, *, timeout_s: float = ADMIN_TIMEOUT_S) -> list[OpenTransaction]:
        """The daemons' open transactions, longest open first (ListTransactions, DescribeTransactions).

        Raises `DaemonNotConfigured` without ``bootstrap_servers`` and
        `kfs_core.kafka_admin.DaemonUnreachable` when no daemon answers within
        ``timeout_s``.
        """
        from kfs_core.kafka_admin import read_open_transactions

        self._check_configured()
        return read_open_transactions(
            self.bootstrap_servers, self.daemon_security(), timeout_s=timeout_s
        )
