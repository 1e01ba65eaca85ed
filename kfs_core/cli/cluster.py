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
What both read, and that verdict, live in `kfs_core.cluster.status`, which
the KFS page shares.
"""

from __future__ import annotations

import json

import click

from kfs_core.cli.common import CliError, cli_settings, cli_store, format_ms, operator_errors
from kfs_core.clock import now_ms
from kfs_core.cluster.status import daemon_statuses, read_heartbeats, read_leases
from kfs_core.cluster.view import NodeInfo

__all__ = ["cluster"]


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
    settings = cli_settings(ctx)
    with operator_errors():
        leases = read_leases(cli_store(ctx), settings.namespace, topic)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "topic": topic,
                        "partition": lease.partition,
                        "leader_epoch": lease.epoch,
                        "leader_node_id": lease.node_id,
                        "leader_incarnation": lease.incarnation,
                    }
                    for lease in leases
                ],
                indent=2,
            )
        )
        return
    if not leases:
        raise CliError(f"topic {topic!r} has no partitions")
    for lease in leases:
        if lease.epoch:
            click.echo(
                f"{topic}/{lease.partition}  epoch {lease.epoch}  node {lease.node_id}  "
                f"incarnation {lease.incarnation}"
            )
        else:
            click.echo(f"{topic}/{lease.partition}  no lease yet")
