"""The `kfs` command: the daemon, the embedded default, and operator tools over the store.

One module per command group; `common` holds what they share (`CliError`,
`operator_errors`, the settings and the store of the invocation)::

    run         kfs run: the embedded default (supervisor: what it starts and in
                which order, the only code that knows Airflow's components, pool
                and DAG ids; embedded: where things live and each child's
                environment; processes: children in their own process groups;
                demo: the demo-events stream it starts)
    serve       kfs serve: the Kafka-protocol daemon
    clients     kfs produce / kfs consume (confluent-kafka)
    topics      kfs topics ...          groups    kfs groups ... (kfs_core.kafka_admin)
    transactions  kfs transactions ...: open and hanging transactions (kafka-python's admin)
    segment     kfs segment dump        catalog   kfs catalog ...
    cluster     kfs cluster status / leases: the daemons' heartbeats and the partition leases
    partitions  kfs partitions reassign: move partitions by hand (kafka-reassign-partitions.sh)
    lifecycle   kfs lifecycle (s3_lifecycle: the rules it plans from topic retention)
    jobs        kfs jobs ... (the Spark maintenance jobs)

This package is the only part of kfs_core that imports click or (in
subprocesses) Airflow; it and `kfs_core.kafka_admin` (the admin wrapper `kfs
groups` shares with the Airflow plugin) are the only parts that drive Kafka
clients.  Every command reads its settings from `KFS_*`
variables (kfs_core.config) and takes `--store-url` / `--namespace` flags that
override them.  Errors an operator can cause (a corrupt file, an unknown
topic, a bad value) end with a one-line ``kfs: error: …`` on stderr and a
non-zero exit, never a traceback.
"""

from __future__ import annotations

import click

from kfs_core import __version__
from kfs_core.cli import (
    acls,
    catalog,
    clients,
    cluster,
    groups,
    jobs,
    lifecycle,
    partitions,
    run,
    segment,
    serve,
    topics,
    transactions,
    users,
)
from kfs_core.cli.common import operator_errors
from kfs_core.config import Settings

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kfs")
@click.option("--store-url", envvar="KFS_STORE_URL", help="file:///dir or s3://bucket/prefix")
@click.option("--namespace", envvar="KFS_NAMESPACE", help="namespace inside the store")
@click.pass_context
def main(ctx: click.Context, store_url: str | None, namespace: str | None) -> None:
    """KFS: a Kafka-compatible streaming log on object storage."""
    with operator_errors():
        ctx.obj = Settings.from_env(store_url=store_url, namespace=namespace)


for _command in (
    run.run,
    serve.serve,
    clients.produce,
    clients.consume,
    topics.topics,
    groups.groups,
    transactions.transactions,
    segment.segment,
    catalog.catalog,
    cluster.cluster,
    partitions.partitions,
    lifecycle.lifecycle,
    jobs.jobs,
    users.users,
    acls.acls,
):
    main.add_command(_command)
