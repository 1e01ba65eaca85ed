"""The transactions benchmark stays runnable: a short form of `make bench`'s bench.transactions."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_transactions_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    from bench.transactions import format_table, run

    rows = run(tmp_path, seconds=0.5, commit_ms=100)
    table = format_table(rows)
    assert [r.what for r in rows][:2] == [
        "produce, idempotent (acks=all)",
        "produce, transactional (a commit every 100 ms)",
    ]
    assert "target >= 0.8" in rows[1].note
    assert all(r.value.split()[0] != "0.0" for r in rows), table
