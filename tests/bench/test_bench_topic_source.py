"""bench.topic_source stays runnable: its short form reads one small topic three ways."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_the_data_source_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    from bench.topic_source import QUICK, run, table

    figures = run(tmp_path, **QUICK)
    assert figures.records == 8192 and figures.segment_mb > 8
    assert figures.raw_s > 0 and figures.source_s > 0 and figures.consumer_s > 0
    rendered = table(figures)
    assert rendered.count("met") + rendered.count("MISSED") == 2, rendered
