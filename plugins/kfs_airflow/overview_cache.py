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
  partition whose version did not move keeps its `PartitionSummary`.  It also
  keeps the headers of the ``durability=store`` WAL objects it has read (they
  never change; `kfs_airflow.overview.read_cluster`), so a refresh reads only
  the new ones; the heartbeats are a handful of small objects, read every time.
  Every store read still goes through the hook's client; this module opens nothing.
- A request with a copy younger than the maximum age (``KFS_PAGE_MAX_AGE_S``,
  default 30 s) gets it at once, marked with ``as_of``, ``age_s`` and
  ``refreshing``, and starts a background refresh (one thread at a time per
  store; not for a copy younger than `BACKGROUND_AFTER_S`).  Any other request
  waits for a refresh, at most ``KFS_PAGE_WAIT_S`` (default 1 s): a page with
  many partitions on a slow store still answers within about that, with the
  newest copy there is, marked ``refreshing``, or, with none at all, a
  ``loading`` overview counting the partitions read so far (the page reloads
  itself until the data is there).  ``KFS_PAGE_MAX_AGE_S=0`` makes every
  request wait for its own (incremental) read: "write, then load the page"
  shows the write whenever that read fits the wait.
- Every refresh that read something new writes the overview back to the store
  (``{ns}/_page/overview.json``, `StoredCopy`; one PUT, skipped when nothing
  shown changed but the heartbeats' clocks and ages; after a refusal, such as read-only credentials, tried again
  every `COPY_RETRY_S`, with one warning).  An
  api-server that starts, or a store seen for the first time, serves that copy
  (with its age) while its own first read of every catalog runs: a restart does
  not leave the page empty for the minute a thousand catalogs take on S3.

Nothing raises out of here: a store that cannot be read is an `Overview` whose
``problems`` say so, as `read_overview` does for everything below it.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kfs_airflow.overview import (
    Overview,
    PartitionSummary,
    describe_error,
    partition_summary,
    read_overview,
    unavailable,
    unreadable_partition,
)
from kfs_core.reports import redact_url

if TYPE_CHECKING:
    from kfs_airflow.hooks import KfsHook
    from kfs_core.catalog import PartitionCatalog
    from kfs_core.log.wal.store import WalObjectHeader

__all__ = [
    "BACKGROUND_AFTER_S",
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_WAIT_S",
    "MAX_AGE_ENV",
    "MAX_STORES",
    "WAIT_ENV",
    "OverviewCache",
    "StoreCache",
    "StoredCopy",
    "max_age_from_env",
    "wait_from_env",
]

log = logging.getLogger(__name__)

#: The environment variable holding the maximum age, in seconds, of a copy the page serves.
MAX_AGE_ENV = "KFS_PAGE_MAX_AGE_S"
DEFAULT_MAX_AGE_S = 30.0
#: The environment variable holding how long, in seconds, a request waits for a refresh.
WAIT_ENV = "KFS_PAGE_WAIT_S"
DEFAULT_WAIT_S = 1.0
#: A copy younger than this is served without starting a refresh: a page reloaded
#: by several people at once must not turn into back-to-back reads of every catalog.
BACKGROUND_AFTER_S = 2.0
#: Stores kept at once (one per connection setting seen recently).
MAX_STORES = 4
#: After the store refused the page's copy, how long until the next try.
COPY_RETRY_S = 300.0

Clock = Callable[[], float]


def max_age_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``KFS_PAGE_MAX_AGE_S`` (seconds, >= 0); `DEFAULT_MAX_AGE_S` when unset or unusable."""
    return _seconds_from_env(MAX_AGE_ENV, DEFAULT_MAX_AGE_S, environ)


def wait_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``KFS_PAGE_WAIT_S`` (seconds, >= 0, ``inf`` allowed); `DEFAULT_WAIT_S` when unset or unusable."""
    return _seconds_from_env(WAIT_ENV, DEFAULT_WAIT_S, environ)


def _seconds_from_env(name: str, default: float, environ: Mapping[str, str] | None) -> float:
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isnan(value):
        log.warning("%s=%r is not a number of seconds; using %s", name, raw, default)
        return default
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
    `PartitionCatalog` objects made (each costs a full load on first use),
    ``copies_saved`` the overviews written back to the store.
    """

    def __init__(self, hook: KfsHook, *, clock: Clock = time.monotonic) -> None:
        self.hook = hook
        self._clock = clock
        # Guards _latest, _running, _closed, the progress and the counters; notified
        # whenever a copy arrives or a refresh ends.
        self._cond = threading.Condition()
        self._latest: _Copy | None = None
        self._running = False  # a refresh thread owns the hook (reading, or saving its copy)
        self._reading = False  # ... and has not published its copy yet
        self._closed = False
        self._read = 0  # partitions read by the running refresh
        self._total: int | None = None  # partitions it will read (None: not listed yet)
        # Touched only by the running refresh (and its partition threads, each on its
        # own key; _seen is a set, whose add is atomic).
        self._catalogs: dict[tuple[str, int], PartitionCatalog] = {}
        self._summaries: dict[tuple[str, int], PartitionSummary] = {}
        self._seen: set[tuple[str, int]] = set()
        self._wal_headers: dict[str, WalObjectHeader] = {}  # store WAL headers by key
        self._copy_checked = False  # looked for the stored copy
        self._copy_retry_at = 0.0  # monotonic time before which no save is tried (0: none failed)
        self._stored_state: str | None = None  # what the stored copy holds (see _state_of)
        self.refreshes = 0
        self.catalogs_created = 0
        self.copies_saved = 0

    def read(self, max_age_s: float, wait_s: float = math.inf) -> Overview:
        """The overview, at once if a copy younger than ``max_age_s`` is kept.

        Otherwise a refresh runs, and the answer is the copy it reads if that
        takes at most ``wait_s``; past that, the newest copy there is (the
        stored one, or an older read), marked ``refreshing``; with no copy at
        all, a ``loading`` overview saying how far the first read got.
        """
        asked = self._clock()
        deadline = time.monotonic() + wait_s
        waited = False
        with self._cond:
            while True:
                latest = self._latest
                if waited and latest is not None and latest.started >= asked:
                    return latest.overview.model_copy()  # read for (or after) this request
                if latest is not None and asked - latest.started <= max_age_s:
                    refreshing = self._reading
                    if asked - latest.started >= BACKGROUND_AFTER_S:
                        refreshing = self._start_locked() or refreshing
                    return self._served(latest, asked, refreshing)
                if self._closed:
                    break
                if not self._reading:  # none running (or one only saving its copy)
                    self._start_locked()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                waited = True
                self._cond.wait(None if math.isinf(remaining) else remaining)
            if latest is not None:
                return self._served(latest, asked, self._reading)
            return Overview(
                namespace=self.hook.namespace,
                store_url=redact_url(self.hook.store_url),
                generated_at=_now(),
                loading=True,
                refreshing=self._reading,
                partitions_read=self._read,
                partitions_total=self._total,
            )

    def _served(self, copy: _Copy, asked: float, refreshing: bool) -> Overview:
        return copy.overview.model_copy(
            update={
                "generated_at": _now(),
                "as_of": copy.overview.generated_at,
                "age_s": round(max(0.0, asked - copy.started), 1),
                "refreshing": refreshing,
            }
        )

    @property
    def refreshing(self) -> bool:
        """Whether a read of the store is under way."""
        with self._cond:
            return self._reading

    def start_refresh(self) -> bool:
        """Start a background refresh unless one is running; whether this call started one."""
        with self._cond:
            return self._start_locked()

    def _start_locked(self) -> bool:
        if self._reading or self._closed:
            return False
        self._reading = True
        self._read, self._total = 0, None
        if self._running:  # the thread is saving its copy: it reads again after that
            return True
        self._running = True
        try:
            threading.Thread(target=self._background, name="kfs-page-refresh", daemon=True).start()
        except BaseException:
            self._running = self._reading = False
            raise
        return True

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until no refresh is running (tests, benches); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running, timeout_s)

    def close(self) -> None:
        """Forget the cache and close the hook (now, or when the running refresh ends)."""
        with self._cond:
            self._closed = True
            running = self._running
            self._cond.notify_all()
        if not running:
            self._close_hook()

    # --- reading ------------------------------------------------------------------

    def _background(self) -> None:
        closed = False
        try:
            if not self._copy_checked:
                self._copy_checked = True
                self._load_stored_copy()
            while True:
                self._save_copy(self._refresh())
                with self._cond:
                    if self._reading and not self._closed:
                        continue  # asked for another read while this one was saving
                    # Decided and released under one lock: a request never finds a
                    # running thread that is about to leave without its read.
                    self._running = False
                    closed = self._closed
                    self._cond.notify_all()
                    break
        except Exception:  # _refresh keeps its errors; a thread must not die noisily
            log.exception("KFS page: background refresh failed")
            with self._cond:
                self._running = self._reading = False
                closed = self._closed
                self._cond.notify_all()
        if closed:
            self._close_hook()

    def _close_hook(self) -> None:
        # Called once no refresh runs, so no read is using the hook's client.
        self._catalogs.clear()
        self._summaries.clear()
        self._wal_headers.clear()
        self.hook.close()

    def _publish(self, copy: _Copy) -> None:
        with self._cond:
            if self._latest is None or copy.started >= self._latest.started:
                self._latest = copy
            self._cond.notify_all()

    def _refresh(self) -> _Copy:
        started = self._clock()
        self._seen = set()
        try:
            overview = read_overview(
                self.hook,
                read_partition=self._read_partition,
                planned=self._planned,
                wal_headers=self._wal_headers,
            )
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
        with self._cond:
            self.refreshes += 1
            self._reading = False
        self._publish(copy)
        return copy

    def _planned(self, total: int) -> None:
        with self._cond:
            self._total = total

    def _read_partition(self, topic: str, partition: int) -> PartitionSummary:
        try:
            return self._partition_summary(topic, partition)
        finally:
            with self._cond:
                self._read += 1

    def _partition_summary(self, topic: str, partition: int) -> PartitionSummary:
        key = (topic, partition)
        self._seen.add(key)
        try:
            catalog = self._catalogs.get(key)
            if catalog is None:
                catalog = self.hook.partition_catalog(topic, partition)
                self._catalogs[key] = catalog
                with self._cond:
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

    # --- the stored copy ------------------------------------------------------------

    def _load_stored_copy(self) -> None:
        """Publish the copy an earlier process left in the store, if there is a usable one."""
        try:
            data = self.hook.page_copy()
            if data is None:
                return
            overview = StoredCopy.model_validate_json(data).overview
            read_at = _dt.datetime.fromisoformat(overview.generated_at)
            if read_at.tzinfo is None:
                read_at = read_at.replace(tzinfo=_dt.UTC)
            age = max(0.0, (_dt.datetime.now(_dt.UTC) - read_at).total_seconds())
        except Exception as exc:  # noqa: BLE001 - only a head start: the refresh reads anyway
            log.warning(
                "KFS page: ignoring the stored copy of the overview: %s", describe_error(exc)
            )
            return
        if overview.namespace != self.hook.namespace:
            return
        self._stored_state = _state_of(overview)
        self._publish(_Copy(overview, self._clock() - age))

    def _save_copy(self, copy: _Copy) -> None:
        """Write ``copy`` back to the store when it says something the stored one does not."""
        overview = copy.overview
        if time.monotonic() < self._copy_retry_at or overview.problems or overview.loading:
            return
        state = _state_of(overview)
        if state == self._stored_state:
            return
        try:
            self.hook.save_page_copy(StoredCopy(overview=overview).model_dump_json().encode())
        except Exception as exc:  # noqa: BLE001 - read-only credentials are fine for the page
            # Read-only credentials, or the store failing for now: try again later.
            if self._copy_retry_at == 0.0:
                log.warning(
                    "KFS page: cannot store its copy of the overview (%s); trying again every "
                    "%.0f s. Until it can, a restarted api-server reads every catalog before "
                    "showing them",
                    describe_error(exc),
                    COPY_RETRY_S,
                )
            self._copy_retry_at = time.monotonic() + COPY_RETRY_S
            return
        self._copy_retry_at = 0.0
        self._stored_state = state
        with self._cond:
            self.copies_saved += 1


class StoredCopy(BaseModel):
    """What ``{ns}/_page/overview.json`` holds: the page's newest overview, as it was read."""

    format: int = 1
    overview: Overview


def _state_of(overview: Overview) -> str:
    """The overview without what ticks by itself: equal when nothing shown changed.

    Left out: the time of the read, and each heartbeat's clock, age and
    sequence number and each commit's age (a daemon's change of state counts).
    """
    doc = overview.model_dump(mode="json", exclude={"generated_at"})
    cluster = doc["cluster"]
    for daemon in cluster["daemons"]:
        for ticking in ("heartbeat_ms", "heartbeat_age_s", "seq"):
            del daemon[ticking]
    for topic in cluster["topics"]:
        for row in topic["partitions"]:
            del row["commit_age_s"]
    return json.dumps(doc, sort_keys=True)


class OverviewCache:
    """The page's per-process cache: a `StoreCache` per store identity.

    ``max_age_s`` fixes the maximum age and ``wait_s`` how long a request waits
    for a refresh (`math.inf`: until it ends); None reads ``KFS_PAGE_MAX_AGE_S``
    and ``KFS_PAGE_WAIT_S`` on every request (so they can be changed without
    restarting the api-server).
    """

    def __init__(
        self,
        *,
        max_age_s: float | None = None,
        wait_s: float | None = None,
        max_stores: int = MAX_STORES,
        clock: Clock = time.monotonic,
    ) -> None:
        self.max_age_s = max_age_s
        self.wait_s = wait_s
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
        wait = self.wait_s if self.wait_s is not None else wait_from_env()
        try:
            return store.read(max_age, wait)
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
