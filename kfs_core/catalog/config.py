"""Topic configs with Kafka's names, defaults and validation rules, and topic name rules.

Configs are stored as Kafka sends them: a mapping of name to string holding
only the overrides; `TopicConfig` is the typed view with every default filled
in.  Defaults are Kafka's, except:

- ``segment.bytes`` defaults to 134217728 (128 MiB), not Kafka's 1 GiB: in
  KFS it sizes compaction's outputs (the daemon seals small segments at
  ``KFS_SEGMENT_BYTES``, 4 MiB), and 128 MiB is what docs/architecture.md
  ("Configuration") settles on.
  Its lower bound is Kafka 3.x's (14 bytes) so tests can compact tiny data.
- ``message.timestamp.after.max.ms`` shows Kafka 3.x's default (no bound),
  not Kafka 4's hour: KFS does not bound timestamps.

Every config name Kafka 4 accepts is accepted, and Kafka 3.x's three removed
ones too.  KFS honours the retention, cleanup, compaction, segment, message
size, compression type and timestamp type configs; the others are validated
and shown but change nothing, each `ConfigKey.effect` saying why
(docs/architecture.md, "Topic configs", lists them).

Three configs are KFS's own, all ``kfs.table.*``: they ask the ``tables``
job for an Iceberg table of the topic (`kfs_core.tables`).  DescribeConfigs
lists them beside Kafka's, as other Kafka-compatible brokers list theirs.

Every error is an `InvalidConfig` with a one-line message naming the key and
what it allows.  Topic names follow Kafka: ``[a-zA-Z0-9._-]+``, at most 249
characters, not ``.`` or ``..``; KFS also reserves the names of its own
directories in a namespace (``_topics``, ``_reports``, ``_snapshots``,
``_control``: `kfs_core.namespace.RESERVED_NAMES`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kfs_core.errors import InvalidConfig, InvalidTopicName
from kfs_core.namespace import RESERVED_NAMES

MAX_TOPIC_NAME_LENGTH = 249
RESERVED_TOPIC_NAMES = RESERVED_NAMES
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MAX = 2**31 - 1

CLEANUP_POLICIES = ("delete", "compact")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

ConfigValue = str | int | float


def validate_topic_name(name: object) -> str:
    """``name`` if Kafka (and KFS) accept it as a topic name; `InvalidTopicName` otherwise."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicName(f"topic name must be a non-empty string, got {name!r}", name=name)
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}", name=name)
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(
            f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}",
            name=name,
        )
    if not _TOPIC_NAME.match(name):
        raise InvalidTopicName(
            f"topic name {name!r} is illegal: use only ASCII letters, digits, '.', '_' and '-'",
            name=name,
        )
    if name in RESERVED_TOPIC_NAMES:
        raise InvalidTopicName(
            f"topic name {name!r} is reserved for KFS's own objects in the namespace",
            name=name,
        )
    return name


@dataclass(frozen=True)
class ConfigKey:
    """One topic config: its default (as Kafka writes it), its type and how a value is checked.

    ``kind`` is Kafka's ``ConfigDef.Type`` (boolean, string, int, long,
    double, list), as DescribeConfigs reports it.  ``effect`` is empty for a
    config KFS honours, else one line on why it changes nothing on KFS.
    """

    name: str
    default: str
    allowed: str  # what the error message says is allowed
    parse: Callable[[str], object]  # raises ValueError on a bad value; returns the typed value
    kind: str = "long"
    effect: str = ""


def _integer(low: int, high: int) -> Callable[[str], object]:
    def parse(text: str) -> int:
        if not _INTEGER.match(text):
            raise ValueError(text)
        value = int(text)
        if not low <= value <= high:
            raise ValueError(text)
        return value

    return parse


def _ratio(text: str) -> float:
    if "_" in text:  # Python's float() takes "0_5"; Kafka's parser does not
        raise ValueError(text)
    value = float(text)
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(text)
    return value


def _one_of(choices: tuple[str, ...]) -> Callable[[str], object]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text

    return parse


def _boolean(text: str) -> bool:
    """Kafka's ConfigDef: ``true`` or ``false``, in any case."""
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def _gzip_level(text: str) -> int:
    """-1 (the codec's default) or 1 to 9, as Kafka's ``CompressionType.GZIP``."""
    value = _integer(-1, 9)(text)
    if value == 0:
        raise ValueError(text)
    return int(text)


def _throttled_replicas(text: str) -> tuple[str, ...]:
    """Kafka's ThrottledReplicaListValidator: empty, ``*``, or ``partition:broker,...``."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if items == ("*",):
        return items
    for item in items:
        partition, _, broker = item.partition(":")
        if not (partition.isdigit() and broker.isdigit()):
            raise ValueError(text)
    return items


_FORMAT_VERSION = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?(-IV[0-9]+)?$")


def _format_version(text: str) -> str:
    """A Kafka 3.x ``message.format.version``: ``0.10.2``, ``2.8-IV1``, ``3.0`` ..."""
    if not _FORMAT_VERSION.match(text):
        raise ValueError(text)
    return text


TABLE_FORMATS = ("iceberg",)
TABLE_TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
_OUTER_COMMA = re.compile(r",(?![^()]*\))")  # not the one inside "bucket(16, id)"
_PARTITION_FIELD = re.compile(
    r"^(?:(?P<transform>[a-z]+)\((?:(?P<width>[0-9]+)\s*,\s*)?(?P<inner>[A-Za-z_][A-Za-z0-9_]*)\)"
    r"|(?P<column>[A-Za-z_][A-Za-z0-9_]*))$"
)


@dataclass(frozen=True)
class PartitionField:
    """One field of ``kfs.table.partition.by``: an Iceberg transform of a column."""

    transform: str  # one of TABLE_TRANSFORMS
    column: str
    width: int | None = None  # bucket's count or truncate's width

    def __str__(self) -> str:
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.transform}({self.width}, {self.column})"
        return f"{self.transform}({self.column})"


def _partition_by(text: str) -> tuple[PartitionField, ...]:
    """``col, day(_timestamp), bucket(16, id), truncate(4, name)``: Iceberg's transforms."""
    fields = []
    for item in (part.strip() for part in _OUTER_COMMA.split(text) if part.strip()):
        match = _PARTITION_FIELD.match(item)
        if match is None:
            raise ValueError(text)
        if match["column"]:
            fields.append(PartitionField("identity", match["column"]))
            continue
        transform, width = match["transform"], match["width"]
        needs_width = transform in ("bucket", "truncate")
        if transform not in TABLE_TRANSFORMS or needs_width != (width is not None):
            raise ValueError(text)
        if width is not None and int(width) < 1:
            raise ValueError(text)
        fields.append(PartitionField(transform, match["inner"], int(width) if width else None))
    if len({f.column for f in fields}) != len(fields):
        raise ValueError(text)
    return tuple(fields)


def _cleanup_policy(text: str) -> frozenset[str]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(p not in CLEANUP_POLICIES for p in parts) or len(set(parts)) != len(parts):
        raise ValueError(text)
    return frozenset(parts)


_LONG_MAX_TEXT = str(_LONG_MAX)
_AT_LEAST_0_MS = "an integer >= 0 (milliseconds)"
_NO_REPLICAS = "KFS keeps no replicas: the object store holds every copy"
_NO_LOCAL_TIER = "every sealed segment is in the object store already; nothing is tiered"
_NO_FSYNC_PER_TOPIC = "the WAL's fsync follows KFS_DURABILITY for every topic"
_KAFKA_3 = "a Kafka 3.x config (removed in Kafka 4): accepted for older clients"

CONFIG_KEYS: Mapping[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey(
            "retention.ms",
            "604800000",
            "an integer >= -1 (milliseconds; -1 = keep forever)",
            _integer(-1, _LONG_MAX),
        ),
        ConfigKey(
            "retention.bytes",
            "-1",
            "an integer >= -1 (bytes per partition; -1 = no limit)",
            _integer(-1, _LONG_MAX),
        ),
        ConfigKey(
            "cleanup.policy",
            "delete",
            "delete, compact or compact,delete",
            _cleanup_policy,
            kind="list",
        ),
        ConfigKey(
            "compression.type",
            "producer",
            ", ".join(COMPRESSION_TYPES),
            _one_of(COMPRESSION_TYPES),
            kind="string",
        ),
        ConfigKey(
            "segment.bytes",
            "134217728",
            f"an integer from 14 to {_INT_MAX} (bytes)",
            _integer(14, _INT_MAX),
            kind="int",
        ),
        ConfigKey(
            "segment.ms",
            "604800000",
            "an integer >= 1 (milliseconds)",
            _integer(1, _LONG_MAX),
        ),
        ConfigKey(
            "max.message.bytes",
            "1048588",
            f"an integer from 0 to {_INT_MAX} (bytes)",
            _integer(0, _INT_MAX),
            kind="int",
        ),
        ConfigKey(
            "delete.retention.ms",
            "86400000",
            _AT_LEAST_0_MS,
            _integer(0, _LONG_MAX),
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            "0",
            _AT_LEAST_0_MS,
            _integer(0, _LONG_MAX),
        ),
        ConfigKey(
            "max.compaction.lag.ms",
            _LONG_MAX_TEXT,
            "an integer >= 1 (milliseconds)",
            _integer(1, _LONG_MAX),
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio",
            "0.5",
            "a number from 0 to 1",
            _ratio,
            kind="double",
        ),
        ConfigKey(
            "message.timestamp.type",
            "CreateTime",
            " or ".join(TIMESTAMP_TYPES),
            _one_of(TIMESTAMP_TYPES),
            kind="string",
        ),
        # Accepted, validated and shown as Kafka does; no effect on KFS.
        ConfigKey(
            "segment.jitter.ms",
            "0",
            _AT_LEAST_0_MS,
            _integer(0, _LONG_MAX),
            effect="segments are sealed by size and age, never at a random moment",
        ),
        ConfigKey(
            "segment.index.bytes",
            "10485760",
            f"an integer from 4 to {_INT_MAX} (bytes)",
            _integer(4, _INT_MAX),
            kind="int",
            effect="a segment's index holds one entry per batch, whatever its size",
        ),
        ConfigKey(
            "index.interval.bytes",
            "4096",
            f"an integer from 0 to {_INT_MAX} (bytes)",
            _integer(0, _INT_MAX),
            kind="int",
            effect="a segment's index holds one entry per batch",
        ),
        ConfigKey(
            "flush.messages",
            _LONG_MAX_TEXT,
            "an integer >= 1 (messages)",
            _integer(1, _LONG_MAX),
            effect=_NO_FSYNC_PER_TOPIC,
        ),
        ConfigKey(
            "flush.ms",
            _LONG_MAX_TEXT,
            _AT_LEAST_0_MS,
            _integer(0, _LONG_MAX),
            effect=_NO_FSYNC_PER_TOPIC,
        ),
        ConfigKey(
            "file.delete.delay.ms",
            "60000",
            _AT_LEAST_0_MS,
            _integer(0, _LONG_MAX),
            effect="replaced segment objects are deleted by the retention job, after its grace",
        ),
        ConfigKey(
            "compression.gzip.level",
            "-1",
            "-1 or an integer from 1 to 9",
            _gzip_level,
            kind="int",
            effect="KFS compresses with each codec's default level",
        ),
        ConfigKey(
            "compression.lz4.level",
            "9",
            "an integer from 1 to 17",
            _integer(1, 17),
            kind="int",
            effect="KFS compresses with each codec's default level",
        ),
        ConfigKey(
            "compression.zstd.level",
            "3",
            "an integer from -131072 to 22",
            _integer(-131072, 22),
            kind="int",
            effect="KFS compresses with each codec's default level",
        ),
        ConfigKey(
            "message.timestamp.before.max.ms",
            _LONG_MAX_TEXT,
            _AT_LEAST_0_MS,
            _integer(0, _LONG_MAX),
            effect="record timestamps are stored as given, whatever their distance from now",
        ),
        ConfigKey(
            "message.timestamp.after.max.ms",
            _LONG_MAX_TEXT,
            _AT_LEAST_0_MS,
            _integer(0, _LONG_MAX),
            effect="record timestamps are stored as given, whatever their distance from now",
        ),
        ConfigKey(
            "min.insync.replicas",
            "1",
            f"an integer from 1 to {_INT_MAX}",
            _integer(1, _INT_MAX),
            kind="int",
            effect=_NO_REPLICAS,
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            "false",
            "true or false",
            _boolean,
            kind="boolean",
            effect=_NO_REPLICAS,
        ),
        ConfigKey(
            "leader.replication.throttled.replicas",
            "",
            "empty, * or partition:broker,...",
            _throttled_replicas,
            kind="list",
            effect=_NO_REPLICAS,
        ),
        ConfigKey(
            "follower.replication.throttled.replicas",
            "",
            "empty, * or partition:broker,...",
            _throttled_replicas,
            kind="list",
            effect=_NO_REPLICAS,
        ),
        ConfigKey(
            "preallocate",
            "false",
            "true or false",
            _boolean,
            kind="boolean",
            effect="segments are written whole, never preallocated",
        ),
        ConfigKey(
            "remote.storage.enable",
            "false",
            "true or false",
            _boolean,
            kind="boolean",
            effect=_NO_LOCAL_TIER,
        ),
        ConfigKey(
            "local.retention.ms",
            "-2",
            "an integer >= -2 (milliseconds; -2 = retention.ms)",
            _integer(-2, _LONG_MAX),
            effect=_NO_LOCAL_TIER,
        ),
        ConfigKey(
            "local.retention.bytes",
            "-2",
            "an integer >= -2 (bytes; -2 = retention.bytes)",
            _integer(-2, _LONG_MAX),
            effect=_NO_LOCAL_TIER,
        ),
        ConfigKey(
            "remote.log.copy.disable",
            "false",
            "true or false",
            _boolean,
            kind="boolean",
            effect=_NO_LOCAL_TIER,
        ),
        ConfigKey(
            "remote.log.delete.on.disable",
            "false",
            "true or false",
            _boolean,
            kind="boolean",
            effect=_NO_LOCAL_TIER,
        ),
        ConfigKey(
            "message.format.version",
            "3.0-IV1",
            "a Kafka version such as 2.8 or 3.0-IV1",
            _format_version,
            kind="string",
            effect=_KAFKA_3,
        ),
        ConfigKey(
            "message.downconversion.enable",
            "true",
            "true or false",
            _boolean,
            kind="boolean",
            effect=_KAFKA_3,
        ),
        ConfigKey(
            "message.timestamp.difference.max.ms",
            _LONG_MAX_TEXT,
            _AT_LEAST_0_MS,
            _integer(0, _LONG_MAX),
            effect=_KAFKA_3,
        ),
        ConfigKey(
            "kfs.table.enabled",
            "false",
            "true or false",
            _boolean,
            kind="boolean",
        ),
        ConfigKey(
            "kfs.table.format",
            "iceberg",
            "[" + ", ".join(TABLE_FORMATS) + "]",
            _one_of(TABLE_FORMATS),
            kind="string",
        ),
        ConfigKey(
            "kfs.table.partition.by",
            "",
            "a comma-separated list of columns and Iceberg transforms of a column: "
            + ", ".join(f"{t}(col)" for t in TABLE_TRANSFORMS if t not in ("bucket", "truncate"))
            + ", bucket(N, col), truncate(N, col), each column once",
            _partition_by,
            kind="string",  # not a list: "bucket(16, id)" holds a comma
        ),
    )
}

#: KFS's own topic configs (the rest are Kafka's).
KFS_CONFIG_KEYS = frozenset(name for name in CONFIG_KEYS if name.startswith("kfs."))

DEFAULT_CONFIGS: Mapping[str, str] = {name: key.default for name, key in CONFIG_KEYS.items()}


def validate_config(name: str, value: ConfigValue) -> str:
    """The value as the string Kafka would store; `InvalidConfig` if name or value is bad."""
    key = CONFIG_KEYS.get(name)
    if key is None:
        raise InvalidConfig(
            f"unknown topic config {name!r}; known: {', '.join(sorted(CONFIG_KEYS))}",
            key=name,
        )
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidConfig(
            f"{name}: {value!r} is not valid; allowed: {key.allowed}", key=name, value=repr(value)
        )
    text = value.strip() if isinstance(value, str) else repr(value)
    if name == "cleanup.policy":
        text = ",".join(part.strip() for part in text.split(","))
    try:
        key.parse(text)
    except ValueError:
        raise InvalidConfig(
            f"{name}: {text!r} is not valid; allowed: {key.allowed}", key=name, value=text
        ) from None
    return text


def validate_configs(configs: Mapping[str, ConfigValue] | None) -> dict[str, str]:
    """Every override validated and normalised to Kafka's string form, and checked together."""
    valid = {name: validate_config(name, value) for name, value in (configs or {}).items()}
    merged = {**DEFAULT_CONFIGS, **valid}
    low, high = int(merged["min.compaction.lag.ms"]), int(merged["max.compaction.lag.ms"])
    if low > high:
        raise InvalidConfig(
            f"min.compaction.lag.ms ({low}) is above max.compaction.lag.ms ({high})",
            key="min.compaction.lag.ms",
            value=str(low),
        )
    return valid


@dataclass(frozen=True)
class TopicConfig:
    """The effective configs KFS honours, typed, with Kafka's (and KFS's) defaults filled in."""

    retention_ms: int
    retention_bytes: int
    cleanup_policy: frozenset[str]
    compression_type: str
    segment_bytes: int
    segment_ms: int
    max_message_bytes: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    message_timestamp_type: str
    kfs_table_enabled: bool
    kfs_table_format: str
    kfs_table_partition_by: tuple[PartitionField, ...]

    @classmethod
    def from_configs(cls, overrides: Mapping[str, ConfigValue] | None = None) -> TopicConfig:
        """Defaults overlaid with ``overrides`` (validated)."""
        merged = {**DEFAULT_CONFIGS, **validate_configs(overrides)}
        typed = {
            name.replace(".", "_"): CONFIG_KEYS[name].parse(value)
            for name, value in merged.items()
            if not CONFIG_KEYS[name].effect
        }
        return cls(**typed)  # type: ignore[arg-type]

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy
