"""`kfs partitions reassign`: move partitions by hand, as kafka-reassign-partitions.sh does.

Kafka's flags and JSON: ``--reassignment-json-file FILE`` holds
``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2]}]}``
and one action says what to do with it: ``--execute``, ``--verify``,
``--cancel``; ``--list`` shows every reassignment.  ``--topic T --partition P
--broker N`` names one partition instead of a file.

KFS serves each partition from one daemon (durability is the store's, there
are no followers), so the first replica of each list is the node the
partition moves to; the others are accepted and unused.  ``--execute`` pins
the partitions to their nodes in ``{ns}/_cluster/reassignments/``
(`kfs_core.cluster.reassignments`, a conditional write that never loses
another operator's pins); every daemon reads the pins at its next heartbeat,
the holder hands the partition over (flush, release) and the target takes it
at the next leader epoch.  A pin stays until ``--cancel`` drops it (the
partition then goes back to its computed node); while its node is not live
the computed placement applies.  Like `kfs cluster`, this reads and writes
the store only: no daemon has to answer.

A reassignment is completed when the target's lease is the newest in the
partition's catalog and the target's heartbeat lists it at that epoch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.cli.common import CliError, cli_settings, cli_store, operator_errors
from kfs_core.clock import now_ms
from kfs_core.cluster.assignment import assign_topic
from kfs_core.cluster.reassignments import Reassignments, ReassignmentStore
from kfs_core.cluster.status import DaemonStatus, daemon_statuses, read_heartbeats
from kfs_core.errors import UnknownTopic
from kfs_core.storage import ObjectStore

__all__ = ["Move", "parse_reassignment_json", "partitions"]

TopicPartition = tuple[str, int]
_ACTIONS = ("--execute", "--verify", "--cancel", "--list")


@dataclass(frozen=True)
class Move:
    """One partition of a reassignment and the replicas asked for it (the first leads)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def node_id(self) -> int:
        """The node the partition moves to: the first replica."""
        return self.replicas[0]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_reassignment_json(text: str, source: str = "--reassignment-json-file") -> list[Move]:
    """The partitions of a Kafka reassignment JSON document; `CliError` naming ``source`` if bad.

    ``log_dirs`` may be given (Kafka's tool writes it) and is ignored.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{source}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise CliError(f'{source}: expected {{"version": 1, "partitions": [...]}}')
    if doc.get("version", 1) != 1:
        raise CliError(f"{source}: unsupported version {doc['version']!r} (Kafka's is 1)")
    moves: list[Move] = []
    seen: set[TopicPartition] = set()
    for entry in doc["partitions"]:
        if not isinstance(entry, dict):
            raise CliError(f"{source}: partition entry {entry!r} is not an object")
        topic, partition, replicas = (entry.get(k) for k in ("topic", "partition", "replicas"))
        if not isinstance(topic, str) or not topic:
            raise CliError(f"{source}: entry {entry!r}: 'topic' must be a topic name")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise CliError(f"{source}: entry {entry!r}: 'partition' must be an integer >= 0")
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise CliError(f"{source}: {topic}-{partition}: 'replicas' must be a list of node ids")
        if not replicas:
            raise CliError(f"{source}: {topic}-{partition}: the replica list is empty")
        if len(set(replicas)) != len(replicas):
            raise CliError(f"{source}: {topic}-{partition}: duplicate replicas {replicas}")
        move = Move(topic, partition, tuple(int(r) for r in replicas))
        if move.tp in seen:
            raise CliError(f"{source}: duplicate reassignment of partition {move.name}")
        seen.add(move.tp)
        moves.append(move)
    return moves


class _Namespace:
    """What the commands read of one namespace: topics, daemons, catalogs, pins."""

    def __init__(self, store: ObjectStore, namespace: str, session_timeout_ms: int) -> None:
        self.store = store
        self.namespace = namespace
        self.documents = ReassignmentStore(store, namespace)
        self._topics = TopicRegistry(store, namespace)
        self._counts: dict[str, int] = {}
        self._warned: set[int] = set()
        heartbeats, corrupt = read_heartbeats(store, namespace)
        for message in corrupt:
            click.echo(f"kfs: warning: skipping a corrupt heartbeat: {message}", err=True)
        self.daemons: dict[int, DaemonStatus] = {
            s.info.node_id: s for s in daemon_statuses(heartbeats, session_timeout_ms, now_ms())
        }

    def warn_corrupt(self, version: int, exc: Exception) -> None:
        """One warning line per corrupt reassignment document passed over."""
        if version not in self._warned:
            self._warned.add(version)
            click.echo(f"kfs: warning: skipping a corrupt reassignment document: {exc}", err=True)

    @property
    def live(self) -> list[int]:
        """The node ids of the running daemons, by this machine's wall clock (`kfs cluster`)."""
        return sorted(n for n, s in self.daemons.items() if s.state == "running")

    def partition_count(self, topic: str) -> int:
        if topic not in self._counts:
            try:
                self._counts[topic] = self._topics.get(topic).partitions
            except UnknownTopic:
                raise CliError(f"unknown topic {topic!r}") from None
        return self._counts[topic]

    def check(self, move: Move, *, live: bool) -> None:
        """One line and a non-zero exit for an unknown partition (or, if ``live``, node)."""
        count = self.partition_count(move.topic)
        if move.partition >= count:
            raise CliError(
                f"partition {move.name} does not exist: topic {move.topic!r} has {count} "
                f"partition(s), 0 to {count - 1}"
            )
        if live and move.node_id not in self.live:
            nodes = ", ".join(map(str, self.live)) or "none"
            raise CliError(
                f"{move.name}: node {move.node_id} is not live (live nodes: {nodes}; "
                "see kfs cluster status)"
            )

    def holder(self, tp: TopicPartition) -> tuple[int, int]:
        """(node id, epoch) of the newest lease in the partition's catalog; (-1, 0) if none."""
        state = PartitionCatalog(self.store, self.namespace, *tp).load()
        return state.leader_node_id, state.leader_epoch

    def completed(self, tp: TopicPartition, node_id: int) -> bool:
        """Whether ``node_id`` holds the newest lease and its running heartbeat lists it."""
        holder, epoch = self.holder(tp)
        daemon = self.daemons.get(node_id)
        return (
            holder == node_id
            and epoch > 0
            and daemon is not None
            and daemon.state == "running"
            and daemon.info.held.get(tp) == epoch
        )

    def placement(self, tp: TopicPartition, pins: Reassignments) -> int:
        """Where the partition is now: its lease holder, else where the daemons place it."""
        holder, _ = self.holder(tp)
        if holder >= 0 or not self.live:
            return holder
        topic, partition = tp
        return assign_topic(topic, self.partition_count(topic), self.live, pins.of_topic(topic))[
            partition
        ]


def _names(tps: Sequence[TopicPartition]) -> str:
    return ",".join(f"{t}-{p}" for t, p in tps)


def _plural(items: Sequence[Any]) -> str:
    return "" if len(items) == 1 else "s"


def _kafka_json(placement: Mapping[TopicPartition, int]) -> str:
    partitions = [
        {"topic": t, "partition": p, "replicas": [node], "log_dirs": ["any"]}
        for (t, p), node in sorted(placement.items())
        if node >= 0
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _moves_of(
    json_file: str | None, topic: str | None, partition: int | None, broker: int | None
) -> list[Move]:
    if json_file is not None:
        if topic is not None or partition is not None or broker is not None:
            raise CliError("give either --reassignment-json-file or --topic/--partition/--broker")
        try:
            text = Path(json_file).read_text()
        except OSError as exc:
            raise CliError(f"--reassignment-json-file {json_file}: {exc.strerror or exc}") from None
        return parse_reassignment_json(text, f"--reassignment-json-file {json_file}")
    if topic is None and partition is None and broker is None:
        return []
    if topic is None or partition is None:
        raise CliError("--topic and --partition go together")
    return [Move(topic, partition, () if broker is None else (broker,))]


@click.group()
def partitions() -> None:
    """Where partitions are served: moving them from one daemon to another by hand."""


@partitions.command("reassign")
@click.option(
    "--reassignment-json-file",
    "json_file",
    type=click.Path(dir_okay=False),
    help='Kafka\'s JSON: {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2]}]}; '
    "the first replica is the node the partition moves to (KFS keeps one owner)",
)
@click.option("--topic", help="one partition's topic (instead of a JSON file)")
@click.option("--partition", type=click.IntRange(min=0), help="one partition's number")
@click.option("--broker", type=click.IntRange(min=0), help="the node id it moves to")
@click.option("--execute", is_flag=True, help="pin the partitions to their nodes: they move")
@click.option("--verify", is_flag=True, help="whether each reassignment is completed")
@click.option(
    "--cancel",
    is_flag=True,
    help="drop the pins of the partitions given (of every partition if none is given)",
)
@click.option("--list", "list_", is_flag=True, help="every pinned partition and its state")
@click.pass_context
def reassign(
    ctx: click.Context,
    json_file: str | None,
    topic: str | None,
    partition: int | None,
    broker: int | None,
    execute: bool,
    verify: bool,
    cancel: bool,
    list_: bool,
) -> None:
    """Move partitions to chosen daemons, as kafka-reassign-partitions.sh does.

    KFS serves each partition from one daemon, so of each replica list only
    the first counts: the node the partition moves to.  --execute pins the
    partitions there; the holder flushes and hands each one over, the target
    takes it at the next leader epoch.  A pin stays until --cancel; while its
    node is not live the computed placement applies.
    """
    chosen = [
        name for name, on in zip(_ACTIONS, (execute, verify, cancel, list_), strict=True) if on
    ]
    if len(chosen) != 1:
        raise CliError(f"Command must include exactly one action: {', '.join(_ACTIONS)}")
    moves = _moves_of(json_file, topic, partition, broker)
    settings = cli_settings(ctx)
    with operator_errors():
        cluster = _Namespace(cli_store(ctx), settings.namespace, settings.broker_session_timeout_ms)
        if list_:
            if moves:
                raise CliError("--list takes no partitions: it shows every reassignment")
            _list(cluster)
        elif cancel:
            _cancel(cluster, moves)
        else:
            if not moves:
                raise CliError(
                    f"{chosen[0]} needs --reassignment-json-file, or --topic, --partition and "
                    "--broker"
                )
            if any(not m.replicas for m in moves):
                raise CliError(f"{chosen[0]} needs --broker: the node id the partition moves to")
            (_execute if execute else _verify)(cluster, moves)


def _execute(cluster: _Namespace, moves: list[Move]) -> None:
    for move in moves:
        cluster.check(move, live=True)
    pins = cluster.documents.newest(on_corrupt=cluster.warn_corrupt)
    current = {m.tp: cluster.placement(m.tp, pins) for m in moves}
    click.echo(f"Current partition replica assignment\n\n{_kafka_json(current)}\n")
    click.echo("Save this to use as the --reassignment-json-file option during rollback")
    extra = [m for m in moves if len(m.replicas) > 1]
    if extra:
        click.echo(
            "KFS serves each partition from one node, the first of its replicas: "
            + ", ".join(f"{m.name} from node {m.node_id}" for m in extra)
        )
    targets = {m.tp: m.node_id for m in moves}
    cluster.documents.update(lambda now: {**now.targets, **targets}, cluster.warn_corrupt)
    tps = [m.tp for m in moves]
    click.echo(f"Successfully started partition reassignment{_plural(tps)} for {_names(tps)}")


def _verify(cluster: _Namespace, moves: list[Move]) -> None:
    for move in moves:
        cluster.check(move, live=False)
    pins = cluster.documents.newest(on_corrupt=cluster.warn_corrupt)
    click.echo("Status of partition reassignment:")
    for move in moves:
        if cluster.completed(move.tp, move.node_id):
            click.echo(f"Reassignment of partition {move.name} is completed.")
        elif pins.targets.get(move.tp) == move.node_id:
            click.echo(f"Reassignment of partition {move.name} is still in progress.")
        else:
            holder, _ = cluster.holder(move.tp)
            click.echo(
                f"There is no active reassignment of partition {move.name}, but replica set is "
                f"{holder if holder >= 0 else 'empty'} rather than {move.node_id}."
            )


def _cancel(cluster: _Namespace, moves: list[Move]) -> None:
    named = {m.tp for m in moves}
    dropped: list[TopicPartition] = []

    def change(now: Reassignments) -> dict[TopicPartition, int]:
        dropped[:] = sorted(tp for tp in now.targets if not named or tp in named)
        return {tp: node for tp, node in now.targets.items() if tp not in dropped}

    cluster.documents.update(change, cluster.warn_corrupt)
    if not dropped:
        click.echo("None of the specified partition reassignments are active.")
        return
    click.echo(f"Successfully cancelled partition reassignment{_plural(dropped)} for: "
               f"{_names(dropped)}")  # fmt: skip


def _list(cluster: _Namespace) -> None:
    pins = cluster.documents.newest(on_corrupt=cluster.warn_corrupt)
    if not pins.targets:
        click.echo("No partition reassignments found.")
        return
    click.echo("Current partition reassignments:")
    for tp, node in sorted(pins.targets.items()):
        if node not in cluster.live:
            state = f"node {node} is not live: the computed placement applies"
        elif cluster.completed(tp, node):
            state = "completed"
        else:
            state = "still in progress"
        click.echo(f"{tp[0]}-{tp[1]}: replicas: {node}. {state}.")
