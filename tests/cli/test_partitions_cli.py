"""`kfs partitions reassign` as an operator runs it: Kafka's flags and JSON, over the store.

The namespace holds a real topic registry, real partition catalogs and
heartbeat documents as daemons write them; the command reads and writes the
store alone (tests/cluster/test_daemons.py moves a partition between real
daemons with it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.cli import main
from kfs_core.cli.partitions import Move, parse_reassignment_json
from kfs_core.clock import now_ms
from kfs_core.cluster.nodes import encode_node, node_key
from kfs_core.cluster.reassignments import Reassignments, ReassignmentStore
from kfs_core.cluster.view import NodeInfo
from kfs_core.storage import LocalObjectStore

NS = "test"


class Namespace:
    """A store with topic ``orders`` (3 partitions) and the heartbeats of nodes 1, 2, 3."""

    def __init__(self, root: Path) -> None:
        self.url = (root / "store").as_uri()
        self.store = LocalObjectStore(root / "store")
        self.documents = ReassignmentStore(self.store, NS)
        TopicRegistry(self.store, NS).create_topic("orders", 3)
        self.held: dict[int, dict[tuple[str, int], int]] = {1: {}, 2: {}, 3: {}}
        for node in self.held:
            self.beat(node)

    def beat(self, node: int, *, age_ms: int = 0, state: str = "running") -> None:
        info = NodeInfo(
            node, f"inc-{node}", {"PLAINTEXT": ("127.0.0.1", 9090 + node)}, "store",
            state=state,  # type: ignore[arg-type]
            held=self.held.get(node, {}),
        )  # fmt: skip
        self.store.put(node_key(NS, node), encode_node(info, heartbeat_ms=now_ms() - age_ms))

    def take(self, node: int, partition: int) -> int:
        """Node ``node`` takes orders-``partition``: a lease commit, then its heartbeat lists it."""
        state = PartitionCatalog(self.store, NS, "orders", partition).take_lease(
            node, f"inc-{node}"
        )
        for held in self.held.values():
            held.pop(("orders", partition), None)
        self.held[node][("orders", partition)] = state.leader_epoch
        self.beat(node)
        return state.leader_epoch

    def kfs(self, *args: str) -> Result:
        return CliRunner().invoke(
            main,
            ["--store-url", self.url, "--namespace", NS, "partitions", "reassign", *args],
            env={"KFS_BROKER_SESSION_TIMEOUT_MS": "600000"},
        )


@pytest.fixture
def ns(tmp_path: Path) -> Namespace:
    return Namespace(tmp_path)


def error_line(result: Result) -> str:
    assert result.exit_code != 0, result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith("kfs: error: "), line
    return line.removeprefix("kfs: error: ")


def test_execute_verify_list_cancel_one_partition(ns: Namespace) -> None:
    ns.take(1, 0)
    executed = ns.kfs("--topic", "orders", "--partition", "0", "--broker", "3", "--execute")
    assert executed.exit_code == 0, executed.stderr
    rollback = '{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1],"log_dirs":["any"]}]}'
    assert executed.stdout == (
        f"Current partition replica assignment\n\n{rollback}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback\n"
        "Successfully started partition reassignment for orders-0\n"
    )
    assert ns.documents.newest() == Reassignments(0, {("orders", 0): 3})
    # The rollback JSON is itself a reassignment file.
    assert parse_reassignment_json(rollback) == [Move("orders", 0, (1,))]

    verify = ["--topic", "orders", "--partition", "0", "--broker", "3", "--verify"]
    assert ns.kfs(*verify).stdout == (
        "Status of partition reassignment:\n"
        "Reassignment of partition orders-0 is still in progress.\n"
    )
    assert ns.kfs("--list").stdout == (
        "Current partition reassignments:\norders-0: replicas: 3. still in progress.\n"
    )
    # The target's lease lands in the catalog, but its heartbeat does not list it yet.
    PartitionCatalog(ns.store, NS, "orders", 0).take_lease(3, "inc-3")
    assert "still in progress" in ns.kfs(*verify).stdout
    ns.take(3, 0)
    assert ns.kfs(*verify).stdout == (
        "Status of partition reassignment:\nReassignment of partition orders-0 is completed.\n"
    )
    assert ns.kfs("--list").stdout.endswith("orders-0: replicas: 3. completed.\n")
    # A pin whose node is gone: the daemons place the partition themselves meanwhile.
    ns.beat(3, state="stopped")
    assert ns.kfs("--list").stdout.endswith(
        "orders-0: replicas: 3. node 3 is not live: the computed placement applies.\n"
    )

    cancelled = ns.kfs("--topic", "orders", "--partition", "0", "--cancel")
    assert cancelled.stdout == "Successfully cancelled partition reassignment for: orders-0\n"
    assert ns.documents.newest() == Reassignments(1, {})
    assert ns.kfs("--list").stdout == "No partition reassignments found.\n"
    assert (
        ns.kfs("--cancel").stdout == "None of the specified partition reassignments are active.\n"
    )
    # Not pinned any more, and held elsewhere than asked: Kafka's words for it.
    ns.take(2, 0)
    assert ns.kfs(*verify).stdout.endswith(
        "There is no active reassignment of partition orders-0, but replica set is 2 rather than 3.\n"
    )


def test_a_kafka_reassignment_file(ns: Namespace, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {
                        "topic": "orders",
                        "partition": 1,
                        "replicas": [2, 1, 3],
                        "log_dirs": ["any"] * 3,
                    },
                    {"topic": "orders", "partition": 2, "replicas": [1]},
                ],
            }
        )
    )
    ns.take(3, 2)
    result = ns.kfs("--reassignment-json-file", str(plan), "--execute")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    # orders-1 was never taken: its current node is where the daemons place it.
    current = json.loads(lines[2])["partitions"]
    assert [(p["partition"], p["replicas"]) for p in current][1] == (2, [3])
    assert current[0]["partition"] == 1 and current[0]["replicas"][0] in (1, 2, 3)
    assert "KFS serves each partition from one node, the first of its replicas: " \
           "orders-1 from node 2" in lines  # fmt: skip
    assert lines[-1] == "Successfully started partition reassignments for orders-1,orders-2"
    assert ns.documents.newest().targets == {("orders", 1): 2, ("orders", 2): 1}

    ns.take(2, 1)
    assert ns.kfs("--reassignment-json-file", str(plan), "--verify").stdout.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition orders-1 is completed.",
        "Reassignment of partition orders-2 is still in progress.",
    ]
    # Another pin made meanwhile survives cancelling the file's.
    assert (
        ns.kfs("--topic", "orders", "--partition", "0", "--broker", "1", "--execute").exit_code == 0
    )
    result = ns.kfs("--reassignment-json-file", str(plan), "--cancel")
    assert (
        result.stdout == "Successfully cancelled partition reassignments for: orders-1,orders-2\n"
    )
    assert ns.documents.newest().targets == {("orders", 0): 1}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "nope", "--partition", "0", "--broker", "1", "--execute"],
         "unknown topic 'nope'"),
        (["--topic", "orders", "--partition", "3", "--broker", "1", "--execute"],
         "partition orders-3 does not exist: topic 'orders' has 3 partition(s), 0 to 2"),
        (["--topic", "orders", "--partition", "3", "--broker", "1", "--verify"],
         "partition orders-3 does not exist"),
        (["--topic", "orders", "--partition", "0", "--broker", "9", "--execute"],
         "orders-0: node 9 is not live (live nodes: 1, 2, 4; see kfs cluster status)"),
        (["--topic", "orders", "--partition", "0", "--broker", "3", "--execute"],
         "orders-0: node 3 is not live"),
        (["--topic", "orders", "--partition", "0", "--broker", "5", "--execute"],
         "orders-0: node 5 is not live"),
        (["--topic", "orders", "--partition", "0", "--broker", "1"],
         "Command must include exactly one action: --execute, --verify, --cancel, --list"),
        (["--list", "--cancel"], "Command must include exactly one action"),
        (["--topic", "orders", "--partition", "0", "--list"], "--list takes no partitions"),
        (["--topic", "orders", "--partition", "0", "--execute"], "--execute needs --broker"),
        (["--verify"], "--verify needs --reassignment-json-file, or --topic, --partition and"),
        (["--topic", "orders", "--broker", "1", "--execute"], "--topic and --partition go together"),
        (["--reassignment-json-file", "/nonexistent/plan.json", "--execute"],
         "--reassignment-json-file /nonexistent/plan.json: No such file or directory"),
    ],
)  # fmt: skip
def test_bad_requests_are_one_line_and_change_nothing(
    ns: Namespace, args: list[str], message: str
) -> None:
    ns.beat(3, age_ms=700_000)  # dead by its heartbeat's age
    ns.beat(4)
    ns.beat(5, state="stopped")
    assert message in error_line(ns.kfs(*args))
    assert ns.documents.versions() == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", 'expected {"version": 1, "partitions": [...]}'),
        ('{"version": 2, "partitions": []}', "unsupported version 2"),
        ('{"version": 1, "partitions": [3]}', "partition entry 3 is not an object"),
        ('{"version": 1, "partitions": [{"partition": 0, "replicas": [1]}]}', "'topic'"),
        ('{"version": 1, "partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}',
         "'partition' must be an integer >= 0"),
        ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": 1}]}',
         "t-0: 'replicas' must be a list of node ids"),
        ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": []}]}',
         "t-0: the replica list is empty"),
        ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}',
         "t-0: duplicate replicas [1, 1]"),
        ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]},'
         ' {"topic": "t", "partition": 0, "replicas": [2]}]}',
         "duplicate reassignment of partition t-0"),
    ],
)  # fmt: skip
def test_a_bad_reassignment_file_is_one_line_naming_it(
    ns: Namespace, tmp_path: Path, text: str, message: str
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    line = error_line(ns.kfs("--reassignment-json-file", str(plan), "--execute"))
    assert line.startswith(f"--reassignment-json-file {plan}: ") and message in line, line
    assert ns.documents.versions() == []


def test_a_corrupt_document_is_passed_over_with_one_warning(ns: Namespace) -> None:
    ns.documents.update(lambda current: {("orders", 1): 2})
    ns.store.put(ns.documents.key(1), b"{broken")
    result = ns.kfs("--topic", "orders", "--partition", "0", "--broker", "1", "--execute")
    assert result.exit_code == 0, result.stderr
    [warning] = result.stderr.splitlines()
    assert warning.startswith("kfs: warning: skipping a corrupt reassignment document: ")
    assert "00000000000000000001.json: corrupt at byte 1" in warning
    assert ns.documents.newest() == Reassignments(2, {("orders", 0): 1, ("orders", 1): 2})


def test_the_help_names_kafkas_flags() -> None:
    result = CliRunner().invoke(main, ["partitions", "reassign", "--help"])
    assert result.exit_code == 0
    for flag in ("--reassignment-json-file", "--execute", "--verify", "--cancel", "--list",
                 "--topic", "--partition", "--broker"):  # fmt: skip
        assert flag in result.stdout
    assert "first replica" in result.stdout
