"""`kfs catalog show|snapshots|snapshot|restore`: a topic's live segments and catalog snapshots."""

from __future__ import annotations

import json

import click

from kfs_core.cli.common import CliError, cli_settings, cli_store, format_ms, operator_errors


@click.group()
def catalog() -> None:
    """Inspect the catalog."""


@catalog.command("show")
@click.argument("topic")
@click.argument("partition", type=int, required=False)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.pass_context
def catalog_show(ctx: click.Context, topic: str, partition: int | None, as_json: bool) -> None:
    """Print the live segments of TOPIC (all partitions, or one)."""
    from kfs_core.catalog.partition import PartitionCatalog
    from kfs_core.catalog.topics import TopicRegistry

    settings = cli_settings(ctx)
    with operator_errors():
        store = cli_store(ctx)
        info = TopicRegistry(store, settings.namespace).get(topic)
        partitions = [partition] if partition is not None else list(range(info.partitions))
        for p in partitions:
            if not 0 <= p < info.partitions:
                raise CliError(f"topic {topic!r} has partitions 0..{info.partitions - 1}, not {p}")
        report = []
        for p in partitions:
            state = PartitionCatalog(store, settings.namespace, topic, p).load()
            report.append((p, state))
    if as_json:
        out = [
            {
                "partition": p,
                "version": s.version,
                "log_start_offset": s.log_start_offset,
                "high_watermark": s.high_watermark,
                "leader_epoch": s.leader_epoch,
                "leader_node_id": s.leader_node_id,
                "leader_incarnation": s.leader_incarnation,
                "segments": [seg.model_dump() for seg in s.segments],
            }
            for p, s in report
        ]
        click.echo(json.dumps(out, indent=2))
        return
    for p, s in report:
        total = sum(seg.size_bytes for seg in s.segments)
        lease = (
            f"  leader epoch {s.leader_epoch} (node {s.leader_node_id})" if s.leader_epoch else ""
        )
        click.echo(
            f"{topic}/{p}: version {s.version}  log start {s.log_start_offset}  "
            f"high watermark {s.high_watermark}  {len(s.segments)} live segments, {total} bytes"
            f"{lease}"
        )
        for seg in s.segments:
            click.echo(
                f"  {seg.key:<60} offsets {seg.base_offset}..{seg.last_offset}  "
                f"records {seg.record_count}  bytes {seg.size_bytes}  "
                f"timestamps {format_ms(seg.min_timestamp)} .. {format_ms(seg.max_timestamp)}"
            )


@catalog.command("snapshots")
@click.pass_context
def catalog_snapshots(ctx: click.Context) -> None:
    """List the namespace's catalog snapshots, oldest first."""
    from kfs_core.catalog.snapshots import list_snapshots

    with operator_errors():
        manifests = list_snapshots(cli_store(ctx), cli_settings(ctx).namespace)
    if not manifests:
        click.echo("no snapshots (the checkpoint job takes them: --snapshot NAME)")
    for m in manifests:
        click.echo(
            f"{m.name:<40} {format_ms(m.created_ms)}  topics {len(m.topics)}  "
            f"partitions {m.partition_count}  segments {m.segment_count}  bytes {m.size_bytes}"
        )


@catalog.command("snapshot")
@click.argument("name")
@click.option("--topics", help="comma-separated topics (default: all)")
@click.pass_context
def catalog_snapshot(ctx: click.Context, name: str, topics: str | None) -> None:
    """Take catalog snapshot NAME of the namespace (or of some topics)."""
    from kfs_core.catalog.snapshots import take_snapshot

    with operator_errors():
        manifest = take_snapshot(
            cli_store(ctx),
            cli_settings(ctx).namespace,
            name,
            topics=[t for t in topics.split(",") if t] if topics else None,
        )
    click.echo(
        f"snapshot {manifest.name}: {len(manifest.topics)} topic(s), "
        f"{manifest.segment_count} segment(s)"
    )


@catalog.command("restore")
@click.argument("topic")
@click.option("--snapshot", "snapshot_name", required=True, help="snapshot to restore from")
@click.option("--dry-run", is_flag=True, help="print the plan, change nothing")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="restore what can be, skipping segments below the current log start",
)
@click.option("--keep-configs", is_flag=True, help="leave the topic's configs as they are now")
@click.pass_context
def catalog_restore(
    ctx: click.Context,
    topic: str,
    snapshot_name: str,
    dry_run: bool,
    allow_partial: bool,
    keep_configs: bool,
) -> None:
    """Restore TOPIC's catalog from a snapshot (its objects must still exist)."""
    from kfs_core.catalog.restore import restore_topic

    with operator_errors():
        result = restore_topic(
            cli_store(ctx),
            cli_settings(ctx).namespace,
            topic,
            snapshot_name,
            dry_run=dry_run,
            allow_partial=allow_partial,
            restore_configs=not keep_configs,
        )
    verb = "would" if dry_run else "will"
    for plan in result.plan.partitions:
        click.echo(
            f"{topic}/{plan.partition}: {verb} remove {len(plan.remove)} and restore "
            f"{len(plan.restore)} segment(s) (snapshot version {plan.snapshot_version})"
        )
    for outcome in result.outcomes:
        line = f"{topic}/{outcome.partition}: {outcome.status}"
        click.echo(line + (f" ({outcome.message})" if outcome.message else ""))
    if not result.ok:
        raise CliError(f"restore of {topic!r} lost a race to another writer; run it again")
