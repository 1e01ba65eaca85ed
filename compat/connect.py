"""Kafka Connect's distributed worker against a real `kfs serve`: a file through KFS and back.

``compat/connect/pom.xml`` pins Kafka Connect (``connect-runtime``,
``connect-file``, ``connect-json``) at the release ``compat/kafka/pom.xml``
pins (the two must agree: `check_pinned_release`); `install` copies its
jars from Maven Central into ``.build/connect/lib`` once, again only when
the pom is newer than the last install.  `ConnectWorker` runs one
distributed worker (``org.apache.kafka.connect.cli.ConnectDistributed``)
on a properties file it writes (`worker_properties`): its config, offset
and status topics live on KFS, which the worker creates compacted and
shares with other workers of its group through KFS's group coordinator.
The FileStream connectors are on the classpath (no ``plugin.path``); the
worker's REST API on a free loopback port is how connectors are created
and their status read.

`run_connect` drives one scenario against a bootstrap address, one
`Outcome` per step of the suite ``kafka connect`` (`STEPS`); a failed step
fails the steps after it, since each builds on the one before (all but the
membership check, which only looks):

- ``worker starts, internal topics compacted``: the worker answers
  ``/health``, and the three internal topics it made are on KFS with
  ``cleanup.policy=compact`` (describeConfigs) and their partition counts.
- ``file source -> topic``: the FileStreamSource connector and its task
  run, and every line of the source file is one record of a one-partition
  topic, in order, nothing twice.
- ``topic -> file sink (identical file)``: the FileStreamSink connector
  writes the topic to a file identical to the source, and its consumer
  group's committed offset reaches the topic's end.
- ``survives a KFS restart``: the daemon restarts under the running worker;
  every line appended afterwards reaches the sink in order (a line the sink
  wrote but could not commit may come twice: at least once is what a sink
  promises), the topic holds each line once, the worker and the sink's
  consumer are back in their groups, and both connectors and their tasks
  are RUNNING.
- ``worker keeps its group membership across a KFS restart``: the worker's
  member id is the one it had before, as a Kafka broker keeps it (its
  coordinator reloads the group's members from ``__consumer_offsets``).
- ``worker restart resumes from committed offsets``: the worker stops,
  lines are appended, a new worker of the same group starts: it finds the
  connectors in the config topic, the source resumes from its offset in
  the offset topic and the sink from its group's committed offset, so no
  line is lost or written twice (the topic's end offset is the number of
  lines; the sink's new lines are exactly the appended ones).

Without ``daemon_restart`` the two restart steps are skipped.  Every name
(topics, the worker group) carries a per-run id, so runs can repeat
against one daemon.  Each worker's log is ``connect-worker-<n>.log`` in
the scratch directory; a failed step names it and quotes its last errors.
Apache Kafka 4.3.1 itself (one KRaft node from the tools' jars, restarted
the same way) passes every step.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.kafka_tools import KAFKA_POM, kafka_version
from compat.suites import Outcome, SuiteResult
from testkit.ports import free_port
from testkit.raw_client import RawClient
from testkit.waiting import wait_for

__all__ = [
    "CONNECT_POM",
    "MAIN_CLASS",
    "STEPS",
    "SUITE",
    "ConnectError",
    "ConnectScenario",
    "ConnectWorker",
    "check_pinned_release",
    "describe_difference",
    "install",
    "make_lines",
    "run_connect",
    "worker_properties",
]

REPO = Path(__file__).resolve().parent.parent
CONNECT_DIR = REPO / "compat" / "connect"
CONNECT_POM = CONNECT_DIR / "pom.xml"
LOG4J_CONFIG = CONNECT_DIR / "log4j2.properties"
BUILD_DIR = REPO / ".build"
INSTALLED_STAMP = ".installed"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"
SUITE = "kafka connect"

INSTALL_TIMEOUT_S = 900.0
#: From ``java`` to ``/health`` answering 200: the worker joined its group and read its topics.
START_TIMEOUT_S = 60.0
#: For records to go through (file -> topic -> file) and connectors to reach RUNNING.
FLOW_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 30.0
#: Statuses the REST API answers while the worker starts or its group rebalances: ask again.
RETRY_STATUSES = frozenset({404, 409, 503})

OFFSET_PARTITIONS = 5
STATUS_PARTITIONS = 3
#: How often the worker commits source offsets and sink consumer offsets (default 60 s).
OFFSET_FLUSH_INTERVAL_MS = 500
#: How long lost connectors and tasks wait for their worker to come back (default 5 minutes).
LOST_TASKS_DELAY_MS = 2000

STEPS = (
    "worker starts, internal topics compacted",
    "file source -> topic",
    "topic -> file sink (identical file)",
    "survives a KFS restart",
    "worker keeps its group membership across a KFS restart",
    "worker restart resumes from committed offsets",
)
#: The steps that need ``daemon_restart``.
RESTART_STEPS = frozenset(STEPS[3:5])
#: A step whose failure leaves the next ones something to check (the others stop the run).
JUDGED_ALONE = frozenset({STEPS[4]})

INITIAL_LINES = 200
APPENDED_LINES = 50

#: Line bodies the source file cycles through: what a text file holds, not only words.  ASCII
#: only: FileStreamSourceTask counts its position in UTF-16 chars but resumes by skipping that
#: many bytes, so a restart after multi-byte characters re-reads part of the file (Kafka's bug).
LINE_BODIES = (
    "plain ascii text",
    "tabs\tand  double  spaces, trailing space ",
    "punctuation: 'single' \"double\" back\\slash ~!@#$%^&*()_+`-=[]{}|;:,./<>?",
    '{"json": [1, 2.5, null], "nested": {"k": "v"}}',
    "a long line " + "x" * 3000,
    "",
)


class ConnectError(AssertionError):
    """The worker did not start, answered its REST API with an error, or a step's check failed."""


def check_pinned_release(pom: Path = CONNECT_POM) -> str:
    """The Kafka release Connect is pinned at; `ValueError` unless the tools' pin."""
    version = kafka_version(pom)
    tools = kafka_version(KAFKA_POM)
    if version != tools:
        raise ValueError(f"{pom} pins Kafka {version}, {KAFKA_POM} pins {tools}: make them agree")
    return version


def install(cache: Path = BUILD_DIR) -> Path:
    """``cache/connect/lib``: Connect's jars, copied from Maven Central unless a stamp is newer than the pom.

    Maven's dependency plugin copies every runtime dependency of the pom; a
    stamp written after a successful copy marks the directory whole.
    `RuntimeError` if Maven is missing or fails, with its output.
    """
    version = check_pinned_release()
    dest = cache / "connect"
    lib, stamp = dest / "lib", dest / INSTALLED_STAMP
    if stamp.is_file() and stamp.stat().st_mtime > CONNECT_POM.stat().st_mtime and lib.is_dir():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            "Kafka Connect's jars need Maven: `mvn` is not on PATH (apt-get install maven)"
        )
    stamp.unlink(missing_ok=True)
    shutil.rmtree(lib, ignore_errors=True)
    dest.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(CONNECT_POM),
         "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
         f"-DoutputDirectory={lib.resolve()}", "-DincludeScope=runtime"],
        capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT_S,
    )  # fmt: skip
    runtime = lib / f"connect-runtime-{version}.jar"
    if done.returncode != 0 or not runtime.is_file():
        raise RuntimeError(
            f"copying the jars of {CONNECT_POM} failed (mvn exited {done.returncode}):\n"
            f"{(done.stdout + done.stderr).strip()}"
        )
    stamp.write_text(f"kafka connect {version}\n")
    return lib


def worker_properties(bootstrap: str, group_id: str, port: int) -> dict[str, str]:
    """A distributed worker's configuration: its group and internal topics on ``bootstrap``."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "config.storage.topic": f"{group_id}-configs",
        "config.storage.replication.factor": "1",  # the config topic has one partition, always
        "offset.storage.topic": f"{group_id}-offsets",
        "offset.storage.replication.factor": "1",
        "offset.storage.partitions": str(OFFSET_PARTITIONS),
        "status.storage.topic": f"{group_id}-status",
        "status.storage.replication.factor": "1",
        "status.storage.partitions": str(STATUS_PARTITIONS),
        # The FileStream connectors read and write text lines: strings in and out, no schemas.
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "listeners": f"http://127.0.0.1:{port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(port),
        "offset.flush.interval.ms": str(OFFSET_FLUSH_INTERVAL_MS),
        # Every plugin in use ships a ServiceLoader manifest: skip the classpath scan.
        "plugin.discovery": "service_load",
        # A worker whose coordinator is away for over 3 s revokes its own tasks; if it then
        # has to rejoin under a new member id, its connectors and tasks count as lost and wait
        # this long before they are assigned again: 5 minutes by default, longer than a
        # step's deadline.
        "scheduled.rebalance.max.delay.ms": str(LOST_TASKS_DELAY_MS),
    }


@dataclass
class ConnectWorker:
    """One distributed Connect worker process, its properties file and log under ``workdir``."""

    bootstrap: str
    group_id: str
    lib: Path
    workdir: Path
    name: str = "connect-worker"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def properties_path(self) -> Path:
        return self.workdir / f"{self.name}.properties"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def errors(self, lines: int = 3) -> str:
        """The last ``lines`` ERROR lines of the log, joined, for a failure's message."""
        found = [line.strip() for line in self.log().splitlines() if "] ERROR " in line]
        return " | ".join(found[-lines:]) or "(no ERROR lines)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT_S) -> ConnectWorker:
        """Write the properties, start the JVM, and wait until ``/health`` answers 200.

        A worker that is not healthy in ``timeout`` is killed and `ConnectError` raised.
        """
        assert not self.alive()
        java = shutil.which("java")
        if java is None:
            raise ConnectError("Kafka Connect needs Java 17: `java` is not on PATH")
        self.port = free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = worker_properties(self.bootstrap, self.group_id, self.port)
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        with open(self.log_path, "ab") as out:
            out.write(f"\n--- start: {self.url} ---\n".encode())
            self.proc = subprocess.Popen(
                [java, "-Xms128m", "-Xmx512m", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
                 "-cp", f"{self.lib}/*", MAIN_CLASS, str(self.properties_path)],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()  # a worker that never came up must not linger
            raise
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until ``/health`` says the worker is up (KIP-1017: 503 while it starts)."""

        def healthy_or_gone() -> bool:
            return not self.alive() or self.request("GET", "/health")[0] == 200

        try:
            wait_for(healthy_or_gone, timeout=timeout, what=f"{self.name} /health")
        except TimeoutError:
            raise ConnectError(
                f"{self.name} not healthy in {timeout:g} s ({self.log_path}): {self.errors()}"
            ) from None
        if not self.alive():
            raise ConnectError(f"{self.name} exited early ({self.log_path}): {self.errors()}")

    def request(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        """One REST call: the HTTP status and the JSON answer (text if it is not JSON)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return int(response.status), _json_or_text(response.read())
        except urllib.error.HTTPError as error:
            return error.code, _json_or_text(error.read())

    def create_connector(
        self, name: str, config: Mapping[str, str], timeout: float = FLOW_TIMEOUT_S
    ) -> Any:
        """``PUT /connectors/<name>/config`` (create or update), again while the group rebalances."""
        answer: list[tuple[int, Any]] = []

        def answered() -> bool:
            answer[:] = [self.request("PUT", f"/connectors/{name}/config", dict(config))]
            return answer[0][0] not in RETRY_STATUSES

        try:
            wait_for(answered, timeout=timeout, what=f"PUT /connectors/{name}/config")
        except TimeoutError as exc:
            raise ConnectError(f"{exc}; last answer {answer[-1:]}; {self.errors()}") from None
        status, body = answer[0]
        if status not in (200, 201):
            raise ConnectError(f"PUT /connectors/{name}/config: {status} {body}")
        return body

    def status(self, name: str) -> dict[str, Any]:
        """``GET /connectors/<name>/status``: the connector's and each task's state."""
        status, body = self.request("GET", f"/connectors/{name}/status")
        if status != 200 or not isinstance(body, dict):
            raise ConnectError(f"GET /connectors/{name}/status: {status} {body}")
        return body

    def wait_running(self, names: Sequence[str], timeout: float = FLOW_TIMEOUT_S) -> None:
        """Until every connector named, and each of its tasks (at least one), is RUNNING."""
        last: dict[str, Any] = {}

        def all_running() -> bool:
            for name in names:
                last[name] = self.status(name)
            return all(_running(last[name]) for name in names)

        try:
            wait_for(all_running, timeout=timeout, what=f"{', '.join(names)} RUNNING")
        except TimeoutError as exc:
            raise ConnectError(
                f"{exc}; last status {_brief_status(last)}; {self.errors()}"
            ) from None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (the worker stops its tasks, commits offsets, leaves its group); the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ConnectError(f"{self.name} ignored SIGTERM for {timeout:g} s") from None

    def kill(self) -> None:
        """SIGKILL, if still running, and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _running(status: Mapping[str, Any]) -> bool:
    tasks = status.get("tasks") or []
    return bool(
        status.get("connector", {}).get("state") == "RUNNING"
        and tasks
        and all(t.get("state") == "RUNNING" for t in tasks)
    )


def _brief_status(statuses: Mapping[str, Mapping[str, Any]]) -> str:
    """``name: connector STATE, tasks [STATE, ...]`` and the first task trace's first line."""
    parts = []
    for name, status in statuses.items():
        tasks = status.get("tasks") or []
        trace = next((t["trace"] for t in tasks if t.get("trace")), "")
        trace = trace or status.get("connector", {}).get("trace", "")
        parts.append(
            f"{name}: connector {status.get('connector', {}).get('state')}, "
            f"tasks {[t.get('state') for t in tasks]}"
            + (f" ({trace.splitlines()[0]})" if trace else "")
        )
    return "; ".join(parts) or "(none)"


# --- the scenario -----------------------------------------------------------------------


def make_lines(start: int, count: int, *, empty_lines: bool = False) -> list[str]:
    """Lines ``start`` to ``start + count - 1`` of the source file, without their newlines.

    Each has its number, so a lost or doubled line is easy to name;
    ``empty_lines``: every sixth is empty instead (an empty record value).
    """
    lines = []
    for number in range(start, start + count):
        body = LINE_BODIES[number % len(LINE_BODIES)]
        if body:
            lines.append(f"{number:06d} {body}")
        else:
            lines.append("" if empty_lines else f"{number:06d}")
    return lines


def describe_difference(expected: Sequence[str], got: Sequence[str]) -> str:
    """How ``got`` differs from ``expected``: counts, lines twice or missing, the first mismatch."""
    counts = Counter(got)
    twice = [line[:6] for line, n in counts.items() if line and n > 1]
    missing = [line[:6] for line in expected if line not in counts]
    first = next(
        (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    return (
        f"{len(got)} lines, expected {len(expected)}; {len(twice)} written twice {twice[:5]}; "
        f"{len(missing)} missing {missing[:5]}; first difference at line {first}"
    )


@dataclass
class ConnectScenario:
    """The state `run_connect`'s steps share: names, files, the current worker, an admin client."""

    bootstrap: str
    scratch: Path
    lib: Path
    daemon_restart: Callable[[], None] | None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    workers: list[ConnectWorker] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the source file's, in order
    #: Each group's member ids before and after the KFS restart, and the lines the sink re-wrote.
    members_before: dict[str, list[str]] = field(default_factory=dict)
    members_after: dict[str, list[str]] = field(default_factory=dict)
    rewritten: int = 0
    _admin: Any = field(default=None, repr=False)

    @property
    def group_id(self) -> str:
        return f"kfs-connect-{self.run_id}"

    @property
    def topic(self) -> str:
        return f"kfs-connect-{self.run_id}-lines"

    @property
    def source_name(self) -> str:
        return f"file-source-{self.run_id}"

    @property
    def sink_name(self) -> str:
        return f"file-sink-{self.run_id}"

    @property
    def source_file(self) -> Path:
        return self.scratch / f"connect-source-{self.run_id}.txt"

    @property
    def sink_file(self) -> Path:
        return self.scratch / f"connect-sink-{self.run_id}.txt"

    @property
    def worker(self) -> ConnectWorker:
        return self.workers[-1]

    def start_worker(self) -> ConnectWorker:
        worker = ConnectWorker(
            self.bootstrap,
            self.group_id,
            self.lib,
            self.scratch,
            name=f"connect-worker-{len(self.workers) + 1}",
        )
        self.workers.append(worker)
        return worker.start()

    def kill_workers(self) -> None:
        for worker in self.workers:
            worker.kill()

    def append(self, count: int, *, empty_lines: bool = False) -> list[str]:
        """``count`` more lines at the end of the source file, in one write; those lines."""
        new = make_lines(len(self.lines), count, empty_lines=empty_lines)
        with self.source_file.open("a", encoding="utf-8") as out:
            out.write("".join(f"{line}\n" for line in new))
        self.lines += new
        return new

    def client_config(self) -> dict[str, Any]:
        """The scenario's librdkafka clients: errors only in their stderr log, no re-bootstrap.

        While the daemon restarts no broker answers, and librdkafka
        re-bootstraps (KIP-899): it decommissions the broker it had cached
        as the group's coordinator, and an admin client's coordinator
        requests (list_consumer_group_offsets) then hang for good
        (confluentinc/librdkafka#5511).  Without re-bootstrap the same
        broker handle reconnects.
        """
        return {
            "bootstrap.servers": self.bootstrap,
            "log_level": 3,
            "metadata.recovery.strategy": "none",
        }

    def admin(self) -> Any:
        """The scenario's one admin client (its futures need it alive until they resolve)."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self.client_config())
        return self._admin

    def end_offset(self) -> int:
        """The data topic's high watermark (one partition)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self.client_config(), "group.id": f"{self.group_id}-probe"})
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=10)
            return int(high)
        finally:
            consumer.close()

    def sink_committed(self) -> int:
        """The offset the sink connector's consumer group (``connect-<name>``) committed."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        group = self.sink_group
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(self.topic, 0)])
        answer = self.admin().list_consumer_group_offsets([request])[group].result(timeout=10)
        return int(answer.topic_partitions[0].offset)

    @property
    def sink_group(self) -> str:
        """The sink connector's consumer group (Connect names it ``connect-<connector>``)."""
        return f"connect-{self.sink_name}"

    def group_members(self, group_id: str) -> tuple[str, list[str]]:
        """A group's state and member ids, from its coordinator (DescribeGroups v5).

        A raw request: librdkafka's describe_consumer_groups refuses a group
        of protocol type ``connect`` (the workers'), and its list_groups is
        deprecated.
        """
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's protocol classes
            from kafka.protocol.admin import DescribeGroupsRequest
            from kafka.protocol.metadata import FindCoordinatorRequest

        with RawClient(self.bootstrap) as client:
            found = client.request(FindCoordinatorRequest(version=2, key=group_id, key_type=0))
        if found.error_code != 0:
            raise ConnectError(f"FindCoordinator {group_id}: error {found.error_code}")
        with RawClient(f"{found.host}:{found.port}") as client:
            described = client.request(DescribeGroupsRequest(version=5, groups=[group_id]))
        (group,) = described.groups
        return str(group.group_state), sorted(str(m.member_id) for m in group.members)

    def wait_groups_stable(self) -> dict[str, list[str]]:
        """Until the worker group and the sink's group are Stable with one member each; their ids."""
        members: dict[str, list[str]] = {}

        def stable() -> bool:
            for group in (self.group_id, self.sink_group):
                state, members[group] = self.group_members(group)
                if state != "Stable" or len(members[group]) != 1:
                    return False
            return True

        try:
            wait_for(stable, timeout=FLOW_TIMEOUT_S, what="both groups Stable with one member")
        except TimeoutError as exc:
            raise ConnectError(f"{exc}: {members}; {self.worker.errors()}") from None
        return members

    def sink_lines(self) -> list[str]:
        """The sink file's complete lines (a line still being written is not one yet)."""
        if not self.sink_file.exists():
            return []
        return self.sink_file.read_text(encoding="utf-8", errors="replace").split("\n")[:-1]

    def wait_sink_committed(self) -> None:
        """Until the sink's group committed the topic's end, which must be the number of lines.

        The source wrote each line once; after this the sink re-delivers nothing.
        """
        try:
            wait_for(
                lambda: self.sink_committed() >= len(self.lines),
                timeout=FLOW_TIMEOUT_S,
                what=f"the sink's group committing offset {len(self.lines)}",
            )
        except TimeoutError as exc:
            raise ConnectError(f"{exc}; {self.worker.errors()}") from None
        end, committed = self.end_offset(), self.sink_committed()
        if end != len(self.lines) or committed != end:
            raise ConnectError(
                f"topic end offset {end}, sink committed {committed}, {len(self.lines)} lines: "
                "the topic holds a line twice"
            )

    def wait_sink_tail(self, baseline: int, expected: Sequence[str]) -> list[str]:
        """The sink's lines after ``baseline`` once every line of ``expected`` is among them.

        Lines may arrive twice (a sink re-delivers after a failed commit) but
        none may be missing, foreign or out of order; then until the sink
        committed the topic's end, after which the tail is final.
        """
        try:
            wait_for(
                lambda: set(expected) <= set(self.sink_lines()[baseline:]),
                timeout=FLOW_TIMEOUT_S,
                what=f"{len(expected)} more lines in the sink file",
            )
        except TimeoutError as exc:
            got = self.sink_lines()[baseline:]
            raise ConnectError(
                f"{exc}: {describe_difference(expected, got)}; {self.worker.errors()}"
            ) from None
        self.wait_sink_committed()
        tail = self.sink_lines()[baseline:]
        if list(dict.fromkeys(tail)) != list(expected):
            raise ConnectError(f"the sink's new lines: {describe_difference(expected, tail)}")
        return tail

    # --- the steps, in `STEPS` order ---

    def worker_starts(self) -> None:
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            ConfigResource,
            ResourceType,
        )

        self.start_worker()
        expected = {
            f"{self.group_id}-configs": 1,
            f"{self.group_id}-offsets": OFFSET_PARTITIONS,
            f"{self.group_id}-status": STATUS_PARTITIONS,
        }
        metadata = self.admin().list_topics(timeout=10).topics
        partitions = {t: len(metadata[t].partitions) if t in metadata else 0 for t in expected}
        if partitions != expected:
            raise ConnectError(f"internal topics' partitions {partitions}, expected {expected}")
        futures = self.admin().describe_configs(
            [ConfigResource(ResourceType.TOPIC, topic) for topic in expected]
        )
        policies = {
            resource.name: future.result(timeout=10)["cleanup.policy"].value
            for resource, future in futures.items()
        }
        if set(policies.values()) != {"compact"}:
            raise ConnectError(f"internal topics' cleanup.policy: {policies}, expected compact")

    def file_source_to_topic(self) -> None:
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka.cimpl import NewTopic

        # One partition: the source's records carry no key, and the sink must see them in order.
        created = self.admin().create_topics([NewTopic(self.topic, 1, 1)])
        created[self.topic].result(timeout=30)
        self.source_file.write_text("")
        self.append(INITIAL_LINES, empty_lines=True)
        self.worker.create_connector(
            self.source_name,
            {
                "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                "tasks.max": "1",
                "file": str(self.source_file),
                "topic": self.topic,
            },
        )
        self.worker.wait_running([self.source_name])
        consumer = Consumer(
            {
                **self.client_config(),
                "group.id": f"{self.group_id}-reader",
                "enable.auto.commit": False,
            }
        )
        values: list[str] = []
        try:
            consumer.assign([TopicPartition(self.topic, 0, 0)])

            def read_all() -> bool:
                batch = consumer.consume(num_messages=500, timeout=0.5)
                values.extend((m.value() or b"").decode() for m in batch if m.error() is None)
                return len(values) >= len(self.lines)

            wait_for(read_all, timeout=FLOW_TIMEOUT_S, what=f"{len(self.lines)} records")
        except TimeoutError as exc:
            raise ConnectError(
                f"{exc}: {describe_difference(self.lines, values)}; {self.worker.errors()}"
            ) from None
        finally:
            consumer.close()
        end = self.end_offset()
        if values != self.lines or end != len(self.lines):
            raise ConnectError(
                f"the topic holds {describe_difference(self.lines, values)}, end offset {end}"
            )

    def topic_to_file_sink(self) -> None:
        self.worker.create_connector(
            self.sink_name,
            {
                "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                "tasks.max": "1",
                "file": str(self.sink_file),
                "topics": self.topic,
            },
        )
        self.worker.wait_running([self.sink_name])
        try:
            wait_for(
                lambda: len(self.sink_lines()) >= len(self.lines),
                timeout=FLOW_TIMEOUT_S,
                what=f"{len(self.lines)} lines in the sink file",
            )
        except TimeoutError as exc:
            got = self.sink_lines()
            raise ConnectError(
                f"{exc}: {describe_difference(self.lines, got)}; {self.worker.errors()}"
            ) from None
        self.wait_sink_committed()
        if self.sink_file.read_bytes() != self.source_file.read_bytes():
            raise ConnectError(
                f"the sink file differs: {describe_difference(self.lines, self.sink_lines())}"
            )

    def survives_a_kfs_restart(self) -> str:
        assert self.daemon_restart is not None
        self.members_before = self.wait_groups_stable()
        baseline = len(self.sink_lines())
        self.daemon_restart()
        new = self.append(APPENDED_LINES)
        # Every line arrives, in order; a line the sink wrote but could not commit comes again.
        tail = self.wait_sink_tail(baseline, new)
        self.rewritten = len(tail) - len(new)
        if not self.worker.alive():
            raise ConnectError(f"the worker exited: {self.worker.errors()}")
        self.members_after = self.wait_groups_stable()
        self.worker.wait_running([self.source_name, self.sink_name])
        return f"{self.rewritten} lines written twice by the sink"

    def members_kept(self) -> None:
        """The worker's member id is the same after the restart, as Kafka's coordinator keeps it.

        Kafka writes each classic group's members to ``__consumer_offsets``
        (GroupMetadata records) and reloads them with the group, so after a
        broker restart the worker heartbeats on in its generation.  A
        coordinator that forgot the group answers UNKNOWN_MEMBER_ID: the
        worker rejoins under a new id, and a sink consumer's commit of what it
        wrote meanwhile fails, so it writes those lines again (the sink's
        group is reported, not judged: Connect itself replaces the sink's
        consumer when the coordinator is away for over 3 s, as a slower
        Kafka restart is).
        """
        before, after = self.members_before, self.members_after
        if after.get(self.group_id) != before.get(self.group_id):
            raise ConnectError(
                f"the worker's member id changed (the daemon forgot its group): "
                f"{before.get(self.group_id)} -> {after.get(self.group_id)}; the sink's group: "
                f"{before.get(self.sink_group)} -> {after.get(self.sink_group)}, and it wrote "
                f"{self.rewritten} lines twice"
            )

    def worker_restart_resumes(self) -> None:
        baseline = len(self.sink_lines())
        self.worker.stop()
        new = self.append(APPENDED_LINES)
        self.start_worker()
        self.worker.wait_running([self.source_name, self.sink_name])
        tail = self.wait_sink_tail(baseline, new)
        if tail != new:
            raise ConnectError(
                f"after the worker restart the sink wrote {describe_difference(new, tail)}"
            )


def run_connect(
    bootstrap: str,
    scratch: Path,
    daemon_restart: Callable[[], None] | None,
    *,
    lib: Path | None = None,
) -> SuiteResult:
    """`STEPS` against ``bootstrap``, in order; files and worker logs go under ``scratch``.

    ``daemon_restart`` restarts the daemon at ``bootstrap`` (same address,
    same data); without it the two steps about a restart are skipped.
    ``lib``: Connect's jars (default: `install`; a failed install fails
    every step).  A passed step's detail is how long it took.  Every
    worker started is killed before this returns.
    """
    result = SuiteResult(SUITE)
    started = time.monotonic()
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        jars = lib or install()
    except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as exc:
        result.outcomes = [Outcome(step, "failed", f"install: {exc}") for step in STEPS]
        result.seconds = time.monotonic() - started
        return result
    scenario = ConnectScenario(bootstrap, scratch, jars, daemon_restart)
    steps: dict[str, Callable[[], str | None]] = dict(
        zip(
            STEPS,
            (
                scenario.worker_starts,
                scenario.file_source_to_topic,
                scenario.topic_to_file_sink,
                scenario.survives_a_kfs_restart,
                scenario.members_kept,
                scenario.worker_restart_resumes,
            ),
            strict=True,
        )
    )
    broken = ""
    try:
        for name, step in steps.items():
            if broken:
                result.outcomes.append(Outcome(name, "failed", f"not run: {broken!r} failed"))
                continue
            if name in RESTART_STEPS and daemon_restart is None:
                result.outcomes.append(Outcome(name, "skipped", "no daemon to restart"))
                continue
            step_started = time.monotonic()
            try:
                note = step()
            except Exception as exc:  # noqa: BLE001 - a step's failure is its outcome
                logs = ", ".join(str(w.log_path) for w in scenario.workers)
                result.outcomes.append(
                    Outcome(name, "failed", f"{type(exc).__name__}: {exc} (worker logs: {logs})")
                )
                broken = "" if name in JUDGED_ALONE else name
            else:
                took = f"{time.monotonic() - step_started:.1f} s"
                result.outcomes.append(Outcome(name, "passed", f"{took}; {note}" if note else took))
    finally:
        scenario.kill_workers()
    result.seconds = time.monotonic() - started
    return result
