"""`LogFiles`: one partition's ``_log/`` directory and every store request made there.

The loader, the commit protocol and the checkpoint writer of a
`PartitionCatalog` share one `LogFiles`: it names the commit, checkpoint and
pointer keys (`kfs_core.catalog.layout`), counts each request (`IoStats`, so
tests and benchmarks can hold a load to its budget of GETs) and reads many
keys at once on the process-wide I/O thread pool (`io_pool`), which the topic
registry uses too.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from kfs_core.catalog import layout
from kfs_core.catalog.state import CheckpointPointer, decode_pointer
from kfs_core.errors import CorruptCatalog, ObjectNotFound
from kfs_core.storage.base import ObjectInfo, ObjectStore
from kfs_core.threads import name_os_thread

log = logging.getLogger(__name__)

IO_THREADS = 32


@dataclass(frozen=True)
class IoStats:
    """Store requests this catalog made (since creation or `reset_io_stats`)."""

    gets: int = 0  # including those that found nothing
    misses: int = 0  # GETs answered "not found"
    puts: int = 0
    lists: int = 0  # listing calls (each may be several pages)
    deletes: int = 0
    bytes_read: int = 0


# --- the shared I/O pool -----------------------------------------------------

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _reset_pool_after_fork() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()  # the parent's threads do not exist here


os.register_at_fork(after_in_child=_reset_pool_after_fork)


def io_pool() -> ThreadPoolExecutor:
    """The process-wide pool on which catalogs issue parallel GETs."""
    global _pool  # noqa: PLW0603 - one pool per process, created on first use, reset after fork
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=IO_THREADS, thread_name_prefix="kfs-catalog", initializer=name_os_thread
            )
        return _pool


class LogFiles:
    """The keys of one partition's log and the counted store requests on them. Thread-safe."""

    def __init__(self, store: ObjectStore, namespace: str, topic: str, partition: int) -> None:
        self.store = store
        self.prefix = layout.log_prefix(namespace, topic, partition)
        self.pointer_key = self.prefix + layout.POINTER_NAME
        self._stats_lock = threading.Lock()
        self._stats: dict[str, int] = dict.fromkeys(IoStats.__dataclass_fields__, 0)

    # --- keys ------------------------------------------------------------------

    def commit_key(self, version: int) -> str:
        return self.prefix + layout.commit_name(version)

    def checkpoint_key(self, version: int) -> str:
        return self.prefix + layout.checkpoint_name(version)

    def parse(self, key: str) -> tuple[int, bool] | None:
        """``(version, is_checkpoint)`` for a key under the log, None for anything else."""
        return layout.parse_log_name(key[len(self.prefix) :])

    # --- the pointer -------------------------------------------------------------

    def read_pointer(self) -> CheckpointPointer | None:
        data = self.get_or_none(self.pointer_key)
        if data is None:
            return None
        try:
            return decode_pointer(data, self.pointer_key)
        except CorruptCatalog as exc:
            # Only a hint: a listing finds the checkpoints without it.
            log.warning("ignoring unreadable checkpoint pointer: %s", exc)
            return None

    # --- counted store access ------------------------------------------------------

    def stats(self) -> IoStats:
        with self._stats_lock:
            return IoStats(**self._stats)

    def reset_stats(self) -> None:
        with self._stats_lock:
            self._stats = dict.fromkeys(self._stats, 0)

    def _count(self, name: str, amount: int = 1) -> None:
        with self._stats_lock:
            self._stats[name] += amount

    def get_or_none(self, key: str) -> bytes | None:
        self._count("gets")
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            self._count("misses")
            return None
        self._count("bytes_read", len(data))
        return data

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if len(keys) <= 1:
            return [self.get_or_none(k) for k in keys]
        futures: list[Future[bytes | None]] = [io_pool().submit(self.get_or_none, k) for k in keys]
        return [f.result() for f in futures]

    def put(self, key: str, data: bytes) -> None:
        self._count("puts")
        self.store.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> None:
        self._count("puts")
        self.store.put_if_absent(key, data)

    def list(self, start_after: str | None = None) -> Iterable[ObjectInfo]:
        """The log's objects in key order (so in version order), after ``start_after``."""
        self._count("lists")
        return self.store.list(self.prefix, start_after)

    def delete(self, key: str) -> None:
        self._count("deletes")
        self.store.delete(key)
