"""`kfs cluster status|leases`: the daemons of a namespace and the partition leases, from the store.

Both read only the object store, so they work with no daemon running and
from any machine that can reach the store:

- ``status`` reads every heartbeat, ``{ns}/_cluster/nodes/{node_id}.json``
  (`kfs_core.cluster.nodes`), and prints one line per daemon: node id,
  state, heartbeat age, durability, advertised listeners and how many
  partitions it holds; ``--partitions`` adds one line per held partition.
- ``leases`` reads each partition catalog of a topic and prints its lease:
  the leader epoch and the node id that committed it.

A daemon is ``dead`` here when its heartbeat says ``running`` but the wall
clock it wrote (``heartbeat_ms``) is older than the session timeout by this
machine's wall clock.  The daemons themselves never compare clocks (they time
the heartbeat's sequence number by their own monotonic clock), so this
judgement is an operator's estimate: clock skew between machines shifts it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import click

from kfs_core.cli.common import CliError, cli_settings, cli_store, format_ms, operator_errors
from kfs_core.clock import now_ms
from kfs_core.cluster.nodes import CorruptHeartbeat, decode_node, nodes_prefix
from kfs_core.cluster.view import NodeInfo
from kfs_core.errors import ObjectNotFound
from kfs_core.storage import ObjectStore

__all__ = ["DaemonStatus", "cluster", "daemon_statuses", "read_heartbeats"]

DaemonState = Literal["running", "stopped", "dead"]


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


def _age(age_ms: int | None) -> str:
    if age_ms is None:
        return "?"
    return f"{age_ms / 1000:.1f}s ago"


def _listeners(info: NodeInfo) -> str:
    return (
        ",".join(f"{name}://{host}:{port}" for name, (host, port) in sorted(info.listeners.items()))
        or "-"
    )


@click.group()
def cluster() -> None:
    """The daemons of the namespace and their partition leases, read from the store."""


@cluster.command("status")
@click.option(
    "--session-timeout-ms",
    type=click.IntRange(min=1),
    default=None,
    help="a running daemon whose heartbeat is older than this is shown dead "
    "[default: KFS_BROKER_SESSION_TIMEOUT_MS]",
)
@click.option(
    "--partitions",
    "-v",
    "show_partitions",
    is_flag=True,
    help="also one line per held partition: topic, partition, epoch, holder",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.pass_context
def cluster_status(
    ctx: click.Context, session_timeout_ms: int | None, show_partitions: bool, as_json: bool
) -> None:
    """One line per daemon: node id, state, heartbeat age, durability, listeners, partitions.

    The state is the heartbeat's (running or stopped), or dead when a running
    daemon's heartbeat was written longer ago than the session timeout.  That
    judgement compares the wall clock the daemon wrote with this machine's
    wall clock, so clock skew shifts it; the daemons themselves compare no
    clocks (a daemon is live to them while its heartbeat's sequence number
    moves, timed by their own monotonic clock).
    """
    settings = cli_settings(ctx)
    timeout = session_timeout_ms or settings.broker_session_timeout_ms
    with operator_errors():
        heartbeats, corrupt = read_heartbeats(cli_store(ctx), settings.namespace)
    for message in corrupt:
        click.echo(f"kfs: warning: skipping a corrupt heartbeat: {message}", err=True)
    statuses = daemon_statuses(heartbeats, timeout, now_ms())
    held = sorted(
        (topic, partition, epoch, s.info.node_id)
        for s in statuses
        for (topic, partition), epoch in s.info.held.items()
    )
    if as_json:
        doc = {
            "namespace": settings.namespace,
            "session_timeout_ms": timeout,
            "daemons": [s.to_json() for s in statuses],
            "partitions": [
                {"topic": t, "partition": p, "epoch": e, "holder": n} for t, p, e, n in held
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    if not statuses:
        click.echo(f"no daemons in namespace {settings.namespace!r} (no heartbeats in the store)")
        return
    for s in statuses:
        written = format_ms(s.heartbeat_ms) if s.heartbeat_ms >= 0 else "no time"
        click.echo(
            f"node {s.info.node_id:<4} {s.state:<8} heartbeat {_age(s.age_ms)} ({written})  "
            f"durability {s.info.durability}  listeners {_listeners(s.info)}  "
            f"partitions {len(s.info.held)}"
        )
    if show_partitions:
        if not held:
            click.echo("no partitions held")
        for topic, partition, epoch, node_id in held:
            click.echo(f"  {topic}/{partition}  epoch {epoch}  holder node {node_id}")


@cluster.command("leases")
@click.argument("topic")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.pass_context
def cluster_leases(ctx: click.Context, topic: str, as_json: bool) -> None:
    """The lease of every partition of TOPIC, from its catalog: leader epoch and node.

    Read from the partition catalogs, so it shows the epochs even when no
    daemon runs.  Epoch 0 means no daemon has taken the partition yet.
    """
    from kfs_core.catalog.partition import PartitionCatalog
    from kfs_core.catalog.topics import TopicRegistry

    settings = cli_settings(ctx)
    with operator_errors():
        store = cli_store(ctx)
        info = TopicRegistry(store, settings.namespace).get(topic)
        states = [
            (p, PartitionCatalog(store, settings.namespace, topic, p).load())
            for p in range(info.partitions)
        ]
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "topic": topic,
                        "partition": p,
                        "leader_epoch": s.leader_epoch,
                        "leader_node_id": s.leader_node_id,
                        "leader_incarnation": s.leader_incarnation,
                    }
                    for p, s in states
                ],
                indent=2,
            )
        )
        return
    if not states:
        raise CliError(f"topic {topic!r} has no partitions")
    for p, s in states:
        if s.leader_epoch:
            click.echo(
                f"{topic}/{p}  epoch {s.leader_epoch}  node {s.leader_node_id}  "
                f"incarnation {s.leader_incarnation}"
            )
        else:
            click.echo(f"{topic}/{p}  no lease yet")
