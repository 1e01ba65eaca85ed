"""KafkaJS (Node, its own protocol code) in a consumer group against `kfs serve`.

Two KafkaJS consumers of one group split a 3-partition topic between them;
the records KafkaJS's producer writes are each consumed exactly once, by the
member that owns the partition; once both have stopped, the committed offsets
(read back with confluent-kafka) are the log end, and a new KafkaJS member
consumes only what was produced after them.

The Node side is tests/clients/kafkajs/group.js, which prints one JSON object
per line; its KafkaJS is pinned by the package-lock.json next to it.  `make
test` installs node, npm and that KafkaJS (.ci/install-kafkajs); without them
this test fails and says so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import confluent_kafka
import pytest

from testkit.daemon import Daemon
from testkit.waiting import wait_for
from tests.server.conftest import produce_confluent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PROJECT = Path(__file__).resolve().parents[1] / "clients" / "kafkajs"
SCRIPT = PROJECT / "group.js"
PARTITIONS = 3
DEADLINE_S = 60.0
INSTALL_HINT = "run `make kafkajs` (or `bash .ci/install-kafkajs`)"

Record = tuple[int, int, str]  # (partition, offset, value)


def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail(f"node is not installed; {INSTALL_HINT}")
    if not (PROJECT / "node_modules" / "kafkajs" / "package.json").is_file():
        pytest.fail(f"KafkaJS is not installed in {PROJECT}; {INSTALL_HINT}")
    return path


def run_node(bootstrap: str, topic: str, mode: str, *args: str) -> list[dict[str, Any]]:
    """A one-shot group.js run (create, produce); its JSON lines."""
    proc = subprocess.run(
        [node(), str(SCRIPT), bootstrap, topic, "-", mode, *args],
        capture_output=True,
        timeout=DEADLINE_S,
        cwd=PROJECT,
        check=False,
    )
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, f"group.js {mode} exited {proc.returncode}:\n{stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines()]


class Member:
    """One ``group.js consume`` process; its stdout events, collected on a thread."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, log_dir: Path) -> None:
        self.name = name
        self.stderr_path = log_dir / f"kafkajs-{name}.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            [node(), str(SCRIPT), bootstrap, topic, group, "consume"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=PROJECT,
        )
        self._events: list[dict[str, Any]] = []
        self._bad_lines: list[bytes] = []
        self._lock = threading.Lock()
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            try:
                event = json.loads(line)
            except ValueError:
                with self._lock:
                    self._bad_lines.append(line)
                continue
            with self._lock:
                self._events.append(event)

    def events(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            assert not self._bad_lines, f"{self.name} printed non-JSON: {self._bad_lines[:3]}"
            return [e for e in self._events if e["event"] == kind]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def check(self) -> None:
        """Fail at once if the process died or KafkaJS reported a crash."""
        crashes = self.events("crash")
        assert not crashes, f"{self.name} crashed: {crashes}\n{self.stderr()}"
        code = self.proc.poll()
        assert code is None, f"{self.name} exited {code}:\n{self.stderr()}"

    def wait(self, condition: Callable[[], Any], what: str) -> Any:
        def checked() -> Any:
            self.check()
            return condition()

        return wait_for(checked, timeout=DEADLINE_S, what=f"{self.name}: {what}")

    def assignment(self) -> list[int] | None:
        """The partitions of its latest join, or None before the first."""
        joins = self.events("joined")
        return joins[-1]["partitions"] if joins else None

    def records(self) -> list[Record]:
        return [(e["partition"], e["offset"], e["value"]) for e in self.events("record")]

    def stop(self) -> None:
        """Ask it to stop (it commits and leaves the group)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"stop\n")
        self.proc.stdin.close()

    def wait_stopped(self) -> None:
        try:
            code = self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not stop:\n{self.stderr()}") from None
        self._reader.join(10)
        assert code == 0, f"{self.name} exited {code}:\n{self.stderr()}"
        assert self.events("stopped"), f"{self.name} never said it stopped:\n{self.stderr()}"
        assert not self.events("crash"), self.events("crash")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._stderr.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in offsets}


def log_end(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kfs-kafkajs-watermarks"}
    )
    try:
        ends = {}
        for p in range(PARTITIONS):
            _, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 30)
            ends[p] = high
        return ends
    finally:
        consumer.close()


def test_kafkajs_group_splits_consumes_once_commits_and_resumes(
    local_daemon: Daemon, tmp_path: Path
) -> None:
    bootstrap = local_daemon.bootstrap
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"kafkajs-{suffix}", f"group-kafkajs-{suffix}"
    first_count, later_count = 60, 9
    members: list[Member] = []

    def member(name: str) -> Member:
        members.append(Member(name, bootstrap, topic, group, tmp_path))
        return members[-1]

    try:
        (created,) = run_node(bootstrap, topic, "create", str(PARTITIONS))
        assert created == {
            "event": "created", "topic": topic, "partitions": PARTITIONS, "created": True
        }  # fmt: skip

        # Two members split the partitions: the first gets all three, then both
        # rejoin when the second arrives and end with disjoint halves of the topic.
        a = member("a")
        a.wait(lambda: a.assignment() == [0, 1, 2], "the first member is assigned every partition")
        b = member("b")

        def split() -> bool:
            b.check()
            mine, theirs = a.assignment(), b.assignment()
            return (
                bool(mine)
                and bool(theirs)
                and not set(mine or ()) & set(theirs or ())
                and sorted((mine or []) + (theirs or [])) == [0, 1, 2]
            )

        a.wait(split, "both members joined with disjoint assignments covering the topic")
        a_parts, b_parts = set(a.assignment() or ()), set(b.assignment() or ())

        events = run_node(bootstrap, topic, "produce", str(first_count), "first-")
        assert events[-1] == {"event": "done"}
        produced = [(e["partition"], e["offset"], e["value"]) for e in events[:-1]]
        per_partition = first_count // PARTITIONS
        assert sorted(produced) == sorted(
            (i % PARTITIONS, i // PARTITIONS, f"first-{i}") for i in range(first_count)
        ), "KafkaJS's producer wrote each record at the offset it reported"

        def consumed_everything() -> bool:
            b.check()
            return len(a.records()) + len(b.records()) >= first_count

        a.wait(consumed_everything, f"the group consumed {first_count} records")
        for m in (a, b):
            m.stop()
        for m in (a, b):
            m.wait_stopped()

        a_records, b_records = a.records(), b.records()
        assert sorted(a_records + b_records) == sorted(produced), "each record exactly once"
        assert {p for (p, _, _) in a_records} == a_parts, "a consumed its own partitions"
        assert {p for (p, _, _) in b_records} == b_parts, "b consumed its own partitions"
        end = log_end(bootstrap, topic)
        assert end == dict.fromkeys(range(PARTITIONS), per_partition)
        assert committed(bootstrap, group, topic) == end, "committed offsets are the log end"

        # A new member of the group resumes after the commits: only what came later.
        later = [b"later-%d" % i for i in range(later_count)]
        produce_confluent(bootstrap, topic, later, partitions=PARTITIONS)
        c = member("c")
        c.wait(lambda: c.assignment() == [0, 1, 2], "the new member is assigned every partition")
        c.wait(lambda: len(c.records()) >= later_count, f"the new member consumed {later_count}")
        c.stop()
        c.wait_stopped()
        assert sorted(c.records()) == sorted(
            (i % PARTITIONS, per_partition + i // PARTITIONS, f"later-{i}")
            for i in range(later_count)
        ), "the new member started at the committed offsets"
        assert committed(bootstrap, group, topic) == dict.fromkeys(
            range(PARTITIONS), per_partition + later_count // PARTITIONS
        )
    finally:
        for m in members:
            m.kill()
