"""bench.table_freshness stays runnable: its short form times a few records into a table."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_the_freshness_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    from bench.table_freshness import QUICK, run, table

    figures = run(tmp_path, **QUICK)
    assert figures.records >= 10 and len(figures.freshness_s) == figures.records
    assert figures.job_runs_s and all(s > 0 for s in figures.freshness_s)
    rendered = table(figures)
    assert rendered.count("met") + rendered.count("MISSED") == 2, rendered
