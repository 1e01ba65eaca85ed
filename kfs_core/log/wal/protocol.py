"""`WalLike`: what the log needs of a WAL, met by `WalWriter` and by `StoreWal`.

The partition log (`kfs_core.log.appender`, `flusher`, `log_manager`,
`partition_table`) uses its WAL through these names only, so a daemon in the
``store`` durability mode hands it a `kfs_core.log.wal.store.StoreWal`
where the local modes hand it a `kfs_core.log.wal.writer.WalWriter`.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol

from kfs_core.errors import WalWriteFailed
from kfs_core.log.wal.files import WalPosition
from kfs_core.log.wal.recovery import WalRecovery
from kfs_core.log.wal.writer import FailureListener, WalAppend, WalMetrics

__all__ = ["WalLike"]


class WalLike(Protocol):
    """A WAL as the log uses it: appends, checkpoints, recovery, failure, close."""

    @property
    def directory(self) -> str:
        """The local directory the log keeps its producer-state snapshots under."""
        ...

    @property
    def durability(self) -> str:
        """The durability mode (`kfs_core.config.DURABILITY_MODES`)."""
        ...

    @property
    def metrics(self) -> WalMetrics:
        """A snapshot of the counters."""
        ...

    @property
    def out_of_space(self) -> bool:
        """Whether appends should be refused until disk space is freed."""
        ...

    @property
    def failure(self) -> WalWriteFailed | None:
        """The failure that stopped the WAL; None while it works."""
        ...

    @property
    def pending_frames(self) -> int:
        """Frames queued and not yet taken by the writer."""
        ...

    @property
    def flushed_offsets(self) -> dict[tuple[str, int], int]:
        """The highest checkpointed offset of every partition."""
        ...

    def flushed_offset(self, topic: str, partition: int) -> int:
        """The partition's highest checkpointed offset; -1 when there is none."""
        ...

    def add_failure_listener(self, listener: FailureListener) -> None:
        """Call ``listener`` once when the WAL stops."""
        ...

    def recover(self) -> WalRecovery:
        """Start the WAL (once); what it holds that the log must replay."""
        ...

    def append_group(self, appends: list[WalAppend]) -> Future[list[WalPosition]]:
        """Queue the frames of one produce request; the future completes once durable."""
        ...

    def checkpoint(self, topic: str, partition: int, flushed_offset: int) -> object:
        """Record that the partition is stored up to ``flushed_offset``."""
        ...

    async def checkpoint_async(self, topic: str, partition: int, flushed_offset: int) -> object:
        """`checkpoint` for an event loop."""
        ...

    def forget_partition(self, topic: str, partition: int) -> None:
        """The log dropped the partition after a refused append: accept it afresh."""
        ...

    def wal_files(self) -> list[str]:
        """The WAL's live files (or objects), oldest first."""
        ...

    def close(self) -> None:
        """Write what is queued and stop."""
        ...
