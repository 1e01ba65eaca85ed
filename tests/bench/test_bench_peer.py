"""The peer benchmark stays runnable: bench.peer's short form, KFS beside Apache Kafka."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_peer_benchmark_runs_kfs_and_kafka_at_a_tiny_size(tmp_path: Path) -> None:
    from bench.peer import KAFKA_FSYNC, KFS, QUICK, figures_table, ratios, ratios_table, run

    results = run(tmp_path, **QUICK)
    assert [f.name for f in results] == [KFS, KAFKA_FSYNC]
    for figures in results:
        [saturation] = figures.saturation.values()
        assert saturation.mb_s > 0 and saturation.cpu_s > 0, figures_table(results)
        assert figures.tail_mb_s and figures.cold_mb_s and figures.peak_rss_mb > 0
        [(p50, p99, p999)] = figures.latency_ms.values()
        assert 0 < p50 <= p99 <= p999
    judged = ratios(results)
    assert {r.what.split(": ")[1] for r in judged} == {
        "MB per broker CPU-second", "produce MB/s", "ack p99", "peak RSS",
    }  # fmt: skip
    assert all(r.judged in ("met", "MISSED") for r in judged if r.target), ratios_table(judged)
