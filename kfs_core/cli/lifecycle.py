"""`kfs lifecycle`: S3 lifecycle rules that expire segments after their topic's retention.

The command only; the rules are planned in `kfs_core.cli.s3_lifecycle`.
"""

from __future__ import annotations

import click

from kfs_core.cli.common import cli_settings, cli_store, operator_errors


@click.command()
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["json", "terraform"]),
    default="json",
    show_default=True,
    help="json: the document `aws s3api put-bucket-lifecycle-configuration` takes; "
    "terraform: an aws_s3_bucket_lifecycle_configuration resource",
)
@click.option("--topics", help="comma-separated topics (default: all)")
@click.pass_context
def lifecycle(ctx: click.Context, output_format: str, topics: str | None) -> None:
    """Print S3 lifecycle rules that expire segments after their topic's retention.

    One rule per partition of each topic, on its segment-* objects only (never
    the catalog), expiring after retention.ms + max(1 day, 10%), rounded up to
    whole days: a backstop under the retention DAG, never ahead of it.  Topics
    with retention.ms=-1 or a compact cleanup.policy get none.  S3 stores
    only; rerun after creating topics or partitions or changing retention.
    """
    from kfs_core.cli.s3_lifecycle import plan_for_store

    with operator_errors():
        plan = plan_for_store(
            cli_store(ctx),
            cli_settings(ctx).namespace,
            [t for t in topics.split(",") if t] if topics else None,
        )
    for skipped in plan.skipped:
        click.echo(f"kfs: note: no expiration for {skipped.name}: {skipped.reason}", err=True)
    click.echo(plan.to_json() if output_format == "json" else plan.to_terraform(), nl=False)
