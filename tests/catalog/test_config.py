"""Topic names and topic configs: Kafka's names, defaults and rules."""

from __future__ import annotations

import pytest

from kfs_core.catalog import (
    CONFIG_KEYS,
    DEFAULT_CONFIGS,
    KFS_CONFIG_KEYS,
    PartitionField,
    TopicConfig,
    validate_config,
    validate_topic_name,
)
from kfs_core.errors import InvalidConfig, InvalidTopicName

# --- topic names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "orders",
        "Orders.v2",
        "my_topic-1",
        "__consumer_offsets",
        "...",
        ".a",
        "a..",
        "-",
        "_",
        "x" * 249,
        "0",
    ],
)
def test_valid_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "non-empty"),
        (".", "cannot be '.'"),
        ("..", "cannot be '..'"),
        ("x" * 250, "250 characters long; the limit is 249"),
        ("a b", "illegal"),
        ("a/b", "illegal"),
        ("a\\b", "illegal"),
        ("tópico", "illegal"),
        ("a:b", "illegal"),
        ("a\nb", "illegal"),
        ("_topics", "reserved"),
        ("_reports", "reserved"),
        (None, "non-empty string"),
        (42, "non-empty string"),
    ],
)
def test_invalid_topic_names(name: object, message: str) -> None:
    with pytest.raises(InvalidTopicName, match=message):
        validate_topic_name(name)


# --- configs ----------------------------------------------------------------------------

KAFKA_DEFAULTS = {
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "segment.bytes": "134217728",  # KFS: 128 MiB compaction outputs (Kafka: 1 GiB)
    "max.message.bytes": "1048588",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "min.cleanable.dirty.ratio": "0.5",
    "message.timestamp.type": "CreateTime",
    "segment.ms": "604800000",
    "max.compaction.lag.ms": "9223372036854775807",
    # Accepted and shown, no effect on KFS.
    "segment.jitter.ms": "0",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "file.delete.delay.ms": "60000",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.after.max.ms": "9223372036854775807",  # Kafka 4: 3600000
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "preallocate": "false",
    "remote.storage.enable": "false",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    # Kafka 3.x's, removed in Kafka 4.
    "message.format.version": "3.0-IV1",
    "message.downconversion.enable": "true",
    "message.timestamp.difference.max.ms": "9223372036854775807",
}


def test_defaults_are_kafkas() -> None:
    kafkas = {k: v for k, v in DEFAULT_CONFIGS.items() if k not in KFS_CONFIG_KEYS}
    assert kafkas == KAFKA_DEFAULTS
    assert {k: DEFAULT_CONFIGS[k] for k in KFS_CONFIG_KEYS} == {
        "kfs.table.enabled": "false",
        "kfs.table.format": "iceberg",
        "kfs.table.partition.by": "",
    }


def test_table_partitioning_reads_iceberg_transforms() -> None:
    config = TopicConfig.from_configs(
        {"kfs.table.enabled": "TRUE", "kfs.table.partition.by": "day(_timestamp), bucket(16, id),c"}
    )
    assert config.kfs_table_enabled
    fields = config.kfs_table_partition_by
    assert [str(f) for f in fields] == ["day(_timestamp)", "bucket(16, id)", "c"]
    assert fields[1] == PartitionField("bucket", "id", 16)
    assert TopicConfig.from_configs({}).kfs_table_partition_by == ()


def test_typed_defaults() -> None:
    config = TopicConfig.from_configs()
    assert config.retention_ms == 604_800_000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == frozenset({"delete"})
    assert config.compression_type == "producer"
    assert config.segment_bytes == 134_217_728
    assert config.max_message_bytes == 1_048_588
    assert config.delete_retention_ms == 86_400_000
    assert config.min_compaction_lag_ms == 0
    assert config.min_cleanable_dirty_ratio == 0.5
    assert config.message_timestamp_type == "CreateTime"
    assert config.segment_ms == 604_800_000
    assert config.max_compaction_lag_ms == 2**63 - 1
    assert config.deletes and not config.compacted


@pytest.mark.parametrize("name", sorted(KAFKA_DEFAULTS))
def test_every_default_validates(name: str) -> None:
    assert validate_config(name, KAFKA_DEFAULTS[name]) == KAFKA_DEFAULTS[name]


GOOD = [
    ("retention.ms", "-1"),
    ("retention.ms", 0),
    ("retention.bytes", "1073741824"),
    ("cleanup.policy", "compact"),
    ("cleanup.policy", "compact,delete"),
    ("cleanup.policy", "delete,compact"),
    ("compression.type", "zstd"),
    ("compression.type", "uncompressed"),
    ("segment.bytes", "14"),
    ("max.message.bytes", "0"),
    ("delete.retention.ms", "0"),
    ("min.compaction.lag.ms", "60000"),
    ("min.cleanable.dirty.ratio", "0"),
    ("min.cleanable.dirty.ratio", 1.0),
    ("message.timestamp.type", "LogAppendTime"),
    ("segment.ms", "1"),
    ("max.compaction.lag.ms", "1"),
    ("flush.messages", "1"),
    ("flush.ms", "0"),
    ("compression.gzip.level", "9"),
    ("compression.zstd.level", "-5"),
    ("unclean.leader.election.enable", "TRUE"),
    ("leader.replication.throttled.replicas", "*"),
    ("follower.replication.throttled.replicas", "0:1, 1:2"),
    ("message.format.version", "2.8-IV1"),
    ("message.format.version", "0.10.2"),
    ("local.retention.ms", "-2"),
]


@pytest.mark.parametrize(("name", "value"), GOOD)
def test_good_values(name: str, value: object) -> None:
    validate_config(name, value)  # type: ignore[arg-type]


BAD = [
    ("retention.ms", "-2", "an integer >= -1"),
    ("retention.ms", "1.5", "an integer >= -1"),
    ("retention.ms", True, "an integer >= -1"),
    ("retention.bytes", "lots", "an integer >= -1"),
    ("cleanup.policy", "archive", "delete, compact or compact,delete"),
    ("cleanup.policy", "delete,delete", "delete, compact or compact,delete"),
    ("cleanup.policy", "", "delete, compact or compact,delete"),
    ("compression.type", "brotli", "producer, uncompressed, gzip, snappy, lz4, zstd"),
    ("compression.type", "ZSTD", "producer, uncompressed, gzip, snappy, lz4, zstd"),
    ("segment.bytes", "13", "an integer from 14 to 2147483647"),
    ("segment.bytes", "2147483648", "an integer from 14 to 2147483647"),
    ("segment.bytes", "1_000", "an integer from 14 to 2147483647"),
    ("max.message.bytes", "-1", "an integer from 0 to 2147483647"),
    ("delete.retention.ms", "-1", "an integer >= 0"),
    ("min.compaction.lag.ms", "-5", "an integer >= 0"),
    ("min.cleanable.dirty.ratio", "1.01", "a number from 0 to 1"),
    ("min.cleanable.dirty.ratio", "nan", "a number from 0 to 1"),
    ("min.cleanable.dirty.ratio", "-0.1", "a number from 0 to 1"),
    ("message.timestamp.type", "createtime", "CreateTime or LogAppendTime"),
    ("segment.ms", "0", "an integer >= 1"),
    ("max.compaction.lag.ms", "0", "an integer >= 1"),
    ("segment.jitter.ms", "-1", "an integer >= 0"),
    ("segment.index.bytes", "3", "an integer from 4 to 2147483647"),
    ("index.interval.bytes", "-1", "an integer from 0 to 2147483647"),
    ("flush.messages", "0", "an integer >= 1"),
    ("flush.ms", "-1", "an integer >= 0"),
    ("file.delete.delay.ms", "soon", "an integer >= 0"),
    ("compression.gzip.level", "0", "-1 or an integer from 1 to 9"),
    ("compression.lz4.level", "18", "an integer from 1 to 17"),
    ("compression.zstd.level", "23", "an integer from -131072 to 22"),
    ("message.timestamp.before.max.ms", "-1", "an integer >= 0"),
    ("message.timestamp.after.max.ms", "-1", "an integer >= 0"),
    ("min.insync.replicas", "0", "an integer from 1 to 2147483647"),
    ("unclean.leader.election.enable", "yes", "true or false"),
    ("leader.replication.throttled.replicas", "0-1", "empty, * or partition:broker"),
    ("follower.replication.throttled.replicas", "*,0:1", "empty, * or partition:broker"),
    ("preallocate", "1", "true or false"),
    ("remote.storage.enable", "", "true or false"),
    ("local.retention.ms", "-3", "an integer >= -2"),
    ("local.retention.bytes", "-3", "an integer >= -2"),
    ("remote.log.copy.disable", "no", "true or false"),
    ("remote.log.delete.on.disable", "no", "true or false"),
    ("message.format.version", "latest", "a Kafka version"),
    ("message.downconversion.enable", "maybe", "true or false"),
    ("message.timestamp.difference.max.ms", "-1", "an integer >= 0"),
    ("kfs.table.enabled", "yes", "true or false"),
    ("kfs.table.format", "delta", "[iceberg]"),
    ("kfs.table.partition.by", "day(", "a comma-separated list of columns"),
    ("kfs.table.partition.by", "week(_timestamp)", "a comma-separated list of columns"),
    ("kfs.table.partition.by", "bucket(id)", "a comma-separated list of columns"),
    ("kfs.table.partition.by", "day(_timestamp), _timestamp", "a comma-separated list of columns"),
    ("kfs.table.partition.by", "a.b", "a comma-separated list of columns"),
]


@pytest.mark.parametrize(("name", "value", "allowed"), BAD)
def test_bad_values_name_the_key_and_what_is_allowed(
    name: str, value: object, allowed: str
) -> None:
    with pytest.raises(InvalidConfig) as caught:
        validate_config(name, value)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{name}: ")
    assert f"allowed: {allowed}" in message
    assert caught.value.key == name


def test_every_key_has_a_bad_value_tested() -> None:
    assert {name for name, _, _ in BAD} == set(CONFIG_KEYS)


def test_unknown_config_names_are_rejected() -> None:
    with pytest.raises(
        InvalidConfig, match=r"unknown topic config 'retention\.hours'; known: cleanup\.policy"
    ):
        validate_config("retention.hours", "1")


def test_values_are_normalised_to_kafkas_string_form() -> None:
    assert validate_config("retention.ms", 1000) == "1000"
    assert validate_config("retention.ms", " 1000 ") == "1000"
    assert validate_config("cleanup.policy", "compact, delete") == "compact,delete"
    assert validate_config("min.cleanable.dirty.ratio", 0.25) == "0.25"


def test_min_compaction_lag_above_max_is_refused_as_kafka_does() -> None:
    with pytest.raises(InvalidConfig, match=r"min\.compaction\.lag\.ms \(5000\) is above"):
        TopicConfig.from_configs({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "10"})


def test_every_config_kafka_documents_is_known() -> None:
    """Kafka 4's topic configs (its LogConfig) and Kafka 3.x's three removed ones."""
    assert set(CONFIG_KEYS) - KFS_CONFIG_KEYS == set(KAFKA_DEFAULTS)


def test_typed_view_with_overrides() -> None:
    config = TopicConfig.from_configs({"cleanup.policy": "compact,delete", "retention.ms": -1})
    assert config.compacted and config.deletes
    assert config.retention_ms == -1
    with pytest.raises(InvalidConfig):
        TopicConfig.from_configs({"retention.ms": "soon"})
