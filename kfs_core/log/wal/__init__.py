"""The write-ahead log of the ``kfs serve`` daemon: every produced batch, durable before its ack.

The rooms:

- `writer`       — `WalWriter`: the writer thread, group commit, the
  durability modes, failure, close; `WalAppend`, `WalMetrics`.
- `active_file`  — `ActiveFile`: the file the writer appends to
  (``O_DIRECT`` where the filesystem allows, ``pwritev`` otherwise).
- `ring`         — `FileRing`: the ring of fixed-size files -- creating,
  spares prepared ahead, rolls, recycling flushed files.
- `checkpoints`  — `Checkpoints`: flushed offsets per partition, CHECKPOINT
  frames, which files they free, the copies a new file starts with.
- `out_of_space` — `OutOfSpace`: waiting for disk space instead of failing.
- `recovery`     — `recover_wal`, `WalRecovery`: the start-up scan, torn
  tails, what to replay.
- `files`        — what all of them share: file names, `WalPosition`,
  `WalFile`, the syscalls.
- `store`        — the ``store`` durability mode: `StoreWal`, a `WalWriter`
  whose appends become one object store PUT per interval, and
  `StoreWalReader`, which replays a partition's batches from every daemon's
  WAL objects on takeover and sweeps the objects nothing needs.
- `protocol`     — `WalLike`: the names the log uses, met by both writers.

The frame format itself is `kfs_core.formats.wal`; the store WAL's object
(a header with a table of contents, then those frames) is drawn in `store`.
The log uses the WAL through `WalLike` (appends, checkpoints, ``recover``)
and replays what `WalRecovery` returns (`kfs_core.log.appender`); in
``store`` mode what `StoreWalReader.read_partition` returns, on takeover.
"""

from kfs_core.log.wal.files import WalPosition, wal_file_name
from kfs_core.log.wal.protocol import WalLike
from kfs_core.log.wal.recovery import (
    RecoveredBatch,
    RecoveredWal,
    TornTail,
    WalCut,
    WalRecovery,
    recover_wal,
)
from kfs_core.log.wal.store import StoreWal, StoreWalMetrics, StoreWalReader
from kfs_core.log.wal.writer import (
    DEFAULT_FILE_SIZE,
    Durability,
    FailureListener,
    FsyncObserver,
    StageObserver,
    WalAppend,
    WalMetrics,
    WalWriter,
)

__all__ = [
    "DEFAULT_FILE_SIZE",
    "Durability",
    "FailureListener",
    "FsyncObserver",
    "RecoveredBatch",
    "RecoveredWal",
    "StageObserver",
    "StoreWal",
    "StoreWalMetrics",
    "StoreWalReader",
    "TornTail",
    "WalAppend",
    "WalCut",
    "WalLike",
    "WalMetrics",
    "WalPosition",
    "WalRecovery",
    "WalWriter",
    "recover_wal",
    "wal_file_name",
]
