"""The catalog-load benchmark runs (at a small size) and loads with a bounded number of GETs."""

from __future__ import annotations

from kfs_core.storage.base import ObjectStore


def test_bench_catalog_load_small(store: ObjectStore) -> None:
    from bench.catalog_load import bench_catalog_load

    result = bench_catalog_load(store, commits=150, expire_every=50, loads=2)
    assert result["commits"] == 150
    assert result["version"] == 149
    assert result["lists"] == 0
    assert result["gets"] <= 2 + 10  # pointer, checkpoint, one probe batch
    # 4 rounds of 32 adds + 1 merge, then 18 more adds
    assert result["live_segments"] == 4 + 18
    assert result["tombstones"] == 4 * 32
    assert result["load_seconds"] > 0


def test_bench_commit_cost_small(store: ObjectStore) -> None:
    """The flush-commit bench fills a partition, then times commits that each add a segment."""
    from bench.catalog_load import bench_commit_cost

    result = bench_commit_cost(store, 150, commits=25)
    assert result["live_segments"] == 150
    assert result["commit_seconds"] > result["catalog_seconds"] > 0
    assert result["checkpoint_commit_seconds"] > 0  # 25 commits pass two checkpoints
    # The newest checkpoint lists every live segment: 150 filled in, then up to 20 flushed.
    assert 150 * 200 < result["checkpoint_bytes"] < 175 * 400
    assert result["checkpoint_every"] == 10  # far below the size that stretches it


def test_bench_commit_cost_rows() -> None:
    from bench.formats import COMMIT_CPU_TARGET_MS, bench_commit_cost

    rows = bench_commit_cost((20, 200))
    assert [r[0] for r in rows] == [
        "a flush's catalog commit, 20 live segments (CPU, without the store)",
        "a flush's catalog commit, 200 live segments (CPU, without the store)",
    ]
    assert rows[0][2] == "1.00x"
    assert f"target <= {COMMIT_CPU_TARGET_MS:g} ms" in rows[1][3]
    assert "target" not in rows[0][3]
