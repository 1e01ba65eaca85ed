"""bench.maintenance in short form (0.1 GiB; `make bench` runs it on 1 GiB): every kind of row comes out.

The warm job runs, the jobs as tasks on a job server, and one scheduled task
per job both ways (a cold spark-submit, a request to the server), with no
problem reported; the figures themselves are the bench's business.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_the_maintenance_bench_runs_small(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.maintenance", "--quick", "--dir",
         str(tmp_path)],
        check=False, capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout
    for row in (
        "validation job, local[2]",
        "  validation job including start-up, as a task on the job server",
        "  compaction job including start-up, as a task on the job server",
        "  validation job including a new driver's start-up, local[2]",
        *(f"one scheduled task, cold: {job}" for job in ("validation", "compaction")),
        *(f"one scheduled task, on the job server: {job}" for job in ("validation", "checkpoint")),
    ):
        assert f"\n{row} " in table, f"no row {row!r}:\n{table}"
    assert "PROBLEM:" not in table, table
    assert not list(tmp_path.iterdir()), "the bench left its store behind"
