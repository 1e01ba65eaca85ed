"""`kfs groups`: the consumer groups of a running daemon, as kafka-consumer-groups.sh.

``list``, ``describe``, ``delete`` and ``reset-offsets`` talk to ``kfs serve``
over the Kafka protocol through confluent-kafka's AdminClient, exactly as
Kafka's own tool talks to a broker (`kfs_core.kafka_admin.GroupAdmin`, the
admin wrapper the Airflow plugin shares); nothing here reads the store.  The
daemon is found the way ``kfs produce`` / ``kfs consume`` find it:
``--bootstrap-server`` (or ``--bootstrap``), else ``KFS_LISTEN``; a TLS or SASL
listener needs ``--command-config FILE`` (Kafka's client properties file).

Mistakes (an unknown group or topic, two reset targets, no daemon) end with
one ``kfs: error: …`` line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn, ParamSpec

import click

from kfs_core.cli.common import CliError, client_config, print_table
from kfs_core.config import Settings
from kfs_core.kafka_admin import (
    INACTIVE_STATES,
    AdminError,
    BrokersDown,
    GroupAdmin,
    GroupView,
    NoAnswer,
    PartitionKey,
    state_name,
)

__all__ = ["groups"]

P = ParamSpec("P")
DEFAULT_TIMEOUT_S: Final = 10.0
_STATE_CHOICES: Final = ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead")


def _fail(message: str) -> NoReturn:
    """End the command with one ``kfs: error: <message>`` line."""
    raise CliError(message) from None


def _admin_errors(command: Callable[P, None]) -> Callable[P, None]:
    """Run ``command`` with the admin's failures as one ``kfs: error: …`` line each."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except BrokersDown as exc:
            _fail(
                f"cannot reach the daemon at {exc.bootstrap}: is `kfs serve` running there? "
                "(give --bootstrap-server HOST:PORT or set KFS_LISTEN)"
            )
        except NoAnswer as exc:
            _fail(f"{exc.what}: no answer from {exc.bootstrap} within {exc.timeout_s:g} s")
        except AdminError as exc:
            _fail(str(exc))

    return run


# --- output --------------------------------------------------------------------------------


# --- options -------------------------------------------------------------------------------


def _remember_command_config(ctx: click.Context, _: click.Parameter, value: str | None) -> None:
    ctx.meta["kfs_command_config"] = value


def _connection_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--command-config",
        type=click.Path(dir_okay=False),
        envvar="KFS_CLIENT_CONFIG",
        expose_value=False,
        callback=_remember_command_config,
        help="Kafka client properties for TLS/SASL (security.protocol, sasl.mechanism, "
        "sasl.username, sasl.password, ssl.ca.location ...) [KFS_CLIENT_CONFIG]",
    )(func)
    func = click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0, min_open=True),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="seconds to wait for the daemon's answer",
    )(func)
    return click.option(
        "--bootstrap-server",
        "--bootstrap",
        "bootstrap",
        metavar="HOST:PORT",
        help="the daemon's Kafka listener [default: KFS_LISTEN]",
    )(func)


def _admin(ctx: click.Context, bootstrap: str | None, timeout_s: float) -> GroupAdmin:
    settings = ctx.find_object(Settings)
    if settings is None:  # run on its own, not under `kfs`
        try:
            settings = Settings.from_env()
        except ValueError as exc:
            _fail(str(exc))
    security = client_config(ctx.meta.get("kfs_command_config"))
    try:
        import confluent_kafka  # noqa: F401 - only to say what is missing
    except ImportError:
        _fail("this command needs confluent-kafka: pip install 'kfs[dev]'")
    return GroupAdmin(bootstrap or settings.listen, timeout_s, security)


def _existing(admin: GroupAdmin, group_id: str) -> GroupView:
    view = admin.describe(group_id)
    if not view.exists:
        _fail(f"consumer group {group_id!r} does not exist")
    return view


# --- commands ------------------------------------------------------------------------------


@click.group()
def groups() -> None:
    """List, describe, delete consumer groups and reset their offsets (as kafka-consumer-groups)."""


@groups.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(_STATE_CHOICES, case_sensitive=False),
    help="only groups in this state (repeatable)",
)
@_connection_options
@click.pass_context
@_admin_errors
def groups_list(
    ctx: click.Context, states: tuple[str, ...], bootstrap: str | None, timeout_s: float
) -> None:
    """List consumer groups: id, state and protocol type.

    The protocol type is "consumer" for groups whose members subscribe, and
    "-" for groups that only store offsets (no member has ever joined).
    """
    admin = _admin(ctx, bootstrap, timeout_s)
    listed = sorted(admin.list_groups(states), key=lambda g: g.group_id)
    print_table(
        ("GROUP", "STATE", "PROTOCOL-TYPE"),
        (
            (g.group_id, state_name(g.state), "" if g.is_simple_consumer_group else "consumer")
            for g in listed
        ),
    )


@groups.command("describe")
@click.argument("group_id", metavar="GROUP")
@_connection_options
@click.pass_context
@_admin_errors
def groups_describe(
    ctx: click.Context, group_id: str, bootstrap: str | None, timeout_s: float
) -> None:
    """Show GROUP's state, members, and per partition its committed offset, log end and lag."""
    admin = _admin(ctx, bootstrap, timeout_s)
    view = _existing(admin, group_id)
    committed = admin.committed(group_id)
    owners = view.owners()
    keys = sorted({*committed, *owners})
    log_end = admin.latest(keys)
    click.echo(
        f"group {group_id}  state {view.state}  assignor {view.assignor or '-'}  "
        f"members {len(view.members)}"
    )
    click.echo()
    rows = []
    for key in keys:
        current = committed.get(key)
        owner = owners.get(key)
        rows.append(
            (
                key[0],
                key[1],
                current,
                log_end[key],
                None if current is None else max(log_end[key] - current, 0),
                owner.member_id if owner else None,
                owner.host if owner else None,
                owner.client_id if owner else None,
            )
        )
    print_table(
        (
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ),
        rows,
    )
    click.echo()
    if not view.members:
        click.echo(f"consumer group {group_id} has no active members.")
        return
    print_table(
        ("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "#PARTITIONS", "ASSIGNMENT"),
        (
            (
                m.member_id,
                m.instance_id,
                m.client_id,
                m.host,
                len(m.assigned),
                ",".join(f"{t}:{p}" for t, p in m.assigned),
            )
            for m in view.members
        ),
    )


@groups.command("delete")
@click.argument("group_id", metavar="GROUP")
@_connection_options
@click.pass_context
@_admin_errors
def groups_delete(
    ctx: click.Context, group_id: str, bootstrap: str | None, timeout_s: float
) -> None:
    """Delete GROUP and its committed offsets (Kafka refuses a group that has members)."""
    admin = _admin(ctx, bootstrap, timeout_s)
    admin.delete(group_id)
    click.echo(f"deleted consumer group {group_id}")


# --- reset-offsets -------------------------------------------------------------------------


def _parse_topic(spec: str) -> tuple[str, list[int] | None]:
    """``TOPIC`` (every partition) or ``TOPIC:P1,P2``, as kafka-consumer-groups --topic."""
    name, sep, partitions = spec.partition(":")
    if not name:
        _fail(f"--topic {spec!r}: expected TOPIC or TOPIC:P1,P2")
    if not sep:
        return name, None
    try:
        chosen = sorted({int(p) for p in partitions.split(",") if p.strip()})
    except ValueError:
        _fail(f"--topic {spec!r}: partitions must be numbers, as TOPIC:0,1")
    if not chosen or chosen[0] < 0:
        _fail(f"--topic {spec!r}: expected TOPIC or TOPIC:P1,P2")
    return name, chosen


def _parse_datetime(text: str) -> int:
    """ISO 8601 to epoch milliseconds; no zone means local time, as in Kafka's tool."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        _fail(f"--to-datetime {text!r}: expected ISO 8601, e.g. 2024-05-01T12:00:00.000+00:00")
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


@dataclass(frozen=True)
class ResetTarget:
    """One of --to-earliest/--to-latest/--to-datetime/--to-offset/--shift-by."""

    kind: str
    value: int = 0

    def describe(self) -> str:
        if self.kind == "datetime":
            return f"to {dt.datetime.fromtimestamp(self.value / 1000, dt.UTC).isoformat()}"
        if self.kind in ("offset", "shift-by"):
            return f"{self.kind} {self.value}"
        return f"to {self.kind}"


def _target(
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    shift_by: int | None,
) -> ResetTarget:
    given = [
        ResetTarget("earliest") if to_earliest else None,
        ResetTarget("latest") if to_latest else None,
        ResetTarget("datetime", _parse_datetime(to_datetime)) if to_datetime is not None else None,
        ResetTarget("offset", to_offset) if to_offset is not None else None,
        ResetTarget("shift-by", shift_by) if shift_by is not None else None,
    ]
    chosen = [t for t in given if t is not None]
    if len(chosen) != 1:
        _fail(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, "
            f"--shift-by (got {len(chosen)})"
        )
    return chosen[0]


def _scope(topics: Sequence[str], all_topics: bool) -> list[tuple[str, list[int] | None]] | None:
    """The --topic specs parsed, or None for --all-topics; checked before any request."""
    if all_topics and topics:
        _fail("give --topic or --all-topics, not both")
    if not all_topics and not topics:
        _fail("say which offsets to reset: --topic TOPIC[:P1,P2] or --all-topics")
    return None if all_topics else [_parse_topic(spec) for spec in topics]


def _partitions_to_reset(
    admin: GroupAdmin,
    wanted: Sequence[tuple[str, list[int] | None]] | None,
    view: GroupView,
    committed: Mapping[PartitionKey, int],
) -> list[PartitionKey]:
    if wanted is None:
        if not view.exists:
            _fail(f"consumer group {view.group_id!r} does not exist")
        if not committed:
            _fail(
                f"consumer group {view.group_id!r} has no committed offsets: "
                "name the partitions with --topic"
            )
        # Kafka's --all-topics: every partition of every topic the group has committed to.
        known = admin.partitions(t for t, _ in committed)
        return sorted((t, p) for t, parts in known.items() for p in parts)
    known = admin.partitions(name for name, _ in wanted)
    keys: set[PartitionKey] = set()
    for name, chosen in wanted:
        for p in chosen if chosen is not None else known[name]:
            if p not in known[name]:
                _fail(f"topic {name!r} has partitions 0..{len(known[name]) - 1}, not {p}")
            keys.add((name, p))
    return sorted(keys)


def plan_reset(
    target: ResetTarget,
    keys: Sequence[PartitionKey],
    committed: Mapping[PartitionKey, int],
    earliest: Mapping[PartitionKey, int],
    latest: Mapping[PartitionKey, int],
    by_time: Mapping[PartitionKey, int] | None = None,
) -> dict[PartitionKey, int]:
    """The new offset of each partition, clamped to [earliest, latest] as Kafka's tool does."""
    plan: dict[PartitionKey, int] = {}
    for key in keys:
        low, high = earliest[key], latest[key]
        if target.kind == "earliest":
            wanted = low
        elif target.kind == "latest":
            wanted = high
        elif target.kind == "datetime":
            assert by_time is not None
            # No record at or after the time: the log end, as in Kafka.
            wanted = by_time[key] if by_time[key] >= 0 else high
        elif target.kind == "offset":
            wanted = target.value
        else:
            if key not in committed:
                _fail(
                    f"cannot shift the offset of {key[0]}/{key[1]}: the group has no "
                    "committed offset there"
                )
            wanted = committed[key] + target.value
        plan[key] = min(max(wanted, low), high)
    return plan


@groups.command("reset-offsets")
@click.argument("group_id", metavar="GROUP")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="TOPIC[:P1,P2]",
    help="the topic (or some of its partitions) to reset; repeatable",
)
@click.option("--all-topics", is_flag=True, help="every topic the group has committed offsets for")
@click.option("--to-earliest", is_flag=True, help="to each partition's log start")
@click.option("--to-latest", is_flag=True, help="to each partition's log end")
@click.option(
    "--to-datetime",
    metavar="ISO8601",
    help="to the first record at or after this time (no zone: local time)",
)
@click.option("--to-offset", type=int, metavar="N", help="to offset N (clamped to the log)")
@click.option(
    "--shift-by",
    type=int,
    metavar="N",
    help="move the committed offset by N, negative goes back (clamped to the log)",
)
@click.option(
    "--dry-run/--execute",
    "dry_run",
    default=True,
    help="print the plan (the default) or apply it",
)
@_connection_options
@click.pass_context
@_admin_errors
def groups_reset_offsets(
    ctx: click.Context,
    group_id: str,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    shift_by: int | None,
    dry_run: bool,
    bootstrap: str | None,
    timeout_s: float,
) -> None:
    """Move GROUP's committed offsets; only while the group has no members.

    Without --execute this prints the plan and changes nothing.  With
    --topic on a group that does not exist yet, --execute creates it with
    those offsets, as Kafka's tool does.
    """
    target = _target(to_earliest, to_latest, to_datetime, to_offset, shift_by)
    wanted = _scope(topics, all_topics)
    admin = _admin(ctx, bootstrap, timeout_s)
    view = admin.describe(group_id)
    if view.state not in INACTIVE_STATES:
        _fail(
            f"assignments can only be reset if the group {group_id!r} is inactive, but its "
            f"state is {view.state} ({len(view.members)} member(s)); stop its consumers first"
        )
    committed = admin.committed(group_id)
    keys = _partitions_to_reset(admin, wanted, view, committed)
    earliest, latest = admin.earliest(keys), admin.latest(keys)
    by_time = admin.at_time(keys, target.value) if target.kind == "datetime" else None
    plan = plan_reset(target, keys, committed, earliest, latest, by_time)
    if not dry_run:
        admin.alter(group_id, plan)
    verb = "would reset" if dry_run else "reset"
    click.echo(f"group {group_id}: {verb} {len(plan)} partition(s) {target.describe()}")
    click.echo()
    print_table(
        ("TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"),
        ((t, p, committed.get((t, p)), new) for (t, p), new in plan.items()),
    )
    if dry_run:
        click.echo("dry run: nothing changed; add --execute to apply", err=True)
