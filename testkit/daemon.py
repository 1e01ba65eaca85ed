"""`kfs serve` as a subprocess on free loopback ports: start it, wait for /readyz, stop it.

`DaemonFactory` starts ``python -m kfs_core.cli serve`` on free loopback
ports with its own data directory and store (a local directory, or S3 on
a moto server), waits for /readyz with a deadline, and kills every process
it started at `DaemonFactory.close`.  `Daemon.stop` sends SIGTERM and
returns the exit code; `Daemon.kill` is ``kill -9``; `Daemon.restart`
starts a new process on the same ports, data directory and store.  The
tests' fixtures (tests/server/conftest.py) and the soak campaigns drive it.

`serve_command`, `serve_env` and `wait_ready` are the parts any harness of
the daemon needs; bench.produce_fetch's daemon (which also samples its
memory) builds on them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testkit.metrics import parse_metrics
from testkit.netns import NetNamespace
from testkit.ports import free_port
from testkit.waiting import wait_for

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


def serve_command(args: Sequence[str]) -> list[str]:
    """The command line of ``kfs serve`` with ``args``, in this interpreter."""
    return [sys.executable, "-m", "kfs_core.cli", "serve", *args]


def serve_env(home: Path) -> dict[str, str]:
    """This process's environment without its ``KFS_*`` settings, ``KFS_HOME`` at ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KFS_")}
    env["KFS_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_ready(
    proc: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    log_tail: Callable[[], str],
    timeout: float = READY_TIMEOUT_S,
) -> None:
    """Return once ``ready()`` (/readyz answers 200); raise if ``proc`` exits or time runs out.

    ``ready`` may raise while the daemon is still starting (connection refused):
    that counts as not ready yet.
    """

    def ready_or_gone() -> bool:
        return proc.poll() is not None or ready()

    try:
        wait_for(ready_or_gone, timeout=timeout, what="kfs serve /readyz")
    except TimeoutError:
        raise TimeoutError(
            f"kfs serve never became ready in {timeout:g} s:\n{log_tail()}"
        ) from None
    if proc.poll() is not None:
        raise RuntimeError(f"kfs serve exited early:\n{log_tail()}")


@dataclass
class Daemon:
    """One `kfs serve` process and how to reach it."""

    kafka_port: int
    metrics_port: int
    data_dir: Path
    store_url: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    factory: DaemonFactory | None = field(default=None, repr=False)
    #: Where it runs: the root network namespace (None), or a namespace of `testkit.netns`.
    netns: NetNamespace | None = None

    @property
    def host(self) -> str:
        """The address its Kafka listener is on (and advertises): clients connect here."""
        return self.netns.inside("clients") if self.netns else "127.0.0.1"

    @property
    def metrics_host(self) -> str:
        """The address its /metrics and /readyz are on."""
        return self.netns.inside("observer") if self.netns else "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.metrics_host}:{self.metrics_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Daemon:
        assert not self.alive()
        with open(self.log_path, "ab") as out:
            out.write(b"\n--- start ---\n")
            command = serve_command(self.args)
            self.proc = subprocess.Popen(
                self.netns.command(command) if self.netns else command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        assert self.proc is not None
        wait_ready(
            self.proc,
            lambda: self.http("/readyz")[0] == 200,
            lambda: self.log()[-4000:],
            READY_TIMEOUT_S,
        )

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then wait; the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"kfs serve ignored SIGTERM:\n{self.log()[-4000:]}") from None

    def kill(self) -> None:
        """Kill the daemon outright (SIGKILL, kill -9) and reap it."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def metric(self, name: str) -> float:
        """The value of one unlabelled metric on /metrics (0 when absent)."""
        status, body = self.http("/metrics")
        assert status == 200, body
        return parse_metrics(body).get(name, 0.0)

    def pause(self) -> None:
        """Stop the process where it stands (SIGSTOP), as a long GC pause or a frozen VM would."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused process run again (SIGCONT)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> Daemon:
        if self.alive():
            assert self.stop() == 0, self.log()[-4000:]
        return self.start()


def add_user(daemon: Daemon, name: str, password: str, *mechanisms: str) -> None:
    """``kfs users add`` on the daemon's store (namespace ``test``), password on standard input."""
    flags = [f for m in mechanisms for f in ("--mechanism", m)]
    subprocess.run(
        [sys.executable, "-m", "kfs_core.cli", "--store-url", daemon.store_url,
         "--namespace", "test", "users", "add", name, *flags],
        input=password + "\n", text=True, check=True, capture_output=True,
    )  # fmt: skip


def node_id_of(daemon: Daemon) -> int:
    """The ``--node-id`` a daemon was started with (0, the default, if none)."""
    given = [i for i, arg in enumerate(daemon.args) if arg == "--node-id"]
    return int(daemon.args[given[-1] + 1]) if given else 0  # the last one counts


class DaemonFactory:
    """Starts daemons under a directory and guarantees none outlives `close`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.daemons: list[Daemon] = []

    def start(
        self,
        *,
        store_url: str | None = None,
        s3_endpoint_url: str | None = None,
        extra_args: Sequence[str] = (),
        name: str | None = None,
        netns: NetNamespace | None = None,
    ) -> Daemon:
        """Start one daemon and wait until it is ready.

        With ``netns`` it runs in that network namespace (`testkit.netns`),
        its Kafka listener on the ``clients`` path's inside address (which
        Metadata advertises) and its /metrics on the ``observer`` path's, so
        that the test can cut either without losing the other; it reaches S3
        at ``s3_endpoint_url``, which must then be on the ``store`` path's
        outside address.
        """
        home = self.root / (name or f"kfs-{len(self.daemons)}")
        home.mkdir(parents=True, exist_ok=True)
        data_dir = home / "data"
        store_url = store_url or (home / "store").as_uri()
        running = [d for d in self.daemons if d.store_url == store_url and d.alive()]
        if running and "--node-id" not in extra_args:
            # Daemons side by side on one namespace need node ids of their own.
            extra_args = [*extra_args, "--node-id", str(max(map(node_id_of, running)) + 1)]
        kafka_port, metrics_port = free_port(), free_port()
        host = netns.inside("clients") if netns else "127.0.0.1"
        metrics_host = netns.inside("observer") if netns else "127.0.0.1"
        args = [
            "--listen", f"{host}:{kafka_port}",
            *(["--advertised-host", host] if netns else []),
            "--metrics-listen", f"{metrics_host}:{metrics_port}",
            "--data-dir", str(data_dir),
            "--store-url", store_url,
            "--namespace", "test",
            *(["--s3-endpoint-url", s3_endpoint_url] if s3_endpoint_url else []),
            *extra_args,
        ]  # fmt: skip
        daemon = Daemon(
            kafka_port=kafka_port,
            metrics_port=metrics_port,
            data_dir=data_dir,
            store_url=store_url,
            args=args,
            env=serve_env(home),
            log_path=home / "kfs-serve.log",
            factory=self,
            netns=netns,
        )
        self.daemons.append(daemon)
        return daemon.start()

    def start_cluster(
        self,
        count: int,
        *,
        store_url: str,
        s3_endpoint_url: str | None = None,
        durability: str = "store",
        heartbeat_ms: int = 200,
        session_timeout_ms: int = 2000,
        extra_args: Sequence[str] = (),
        first_node_id: int = 1,
        netns: NetNamespace | None = None,
    ) -> list[Daemon]:
        """``count`` daemons on one store and namespace, node ids from ``first_node_id``.

        Each has its own data directory and ports; heartbeats and the
        session timeout are short, so failovers take seconds.  ``netns``:
        all of them run in that network namespace (see `start`).
        """
        daemons = self._start_nodes(
            count, store_url, s3_endpoint_url, durability, heartbeat_ms, session_timeout_ms,
            extra_args, first_node_id, netns,
        )  # fmt: skip
        wait_for(
            lambda: all(d.metric("kfs_cluster_live_nodes") >= count for d in daemons),
            timeout=READY_TIMEOUT_S,
            what=f"every daemon seeing {count} live daemons",
        )
        return daemons

    def _start_nodes(
        self,
        count: int,
        store_url: str,
        s3_endpoint_url: str | None,
        durability: str,
        heartbeat_ms: int,
        session_timeout_ms: int,
        extra_args: Sequence[str],
        first_node_id: int,
        netns: NetNamespace | None,
    ) -> list[Daemon]:
        timing = [
            "--durability", durability,
            "--broker-heartbeat-interval-ms", str(heartbeat_ms),
            "--broker-session-timeout-ms", str(session_timeout_ms),
        ]  # fmt: skip
        return [
            self.start(
                store_url=store_url,
                s3_endpoint_url=s3_endpoint_url,
                name=f"node-{node_id}",
                extra_args=["--node-id", str(node_id), *timing, *extra_args],
                netns=netns,
            )
            for node_id in range(first_node_id, first_node_id + count)
        ]

    def close(self) -> None:
        for daemon in self.daemons:
            if daemon.alive():
                assert daemon.proc is not None
                daemon.proc.send_signal(signal.SIGCONT)  # a paused one must not linger
                daemon.proc.kill()
                daemon.proc.wait(10)
