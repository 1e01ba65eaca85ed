"""A failed WAL puts the log into its failed state, and tells its owner once.

The disk error is real: the WAL's open file descriptor is replaced (``dup2``)
by one on ``/dev/full``, so the next ``pwritev`` fails with ENOSPC from the
kernel, and an ``fdatasync`` with EINVAL -- through the manager's own write
and fsync code, no test double.

* A producer in flight when the WAL fails, and every one after, gets
  `LogStorageError` (KAFKA_STORAGE_ERROR, 56); ``LogManager.failed`` holds
  the `WalWriteFailed`; ``on_failure`` is called once.
* A failure nobody is waiting on -- a timed fsync in ``normal`` mode, a
  checkpoint after a flush -- reaches the log all the same.
* Reads go on; a restart recovers the WAL and replays what it holds.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kfs_core.config import Settings
from kfs_core.errors import LogStorageError, WalWriteFailed
from kfs_core.log import LogManager
from kfs_core.log.wal import WalWriter
from kfs_core.storage.base import ObjectStore
from tests.log.log_helpers import (
    MANUAL_FLUSH,
    NS,
    TOPIC,
    WAL_FILE_SIZE,
    eventually,
    make_batch,
    offsets_and_values,
    read_all,
    run,
)

KAFKA_STORAGE_ERROR = 56
SETTINGS: dict[str, Any] = dict(MANUAL_FLUSH)

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def break_the_disk(wal: WalWriter) -> None:
    """From now on the WAL's file is ``/dev/full``: writes fail with ENOSPC, fsyncs with EINVAL."""
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, wal._file.fd)
    finally:
        os.close(full)


class Failures:
    """The ``on_failure`` callback: records what it was told, and on which thread."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.on_loop: list[bool] = []

    def __call__(self, error: BaseException) -> None:
        self.errors.append(error)
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)


@pytest.fixture
def opened() -> Iterator[list[tuple[LogManager, WalWriter]]]:
    managers: list[tuple[LogManager, WalWriter]] = []
    yield managers
    for _, wal in managers:
        wal.close()


async def open_log(
    store: ObjectStore,
    directory: Path,
    opened: list[tuple[LogManager, WalWriter]],
    failures: Any = None,
    **wal_options: Any,
) -> LogManager:
    wal = WalWriter(directory / "wal", file_size=WAL_FILE_SIZE, **wal_options)
    logs = LogManager(store, NS, wal, Settings(**SETTINGS), on_failure=failures)
    opened.append((logs, wal))
    await logs.start()
    return logs


def test_a_failed_wal_write_fails_the_log_and_in_flight_producers_get_56(
    local_store: ObjectStore, tmp_path: Path, opened: list[tuple[LogManager, WalWriter]]
) -> None:
    failures = Failures()

    async def body() -> None:
        logs = await open_log(local_store, tmp_path, opened, failures)
        await logs.create_topic(TOPIC, partitions=2)
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)
        assert logs.failed is None

        break_the_disk(logs.wal)
        in_flight = await asyncio.gather(
            *(logs.append(TOPIC, i % 2, make_batch(2), timeout_s=10) for i in range(6)),
            return_exceptions=True,
        )
        assert all(
            isinstance(e, LogStorageError) and e.kafka_error_code == KAFKA_STORAGE_ERROR
            for e in in_flight
        ), in_flight

        assert isinstance(logs.failed, WalWriteFailed)
        assert "No space left on device" in str(logs.failed)
        assert failures.errors == [logs.failed]  # once, on the loop
        assert failures.on_loop == [True]
        with pytest.raises(LogStorageError, match="restarts") as later:
            await logs.append(TOPIC, 1, make_batch(1), timeout_s=10)
        assert later.value.kafka_error_code == KAFKA_STORAGE_ERROR
        assert len(failures.errors) == 1

        # Reads go on, and show exactly what was acknowledged.
        assert [o for o, _ in offsets_and_values(await read_all(logs, TOPIC, 0))] == [0, 1, 2]
        assert await logs.high_watermark(TOPIC, 1) == 0
        await logs.close(flush=False)  # as a killed daemon: only the WAL has the batch

    run(body())

    async def restart() -> None:
        wal = WalWriter(tmp_path / "wal", file_size=WAL_FILE_SIZE)
        logs = LogManager(local_store, NS, wal, Settings(**SETTINGS))
        opened.append((logs, wal))
        report = await logs.start()
        assert (report.replayed_batches, report.skipped_batches) == (1, 0)
        assert [o for o, _ in offsets_and_values(await read_all(logs, TOPIC, 0))] == [0, 1, 2]
        assert (await logs.append(TOPIC, 0, make_batch(1), timeout_s=10)).base_offset == 3
        assert logs.failed is None
        await logs.close()

    run(restart())


def test_a_failed_checkpoint_fails_the_log_though_no_producer_waits(
    local_store: ObjectStore, tmp_path: Path, opened: list[tuple[LogManager, WalWriter]]
) -> None:
    failures = Failures()

    async def body() -> None:
        logs = await open_log(local_store, tmp_path, opened, failures)
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)
        break_the_disk(logs.wal)
        await logs.flush()  # the commit lands; the WAL checkpoint after it cannot be written
        assert isinstance(logs.failed, WalWriteFailed)
        assert failures.errors == [logs.failed]
        with pytest.raises(LogStorageError):
            await logs.append(TOPIC, 0, make_batch(1), timeout_s=10)
        assert (await logs.catalog_state(TOPIC, 0)).high_watermark == 3
        await logs.close()

    run(body())


def test_a_failed_background_fsync_reaches_the_log_through_the_wal_listener(
    local_store: ObjectStore, tmp_path: Path, opened: list[tuple[LogManager, WalWriter]]
) -> None:
    """``normal`` mode acknowledges before the fsync; the timed fsync fails with nobody waiting."""
    failures = Failures()

    async def body() -> None:
        logs = await open_log(
            local_store, tmp_path, opened, failures, durability="normal", normal_sync_ms=300
        )
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)  # written, not yet fsynced
        break_the_disk(logs.wal)
        await eventually(lambda: logs.failed is not None, what="the log to fail")
        assert isinstance(logs.failed, WalWriteFailed)
        assert "Invalid argument" in str(logs.failed)  # fdatasync on /dev/full: EINVAL
        assert failures.errors == [logs.failed] and failures.on_loop == [True]
        with pytest.raises(LogStorageError):
            await logs.append(TOPIC, 0, make_batch(1), timeout_s=10)
        await logs.close()

    run(body())
