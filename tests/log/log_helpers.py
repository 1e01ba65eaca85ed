"""Helpers for the partition-log tests: batches, an instrumented store, a harness, async waits.

`InstrumentedStore` wraps a real store (local or S3 on moto): it records every
GET of a segment or index object (so tests count the GETs of a fetch), can
fail the next PUTs, and can hold PUTs at a gate (a stuck store) until the
test opens it.  `Harness` opens `LogManager`s with real `WalWriter`s in a
temporary directory and "crashes" them (no flush, WAL closed) or shuts them
down cleanly.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kfs_core.config import Settings
from kfs_core.errors import TransientStoreError
from kfs_core.log import LogManager, ReadResult, StartReport
from kfs_core.log.wal import WalWriter
from kfs_core.records.batch import Record, RecordBatch, encode_batch, iter_batches
from kfs_core.storage.base import ByteRange, ObjectInfo, ObjectStore

T = TypeVar("T")

NS = "ns"
TOPIC = "events"
TIMESTAMP_BASE = 1_700_000_000_000
WAL_FILE_SIZE = 1 << 20  # small WAL files: tests roll and recover quickly

#: Settings under which nothing flushes unless the test says so.
MANUAL_FLUSH = {
    "flush_interval_ms": 3_600_000,
    "segment_bytes": 1 << 30,
    "catalog_refresh_ms": 3_600_000,
    "idle_refresh_ms": 3_600_000,
    "retry_base_ms": 1,
    "retry_max_ms": 20,
}


def both_stores() -> Any:
    """A fixture over the local-directory store and S3 on moto, the S3 half marked integration.

    Bind it in a test module as ``any_store = both_stores()``.
    """

    @pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
    def any_store(request: pytest.FixtureRequest) -> ObjectStore:
        store: ObjectStore = request.getfixturevalue(f"{request.param}_store")
        return store

    return any_store


# --- batches ------------------------------------------------------------------


def make_batch(
    values: list[bytes] | int,
    *,
    timestamp: int = TIMESTAMP_BASE,
    size: int = 8,
    tag: str = "v",
    **options: Any,
) -> bytes:
    """A batch of ``values`` (or of that many generated values of ``size`` bytes).

    Record ``i`` has timestamp ``timestamp + i`` and key ``k{i}``.
    """
    if isinstance(values, int):
        values = [f"{tag}{i}:".encode().ljust(size, b"x") for i in range(values)]
    records = [Record(i, timestamp + i, f"k{i}".encode(), value) for i, value in enumerate(values)]
    return encode_batch(records, **options)


def decode_all(data: bytes) -> list[RecordBatch]:
    return list(iter_batches(data))


def offsets_and_values(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for b in iter_batches(data) for r in b.records]


# --- the instrumented store -----------------------------------------------------


@dataclass(frozen=True)
class Get:
    key: str
    byte_range: ByteRange | None


class InstrumentedStore(ObjectStore):
    """A real store that counts data GETs, and can fail or hold PUTs."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self._lock = threading.Lock()
        self.gets: list[Get] = []
        self.puts: list[str] = []
        self.fail_puts = 0  # the next this many puts and put_if_absents raise
        self.put_gate = threading.Event()
        self.put_gate.set()  # open
        self.held = 0  # puts waiting at the closed gate
        self.put_many_calls = 0  # running now
        self.most_put_many_calls = 0  # running at once, at most

    def data_gets(self) -> list[Get]:
        """GETs of segment and index objects (not the catalog's)."""
        with self._lock:
            return [g for g in self.gets if g.key.endswith((".kfs", ".index"))]

    def reset(self) -> None:
        with self._lock:
            self.gets.clear()
            self.puts.clear()

    def _before_write(self, key: str) -> None:
        with self._lock:
            self.held += 1
        try:
            if not self.put_gate.wait(60):
                raise TimeoutError("the test never opened the put gate")
        finally:
            with self._lock:
                self.held -= 1
        with self._lock:
            self.puts.append(key)
            if self.fail_puts > 0:
                self.fail_puts -= 1
                raise TransientStoreError(f"injected failure writing {key}")

    def put(self, key: str, data: bytes) -> ObjectInfo:
        self._before_write(key)
        return self.inner.put(key, data)

    def put_many(
        self, objects: Sequence[tuple[str, Sequence[bytes | bytearray | memoryview]]]
    ) -> list[ObjectInfo]:
        with self._lock:
            self.put_many_calls += 1
            self.most_put_many_calls = max(self.most_put_many_calls, self.put_many_calls)
        try:
            return super().put_many(objects)
        finally:
            with self._lock:
                self.put_many_calls -= 1

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        self._before_write(key)
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        with self._lock:
            self.gets.append(Get(key, byte_range))
        return self.inner.get(key, byte_range)

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


# --- running coroutines and waiting ----------------------------------------------


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    """Run ``coro`` on a fresh event loop, failing loudly if it hangs."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


async def eventually(
    condition: Callable[[], Any], *, timeout: float = 10.0, what: str = "condition"
) -> Any:
    """Poll ``condition`` on the loop until it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


async def eventually_equal(
    get: Callable[[], Awaitable[T]], expected: T, *, timeout: float = 10.0
) -> None:
    """Await ``get()`` repeatedly until it returns ``expected``; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (value := await get()) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {value!r}, expected {expected!r}")
        await asyncio.sleep(0.005)


async def read_all(
    logs: LogManager, topic: str, partition: int, start: int = 0, max_bytes: int = 1 << 20
) -> bytes:
    """Fetch from ``start`` to the high watermark as a consumer does; check each step advances."""
    out = bytearray()
    offset = start
    while True:
        result: ReadResult = await logs.read(topic, partition, offset, max_bytes)
        if not result.records:
            assert offset == result.high_watermark, f"empty fetch at {offset} below the HW"
            return bytes(out)
        batches = decode_all(result.records)
        assert batches[0].base_offset <= offset <= batches[0].last_offset or (
            batches[0].base_offset > offset  # a gap left by compaction
        )
        out += result.records
        offset = batches[-1].last_offset + 1


# --- the harness ---------------------------------------------------------------------


class Harness:
    """Opens log managers on one store and one WAL directory, as restarts of one daemon."""

    def __init__(self, store: ObjectStore, directory: Path, **settings: Any) -> None:
        self.store = store
        self.wal_dir = directory / "wal"
        self.settings = {**MANUAL_FLUSH, **settings}
        self.open_managers: list[LogManager] = []
        self.last_report: StartReport | None = None

    async def open(self, *, clock: Callable[[], int] | None = None, **settings: Any) -> LogManager:
        """Start a log manager (WAL recovery, replay, flush) with the harness settings."""
        wal = WalWriter(self.wal_dir, file_size=WAL_FILE_SIZE)
        logs = LogManager(
            self.store, NS, wal, Settings(**{**self.settings, **settings}), clock=clock
        )
        self.open_managers.append(logs)
        self.last_report = await logs.start()
        return logs

    async def crash(self, logs: LogManager) -> None:
        """Stop as a killed daemon would: nothing flushed, the WAL files left as they are."""
        await logs.close(flush=False)
        logs.wal.close()
        self.open_managers.remove(logs)

    async def shutdown(self, logs: LogManager) -> None:
        """A graceful stop: flush, then close the WAL."""
        await logs.close()
        logs.wal.close()
        self.open_managers.remove(logs)

    async def close_all(self) -> None:
        for logs in list(self.open_managers):
            await self.crash(logs)


def run_harness(
    store: ObjectStore,
    directory: Path,
    body: Callable[[Harness], Awaitable[T]],
    *,
    timeout: float = 60.0,
    **settings: Any,
) -> T:
    """Run ``body(harness)`` on one event loop; managers it leaves open are crashed afterwards."""

    async def main() -> T:
        harness = Harness(store, directory, **settings)
        try:
            return await body(harness)
        finally:
            await harness.close_all()

    return run(main(), timeout)
