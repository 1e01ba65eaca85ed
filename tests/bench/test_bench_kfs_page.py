"""bench.kfs_page in short form (20 partitions on the session's moto server): every row comes out."""

from __future__ import annotations

import pytest

# The KFS page serves no cached copy in the Airflow tests; the bench's test runs as they do.
from tests.airflow.conftest import _kfs_page_reads_every_request  # noqa: F401 - autouse

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`"),
]


def test_the_page_bench_runs_small(moto_server: str) -> None:
    from bench.kfs_page import format_table, run

    # The restarted page's wait is long: on a busy machine fetching the stored copy can
    # take longer than the 1 s a user's request waits (the page then says "loading").
    rows = run(partitions=20, topics=2, commits=2, endpoint_url=moto_server, restart_wait_s=60.0)
    table = format_table(rows)
    print(table)
    cases = [r["case"] for r in rows]
    assert "first request (nothing read, no stored copy)" in cases
    assert "warm request (cached copy)" in cases
    assert all(r["seconds"] >= 0 for r in rows)
    restarted = next(r for r in rows if r["case"] == "first request after an api-server restart")
    assert restarted["note"].startswith("20 partition rows from a copy")
    assert len(table.splitlines()) == len(rows) + 2
