"""The daemons of a namespace and their partition leases, as an operator reads them from the store.

What `kfs cluster status|leases` (`kfs_core.cli.cluster`) and the KFS page
(`kfs_airflow.overview`) show; both read only the object store, so they work
with no daemon running and from any machine that can reach the store:

- `read_heartbeats` reads every heartbeat, ``{ns}/_cluster/nodes/{node_id}.json``
  (`kfs_core.cluster.nodes`), and `daemon_statuses` gives each daemon its state
  (`DaemonStatus`: running, stopped or dead, with the heartbeat's age);
- `lease_of` is a partition's lease from its catalog state (the leader epoch
  and the node that committed it), `read_leases` every partition's of a topic,
  and `lease_holder` says whether a live daemon holds that lease now.

A daemon is ``dead`` here when its heartbeat says ``running`` but the wall
clock it wrote (``heartbeat_ms``) is older than the session timeout by this
machine's wall clock.  The daemons themselves never compare clocks (they time
the heartbeat's sequence number by their own monotonic clock), so this
judgement is an operator's estimate: clock skew between machines shifts it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import PartitionState
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.cluster.nodes import CorruptHeartbeat, decode_node, nodes_prefix
from kfs_core.cluster.view import NodeInfo
from kfs_core.config import Settings
from kfs_core.errors import ObjectNotFound
from kfs_core.storage import ObjectStore

__all__ = [
    "DEFAULT_SESSION_TIMEOUT_MS",
    "DaemonState",
    "DaemonStatus",
    "HolderState",
    "PartitionLease",
    "daemon_statuses",
    "lease_holder",
    "lease_of",
    "read_heartbeats",
    "read_leases",
]

DaemonState = Literal["running", "stopped", "dead"]

#: The daemons' default ``KFS_BROKER_SESSION_TIMEOUT_MS``, for readers that are not given theirs.
DEFAULT_SESSION_TIMEOUT_MS = Settings().broker_session_timeout_ms


@dataclass(frozen=True)
class DaemonStatus:
    """One daemon as `kfs cluster status` reports it: its heartbeat and the wall-clock verdict."""

    info: NodeInfo
    heartbeat_ms: int  # the wall clock the daemon wrote; -1 when the document has none
    state: DaemonState
    age_ms: int | None  # this machine's wall clock minus heartbeat_ms; None when unknown

    def to_json(self) -> dict[str, Any]:
        """The JSON object `kfs cluster status --json` prints for this daemon."""
        return {
            "node_id": self.info.node_id,
            "state": self.state,
            "heartbeat_ms": self.heartbeat_ms,
            "heartbeat_age_ms": self.age_ms,
            "incarnation": self.info.incarnation,
            "seq": self.info.seq,
            "durability": self.info.durability,
            "listeners": {
                name: f"{host}:{port}" for name, (host, port) in sorted(self.info.listeners.items())
            },
            "rack": self.info.rack,
            "partitions": len(self.info.held),
        }


def read_heartbeats(
    store: ObjectStore, namespace: str
) -> tuple[list[tuple[NodeInfo, int]], list[str]]:
    """Every heartbeat of ``namespace`` with the wall clock it carries, by node id; and the corrupt ones.

    The second list holds one message per heartbeat that is not a valid
    document (skipped, as the daemons skip it).
    """
    found: list[tuple[NodeInfo, int]] = []
    corrupt: list[str] = []
    for obj in store.list(nodes_prefix(namespace)):
        if not obj.key.endswith(".json"):
            continue
        try:
            data = store.get(obj.key)
        except ObjectNotFound:
            continue  # deleted between the listing and the get
        try:
            info = decode_node(data, obj.key)
        except CorruptHeartbeat as exc:
            corrupt.append(str(exc))
            continue
        written = json.loads(data).get("heartbeat_ms")
        heartbeat_ms = written if isinstance(written, int) and not isinstance(written, bool) else -1
        found.append((info, heartbeat_ms))
    found.sort(key=lambda pair: pair[0].node_id)
    return found, corrupt


def daemon_statuses(
    heartbeats: Sequence[tuple[NodeInfo, int]], session_timeout_ms: int, now: int
) -> list[DaemonStatus]:
    """The state of each heartbeat at wall-clock time ``now``.

    ``stopped`` when the heartbeat says so; ``dead`` when it says ``running``
    but was written more than ``session_timeout_ms`` before ``now`` (or
    carries no time); ``running`` otherwise.
    """
    statuses = []
    for info, heartbeat_ms in heartbeats:
        age = now - heartbeat_ms if heartbeat_ms >= 0 else None
        state: DaemonState
        if info.state == "stopped":
            state = "stopped"
        elif age is None or age > session_timeout_ms:
            state = "dead"
        else:
            state = "running"
        statuses.append(DaemonStatus(info, heartbeat_ms, state, age))
    return statuses


# --- leases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLease:
    """A partition's newest lease, from its catalog: epoch 0 when no daemon has taken it yet."""

    topic: str
    partition: int
    epoch: int
    node_id: int  # -1 with epoch 0
    incarnation: str  # "" with epoch 0


def lease_of(state: PartitionState) -> PartitionLease:
    """The lease a partition's catalog state records."""
    return PartitionLease(
        state.topic,
        state.partition,
        state.leader_epoch,
        state.leader_node_id,
        state.leader_incarnation,
    )


def read_leases(store: ObjectStore, namespace: str, topic: str) -> list[PartitionLease]:
    """The lease of every partition of ``topic``, by partition (`UnknownTopic` if there is none)."""
    info = TopicRegistry(store, namespace).get(topic)
    return [
        lease_of(PartitionCatalog(store, namespace, topic, p).load())
        for p in range(info.partitions)
    ]


#: Who holds a lease now: ``live`` (a running daemon whose heartbeat lists the
#: partition), ``no-lease`` (never taken), ``dead`` or ``stopped`` (the lease's
#: node is), ``no-heartbeat`` (the node has none), ``released`` (the node runs
#: but its heartbeat no longer lists the partition: handed over, or not yet listed).
HolderState = Literal["live", "no-lease", "dead", "stopped", "no-heartbeat", "released"]


def lease_holder(lease: PartitionLease, statuses: Mapping[int, DaemonStatus]) -> HolderState:
    """Whether a live daemon holds ``lease`` by ``statuses`` (by node id), and if not, why not."""
    if lease.epoch <= 0:
        return "no-lease"
    status = statuses.get(lease.node_id)
    if status is None:
        return "no-heartbeat"
    if status.state != "running":
        return status.state
    if (lease.topic, lease.partition) not in status.info.held:
        return "released"
    return "live"
