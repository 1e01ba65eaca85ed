"""What a handler sees of the daemon: `RequestContext`, and the broker's settings.

A handler is ``async def handle(context, request) -> response body``.  The
broker (`kfs_core.server.broker.Broker`) builds one `RequestContext` per
request from its services and the connection's state (the principal's
session, the listener's advertised address, the client's host), so a
handler names exactly what it uses and nothing here imports the broker:
the API modules sit below it.

`BrokerOptions` is the settings part: what the broker tells clients about
itself and how it treats unknown topics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kfs_core.groups.coordinator import GroupCoordinator, GroupSettings
from kfs_core.groups.offset_log import DEFAULT_PARTITIONS
from kfs_core.log.log_manager import LogManager
from kfs_core.security.acls import CLUSTER_NAME, AclStore, Authorizer, Operation, ResourceType
from kfs_core.security.sasl import Authenticator, Session
from kfs_core.security.users import UserStore
from kfs_core.server.directory import TopicDirectory
from kfs_core.server.metrics import ServerMetrics
from kfs_core.server.notifier import AppendNotifier
from kfs_core.server.protocol import ApiKey, ErrorCode

__all__ = ["BrokerOptions", "RequestContext"]


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


@dataclass(slots=True, kw_only=True)
class RequestContext:
    """One request's view of the daemon: the principal, the listener, the services.

    ``session`` is the connection's security session (listener, principal,
    SASL state), None outside a connection (a handler called directly);
    ``advertised`` is the (host, port) Metadata and FindCoordinator name for
    the connection's listener; ``client_host`` the client's address as
    Kafka shows it ("/127.0.0.1").  The security services are None when the
    daemon runs without them (no SASL listener, no ACL authorizer, no store
    of users).
    """

    options: BrokerOptions
    log: LogManager
    topics: TopicDirectory
    groups: GroupCoordinator
    notifier: AppendNotifier
    metrics: ServerMetrics
    new_producer_id: Callable[[], int]
    authenticator: Authenticator | None = None
    authorizer: Authorizer | None = None
    acl_store: AclStore | None = None
    users: UserStore | None = None
    session: Session | None = None
    advertised: tuple[str, int] = ("", 0)
    client_host: str = ""

    def count_error(self, api: ApiKey, code: int) -> None:
        """Count a non-zero error code a response carries, by API and error name."""
        if code != ErrorCode.NONE:
            try:
                name = ErrorCode(code).name
            except ValueError:
                name = str(code)
            self.metrics.partition_errors.labels(api.name, name).inc()

    def may_create_topic(self, name: str) -> bool:
        """Whether this request's principal may auto-create ``name`` (CREATE, as Kafka asks)."""
        session, authorizer = self.session, self.authorizer
        if authorizer is None or session is None:
            return True
        return any(
            authorizer.authorize(session.principal, session.host, Operation.CREATE, rtype, res)
            for rtype, res in ((ResourceType.CLUSTER, CLUSTER_NAME), (ResourceType.TOPIC, name))
        )
