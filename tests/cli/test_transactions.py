"""`kfs transactions list|describe|describe-producers|find-hanging|abort` against `kfs serve`.

A confluent-kafka transactional producer leaves a transaction open; the
commands find it as ``kafka-transactions.sh`` does, and ``abort`` ends it on
its partition so that ``read_committed`` consumers move past it.  A wrong
flag or an unknown id ends with one ``kfs: error:`` line.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from click.testing import CliRunner, Result

from kfs_core.cli import main
from testkit.daemon import Daemon, DaemonFactory
from tests.cli.test_groups import table

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    factory = DaemonFactory(tmp_path_factory.mktemp("transactions-cli"))
    try:
        yield factory.start(extra_args=["--default-partitions", "2"])
    finally:
        factory.close()


def kfs_transactions(daemon: Daemon, *args: str) -> Result:
    result = CliRunner().invoke(
        main, ["transactions", "--bootstrap-server", daemon.bootstrap, *args]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def ok(daemon: Daemon, *args: str) -> str:
    result = kfs_transactions(daemon, *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def refused(daemon: Daemon, *args: str) -> str:
    result = kfs_transactions(daemon, *args)
    assert result.exit_code != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kfs: error: "), result.stderr
    return lines[0]


def end_offset(daemon: Daemon, topic: str, partition: int) -> int:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": daemon.bootstrap,
            "group.id": "probe",
            "isolation.level": "read_committed",
        }
    )
    try:
        return int(
            consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), timeout=10
            )[1]
        )
    finally:
        consumer.close()


def test_an_open_transaction_is_listed_described_found_and_aborted(daemon: Daemon) -> None:
    topic = f"tx-cli-{uuid.uuid4().hex[:8]}"
    tid = f"open-{uuid.uuid4().hex[:6]}"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": daemon.bootstrap, "transactional.id": tid}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"left open", partition=1)
    producer.flush(30)

    [listed] = [
        r for r in table(ok(daemon, "list"), "TransactionalId") if r["TransactionalId"] == tid
    ]
    assert listed["TransactionState"] == "Ongoing"
    assert not [
        r
        for r in table(ok(daemon, "list", "--state", "CompleteCommit"), "TransactionalId")
        if r["TransactionalId"] == tid
    ]
    [described] = table(ok(daemon, "describe", "--transactional-id", tid), "CoordinatorId")
    assert described["ProducerId"] == listed["ProducerId"]
    assert described["TopicPartitions"] == f"{topic}-1"
    [producers] = table(
        ok(daemon, "describe-producers", "--topic", topic, "--partition", "1"), "ProducerId"
    )
    assert (producers["ProducerId"], producers["CurrentTransactionStartOffset"]) == (
        listed["ProducerId"],
        "0",
    )
    # Its coordinator counts the partition in it: not hanging, however old.
    found = ok(daemon, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert table(found, "Topic") == []

    assert end_offset(daemon, topic, 1) == 0  # held by the open transaction
    assert daemon.metric("kfs_transactions_open_transactions") >= 1
    assert daemon.metric(f'kfs_partition_lso_lag{{partition="1",topic="{topic}"}}') == 1
    assert daemon.metric(f'kfs_partition_open_transactions{{partition="1",topic="{topic}"}}') == 1
    aborted = ok(daemon, "abort", "--topic", topic, "--partition", "1", "--start-offset", "0")
    assert f"producer {listed['ProducerId']}" in aborted
    assert end_offset(daemon, topic, 1) == 2
    assert daemon.metric(f'kfs_partition_lso_lag{{partition="1",topic="{topic}"}}') == 0
    [after] = table(
        ok(daemon, "describe-producers", "--topic", topic, "--partition", "1"), "ProducerId"
    )
    assert after["CurrentTransactionStartOffset"] == "-"


def test_mistakes_end_with_one_line(daemon: Daemon) -> None:
    assert "no transactional id" in refused(daemon, "describe", "--transactional-id", "nope")
    assert "does not exist" in refused(daemon, "find-hanging", "--topic", "no-such-topic")
    assert "no such topic or partition" in refused(
        daemon, "describe-producers", "--topic", "no-such-topic", "--partition", "0"
    )
    topic = f"tx-none-{uuid.uuid4().hex[:8]}"
    plain = confluent_kafka.Producer({"bootstrap.servers": daemon.bootstrap})
    plain.produce(topic, b"not in a transaction", partition=0)
    assert plain.flush(30) == 0
    assert "no open transaction starts at offset 0" in refused(
        daemon, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0"
    )
    assert "not both" in refused(
        daemon,
        "abort",
        "--topic",
        "t",
        "--partition",
        "0",
        "--start-offset",
        "0",
        "--producer-id",
        "1",
        "--producer-epoch",
        "0",
    )
