"""The groups benchmark stays runnable: a short form of `make bench`'s bench.groups."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_groups_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    from bench.groups import format_table, run

    rows = run(tmp_path, commits=300, seconds=0.5, rate_mb=1.0)
    table = format_table(rows)
    assert [r.what.split(":")[0].split(" ")[0] for r in rows] == [
        "rebalance",
        "rebalance",
        "end-to-end",
        "offset",
    ]
    assert "p50" in rows[2].value and "p99" in rows[2].value
    # 8 committing groups, commit i from group i % 8 for partition i % 6: 3 partitions each.
    assert rows[3].note.startswith("24 live offsets of 8 groups")
    assert all(r.value.split()[0] != "0" for r in rows[:2])
    assert "rebuild after 300 commits" in table
