"""bench.wal stays runnable: a tiny form of `make bench`'s WAL rows."""

from __future__ import annotations

from pathlib import Path


def test_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    from bench.wal import format_table, run

    results = run(str(tmp_path), seconds=0.05)
    assert [(r.batch_bytes, r.writers) for r in results] == [
        (size, writers) for size in (1024, 1 << 20) for writers in (1, 1, 1, 8)
    ]
    assert all(r.appends > 0 and r.seconds > 0 for r in results)
    assert "appends/s" in format_table(results)
