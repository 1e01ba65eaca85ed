"""`kfs run`: the embedded default -- the daemon, Airflow and a demo stream on one machine.

`kfs run` is a small process supervisor: this module is what it starts, in
which order, and how it stops it.  Every component is a child process in its
own process group, with its output in a log file under ``$KFS_HOME/logs/``, so
the terminal shows only what the supervisor says and Ctrl-C reaches the
supervisor alone (`kfs_core.cli.processes`: `Child` and stopping).  Where
things live and each child's environment are `kfs_core.cli.embedded`
(`RunOptions`).

Start: take the lock; start the daemon (`kfs serve`; with ``--daemons N``,
N of them on the one store, as `RunOptions.daemon_plans` lays out); run `airflow db migrate`
and create the Spark pool the plugin defines (`kfs_airflow.dags_support`:
name, slots, description); start the api-server, scheduler,
dag-processor and triggerer; wait for every daemon's /readyz and the
api-server's health; start the `demo-events` stream (kfs_core.cli.demo); print
the banner.  Stop (SIGINT, SIGTERM, SIGHUP): the demo; the scheduler (running
tasks get a grace period), dag-processor and triggerer; the api-server, whose
execution API those tasks report to; last the daemons, together, each
flushing its buffers to the store; exit 0.  A child that exits on
its own is reported with the tail of its log, the rest are stopped, exit 1.
A second signal stops Airflow without waiting for running tasks, a third
kills the daemon too (what it acknowledged stays in the WAL).

kfs_core never imports Airflow: Airflow runs as ``python -m airflow``
subprocesses configured by environment (`kfs_core.cli.embedded.airflow_environment`).
On Linux the supervisor is a child subreaper and children get a parent-death
signal, so no task process or Spark JVM outlives `kfs run`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Final

from kfs_core import __version__
from kfs_core.cli.embedded import (
    ADMIN_USER,
    PASSWORDS_FILE,
    EmbeddedError,
    RunOptions,
    admin_password,
    airflow_environment,
    daemon_environment,
    host_port,
)
from kfs_core.cli.processes import (
    TICK_S,
    Child,
    become_subreaper,
    log_tail,
    reap_orphans,
    rotate_log,
    stop_children,
    stop_descendants,
)
from kfs_core.errors import KfsError

__all__ = ["AIRFLOW_COMPONENTS", "Supervisor", "trigger_dag"]

AIRFLOW_COMPONENTS: Final = ("api-server", "scheduler", "dag-processor", "triggerer")
# The Spark pool is the plugin's (kfs_airflow.dags_support, one definition for
# `kfs run`, docker-compose's airflow-init and the plugin's listener): created by
# its own code in a subprocess, as kfs_core never imports Airflow or the plugin.
CREATE_SPARK_POOL: Final = (
    "from kfs_airflow.dags_support import ensure_spark_pool; ensure_spark_pool()"
)

# How long a stopping component may take before it is signalled again, then killed.
DEMO_STOP_S: Final = 10.0
AIRFLOW_STOP_S: Final = 20.0  # the scheduler lets running tasks finish; then TERM again, then KILL
DAEMON_STOP_S: Final = 180.0  # shutdown grace plus the flush of every buffer
# Start-up deadlines; the daemon has none, its WAL recovery takes what it takes.
SETUP_COMMAND_S: Final = 300.0
API_SERVER_START_S: Final = 240.0
JOBS_SERVER_START_S: Final = 240.0
JOBS_SERVER_STOP_S: Final = 20.0  # the JVM stops its SparkContext on TERM
# On first start, once the demo stream has sealed a segment, `kfs run` triggers
# kfs_tables and kfs_validation so a new user has the demo topic's table and a
# data-quality report within minutes.
FIRST_TABLE_DAG: Final = "kfs_tables"
FIRST_REPORT_DAG: Final = "kfs_validation"
FIRST_REPORT_MARKER: Final = "first-report-triggered"
FIRST_REPORT_CHECK_S: Final = 10.0

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1


# --- the supervisor ---------------------------------------------------------------


class _Stop(Exception):
    """A signal asked `kfs run` to stop while it was starting."""


class _ChildFailed(Exception):
    def __init__(self, child: Child, during: str) -> None:
        super().__init__(child.name)
        self.child = child
        self.during = during


@dataclass
class _Output:
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    err: IO[str] = field(default_factory=lambda: sys.stderr)

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def warn(self, text: str) -> None:
        print(text, file=self.err, flush=True)


class Supervisor:
    """Starts the children of `kfs run`, watches them, and stops them in order."""

    def __init__(self, options: RunOptions, *, env: Mapping[str, str] | None = None) -> None:
        self.options = options
        self.base_env = dict(os.environ if env is None else env)
        self.out = _Output()
        self.signals: list[int] = []
        self.daemons: list[Child] = []
        self.airflow: list[Child] = []
        self.demo: Child | None = None
        self.jobs: Child | None = None
        self.setup_step: Child | None = None  # `airflow db migrate` and the like, while they run
        self.airflow_env: dict[str, str] = {}
        self._subreaper = False
        self._table_triggered = False  # the first start's kfs_tables run (`_first_report`)

    # --- public ---------------------------------------------------------------------

    def run(self) -> int:
        """Start everything, supervise until a signal or a failure; the exit code.

        Meant for the process of `kfs run` itself: on Linux it becomes a child
        subreaper and, when done, stops every process still below it.
        """
        if self.options.airflow:
            self.airflow_env = airflow_environment(self.options, self.base_env)
        self._check_ports()
        with self._home_lock():
            previous = {
                s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            }
            for signum in previous:
                signal.signal(signum, self._on_signal)
            self._subreaper = become_subreaper()
            try:
                return self._run()
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)

    # --- start-up ---------------------------------------------------------------------

    def _run(self) -> int:
        o = self.options
        code = EXIT_OK
        try:
            self.out.say(f"KFS {__version__}: starting on the embedded default in {o.home}")
            self._start_daemons()
            if o.runs_jobs_server:
                self._start_jobs_server()
            if o.airflow:
                self._setup_airflow()
                self._start_airflow()
            self._wait_ready()
            if o.demo:
                self._start_demo()
            self._banner()
            self._supervise()
        except _Stop:
            pass
        except _ChildFailed as failed:
            self._report(failed.child, failed.during)
            code = EXIT_FAILED
        except BaseException:
            self._stop_all()
            raise
        self.out.say("kfs run: stopping ...")
        if not self._stop_all():
            code = EXIT_FAILED
        self.out.say(f"kfs run: stopped (exit {code})")
        return code

    def _start_daemons(self) -> None:
        o = self.options
        for plan in o.daemon_plans:
            name = "kfs daemon" if plan.node_id is None else f"kfs daemon {plan.node_id}"
            child = Child(
                name,
                [sys.executable, "-m", "kfs_core.cli", "serve"],
                daemon_environment(o, self.base_env, plan),
                o.logs / plan.log_name,
            )
            self.daemons.append(child)
            child.start()

    def _start_jobs_server(self) -> None:
        o = self.options
        self.jobs = Child(
            "kfs jobs server",
            [
                sys.executable,
                "-m",
                "kfs_core.cli",
                "jobs",
                "serve",
                "--listen",
                f"127.0.0.1:{o.jobs_port}",
            ],
            daemon_environment(o, self.base_env),
            o.logs / "jobs-server.log",
        )
        self.jobs.start()

    def _setup_airflow(self) -> None:
        """`airflow db migrate`, then the Spark pool: one-shot steps, one after the other."""
        o = self.options
        o.airflow_home.mkdir(parents=True, exist_ok=True)
        admin_password(o.airflow_home)  # before any Airflow process can generate one
        env = self.airflow_env
        log = o.logs / "airflow-setup.log"
        rotate_log(log)
        self.out.say(f"  Airflow: migrating its database {o.airflow_home / 'airflow.db'} ...")
        steps = [
            ("airflow db migrate", ["-m", "airflow", "db", "migrate"]),
            ("Spark pool set-up", ["-c", CREATE_SPARK_POOL]),
        ]
        for name, args in steps:
            step = Child(name, [sys.executable, *args], env, log)
            self.setup_step = step
            step.start(rotate=False)
            deadline = time.monotonic() + SETUP_COMMAND_S
            while not step.exited():
                self._check_running(during="Airflow's set-up")
                if time.monotonic() > deadline:
                    raise EmbeddedError(
                        f"{step.name} did not finish within {SETUP_COMMAND_S:.0f}s; "
                        f"its log: {step.log_path}"
                    )
                time.sleep(TICK_S)
            self.setup_step = None
            if step.returncode != 0:
                raise _ChildFailed(step, "Airflow's set-up")

    def _start_airflow(self) -> None:
        o = self.options
        env = self.airflow_env
        self.out.say(f"  Airflow: starting {', '.join(AIRFLOW_COMPONENTS)} ...")
        for component in AIRFLOW_COMPONENTS:
            args = [component]
            if component == "api-server":
                args += ["--host", o.airflow_host, "--port", str(o.airflow_port)]
            child = Child(
                f"airflow {component}",
                [sys.executable, "-m", "airflow", *args],
                env,
                o.logs / f"airflow-{component}.log",
                # TERM reaches the whole group (the triggerer's trigger runner takes
                # 10 s to stop when only the triggerer is told), but for the
                # scheduler's: its LocalExecutor workers let running tasks finish.
                term_group=component != "scheduler",
            )
            self.airflow.append(child)
            child.start()

    def _wait_ready(self) -> None:
        o = self.options
        for plan in o.daemon_plans:
            what = "the daemon" if plan.node_id is None else f"daemon {plan.node_id}"
            self._wait_until(functools.partial(_http_ok, f"{plan.metrics_url}/readyz"), what, None)
        if o.runs_jobs_server:
            self._wait_until(
                lambda: _http_ok(f"{o.jobs_url}/healthz"), "the job server", JOBS_SERVER_START_S
            )
        if o.airflow:
            self._wait_until(
                lambda: _http_ok(f"{o.airflow_url}/api/v2/monitor/health"),
                "the Airflow api-server",
                API_SERVER_START_S,
            )

    def _start_demo(self) -> None:
        o = self.options
        self.demo = Child(
            "demo-events stream",
            [sys.executable, "-m", "kfs_core.cli.demo", "--bootstrap", o.bootstrap],
            self.base_env,
            o.logs / "demo.log",
        )
        self.demo.start()

    def _wait_until(self, ready: Callable[[], bool], what: str, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready():
            self._check_running(during=f"the start of {what}")
            if deadline is not None and time.monotonic() > deadline:
                raise EmbeddedError(
                    f"{what} did not answer within {timeout:.0f}s; see {self.options.logs}"
                )
            time.sleep(TICK_S)

    def _check_running(self, *, during: str) -> None:
        """Raise `_Stop` after a signal, `_ChildFailed` when a child has exited."""
        if self.signals:
            raise _Stop
        for child in self._children():
            if child.exited():
                raise _ChildFailed(child, during)

    # --- running ----------------------------------------------------------------------

    def _supervise(self) -> None:
        """Until a signal: watch the children; one exiting is a failure."""
        last_reap = time.monotonic()
        last_report_check = 0.0
        while not self.signals:
            for child in self._children():
                if child.exited():
                    raise _ChildFailed(child, "the run")
            if self._subreaper and time.monotonic() - last_reap > 5:
                reap_orphans({c.pid for c in self._children()})
                last_reap = time.monotonic()
            if time.monotonic() - last_report_check > FIRST_REPORT_CHECK_S:
                last_report_check = time.monotonic()
                self._first_report()
            time.sleep(TICK_S)

    def _first_report(self) -> None:
        """On first start: trigger kfs_tables and kfs_validation once the demo topic has a segment.

        Tried every few seconds until it succeeds (the DAG may not be parsed
        yet); a marker in Airflow's home makes it happen once per home.
        """
        o = self.options
        marker = o.airflow_home / FIRST_REPORT_MARKER
        if not (o.airflow and o.demo) or marker.exists():
            return
        if not self._demo_has_segments():
            return
        password = admin_password(o.airflow_home)
        try:
            if not self._table_triggered:
                trigger_dag(
                    o.airflow_url,
                    ADMIN_USER,
                    password,
                    FIRST_TABLE_DAG,
                    note="Triggered by kfs run on first start: the demo topic's Iceberg table.",
                )
                self._table_triggered = True
            run_id = trigger_dag(
                o.airflow_url,
                ADMIN_USER,
                password,
                FIRST_REPORT_DAG,
                note="Triggered by kfs run on first start: the demo's first data-quality report.",
            )
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return  # not parsed yet, or the api-server is busy: next time
        marker.write_text(run_id + "\n")
        self.out.say(
            f"kfs run: triggered {FIRST_TABLE_DAG} and {FIRST_REPORT_DAG} ({run_id}); "
            "the demo's table and report show on the KFS page in a few minutes"
        )

    def _demo_has_segments(self) -> bool:
        from kfs_core.catalog import layout
        from kfs_core.cli.demo import DEMO_TOPIC
        from kfs_core.storage import open_store

        s = self.options.settings
        try:
            store = open_store(s.store_url, endpoint_url=s.s3_endpoint_url or None)
            prefix = layout.join(s.namespace, DEMO_TOPIC, "")
            return any(info.key.endswith(".kfs") for info in store.list(prefix))
        except (KfsError, OSError, ValueError):
            return False

    def _children(self) -> list[Child]:
        """The long-running children (a set-up step is watched by its own loop)."""
        children = [*self.daemons, self.jobs, *self.airflow, self.demo]
        return [c for c in children if c is not None]

    def _on_signal(self, signum: int, _frame: object) -> None:
        # Only a list append: the handler may run while the loop holds any lock.
        self.signals.append(signum)

    # --- stopping ---------------------------------------------------------------------

    def _stop_all(self) -> bool:
        """Stop the demo, then Airflow, then the daemon; whether the daemon stopped cleanly.

        One more signal kills what is left of Airflow at once; the third kills
        the daemon too (what it acknowledged is in the WAL, replayed next start).
        """
        if self.demo is not None:
            stop_children([self.demo], DEMO_STOP_S, force=lambda: len(self.signals) >= 2)
        airflow = [c for c in (*self.airflow, self.setup_step) if c is not None]
        if any(c.returncode is None for c in airflow):
            self.out.say(
                f"  Airflow: stopping (running tasks get {AIRFLOW_STOP_S:.0f}s; "
                "Ctrl-C again stops them at once) ..."
            )
            # Running tasks report to the api-server's execution API until they
            # end: it stops last.
            api_server = [c for c in airflow if c.name == "airflow api-server"]
            rest = [c for c in airflow if c not in api_server]
            for group in (rest, api_server):
                stop_children(group, AIRFLOW_STOP_S, force=lambda: len(self.signals) >= 2)
        if self.jobs is not None and self.jobs.returncode is None:
            stop_children([self.jobs], JOBS_SERVER_STOP_S, force=lambda: len(self.signals) >= 2)
        clean = True
        if self.daemons:
            if any(d.returncode is None for d in self.daemons):
                self.out.say(
                    "  daemon: flushing its buffers to the store ..."
                    if len(self.daemons) == 1
                    else "  daemons: flushing their buffers to the store ..."
                )
            stop_children(self.daemons, DAEMON_STOP_S, force=lambda: len(self.signals) >= 3)
            for daemon in self.daemons:
                if daemon.returncode != 0:
                    clean = False
                    if daemon.stopping:
                        self.out.warn(
                            f"kfs run: {daemon.name} stopped with status {daemon.returncode}; "
                            f"its log: {daemon.log_path} (the WAL keeps what was acknowledged)"
                        )
        if self._subreaper:
            stop_descendants()
        return clean

    # --- reporting ----------------------------------------------------------------------

    def _report(self, child: Child, during: str) -> None:
        status = child.returncode
        how = (
            f"was killed by signal {-status}"
            if status is not None and status < 0
            else f"exited unexpectedly with status {status}"
        )
        self.out.warn(f"kfs run: {child.name} {how} during {during}; its log: {child.log_path}")
        for line in log_tail(child.log_path):
            self.out.warn(f"  | {line}")

    def _banner(self) -> None:
        o = self.options
        s = o.settings
        say = self.out.say
        bootstrap_flag = "" if o.bootstrap == "127.0.0.1:9092" else f" --bootstrap {o.bootstrap}"
        say()
        say(f"KFS {__version__} is ready on the embedded default ({o.home})")
        say(f"  Kafka      {o.bootstrap}  (bootstrap.servers)")
        plans = o.daemon_plans
        if len(plans) == 1:
            say(f"  metrics    {o.metrics_url}/metrics")
        else:
            durability = self.base_env.get("KFS_DURABILITY") or "store"
            say(f"  daemons    {len(plans)} on one store, durability {durability}")
            for plan in plans:
                say(
                    f"    node {plan.node_id}   {plan.bootstrap}  metrics {plan.metrics_url}/metrics"
                    f"  WAL {plan.data_dir}"
                )
        if o.airflow:
            say(f"  Airflow    {o.airflow_url}  (the KFS page: 'KFS' in its navigation bar)")
            say(f"  login      {ADMIN_USER} / {admin_password(o.airflow_home)}")
            say(f"             (kept in {o.airflow_home / PASSWORDS_FILE})")
        else:
            say("  Airflow    not started (--no-airflow)")
        if o.runs_jobs_server:
            say(f"  jobs       {o.jobs_url}  (the warm Spark driver the maintenance tasks run on)")
        say(f"  store      {s.store_url}  (namespace {s.namespace!r})")
        say(f"  logs       {o.logs}")
        if o.demo:
            say("  demo       topic demo-events, one JSON event a second (KFS_DEMO=0 turns it off)")
        say("Produce and consume from another shell:")
        say(f"  echo hello | .venv/bin/kfs produce my-topic{bootstrap_flag}")
        say(
            f"  .venv/bin/kfs consume demo-events --from-beginning --max-messages 5{bootstrap_flag}"
        )
        say(f"or point any Kafka client at {o.bootstrap}.  Ctrl-C stops everything cleanly.")

    # --- guards -------------------------------------------------------------------------

    def _check_ports(self) -> None:
        """Fail at once, naming the setting, when a port some child would listen on is taken."""
        o = self.options
        ports: list[tuple[str, str, int]] = []
        for plan in o.daemon_plans:
            which = "" if plan.node_id is None else f" of daemon {plan.node_id}"
            ports += [
                (f"the Kafka listener{which} (KFS_LISTEN)", plan.listen, 9092),
                (f"the metrics endpoint{which} (KFS_METRICS_LISTEN)", plan.metrics_listen, 9644),
            ]
        if o.runs_jobs_server:
            ports.append(("the job server (KFS_JOBS_PORT)", f"127.0.0.1:{o.jobs_port}", 7079))
        if o.airflow:
            env = self.airflow_env
            ports.append(("Airflow (KFS_AIRFLOW_PORT)", f"{o.airflow_host}:{o.airflow_port}", 8080))
            # The scheduler and the triggerer serve running tasks' logs on every interface.
            for key, default in (("WORKER", 8793), ("TRIGGER", 8794)):
                name = f"AIRFLOW__LOGGING__{key}_LOG_SERVER_PORT"
                ports.append(
                    (
                        f"Airflow's {key.lower()} log server ({name})",
                        f":{env.get(name) or default}",
                        default,
                    )
                )
        for what, address, default in ports:
            host, port = host_port(address, default)
            if port and not _can_bind(host, port):
                raise EmbeddedError(f"{host or '*'}:{port}, for {what}, is in use")

    @contextlib.contextmanager
    def _home_lock(self) -> Iterator[None]:
        home = self.options.home
        home.mkdir(parents=True, exist_ok=True)
        lock = (home / "run.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            lock.close()
            raise EmbeddedError(f"another kfs run (pid {holder}) is using {home}") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        try:
            yield
        finally:
            lock.close()


def trigger_dag(base_url: str, user: str, password: str, dag_id: str, *, note: str) -> str:
    """Trigger a DAG run through Airflow's REST API; its run id.  Raises URLError on failure."""

    def post(path: str, body: dict[str, object], token: str | None = None) -> dict[str, object]:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(
            base_url + path, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            doc: dict[str, object] = json.loads(response.read())
            return doc

    token = str(post("/auth/token", {"username": user, "password": password})["access_token"])
    run = post(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "note": note}, token)
    return str(run["dag_run_id"])


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _can_bind(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
