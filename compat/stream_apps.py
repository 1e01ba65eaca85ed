"""Exactly-once stream-processing apps on a real `kfs serve`: Quix Streams and faust-streaming.

Both apps (``compat/apps/quix_count.py``, ``compat/apps/faust_count.py``)
keep a running count per key in a state store with a changelog topic and
write each new count to an output topic, under their framework's
exactly-once guarantee (transactions, offsets sent with them, a
``read_committed`` read of the changelog on recovery).  They run in a
virtualenv of their own (`install`, from ``compat/apps/requirements.txt``):
quixstreams pins an older confluent-kafka than the project's.

`run_stream_apps` drives each app through `STEPS`, one `Outcome` each, in
the suite ``stream apps``; a failed step fails the ones after it:

- ``<app>: each count once``: ``BATCH`` keyed records in, the app started:
  a ``read_committed`` read of the output holds, for every key, the counts
  1, 2, ... up to the records sent with that key, each once, with the
  input's ``n`` in the input's order.
- ``<app>: app kill -9, state wiped, restored from the changelog``: another
  batch; once the app has written part of it, ``kill -9`` of the app, its
  state directory deleted, the app started again: the same check over
  every record so far.  A record counted twice, or a count restored from
  an aborted transaction, would show as a repeated or skipped count.
- ``<app>: daemon kill -9 under the app``: another batch; once part of it
  is through, ``kill -9`` of the daemon, restarted on its WAL; the app
  goes on, or is started again if the outage ended it (as its supervisor
  would): the same check.

Without ``daemon_kill`` the last step is skipped.  Names carry a per-run id,
so runs can repeat against one daemon.  Each app's log is
``<app>-<n>.log`` under the scratch directory.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.suites import Outcome, SuiteResult
from testkit.waiting import wait_for

__all__ = ["APPS", "STEPS", "SUITE", "install", "run_stream_apps", "sequence_problems"]

SUITE = "stream apps"
REPO = Path(__file__).resolve().parent.parent
APPS_DIR = Path(__file__).resolve().parent / "apps"
REQUIREMENTS = APPS_DIR / "requirements.txt"
BUILD_DIR = REPO / ".build"
INSTALLED_STAMP = "installed.stamp"
INSTALL_TIMEOUT_S = 900

#: The apps, by the name their steps carry, and their programs.
APPS = {"quix": APPS_DIR / "quix_count.py", "faust": APPS_DIR / "faust_count.py"}
STEP_KINDS = (
    "each count once",
    "app kill -9, state wiped, restored from the changelog",
    "daemon kill -9 under the app",
)
STEPS = tuple(f"{app}: {kind}" for app in APPS for kind in STEP_KINDS)
PARTITIONS = 2
KEYS = tuple(f"key-{k}" for k in range(8))
BATCH = 3000
#: How long a batch may take to come through; an app's start includes a group rebalance.
FLOW_TIMEOUT_S = 90.0


def install(cache: Path = BUILD_DIR) -> Path:
    """The apps' Python: ``cache/stream-apps/venv/bin/python``, installed unless a stamp is newer.

    `RuntimeError` with pip's output if the install fails.
    """
    venv = cache / "stream-apps" / "venv"
    python = venv / "bin" / "python"
    stamp = venv / INSTALLED_STAMP
    if (
        python.is_file()
        and stamp.is_file()
        and stamp.stat().st_mtime > REQUIREMENTS.stat().st_mtime
    ):
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-r", str(REQUIREMENTS)],
        capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT_S,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"pip install -r {REQUIREMENTS} failed:\n{done.stdout}{done.stderr}")
    stamp.write_text("installed\n")
    return python


def sequence_problems(
    sent: dict[str, list[int]], written: dict[str, list[tuple[int, int]]]
) -> list[str]:
    """What is wrong with the output: per key, counts 1..n each once, with the input's ``n``s.

    ``sent``: each key's input ``n`` values in order; ``written``: each key's
    output ``(count, n)`` pairs in order.  Empty when exactly once.
    """
    problems = []
    for key in sorted(set(sent) | set(written)):
        expected = [(i + 1, n) for i, n in enumerate(sent.get(key, []))]
        got = written.get(key, [])
        if got != expected:
            first = next(
                (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
                min(len(expected), len(got)),
            )
            problems.append(
                f"{key}: {len(got)} counts for {len(expected)} records, first difference at "
                f"#{first}: expected {expected[first : first + 2]}, got {got[first : first + 2]}"
            )
    return problems


@dataclass
class _Output:
    """A ``read_committed`` reader of the output topic, from its start, kept up to date."""

    bootstrap: str
    topic: str
    written: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _consumer: Any = None

    def __post_init__(self) -> None:
        import confluent_kafka

        self._consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"{self.topic}-reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        self._consumer.assign(
            [confluent_kafka.TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)]
        )

    def count(self) -> int:
        return sum(len(v) for v in self.written.values())

    def read(self) -> int:
        """Take in what has been committed since; how many records there are."""
        for message in self._consumer.consume(1000, timeout=0.2):
            if message.error() is not None:
                continue
            value = json.loads(message.value())
            key = message.key().decode()
            self.written.setdefault(key, []).append((int(value["count"]), int(value["n"])))
        return self.count()

    def close(self) -> None:
        self._consumer.close()


@dataclass
class _AppRun:
    """One app against the daemon: its topics, the records sent, its process and state."""

    app: str
    python: Path
    bootstrap: str
    scratch: Path
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    sent: dict[str, list[int]] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    output: _Output | None = None

    @property
    def name(self) -> str:
        return f"kfs-{self.app}-{self.run_id}"

    @property
    def state_dir(self) -> Path:
        return self.scratch / f"{self.app}-state"

    def create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics(
            [NewTopic(f"{self.name}-{t}", PARTITIONS, 1) for t in ("input", "output")]
        )
        for future in futures.values():
            future.result(30)

    def send(self, count: int) -> None:
        """``count`` more records, keys in turn, values ``{"n": ...}`` numbered on."""
        import confluent_kafka

        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                # Kafka's Java partitioner, which faust's output and changelog use too: a key's
                # input, state and output partitions are one, so one transaction holds them.
                "partitioner": "murmur2_random",
            }
        )
        start = sum(len(v) for v in self.sent.values())
        for n in range(start, start + count):
            key = KEYS[n % len(KEYS)]
            producer.produce(f"{self.name}-input", json.dumps({"n": n}).encode(), key)
            self.sent.setdefault(key, []).append(n)
            producer.poll(0)
        if producer.flush(60) != 0:
            raise AssertionError(f"{producer.flush(0)} input record(s) not acknowledged")

    def start(self) -> None:
        log_path = self.scratch / f"{self.app}-{len(self.processes) + 1}.log"
        command = [
            str(self.python),
            str(APPS[self.app]),
            self.bootstrap,
            f"{self.name}-app",
            f"{self.name}-input",
            f"{self.name}-output",
            str(self.state_dir),
        ]
        with log_path.open("wb") as log:
            self.processes.append(
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.scratch)
            )

    def running(self) -> bool:
        return bool(self.processes) and self.processes[-1].poll() is None

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(10)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)

    def reader(self) -> _Output:
        if self.output is None:
            self.output = _Output(self.bootstrap, f"{self.name}-output")
        return self.output

    def wait_through(self, *, restart_if_gone: bool = False) -> str:
        """Wait until every record sent has its count; the check; a note for the outcome."""
        total = sum(len(v) for v in self.sent.values())
        output = self.reader()

        def through() -> bool:
            if restart_if_gone and not self.running():
                self.start()
            elif not self.running():
                code = self.processes[-1].returncode
                raise AssertionError(f"the app exited with {code}; see {self.app}-*.log")
            return output.read() >= total

        wait_for(through, timeout=FLOW_TIMEOUT_S, what=f"{total} counts from {self.app}")
        problems = sequence_problems(self.sent, output.written)
        if problems:
            raise AssertionError("; ".join(problems[:3]))
        return f"{total} counts, each once"

    def progress_beyond(self, done: int) -> None:
        """Wait until the output holds more than ``done`` counts."""
        output = self.reader()
        wait_for(lambda: output.read() > done, timeout=FLOW_TIMEOUT_S, what="the app's progress")


def _steps(run: _AppRun, daemon_kill: Callable[[], None] | None) -> list[Callable[[], str]]:
    def each_count_once() -> str:
        run.create_topics()
        run.send(BATCH)
        run.start()
        return run.wait_through()

    def app_killed() -> str:
        before = run.reader().read()
        run.send(BATCH)
        run.progress_beyond(before)
        run.kill()
        shutil.rmtree(run.state_dir, ignore_errors=True)
        run.start()
        return run.wait_through()

    def daemon_killed() -> str:
        assert daemon_kill is not None
        before = run.reader().read()
        run.send(BATCH)
        run.progress_beyond(before)
        daemon_kill()
        return run.wait_through(restart_if_gone=True)

    return [each_count_once, app_killed, daemon_killed]


def run_stream_apps(
    bootstrap: str,
    scratch: Path,
    daemon_kill: Callable[[], None] | None,
    *,
    apps: Sequence[str] = tuple(APPS),
    python: Path | None = None,
) -> SuiteResult:
    """Each app's steps of `STEPS` against ``bootstrap``; logs and state under ``scratch``.

    ``daemon_kill`` kills the daemon with SIGKILL and starts it again on
    the same address and data; without it the daemon steps are skipped.
    ``python``: the apps' interpreter (default: `install`; a failed install
    fails every step).  A passed step's detail is how long it took.
    """
    result = SuiteResult(SUITE)
    started = time.monotonic()
    scratch.mkdir(parents=True, exist_ok=True)
    names = [s for s in STEPS if s.split(":")[0] in apps]
    try:
        interpreter = python or install()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        result.outcomes = [Outcome(step, "failed", f"install: {exc}") for step in names]
        result.seconds = time.monotonic() - started
        return result
    for app in apps:
        run = _AppRun(app, interpreter, bootstrap, scratch)
        broken = ""
        try:
            for kind, step in zip(STEP_KINDS, _steps(run, daemon_kill), strict=True):
                name = f"{app}: {kind}"
                if broken:
                    result.outcomes.append(Outcome(name, "failed", f"not run: {broken!r} failed"))
                    continue
                if step.__name__ == "daemon_killed" and daemon_kill is None:
                    result.outcomes.append(Outcome(name, "skipped", "no daemon to kill"))
                    continue
                step_started = time.monotonic()
                try:
                    note = step()
                except Exception as exc:  # noqa: BLE001 - a step's failure is its outcome
                    result.outcomes.append(Outcome(name, "failed", f"{type(exc).__name__}: {exc}"))
                    broken = name
                else:
                    took = time.monotonic() - step_started
                    result.outcomes.append(Outcome(name, "passed", f"{took:.1f} s; {note}"))
        finally:
            run.stop()
            if run.output is not None:
                run.output.close()
    result.seconds = time.monotonic() - started
    return result
