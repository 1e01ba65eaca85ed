"""infra/: Spark defaults that Spark reads, Prometheus and Grafana files over the real metrics.

The Grafana dashboard is checked against a running `kfs serve`: every metric
its PromQL names must be one the daemon exports, and every label it groups or
labels by must be one those metrics carry.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
INFRA = ROOT / "infra"
SPARK_DEFAULTS = INFRA / "spark/spark-defaults.conf"
DASHBOARD = INFRA / "grafana/kfs-dashboard.json"
GRID_COLUMNS = 24
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}
# Labels Prometheus attaches to every scraped series (the target's), not the daemon.
TARGET_LABELS = {"job", "instance", "namespace"}
_METRIC = re.compile(r"\bkfs_[a-z0-9_]+\b")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


# --- Spark -----------------------------------------------------------------------------


def spark_defaults() -> dict[str, str]:
    conf = {}
    for line in SPARK_DEFAULTS.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, value = line.split(None, 1)
        assert key.startswith("spark."), key
        assert key not in conf, f"{key} set twice"
        conf[key] = value.strip()
    return conf


def test_spark_defaults_set_what_the_jobs_rely_on() -> None:
    conf = spark_defaults()
    assert conf["spark.ui.showConsoleProgress"] == "false"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert re.fullmatch(r"\d+[mg]", conf["spark.driver.memory"])
    assert re.fullmatch(r"\d+[mg]", conf["spark.executor.memory"])
    # Binding every interface would open a laptop's driver to its network (see the file).
    assert "spark.driver.bindAddress" not in conf and "spark.driver.host" not in conf


@pytest.mark.spark
def test_spark_reads_the_defaults_through_spark_conf_dir() -> None:
    probe = (
        "import json\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')"
        ".getOrCreate()\n"
        "print(json.dumps(dict(spark.sparkContext.getConf().getAll())))\n"
        "spark.stop()\n"
    )
    env = {
        **os.environ,
        "SPARK_CONF_DIR": str(SPARK_DEFAULTS.parent),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    expected = spark_defaults()
    # Spark puts its own module flags before the driver's Java options.
    java = "spark.driver.extraJavaOptions"
    assert seen.get(java, "").endswith(" " + expected.pop(java)), seen.get(java)
    assert {k: seen.get(k) for k in expected} == expected


# --- Prometheus ------------------------------------------------------------------------


def test_prometheus_config_has_unique_jobs_and_well_formed_targets() -> None:
    config = yaml.safe_load((INFRA / "prometheus/prometheus.yml").read_text())
    assert re.fullmatch(r"\d+[smh]", config["global"]["scrape_interval"])
    jobs = [job["job_name"] for job in config["scrape_configs"]]
    assert len(jobs) == len(set(jobs)) and "kfs" in jobs
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            for target in static["targets"]:
                assert re.fullmatch(r"[a-z0-9.-]+:\d+", target), target


# --- Grafana: the dashboard's shape ------------------------------------------------------


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict[str, Any]]:
    return dashboard()["panels"]


def queries() -> Iterator[tuple[str, str, str]]:
    """(panel title, PromQL, legend) of every target, and of the template variables."""
    for panel in panels():
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"], target.get("legendFormat", "")
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            yield f"${variable['name']}", variable["definition"], ""


def test_dashboard_has_the_fields_grafana_requires() -> None:
    board = dashboard()
    assert isinstance(board["uid"], str) and 0 < len(board["uid"]) <= 40
    assert board["title"] and isinstance(board["schemaVersion"], int)
    assert board["time"] == {"from": "now-1h", "to": "now"}
    assert "kfs" in board["tags"]
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels():
        assert panel["type"] in {"row", "stat", "timeseries"}, panel["title"]
        assert panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert target["expr"].strip()
        assert "unit" in panel["fieldConfig"]["defaults"]


def test_dashboard_panels_fit_the_grid_without_overlapping() -> None:
    boxes = []
    for panel in panels():
        g = panel["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy"), panel["title"]
        assert g["x"] >= 0 and g["y"] >= 0 and g["w"] > 0 and g["h"] > 0
        assert g["x"] + g["w"] <= GRID_COLUMNS, panel["title"]
        boxes.append((panel["title"], g))
    for (a, ga), (b, gb) in combinations(boxes, 2):
        apart = (
            ga["x"] + ga["w"] <= gb["x"]
            or gb["x"] + gb["w"] <= ga["x"]
            or ga["y"] + ga["h"] <= gb["y"]
            or gb["y"] + gb["h"] <= ga["y"]
        )
        assert apart, f"{a!r} overlaps {b!r}"


def test_dashboard_queries_are_balanced_and_use_defined_variables() -> None:
    defined = {v["name"] for v in dashboard()["templating"]["list"]} | BUILTIN_VARIABLES
    for title, expr, _legend in queries():
        stack = []
        pairs = {")": "(", "]": "[", "}": "{"}
        for char in re.sub(r'"[^"]*"', '""', expr):
            if char in "([{":
                stack.append(char)
            elif char in pairs:
                assert stack and stack.pop() == pairs[char], f"{title}: unbalanced {expr}"
        assert not stack and expr.count('"') % 2 == 0, f"{title}: unbalanced {expr}"
        used = {a or b for a, b in _VARIABLE.findall(expr)}
        assert used <= defined, f"{title}: undefined {used - defined}"
        assert _METRIC.search(expr), f"{title}: names no KFS metric"


def test_datasource_provisioning_is_the_default_prometheus() -> None:
    [source] = yaml.safe_load(
        (INFRA / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    [provider] = yaml.safe_load((INFRA / "grafana/provisioning/dashboards/kfs.yml").read_text())[
        "providers"
    ]
    assert provider["type"] == "file"


# --- Grafana: the dashboard against a running daemon ----------------------------------------


def exported_series(exposition: str) -> dict[str, set[str]]:
    """Every series name a scrape can hold, with its labels (histograms and counters expanded)."""
    from prometheus_client.parser import text_string_to_metric_families

    from kfs_core.server.metrics import ServerMetrics

    # Labelled metrics without children yet still have their label names in the registry.
    declared = {
        metric._name: set(metric._labelnames)
        for metric in vars(ServerMetrics()).values()
        if hasattr(metric, "_labelnames")
    }
    suffixes = {"counter": ["_total", "_created"], "gauge": [""], "unknown": [""],
                "histogram": ["_bucket", "_count", "_sum", "_created"]}  # fmt: skip
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        labels = set(declared.get(family.name, set()))
        for sample in family.samples:
            labels |= set(sample.labels) - {"le"}
            series.setdefault(sample.name, set())
        for suffix in suffixes[family.type]:
            series.setdefault(family.name + suffix, set())
        for name in list(series):
            if name == family.name or name.removeprefix(family.name) in suffixes[family.type]:
                series[name] |= labels
    return series


@pytest.fixture(scope="module")
def daemon_series(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, set[str]]]:
    from testkit.daemon import DaemonFactory
    from tests.server.conftest import consume_confluent, produce_confluent

    factory = DaemonFactory(tmp_path_factory.mktemp("dashboard"))
    try:
        daemon = factory.start()
        # Traffic, so that labelled series (by API, by store operation) exist.
        values = [b"value-%d" % i for i in range(20)]
        produce_confluent(daemon.bootstrap, "dashboard", values, partitions=1)
        assert len(consume_confluent(daemon.bootstrap, "dashboard", 1, len(values))) == len(values)
        status, text = daemon.http("/metrics")
        assert status == 200
        yield exported_series(text)
    finally:
        factory.close()


@pytest.mark.integration
def test_every_metric_and_label_in_the_dashboard_is_exported(
    daemon_series: dict[str, set[str]],
) -> None:
    assert "kfs_requests_total" in daemon_series and "api" in daemon_series["kfs_requests_total"]
    for title, expr, legend in queries():
        metrics = set(_METRIC.findall(expr))
        missing = metrics - set(daemon_series)
        assert not missing, f"{title}: the daemon exports no {sorted(missing)}"
        labels = set().union(*(daemon_series[m] for m in metrics)) | TARGET_LABELS
        grouped = {
            label.strip()
            for clause in _GROUPING.findall(expr)
            for label in clause.split(",")
            if label.strip()
        }
        assert grouped - {"le"} <= labels, f"{title}: no label {grouped - {'le'} - labels}"
        shown = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        assert shown <= grouped | labels, f"{title}: legend names {shown - grouped - labels}"
        if grouped:
            assert shown <= grouped, f"{title}: legend {shown} is aggregated away"


def test_dashboard_covers_the_daemons_main_metrics() -> None:
    used = {m for _title, expr, _legend in queries() for m in _METRIC.findall(expr)}
    for metric in ("kfs_requests_total", "kfs_request_latency_seconds_bucket",
                   "kfs_wal_fsync_seconds_bucket", "kfs_flush_seconds_bucket",
                   "kfs_object_store_requests_total", "kfs_object_store_errors_total",
                   "kfs_partition_errors_total", "kfs_log_pool_used_bytes", "kfs_ready",
                   "kfs_log_pool_wait_seconds_total"):  # fmt: skip
        assert metric in used, metric


# --- the README ---------------------------------------------------------------------------


def test_infra_readme_explains_every_file() -> None:
    readme = (INFRA / "README.md").read_text()
    for path in sorted(INFRA.rglob("*")):
        relative = path.relative_to(INFRA).as_posix()
        if path.is_file() and path.name != "README.md" and not relative.startswith("airflow/"):
            assert relative in readme, f"infra/README.md does not mention {relative}"
    assert "airflow/airflow.env" in readme
