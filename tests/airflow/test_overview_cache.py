"""The KFS page's cache (`kfs_airflow.overview_cache`) over real stores.

Data comes from ``tests.spark_jobs.data.write_topic`` and real `PartitionCatalog`
commits, on a local directory and on the session's moto S3 server over HTTP.
Store requests are counted by the log tests' `InstrumentedStore`, a pass-through
wrapper the test hook puts around the store client `KfsHook` opens (nothing is mocked:
every call reaches the real backend).  A settable clock stands in for
``time.monotonic`` where a test needs a copy of a given age.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kfs_core.catalog import PartitionCatalog, layout
from kfs_core.storage import ObjectStore, open_store
from tests.airflow.conftest import kfs_connection_env
from tests.log.log_helpers import InstrumentedStore
from tests.spark_jobs.data import write_topic

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`"),
]

NS = "ns"


def take_gets(store: InstrumentedStore) -> list[str]:
    """The keys GET since the last call (the store's counter starts again)."""
    keys = [get.key for get in list(store.gets)]
    store.reset()
    return keys


def _counting_hook() -> Any:
    from kfs_airflow.hooks import KfsHook

    class CountingHook(KfsHook):
        stores: ClassVar[list[InstrumentedStore]] = []

        def get_store(self) -> ObjectStore:
            store = InstrumentedStore(super().get_store())
            CountingHook.stores.append(store)
            return store

    return CountingHook


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def local_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A local store with topics orders (2 partitions) and clicks (1); kfs_default names it."""
    url = (tmp_path / "store").as_uri()
    store = open_store(url)
    write_topic(store, NS, "orders", partitions=2, segments=2, records_per_segment=10)
    write_topic(store, NS, "clicks", partitions=1, segments=1, records_per_segment=5)
    store.close()
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(url, NS))
    return url


@pytest.fixture
def s3_url(moto_server: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh prefix of the moto bucket with topic orders (2 partitions); kfs_default names it."""
    import uuid

    url = f"s3://{s3_bucket}/page-cache-{uuid.uuid4().hex[:8]}"
    store = open_store(url, endpoint_url=moto_server)
    write_topic(store, NS, "orders", partitions=2, segments=1, records_per_segment=10)
    store.close()
    monkeypatch.setenv(
        "AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(url, NS, s3_endpoint_url=moto_server)
    )
    yield url


def _open_store(url: str, moto: str | None = None) -> ObjectStore:
    return open_store(url, endpoint_url=moto) if moto else open_store(url)


def _partitions(overview: Any) -> dict[tuple[str, int], Any]:
    return {(p.topic, p.partition): p for t in overview.topics for p in t.partitions}


def test_an_unchanged_catalog_is_probed_not_reloaded_and_keeps_its_summary(
    local_url: str,
) -> None:
    from kfs_airflow.overview_cache import OverviewCache

    hook_class = _counting_hook()
    cache = OverviewCache(max_age_s=0.0)  # every request waits for its own read
    try:
        first = cache.overview(hook_class())
        assert not first.problems and first.as_of is None
        kept = hook_class.stores[0]
        cold = [key for key in take_gets(kept) if "/_log/" in key]
        assert cold, "the first read loads every catalog"

        second = cache.overview(hook_class())
        assert len(hook_class.stores) == 1  # the kept hook's client did every read
        warm = [key for key in take_gets(kept) if "/_log/" in key]
        # Per partition: exactly the next two versions, probed (not found); no pointer,
        # no checkpoint, no commit already applied.
        expected = []
        for (topic, partition), row in _partitions(first).items():
            prefix = layout.log_prefix(NS, topic, partition)
            expected += [prefix + layout.commit_name(row.catalog_version + n) for n in (1, 2)]
        assert sorted(warm) == sorted(expected)
        assert len(warm) < len(cold)
        for key, row in _partitions(second).items():
            assert row is _partitions(first)[key]  # the same summary object: not rebuilt
        store = cache.store(hook_class().store_identity, hook_class())
        assert store.catalogs_created == 3 and store.refreshes == 2
    finally:
        cache.close()


def test_a_new_commit_shows_after_the_background_refresh(s3_url: str, moto_server: str) -> None:
    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview_cache import OverviewCache

    clock = Clock()
    cache = OverviewCache(max_age_s=30.0, clock=clock)
    try:
        before = _partitions(cache.overview(KfsHook()))[("orders", 1)]
        writer = _open_store(s3_url, moto_server)
        catalog = PartitionCatalog(writer, NS, "orders", 1)
        catalog.set_log_start_offset(5)
        writer.close()

        clock.now += 5  # older than BACKGROUND_AFTER_S, younger than the maximum age
        stale = cache.overview(KfsHook())
        assert stale.refreshing and stale.as_of is not None
        assert _partitions(stale)[("orders", 1)] == before  # served at once, not yet refreshed
        store = cache.store(KfsHook().store_identity, KfsHook())
        assert store.wait(timeout_s=60)

        fresh = cache.overview(KfsHook())
        row = _partitions(fresh)[("orders", 1)]
        assert row.catalog_version == before.catalog_version + 1
        assert row.log_start_offset == 5
        assert _partitions(fresh)[("orders", 0)] is _partitions(stale)[("orders", 0)]
        assert store.catalogs_created == 2  # refreshed in place, never re-created
    finally:
        cache.close()


def test_as_of_age_and_refreshing_say_how_old_the_copy_is(local_url: str) -> None:
    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview_cache import OverviewCache

    clock = Clock()
    cache = OverviewCache(max_age_s=30.0, clock=clock)
    try:
        first = cache.overview(KfsHook())  # cold: read for this request
        assert (first.as_of, first.age_s, first.refreshing) == (None, None, False)

        clock.now += 1  # young: served without starting a refresh
        young = cache.overview(KfsHook())
        assert (young.as_of, young.age_s, young.refreshing) == (first.generated_at, 1.0, False)

        clock.now += 6.5
        old = cache.overview(KfsHook())
        assert (old.as_of, old.age_s, old.refreshing) == (first.generated_at, 7.5, True)
        assert old.generated_at >= first.generated_at
        assert old.topics == first.topics
        store = cache.store(KfsHook().store_identity, KfsHook())
        assert store.wait(timeout_s=60) and store.refreshes == 2

        clock.now += 31  # older than the maximum age: this request waits for a read
        waited = cache.overview(KfsHook())
        assert (waited.as_of, waited.age_s, waited.refreshing) == (None, None, False)
        assert store.refreshes == 3
    finally:
        cache.close()


def test_the_cache_is_per_store_and_credentials(
    tmp_path: Path, local_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview_cache import OverviewCache

    cache = OverviewCache(max_age_s=30.0, max_stores=1)
    try:
        assert [t.name for t in cache.overview(KfsHook()).topics] == ["clicks", "orders"]
        other = (tmp_path / "other").as_uri()
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(other, NS))
        served = cache.overview(KfsHook())
        assert served.topics == [] and served.as_of is None  # not the other store's copy
    finally:
        cache.close()

    def identity(password: str) -> str:
        conn = {"conn_type": "kfs", "password": password, "extra": {"store_url": local_url}}
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", json.dumps(conn))
        return str(KfsHook().store_identity)

    assert identity("s3cret") == identity("s3cret") != identity("rotated")
    assert "s3cret" not in identity("s3cret")


def test_nothing_raises_out_of_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview_cache import OverviewCache, max_age_from_env, wait_from_env

    url = (tmp_path / "s").as_uri()
    store = open_store(url)
    write_topic(store, NS, "orders", partitions=2, segments=1, records_per_segment=10)
    store.put(layout.log_prefix(NS, "orders", 0) + layout.commit_name(0), b"\x00garbage")
    store.close()
    cache = OverviewCache(max_age_s=0.0)
    try:
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(url, NS))
        for _ in range(2):  # cold, then refreshed: the damaged catalog is retried each time
            rows = _partitions(cache.overview(KfsHook()))
            assert rows[("orders", 0)].error and "CorruptCatalog" in rows[("orders", 0)].error
            assert rows[("orders", 1)].high_watermark == 10
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", '{"conn_type": "kfs", "extra": {}}')
        broken = cache.overview(KfsHook())
        assert "no store_url" in broken.problems[0]
    finally:
        cache.close()

    assert max_age_from_env({"KFS_PAGE_MAX_AGE_S": "5"}) == 5.0
    assert max_age_from_env({"KFS_PAGE_MAX_AGE_S": "soon"}) == 30.0
    assert max_age_from_env({}) == 30.0
    assert wait_from_env({"KFS_PAGE_WAIT_S": "inf"}) == math.inf
    assert wait_from_env({"KFS_PAGE_WAIT_S": "nan"}) == wait_from_env({}) == 1.0
    assert wait_from_env({"KFS_PAGE_WAIT_S": "-3"}) == 0.0


def test_the_page_says_how_old_its_catalog_state_is(local_url: str) -> None:
    from fastapi.testclient import TestClient
    from kfs_airflow.overview_cache import OverviewCache
    from kfs_airflow.ui import create_app, open_connection_namespace
    from kfs_airflow.ui.auth import airflow_user, airflow_user_page

    class User:
        def get_name(self) -> str:
            return "tester"

    clock = Clock()
    cache = OverviewCache(max_age_s=30.0, clock=clock)
    app = create_app(open_connection_namespace(), lambda: ("", []), cache, read_transactions=list)
    app.dependency_overrides[airflow_user] = User
    app.dependency_overrides[airflow_user_page] = User
    try:
        client = TestClient(app)
        page = client.get("/")
        assert page.status_code == 200 and "catalog state as of" not in page.text
        clock.now += 12
        page = client.get("/")
        assert "catalog state as of" in page.text and "(12.0 s old, refreshing)" in page.text
        assert cache.store(*_identity_and_hook()).wait(timeout_s=60)
        data = client.get("/api/overview").json()  # the refreshed copy, read at clock.now
        assert data["as_of"] and (data["age_s"], data["refreshing"]) == (0.0, False)
    finally:
        cache.close()


def _identity_and_hook() -> tuple[str, Any]:
    from kfs_airflow.hooks import KfsHook

    hook = KfsHook()
    return hook.store_identity, hook


class GatedStore(InstrumentedStore):
    """A real store whose catalog GETs wait at a gate the test opens (a slow S3, on demand)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.log_gate = threading.Event()
        self.log_gate.set()

    def get(self, key: str, byte_range: Any = None) -> bytes:
        if "/_log/" in key and not self.log_gate.wait(60):
            raise TimeoutError("the test never opened the catalog gate")
        return super().get(key, byte_range)


def _gated_hook() -> Any:
    from kfs_airflow.hooks import KfsHook

    class GatedHook(KfsHook):
        stores: ClassVar[list[GatedStore]] = []
        closed_gate = False  # the next store opened starts with its gate closed

        def get_store(self) -> ObjectStore:
            store = GatedStore(super().get_store())
            if GatedHook.closed_gate:
                store.log_gate.clear()
            GatedHook.stores.append(store)
            return store

    return GatedHook


def test_a_slow_first_read_answers_loading_within_the_wait(local_url: str) -> None:
    from fastapi.testclient import TestClient
    from kfs_airflow.overview_cache import OverviewCache
    from kfs_airflow.ui import create_app
    from kfs_airflow.ui.auth import airflow_user, airflow_user_page

    class User:
        def get_name(self) -> str:
            return "tester"

    hook_class = _gated_hook()
    hook_class.closed_gate = True
    cache = OverviewCache(max_age_s=30.0, wait_s=0.2)
    app = create_app(hook_class, lambda: ("", []), cache, read_transactions=list)
    app.dependency_overrides[airflow_user] = User
    app.dependency_overrides[airflow_user_page] = User
    client = TestClient(app)
    try:
        loading = client.get("/api/overview").json()
        assert loading["loading"] and loading["refreshing"] and loading["topics"] == []
        assert loading["partitions_read"] == 0 and loading["partitions_total"] in (None, 3)
        page = client.get("/").text
        assert 'http-equiv="refresh"' in page and "Reading the catalogs for the first time" in page
        assert 'id="compaction"' not in page  # no "no runs yet" while nothing is read

        hook_class.stores[0].log_gate.set()
        assert cache.store(*_identity_and_hook()).wait(timeout_s=60)
        page = client.get("/").text
        assert 'http-equiv="refresh"' not in page and page.count("data-partition=") == 3
    finally:
        for store in hook_class.stores:
            store.log_gate.set()
        cache.close()


def test_a_restarted_page_serves_the_stored_copy_while_it_reads(local_url: str) -> None:
    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview_cache import OverviewCache

    first_cache = OverviewCache(max_age_s=0.0, wait_s=math.inf)
    try:
        first = first_cache.overview(KfsHook())
        kept = first_cache.store(*_identity_and_hook())
        assert kept.wait(timeout_s=60) and kept.copies_saved == 1
        again = first_cache.overview(KfsHook())  # nothing changed: not written again
        assert kept.wait(timeout_s=60) and kept.copies_saved == 1 and again.topics == first.topics
    finally:
        first_cache.close()
    store = open_store(local_url)
    stored = store.get(f"{NS}/_page/overview.json")
    store.close()
    assert b'"format":1' in stored and b'"orders"' in stored

    # A new process: its catalog reads are slow, so it answers with the stored copy.
    hook_class = _gated_hook()
    hook_class.closed_gate = True
    cache = OverviewCache(max_age_s=0.0, wait_s=0.2)
    try:
        served = cache.overview(hook_class())
        # Fetching the stored copy may take longer than the wait on a busy machine: the page
        # says "loading" until it is there (the catalog reads cannot end, the gate is shut).
        deadline = time.monotonic() + 60
        while served.loading and time.monotonic() < deadline:
            served = cache.overview(hook_class())
        assert not served.loading and served.refreshing
        assert served.as_of == first.generated_at and served.age_s is not None
        assert _partitions(served) == _partitions(first)
        hook_class.stores[0].log_gate.set()
        assert cache.store(*_identity_and_hook()).wait(timeout_s=60)
        fresh = cache.overview(hook_class())
        assert fresh.as_of is None and _partitions(fresh) == _partitions(first)
    finally:
        for gated in hook_class.stores:
            gated.log_gate.set()
        cache.close()


def test_a_store_that_refuses_the_copy_or_holds_garbage_still_shows_the_page(
    local_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from kfs_airflow.overview_cache import OverviewCache

    writer = open_store(local_url)
    writer.put(f"{NS}/_page/overview.json", b"{not json")
    writer.close()
    hook_class = _gated_hook()
    cache = OverviewCache(max_age_s=0.0, wait_s=math.inf)
    try:
        with caplog.at_level("WARNING", logger="kfs_airflow.overview_cache"):
            hook = hook_class()
            hook.get_conn().fail_puts = 1  # read-only credentials, as far as the copy goes
            overview = cache.overview(hook)
            store = cache.store(*_identity_and_hook())
            assert store.wait(timeout_s=60)
        assert not overview.problems and len(_partitions(overview)) == 3
        assert "ignoring the stored copy" in caplog.text
        assert "cannot store its copy" in caplog.text and store.copies_saved == 0
        caplog.clear()
        with caplog.at_level("WARNING", logger="kfs_airflow.overview_cache"):
            writer = open_store(local_url)
            PartitionCatalog(writer, NS, "orders", 0).set_log_start_offset(3)
            writer.close()
            changed = cache.overview(hook_class())
            assert store.wait(timeout_s=60)
        assert _partitions(changed)[("orders", 0)].log_start_offset == 3
        assert "cannot store" not in caplog.text  # given up after the first refusal
        assert hook_class.stores[0].puts == [f"{NS}/_page/overview.json"]
    finally:
        cache.close()


def test_a_ticking_heartbeat_does_not_rewrite_the_copy_a_dead_daemon_does(
    local_url: str,
) -> None:
    """The page's copy is written again only when something an operator acts on changed.

    A heartbeat's clock and sequence number move every interval: not such a change.
    """
    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview_cache import OverviewCache

    from kfs_core.clock import now_ms
    from kfs_core.cluster.nodes import encode_node, node_key
    from kfs_core.cluster.view import NodeInfo

    store = open_store(local_url)
    node = NodeInfo(1, "inc-1", {"PLAINTEXT": ("kfs-1", 9092)}, "store", seq=1)

    def beat(seq: int, heartbeat_ms: int) -> None:
        info = NodeInfo(node.node_id, node.incarnation, node.listeners, node.durability, seq=seq)
        store.put(node_key(NS, 1), encode_node(info, heartbeat_ms=heartbeat_ms))

    cache = OverviewCache(max_age_s=0.0, wait_s=math.inf)
    try:
        beat(1, now_ms())
        first = cache.overview(KfsHook())
        kept = cache.store(*_identity_and_hook())
        assert kept.wait(timeout_s=60) and kept.copies_saved == 1
        assert [(d.node_id, d.state, d.seq) for d in first.cluster.daemons] == [(1, "running", 1)]
        beat(2, now_ms())
        ticked = cache.overview(KfsHook())
        assert kept.wait(timeout_s=60) and ticked.cluster.daemons[0].seq == 2
        assert kept.copies_saved == 1
        beat(3, now_ms() - 3_600_000)  # an hour old: dead by the page's clock
        dead = cache.overview(KfsHook())
        assert kept.wait(timeout_s=60) and dead.cluster.daemons[0].state == "dead"
        assert kept.copies_saved == 2
    finally:
        cache.close()
        store.close()
