"""The KFS page: its read model over real stores and reports, and its app inside Airflow's api-server app.

Data comes from the writers the daemon and the jobs use: topics and segments
from ``tests.spark_jobs.data`` (kfs_core), compaction summaries through
``spark_jobs.common.execute`` (the envelope every job stores), and validation
reports from real ``spark_jobs.validation`` runs, Great Expectations and Data
Docs included, with `InProcessSpark` standing in for the SparkSession (the
job's only Spark calls are ``parallelize().mapPartitions().collect()`` and
``createDataFrame().toPandas()``), so no JVM starts.  The app tests mount the
plugin the way the api-server does: Airflow's own ``create_app`` with the
simple auth manager, requests through Starlette's TestClient.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog, layout
from kfs_core.storage import ObjectStore, open_store
from spark_jobs import common
from spark_jobs.common import JobOptions, JobResult
from testkit.ports import free_port
from tests.airflow.conftest import kfs_connection_env
from tests.spark_jobs.data import batch_byte, flip_bit, write_topic

pytestmark = [
    pytest.mark.airflow,
    # Great Expectations imports the deprecated sre modules (see tests/spark_jobs/conftest.py).
    pytest.mark.filterwarnings("ignore:module 'sre_constants' is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:module 'sre_parse' is deprecated:DeprecationWarning"),
    # airflow.api_fastapi imports svcs, which imports Starlette's TestClient, which warns
    # about httpx at import time.
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`"),
]

NS = "ns"
CLEAN_RUN = "20240101T000000Z-aaaaaa"
DAMAGED_RUN = "20240101T000500Z-bbbbbb"
PASSWORD = "kfs-page-test"
SIMPLE_AUTH_MANAGER = (
    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
)


# --- data ---------------------------------------------------------------------------


class _Rdd:
    def __init__(self, items: Any) -> None:
        self.items = list(items)

    def mapPartitions(self, fn: Any) -> _Rdd:
        return _Rdd(fn(iter(self.items)))

    def collect(self) -> list[Any]:
        return list(self.items)


class _Frame:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def toPandas(self) -> Any:
        import pandas as pd

        from spark_jobs.validation import COLUMNS

        return pd.DataFrame(self.rows, columns=list(COLUMNS))


class _Context:
    defaultParallelism = 1
    master = "in-process"
    applicationId = "in-process"

    def parallelize(self, items: Any, slices: int | None = None) -> _Rdd:
        return _Rdd(items)


class InProcessSpark:
    """The part of a SparkSession `spark_jobs.validation` uses, computed in this process."""

    sparkContext = _Context()

    def createDataFrame(self, rows: list[tuple[Any, ...]], schema: str) -> _Frame:
        return _Frame(rows)


def _validate(store: ObjectStore, run_id: str) -> dict[str, Any]:
    from spark_jobs import validation

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(common, "new_run_id", lambda: run_id)
        return validation.run(
            validation.ValidationOptions(store_url=store.url, namespace=NS), InProcessSpark()
        )


def _compaction_summary(
    store: ObjectStore, run_id: str, *, bytes_in: int, bytes_out: int, dry_run: bool = False
) -> dict[str, Any]:
    """A compaction run summary as `spark_jobs.compaction` stores it (counts by its names)."""
    counts = {
        "partitions": 2, "partitions_planned": 1, "partitions_merged": 1,
        "partitions_compacted": 0, "segments_in": 6, "segments_out": 1,
        "bytes_in": bytes_in, "bytes_out": bytes_out, "bytes_saved": bytes_in - bytes_out,
        "records_in": 600, "records_out": 600, "records_removed": 0,
        "conflicts": 0, "errors": 0, "orphaned_objects": 0,
    }  # fmt: skip
    details: dict[str, Any] = {
        "storage": {
            "input_bytes": bytes_in,
            "output_bytes": bytes_out,
            "saved_bytes": bytes_in - bytes_out,
            "saved_ratio": round((bytes_in - bytes_out) / bytes_in, 6),
        }
    }
    if dry_run:
        counts = {"partitions": 2, "partitions_planned": 1, "segments_in": 6, "bytes_in": bytes_in}
        details = {"partitions": []}
    options = JobOptions(store_url=store.url, namespace=NS, dry_run=dry_run)
    return common.execute(
        "compaction",
        options,
        lambda ctx: JobResult(common.STATUS_OK, "merged", counts, details),
        run_id=run_id,
    )


@pytest.fixture(scope="module")
def reported_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two topics, two compaction summaries (one a dry run) and two real validation runs.

    The second validation run follows a bit flip in ``clicks/0``, so it fails
    ``body_crc`` and ``batch_crc``.  Tests read this store; none may change it.
    """
    url = (tmp_path_factory.mktemp("reported") / "store").as_uri()
    store = open_store(url)
    write_topic(store, NS, "orders", partitions=2, segments=3, records_per_segment=100)
    write_topic(store, NS, "clicks", partitions=1, segments=2, records_per_segment=50)
    PartitionCatalog(store, NS, "orders", 1).set_log_start_offset(100)
    _compaction_summary(store, "20240101T000100Z-cccccc", bytes_in=40_000, bytes_out=10_000)
    _compaction_summary(store, "20240101T000200Z-dddddd", bytes_in=8_000, bytes_out=0, dry_run=True)
    _validate(store, CLEAN_RUN)
    segment = PartitionCatalog(store, NS, "clicks", 0).load().segments[0]
    key = layout.join(NS, segment.key)
    flip_bit(store, key, batch_byte(store, key, 1, 70))
    _validate(store, DAMAGED_RUN)
    store.close()
    return url


# --- the read model -----------------------------------------------------------------


def _hook(monkeypatch: pytest.MonkeyPatch, store_url: str) -> Any:
    """The `KfsHook` of namespace ``NS`` in ``store_url`` (what the page reads through)."""
    from kfs_airflow.hooks import KfsHook

    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(store_url, NS))
    return KfsHook()


def test_overview_of_topics_partitions_and_runs(
    reported_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.overview import read_overview

    store = open_store(reported_store)
    overview = read_overview(_hook(monkeypatch, reported_store))
    assert overview.problems == []
    assert [t.name for t in overview.topics] == ["clicks", "orders"]
    orders = overview.topics[1]
    assert (orders.partition_count, orders.segments, orders.record_count) == (2, 6, 600)
    for p in orders.partitions:
        state = PartitionCatalog(store, NS, "orders", p.partition).load()
        assert (p.segments, p.size_bytes, p.record_count) == (
            len(state.segments), state.size_bytes, state.record_count,
        )  # fmt: skip
        assert (p.high_watermark, p.catalog_version) == (300, state.version)
    assert [p.log_start_offset for p in orders.partitions] == [0, 100]

    compaction = overview.compaction
    assert [r.run_id for r in compaction.runs] == [
        "20240101T000200Z-dddddd", "20240101T000100Z-cccccc",
    ]  # fmt: skip
    dry, real = compaction.runs
    assert dry.dry_run and dry.bytes_saved == 0
    assert (real.bytes_saved, real.saved_ratio, real.segments_out) == (30_000, 0.75, 1)
    # Dry runs rewrite nothing, so they count towards neither total.
    assert (compaction.total_bytes_in, compaction.total_bytes_saved) == (40_000, 30_000)

    assert [r.run_id for r in overview.validation] == [DAMAGED_RUN, CLEAN_RUN]
    latest = overview.latest_report
    assert latest is not None and latest.run_id == DAMAGED_RUN
    assert latest.success is False and latest.status == "failed"
    assert set(latest.critical_failures) == {"body_crc", "batch_crc"}
    outcomes = {e.id: e.success for e in latest.expectations}
    assert outcomes["body_crc"] is False and outcomes["header_ok"] is True
    assert (latest.evaluated, latest.unsuccessful) == (len(outcomes), 2)
    clean = overview.validation[1]
    assert clean.success is True and clean.unsuccessful == 0
    assert latest.data_docs_index == "index.html"
    assert overview.latest_validation_page is not None
    assert overview.latest_validation_page.startswith("validations/")
    assert store.exists(
        f"{NS}/_reports/validation/{DAMAGED_RUN}/data_docs/{overview.latest_validation_page}"
    )


def test_trend_chart_draws_one_bar_per_run_oldest_first(
    reported_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.overview import chart_points, read_overview
    from kfs_airflow.ui.chart import trend_svg

    runs = chart_points(read_overview(_hook(monkeypatch, reported_store)).validation)
    svg = str(trend_svg(runs))
    bars = re.findall(r'data-run-id="([^"]+)" data-passed="(\d+)" data-failed="(\d+)"', svg)
    evaluated = runs[0].evaluated
    assert bars == [
        (CLEAN_RUN, str(evaluated), "0"), (DAMAGED_RUN, str(evaluated - 2), "2"),
    ]  # fmt: skip
    assert svg.startswith('<svg id="dq-trend"') and "#c23030" in svg  # a critical failure
    assert str(trend_svg([])) == ""


def test_empty_store_has_no_problems_only_nothing_to_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.overview import read_overview

    overview = read_overview(_hook(monkeypatch, str(tmp_path / "empty")))
    assert (overview.topics, overview.validation, overview.compaction.runs) == ([], [], [])
    assert overview.problems == [] and overview.latest_report is None


def test_damaged_catalogs_and_reports_become_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.overview import read_overview

    store = open_store(str(tmp_path / "store"))
    write_topic(store, NS, "orders", partitions=2, segments=2, records_per_segment=50)
    write_topic(store, NS, "broken", partitions=1, segments=1, records_per_segment=10)
    # A commit that is not JSON: orders/1 cannot be loaded, orders/0 still can.
    store.put(layout.log_prefix(NS, "orders", 1) + layout.commit_name(0), b"not json")
    # A topic record that is not a topic record.
    store.put(f"{NS}/_topics/broken.json", b"{}")
    store.put(f"{NS}/_reports/compaction/20240101T000000Z-eeeeee.json", b"{truncated")
    store.put(f"{NS}/_reports/validation/20240101T000000Z-ffffff.json", b"[1, 2]")
    # A run whose report was never written (killed between summary and upload).
    summary = {"job": "validation", "status": "ok", "details": {
        "report_key": f"{NS}/_reports/validation/20240102T000000Z-abcdef/report.json"}}  # fmt: skip
    store.put(
        f"{NS}/_reports/validation/20240102T000000Z-abcdef.json", json.dumps(summary).encode()
    )

    overview = read_overview(_hook(monkeypatch, str(tmp_path / "store")))
    assert overview.problems == []
    broken, orders = overview.topics
    assert broken.error is not None and "CorruptCatalog" in broken.error
    assert orders.partitions[0].error is None and orders.partitions[0].high_watermark == 100
    assert orders.partitions[1].error is not None
    assert orders.partitions[1].error.startswith("catalog unreadable: CorruptCatalog")
    [compaction] = overview.compaction.runs
    assert compaction.status == "unreadable" and "JSONDecodeError" in (compaction.error or "")
    missing, not_an_object = overview.validation
    assert missing.success is None and "is missing" in (missing.error or "")
    assert not_an_object.status == "unreadable" and "not an object" in (not_an_object.error or "")


def test_a_summary_without_the_report_falls_back_to_report_json(
    reported_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.overview import read_validation

    source = open_store(reported_store)
    store = open_store(str(tmp_path / "copy"))
    for info in source.list(f"{NS}/_reports/validation/"):
        if not info.key.endswith(".html"):
            store.put(info.key, source.get(info.key))
    key = f"{NS}/_reports/validation/{DAMAGED_RUN}.json"
    summary = json.loads(store.get(key))
    hook = _hook(monkeypatch, str(tmp_path / "copy"))
    with_report = read_validation(hook)[0]
    del summary["details"]["report"]
    store.put(key, json.dumps(summary).encode())
    assert read_validation(hook)[0] == with_report


@pytest.mark.parametrize(
    ("run_id", "path", "allowed"),
    [
        (CLEAN_RUN, "index.html", True),
        (CLEAN_RUN, "static/styles/data_docs_default_styles.css", True),
        (CLEAN_RUN, "../report.json", False),
        (CLEAN_RUN, "validations/../../report.json", False),
        (CLEAN_RUN, "", False),
        (CLEAN_RUN, "static//x.css", False),
        (CLEAN_RUN, "./index.html", False),
        (CLEAN_RUN, "a\\..\\b", False),
        ("..", "index.html", False),
        ("../compaction", "index.html", False),
        ("a..b", "index.html", False),
        (".hidden", "index.html", False),
    ],
)
def test_data_docs_keys_stay_inside_the_runs_data_docs(
    run_id: str, path: str, allowed: bool
) -> None:
    from kfs_airflow.overview import data_docs_key

    key = data_docs_key(NS, run_id, path)
    if allowed:
        assert key == f"{NS}/_reports/validation/{run_id}/data_docs/{path}"
    else:
        assert key is None


# --- the app inside Airflow's api-server app ------------------------------------------


@pytest.fixture(scope="module")
def airflow_app(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Airflow's api-server app (core) with the simple auth manager: users admin and viewer."""
    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps({"admin": PASSWORD, "viewer": PASSWORD}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__AUTH_MANAGER", SIMPLE_AUTH_MANAGER)
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,viewer:viewer")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
        mp.setenv("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_urlsafe(64))
        from airflow.api_fastapi.app import create_app, purge_cached_app

        try:
            yield create_app(apps="core")
        finally:
            purge_cached_app()


@pytest.fixture
def client(airflow_app: Any) -> Any:
    from fastapi.testclient import TestClient

    return TestClient(airflow_app)


def _login(client: Any, username: str = "admin") -> dict[str, str]:
    response = client.post("/auth/token", json={"username": username, "password": PASSWORD})
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


def test_anonymous_requests_are_refused(
    client: Any, reported_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(reported_store, NS))
    page = client.get("/kfs/", follow_redirects=False)
    assert page.status_code == 307
    assert page.headers["location"].startswith("/auth/login?next=")
    assert "%2Fkfs%2F" in page.headers["location"]
    assert client.get("/kfs/api/overview").status_code == 401
    docs = f"/kfs/reports/validation/{CLEAN_RUN}/data_docs/index.html"
    assert client.get(docs).status_code == 401
    forged = {"Authorization": "Bearer eyJhbGciOiJIUzUxMiJ9.e30.c2lnbmF0dXJl"}
    assert client.get("/kfs/api/overview", headers=forged).status_code in (401, 403)
    # A forged cookie sends the page to the login form too.
    client.cookies.set("_token", "not-a-jwt")
    assert client.get("/kfs/", follow_redirects=False).status_code == 307
    # The stylesheet and icon are public: the nav shows the icon before anyone logs in.
    assert client.get("/kfs/static/kfs.css").status_code == 200


def test_the_page_shows_topics_partitions_and_data_quality(
    client: Any, reported_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(reported_store, NS))
    token = _login(client, "viewer")["Authorization"].split()[1]
    client.cookies.set("_token", token)  # what the UI's login form leaves behind
    response = client.get("/kfs/")
    assert response.status_code == 200
    html = response.text
    assert "signed in as viewer" in html
    row = re.search(
        r'<tr class="partition" data-topic="orders" data-partition="1">(.*?)</tr>', html, re.S
    )
    assert row is not None
    assert re.search(r'class="num log-start">100<', row.group(1))
    assert re.search(r'class="num high-watermark">300<', row.group(1))
    assert 'data-topic="clicks"' in html
    assert re.search(r'data-expectation="body_crc" data-success="false"', html)
    assert re.search(r'data-expectation="header_ok" data-success="true"', html)
    assert html.count('<g class="run ') == 2
    assert "29.3 KiB" in html  # 30,000 bytes saved by the compaction run
    link = re.search(r'id="data-docs-link" href="([^"]+)"', html)
    assert link is not None and link.group(1).startswith(f"reports/validation/{DAMAGED_RUN}/")


def test_json_and_data_docs_for_a_bearer_token(
    client: Any, reported_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.overview import read_overview

    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(reported_store, NS))
    auth = _login(client)
    data = client.get("/kfs/api/overview", headers=auth).json()
    expected = read_overview(_hook(monkeypatch, reported_store)).model_dump(mode="json")
    # The connection names no daemon: the groups and transactions sections say so, the
    # rest is the store's.
    assert data.pop("groups_problem").startswith("daemon address not configured")
    assert data.pop("transactions_problem").startswith("daemon address not configured")
    for doc in (data, expected):
        doc.pop("generated_at")
    expected.pop("groups_problem")
    expected.pop("transactions_problem")
    assert data == expected

    base = f"/kfs/reports/validation/{DAMAGED_RUN}/data_docs/"
    index = client.get(base + "index.html", headers=auth)
    assert index.status_code == 200
    assert index.headers["content-type"] == "text/html; charset=utf-8"
    assert index.headers["x-content-type-options"] == "nosniff"
    assert "kfs_segments" in index.text
    page = client.get(base + data["latest_validation_page"], headers=auth)
    assert page.status_code == 200 and "body_crc" in page.text
    css = client.get(base + "static/styles/data_docs_default_styles.css", headers=auth)
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert client.get(base + "no-such-file.html", headers=auth).status_code == 404
    # Traversal attempts, percent-encoded so no client normalises them away first.
    for path in (
        "..%2F..%2F..%2F_topics%2Forders.json",
        "%2E%2E/report.json",
        "static/%2e%2e/%2e%2e/report.json",
    ):
        assert client.get(base + path, headers=auth).status_code == 404, path
    escape = f"/kfs/reports/validation/%2E%2E/data_docs/{DAMAGED_RUN}.json"
    assert client.get(escape, headers=auth).status_code == 404


class _AssetRefs(HTMLParser):
    """The stylesheets, scripts and images a page loads: ``(tag, url, integrity or None)``."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "link" and "stylesheet" in (a.get("rel") or "").split() and a.get("href"):
            self.refs.append((tag, str(a["href"]), a.get("integrity")))
        elif tag in ("script", "img") and a.get("src"):
            self.refs.append((tag, str(a["src"]), a.get("integrity")))


def _asset_refs(html: str) -> list[tuple[str, str, str | None]]:
    parser = _AssetRefs()
    parser.feed(html)
    return parser.refs


_CSS_URL = re.compile(r"url\(\s*['\"]?(?!data:)([^'\")]+)['\"]?\s*\)")
_CONTENT_TYPES = {"link": "text/css", "script": "text/javascript", "img": "image/"}


def test_data_docs_load_their_stylesheets_and_scripts_from_the_kfs_page(
    client: Any, reported_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No CDN: every asset a served Data Docs page loads answers here, with its content type."""
    import base64
    import hashlib
    import urllib.parse

    from kfs_airflow.ui import datadocs_assets

    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(reported_store, NS))
    auth = _login(client)
    store = open_store(reported_store)
    prefix = f"{NS}/_reports/validation/{DAMAGED_RUN}/data_docs/"
    pages = [i.key[len(prefix) :] for i in store.list(prefix) if i.key.endswith(".html")]
    # index, the suite's page and the run's validation result page (three folder depths)
    assert len(pages) == 3 and {p.count("/") for p in pages} == {0, 1, 4}, pages
    fetched: dict[str, Any] = {}
    for page in pages:
        page_url = f"http://testserver/kfs/reports/validation/{DAMAGED_RUN}/data_docs/{page}"
        stored = store.get(prefix + page).decode()
        response = client.get(page_url, headers=auth)
        assert response.status_code == 200
        refs = _asset_refs(response.text)
        # GX's templates load bootstrap, jQuery, Font Awesome, vega ... each from this app now.
        assert sum(tag == "script" for tag, _, _ in refs) >= 9, refs
        assert sum(tag == "link" for tag, _, _ in refs) >= 6, refs
        for tag, url, integrity in refs:
            assert not re.match(r"(https?:)?//", url), f"{page} loads {url} from elsewhere"
            absolute = urllib.parse.urljoin(page_url, url).split("?")[0]
            if absolute not in fetched:
                fetched[absolute] = client.get(absolute, headers=auth)
            asset = fetched[absolute]
            assert asset.status_code == 200, (page, url, absolute)
            assert asset.headers["content-type"].startswith(_CONTENT_TYPES[tag]), (url, asset)
            if integrity:  # subresource integrity: the vendored bytes are the ones GX pinned
                algorithm, digest = integrity.split("-", 1)
                actual = hashlib.new(algorithm, asset.content).digest()
                assert base64.b64encode(actual).decode() == digest, url
        # The report in the store is GX's own, CDN links and all: other viewers are unaffected.
        assert "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css" in stored
        assert "https://code.jquery.com/jquery-3.7.1.min.js" in stored

    vendored = [u for u in fetched if "/kfs/static/datadocs/" in u]
    assert len(vendored) == len(datadocs_assets.CDN_FILES)
    # Fonts and images the vendored stylesheets load resolve too (Font Awesome's web fonts).
    fonts = 0
    for url in vendored:
        if url.endswith(".css"):
            for ref in _CSS_URL.findall(fetched[url].text):
                font = client.get(urllib.parse.urljoin(url, ref).split("?")[0].split("#")[0])
                assert font.status_code == 200, (url, ref)
                assert font.headers["content-type"].startswith("font/"), (ref, font.headers)
                fonts += 1
    assert fonts >= 8


def test_vendored_data_docs_assets_are_the_published_files_with_their_licences() -> None:
    from kfs_airflow.ui import datadocs_assets

    assert datadocs_assets.verify() == []
    local_paths = {f.local_path for f in datadocs_assets.FILES}
    assert set(datadocs_assets.CDN_FILES.values()) <= local_paths
    for package, version in {(f.package, f.version) for f in datadocs_assets.FILES}:
        folder = datadocs_assets.DIRECTORY / f"{package}@{version}"
        assert list(folder.glob("LICENSE*")), f"{package}@{version} has no licence file"
    # Every CDN URL the installed GX's page templates name is mapped (a GX upgrade that
    # adds or moves one fails here, not silently in a browser without internet access).
    import great_expectations

    templates = Path(great_expectations.__file__).parent / "render/view/templates"
    named = set()
    for template in templates.glob("*.j2"):
        for tag in re.findall(r"<(?:script|link)\b[^>]*>", template.read_text()):
            named.update(re.findall(r'(?:src|href)="(https://[^"{]+)"', tag))
    assert named == set(datadocs_assets.CDN_FILES), named ^ set(datadocs_assets.CDN_FILES)


def test_localize_html_rewrites_only_the_known_asset_urls() -> None:
    from kfs_airflow.ui.datadocs_assets import GX_LOGO_URL, localize_html

    html = (
        '<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>'
        '<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>'
        f'<img src="{GX_LOGO_URL}?d=20240101T000000Z">'
        '<a href="https://greatexpectations.io">GX</a>'
        '<script src="https://example.invalid/unknown.js"></script>'
    )
    out = localize_html(html, assets_url="../../static/datadocs/", docs_root_url="../")
    assert out == (
        '<link rel="stylesheet" href="../../static/datadocs/bootstrap@4.3.1/dist/css/bootstrap.min.css"/>'
        '<script src="../../static/datadocs/vega@5.33.1/build/vega.min.js"></script>'
        '<img src="../static/images/logo-long.png">'
        '<a href="https://greatexpectations.io">GX</a>'
        '<script src="https://example.invalid/unknown.js"></script>'
    )


def test_no_connection_or_a_bad_store_url_is_a_message_not_an_error(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = _login(client)
    monkeypatch.delenv("AIRFLOW_CONN_KFS_DEFAULT", raising=False)
    page = client.get("/kfs/", headers=auth)
    assert page.status_code == 200
    assert "connection &#39;kfs_default&#39; is not defined" in page.text
    data = client.get("/kfs/api/overview", headers=auth).json()
    assert data["topics"] == [] and "kfs_default" in data["problems"][0]
    docs = client.get(f"/kfs/reports/validation/{CLEAN_RUN}/data_docs/index.html", headers=auth)
    assert docs.status_code == 503

    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env("ftp://nowhere/kfs"))
    page = client.get("/kfs/", headers=auth)
    assert page.status_code == 200 and "unsupported store URL" in page.text


def test_an_empty_namespace_says_so(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env((tmp_path / "s").as_uri()))
    page = client.get("/kfs/", headers=_login(client))
    assert page.status_code == 200
    assert "No topics in this namespace yet" in page.text
    assert "No compaction runs reported yet" in page.text
    assert "No validation reports yet" in page.text
    assert 'id="problems"' not in page.text


def test_a_damaged_namespace_still_renders(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = (tmp_path / "s").as_uri()
    store = open_store(url)
    write_topic(store, "default", "orders", partitions=2, segments=1, records_per_segment=10)
    store.put(layout.log_prefix("default", "orders", 0) + layout.commit_name(0), b"\x00garbage")
    store.put("default/_reports/validation/20240101T000000Z-000000.json", b"{")
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(url))
    page = client.get("/kfs/", headers=_login(client))
    assert page.status_code == 200
    assert "catalog unreadable: CorruptCatalog" in page.text
    assert re.search(r'data-partition="1">.*?high-watermark">10<', page.text, re.S)
    assert "summary unreadable" in page.text


# --- consumer groups, from a real daemon ------------------------------------------------

GROUP_TOPIC = "payments"
RECORDS_PER_PARTITION = 10


@dataclass(frozen=True)
class GroupsOnADaemon:
    bootstrap: str
    #: The live group's committed offset per partition (None: nothing consumed there).
    committed: dict[int, int | None]


def _consume(consumer: Any, count: int, timeout_s: float = 60.0) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    got: list[Any] = []
    while len(got) < count:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {count} records"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message)
    return got


@pytest.fixture(scope="module")
def groups_on_a_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupsOnADaemon]:
    """`kfs serve` with a 2-partition topic of 2 x 10 records and two real confluent-kafka groups.

    ``archive`` read everything, committed and left (Empty, no lag); ``reports``
    has one live member, ``page-reader``, that read some records and committed.
    """
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    from testkit.daemon import DaemonFactory
    from tests.server.conftest import produce_confluent

    factory = DaemonFactory(tmp_path_factory.mktemp("groups-daemon"))
    live: Any = None
    try:
        daemon = factory.start()
        admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
        admin.create_topics([NewTopic(GROUP_TOPIC, 2, 1)])[GROUP_TOPIC].result(30)
        values = [b"payment-%d" % i for i in range(2 * RECORDS_PER_PARTITION)]
        produce_confluent(daemon.bootstrap, GROUP_TOPIC, values, partitions=2)

        def consumer(group_id: str, client_id: str) -> Any:
            c = confluent_kafka.Consumer(
                {
                    "bootstrap.servers": daemon.bootstrap,
                    "group.id": group_id,
                    "client.id": client_id,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            c.subscribe([GROUP_TOPIC])
            return c

        archive = consumer("archive", "archiver")
        _consume(archive, len(values))
        archive.commit(asynchronous=False)
        archive.close()

        live = consumer("reports", "page-reader")
        read = _consume(live, 7)
        live.commit(asynchronous=False)
        committed: dict[int, int | None] = {0: None, 1: None}
        for message in read:
            committed[message.partition()] = max(
                committed[message.partition()] or 0, message.offset() + 1
            )
        yield GroupsOnADaemon(daemon.bootstrap, committed)
    finally:
        if live is not None:
            live.close()
        factory.close()


def _expected_lag(committed: int | None) -> int | None:
    return None if committed is None else RECORDS_PER_PARTITION - committed


def _expected_total_lag(committed: dict[int, int | None]) -> int:
    # A partition the member read nothing from has no commit, so no lag (Kafka shows "-").
    return sum(RECORDS_PER_PARTITION - c for c in committed.values() if c is not None)


def test_the_hook_reads_groups_members_offsets_and_lag(
    groups_on_a_daemon: GroupsOnADaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.hooks import KfsAdminHook

    env = kfs_connection_env("file:///unused", bootstrap_servers=groups_on_a_daemon.bootstrap)
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
    archive, reports = KfsAdminHook().consumer_groups()

    assert (archive.group_id, archive.state, archive.members, archive.error) == (
        "archive", "Empty", [], None,
    )  # fmt: skip
    assert [
        (p.topic, p.partition, p.committed_offset, p.log_end_offset, p.lag, p.member_id)
        for p in archive.partitions
    ] == [(GROUP_TOPIC, n, RECORDS_PER_PARTITION, RECORDS_PER_PARTITION, 0, None) for n in (0, 1)]
    assert archive.total_lag == 0

    assert (reports.group_id, reports.state, reports.protocol, reports.simple) == (
        "reports", "Stable", "range", False,
    )  # fmt: skip
    [member] = reports.members
    assert member.client_id == "page-reader" and member.member_id.startswith("page-reader-")
    assert member.host.endswith("127.0.0.1")
    assert [(a.topic, a.partition) for a in member.assignment] == [
        (GROUP_TOPIC, 0), (GROUP_TOPIC, 1),
    ]  # fmt: skip
    committed = groups_on_a_daemon.committed
    assert [
        (p.partition, p.committed_offset, p.log_end_offset, p.lag, p.client_id, p.error)
        for p in reports.partitions
    ] == [
        (n, committed[n], RECORDS_PER_PARTITION, _expected_lag(committed[n]), "page-reader", None)
        for n in (0, 1)
    ]
    assert reports.total_lag == _expected_total_lag(committed)


def test_the_page_and_its_json_show_the_consumer_groups(
    client: Any,
    reported_store: str,
    groups_on_a_daemon: GroupsOnADaemon,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = kfs_connection_env(reported_store, NS, bootstrap_servers=groups_on_a_daemon.bootstrap)
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
    auth = _login(client)
    committed = groups_on_a_daemon.committed

    data = client.get("/kfs/api/overview", headers=auth).json()
    assert data["problems"] == [] and len(data["topics"]) == 2  # the store's part is unaffected
    assert data["bootstrap_servers"] == groups_on_a_daemon.bootstrap
    assert data["groups_problem"] is None
    groups = {g["group_id"]: g for g in data["groups"]}
    assert list(groups) == ["archive", "reports"]
    reports = groups["reports"]
    assert reports["state"] == "Stable"
    assert reports["total_lag"] == _expected_total_lag(committed)
    assert [m["client_id"] for m in reports["members"]] == ["page-reader"]
    assert [(p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"])
            for p in reports["partitions"]] == [
        (n, committed[n], RECORDS_PER_PARTITION, _expected_lag(committed[n])) for n in (0, 1)
    ]  # fmt: skip
    assert groups["archive"]["state"] == "Empty" and groups["archive"]["total_lag"] == 0

    html = client.get("/kfs/", headers=auth).text
    section = re.search(r'<section id="consumer-groups">(.*?)</section>', html, re.S)
    assert section is not None
    block = re.search(
        r'<div class="group" data-group="reports">(.*?)</div>', section.group(1), re.S
    )
    assert block is not None
    reports_html = block.group(1)
    assert '<span class="status state-stable">Stable</span>' in reports_html
    assert re.search(rf'class="total-lag">{_expected_total_lag(committed)}<', reports_html)
    member_id = reports["members"][0]["member_id"]
    member = re.search(
        rf'<tr class="member" data-member-id="{re.escape(member_id)}">(.*?)</tr>',
        reports_html,
        re.S,
    )
    assert member is not None
    assert '<td class="client-id">page-reader</td>' in member.group(1)
    assert f"{GROUP_TOPIC}/0, {GROUP_TOPIC}/1" in member.group(1)
    for n in (0, 1):
        row = re.search(
            rf'<tr class="group-partition" data-topic="{GROUP_TOPIC}" data-partition="{n}">(.*?)</tr>',
            reports_html,
            re.S,
        )
        assert row is not None
        shown = "–" if committed[n] is None else str(committed[n])  # noqa: RUF001 - the page's dash
        lag = _expected_lag(committed[n])
        assert re.search(rf'class="num committed">{shown}<', row.group(1))
        assert re.search(rf'class="num log-end">{RECORDS_PER_PARTITION}<', row.group(1))
        assert re.search(rf'class="num lag[^"]*">{"–" if lag is None else lag}<', row.group(1))  # noqa: RUF001 - the page's dash
    assert 'data-group="archive"' in section.group(1)
    assert '<span class="status state-empty">Empty</span>' in section.group(1)


def test_no_daemon_address_or_an_unreachable_daemon_is_a_message_in_the_section(
    client: Any, reported_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = _login(client)
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(reported_store, NS))
    html = client.get("/kfs/", headers=auth).text
    assert re.search(r'id="groups-problem">daemon address not configured', html)

    nobody = f"127.0.0.1:{free_port()}"
    env = kfs_connection_env(reported_store, NS, bootstrap_servers=nobody)
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
    started = time.monotonic()
    page = client.get("/kfs/", headers=auth)
    assert page.status_code == 200
    assert time.monotonic() - started < 30
    assert re.search(rf'id="groups-problem">cannot reach the daemon at {nobody}', page.text)
    # The rest of the page is as it is with a daemon.
    assert 'data-topic="orders"' in page.text and 'id="problems"' not in page.text
    assert re.search(r'data-expectation="body_crc" data-success="false"', page.text)
    data = client.get("/kfs/api/overview", headers=auth).json()
    assert data["groups"] == [] and data["groups_problem"].startswith("cannot reach the daemon")
    assert data["transactions"] == [] and nobody in data["transactions_problem"]
    assert data["problems"] == [] and len(data["topics"]) == 2


@pytest.fixture(scope="module")
def open_transaction(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`kfs serve` with one transaction left open (a confluent-kafka producer) and one committed."""
    import confluent_kafka

    from testkit.daemon import DaemonFactory

    factory = DaemonFactory(tmp_path_factory.mktemp("transactions-daemon"))
    producers = []
    try:
        daemon = factory.start()
        for tid, commit in (("nightly-export", False), ("done-already", True)):
            producer = confluent_kafka.Producer(
                {"bootstrap.servers": daemon.bootstrap, "transactional.id": tid}
            )
            producer.init_transactions(30)
            producer.begin_transaction()
            producer.produce("exports", b"row", partition=0)
            producer.flush(30)
            if commit:
                producer.commit_transaction(30)
            producers.append(producer)
        yield daemon.bootstrap
    finally:
        factory.close()


def test_the_hook_and_the_page_show_the_open_transactions(
    client: Any, reported_store: str, open_transaction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.hooks import KfsAdminHook

    env = kfs_connection_env(reported_store, NS, bootstrap_servers=open_transaction)
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
    [open_one] = KfsAdminHook().open_transactions()
    assert (open_one.transactional_id, open_one.state, open_one.partitions) == (
        "nightly-export", "Ongoing", ["exports/0"],
    )  # fmt: skip
    assert open_one.open_ms is not None and not open_one.hanging  # its timeout is 60 s

    auth = _login(client)
    data = client.get("/kfs/api/overview", headers=auth).json()
    assert data["transactions_problem"] is None
    assert [t["transactional_id"] for t in data["transactions"]] == ["nightly-export"]
    html = client.get("/kfs/", headers=auth).text
    section = re.search(r'<section id="transactions">(.*?)</section>', html, re.S)
    assert section is not None
    row = re.search(
        r'<tr class="transaction" data-transactional-id="nightly-export">(.*?)</tr>',
        section.group(1),
        re.S,
    )
    assert row is not None
    assert 'class="partitions">exports/0<' in row.group(1)
    assert ">Ongoing<" in row.group(1)


# --- the cluster view: heartbeats, leases, the store WAL --------------------------------

WAL_RECORDS = 7  # node 1's WAL object holds orders/0 offsets 10..16: 7 above the catalog
#: The connection's session timeout in these tests: long enough that node 1, written
#: just before, is running however slow the machine; node 2 was written a day ago.
SESSION_TIMEOUT_MS = 120_000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class ClusterStore:
    url: str
    endpoint: str | None  # the moto server's, for an S3 store
    now_ms: int  # the wall clock the heartbeats were written against
    wal_key: str  # node 1's store WAL object


def _cluster_store(store: ObjectStore, wal_dir: Path, namespace: str) -> tuple[int, str]:
    """Topic orders (3 x 10 records) served by two daemons by their real heartbeat documents.

    Node 1 (``durability=store``) runs and holds orders/0 at epoch 1; its WAL
    object, written by the daemon's own `StoreWal`, holds orders/0 offsets
    10..16, above the catalog's end.  Node 2 (``cautious``, a local WAL) holds
    orders/1 by its heartbeat, written a day ago: dead.  orders/2 has no lease.
    """
    from kfs_core.clock import now_ms
    from kfs_core.cluster.nodes import encode_node, node_key
    from kfs_core.cluster.view import NodeInfo
    from kfs_core.log.wal.store import StoreWal, StoreWalReader
    from kfs_core.log.wal.writer import WalAppend
    from testkit.batches import make_batch

    write_topic(store, namespace, "orders", partitions=3, segments=1, records_per_segment=10)
    PartitionCatalog(store, namespace, "orders", 0).take_lease(1, "inc-1")
    PartitionCatalog(store, namespace, "orders", 1).take_lease(2, "inc-2")
    one = NodeInfo(1, "inc-1", {"PLAINTEXT": ("kfs-1", 9092), "SASL_SSL": ("kfs-1", 9093)},
                   "store", seq=41, held={("orders", 0): 1})  # fmt: skip
    two = NodeInfo(2, "inc-2", {"PLAINTEXT": ("kfs-2", 9092)}, "cautious", seq=7,
                   held={("orders", 1): 1})  # fmt: skip
    store.put(node_key(namespace, 2), encode_node(two, heartbeat_ms=now_ms() - DAY_MS))
    wal = StoreWal(store, namespace, 1, "inc-1", wal_dir, interval_ms=5)
    wal.recover()
    batch = make_batch(0, 10, count=WAL_RECORDS)
    wal.append_group([WalAppend("orders", 0, 10, batch)]).result(30)
    wal.close()  # never checkpointed: the object stays, as a daemon's does until its flush
    [(info, *_)] = list(StoreWalReader(store, namespace).objects())
    now = now_ms()
    store.put(node_key(namespace, 1), encode_node(one, heartbeat_ms=now - 500))
    return now, info.key


@pytest.fixture(params=["local", "s3"])
def cluster_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ClusterStore:
    """`_cluster_store` on a local directory or a fresh prefix of the moto bucket; kfs_default names it."""
    import uuid

    endpoint: str | None = None
    if request.param == "s3":
        endpoint = request.getfixturevalue("moto_server")
        url = f"s3://{request.getfixturevalue('s3_bucket')}/page-cluster-{uuid.uuid4().hex[:8]}"
        store = open_store(url, endpoint_url=endpoint)
    else:
        url = (tmp_path / "store").as_uri()
        store = open_store(url)
    try:
        now, wal_key = _cluster_store(store, tmp_path / "wal", NS)
    finally:
        store.close()
    extra = {"s3_endpoint_url": endpoint} if endpoint else {}
    env = kfs_connection_env(url, NS, broker_session_timeout_ms=str(SESSION_TIMEOUT_MS), **extra)
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
    return ClusterStore(url, endpoint, now, wal_key)


def test_the_cluster_from_heartbeats_leases_and_the_store_wal(cluster_store: ClusterStore) -> None:
    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview import read_overview

    with KfsHook() as hook:
        cluster = read_overview(hook).cluster
    assert cluster.problems == [] and cluster.session_timeout_ms == SESSION_TIMEOUT_MS
    one, two = cluster.daemons
    assert (one.node_id, one.state, one.durability, one.seq) == (1, "running", "store", 41)
    assert one.heartbeat_ms == cluster_store.now_ms - 500
    assert one.heartbeat_age_s is not None and 0.5 <= one.heartbeat_age_s < 100
    assert one.listeners == ["PLAINTEXT://kfs-1:9092", "SASL_SSL://kfs-1:9093"]
    assert [(h.topic, h.partition, h.epoch) for h in one.held] == [("orders", 0, 1)]
    assert (one.wal_objects, one.unflushed_offsets) == (1, WAL_RECORDS)
    assert one.wal_bytes is not None and one.wal_bytes > WAL_RECORDS
    assert (two.node_id, two.state, two.durability) == (2, "dead", "cautious")
    assert two.heartbeat_age_s is not None and two.heartbeat_age_s >= DAY_MS / 1000
    # A local WAL is on the daemon's own disk: nothing of it is in the store to count.
    assert (two.wal_objects, two.wal_bytes, two.unflushed_offsets) == (None, None, None)

    [orders] = cluster.topics
    assert orders.name == "orders" and orders.without_live_holder == 2
    assert cluster.without_live_holder == 2
    rows = [(r.partition, r.epoch, r.node_id, r.holder, r.high_watermark, r.wal_end_offset,
             r.unflushed_offsets) for r in orders.partitions]  # fmt: skip
    assert rows == [
        (0, 1, 1, "live", 10, 10 + WAL_RECORDS, WAL_RECORDS),
        (1, 1, 2, "dead", 10, None, 0),
        (2, 0, -1, "no-lease", 10, None, 0),
    ]
    assert all(r.commit_age_s is not None and r.commit_age_s >= 0 for r in orders.partitions)


def test_the_wal_headers_are_kept_and_damage_is_a_message(cluster_store: ClusterStore) -> None:
    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview import read_overview

    from kfs_core.cluster.nodes import nodes_prefix

    store = (
        open_store(cluster_store.url, endpoint_url=cluster_store.endpoint)
        if cluster_store.endpoint
        else open_store(cluster_store.url)
    )
    headers: dict[str, Any] = {}
    with KfsHook() as hook:
        read_overview(hook, wal_headers=headers)
        assert list(headers) == [cluster_store.wal_key]
        # Objects never change, so a kept header is not read again: the copy the page
        # holds still counts although the bytes in the store are now damaged.
        store.put(cluster_store.wal_key, b"KFWO" + bytes(60))
        kept = read_overview(hook, wal_headers=headers).cluster
        assert kept.problems == [] and kept.daemons[0].unflushed_offsets == WAL_RECORDS
        # A reader without them reads the object: damaged, one message, nothing counted.
        fresh = read_overview(hook).cluster
        [problem] = fresh.problems
        assert problem.startswith(f"damaged store WAL object: {cluster_store.wal_key}")
        assert (fresh.daemons[0].wal_objects, fresh.daemons[0].unflushed_offsets) == (0, 0)
        # Gone from the store (swept, or deleted after a flush): gone from the kept headers.
        store.delete(cluster_store.wal_key)
        store.put(f"{nodes_prefix(NS)}3.json", b"{not json")
        after = read_overview(hook, wal_headers=headers).cluster
        assert headers == {}
        [corrupt] = after.problems
        assert corrupt.startswith("skipping a corrupt heartbeat:") and "3.json" in corrupt
        assert [d.node_id for d in after.daemons] == [1, 2]
        assert after.topics[0].partitions[0].wal_end_offset is None
    store.close()


def test_the_session_timeout_comes_from_the_connection(
    cluster_store: ClusterStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.hooks import KfsHook
    from kfs_airflow.overview import read_overview

    extra = {"s3_endpoint_url": cluster_store.endpoint} if cluster_store.endpoint else {}

    def cluster(timeout: str) -> Any:
        env = kfs_connection_env(cluster_store.url, NS, broker_session_timeout_ms=timeout, **extra)
        monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env)
        with KfsHook() as hook:
            return read_overview(hook).cluster

    patient = cluster(str(2 * DAY_MS))
    assert patient.session_timeout_ms == 2 * DAY_MS and patient.problems == []
    assert [d.state for d in patient.daemons] == ["running", "running"]
    assert patient.without_live_holder == 1  # only orders/2, which was never taken
    for bad in ("soon", "0"):
        fallback = cluster(bad)
        assert fallback.session_timeout_ms == 9000
        assert fallback.problems == [
            f"connection extra broker_session_timeout_ms={bad!r} is not a positive number of "
            "milliseconds; using 9000"
        ]
        assert fallback.daemons[1].state == "dead"


def test_a_namespace_no_daemon_served_has_no_lease_table(
    reported_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfs_airflow.overview import read_overview

    cluster = read_overview(_hook(monkeypatch, reported_store)).cluster
    assert (cluster.daemons, cluster.topics, cluster.problems) == ([], [], [])


def _row(html: str, tag_class: str, **data: object) -> str:
    attrs = "".join(f' data-{k.replace("_", "-")}="{v}"' for k, v in data.items())
    found = re.search(rf'<tr class="{tag_class}"{attrs}[^>]*>(.*?)</tr>', html, re.S)
    assert found is not None, (tag_class, data)
    return found.group(1)


def test_the_page_shows_the_daemons_and_the_leases(
    client: Any, cluster_store: ClusterStore
) -> None:
    html = client.get("/kfs/", headers=_login(client)).text
    section = re.search(r'<section id="cluster">(.*?)</section>', html, re.S)
    assert section is not None
    cluster = section.group(1)
    one = _row(cluster, "daemon", node_id=1, state="running")
    assert '<span class="status state-running">running</span>' in one
    assert '<td class="durability">store</td>' in one
    assert "<code>PLAINTEXT://kfs-1:9092</code><br><code>SASL_SSL://kfs-1:9093</code>" in one
    assert 'title="orders/0 epoch 1"><span class="held-count">1</span>' in one
    assert re.search(rf'<span class="unflushed">{WAL_RECORDS}</span> offsets in '
                     r'<span class="wal-objects">1</span> WAL object \(', one)  # fmt: skip
    two = _row(cluster, "daemon", node_id=2, state="dead")
    assert '<span class="status state-dead">dead</span>' in two
    assert re.search(r'class="num heartbeat-age"[^>]*>\d{5,}\.\d s ago<', two)
    assert "not visible from the store (local WAL); heartbeat " in two

    assert re.search(r'id="leases-summary">.*2 partitions without a live holder', cluster, re.S)
    live = _row(cluster, "lease", topic="orders", partition=0, holder="live")
    assert re.search(r'class="num leader-node">1<.*class="num epoch">1<', live, re.S)
    assert re.search(rf'class="num unflushed behind">{WAL_RECORDS}<', live)
    dead = _row(cluster, "lease no-live-holder", topic="orders", partition=1, holder="dead")
    assert "no live holder</span> node 2 is dead" in dead
    assert re.search(r'class="num catalog-end">10<', dead)
    never = _row(cluster, "lease no-live-holder", topic="orders", partition=2, holder="no-lease")
    assert "no lease yet" in never and re.search(r'class="num epoch">–<', never)  # noqa: RUF001 - the page's dash

    data = client.get("/kfs/api/overview", headers=_login(client)).json()["cluster"]
    assert [(d["node_id"], d["state"]) for d in data["daemons"]] == [(1, "running"), (2, "dead")]
    assert data["without_live_holder"] == 2
