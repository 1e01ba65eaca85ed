"""The cluster as the daemon's APIs and log see it: nodes, leaders, this daemon's leases.

`ClusterView` is the one interface: Metadata lists `live_nodes`, routes each
partition to its `leader`; Produce, Fetch and ListOffsets serve a partition
only while `local_epoch` says this daemon holds it.  `LeaseKeeper`
(`kfs_core.cluster.leases`) implements it for a running daemon;
`SingleNode` is the view of a daemon that shares its namespace with nobody
(tests and tools that drive a `LogManager` directly).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = ["NO_LEADER", "ClusterView", "Leader", "NodeInfo", "NodeState", "SingleNode"]

NodeState = Literal["running", "stopped"]


@dataclass(frozen=True)
class NodeInfo:
    """One daemon as its heartbeat ``{ns}/_cluster/nodes/{node_id}.json`` describes it.

    ``listeners`` maps a listener name (its security protocol, as in
    `kfs_core.security.listeners`) to the advertised ``(host, port)``.
    ``held`` is every partition the daemon holds, with its lease epoch.
    ``seq`` grows by one with every heartbeat; ``state`` is ``stopped`` once
    the daemon has flushed everything on its way out.
    """

    node_id: int
    incarnation: str
    listeners: Mapping[str, tuple[str, int]]
    durability: str
    state: NodeState = "running"
    seq: int = 0
    held: Mapping[tuple[str, int], int] = field(default_factory=dict)
    rack: str | None = None


@dataclass(frozen=True)
class Leader:
    """Where clients should send a partition's requests: a node id and its leader epoch.

    ``node_id`` -1: no live daemon can serve it now (LEADER_NOT_AVAILABLE);
    ``epoch`` -1: not known yet (the assignee takes it on the first request,
    or as soon as a client names the topic to it).
    """

    node_id: int
    epoch: int


NO_LEADER = Leader(-1, -1)


class ClusterView(Protocol):
    """What the daemon asks of the cluster; cheap, in memory, never blocks."""

    @property
    def node_id(self) -> int:
        """This daemon's node id."""
        ...

    def live_nodes(self) -> Sequence[NodeInfo]:
        """Every live daemon (this one included), by node id."""
        ...

    def leader(self, topic: str, partition: int) -> Leader:
        """The daemon clients should send this partition's requests to."""
        ...

    def local_epoch(self, topic: str, partition: int) -> int | None:
        """This daemon's lease epoch of the partition while its lease is valid, else None."""
        ...


class SingleNode:
    """A daemon alone on its namespace: it leads every partition, at epoch 0, with no leases."""

    def __init__(self, node: NodeInfo) -> None:
        self._node = node

    @property
    def node_id(self) -> int:
        """This daemon's node id."""
        return self._node.node_id

    def live_nodes(self) -> Sequence[NodeInfo]:
        """Only this daemon."""
        return (self._node,)

    def leader(self, topic: str, partition: int) -> Leader:
        """This daemon, epoch 0."""
        return Leader(self._node.node_id, 0)

    def local_epoch(self, topic: str, partition: int) -> int | None:
        """Always 0: nothing else can hold a partition."""
        return 0
