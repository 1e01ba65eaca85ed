"""The broker: dispatches decoded requests to their API handlers (`kfs_core.server.apis`).

`Broker` is one node of a cluster of daemons (`ClusterView`; alone, a
`SingleNode` that leads every partition); it holds what the handlers share
- options, the cluster view, the partition log, the topic directory, the
fetch notifier, the group coordinator, producer ids, metrics - and turns a
`Request` into a future of its response body through `REGISTRY`.  A handler
never sees the broker: each request gets a `RequestContext` with the
services and the connection's session, listener and client host.

Ordering: `Broker.begin` runs in request order on a connection.  Produce's
``start`` does its lookups there and starts its appends in order (see
`kfs_core.server.apis.produce`); every other API runs as a task.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
from collections.abc import Sequence
from typing import Any

from kfs_core.cluster.peers import PeerClient
from kfs_core.cluster.view import ClusterView, NodeInfo, SingleNode
from kfs_core.errors import UnknownTopicOrPartition
from kfs_core.groups.coordinator import GroupCoordinator
from kfs_core.groups.offset_log import OFFSETS_TOPIC, OffsetLog
from kfs_core.groups.transactions import TransactionCoordinator
from kfs_core.groups.txn_log import TRANSACTION_TOPIC, TransactionLog
from kfs_core.log.log_manager import LogManager
from kfs_core.security.acls import AclStore, Authorizer
from kfs_core.security.sasl import Authenticator
from kfs_core.security.users import UserStore
from kfs_core.server.apis import REGISTRY
from kfs_core.server.apis.base import CLIENT_HOST, SESSION, advertised_address
from kfs_core.server.apis.context import BrokerOptions, RequestContext
from kfs_core.server.apis.producer_ids import ProducerIds
from kfs_core.server.authz import AuditLog, check, filter_response
from kfs_core.server.directory import TopicDirectory
from kfs_core.server.markers import MarkerRouter
from kfs_core.server.metrics import ServerMetrics
from kfs_core.server.notifier import AppendNotifier
from kfs_core.server.protocol import ErrorCode, Request
from kfs_core.server.protocol.bodies import ResponseBody

__all__ = ["CLIENT_HOST", "Broker", "cluster_id_for", "error_response", "single_node"]


def cluster_id_for(store_url: str, namespace: str) -> str:
    """A stable Kafka-style cluster id (22 characters of URL-safe base64) for this log."""
    digest = hashlib.sha256(f"{store_url}\0{namespace}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def error_response(
    request: Request[Any], code: ErrorCode, options: BrokerOptions, message: str | None = None
) -> ResponseBody:
    """A response to ``request`` carrying ``code`` everywhere it can hold one.

    What the daemon answers when a handler raised (UNKNOWN_SERVER_ERROR).
    """
    return REGISTRY[request.api_key].error_body(request, code, message, options)


def single_node(options: BrokerOptions) -> SingleNode:
    """The view of a daemon alone on its namespace, as ``options`` describe it."""
    listeners = options.listeners or {
        "PLAINTEXT": (options.advertised_host, options.advertised_port)
    }
    return SingleNode(
        NodeInfo(
            node_id=options.node_id,
            incarnation="",
            listeners=dict(listeners),
            durability=options.durability,
        )
    )


class Broker:
    """Serves Kafka requests from the partition log (`LogManager`) and the topic registry.

    ``cluster`` is the daemons serving the namespace (`ClusterView`); None:
    this daemon alone (`single_node`).  Each request reads the attribute,
    so it may be replaced while the broker serves.
    """

    def __init__(
        self,
        options: BrokerOptions,
        partition_log: LogManager,
        metrics: ServerMetrics,
        cluster: ClusterView | None = None,
    ) -> None:
        self.options = options
        self.cluster: ClusterView = cluster if cluster is not None else single_node(options)
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
        self.offset_log = OffsetLog(partition_log, partitions=options.offsets_topic_partitions)
        self.groups = GroupCoordinator(
            self.offset_log,
            self._topic_partitions,
            options.groups,
            # With other daemons on the namespace, this one coordinates only the
            # groups of the offsets partitions it holds.
            leadership=None
            if cluster is None
            else functools.partial(partition_log.holding, OFFSETS_TOPIC),
        )

        self.txn_log = TransactionLog(
            partition_log, partitions=options.transaction_topic_partitions
        )
        # Requests to the other daemons: the markers of partitions they lead.
        self.peers = PeerClient(self._live_nodes, tls=options.peer_tls, login=options.peer_login)
        self.transactions = TransactionCoordinator(
            self.txn_log,
            MarkerRouter(lambda: self.cluster, partition_log.write_marker, self.peers),
            self.producer_ids.new,
            options.transactions,
            leadership=None
            if cluster is None
            else functools.partial(partition_log.holding, TRANSACTION_TOPIC),
            offsets_done=self.groups.complete_transaction,
        )

    async def start(self) -> None:
        """Load what must be loaded before the first request: committed offsets, transactions."""
        loaded, seconds = await self.groups.start()
        self.metrics.offsets_loaded.set(loaded)
        self.metrics.offsets_load_seconds.set(seconds)
        await self.transactions.start()

    async def close(self) -> None:
        """After the last request: stop the coordinators' timers and sweeps."""
        await self.transactions.close()
        await self.groups.close()
        self.peers.close()

    def _live_nodes(self) -> Sequence[NodeInfo]:
        return self.cluster.live_nodes()  # the view of the moment: it may be replaced

    async def _topic_partitions(self, name: str) -> int | None:
        try:
            info = await self.log.topic(name)
        except UnknownTopicOrPartition:
            return None
        return info.partitions

    def stop(self) -> None:
        """Shutdown has begun: long polls answer now."""
        self.notifier.stop()

    async def begin(self, request: Request[Any]) -> asyncio.Future[ResponseBody]:
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

        async def finish() -> ResponseBody:
            response = await future
            if plan is not None:
                response = plan.merge(response, self.error_response)
            return filter_response(authorizer, session, self.audit, request, response)

        return asyncio.ensure_future(finish())

    def context(self) -> RequestContext:
        """What a handler of a request on the current connection may use."""
        return RequestContext(
            options=self.options,
            cluster=self.cluster,
            offsets_partition=self.offset_log.partition_for,
            log=self.log,
            topics=self.topics,
            groups=self.groups,
            transactions=self.transactions,
            notifier=self.notifier,
            metrics=self.metrics,
            new_producer_id=self.producer_ids.new,
            authenticator=self.authenticator,
            authorizer=self.authorizer,
            acl_store=self.acl_store,
            users=self.users,
            session=SESSION.get(),
            advertised=advertised_address(self.options),
            client_host=CLIENT_HOST.get(),
        )

    async def _dispatch(self, request: Request[Any]) -> asyncio.Future[ResponseBody]:
        api = REGISTRY[request.api_key]
        context = self.context()
        if api.start is not None:
            return await api.start(context, request)
        assert api.handle is not None
        return asyncio.ensure_future(api.handle(context, request))

    def error_response(
        self, request: Request[Any], code: ErrorCode, message: str | None = None
    ) -> ResponseBody:
        """`error_response` with this broker's options."""
        return error_response(request, code, self.options, message)
