"""Helpers for the WAL tests (`test_wal_writer`, `test_wal_recovery`): restarts on a directory.

Each "restart" is a fresh `WalWriter` on the same directory, so what it
recovers is exactly what a daemon restarted after a crash would replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kfs_core.log.wal import RecoveredBatch, WalRecovery, WalWriter

SMALL = 4096  # a WAL file of a few frames, so tests roll often


def reopen(wal_dir: Path, **options: object) -> tuple[WalWriter, WalRecovery]:
    """A fresh writer on ``wal_dir`` after a restart, and what it recovered."""
    writer = WalWriter(wal_dir, **options)  # type: ignore[arg-type]
    recovery = writer.recover()
    return writer, recovery


def recovered(wal_dir: Path, **options: object) -> WalRecovery:
    """What a restart on ``wal_dir`` recovers; the writer is closed again."""
    writer, recovery = reopen(wal_dir, **options)
    writer.close()
    return recovery


def recovered_map(records: Iterable[RecoveredBatch]) -> dict[tuple[str, int, int], bytes]:
    return {(r.topic, r.partition, r.base_offset): r.batch for r in records}


def wal_paths(wal_dir: Path) -> list[Path]:
    return sorted(wal_dir.glob("*.wal"))
