"""Airflow fixtures: a migrated SQLite metadata database and the ``kfs_default`` connection.

The root conftest points ``AIRFLOW_HOME`` at a private directory before Airflow
is imported; `airflow_db` runs ``airflow db migrate`` there once per session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import AIRFLOW_HOME, REPO

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """``airflow db migrate`` on the session's SQLite database; yields AIRFLOW_HOME."""
    result = subprocess.run(
        [AIRFLOW, "db", "migrate"],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return AIRFLOW_HOME


def kfs_connection_env(store_url: str, namespace: str = "default", **extra: str) -> str:
    """The value of ``AIRFLOW_CONN_KFS_DEFAULT`` for a store."""
    return json.dumps(
        {"conn_type": "kfs", "extra": {"store_url": store_url, "namespace": namespace, **extra}}
    )


@pytest.fixture(autouse=True)
def _kfs_page_reads_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The KFS page serves no cached copy here: every request waits for its own read.

    So a test that writes and then loads the page sees the write (the reads are
    still the cache's incremental ones), however long a loaded machine takes
    over it; `tests/airflow/test_overview_cache.py` sets the ages and waits it
    tests on its own `OverviewCache`.
    """
    monkeypatch.setenv("KFS_PAGE_MAX_AGE_S", "0")
    monkeypatch.setenv("KFS_PAGE_WAIT_S", "inf")


@pytest.fixture
def kfs_connection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """``kfs_default`` on a fresh local directory store; yields the store URL."""
    url = (tmp_path / "store").as_uri()
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", kfs_connection_env(url))
    yield url


__all__ = ["AIRFLOW", "REPO", "kfs_connection_env"]
