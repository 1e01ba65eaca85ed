"""The embedded default's configuration: what `kfs run` starts, where, and with what environment.

`RunOptions` says which components run and where everything lives under
``$KFS_HOME`` (``.kfs/``)::

    $KFS_HOME (.kfs/)
      store/  data/     the object store (file://) and the WAL (kfs_core.config);
                        with --daemons N, one WAL per daemon: data/node-{i}/
      airflow/          AIRFLOW_HOME: airflow.cfg, airflow.db (SQLite), the admin password
      logs/             kfs.log, demo.log, airflow-<component>.log, airflow/ (task logs)
      run.lock          held while `kfs run` runs: one supervisor per home

`kfs run --daemons N` starts N daemons on the one store and namespace
(`DaemonPlan`): node ids 1..N, Kafka and metrics ports counted up from
KFS_LISTEN's and KFS_METRICS_LISTEN's, a WAL directory each, and the
``store`` durability mode unless KFS_DURABILITY says otherwise, so any of
them can take over the partitions of another (docs/architecture.md, "High
availability").  With one daemon everything is as it always was.

Each child gets its environment from here: each daemon every setting `kfs run`
resolved as ``KFS_*`` variables, and its own node id, ports and WAL
(`daemon_environment`); Airflow
``infra/airflow/airflow.env`` first, the caller's environment over it, then
what only the launcher knows: paths, ports, the database, the ``kfs_default``
connection (`airflow_environment`).  kfs_core never imports Airflow: Airflow is
configured by environment alone.  The admin's password is generated once per
home (`admin_password`).  `kfs_core.cli.supervisor` starts the children.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kfs_core.config import Settings, default_home
from kfs_core.errors import KfsError

__all__ = [
    "ADMIN_USER",
    "PASSWORDS_FILE",
    "DaemonPlan",
    "EmbeddedError",
    "RunOptions",
    "admin_password",
    "airflow_environment",
    "connect_host",
    "daemon_environment",
    "find_repository",
    "host_port",
    "read_env_file",
]

ADMIN_USER: Final = "admin"
PASSWORDS_FILE: Final = "simple_auth_manager_passwords.json.generated"


class EmbeddedError(KfsError):
    """`kfs run` cannot start: a port in use, a missing folder, another `kfs run`."""


def find_repository() -> Path:
    """The KFS checkout whose ``dags/`` and ``plugins/`` Airflow loads."""
    candidates = [Path(__file__).resolve().parents[2], Path.cwd()]
    for root in candidates:
        if (root / "dags").is_dir() and (root / "plugins").is_dir():
            return root
    raise EmbeddedError(
        "kfs run needs the KFS repository (its dags/ and plugins/ folders): run it from a "
        "checkout, or use --no-airflow for the daemon alone"
    )


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines as docker-compose's ``env_file`` reads them (no expansion)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise EmbeddedError(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def admin_password(airflow_home: Path) -> str:
    """The admin's password: generated on first start, read from the passwords file after.

    The file is the simple auth manager's own (``{"user": "password"}``), so
    Airflow finds the user there and generates nothing itself.
    """
    path = airflow_home / PASSWORDS_FILE
    passwords: dict[str, str] = {}
    if path.exists():
        try:
            passwords = json.loads(path.read_text() or "{}")
        except json.JSONDecodeError as exc:
            raise EmbeddedError(f"{path}: not JSON ({exc}); delete it for a new password") from None
    if ADMIN_USER not in passwords:
        passwords[ADMIN_USER] = secrets.token_urlsafe(12)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(passwords) + "\n")
    return str(passwords[ADMIN_USER])


def connect_host(host: str) -> str:
    """Where a local client connects to a server listening on ``host``."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::", "*") else host


def host_port(text: str, default_port: int) -> tuple[str, int]:
    """``host:port`` (or ``:port``, ``[v6]:port``) as a pair; ``default_port`` when none is given."""
    from kfs_core.security.listeners import parse_host_port

    return parse_host_port(text, default_port)


@dataclass(frozen=True)
class DaemonPlan:
    """One `kfs serve` of `kfs run`: its node id, addresses, WAL directory and log."""

    node_id: int | None  # None: the node id KFS_NODE_ID gives (one daemon only)
    listen: str
    metrics_listen: str
    data_dir: str
    log_name: str

    @property
    def bootstrap(self) -> str:
        """Where a local Kafka client reaches it."""
        host, port = host_port(self.listen, 9092)
        return f"{connect_host(host)}:{port}"

    @property
    def metrics_url(self) -> str:
        """Its ops HTTP endpoint (/metrics, /readyz)."""
        host, port = host_port(self.metrics_listen, 9644)
        return f"http://{connect_host(host)}:{port}"


def _shifted(address: str, default_port: int, by: int) -> str:
    host, port = host_port(address, default_port)
    return f"[{host}]:{port + by}" if ":" in host else f"{host}:{port + by}"


@dataclass(frozen=True)
class RunOptions:
    """What `kfs run` starts, and where."""

    settings: Settings
    home: Path = field(default_factory=default_home)
    airflow: bool = True
    airflow_host: str = "127.0.0.1"
    airflow_port: int = 8080
    demo: bool = True
    jobs_server: bool = True  # the warm Spark driver the Airflow tasks use (with Airflow only)
    jobs_port: int = 7079
    repository: Path | None = None  # found when Airflow starts
    daemons: int = 1  # `kfs serve` processes on the one store and namespace

    def __post_init__(self) -> None:
        if self.daemons < 1:
            raise EmbeddedError(f"--daemons must be at least 1, got {self.daemons}")
        if self.daemons > 1 and (self.settings.listeners or self.settings.advertised_listeners):
            raise EmbeddedError(
                "kfs run --daemons counts each daemon's port up from KFS_LISTEN; "
                "unset KFS_LISTENERS and KFS_ADVERTISED_LISTENERS, or run one daemon"
            )

    @property
    def daemon_plans(self) -> list[DaemonPlan]:
        """The daemons to start: node ids 1..N on consecutive ports; one is today's daemon."""
        s = self.settings
        if self.daemons == 1:
            return [DaemonPlan(None, s.listen, s.metrics_listen, s.data_dir, "kfs.log")]
        return [
            DaemonPlan(
                node_id=i,
                listen=_shifted(s.listen, 9092, i - 1),
                metrics_listen=_shifted(s.metrics_listen, 9644, i - 1),
                data_dir=str(Path(s.data_dir) / f"node-{i}"),
                log_name=f"kfs-node-{i}.log",
            )
            for i in range(1, self.daemons + 1)
        ]

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def bootstrap(self) -> str:
        """Every daemon's address, comma-separated: a Kafka client's bootstrap.servers."""
        return ",".join(plan.bootstrap for plan in self.daemon_plans)

    @property
    def metrics_url(self) -> str:
        """The first daemon's ops endpoint."""
        return self.daemon_plans[0].metrics_url

    @property
    def airflow_url(self) -> str:
        return f"http://{connect_host(self.airflow_host)}:{self.airflow_port}"

    @property
    def runs_jobs_server(self) -> bool:
        return self.airflow and self.jobs_server

    @property
    def jobs_url(self) -> str:
        """The job server's URL (loopback: it has no authentication)."""
        return f"http://127.0.0.1:{self.jobs_port}"


def daemon_environment(
    options: RunOptions, base: Mapping[str, str], plan: DaemonPlan | None = None
) -> dict[str, str]:
    """The environment of `kfs serve`: every setting `kfs run` resolved, as KFS_* variables.

    ``plan`` is the daemon's when `kfs run` starts several (its node id,
    ports and WAL; durability ``store`` unless ``base`` sets KFS_DURABILITY);
    without one, the first daemon's.
    """
    s = options.settings
    plan = plan or options.daemon_plans[0]
    env = {
        **base,
        "KFS_HOME": str(options.home),
        "KFS_STORE_URL": s.store_url,
        "KFS_NAMESPACE": s.namespace,
        "KFS_DATA_DIR": plan.data_dir,
        "KFS_LISTEN": plan.listen,
        "KFS_METRICS_LISTEN": plan.metrics_listen,
    }
    if plan.node_id is not None:
        env["KFS_NODE_ID"] = str(plan.node_id)
        env["KFS_DURABILITY"] = base.get("KFS_DURABILITY") or "store"
    return env


def airflow_environment(options: RunOptions, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of every Airflow process `kfs run` starts.

    Precedence: ``infra/airflow/airflow.env`` < ``base`` (the caller's
    environment) < what follows from the options, which must agree with the
    daemon and the home this `kfs run` uses.
    """
    repo = options.repository or find_repository()
    env_file = repo / "infra" / "airflow" / "airflow.env"
    env = {**(read_env_file(env_file) if env_file.is_file() else {}), **base}
    airflow_home = options.airflow_home
    venv_bin = str(Path(sys.executable).parent)
    s = options.settings
    # bootstrap_servers: the daemon this `kfs run` starts, for the KFS page's consumer groups.
    extra = {
        "store_url": s.store_url,
        "namespace": s.namespace,
        "bootstrap_servers": options.bootstrap,
    }
    if s.s3_endpoint_url:
        extra["s3_endpoint_url"] = s.s3_endpoint_url
    if options.runs_jobs_server:
        # The maintenance tasks run on the job server `kfs run` starts (no JVM per task).
        extra["jobs_server"] = options.jobs_url
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(repo / "plugins"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(airflow_home / PASSWORDS_FILE),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(options.logs / "airflow"),
            "AIRFLOW__API__HOST": options.airflow_host,
            "AIRFLOW__API__PORT": str(options.airflow_port),
            "AIRFLOW__API__BASE_URL": options.airflow_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{options.airflow_url}/execution/",
            "AIRFLOW_CONN_KFS_DEFAULT": json.dumps({"conn_type": "kfs", "extra": extra}),
            # Tasks call spark-submit, which lives beside this Python; executors
            # run this Python too, so they import the same kfs_core.
            "PATH": os.pathsep.join(p for p in (venv_bin, env.get("PATH", "")) if p),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    spark_conf = repo / "infra" / "spark"
    if spark_conf.is_dir():
        env.setdefault("SPARK_CONF_DIR", str(spark_conf))
    return env
