"""`kfs run`: the embedded default, started and stopped by `kfs_core.cli.supervisor`."""

from __future__ import annotations

import click

from kfs_core.cli.common import cli_settings, operator_errors


@click.command()
@click.option(
    "--airflow/--no-airflow",
    default=True,
    show_default=True,
    envvar="KFS_AIRFLOW",
    help="start Airflow (api-server, scheduler, dag-processor, triggerer) [KFS_AIRFLOW]",
)
@click.option(
    "--airflow-port",
    type=click.IntRange(1, 65535),
    default=8080,
    show_default=True,
    envvar="KFS_AIRFLOW_PORT",
    help="port of Airflow's UI and API [KFS_AIRFLOW_PORT]",
)
@click.option(
    "--airflow-host",
    default="127.0.0.1",
    show_default=True,
    envvar="KFS_AIRFLOW_HOST",
    help="address Airflow's api-server listens on [KFS_AIRFLOW_HOST]",
)
@click.option(
    "--demo/--no-demo",
    default=True,
    show_default=True,
    envvar="KFS_DEMO",
    help="produce the demo-events stream, a JSON event a second [KFS_DEMO=0 turns it off]",
)
@click.option(
    "--jobs-server/--no-jobs-server",
    default=True,
    show_default=True,
    envvar="KFS_RUN_JOBS_SERVER",
    help="start the job server the Airflow tasks run on (`kfs jobs serve`); without it each "
    "task spark-submits its job [KFS_RUN_JOBS_SERVER]",
)
@click.option(
    "--jobs-port",
    type=click.IntRange(1, 65535),
    default=7079,
    show_default=True,
    envvar="KFS_JOBS_PORT",
    help="loopback port of the job server [KFS_JOBS_PORT]",
)
@click.option(
    "--daemons",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    envvar="KFS_RUN_DAEMONS",
    help="how many `kfs serve` daemons to start on the one store: node ids 1..N, ports counted "
    "up from KFS_LISTEN and KFS_METRICS_LISTEN, a WAL each in data/node-{i}, durability store "
    "unless KFS_DURABILITY is set [KFS_RUN_DAEMONS]",
)
@click.pass_context
def run(
    ctx: click.Context,
    airflow: bool,
    airflow_port: int,
    airflow_host: str,
    demo: bool,
    jobs_server: bool,
    jobs_port: int,
    daemons: int,
) -> None:
    """Start KFS on the embedded default: the daemon, Airflow, the job server and a demo stream.

    Everything lives under KFS_HOME (.kfs/): the store, the WAL, Airflow's
    home and SQLite database, and a log per process in .kfs/logs/.  Ctrl-C or
    SIGTERM stops it all and flushes the daemon (see kfs_core.cli.supervisor).
    With --daemons N, N daemons share the store: one bootstrap address each,
    and `kfs cluster status` shows them.
    """
    from kfs_core.cli.embedded import RunOptions
    from kfs_core.cli.supervisor import Supervisor

    with operator_errors():
        options = RunOptions(
            cli_settings(ctx),
            airflow=airflow,
            airflow_host=airflow_host,
            airflow_port=airflow_port,
            demo=demo,
            jobs_server=jobs_server,
            jobs_port=jobs_port,
            daemons=daemons,
        )
        code = Supervisor(options).run()
    ctx.exit(code)
