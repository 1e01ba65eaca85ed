"""Spark job test fixtures: one local SparkSession per test session, tier markers, warnings.

`spark` is session-scoped: starting a JVM costs seconds, so every Spark test
shares one ``local[2]`` session with two shuffle partitions, no UI and quiet
logging.  Jobs reuse the active session (`spark_jobs.common.get_spark`), so a
test that calls ``run(options)`` without passing ``spark`` still uses it.

Every test collected here is marked ``spark``; those that touch S3 on moto
(the ``s3`` side of the ``store`` fixture) also ``integration``.  The
warning filters below apply to these tests only and only to the third-party
modules that warn; the suite keeps ``error`` for everything else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = Path(__file__).parent

# Narrow filters for third-party noise we do not control (pytest -W syntax):
# Great Expectations' fluent datasources import the stdlib's deprecated
# sre_constants and sre_parse modules (great_expectations/datasource/fluent/
# data_connector/file_path_data_connector.py).  Nothing else here warns.
WARNING_FILTERS = (
    "ignore:module 'sre_constants' is deprecated:DeprecationWarning",
    "ignore:module 'sre_parse' is deprecated:DeprecationWarning",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE not in Path(str(item.fspath)).parents:
            continue
        item.add_marker(pytest.mark.spark)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("store") == "s3":
            item.add_marker(pytest.mark.integration)
        for spec in WARNING_FILTERS:
            item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local SparkSession for the whole test session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kfs-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
