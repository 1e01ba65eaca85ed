"""A real `kfs serve` whose WAL disk fills up.

Producers get KAFKA_STORAGE_ERROR, the daemon stays up and ready, and once
space is freed producing resumes with every acknowledged record intact.  The
disk is a real 48 MiB tmpfs (root only, skipped where mounting is not allowed);
the clients are confluent-kafka over loopback.
"""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest

from testkit.daemon import DaemonFactory
from testkit.waiting import wait_for
from tests.conftest import SmallDisk, fill_disk, wal_spare_ready
from tests.server.conftest import (
    Delivered,
    consume_confluent,
    create_topic,
    produce_confluent,
    produce_confluent_outcomes,
)

pytestmark = pytest.mark.integration

WAL_FILE = 16 << 20  # the daemon's WAL file size


def produce_until_refused(bootstrap: str, topic: str, count: int) -> tuple[Delivered, list[Any]]:
    """Produce ``count`` 10 KiB values without retries: what was acknowledged, and the errors."""
    return produce_confluent_outcomes(
        bootstrap,
        topic,
        [b"%08d" % i + bytes(10_232) for i in range(count)],
        partitions=1,
        extra={
            "retries": 0,  # the first KAFKA_STORAGE_ERROR is final, not retried for minutes
            "request.timeout.ms": 3000,
            "message.timeout.ms": 10000,
        },
    )


@pytest.mark.parametrize("store_on_the_disk", [False, True], ids=["wal", "wal-and-store"])
def test_a_full_wal_disk_refuses_produce_with_56_and_resumes_when_space_is_freed(
    daemons: DaemonFactory, small_disk: SmallDisk, store_on_the_disk: bool
) -> None:
    """The WAL's disk fills up, then space is freed.

    With ``store_on_the_disk`` the local store shares the disk, so flushes fail
    too (and are retried) until space is freed.  Then the freed space must hold
    what the WAL has to move to the store as well as the WAL's next file: a disk
    twice as large, so the filler is.
    """
    # A little more than whole WAL files: the daemon's small files (the WAL
    # directory's lock) must not take the room the next WAL file needs.
    disk = small_disk(((96 if store_on_the_disk else 48) << 20) + (1 << 20))
    data_dir = disk / "data"
    store = ["--store-url", (disk / "store").as_uri()] if store_on_the_disk else []
    daemon = daemons.start(extra_args=["--data-dir", str(data_dir), *store])
    topic = create_topic(daemon.bootstrap, 1)
    # Opening a partition takes its lease, a catalog commit: open it before the disk fills.
    produce_confluent(daemon.bootstrap, topic, [b"first"], partitions=1)
    wait_for(lambda: wal_spare_ready(data_dir / "wal", WAL_FILE), what="the spare WAL file")
    filler = fill_disk(disk)

    # Two WAL files (32 MiB) fit; 40 MB of produce cannot (a flushed segment takes
    # the space of the next file first, when the store shares the disk).  The requests already in
    # flight when the WAL ran out of space wait in its queue and time out (they are
    # written once there is space); requests that come later are refused at once.
    acked, errors = produce_until_refused(daemon.bootstrap, topic, 4000)
    assert len(acked) > 1000  # what fitted was acknowledged
    assert errors, "40 MB fitted on a disk with room for 32"
    late, refused = produce_until_refused(daemon.bootstrap, topic, 20)
    assert late == []
    codes = {e.code() for e in refused}
    assert codes == {confluent_kafka.KafkaError.KAFKA_STORAGE_ERROR}, refused[:3]
    assert daemon.alive()
    status, body = daemon.http("/readyz")
    assert status == 200 and body.startswith("ready\n"), body  # degraded parts are listed
    metrics = daemon.http("/metrics")[1]
    assert "kfs_wal_out_of_space_total 1.0" in metrics

    filler.unlink()
    more = wait_for(
        lambda: produce_confluent(daemon.bootstrap, topic, [b"after"], partitions=1),
        timeout=60,
        what="produce to resume",
    )
    assert more[0][2] == b"after"

    if store_on_the_disk:  # the flushes that failed for want of space went through
        wait_for(lambda: list((disk / "store").rglob("segment-*.kfs")), what="a flushed segment")
    high = more[0][1] + 1
    stored = {
        offset: value for _, offset, value in consume_confluent(daemon.bootstrap, topic, 1, high)
    }
    assert sorted(stored) == list(range(high))  # gap-free
    for _, offset, value in acked:
        assert stored[offset] == value  # every acknowledged record, unchanged
    if not store_on_the_disk:
        # (With the store on the disk, full again by now, a graceful stop's final flush
        # would retry for its 120 s before leaving the rest in the WAL: not waited for here.)
        assert daemon.stop() == 0
