"""WAL test fixtures and tier markers.

Tests here are ``unit`` unless they say otherwise (the kill -9 test is
``integration``, the benchmark ``bench``).  The fsync gate lets a test hold the
writer thread inside its fsync, to watch what queues up meanwhile without
sleeping.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kfs_core.log.wal import WalWriter
from kfs_core.log.wal import writer as wal_writer

_HERE = Path(__file__).parent
_TIERS = ("integration", "slow", "bench", "spark", "airflow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE not in Path(str(item.fspath)).parents:
            continue
        if not any(item.get_closest_marker(tier) for tier in _TIERS):
            item.add_marker(pytest.mark.unit)


class FsyncGate:
    """Stands in for ``fdatasync``: blocks the first ``hold`` calls until released.

    ``entered`` is set when a held call is waiting; ``frames`` is filled by the
    writer's fsync observer when the test wires it up.
    """

    def __init__(self, hold: int = 1, fail: OSError | None = None) -> None:
        self.hold = hold
        self.fail = fail
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
            held = self.calls <= self.hold
        if held:
            self.entered.set()
            if not self.release.wait(30):
                raise TimeoutError("the test never released the fsync gate")
        if self.fail is not None:
            raise self.fail
        os.fdatasync(fd)


@pytest.fixture
def fsync_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncGate]:
    gate = FsyncGate()
    monkeypatch.setattr(wal_writer, "_fdatasync", gate)
    yield gate
    gate.release.set()  # never leave a writer thread stuck


@pytest.fixture
def wal_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "wal"


@pytest.fixture(params=["direct", "page-cache"])
def open_wal(request: pytest.FixtureRequest, wal_dir: Path) -> Iterator[Callable[..., WalWriter]]:
    """Open (construct + recover) managers on ``wal_dir``; every one is closed afterwards.

    Each test runs twice: with the WAL's ``O_DIRECT`` appends, and through the page cache.
    """
    opened: list[WalWriter] = []

    def open_(**options: object) -> WalWriter:
        directory = options.pop("directory", wal_dir)
        options.setdefault("direct_io", request.param == "direct")
        manager = WalWriter(directory, **options)  # type: ignore[arg-type]
        opened.append(manager)
        manager.recover()
        return manager

    yield open_
    for manager in opened:
        with contextlib.suppress(Exception):  # a test that broke the WAL on purpose
            manager.close()
