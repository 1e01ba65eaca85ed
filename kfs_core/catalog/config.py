"""Topic configs with Kafka's names, defaults and validation rules, and topic name rules.

Configs are stored as Kafka sends them: a mapping of name to string holding
only the overrides; `TopicConfig` is the typed view with every default filled
in.  Defaults are Kafka's, except:

- ``segment.bytes`` defaults to 134217728 (128 MiB), not Kafka's 1 GiB: in
  KFS it sizes compaction's outputs (the daemon seals small segments at
  ``KFS_SEGMENT_BYTES``, 4 MiB), and 128 MiB is what docs/architecture.md
  ("Configuration") settles on.
  Its lower bound is Kafka 3.x's (14 bytes) so tests can compact tiny data.

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
    """One topic config: its default (as Kafka writes it) and how a value is checked."""

    name: str
    default: str
    allowed: str  # what the error message says is allowed
    parse: Callable[[str], object]  # raises ValueError on a bad value; returns the typed value


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


def _cleanup_policy(text: str) -> frozenset[str]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(p not in CLEANUP_POLICIES for p in parts) or len(set(parts)) != len(parts):
        raise ValueError(text)
    return frozenset(parts)


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
        ),
        ConfigKey(
            "compression.type",
            "producer",
            ", ".join(COMPRESSION_TYPES),
            _one_of(COMPRESSION_TYPES),
        ),
        ConfigKey(
            "segment.bytes",
            "134217728",
            f"an integer from 14 to {_INT_MAX} (bytes)",
            _integer(14, _INT_MAX),
        ),
        ConfigKey(
            "max.message.bytes",
            "1048588",
            f"an integer from 0 to {_INT_MAX} (bytes)",
            _integer(0, _INT_MAX),
        ),
        ConfigKey(
            "delete.retention.ms",
            "86400000",
            "an integer >= 0 (milliseconds)",
            _integer(0, _LONG_MAX),
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            "0",
            "an integer >= 0 (milliseconds)",
            _integer(0, _LONG_MAX),
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio",
            "0.5",
            "a number from 0 to 1",
            _ratio,
        ),
        ConfigKey(
            "message.timestamp.type",
            "CreateTime",
            " or ".join(TIMESTAMP_TYPES),
            _one_of(TIMESTAMP_TYPES),
        ),
    )
}

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
    """Every override validated and normalised to Kafka's string form."""
    return {name: validate_config(name, value) for name, value in (configs or {}).items()}


@dataclass(frozen=True)
class TopicConfig:
    """The effective topic config, typed, with Kafka's (and KFS's) defaults filled in."""

    retention_ms: int
    retention_bytes: int
    cleanup_policy: frozenset[str]
    compression_type: str
    segment_bytes: int
    max_message_bytes: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    message_timestamp_type: str

    @classmethod
    def from_configs(cls, overrides: Mapping[str, ConfigValue] | None = None) -> TopicConfig:
        """Defaults overlaid with ``overrides`` (validated)."""
        merged = {**DEFAULT_CONFIGS, **validate_configs(overrides)}
        typed = {
            name.replace(".", "_"): CONFIG_KEYS[name].parse(value) for name, value in merged.items()
        }
        return cls(**typed)  # type: ignore[arg-type]

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy
