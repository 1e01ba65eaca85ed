"""`kfs groups list|describe|delete|reset-offsets` against a running `kfs serve`.

The groups are real: confluent-kafka consumers subscribe, get partitions and
commit; the commands talk to the daemon over the Kafka protocol.  The click
group is invoked directly (the lead registers it under `kfs`).

Each test uses its own topic (3 partitions, 10 records each: offsets 0-4
created at T1, 5-9 at T2) and its own group.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import confluent_kafka
import pytest
from click.testing import CliRunner, Result
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kfs_core.cli import main
from testkit.daemon import Daemon, DaemonFactory
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.server.conftest import produce_confluent

pytestmark = pytest.mark.integration

PARTITIONS = 3
# Recent create times (two and one hour ago), well inside the default retention.
T1_MS = (int(time.time()) // 60 * 60 - 7200) * 1000
T2_MS = T1_MS + 3_600_000


def _iso(ms: int, zone: str = "+00:00") -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + zone


T1_ISO = _iso(T1_MS)
BETWEEN_ISO = _iso(T1_MS + 1_800_000, "Z")  # the first record at or after it is offset 5
AFTER_ALL_ISO = _iso(T2_MS + 86_400_000)
# Committed before each reset: partition -> offset (log end is 10 everywhere).
COMMITTED = {0: 3, 1: 7, 2: 9}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    factory = DaemonFactory(tmp_path_factory.mktemp("groups-cli"))
    try:
        yield factory.start(extra_args=["--default-partitions", str(PARTITIONS)])
    finally:
        factory.close()


@pytest.fixture
def topic(daemon: Daemon) -> str:
    name = f"orders-{uuid.uuid4().hex[:8]}"
    for ts in (T1_MS, T2_MS):
        produce_confluent(
            daemon.bootstrap,
            name,
            [b"v"] * (5 * PARTITIONS),
            partitions=PARTITIONS,
            timestamp_ms=ts,
        )
    return name


@pytest.fixture
def group() -> str:
    return f"group-{uuid.uuid4().hex[:8]}"


# --- helpers -------------------------------------------------------------------------------


def kfs_groups(daemon: Daemon | str, *args: str) -> Result:
    bootstrap = daemon if isinstance(daemon, str) else daemon.bootstrap
    result = CliRunner().invoke(main, ["groups", *args, "--bootstrap-server", bootstrap])
    # A traceback would surface here as an exception other than click's exit.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def ok(daemon: Daemon, *args: str) -> str:
    result = kfs_groups(daemon, *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def refused(daemon: Daemon | str, *args: str) -> str:
    """The command failed with exactly one ``kfs: error:`` line; that line."""
    result = kfs_groups(daemon, *args)
    assert result.exit_code != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kfs: error: "), result.stderr
    return lines[0]


def table(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the table whose header line starts with ``first_header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    headers = lines[start].split()
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(headers, line.split(), strict=True)))
    return rows


def admin(daemon: Daemon) -> AdminClient:
    return AdminClient({"bootstrap.servers": daemon.bootstrap, "log_level": 0})


def group_state(daemon: Daemon, group: str) -> tuple[str, int]:
    client = admin(daemon)  # kept referenced: the futures die with their client
    (future,) = client.describe_consumer_groups([group], request_timeout=10).values()
    described = future.result(timeout=15)
    return described.state.name, len(described.members)


def committed(daemon: Daemon, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, read the way a consumer of the group reads them."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": daemon.bootstrap, "group.id": group, "log_level": 0}
    )
    try:
        found = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def member(daemon: Daemon, group: str, name: str, **extra: object) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": daemon.bootstrap,
            "group.id": group,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000,
            "log_level": 0,
            **extra,
        }
    )


@contextmanager
def live_group(
    daemon: Daemon, group: str, topic: str, members: int = 1
) -> Iterator[list[confluent_kafka.Consumer]]:
    """``members`` subscribed consumers, stable, every partition owned once; closed after."""
    consumers = [member(daemon, group, f"{group}-m{i}") for i in range(members)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def stable() -> bool:
            for consumer in consumers:
                consumer.poll(0.05)
            owned = sorted(tp.partition for c in consumers for tp in c.assignment())
            return (
                owned == list(range(PARTITIONS))
                and all(c.assignment() for c in consumers)
                and group_state(daemon, group) == ("STABLE", members)
            )

        wait_for(stable, timeout=60, interval=0, what=f"group {group} stable")
        yield consumers
    finally:
        for consumer in consumers:
            consumer.close()


def stopped_group(daemon: Daemon, group: str, topic: str) -> None:
    """A group whose one member committed COMMITTED, then left (state Empty)."""
    with live_group(daemon, group, topic) as (consumer,):
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()],
            asynchronous=False,
        )
    wait_for(lambda: group_state(daemon, group) == ("EMPTY", 0), timeout=30, what=f"{group} empty")
    assert committed(daemon, group, topic) == COMMITTED


def first_offsets(daemon: Daemon, group: str, topic: str) -> dict[int, int]:
    """Where a new subscriber of the group starts reading each partition.

    One more record goes to every partition first, so a subscriber resuming
    at the log end has something to read; ``auto.offset.reset=latest`` means
    a subscriber that ignored the committed offsets would read nothing.
    """
    produce_confluent(daemon.bootstrap, topic, [b"late"] * PARTITIONS, partitions=PARTITIONS)
    consumer = member(daemon, group, f"{group}-resumer", **{"auto.offset.reset": "latest"})
    first: dict[int, int] = {}
    try:
        consumer.subscribe([topic])

        def read_all() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                first.setdefault(message.partition(), message.offset())
            return len(first) == PARTITIONS

        wait_for(read_all, timeout=60, interval=0, what=f"a new subscriber of {group}")
    finally:
        consumer.close()
    return first


# --- list and describe --------------------------------------------------------------------


def test_list_and_describe_show_members_offsets_and_lag(
    daemon: Daemon, topic: str, group: str
) -> None:
    with live_group(daemon, group, topic, members=2) as consumers:
        consumers[0].commit(
            offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 7)], asynchronous=False
        )
        owner = {tp.partition: c for c in consumers for tp in c.assignment()}

        listed = table(ok(daemon, "list"), "GROUP")
        assert {"GROUP": group, "STATE": "Stable", "PROTOCOL-TYPE": "consumer"} in listed
        assert group not in {
            r["GROUP"] for r in table(ok(daemon, "list", "--state", "Empty"), "GROUP")
        }
        assert group in {
            r["GROUP"] for r in table(ok(daemon, "list", "--state", "stable"), "GROUP")
        }

        out = ok(daemon, "describe", group)
        assert out.splitlines()[0] == f"group {group}  state Stable  assignor range  members 2"
        rows = {int(r["PARTITION"]): r for r in table(out, "TOPIC")}
        assert set(rows) == set(range(PARTITIONS))
        expected = {0: ("3", "7"), 1: ("7", "3"), 2: ("-", "-")}
        for p, row in rows.items():
            assert row["TOPIC"] == topic
            assert (row["CURRENT-OFFSET"], row["LAG"]) == expected[p]
            assert row["LOG-END-OFFSET"] == "10"
            assert row["CONSUMER-ID"] == owner[p].memberid()
            assert row["CLIENT-ID"] == f"{group}-m{consumers.index(owner[p])}"
        members = {r["MEMBER-ID"]: r for r in table(out, "MEMBER-ID")}
        assert set(members) == {c.memberid() for c in consumers}
        for c in consumers:
            row = members[c.memberid()]
            assert row["CLIENT-ID"] == f"{group}-m{consumers.index(c)}"
            assert int(row["#PARTITIONS"]) == len(c.assignment())
            assert row["ASSIGNMENT"] == ",".join(
                f"{topic}:{tp.partition}"
                for tp in sorted(c.assignment(), key=lambda t: t.partition)
            )

    wait_for(lambda: group_state(daemon, group) == ("EMPTY", 0), what=f"{group} empty")
    out = ok(daemon, "describe", group)
    assert out.splitlines()[0] == f"group {group}  state Empty  assignor -  members 0"
    assert f"consumer group {group} has no active members." in out
    assert {r["GROUP"]: r["STATE"] for r in table(ok(daemon, "list"), "GROUP")}[group] == "Empty"


# --- a live group is refused ---------------------------------------------------------------


def test_live_group_is_neither_reset_nor_deleted(daemon: Daemon, topic: str, group: str) -> None:
    with live_group(daemon, group, topic) as (consumer,):
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()],
            asynchronous=False,
        )
        line = refused(daemon, "reset-offsets", group, "--all-topics", "--to-earliest", "--execute")
        assert "can only be reset if the group" in line and "inactive" in line
        assert "Stable" in line
        line = refused(daemon, "delete", group)
        assert line == (
            f"kfs: error: consumer group '{group}' is not empty: stop its consumers, then delete it"
        )
        assert committed(daemon, group, topic) == COMMITTED
        assert group_state(daemon, group) == ("STABLE", 1)


# --- reset-offsets on a stopped group -------------------------------------------------------


def test_dry_run_prints_the_plan_and_changes_nothing(
    daemon: Daemon, topic: str, group: str
) -> None:
    stopped_group(daemon, group, topic)
    for extra in ([], ["--dry-run"]):
        result = kfs_groups(
            daemon, "reset-offsets", group, "--topic", topic, "--to-earliest", *extra
        )
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines()[0] == (
            f"group {group}: would reset 3 partition(s) to earliest"
        )
        rows = table(result.stdout, "TOPIC")
        assert rows == [
            {"TOPIC": topic, "PARTITION": str(p), "CURRENT-OFFSET": str(o), "NEW-OFFSET": "0"}
            for p, o in COMMITTED.items()
        ]
        assert "nothing changed" in result.stderr
        assert committed(daemon, group, topic) == COMMITTED


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--to-earliest"], {0: 0, 1: 0, 2: 0}, id="earliest"),
        pytest.param(["--to-latest"], {0: 10, 1: 10, 2: 10}, id="latest"),
        pytest.param(["--to-datetime", BETWEEN_ISO], {0: 5, 1: 5, 2: 5}, id="datetime"),
        pytest.param(["--to-datetime", T1_ISO], {0: 0, 1: 0, 2: 0}, id="datetime-first"),
        # No record that late: the log end, as Kafka.
        pytest.param(["--to-datetime", AFTER_ALL_ISO], {0: 10, 1: 10, 2: 10}, id="datetime-after"),
        pytest.param(["--to-offset", "4"], {0: 4, 1: 4, 2: 4}, id="offset"),
        pytest.param(["--to-offset", "99"], {0: 10, 1: 10, 2: 10}, id="offset-clamped"),
        # 3-5, 7-5, 9-5: the first is clamped to the log start.
        pytest.param(["--shift-by", "-5"], {0: 0, 1: 2, 2: 4}, id="shift-back"),
        # 3+2, 7+2, 9+2: the last is clamped to the log end.
        pytest.param(["--shift-by", "2"], {0: 5, 1: 9, 2: 10}, id="shift-forward"),
    ],
)
def test_execute_moves_a_stopped_group(
    daemon: Daemon, topic: str, group: str, args: list[str], expected: dict[int, int]
) -> None:
    stopped_group(daemon, group, topic)
    out = ok(daemon, "reset-offsets", group, "--topic", topic, *args, "--execute")
    assert out.splitlines()[0].startswith(f"group {group}: reset 3 partition(s) ")
    assert table(out, "TOPIC") == [
        {
            "TOPIC": topic,
            "PARTITION": str(p),
            "CURRENT-OFFSET": str(COMMITTED[p]),
            "NEW-OFFSET": str(expected[p]),
        }
        for p in range(PARTITIONS)
    ]
    assert committed(daemon, group, topic) == expected
    assert first_offsets(daemon, group, topic) == expected


def test_execute_on_chosen_partitions_and_all_topics(
    daemon: Daemon, topic: str, group: str
) -> None:
    stopped_group(daemon, group, topic)
    ok(daemon, "reset-offsets", group, "--topic", f"{topic}:0,2", "--to-offset", "1", "--execute")
    assert committed(daemon, group, topic) == {0: 1, 1: COMMITTED[1], 2: 1}
    ok(daemon, "reset-offsets", group, "--all-topics", "--shift-by", "1", "--execute")
    assert committed(daemon, group, topic) == {0: 2, 1: COMMITTED[1] + 1, 2: 2}


# --- delete ---------------------------------------------------------------------------------


def test_delete_removes_a_stopped_group(daemon: Daemon, topic: str, group: str) -> None:
    stopped_group(daemon, group, topic)
    assert ok(daemon, "delete", group).strip() == f"deleted consumer group {group}"
    assert group not in {r["GROUP"] for r in table(ok(daemon, "list"), "GROUP")}
    assert committed(daemon, group, topic) == {}
    assert refused(daemon, "describe", group) == (
        f"kfs: error: consumer group '{group}' does not exist"
    )
    assert refused(daemon, "delete", group) == (
        f"kfs: error: consumer group '{group}' does not exist"
    )


# --- bad input ------------------------------------------------------------------------------


def test_mistakes_get_one_line_and_change_nothing(daemon: Daemon, topic: str, group: str) -> None:
    stopped_group(daemon, group, topic)
    cases = [
        (["describe", "no-such-group"], "consumer group 'no-such-group' does not exist"),
        (["reset-offsets", "no-such-group", "--all-topics", "--to-earliest"], "does not exist"),
        (
            ["reset-offsets", group, "--topic", topic, "--to-earliest", "--to-offset", "3"],
            "exactly one of",
        ),
        (["reset-offsets", group, "--topic", topic], "exactly one of"),
        (["reset-offsets", group, "--to-latest"], "say which offsets to reset"),
        (["reset-offsets", group, "--topic", topic, "--all-topics", "--to-latest"], "not both"),
        (["reset-offsets", group, "--topic", "no-such-topic", "--to-latest"], "no-such-topic"),
        (["reset-offsets", group, "--topic", f"{topic}:7", "--to-latest"], "not 7"),
        (["reset-offsets", group, "--topic", f"{topic}:x", "--to-latest"], "partitions"),
        (["reset-offsets", group, "--topic", topic, "--to-datetime", "soon"], "ISO 8601"),
        (["reset-offsets", f"{group}-new", "--topic", topic, "--shift-by", "1"], "no committed"),
    ]
    for args, message in cases:
        assert message in refused(daemon, *args), args
    assert committed(daemon, group, topic) == COMMITTED
    # The unknown topic was only asked about, never auto-created.
    topics = confluent_kafka.Consumer(
        {"bootstrap.servers": daemon.bootstrap, "group.id": group, "log_level": 0}
    )
    try:
        metadata = topics.list_topics("no-such-topic", timeout=10)
        assert metadata.topics["no-such-topic"].error is not None
    finally:
        topics.close()


def test_no_daemon_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    assert "cannot reach the daemon at " + nowhere in refused(nowhere, "list")
    # Mistakes in the arguments are reported before any connection is tried.
    assert "exactly one of" in refused(nowhere, "reset-offsets", "g", "--all-topics")
    assert "say which offsets" in refused(nowhere, "reset-offsets", "g", "--to-latest")
    # As an operator runs it: a separate process, its stderr exactly one line.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kfs_core.cli",
            "groups",
            "describe",
            "g",
            "--bootstrap-server",
            nowhere,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"kfs: error: cannot reach the daemon at {nowhere}: is `kfs serve` running there? "
        "(give --bootstrap-server HOST:PORT or set KFS_LISTEN)"
    ]


def test_bootstrap_defaults_to_kfs_listen(daemon: Daemon, group: str) -> None:
    result = CliRunner().invoke(main, ["groups", "list"], env={"KFS_LISTEN": daemon.bootstrap})
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0].split() == ["GROUP", "STATE", "PROTOCOL-TYPE"]
