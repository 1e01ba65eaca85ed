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
