"""Maintenance against a live daemon in short form: `make soak` runs many more rounds.

A real `kfs serve` under two idempotent producers, tail consumers and a cold
consumer, while compaction, retention, checkpoint and index_rebuild run on its
store (one after another, then compaction and retention at once), on a
``delete`` topic and a ``compact`` topic; see `soak.maintenance_live`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from soak import maintenance_live
from soak.report import format_table
from testkit.daemon import DaemonFactory

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]


def test_jobs_against_a_live_daemon_lose_nothing_they_may_not(tmp_path: Path, spark: Any) -> None:
    factory = DaemonFactory(tmp_path)
    try:
        daemon = factory.start(name="maintained", extra_args=maintenance_live.daemon_args())
        seed = random.randrange(1 << 30)
        row = maintenance_live.run(
            daemon, spark, rounds=2, seed=seed, store_url=daemon.store_url, progress=print
        )
    finally:
        factory.close()
    report = format_table([row])
    print(report)
    assert row.acknowledged > 0
    assert row.passed, report + "\n" + daemon.log()[-3000:]
