"""KFS settings: every `KFS_*` environment variable, typed, with defaults (docs/architecture.md).

`Settings.from_env()` reads the environment; the `kfs` command lets flags
override any field.  Sizes accept plain bytes or a suffix (``512MiB``, ``4MB``,
``1GB``; both decimal and binary suffixes mean powers of 1024, as KafScale's
``KAFSCALE_*`` variables do).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

DURABILITY_MODES = ("cautious", "normal", "emergency")


def parse_size(text: str | int) -> int:
    """``"512MiB"`` → 536870912.  Raises ValueError with a one-line message."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (use bytes or a suffix such as 4MiB, 1GB)")
    number, unit = match.groups()
    return int(number) * _UNITS[(unit or "")[:1].lower()]


def default_home() -> Path:
    return Path(os.environ.get("KFS_HOME", Path.cwd() / ".kfs")).absolute()


@dataclass(frozen=True)
class Settings:
    """Daemon and tool settings; field ``x_y`` is environment variable ``KFS_X_Y``."""

    store_url: str = ""  # default: file://{home}/store
    namespace: str = "default"
    data_dir: str = ""  # default: {home}/data (the WAL lives here)
    listen: str = "127.0.0.1:9092"
    advertised_host: str = ""
    metrics_listen: str = "127.0.0.1:9644"
    durability: str = "cautious"
    segment_bytes: int = 4 << 20
    flush_interval_ms: int = 500
    pool_bytes: int = 512 << 20
    cache_size: int = 1 << 30
    index_cache_size: int = 256 << 20
    readahead_segments: int = 2
    compression_codec: str = "none"
    s3_endpoint_url: str = ""
    # Kafka's producer.id.expiration.ms: forget an idempotent producer idle this long.
    producer_id_expiration_ms: int = 86_400_000
    # The group coordinator, under Kafka's broker config names (group.*, offsets.*).
    # Kafka waits 3 s for more members before a new group's first rebalance.
    group_initial_rebalance_delay_ms: int = 300
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offsets_topic_num_partitions: int = 4

    def __post_init__(self) -> None:
        if self.durability not in DURABILITY_MODES:
            raise ValueError(
                f"KFS_DURABILITY={self.durability!r}: expected one of {', '.join(DURABILITY_MODES)}"
            )
        home = default_home()
        if not self.store_url:
            object.__setattr__(self, "store_url", (home / "store").as_uri())
        if not self.data_dir:
            object.__setattr__(self, "data_dir", str(home / "data"))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field in fields(cls):
            raw = env.get(f"KFS_{field.name.upper()}")
            if raw is None or raw == "":
                continue
            try:
                if field.type == "int":
                    values[field.name] = parse_size(raw)
                else:
                    values[field.name] = raw
            except ValueError as exc:
                raise ValueError(f"KFS_{field.name.upper()}: {exc}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_overrides(self, **overrides: Any) -> Settings:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})
