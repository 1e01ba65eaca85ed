"""End to end: the KFS page in a real ``airflow api-server``, logged in and read in headless chromium.

One test, in this order:

1. a store with three topics, a real compaction run, two real validation runs
   (the second after a bit flip, so it fails) and a tables run (the payments
   topic's Iceberg table), written by ``spark_jobs`` in a subprocess on
   ``local[1]`` while the api-server starts;
2. ``airflow api-server`` on a free loopback port with the simple auth
   manager, one admin user and a known password, ``kfs_default`` pointing at
   that store;
3. anonymous requests are refused (401 / redirect to the login page), and the
   plugin and its nav entry are listed by ``GET /api/v2/plugins``;
4. chromium opens ``/kfs/``, is sent to Airflow's login page, logs in through
   the form, lands on the KFS page and the test reads what it renders: topic
   names, a partition's high watermark, expectation rows, the trend chart, the
   Data Docs link, the payments table with its report's Data Docs; the Data
   Docs page renders styled (bootstrap's and Font Awesome's computed styles,
   their scripts loaded) although the browser
   resolves no name but 127.0.0.1, so every asset came from ``/kfs``; then the
   same page framed in the Airflow UI at ``/plugin/kfs``;
5. the cluster view, with two real ``kfs serve`` daemons (``durability=store``,
   a flush interval so long that what they acknowledge stays in their WAL
   objects) serving topic ``events``: both running with their listeners and
   the partitions they hold, every ``events`` lease live, the acknowledged
   offsets not yet in segments counted; after one daemon is killed, it shows
   dead and the other holds every partition at a newer epoch; after that one
   stops too, every lease is flagged as having no live holder and nothing is
   left outside the segments.

Screenshots go to ``$KFS_TEST_ARTIFACTS`` (default: the test's tmp_path); the
path is printed.  Chromium is driven over the DevTools protocol with the
``websockets`` client Airflow already installs, so no webdriver is needed;
`.ci/run` installs chromium on CI, and the test fails (not skips) without it.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import urllib.parse
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from testkit.daemon import Daemon, DaemonFactory
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.airflow.conftest import AIRFLOW, REPO, kfs_connection_env

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.spark]

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
ADMIN = "admin"
NS = "default"
#: The daemons' heartbeat interval and session timeout; the page is given the same timeout.
HEARTBEAT_MS = 300
SESSION_TIMEOUT_MS = 6000
EVENTS_PARTITIONS = 4
EVENTS_PER_PARTITION = 5

# The cluster view as the browser renders it.
_CLUSTER_JS = """(() => {
    const text = (row, selector) => {
        const cell = row.querySelector(selector);
        return cell ? cell.textContent.trim() : null;
    };
    return {
        shown: !!document.querySelector('#cluster') &&
            document.querySelector('#cluster').offsetParent !== null,
        daemons: [...document.querySelectorAll('#daemons tr.daemon')].map(r => ({
            node: Number(r.dataset.nodeId), state: r.dataset.state,
            badge: text(r, '.status'), durability: text(r, '.durability'),
            listeners: r.querySelector('.listeners').innerText.trim(),
            held: Number(text(r, '.held-count')), unflushed: text(r, '.unflushed'),
            lag: r.querySelector('.lag').innerText.trim(),
        })),
        leases: [...document.querySelectorAll('#leases tr.lease')].map(r => ({
            topic: r.dataset.topic, partition: Number(r.dataset.partition),
            holder: r.dataset.holder, node: text(r, '.leader-node'), epoch: text(r, '.epoch'),
            flagged: r.classList.contains('no-live-holder'),
            holderText: r.querySelector('.holder') ? r.querySelector('.holder').innerText.trim() : '',
            catalogEnd: text(r, '.catalog-end'), unflushed: text(r, '.unflushed'),
        })),
        summary: (document.querySelector('#leases-summary') || {innerText: ''}).innerText,
    };
})()"""

# Runs in a subprocess (a JVM stays out of the test process): topics written as the
# daemon writes them, then real compaction and validation runs on one local[1] session.
_SEED_STORE = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    from kfs_core.catalog import PartitionCatalog
    from kfs_core.storage import open_store
    from spark_jobs import compaction, tables, validation
    from tests.spark_jobs.data import batch_byte, flip_bit, write_topic

    url, ns = sys.argv[1], sys.argv[2]
    store = open_store(url)
    # orders: 6 small uncompressed segments per partition, zstd wanted -> compaction merges
    write_topic(store, ns, "orders", partitions=2, segments=6, records_per_segment=100,
                configs={"compression.type": "zstd"})
    write_topic(store, ns, "clicks", partitions=1, segments=2, records_per_segment=50)
    # payments: JSON values, with an Iceberg table kept by the tables job
    write_topic(store, ns, "payments", partitions=2, segments=1, records_per_segment=30,
                configs={"kfs.table.enabled": "true"},
                value_of=lambda o: json.dumps({"amount": o, "currency": "EUR"}).encode())
    spark = (SparkSession.builder.master("local[1]").appName("kfs-page-e2e")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    options = dict(store_url=url, namespace=ns)
    summaries = [compaction.run(compaction.CompactionOptions(**options), spark)]
    summaries.append(validation.run(validation.ValidationOptions(**options), spark))
    summaries.append(tables.run(tables.TablesOptions(**options), spark))
    # Damage one batch of clicks/0: the next validation must fail body_crc and batch_crc.
    segment = PartitionCatalog(store, ns, "clicks", 0).load().segments[0]
    key = f"{ns}/{segment.key}"
    flip_bit(store, key, batch_byte(store, key, 1, 70))
    summaries.append(validation.run(validation.ValidationOptions(**options), spark))
    spark.stop()
    print("SUMMARIES " + json.dumps([{k: s[k] for k in ("job", "run_id", "status", "counts")}
                                     for s in summaries]))
    """
)


def _chromium() -> str:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "no chromium found (looked for " + ", ".join(CHROMIUM_NAMES) + "): install it, e.g. "
        "`apt-get install -y chromium` (.ci/run does this on CI)"
    )


def _http(
    method: str, url: str, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request, redirects not followed: (status, headers, body)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


class Chromium:
    """Headless chromium driven over the DevTools protocol (one page, JSON over a websocket)."""

    def __init__(self, binary: str, workdir: Path) -> None:
        from websockets.sync.client import connect

        profile = workdir / "chromium-profile"
        profile.mkdir()
        self.log_path = workdir / "chromium.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    f"--user-data-dir={profile}",
                    "--remote-debugging-address=127.0.0.1",
                    "--remote-debugging-port=0",
                    "--window-size=1400,1100",
                    # No name resolves but the loopback address: the browser sees no internet,
                    # so a page that still loads a CDN renders without it here.
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                    "about:blank",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        active_port = profile / "DevToolsActivePort"

        def port() -> int | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited: {self.log_path.read_text()[-2000:]}")
            lines = active_port.read_text().splitlines() if active_port.exists() else []
            return int(lines[0]) if lines and lines[0].strip() else None

        self._exit = contextlib.ExitStack()
        self._ids = count(1)
        try:
            devtools = wait_for(port, timeout=60, what="chromium's DevTools port")
            status, _, body = _http("GET", f"http://127.0.0.1:{devtools}/json/list")
            assert status == 200, body
            page = next(t for t in json.loads(body) if t["type"] == "page")
            self.ws = self._exit.enter_context(
                connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
            )
            self.send("Page.enable")
            self.send("Runtime.enable")
        except BaseException:
            self.close()
            raise

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        self.ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:  # events interleave with replies; only the reply matters here
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def wait(self, expression: str, what: str, timeout: float = 60) -> Any:
        return wait_for(lambda: self.evaluate(expression), timeout=timeout, what=what)

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element and type, so the page's own input handlers see real input events."""
        assert self.evaluate(
            f"(e => (e.focus(), document.activeElement === e))(document.querySelector({json.dumps(selector)}))"
        )
        self.send("Input.insertText", text=text)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self._exit.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    directory = Path(os.environ.get("KFS_TEST_ARTIFACTS") or tmp_path / "artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    print(f"\nKFS page screenshots and logs: {directory}")
    return directory


@pytest.fixture
def api_server(airflow_db: Path, tmp_path: Path, artifacts: Path) -> Iterator[dict[str, Any]]:
    """``airflow api-server`` with the simple auth manager and one admin; kfs_default on a new store."""
    store_url = (tmp_path / "store").as_uri()
    password = secrets.token_urlsafe(12)
    passwords = tmp_path / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps({ADMIN: password}))
    port = free_port()
    env = {
        **os.environ,
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
        "AIRFLOW_CONN_KFS_DEFAULT": kfs_connection_env(
            store_url, NS, broker_session_timeout_ms=str(SESSION_TIMEOUT_MS)
        ),
    }
    log_path = artifacts / "api-server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        yield {"base": base, "password": password, "store_url": store_url, "proc": proc,
               "log": log_path, "ready": lambda: _ready(proc, base, log_path)}  # fmt: skip
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _ready(proc: subprocess.Popen[bytes], base: str, log_path: Path) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"api-server exited {proc.returncode}: {log_path.read_text()[-3000:]}")
    return _http("GET", f"{base}/api/v2/monitor/health")[0] == 200


def _seed_store(store_url: str, artifacts: Path) -> subprocess.Popen[bytes]:
    log = open(artifacts / "spark-jobs.log", "wb")  # noqa: SIM115 - closed by the caller
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1", "GX_ANALYTICS_ENABLED": "false"}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", _SEED_STORE, store_url, NS],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    proc.log = log  # type: ignore[attr-defined]
    return proc


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[DaemonFactory]:
    factory = DaemonFactory(tmp_path / "daemons")
    try:
        yield factory
    finally:
        factory.close()


def _serve_events(factory: DaemonFactory, store_url: str) -> list[Daemon]:
    """Two store-mode daemons on the page's namespace; topic events, records in every partition.

    Their flush interval is ten minutes: what they acknowledge stays in their
    store WAL objects, above the catalogs' ends, until they stop.
    """
    import confluent_kafka
    import confluent_kafka.admin

    cluster = factory.start_cluster(
        2,
        store_url=store_url,
        heartbeat_ms=HEARTBEAT_MS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        extra_args=["--namespace", NS, "--flush-interval-ms", "600000"],
    )
    bootstrap = ",".join(d.bootstrap for d in cluster)
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    topic = confluent_kafka.admin.NewTopic("events", EVENTS_PARTITIONS, 1)
    for future in admin.create_topics([topic]).values():
        future.result(60)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(EVENTS_PARTITIONS):
        for i in range(EVENTS_PER_PARTITION):
            producer.produce("events", b"event-%d" % i, partition=p)
    assert producer.flush(120) == 0
    return cluster


def _cluster_view(browser: Chromium, url: str) -> dict[str, Any]:
    """Load the page afresh and read its cluster view."""
    browser.evaluate("window.kfsStale = true")
    browser.navigate(url)
    browser.wait(
        "!window.kfsStale && document.readyState === 'complete' && "
        "!!document.querySelector('#cluster')",
        "the KFS page reloaded",
    )
    view: dict[str, Any] = browser.evaluate(_CLUSTER_JS)
    return view


def _events(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for row in view["leases"] if row["topic"] == "events"]


def test_kfs_page_in_a_real_api_server_with_chromium(
    api_server: dict[str, Any], artifacts: Path, tmp_path: Path, daemons: DaemonFactory
) -> None:
    binary = _chromium()
    base = api_server["base"]
    seeding = _seed_store(api_server["store_url"], artifacts)
    try:
        seeding.wait(timeout=240)
    finally:
        if seeding.poll() is None:
            seeding.kill()
            seeding.wait(timeout=30)
        seeding.log.close()  # type: ignore[attr-defined]
    jobs_log = (artifacts / "spark-jobs.log").read_text()
    assert seeding.returncode == 0, jobs_log[-4000:]
    summaries = json.loads(jobs_log.split("SUMMARIES ", 1)[1].splitlines()[0])
    compacted, clean, table_run, damaged = summaries
    assert table_run["status"] == "ok" and table_run["counts"]["rows"] == 60, table_run
    assert compacted["status"] == "ok" and compacted["counts"]["bytes_saved"] > 0, compacted
    assert clean["status"] == "ok", clean
    assert damaged["status"] == "failed", damaged

    wait_for(api_server["ready"], timeout=180, interval=0.5, what="airflow api-server health")

    # --- anonymous requests are refused ---------------------------------------------
    status, _, body = _http("GET", f"{base}/kfs/api/overview")
    assert status == 401, body
    status, headers, _ = _http("GET", f"{base}/kfs/")
    assert status == 307 and "/auth/login" in headers["location"], (status, headers)
    docs = f"{base}/kfs/reports/validation/{damaged['run_id']}/data_docs/index.html"
    assert _http("GET", docs)[0] == 401
    bogus = {"Authorization": "Bearer not-a-jwt"}
    assert _http("GET", f"{base}/kfs/api/overview", bogus)[0] in (401, 403)

    # --- a token from the auth manager; the plugin and its nav entry are listed -------
    status, _, body = _http(
        "POST",
        f"{base}/auth/token",
        {"Content-Type": "application/json"},
        json.dumps({"username": ADMIN, "password": api_server["password"]}).encode(),
    )
    assert status == 201, body
    bearer = {"Authorization": f"Bearer {json.loads(body)['access_token']}"}
    status, _, body = _http("GET", f"{base}/api/v2/plugins", bearer)
    assert status == 200, body
    plugin = next(p for p in json.loads(body)["plugins"] if p["name"] == "kfs")
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/kfs"]
    nav = [v for v in plugin["external_views"] if v["destination"] == "nav"]
    assert [(v["name"], v["href"], v["url_route"]) for v in nav] == [("KFS", "kfs/", "kfs")]
    status, _, body = _http("GET", f"{base}/api/v2/plugins/importErrors", bearer)
    assert status == 200 and json.loads(body)["total_entries"] == 0, body
    status, _, body = _http("GET", f"{base}/kfs/api/overview", bearer)
    assert status == 200, body
    assert [t["name"] for t in json.loads(body)["topics"]] == ["clicks", "orders", "payments"]
    assert json.loads(body)["cluster"]["daemons"] == []  # no daemon has served it yet

    # --- two daemons serve the namespace; their heartbeats list every partition of events ---
    first, second = _serve_events(daemons, api_server["store_url"])

    def events_held() -> dict[str, Any] | None:
        status, _, body = _http("GET", f"{base}/kfs/api/overview", bearer)
        assert status == 200, body
        cluster: dict[str, Any] = json.loads(body)["cluster"]
        held = {(h["topic"], h["partition"]) for d in cluster["daemons"] for h in d["held"]}
        wanted = {("events", p) for p in range(EVENTS_PARTITIONS)}
        return cluster if wanted <= held else None

    wait_for(events_held, timeout=120, interval=0.5, what="every events partition in a heartbeat")

    # --- chromium: log in through Airflow's form, land on the KFS page ---------------
    browser = Chromium(binary, tmp_path)
    try:
        browser.navigate(f"{base}/kfs/")
        browser.wait("!!document.querySelector('input[name=username]')", "the login form")
        assert "/auth/login" in browser.evaluate("location.pathname")
        browser.type_into("input[name=username]", ADMIN)
        browser.type_into("input[name=password]", api_server["password"])
        browser.evaluate("document.querySelector('button[type=submit]').click()")
        browser.wait(
            "location.pathname === '/kfs/' && !!document.querySelector('#topics')",
            "the KFS page after logging in",
        )
        page_text = browser.evaluate("document.body.innerText")
        shot = browser.screenshot(artifacts / "kfs-page.png")
        print(f"screenshot: {shot}")
        assert "orders" in page_text and "clicks" in page_text, page_text[:2000]
        hw = browser.evaluate(
            'document.querySelector(\'tr.partition[data-topic=orders][data-partition="0"] '
            ".high-watermark').textContent.trim()"
        )
        assert hw == "600"
        rows = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#expectations tr.expectation')]"
            ".map(r => [r.dataset.expectation, r.dataset.success]))"
        )
        assert rows["body_crc"] == "false" and rows["batch_crc"] == "false", rows
        assert rows["header_ok"] == "true" and rows["index_ok"] == "true", rows
        bars = browser.evaluate(
            "[...document.querySelectorAll('svg#dq-trend g.run')].map(g => g.dataset.runId)"
        )
        assert bars == [clean["run_id"], damaged["run_id"]]
        assert "FAILED" in browser.evaluate("document.querySelector('#latest-report').innerText")
        assert "Saved" in browser.evaluate("document.querySelector('#compaction-total').innerText")
        # The consumer-groups section renders even though the connection names no daemon.
        groups = browser.evaluate(
            "(s => s && s.offsetParent !== null ? s.innerText : null)"
            "(document.querySelector('#consumer-groups'))"
        )
        assert groups and "Consumer groups" in groups, groups
        assert "daemon address not configured" in groups, groups
        # The payments table: its snapshot, rows, no lag, its report's Data Docs.
        table = browser.evaluate(
            "(r => ({lag: r.dataset.lag, rows: r.querySelector('.rows').textContent.trim(),"
            " report: r.dataset.report, docs: r.querySelector('a.table-docs').href}))"
            "(document.querySelector('#tables tr.table-row[data-topic=payments]'))"
        )
        assert table["lag"] == "0" and table["rows"] == "60", table
        assert table["report"] == "fail", table  # written long ago: the freshness check fails
        fetched = browser.evaluate(
            f"fetch({json.dumps(table['docs'])})"
            ".then(async r => [r.status, r.headers.get('content-type'), await r.text()])"
        )
        assert fetched[0] == 200 and fetched[1].startswith("text/html"), fetched[:2]
        assert "kfs_table_payments" in fetched[2]
        # The Data Docs link works for the logged-in browser (the cookie is its login).
        fetched = browser.evaluate(
            "fetch(document.querySelector('#data-docs-link').href)"
            ".then(async r => [r.status, r.headers.get('content-type'), await r.text()])"
        )
        assert fetched[0] == 200 and fetched[1].startswith("text/html"), fetched[:2]
        assert "kfs_segments" in fetched[2]

        # --- the Data Docs render styled with no internet: their CSS and JS come from /kfs ---
        blocked = browser.evaluate(
            "fetch('https://code.jquery.com/jquery-3.7.1.min.js', {mode: 'no-cors'})"
            ".then(() => 'reached', () => 'blocked')"
        )
        assert blocked == "blocked", "the browser can reach the internet: the check proves nothing"
        browser.navigate(browser.evaluate("document.querySelector('#data-docs-link').href"))
        browser.wait(
            "location.pathname.includes('/data_docs/validations/') && document.readyState === "
            "'complete' && !!document.querySelector('nav.navbar')",
            "the Data Docs validation page",
        )
        browser.evaluate("document.fonts.ready.then(() => true)")
        docs_style = browser.evaluate(
            """(() => {
                const style = (selector, pseudo) =>
                    getComputedStyle(document.querySelector(selector), pseudo || null);
                return {
                    navbar: style('nav.navbar').display,  // bootstrap: flex (unstyled: block)
                    sticky: style('nav.sticky-top').position,
                    success: style('.text-success').color,  // bootstrap 4's $success
                    table: style('table.table').borderCollapse,
                    icon: style('.fa-check-circle', '::before').fontFamily,
                    iconFont: document.fonts.check('900 16px "Font Awesome 6 Free"'),
                    scripts: [typeof jQuery, typeof jQuery.fn.bootstrapTable,
                              typeof jQuery.fn.datepicker, typeof Popper, typeof vegaEmbed],
                    resources: performance.getEntriesByType('resource').map(e => e.name),
                };
            })()"""
        )
        print(f"screenshot: {browser.screenshot(artifacts / 'data-docs.png')}")
        assert docs_style["navbar"] == "flex" and docs_style["sticky"] == "sticky", docs_style
        assert docs_style["success"] == "rgb(40, 167, 69)", docs_style
        assert docs_style["table"] == "collapse", docs_style
        assert "Font Awesome 6 Free" in docs_style["icon"] and docs_style["iconFont"], docs_style
        assert docs_style["scripts"] == ["function"] * 5, docs_style
        local = [r for r in docs_style["resources"] if r.startswith(f"{base}/kfs/static/datadocs/")]
        assert len(local) >= 15, docs_style["resources"]
        assert all(r.startswith(base) for r in docs_style["resources"]), docs_style["resources"]

        # --- the same page inside the Airflow UI, from its nav entry -----------------
        browser.navigate(f"{base}/plugin/kfs")
        framed = browser.wait(
            "(() => { const f = document.querySelector('iframe[title=KFS]');"
            " const d = f && f.contentDocument;"
            " return d && d.querySelector('#topics') ? d.body.innerText : null; })()",
            "the KFS page framed in the Airflow UI",
        )
        assert "orders" in framed and "Data quality" in framed
        nav_links = browser.evaluate(
            "[...document.querySelectorAll('a')].map(a => a.getAttribute('href'))"
            ".filter(h => h && h.includes('plugin/kfs'))"
        )
        assert nav_links, "no navigation link to the KFS page in the Airflow UI"

        print(f"screenshot: {browser.screenshot(artifacts / 'airflow-ui-kfs.png')}")

        # --- the cluster view: two daemons serving events -----------------------------
        page_url = f"{base}/kfs/"
        view = _cluster_view(browser, page_url)
        print(f"screenshot: {browser.screenshot(artifacts / 'kfs-cluster.png')}")
        assert view["shown"], view
        one, two = view["daemons"]
        assert [(d["node"], d["state"], d["badge"], d["durability"]) for d in (one, two)] == [
            (1, "running", "running", "store"), (2, "running", "running", "store"),
        ], view["daemons"]  # fmt: skip
        assert one["listeners"] == f"PLAINTEXT://{first.bootstrap}", one
        assert two["listeners"] == f"PLAINTEXT://{second.bootstrap}", two
        events = _events(view)
        assert [r["partition"] for r in events] == list(range(EVENTS_PARTITIONS)), view
        assert all(r["holder"] == "live" and not r["flagged"] for r in events), events
        assert {r["node"] for r in events} <= {"1", "2"} and all(
            int(r["epoch"]) >= 1 for r in events
        )
        # Each daemon holds what the leases name it for (and whatever else it opened).
        live = [r for r in view["leases"] if r["holder"] == "live"]
        assert [one["held"], two["held"]] == [
            sum(r["node"] == str(n) for r in live) for n in (1, 2)
        ], view
        # Nothing flushed yet: every acknowledged event is in the WAL objects, not in segments.
        assert all(r["catalogEnd"] == "0" for r in events), events
        assert all(r["unflushed"] == str(EVENTS_PER_PARTITION) for r in events), events
        assert int(one["unflushed"]) + int(two["unflushed"]) == (
            EVENTS_PARTITIONS * EVENTS_PER_PARTITION
        ), view["daemons"]
        assert " WAL object" in one["lag"], one
        epochs = {r["partition"]: int(r["epoch"]) for r in events}
        moved = {r["partition"] for r in events if r["node"] == "2"}

        # --- node 2 is killed: dead on the page, node 1 holds every partition -------------
        second.kill()

        def failed_over() -> dict[str, Any] | None:
            view = _cluster_view(browser, page_url)
            states = [(d["node"], d["state"]) for d in view["daemons"]]
            rows = _events(view)
            taken = all(r["holder"] == "live" and r["node"] == "1" for r in rows)
            return view if states == [(1, "running"), (2, "dead")] and taken else None

        view = wait_for(failed_over, timeout=120, interval=0.5, what="the failover on the page")
        print(f"screenshot: {browser.screenshot(artifacts / 'kfs-cluster-failover.png')}")
        for row in _events(view):
            newer = int(row["epoch"]) > epochs[row["partition"]]
            assert newer == (row["partition"] in moved), (row, epochs)
        assert view["daemons"][1]["badge"] == "dead"

        # --- node 1 stops too: no partition has a live holder, nothing is outside the segments ---
        assert first.stop() == 0
        view = _cluster_view(browser, page_url)
        print(f"screenshot: {browser.screenshot(artifacts / 'kfs-cluster-stopped.png')}")
        assert [(d["node"], d["state"]) for d in view["daemons"]] == [(1, "stopped"), (2, "dead")]
        events = _events(view)
        assert all(r["holder"] == "stopped" and r["flagged"] for r in events), events
        assert all("no live holder" in r["holderText"] for r in events), events
        assert all(r["catalogEnd"] == str(EVENTS_PER_PARTITION) for r in events), events
        assert all(r["unflushed"] in ("0", "–") for r in events), events  # noqa: RUF001 - the page's dash
        assert all(d["unflushed"] == "0" for d in view["daemons"]), view["daemons"]
        unheld = sum(r["flagged"] for r in view["leases"])
        assert f"{unheld} partitions without a live holder" in view["summary"], view["summary"]
    finally:
        browser.close()
