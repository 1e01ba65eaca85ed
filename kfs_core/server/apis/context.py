"""What a handler sees of the daemon: `RequestContext`, and the broker's settings.

A handler is ``async def handle(context, request) -> response body``.  The
broker (`kfs_core.server.broker.Broker`) builds one `RequestContext` per
request from its services and the connection's state (the principal's
session, the listener's advertised address, the client's host), so a
handler names exactly what it uses and nothing here imports the broker:
the API modules sit below it.

`BrokerOptions` is the settings part: what the broker tells clients about
itself and how it treats unknown topics.

The cluster (`kfs_core.cluster.view.ClusterView`) is the context's
``cluster``; the questions every API asks of it - which brokers a client
on this listener can reach, who leads or coordinates what, whether a
request's leader epoch is current - are `RequestContext` methods, so each
API answers them the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kfs_core.cluster.peers import PeerLogin
from kfs_core.cluster.view import ClusterView, Leader, NodeInfo
from kfs_core.errors import GroupError, KfsError
from kfs_core.groups.coordinator import GroupCoordinator, GroupSettings
from kfs_core.groups.offset_log import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from kfs_core.groups.transactions import TransactionCoordinator, TransactionSettings
from kfs_core.groups.txn_log import TRANSACTION_TOPIC
from kfs_core.log.log_manager import LogManager
from kfs_core.security.acls import CLUSTER_NAME, AclStore, Authorizer, Operation, ResourceType
from kfs_core.security.sasl import Authenticator, Session
from kfs_core.security.tls import TlsFiles
from kfs_core.security.users import UserStore
from kfs_core.server.apis.base import Refused
from kfs_core.server.directory import TopicDirectory
from kfs_core.server.metrics import ServerMetrics
from kfs_core.server.notifier import AppendNotifier
from kfs_core.server.protocol import ApiKey, ErrorCode

__all__ = ["BrokerOptions", "RequestContext"]


@dataclass
class BrokerOptions:
    """What the broker tells clients about itself and how it treats unknown topics.

    ``node_id``, ``listeners`` (listener name -> advertised (host, port);
    empty: one PLAINTEXT listener at the advertised host and port) and
    ``durability`` describe this daemon in the `SingleNode` view the broker
    builds when it is given no cluster view.
    """

    advertised_host: str
    advertised_port: int
    cluster_id: str
    node_id: int = 0
    listeners: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    durability: str = "cautious"
    auto_create_topics: bool = True
    default_partitions: int = 1
    broker_configs: Mapping[str, str] = field(default_factory=dict)
    groups: GroupSettings = field(default_factory=GroupSettings)
    offsets_topic_partitions: int = DEFAULT_PARTITIONS  # offsets.topic.num.partitions
    transactions: TransactionSettings = field(default_factory=TransactionSettings)
    transaction_topic_partitions: int = 4  # transaction.state.log.num.partitions
    peer_tls: TlsFiles | None = None  # how to reach another daemon's SSL listener
    peer_login: PeerLogin | None = None  # how to log in on another daemon's SASL listener


@dataclass(slots=True, kw_only=True)
class RequestContext:
    """One request's view of the daemon: the principal, the listener, the services.

    ``session`` is the connection's security session (listener, principal,
    SASL state), None outside a connection (a handler called directly);
    ``advertised`` is the (host, port) Metadata and FindCoordinator name for
    the connection's listener; ``client_host`` the client's address as
    Kafka shows it ("/127.0.0.1").  The security services are None when the
    daemon runs without them (no SASL listener, no ACL authorizer, no store
    of users).  ``cluster`` is the daemons serving the namespace as this
    one sees them; ``offsets_partition`` maps a group id to its
    ``__consumer_offsets`` partition, whose leader is the group's
    coordinator.
    """

    options: BrokerOptions
    cluster: ClusterView
    offsets_partition: Callable[[str], int]
    log: LogManager
    topics: TopicDirectory
    groups: GroupCoordinator
    transactions: TransactionCoordinator
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
    # `brokers`, worked out once per request: a Metadata of every topic asks
    # for each partition's replicas, and the live nodes cost a lease snapshot.
    _brokers: list[tuple[NodeInfo, tuple[str, int]]] | None = None

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

    def may_on_topic(self, op: Operation, name: str) -> bool:
        """Whether this request's principal may ``op`` the topic ``name``.

        For entries named by id, authorized once their names are known.
        """
        session, authorizer = self.session, self.authorizer
        if authorizer is None or session is None:
            return True
        return authorizer.authorize(session.principal, session.host, op, ResourceType.TOPIC, name)

    # --- the cluster as this request sees it ------------------------------------------

    @property
    def listener_name(self) -> str:
        """The name of the listener this request came through (its security protocol)."""
        return str(self.session.protocol) if self.session is not None else "PLAINTEXT"

    def endpoint(self, node: NodeInfo) -> tuple[str, int] | None:
        """Where a client on this request's listener reaches ``node``; None: it cannot."""
        if node.node_id == self.cluster.node_id:
            return self.advertised
        return node.listeners.get(self.listener_name)

    def brokers(self) -> list[tuple[NodeInfo, tuple[str, int]]]:
        """Every live node a client on this listener can reach, by node id, with its address.

        As the request first asked: one request sees one cluster.
        """
        if self._brokers is None:
            found = []
            for node in sorted(self.cluster.live_nodes(), key=lambda n: n.node_id):
                address = self.endpoint(node)
                if address is not None:
                    found.append((node, address))
            self._brokers = found
        return self._brokers

    def controller_id(self) -> int:
        """The controller Kafka clients are told of: the lowest live node id."""
        return min((n.node_id for n in self.cluster.live_nodes()), default=self.cluster.node_id)

    def replicas(self, leader_id: int, factor: int) -> list[int]:
        """The leader, then the next listed brokers in ascending cyclic order, ``factor`` in all.

        Fewer when fewer brokers are live; no leader (-1): the first
        ``factor`` brokers.  Durability comes from the object store, so
        these are the replicas Kafka tools expect to see, not copies.
        """
        ids = [node.node_id for node, _ in self.brokers()]
        after = [i for i in ids if i > leader_id] + [i for i in ids if i < leader_id]
        if leader_id < 0:
            return after[: max(factor, 1)]
        return [leader_id, *after[: max(factor, 1) - 1]]

    def coordinator(self, group_id: str) -> Leader:
        """The node coordinating ``group_id``: the leader of its offsets partition."""
        return self.cluster.leader(OFFSETS_TOPIC, self.offsets_partition(group_id))

    async def transaction_coordinator(self, transactional_id: str) -> Leader:
        """The node coordinating ``transactional_id``: the leader of its state partition.

        With other daemons live, ``__transaction_state`` is created (or looked
        up) first, so that every daemon places the id on the same partition.
        """
        if len(self.cluster.live_nodes()) > 1:
            await self.transactions.ensure_topic()
        partition = self.transactions.partition_for(transactional_id)
        return self.cluster.leader(TRANSACTION_TOPIC, partition)

    async def known_offsets_topic(self) -> None:
        """With other daemons live, make sure ``__consumer_offsets`` exists and is looked up.

        Every daemon must place a group on the same offsets partition and
        that partition on the same daemon, which takes the topic's real
        partition count; Kafka creates the topic on the first group request too.
        """
        if len(self.cluster.live_nodes()) > 1:
            await self.groups.ensure_offsets_topic()

    async def check_coordinator(self, group_id: str) -> None:
        """Raise `Refused` (NOT_COORDINATOR) unless this node coordinates ``group_id``."""
        try:
            await self.known_offsets_topic()
        except KfsError as exc:  # the registry cannot be read or written now
            raise Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        node_id = self.coordinator(group_id).node_id
        if node_id != self.cluster.node_id:
            raise Refused(
                ErrorCode.NOT_COORDINATOR,
                f"node {self.cluster.node_id} is not the coordinator of group {group_id!r}"
                + (f" (node {node_id} is)" if node_id >= 0 else ""),
            )
        try:
            await self.groups.ready_for(group_id)
        except GroupError as exc:  # its offsets are loading, or another daemon took them
            raise Refused(ErrorCode(exc.kafka_error_code), exc.message) from exc

    def open_unheld(self, topic: str, partitions: int) -> None:
        """Have this node open, in the background, its partitions of ``topic`` nobody holds.

        They are the ones the cluster says this node leads at epoch -1: taking
        their leases now (`LogManager.open_soon`) gives the client's next
        Metadata their real leader epochs.  Called when a client names the
        topic (Metadata) or creates it.
        """
        node_id = self.cluster.node_id
        unheld = [
            index
            for index in range(partitions)
            if self.cluster.leader(topic, index) == Leader(node_id, -1)
        ]
        if unheld:
            self.log.open_soon(topic, unheld)

    def leader_epoch_error(self, topic: str, partition: int, requested: int) -> ErrorCode:
        """FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when ``requested`` is not this node's epoch.

        -1 asks for no check.  A partition this node holds no lease on is
        the log's to refuse (NOT_LEADER_OR_FOLLOWER), not the epoch's.
        """
        if requested < 0:
            return ErrorCode.NONE
        local = self.cluster.local_epoch(topic, partition)
        if local is None or requested == local:
            return ErrorCode.NONE
        return (
            ErrorCode.FENCED_LEADER_EPOCH if requested < local else ErrorCode.UNKNOWN_LEADER_EPOCH
        )

    def local_epoch(self, topic: str, partition: int) -> int:
        """This node's leader epoch of the partition for a response; -1 if it holds none."""
        epoch = self.cluster.local_epoch(topic, partition)
        return -1 if epoch is None else epoch
