"""KFS_* settings: defaults, parsing, and one-line errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfs_core.config import Settings, env_name, format_size, operator_settings, parse_size


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


# --- one declaration: the variable, the flag, the check and DescribeConfigs ----------


def test_every_operator_setting_is_a_variable_a_flag_and_in_the_readme() -> None:
    from click.testing import CliRunner

    from kfs_core.cli import main

    help_text = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200).output
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    names = [field.name for field, _ in operator_settings()]
    assert "segment_bytes" in names and "offsets_topic_num_partitions" in names
    for name in names:
        assert f"--{name.replace('_', '-')}" in help_text, name
        assert env_name(name) in help_text, name
        assert f"`{env_name(name)}`" in readme, name
    # The log's tuning knobs are not operator settings.
    assert "flush_concurrency" not in names and "--flush-concurrency" not in help_text


@pytest.mark.parametrize(
    ("field", "raw", "value"),
    [
        ("auto_create_topics", "false", False),
        ("auto_create_topics", "1", True),
        ("default_partitions", "3", 3),
        ("segment_bytes", "1MiB", 1 << 20),
        ("log_level", "debug", "debug"),
        ("compression_codec", "zstd", "zstd"),
    ],
)
def test_each_kind_is_read_from_the_environment(field: str, raw: str, value: object) -> None:
    assert getattr(Settings.from_env({env_name(field): raw}), field) == value


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KFS_AUTO_CREATE_TOPICS": "maybe"}, "KFS_AUTO_CREATE_TOPICS: not a boolean"),
        ({"KFS_DEFAULT_PARTITIONS": "0"}, "KFS_DEFAULT_PARTITIONS must be positive, got 0"),
        ({"KFS_CACHE_SIZE": "-1"}, "KFS_CACHE_SIZE: not a size"),
        ({"KFS_COMPRESSION_CODEC": "brotli"}, "KFS_COMPRESSION_CODEC='brotli': expected one of"),
        ({"KFS_LOG_LEVEL": "loud"}, "KFS_LOG_LEVEL='loud': expected one of debug, info"),
        (
            {"KFS_GROUP_MIN_SESSION_TIMEOUT_MS": "10", "KFS_GROUP_MAX_SESSION_TIMEOUT_MS": "5"},
            "KFS_GROUP_MIN_SESSION_TIMEOUT_MS must be at most",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        Settings.from_env(env)
    assert "\n" not in str(caught.value)


def test_a_bad_flag_value_is_a_one_line_operator_error(tmp_path) -> None:
    from click.testing import CliRunner

    from kfs_core.cli import main

    result = CliRunner().invoke(
        main, ["serve", "--pool-bytes", "0", "--data-dir", str(tmp_path)], env={}
    )
    assert result.exit_code == 1
    assert result.output.strip() == "kfs: error: KFS_POOL_BYTES must be positive, got 0"


def test_the_broker_configs_come_from_the_declaration() -> None:
    configs = Settings(
        segment_bytes=1 << 20, auto_create_topics=False, offsets_topic_num_partitions=2
    ).broker_configs()
    assert configs["kfs.segment.bytes"] == str(1 << 20)
    assert configs["auto.create.topics.enable"] == "false"
    assert configs["num.partitions"] == "1"
    assert configs["offsets.topic.num.partitions"] == "2"
    assert configs["group.initial.rebalance.delay.ms"] == "300"
    # Only settings that name a broker config are shown; none of the tuning is.
    assert "flush_concurrency" not in configs and "pool_bytes" not in configs


def test_sizes_format_back_to_what_parse_size_reads() -> None:
    for size in (0, 7, 4096, 4 << 20, 512 << 20, 1 << 30, 3 << 40):
        assert parse_size(format_size(size)) == size
    assert format_size(4 << 20) == "4MiB"
