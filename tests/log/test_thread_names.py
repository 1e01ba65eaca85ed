"""The daemon's long-lived threads carry their names to the OS (top -H, perf, /proc)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from kfs_core.storage.base import ObjectStore
from kfs_core.threads import OS_NAME_BYTES, name_os_thread
from tests.log.log_helpers import TOPIC, Harness, make_batch, run_harness

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/task")


def os_thread_names() -> set[str]:
    return {p.read_text().strip() for p in Path("/proc/self/task").glob("*/comm")}


def test_the_wal_writer_and_the_io_threads_are_named_for_the_os(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    async def body(h: Harness) -> set[str]:
        logs = await h.open()
        await logs.create_topic(TOPIC)
        await logs.append(TOPIC, 0, make_batch(3), timeout_s=10)
        await logs.flush()  # seals, uploads and commits on the I/O threads
        names = os_thread_names()
        await h.shutdown(logs)
        return names

    names = run_harness(local_store, tmp_path, body)
    assert "kfs-wal-writer" in names
    assert any(n.startswith("kfs-log-io_") for n in names), names
    assert any(n.startswith("kfs-catalog_") for n in names), names


def test_a_long_name_is_cut_to_what_linux_keeps() -> None:
    seen: list[str] = []

    def work() -> None:
        name_os_thread()
        seen.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip())

    thread = threading.Thread(target=work, name="kfs-a-rather-long-thread-name")
    thread.start()
    thread.join()
    assert seen == ["kfs-a-rather-long-thread-name"[:OS_NAME_BYTES]]
