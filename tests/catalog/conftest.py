"""Catalog test helpers: segment factories, a fault-injecting store wrapper, tier markers.

Tests that touch S3 (the ``s3`` side of the ``store`` fixture, or moto
directly) are marked ``integration``; the rest ``unit``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kfs_core.catalog import SegmentEntry
from kfs_core.catalog.layout import index_key_for, segment_key
from kfs_core.errors import TransientStoreError
from kfs_core.storage.base import ByteRange, ObjectInfo, ObjectStore

TOPIC = "orders"
PARTITION = 0
NS = "ns"

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE not in Path(str(item.fspath)).parents:
            continue
        callspec = getattr(item, "callspec", None)
        uses_s3 = (
            "s3_store" in getattr(item, "fixturenames", ())
            or "moto_server" in getattr(item, "fixturenames", ())
            or (callspec is not None and callspec.params.get("store") == "s3")
        )
        if uses_s3:
            item.add_marker(pytest.mark.integration)
        elif item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)


def seg(
    base: int,
    count: int = 10,
    *,
    topic: str = TOPIC,
    partition: int = PARTITION,
    suffix: str = "",
    size: int = 1000,
    created_ms: int = 1_700_000_000_000,
) -> SegmentEntry:
    """A segment holding offsets ``base`` .. ``base + count - 1``."""
    key = segment_key(topic, partition, base, suffix)
    return SegmentEntry(
        base_offset=base,
        last_offset=base + count - 1,
        record_count=count,
        size_bytes=size,
        index_size_bytes=16,
        min_timestamp=created_ms - 500,
        max_timestamp=created_ms,
        codec=0,
        created_ms=created_ms,
        key=key,
        index_key=index_key_for(key),
    )


class FaultyStore(ObjectStore):
    """Delegates to a real store; `fail` makes matching calls fail in a chosen way.

    Modes: ``"after"`` performs the call and then raises (the response was
    lost), ``"before"`` raises without performing it.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self._lock = threading.Lock()
        self._rules: list[tuple[str, Callable[[str], bool], str, int]] = []
        self.calls: list[tuple[str, str]] = []

    def fail(
        self, operation: str, when: Callable[[str], bool], mode: str = "before", times: int = 1
    ) -> None:
        with self._lock:
            self._rules.append((operation, when, mode, times))

    def _fault(self, operation: str, key: str) -> str | None:
        with self._lock:
            self.calls.append((operation, key))
            for i, (op, when, mode, times) in enumerate(self._rules):
                if op == operation and when(key) and times != 0:
                    self._rules[i] = (op, when, mode, times - 1)
                    return mode
        return None

    def _run(self, operation: str, key: str, call: Callable[[], object]) -> object:
        mode = self._fault(operation, key)
        if mode == "before":
            raise TransientStoreError(f"injected failure before {operation} {key}")
        result = call()
        if mode == "after":
            raise TransientStoreError(f"injected failure after {operation} {key}")
        return result

    def put(self, key: str, data: bytes) -> ObjectInfo:
        return self._run("put", key, lambda: self.inner.put(key, data))  # type: ignore[return-value]

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        return self._run("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))  # type: ignore[return-value]

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self._run("get", key, lambda: self.inner.get(key, byte_range))  # type: ignore[return-value]

    def head(self, key: str) -> ObjectInfo:
        return self._run("head", key, lambda: self.inner.head(key))  # type: ignore[return-value]

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        self._fault("list", prefix)
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self._run("delete", key, lambda: self.inner.delete(key))


@pytest.fixture
def faulty(store: ObjectStore) -> FaultyStore:
    return FaultyStore(store)
