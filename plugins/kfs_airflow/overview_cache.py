"""The KFS page's cache: catalog state kept between requests, refreshed in the background.

A namespace with a thousand partitions costs a thousand catalog loads (a
pointer, a checkpoint and the commits after it, each) when the page reads it
afresh (`kfs_airflow.overview.read_overview`).  The api-server creates the page's
app once per process, so the app keeps one `OverviewCache` (`kfs_airflow.ui`)
and answers from it:

- `OverviewCache` maps a store (`KfsHook.store_identity`: URL, namespace,
  endpoint and a digest of the credentials, so a changed connection never sees
  another's data) to a `StoreCache`; at most `MAX_STORES`, least recently used
  first out, their hooks closed.
- `StoreCache` keeps that store's hook open and one `PartitionCatalog` per
  partition (`KfsHook.partition_catalog`): a refresh calls each one's
  ``refresh``, which reads only the commits after the version it holds (an
  unchanged partition costs two "not found" probes instead of a load), and a
  partition whose version did not move keeps its `PartitionSummary`.  Every
  store read still goes through the hook's client; this module opens nothing.
- A request with nothing cached, or with a copy older than the maximum age
  (``KFS_PAGE_MAX_AGE_S``, default 30 s), waits for a read; otherwise it gets
  the latest copy at once, marked with ``as_of``, ``age_s`` and
  ``refreshing``, and starts a background refresh (one thread at a time per
  store; not for a copy younger than `BACKGROUND_AFTER_S`).  ``0`` makes every
  request wait for its own (incremental) read: "write, then load the page"
  always shows the write.

Nothing raises out of here: a store that cannot be read is an `Overview` whose
``problems`` say so, as `read_overview` does for everything below it.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kfs_airflow.overview import (
    Overview,
    PartitionSummary,
    describe_error,
    partition_summary,
    read_overview,
    unavailable,
    unreadable_partition,
)

if TYPE_CHECKING:
    from kfs_airflow.hooks import KfsHook
    from kfs_core.catalog import PartitionCatalog

__all__ = [
    "BACKGROUND_AFTER_S",
    "DEFAULT_MAX_AGE_S",
    "MAX_AGE_ENV",
    "MAX_STORES",
    "OverviewCache",
    "StoreCache",
    "max_age_from_env",
]

log = logging.getLogger(__name__)

#: The environment variable holding the maximum age, in seconds, of a copy the page serves.
MAX_AGE_ENV = "KFS_PAGE_MAX_AGE_S"
DEFAULT_MAX_AGE_S = 30.0
#: A copy younger than this is served without starting a refresh: a page reloaded
#: by several people at once must not turn into back-to-back reads of every catalog.
BACKGROUND_AFTER_S = 2.0
#: Stores kept at once (one per connection setting seen recently).
MAX_STORES = 4

Clock = Callable[[], float]


def max_age_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``KFS_PAGE_MAX_AGE_S`` (seconds, >= 0); `DEFAULT_MAX_AGE_S` when unset or unusable."""
    raw = (os.environ if environ is None else environ).get(MAX_AGE_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_AGE_S
    try:
        value = float(raw)
    except ValueError:
        log.warning(
            "%s=%r is not a number of seconds; using %s", MAX_AGE_ENV, raw, DEFAULT_MAX_AGE_S
        )
        return DEFAULT_MAX_AGE_S
    return max(0.0, value)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class _Copy:
    overview: Overview
    started: float  # clock() when its read began: the data is at least this new


class StoreCache:
    """One store's kept catalogs and its latest overview; owns ``hook`` until `close`.

    ``refreshes`` counts the overview reads made, ``catalogs_created`` the
    `PartitionCatalog` objects made (each costs a full load on first use).
    """

    def __init__(self, hook: KfsHook, *, clock: Clock = time.monotonic) -> None:
        self.hook = hook
        self._clock = clock
        self._lock = threading.Lock()  # _latest, _closed, the counters
        # Held by whoever reads the store for this cache: one refresh at a time.
        # A background refresh takes it in the request thread and releases it in
        # its own, which a Lock (unlike an RLock) allows.
        self._refresh_lock = threading.Lock()
        self._latest: _Copy | None = None
        self._closed = False
        # Touched only by the refresh holding _refresh_lock (and its partition threads,
        # each on its own key).
        self._catalogs: dict[tuple[str, int], PartitionCatalog] = {}
        self._summaries: dict[tuple[str, int], PartitionSummary] = {}
        self._seen: set[tuple[str, int]] = set()
        self.refreshes = 0
        self.catalogs_created = 0

    def read(self, max_age_s: float) -> Overview:
        """The overview: the cached copy if younger than ``max_age_s``, else a read waited for."""
        asked = self._clock()
        with self._lock:
            latest = self._latest
        if latest is None or asked - latest.started > max_age_s:
            return self._read_now(asked).overview.model_copy()
        refreshing = self.refreshing
        if asked - latest.started >= BACKGROUND_AFTER_S:
            refreshing = self.start_refresh() or refreshing
        age = max(0.0, asked - latest.started)
        return latest.overview.model_copy(
            update={
                "generated_at": _now(),
                "as_of": latest.overview.generated_at,
                "age_s": round(age, 1),
                "refreshing": refreshing,
            }
        )

    @property
    def refreshing(self) -> bool:
        """Whether a read of the store is under way."""
        return self._refresh_lock.locked()

    def start_refresh(self) -> bool:
        """Start a background refresh unless one is running; whether this call started one."""
        if not self._refresh_lock.acquire(blocking=False):
            return False
        try:
            threading.Thread(target=self._background, name="kfs-page-refresh", daemon=True).start()
        except BaseException:
            self._release()
            raise
        return True

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until no refresh is running (tests, benches); False on timeout."""
        if not self._refresh_lock.acquire(timeout=-1 if timeout_s is None else timeout_s):
            return False
        self._refresh_lock.release()
        return True

    def close(self) -> None:
        """Forget the cache and close the hook (now, or when the running refresh ends)."""
        with self._lock:
            self._closed = True
        if self._refresh_lock.acquire(blocking=False):
            self._release()

    # --- reading ------------------------------------------------------------------

    def _read_now(self, asked: float) -> _Copy:
        with self._refresh_lock:
            try:
                with self._lock:
                    latest = self._latest
                # A read that began after this request is as good as our own.
                if latest is not None and latest.started >= asked:
                    return latest
                return self._refresh()
            finally:
                self._close_if_closed()

    def _background(self) -> None:
        try:
            self._refresh()
        except Exception:  # _refresh keeps its errors; a thread must not die noisily
            log.exception("KFS page: background refresh failed")
        finally:
            self._release()

    def _release(self) -> None:
        self._close_if_closed()
        self._refresh_lock.release()

    def _close_if_closed(self) -> None:
        # Called with _refresh_lock held, so no read is using the hook's client.
        with self._lock:
            closed = self._closed
        if closed:
            self._catalogs.clear()
            self._summaries.clear()
            self.hook.close()

    def _refresh(self) -> _Copy:
        started = self._clock()
        self._seen = set()
        try:
            overview = read_overview(self.hook, read_partition=self._read_partition)
        except Exception as exc:  # noqa: BLE001 - read_overview keeps its own; belt and braces
            overview = unavailable(
                self.hook.namespace,
                self.hook.store_url,
                f"cannot read the namespace: {describe_error(exc)}",
            )
        # Partitions no longer listed (a deleted topic) let go of their catalogs;
        # unless the listing itself failed, which says nothing about them.
        if overview.topics or not overview.problems:
            for key in set(self._catalogs) - self._seen:
                del self._catalogs[key]
                self._summaries.pop(key, None)
        copy = _Copy(overview, started)
        with self._lock:
            self._latest = copy
            self.refreshes += 1
        return copy

    def _read_partition(self, topic: str, partition: int) -> PartitionSummary:
        key = (topic, partition)
        self._seen.add(key)
        try:
            catalog = self._catalogs.get(key)
            if catalog is None:
                catalog = self.hook.partition_catalog(topic, partition)
                self._catalogs[key] = catalog
                with self._lock:
                    self.catalogs_created += 1
            # The first call loads; later ones read only the commits after the known version.
            state = catalog.refresh()
        except Exception as exc:  # noqa: BLE001 - one damaged catalog must not hide the others
            self._summaries.pop(key, None)
            return unreadable_partition(topic, partition, exc)
        cached = self._summaries.get(key)
        if cached is not None and cached.catalog_version == state.version:
            return cached
        summary = partition_summary(topic, partition, state)
        self._summaries[key] = summary
        return summary


class OverviewCache:
    """The page's per-process cache: a `StoreCache` per store identity.

    ``max_age_s`` fixes the maximum age; None reads ``KFS_PAGE_MAX_AGE_S`` on
    every request (so it can be changed without restarting the api-server).
    """

    def __init__(
        self,
        *,
        max_age_s: float | None = None,
        max_stores: int = MAX_STORES,
        clock: Clock = time.monotonic,
    ) -> None:
        self.max_age_s = max_age_s
        self.max_stores = max(1, max_stores)
        self._clock = clock
        self._lock = threading.Lock()
        self._stores: OrderedDict[str, StoreCache] = OrderedDict()

    def overview(self, hook: KfsHook) -> Overview:
        """The overview of ``hook``'s namespace; takes ``hook`` (kept, or closed here)."""
        try:
            identity = hook.store_identity
        except Exception as exc:  # noqa: BLE001 - shown on the page
            hook.close()
            return unavailable("", "", f"cannot open the KFS store: {describe_error(exc)}")
        store = self.store(identity, hook)
        if store.hook is not hook:
            hook.close()  # the kept hook reads the same store
        max_age = self.max_age_s if self.max_age_s is not None else max_age_from_env()
        try:
            return store.read(max_age)
        except Exception as exc:  # noqa: BLE001 - StoreCache keeps its own; belt and braces
            return unavailable(
                hook.namespace, hook.store_url, f"cannot read the namespace: {describe_error(exc)}"
            )

    def store(self, identity: str, hook: KfsHook) -> StoreCache:
        """The `StoreCache` of ``identity``, made on ``hook`` if there is none."""
        evicted: list[StoreCache] = []
        with self._lock:
            store = self._stores.get(identity)
            if store is None:
                store = self._stores[identity] = StoreCache(hook, clock=self._clock)
                while len(self._stores) > self.max_stores:
                    evicted.append(self._stores.popitem(last=False)[1])
            else:
                self._stores.move_to_end(identity)
        for old in evicted:
            old.close()
        return store

    def close(self) -> None:
        """Close every kept store (their hooks close when running refreshes end)."""
        with self._lock:
            stores, self._stores = list(self._stores.values()), OrderedDict()
        for store in stores:
            store.close()
