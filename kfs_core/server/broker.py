"""The broker: dispatches decoded requests to their API handlers (`kfs_core.server.apis`).

`Broker` is a single node (id 0) that leads every partition; it holds what
the handlers share - options, the partition log, the topic directory, the
fetch notifier, the group coordinator, producer ids, metrics - and turns a `Request` into a future
of its response body through `REGISTRY`.

Ordering: `Broker.begin` runs in request order on a connection.  Produce's
``start`` does its lookups there and starts its appends in order (see
`kfs_core.server.apis.produce`); every other API runs as a task.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kfs_core.errors import UnknownTopicOrPartition
from kfs_core.groups.coordinator import GroupCoordinator, GroupSettings
from kfs_core.groups.offset_log import DEFAULT_PARTITIONS, OffsetLog
from kfs_core.log.log_manager import LogManager
from kfs_core.security.acls import (
    CLUSTER_NAME,
    AclStore,
    Authorizer,
    Operation,
    ResourceType,
)
from kfs_core.security.sasl import Authenticator
from kfs_core.security.users import UserStore
from kfs_core.server.apis import REGISTRY
from kfs_core.server.apis.base import CLIENT_HOST, SESSION
from kfs_core.server.apis.producer_ids import ProducerIds
from kfs_core.server.authz import AuditLog, check, filter_response
from kfs_core.server.directory import TopicDirectory
from kfs_core.server.metrics import ServerMetrics
from kfs_core.server.notifier import AppendNotifier
from kfs_core.server.protocol import ApiKey, ErrorCode, Request

__all__ = ["CLIENT_HOST", "Broker", "BrokerOptions", "cluster_id_for", "error_response"]


def cluster_id_for(store_url: str, namespace: str) -> str:
    """A stable Kafka-style cluster id (22 characters of URL-safe base64) for this log."""
    digest = hashlib.sha256(f"{store_url}\0{namespace}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class BrokerOptions:
    """What the broker tells clients about itself and how it treats unknown topics."""

    advertised_host: str
    advertised_port: int
    cluster_id: str
    auto_create_topics: bool = True
    default_partitions: int = 1
    broker_configs: Mapping[str, str] = field(default_factory=dict)
    groups: GroupSettings = field(default_factory=GroupSettings)
    offsets_topic_partitions: int = DEFAULT_PARTITIONS  # offsets.topic.num.partitions


def error_response(
    request: Request, code: ErrorCode, options: BrokerOptions, message: str | None = None
) -> Any:
    """A response to ``request`` carrying ``code`` everywhere it can hold one.

    What the daemon answers when a handler raised (UNKNOWN_SERVER_ERROR).
    """
    return REGISTRY[request.api_key].error_body(request, code, message, options)


class Broker:
    """Serves Kafka requests from the partition log (`LogManager`) and the topic registry."""

    def __init__(
        self, options: BrokerOptions, partition_log: LogManager, metrics: ServerMetrics
    ) -> None:
        self.options = options
        self.log = partition_log
        self.topics = TopicDirectory(partition_log)
        self.metrics = metrics
        self.notifier = AppendNotifier()
        self.producer_ids = ProducerIds()
        # SASL listeners' authenticator (`kfs_core.security.sasl`); None: no SASL listener.
        self.authenticator: Authenticator | None = None
        # KFS_AUTHORIZER=acl: the ACLs in force and where they are kept; None: no authorizer.
        self.authorizer: Authorizer | None = None
        self.acl_store: AclStore | None = None
        # The SASL users in the store (Describe/AlterUserScramCredentials); None outside a daemon.
        self.users: UserStore | None = None
        self.audit = AuditLog()
        self.groups = GroupCoordinator(
            OffsetLog(partition_log, partitions=options.offsets_topic_partitions),
            self._topic_partitions,
            options.groups,
        )

    async def start(self) -> None:
        """Load what must be loaded before the first request: committed offsets."""
        loaded, seconds = await self.groups.start()
        self.metrics.offsets_loaded.set(loaded)
        self.metrics.offsets_load_seconds.set(seconds)

    async def close(self) -> None:
        """After the last request: stop the coordinator's timers and sweeps."""
        await self.groups.close()

    async def _topic_partitions(self, name: str) -> int | None:
        try:
            info = await self.log.topic(name)
        except UnknownTopicOrPartition:
            return None
        return info.partitions

    def stop(self) -> None:
        """Shutdown has begun: long polls answer now."""
        self.notifier.stop()

    async def begin(self, request: Request) -> asyncio.Future[Any]:
        """Start serving ``request``; the future gives its response body.

        Called in request order on a connection.  Exceptions, here or in the
        future, are the caller's to answer with `error_response`.
        """
        session = SESSION.get()
        authorizer = self.authorizer
        if authorizer is None or session is None:
            return await self._dispatch(request)
        plan = check(authorizer, session, self.audit, request)
        if plan is None:
            future = await self._dispatch(request)
        elif plan.whole is not None:
            future = asyncio.get_running_loop().create_future()
            future.set_result(self.error_response(request, plan.whole))
            return future
        else:
            future = await self._dispatch(plan.request or request)

        async def finish() -> Any:
            response = await future
            if plan is not None:
                response = plan.merge(response, self.error_response)
            return filter_response(authorizer, session, self.audit, request, response)

        return asyncio.ensure_future(finish())

    def may_create_topic(self, name: str) -> bool:
        """Whether this connection's principal may auto-create ``name`` (CREATE, as Kafka asks)."""
        session, authorizer = SESSION.get(), self.authorizer
        if authorizer is None or session is None:
            return True
        return any(
            authorizer.authorize(session.principal, session.host, Operation.CREATE, rtype, res)
            for rtype, res in ((ResourceType.CLUSTER, CLUSTER_NAME), (ResourceType.TOPIC, name))
        )

    async def _dispatch(self, request: Request) -> asyncio.Future[Any]:
        api = REGISTRY[request.api_key]
        if api.start is not None:
            return await api.start(self, request)
        assert api.handle is not None
        return asyncio.ensure_future(api.handle(self, request))

    def error_response(self, request: Request, code: ErrorCode, message: str | None = None) -> Any:
        """`error_response` with this broker's options."""
        return error_response(request, code, self.options, message)

    def count_error(self, api: ApiKey, code: int) -> None:
        """Count a non-zero error code a response carries, by API and error name."""
        if code != ErrorCode.NONE:
            try:
                name = ErrorCode(code).name
            except ValueError:
                name = str(code)
            self.metrics.partition_errors.labels(api.name, name).inc()
