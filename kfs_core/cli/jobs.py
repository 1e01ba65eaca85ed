"""`kfs jobs list|run|serve`: the Spark maintenance jobs (spark_jobs/) with this installation's Python.

``kfs jobs run JOB [JOB FLAGS]`` runs ``python -m spark_jobs JOB`` (Spark in
``local[*]`` inside that process); ``--spark-submit`` runs the job's file
through ``spark-submit`` instead, as the Airflow operator does.  Either way
the job gets what a shell with the virtualenv not activated lacks: this
interpreter for the driver and the executors (``PYSPARK_PYTHON``), the
``SPARK_HOME`` of the installed pyspark (otherwise spark-submit asks the
system ``python3`` for it and fails with "/bin/spark-class: No such file or
directory"), this interpreter's ``bin/`` on ``PATH``, and the store `kfs`
itself uses (``KFS_STORE_URL``, ``KFS_NAMESPACE``) unless the job's own
``--store-url`` / ``--namespace`` say otherwise.  The job replaces the `kfs`
process, so its output, signals and exit status are the job's own.

``kfs jobs serve`` spark-submits the job server (`spark_jobs.server`) the same
way; ``kfs jobs run --server URL`` (or ``KFS_JOBS_SERVER``) sends the job there
instead (`kfs_core.jobs_client`), naming kfs's store explicitly, since the
server's environment is not this shell's; it prints the run's lines and exits
with its status, and Ctrl-C cancels the run on the server.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

import click

from kfs_core.cli.common import CliError, cli_settings
from kfs_core.config import Settings
from kfs_core.reports import job_application

__all__ = ["job_command", "job_environment", "job_file", "jobs"]

# Modules of spark_jobs/ that are not jobs.
_NOT_JOBS = frozenset({"__init__", "__main__", "common", "server"})
_REPOSITORY = Path(__file__).resolve().parents[2]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise CliError(f"{name} is not installed in {sys.prefix}: pip install -e .")
    return Path(next(iter(spec.submodule_search_locations)))


def available_jobs() -> list[str]:
    """The jobs, by the files of spark_jobs/ (importing them would start pyspark's imports).

    A job is a module with a ``main`` or a package with a ``__main__.py``.
    """
    root = _package_dir("spark_jobs")
    modules = [
        p.stem
        for p in root.glob("*.py")
        if p.stem not in _NOT_JOBS and not p.stem.startswith("_") and "def main(" in p.read_text()
    ]
    packages = [p.parent.name for p in root.glob("*/__main__.py")]
    return sorted(modules + packages)


def job_file(job: str) -> Path:
    """The file spark-submit runs (`kfs_core.reports.job_application`)."""
    _package_dir("spark_jobs")  # a one-line CliError when it is missing
    return job_application(job)


def job_environment(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus what a job needs to run with this interpreter and kfs's store settings."""
    python = base.get("PYSPARK_PYTHON") or sys.executable
    env = {
        **base,
        "KFS_STORE_URL": settings.store_url,
        "KFS_NAMESPACE": settings.namespace,
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": base.get("PYSPARK_DRIVER_PYTHON") or python,
        "SPARK_HOME": base.get("SPARK_HOME") or str(_package_dir("pyspark")),
        "PATH": os.pathsep.join(
            p for p in (str(Path(sys.executable).parent), base.get("PATH", "")) if p
        ),
    }
    if settings.s3_endpoint_url:
        env["KFS_S3_ENDPOINT_URL"] = settings.s3_endpoint_url
    spark_conf = _REPOSITORY / "infra" / "spark"
    if "SPARK_CONF_DIR" not in env and spark_conf.is_dir():
        env["SPARK_CONF_DIR"] = str(spark_conf)  # the settings the Airflow tasks use
    return env


def job_command(job: str, args: tuple[str, ...], *, spark_submit: bool) -> list[str]:
    """The argv that runs ``job`` with ``args``, in this interpreter or through spark-submit."""
    if not spark_submit:
        return [sys.executable, "-m", "spark_jobs", job, *args]
    return [_spark_submit(), str(job_file(job)), *args]


def _spark_submit() -> str:
    """The spark-submit beside this interpreter (a virtualenv's), else the one on PATH."""
    spark_submit_bin = Path(sys.executable).parent / "spark-submit"
    return str(spark_submit_bin) if spark_submit_bin.exists() else "spark-submit"


def _become(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process with ``argv``: its output, signals and exit status are its own."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        raise CliError(f"cannot start {argv[0]}: {exc}") from None


@click.group()
def jobs() -> None:
    """Run the Spark maintenance jobs (compaction, retention, validation, ...)."""


@jobs.command("list")
def jobs_list() -> None:
    """List the jobs (`kfs jobs run JOB --help` shows a job's flags)."""
    for name in available_jobs():
        click.echo(name)


@jobs.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--spark-submit",
    is_flag=True,
    help="run the job's file through spark-submit (flags after JOB such as --master "
    "go to the job) instead of in this Python",
)
@click.option(
    "--server",
    envvar="KFS_JOBS_SERVER",
    metavar="URL",
    help="run the job on a job server (`kfs jobs serve`), e.g. http://127.0.0.1:7079 "
    "[env KFS_JOBS_SERVER]; --spark-submit wins over it",
)
@click.argument("job")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED, metavar="[JOB FLAGS]...")
@click.pass_context
def jobs_run(
    ctx: click.Context, spark_submit: bool, server: str | None, job: str, job_args: tuple[str, ...]
) -> None:
    """Run maintenance job JOB with its own flags (`kfs jobs run JOB --help` lists them).

    Without --store-url / --namespace the job works on kfs's store
    (KFS_STORE_URL, by default .kfs/store under KFS_HOME).
    """
    name = job.replace("-", "_")
    available = available_jobs()
    if name not in available:
        raise CliError(f"unknown job {job!r}; jobs: {', '.join(available)}")
    if server and not spark_submit and not {"-h", "--help"} & set(job_args):
        sys.exit(_run_on_server(server, name, job_args, cli_settings(ctx)))
    _become(
        job_command(name, job_args, spark_submit=spark_submit),
        job_environment(cli_settings(ctx), os.environ),
    )


def _run_on_server(url: str, job: str, job_args: tuple[str, ...], settings: Settings) -> int:
    """Run ``job`` on the job server at ``url``; its exit status (Ctrl-C or TERM cancel it)."""
    from kfs_core.jobs_client import JobServerError, cancel_on_server, run_on_server
    from kfs_core.reports import new_run_id

    args = [_absolute_store(a) for a in job_args]
    # The server's own environment is not this shell's: name the store explicitly.
    if _flag(args, "--store-url") is None:
        args += ["--store-url", settings.store_url]
    if _flag(args, "--namespace") is None:
        args += ["--namespace", settings.namespace]
    if settings.s3_endpoint_url and _flag(args, "--s3-endpoint-url") is None:
        args += ["--s3-endpoint-url", settings.s3_endpoint_url]
    run_id = _flag(args, "--run-id")
    if run_id is None:
        run_id = new_run_id()
        args += ["--run-id", run_id]
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        finished = run_on_server(url, job, args)
    except KeyboardInterrupt:
        try:
            cancelled = cancel_on_server(url, run_id)
        except JobServerError as exc:
            click.echo(f"kfs: could not cancel run {run_id}: {exc}", err=True)
        else:
            what = "cancelled" if cancelled else "was not running (yet, or any more)"
            click.echo(f"kfs: run {run_id} on {url} {what}", err=True)
        return 130
    except JobServerError as exc:
        raise CliError(str(exc)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if finished.output:
        click.echo(finished.output)
    if finished.errors:
        click.echo(finished.errors, err=True)
    return finished.exit_code


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # a TERM cancels the run on the server, as Ctrl-C does


def _flag(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` as argparse takes it: the last ``--flag VALUE`` or ``--flag=VALUE``."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _absolute_store(arg: str) -> str:
    """A relative ``file:`` URL made absolute here: the server resolves paths in its own directory."""
    if arg.startswith("file:") and not arg.startswith("file:/"):
        return Path(arg[len("file:") :]).resolve().as_uri()
    return arg


@jobs.command(
    "serve",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--listen",
    default="127.0.0.1:7079",
    show_default=True,
    help="HOST:PORT the job server answers on (no authentication: keep it private)",
)
@click.option("--max-jobs", default=2, show_default=True, help="runs at once; more wait")
@click.argument("spark_args", nargs=-1, type=click.UNPROCESSED, metavar="[--master URL]")
@click.pass_context
def jobs_serve(ctx: click.Context, listen: str, max_jobs: int, spark_args: tuple[str, ...]) -> None:
    """Serve the jobs from one warm Spark driver (spark-submit'ed, like a task).

    `kfs jobs run --server URL JOB` and the Airflow operator (a kfs connection
    whose extra names "jobs_server") then run a job without starting a JVM,
    a SparkSession or Great Expectations each time.
    """
    app = job_application("server")
    _become(
        [_spark_submit(), str(app), "--listen", listen, "--max-jobs", str(max_jobs), *spark_args],
        job_environment(cli_settings(ctx), os.environ),
    )
