"""KFS_* settings: defaults, parsing, and one-line errors for bad values."""

from __future__ import annotations

import pytest

from kfs_core.config import Settings, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("4096", 4096),
        ("4MiB", 4 << 20),
        ("4MB", 4 << 20),
        ("512mb", 512 << 20),
        ("1GB", 1 << 30),
        ("2k", 2048),
        ("7b", 7),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MiB", "-1", "1.5GB", "12 parsecs"])
def test_parse_size_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_defaults_follow_design(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KFS_HOME", str(tmp_path))
    s = Settings.from_env({})
    assert s.store_url == (tmp_path / "store").as_uri()
    assert s.data_dir == str(tmp_path / "data")
    assert (s.listen, s.durability, s.segment_bytes, s.flush_interval_ms, s.pool_bytes) == (
        "127.0.0.1:9092",
        "cautious",
        4 << 20,
        500,
        512 << 20,
    )
    assert s.readahead_segments == 2


def test_env_and_overrides() -> None:
    s = Settings.from_env(
        {"KFS_SEGMENT_BYTES": "8MiB", "KFS_NAMESPACE": "prod", "KFS_DURABILITY": "normal"},
        namespace="override",
    )
    assert (s.segment_bytes, s.namespace, s.durability) == (8 << 20, "override", "normal")


def test_bad_values_name_the_variable() -> None:
    with pytest.raises(ValueError, match="KFS_POOL_BYTES"):
        Settings.from_env({"KFS_POOL_BYTES": "lots"})
    with pytest.raises(ValueError, match="KFS_DURABILITY='reckless'"):
        Settings.from_env({"KFS_DURABILITY": "reckless"})
