"""`KfsHook`: where a KFS namespace lives, read from an Airflow connection.

Connection ``kfs_default`` (type ``kfs``)::

    extra     {"store_url": "s3://kfs-data/prod" | "file:///srv/kfs/store",
               "namespace": "default",
               "s3_endpoint_url": "http://minio:9000",     # MinIO, moto; optional
               "region_name": "eu-west-1",                 # optional
               "bootstrap_servers": "kfs:9092"}            # the daemon's Kafka address;
                                                           # optional (no consumer groups)
    login     AWS access key id      (optional; else the usual AWS chain)
    password  AWS secret access key  (optional)

As an environment variable, e.g. ``AIRFLOW_CONN_KFS_DEFAULT='{"conn_type": "kfs",
"extra": {"store_url": "file:///srv/kfs/store", "namespace": "default"}}'``.

The hook owns the store client and the daemon's Kafka admin client.  Operators
and sensors ask it for the store, the topics, and the command-line arguments
and environment a Spark job needs; the KFS page asks it for the consumer groups
(`consumer_groups`), which live in the daemon, not in the store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    # kfs_core is imported where it is used: DAG files import this module through the
    # operators, and parsing a DAG must stay cheap.
    from confluent_kafka.admin import AdminClient

    from kfs_airflow.groups import ConsumerGroup
    from kfs_core.catalog import PartitionState, TopicRegistry
    from kfs_core.storage import ObjectStore

__all__ = ["ADMIN_TIMEOUT_S", "KfsConnectionError", "KfsHook"]

#: How long the consumer-group read may take in all (the page waits for it).
ADMIN_TIMEOUT_S = 5.0


class KfsConnectionError(ValueError):
    """The ``kfs`` connection is missing a setting or names an unusable store."""


class KfsHook(BaseHook):
    """Store URL, namespace and S3 settings of a KFS namespace, from a ``kfs`` connection."""

    conn_name_attr = "kfs_conn_id"
    default_conn_name = "kfs_default"
    conn_type = "kfs"
    hook_name = "KFS"

    def __init__(self, kfs_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kfs_conn_id = kfs_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port", "host"],
            "relabeling": {"login": "AWS access key id", "password": "AWS secret access key"},
            "placeholders": {
                "extra": json.dumps(
                    {
                        "store_url": "s3://kfs-data/prod or file:///srv/kfs/store",
                        "namespace": "default",
                        "s3_endpoint_url": "http://minio:9000",
                        "bootstrap_servers": "kfs:9092",
                    }
                ),
            },
        }

    # --- settings -------------------------------------------------------------

    @cached_property
    def _connection(self) -> Any:
        return self.get_connection(self.kfs_conn_id)

    @cached_property
    def _settings(self) -> dict[str, Any]:
        conn = self._connection
        extra = conn.extra_dejson or {}
        store_url = extra.get("store_url") or ""
        if not store_url:
            raise KfsConnectionError(
                f"connection {self.kfs_conn_id!r} has no store_url in its extra "
                '(e.g. {"store_url": "file:///srv/kfs/store", "namespace": "default"})'
            )
        return {
            "store_url": str(store_url),
            "namespace": str(extra.get("namespace") or "default"),
            "s3_endpoint_url": str(extra.get("s3_endpoint_url") or ""),
            "region_name": str(extra.get("region_name") or ""),
            "aws_access_key_id": conn.login or "",
            "aws_secret_access_key": conn.password or "",
        }

    @property
    def store_url(self) -> str:
        return str(self._settings["store_url"])

    @property
    def namespace(self) -> str:
        return str(self._settings["namespace"])

    @property
    def bootstrap_servers(self) -> str:
        """The daemon's Kafka address (``bootstrap.servers``); "" when the connection has none.

        Read apart from the store settings: the groups need no store, the store no daemon.
        """
        extra = self._connection.extra_dejson or {}
        return str(extra.get("bootstrap_servers") or "").strip()

    @property
    def is_s3(self) -> bool:
        return self.store_url.lower().startswith("s3://")

    # --- clients --------------------------------------------------------------

    def get_conn(self) -> ObjectStore:
        """The object store of the connection (Airflow's name for the client)."""
        return self.get_store()

    def get_store(self) -> ObjectStore:
        from kfs_core.storage import open_store

        if not self.is_s3:
            try:
                return open_store(self.store_url)
            except ValueError as exc:
                raise KfsConnectionError(f"connection {self.kfs_conn_id!r}: {exc}") from None
        env = self.job_env()
        # boto3 reads credentials from the environment; the hook only sets what the
        # connection gives, so an instance profile or AWS_PROFILE still works.
        for name, value in env.items():
            os.environ.setdefault(name, value)
        return open_store(
            self.store_url,
            endpoint_url=self._settings["s3_endpoint_url"] or None,
            region_name=self._settings["region_name"] or None,
        )

    def topics(self) -> TopicRegistry:
        from kfs_core.catalog import TopicRegistry

        return TopicRegistry(self.get_store(), self.namespace)

    def list_topics(self) -> list[str]:
        """The namespace's topics, sorted."""
        return sorted(self.topics().list_topics())

    def partition_states(self, topics: Iterable[str] | None = None) -> list[PartitionState]:
        """The newest catalog state of every partition of ``topics`` (default: all), sorted.

        A topic that does not exist raises `kfs_core.errors.UnknownTopic`.
        """
        from kfs_core.catalog import PartitionCatalog, TopicRegistry

        store = self.get_store()
        try:
            registry = TopicRegistry(store, self.namespace)
            names = sorted(set(topics)) if topics is not None else registry.list_topics()
            return [
                PartitionCatalog(store, self.namespace, name, partition).load()
                for name in names
                for partition in range(registry.describe(name).partitions)
            ]
        finally:
            store.close()

    # --- the daemon ---------------------------------------------------------------

    def get_admin_client(self, **config: Any) -> AdminClient:
        """A confluent-kafka AdminClient on the daemon, with short socket timeouts.

        ``config`` adds librdkafka settings (``error_cb`` ...).  Raises
        `DaemonNotConfigured` when the connection has no ``bootstrap_servers``.
        """
        from confluent_kafka.admin import AdminClient

        from kfs_airflow.groups import DaemonNotConfigured

        if not self.bootstrap_servers:
            raise DaemonNotConfigured(
                f'daemon address not configured: add "bootstrap_servers" (the address of '
                f'`kfs serve`, e.g. "127.0.0.1:9092") to connection {self.kfs_conn_id!r}\'s extra'
            )
        timeout_ms = int(ADMIN_TIMEOUT_S * 1000)
        return AdminClient(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "client.id": "kfs-airflow",
                "socket.timeout.ms": timeout_ms,
                "socket.connection.setup.timeout.ms": timeout_ms,
                # The page shows what went wrong; keep librdkafka's retry lines out of the logs.
                "log_level": 0,
                **config,
            }
        )

    def consumer_groups(self, *, timeout_s: float = ADMIN_TIMEOUT_S) -> list[ConsumerGroup]:
        """The daemon's consumer groups: state, members, committed offset and lag per partition.

        Raises `kfs_airflow.groups.DaemonNotConfigured` without ``bootstrap_servers``
        and `kfs_airflow.groups.DaemonUnreachable` when the daemon does not answer
        within ``timeout_s``.
        """
        from kfs_airflow.groups import BrokerWatch, read_consumer_groups

        watch = BrokerWatch()
        admin = self.get_admin_client(error_cb=watch)
        return read_consumer_groups(
            admin, watch, bootstrap=self.bootstrap_servers, timeout_s=timeout_s
        )

    # --- Spark jobs -----------------------------------------------------------

    def job_args(
        self, *, topics: list[str] | tuple[str, ...] | str | None = None, dry_run: bool = False
    ) -> list[str]:
        """The shared ``spark_jobs`` arguments for this namespace (see `spark_jobs.common`)."""
        args = ["--store-url", self.store_url, "--namespace", self.namespace]
        if self._settings["s3_endpoint_url"]:
            args += ["--s3-endpoint-url", self._settings["s3_endpoint_url"]]
        if isinstance(topics, str):
            topics = [t.strip() for t in topics.split(",") if t.strip()]
        if topics:
            args += ["--topics", ",".join(topics)]
        if dry_run:
            args.append("--dry-run")
        return args

    def job_env(self) -> dict[str, str]:
        """Environment a job process needs for S3 credentials the connection holds."""
        env: dict[str, str] = {}
        if self._settings["aws_access_key_id"]:
            env["AWS_ACCESS_KEY_ID"] = self._settings["aws_access_key_id"]
        if self._settings["aws_secret_access_key"]:
            env["AWS_SECRET_ACCESS_KEY"] = self._settings["aws_secret_access_key"]
        if self._settings["region_name"]:
            env["AWS_DEFAULT_REGION"] = self._settings["region_name"]
        return env

    def test_connection(self) -> tuple[bool, str]:
        try:
            topics = self.list_topics()
        except Exception as exc:  # Airflow shows the message in the connection form
            return False, str(exc)
        return True, f"{self.store_url} namespace {self.namespace!r}: {len(topics)} topics"
