"""A full WAL disk: appends are refused (KAFKA_STORAGE_ERROR) until space is freed, then resume.

The disk is real: a small tmpfs mounted for the test (root only; skipped
where mounting is not allowed), filled up with a file of the test's own once
the WAL has its first file and the spare it prepares ahead.  The WAL's next
file then cannot be created: the writer waits instead of failing, nothing
acknowledged is lost, and once the filler is removed it rolls and goes on.
"""

from __future__ import annotations

import asyncio
import threading

from kfs_core.errors import LogStorageError, RequestTimedOut
from kfs_core.log.wal import WalWriter
from kfs_core.storage.base import ObjectStore
from testkit.batches import make_batch as make_wal_batch
from testkit.waiting import wait_for
from tests.conftest import SmallDisk, fill_disk, wal_spare_ready
from tests.log.log_helpers import (
    TOPIC,
    Harness,
    eventually,
    make_batch,
    offsets_and_values,
    read_all,
    run_harness,
)
from tests.log.wal_helpers import recovered

KAFKA_STORAGE_ERROR = 56


def test_a_full_disk_holds_the_wal_until_space_is_freed_and_loses_nothing(
    small_disk: SmallDisk,
) -> None:
    disk = small_disk(4 << 20)
    size = 256 << 10
    wal_dir = disk / "wal"
    wal = WalWriter(wal_dir, file_size=size)
    wal.recover()
    wait_for(lambda: wal_spare_ready(wal_dir, size), timeout=10, what="the spare WAL file")
    filler = fill_disk(disk)

    written: list[tuple[int, bytes]] = []
    batches = [make_wal_batch(0, 3 * i, size=40_000, count=3) for i in range(30)]

    def produce() -> None:
        for i, batch in enumerate(batches):
            wal.append(TOPIC, 0, 3 * i, batch)
            written.append((3 * i, batch))

    producer = threading.Thread(target=produce, name="producer", daemon=True)
    producer.start()
    wait_for(lambda: wal.out_of_space, timeout=30, what="the WAL to run out of space")
    stalled_at = len(written)
    assert 0 < stalled_at < len(batches)  # the first two files filled, the third cannot exist
    assert producer.is_alive()  # its append waits, neither failed nor acknowledged
    assert wal.failure is None
    assert wal.metrics.out_of_space == 1

    filler.unlink()
    producer.join(60)
    assert not producer.is_alive()
    assert not wal.out_of_space
    assert [offset for offset, _ in written] == [3 * i for i in range(len(batches))]
    wal.close()

    replayed = [(r.base_offset, bytes(r.batch)) for r in recovered(wal_dir, file_size=size).records]
    assert replayed == written


def test_appends_to_a_log_whose_wal_disk_is_full_get_56_then_resume(
    local_store: ObjectStore, small_disk: SmallDisk
) -> None:
    disk = small_disk(4 << 20)
    value = b"v" * 100_000

    async def body(h: Harness) -> None:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await eventually(
            lambda: wal_spare_ready(h.wal_dir, logs.wal.file_size), what="the spare WAL file"
        )
        filler = await asyncio.to_thread(fill_disk, disk)

        acked: list[int] = []
        refused: LogStorageError | None = None
        for _ in range(40):  # the first two files hold about 20 of these
            try:
                result = await logs.append(TOPIC, 0, make_batch([value, value]), timeout_s=1)
                acked.append(result.base_offset)
            except RequestTimedOut:
                pass  # queued in the WAL when it ran out of space: written once there is space
            except LogStorageError as exc:
                refused = exc
                break
        assert refused is not None, "appends were never refused"
        assert refused.kafka_error_code == KAFKA_STORAGE_ERROR
        assert "disk is full" in str(refused)
        assert logs.failed is None  # refused, not failed: no restart needed

        filler.unlink()
        await eventually(lambda: not logs.wal.out_of_space, timeout=30, what="the WAL to resume")
        after = await logs.append(TOPIC, 0, make_batch([b"after"]), timeout_s=10)
        offsets = [o for o, _ in offsets_and_values(await read_all(logs, TOPIC, 0))]
        # Gap-free, every acknowledged append there, the timed-out one included.
        assert offsets == list(range(after.base_offset + 1))
        assert set(acked) <= set(offsets[::2])

    run_harness(local_store, disk, body)
