"""`kfs topics create|list|describe|alter|add-partitions|delete`, as kafka-topics and kafka-configs.

These write the topic registry in the store directly; a running `kfs serve`
picks the changes up within its topic refresh.
"""

from __future__ import annotations

import click

from kfs_core.cli.common import CliError, cli_settings, cli_store, operator_errors


def _parse_configs(pairs: tuple[str, ...]) -> dict[str, str]:
    configs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise CliError(f"--config {pair!r}: expected NAME=VALUE")
        configs[name.strip()] = value.strip()
    return configs


@click.group()
def topics() -> None:
    """Create, list, describe, alter, add partitions to and delete topics."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", type=int, default=1, show_default=True)
@click.option("--config", "configs", multiple=True, help="NAME=VALUE, Kafka config names")
@click.pass_context
def topics_create(ctx: click.Context, name: str, partitions: int, configs: tuple[str, ...]) -> None:
    """Create topic NAME."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        registry = TopicRegistry(cli_store(ctx), cli_settings(ctx).namespace)
        record = registry.create_topic(name, partitions, _parse_configs(configs))
    click.echo(f"created topic {record.name} with {record.partitions} partition(s)")


@topics.command("list")
@click.pass_context
def topics_list(ctx: click.Context) -> None:
    """List topic names."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        for topic_name in TopicRegistry(cli_store(ctx), cli_settings(ctx).namespace).list_topics():
            click.echo(topic_name)


@topics.command("describe")
@click.argument("name")
@click.pass_context
def topics_describe(ctx: click.Context, name: str) -> None:
    """Show a topic's partitions and every config with its value."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        info = TopicRegistry(cli_store(ctx), cli_settings(ctx).namespace).describe(name)
    click.echo(f"topic {info.name}  partitions {info.partitions}")
    for key, value in sorted(info.effective_configs.items()):
        source = "default" if info.is_default(key) else "set"
        click.echo(f"  {key} = {value}  ({source})")


@topics.command("alter")
@click.argument("name")
@click.option(
    "--config",
    "--add-config",
    "configs",
    multiple=True,
    help="NAME=VALUE to set, Kafka config names (repeatable)",
)
@click.option(
    "--delete-config",
    "deletes",
    multiple=True,
    help="NAME to reset to its default (repeatable, or comma-separated as kafka-configs)",
)
@click.pass_context
def topics_alter(
    ctx: click.Context, name: str, configs: tuple[str, ...], deletes: tuple[str, ...]
) -> None:
    """Set or reset configs of topic NAME, as kafka-configs --alter.

    A running kfs serve applies the change within its topic refresh (5 s);
    an admin client's IncrementalAlterConfigs applies at once.
    """
    from kfs_core.catalog.topics import TopicRegistry

    updates = _parse_configs(configs)
    resets = [key.strip() for item in deletes for key in item.split(",") if key.strip()]
    if not updates and not resets:
        raise click.UsageError("nothing to change: give --config NAME=VALUE or --delete-config")
    with operator_errors():
        registry = TopicRegistry(cli_store(ctx), cli_settings(ctx).namespace)
        registry.alter_configs(name, updates, resets)
        info = registry.describe(name)
    click.echo(f"altered topic {info.name}")
    for key in sorted({*updates, *resets}):
        source = "default" if info.is_default(key) else "set"
        click.echo(f"  {key} = {info.effective_configs[key]}  ({source})")


@topics.command("add-partitions")
@click.argument("name")
@click.option(
    "--partitions",
    type=int,
    required=True,
    help="the new total partition count (larger than now), as kafka-topics --alter",
)
@click.pass_context
def topics_add_partitions(ctx: click.Context, name: str, partitions: int) -> None:
    """Raise the partition count of topic NAME to --partitions.

    Partitions are only ever added: existing records keep their partition,
    and keyed producers map keys over the new count from then on.
    """
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        registry = TopicRegistry(cli_store(ctx), cli_settings(ctx).namespace)
        before = registry.get(name).partitions
        record = registry.create_partitions(name, partitions)
    click.echo(f"topic {record.name}: {before} -> {record.partitions} partitions")


@topics.command("delete")
@click.argument("name")
@click.pass_context
def topics_delete(ctx: click.Context, name: str) -> None:
    """Delete topic NAME: its data is removed, then the name is free again.

    With no daemon running, the data goes now.  A running daemon purges it
    within a minute (its sweep of deleted topics): it first stops serving
    the topic's partitions, so nothing it acknowledged lands in a topic
    created later under the name.
    """
    import time

    from kfs_core.catalog.purge import dead_holder_refusal, purge_deleted_topic
    from kfs_core.catalog.topics import TopicRegistry
    from kfs_core.cluster.status import daemon_statuses, read_heartbeats
    from kfs_core.log.wal.store import StoreWalReader

    settings = cli_settings(ctx)
    with operator_errors():
        store = cli_store(ctx)
        registry = TopicRegistry(store, settings.namespace)
        registry.delete_topic(name)
        heartbeats, _ = read_heartbeats(store, settings.namespace)
        now_ms = int(time.time() * 1000)
        running = [
            s.info.node_id
            for s in daemon_statuses(heartbeats, settings.broker_session_timeout_ms, now_ms)
            if s.state == "running"
        ]
        if running:
            click.echo(
                f"deleted topic {name}; running daemons {running} purge its data "
                "within a minute, then the name is free"
            )
            return
        nodes = {info.node_id: info for info, _ in heartbeats}
        report = purge_deleted_topic(
            store,
            settings.namespace,
            name,
            node_id=settings.node_id,
            incarnation=f"cli-{time.time_ns():x}",
            registry=registry,
            refusal=lambda state: dead_holder_refusal(
                state,
                nodes,
                set(),
                unclean_leader_election=settings.unclean_leader_election_enable,
            ),
            wal_ends=StoreWalReader(store, settings.namespace).topic_ends,
        )
    if not report.purged:
        click.echo(
            f"deleted topic {name}; partitions {report.waiting} keep their data until the "
            "dead daemon that held them restarts (see `kfs cluster status`); a daemon "
            "purges them then"
        )
        return
    click.echo(
        f"deleted topic {name}: {report.objects_deleted} object(s) of "
        f"{report.partitions} partition(s) removed; the name is free"
    )
