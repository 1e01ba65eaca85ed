"""kcat's balanced consumer (``kcat -G``, librdkafka's group client) against `kfs serve`.

kcat joins a group, is assigned every partition of a 3-partition topic,
consumes what was produced beforehand and commits on exit; a second run of
the same group resumes after the commit, and the committed offsets are what
confluent-kafka reads back.  `make test` installs Debian's kcat
(.ci/install-kcat); without it these tests skip.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid

import confluent_kafka
import pytest

from testkit.daemon import Daemon
from tests.server.conftest import produce_confluent

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make test installs it)"),
]

PARTITIONS = 3
RUN_TIMEOUT_S = 60.0

Record = tuple[int, int, bytes]  # (partition, offset, value)


def kcat_group(bootstrap: str, group: str, topic: str) -> list[Record]:
    """One ``kcat -G`` run to the end of every assigned partition; what it printed."""
    assert KCAT is not None
    proc = subprocess.run(
        [
            KCAT, "-b", bootstrap, "-G", group,
            "-X", "auto.offset.reset=earliest",
            "-e",  # exit once every assigned partition is at its end
            "-f", "%p %o %s\\n",
            topic,
        ],
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"rebalanced" in proc.stderr and b"assigned" in proc.stderr, proc.stderr
    records: list[Record] = []
    for line in proc.stdout.splitlines():
        partition, offset, value = line.split(b" ", 2)
        records.append((int(partition), int(offset), value))
    return records


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in offsets}


def test_kcat_group_consumes_commits_and_resumes(local_daemon: Daemon) -> None:
    bootstrap = local_daemon.bootstrap
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"kcat-{suffix}", f"group-kcat-{suffix}"
    first = [b"first %d" % i for i in range(90)]
    later = [b"later %d" % i for i in range(12)]

    delivered = produce_confluent(bootstrap, topic, first, partitions=PARTITIONS)
    assert sorted(delivered) == sorted(
        (i % PARTITIONS, i // PARTITIONS, v) for i, v in enumerate(first)
    )

    records = kcat_group(bootstrap, group, topic)
    assert sorted(records) == sorted(delivered), "each record exactly once"
    per_partition = len(first) // PARTITIONS
    assert committed(bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), per_partition)

    assert kcat_group(bootstrap, group, topic) == [], "a second run resumes after the commit"

    produce_confluent(bootstrap, topic, later, partitions=PARTITIONS)
    records = kcat_group(bootstrap, group, topic)
    assert sorted(v for (_, _, v) in records) == sorted(later)
    assert min(o for (_, o, _) in records) == per_partition
    assert committed(bootstrap, group, topic) == dict.fromkeys(
        range(PARTITIONS), per_partition + len(later) // PARTITIONS
    )
