"""KFS settings: every daemon setting declared once, typed, with its default, bounds and help.

`Settings` is the one declaration.  Each field is made with `setting()` or
`tuning()`, which record a `SettingSpec` in the field's metadata; everything
else is derived from those specs:

- the environment: field ``x_y`` is variable ``KFS_X_Y`` (`Settings.from_env`);
- the ``kfs serve`` flags: ``--x-y``, with the spec's help, choices and default
  (`kfs_core.cli.serve` builds them from `operator_settings`);
- validation: minimums and choices, checked when a `Settings` is built, so a
  bad value is a one-line error naming the variable;
- the broker's configs in DescribeConfigs: fields whose spec names a
  ``broker_config`` (Kafka's own name where Kafka has one);
- the partition log and the WAL read their fields straight from `Settings`.

`tuning()` fields are the partition log's internal knobs (concurrency,
refresh periods, retry backoff).  They are not environment variables or
flags: tests and benchmarks set them by constructing `Settings`.

Sizes accept plain bytes or a suffix (``512MiB``, ``4MB``, ``1GB``; both
decimal and binary suffixes mean powers of 1024, as KafScale's
``KAFSCALE_*`` variables do).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from kfs_core.records.codecs import CODEC_NAMES

__all__ = [
    "DAEMON_CODECS",
    "DURABILITY_MODES",
    "LOG_LEVELS",
    "SettingSpec",
    "Settings",
    "default_home",
    "env_name",
    "format_size",
    "operator_settings",
    "parse_bool",
    "parse_size",
]

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})

DURABILITY_MODES = ("cautious", "normal", "emergency", "store")
#: The SASL mechanisms KFS implements (``KFS_SASL_ENABLED_MECHANISMS``).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: The values of ``KFS_COMPRESSION_CODEC``, Kafka's producer spelling.
DAEMON_CODECS: tuple[str, ...] = tuple(CODEC_NAMES.values())  # none gzip snappy lz4 zstd
LOG_LEVELS = ("debug", "info", "warning", "error")

Kind = Literal["str", "int", "size", "bool", "float", "choice"]


def parse_size(text: str | int) -> int:
    """``"512MiB"`` → 536870912.  Raises ValueError with a one-line message."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (use bytes or a suffix such as 4MiB, 1GB)")
    number, unit = match.groups()
    return int(number) * _UNITS[(unit or "")[:1].lower()]


def format_size(size: int) -> str:
    """536870912 → ``"512MiB"``: the largest binary unit that divides ``size``."""
    for suffix, unit in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def parse_bool(text: str | bool) -> bool:
    """``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off`` (as click reads them)."""
    if isinstance(text, bool):
        return text
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"not a boolean: {text!r} (use true or false)")


def default_home() -> Path:
    return Path(os.environ.get("KFS_HOME", Path.cwd() / ".kfs")).absolute()


def env_name(name: str) -> str:
    """The environment variable of field ``name``: ``segment_bytes`` → ``KFS_SEGMENT_BYTES``."""
    return f"KFS_{name.upper()}"


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """What the declaration says about one setting beyond its type and default."""

    help: str
    kind: Kind
    choices: tuple[str, ...] = ()
    minimum: int | None = None  # the smallest value allowed (inclusive)
    broker_config: str | None = None  # its name among the broker's DescribeConfigs
    operator: bool = True  # a KFS_* variable and a kfs serve flag (False: `tuning`)
    default_help: str | None = None  # how --help shows a default computed at run time


def _kind_of(default: object, size: bool, choices: tuple[str, ...]) -> Kind:
    if choices:
        return "choice"
    if size:
        return "size"
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    if isinstance(default, float):
        return "float"
    return "str"


def setting(
    default: Any,
    help: str,
    *,
    size: bool = False,
    choices: tuple[str, ...] = (),
    minimum: int | None = None,
    broker_config: str | None = None,
    default_help: str | None = None,
) -> Any:
    """A ``KFS_*`` setting: an environment variable and a ``kfs serve`` flag."""
    spec = SettingSpec(
        help,
        _kind_of(default, size, choices),
        choices,
        minimum,
        broker_config,
        True,
        default_help,
    )
    return dataclasses.field(default=default, metadata={"kfs": spec})


def tuning(default: Any, help: str, *, minimum: int | None = None) -> Any:
    """An internal knob of the partition log: set by constructing `Settings`, not by operators."""
    spec = SettingSpec(help, _kind_of(default, False, ()), minimum=minimum, operator=False)
    return dataclasses.field(default=default, metadata={"kfs": spec})


@dataclass(frozen=True)
class Settings:
    """Daemon and tool settings; field ``x_y`` is environment variable ``KFS_X_Y``."""

    # --- where things are ------------------------------------------------------
    store_url: str = setting(
        "", "file:///dir or s3://bucket/prefix", default_help="file://$KFS_HOME/store"
    )
    namespace: str = setting("default", "namespace inside the store", broker_config="kfs.namespace")
    data_dir: str = setting("", "local directory of the WAL", default_help="$KFS_HOME/data")
    s3_endpoint_url: str = setting("", "S3 endpoint, e.g. MinIO")

    # --- the broker ----------------------------------------------------------------
    listen: str = setting("127.0.0.1:9092", "Kafka listener host:port")
    advertised_host: str = setting("", "host named in Metadata", default_help="the listen host")
    listeners: str = setting(
        "",
        "Kafka listeners PROTOCOL://host:port,... (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)",
        default_help="PLAINTEXT://$KFS_LISTEN",
    )
    advertised_listeners: str = setting(
        "",
        "what Metadata names for each listener, same shape",
        default_help="each listener's KFS_ADVERTISED_HOST or host, and port",
    )
    metrics_listen: str = setting("127.0.0.1:9644", "ops HTTP host:port (/metrics, /readyz)")
    auto_create_topics: bool = setting(
        True,
        "create unknown topics on Metadata and Produce",
        broker_config="auto.create.topics.enable",
    )
    default_partitions: int = setting(
        1, "partitions of auto-created topics", minimum=1, broker_config="num.partitions"
    )
    log_level: str = setting("info", "daemon log level", choices=LOG_LEVELS)

    # --- security (Kafka's ssl.*, sasl.* and authorizer settings) -------------------
    tls_cert_file: str = setting("", "PEM certificate chain of SSL and SASL_SSL listeners")
    tls_key_file: str = setting("", "PEM private key of KFS_TLS_CERT_FILE")
    tls_client_ca_file: str = setting(
        "", "PEM CA: require client certificates it signed (mutual TLS)"
    )
    sasl_enabled_mechanisms: str = setting(
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms of SASL listeners",
        broker_config="sasl.enabled.mechanisms",
    )
    authorizer: str = setting(
        "none",
        "enforce Kafka ACLs (acl) or let every client do everything (none)",
        choices=("none", "acl"),
    )
    super_users: str = setting(
        "",
        "principals ACLs never restrict, ';'-separated (User:admin;User:ops)",
        broker_config="super.users",
    )
    allow_everyone_if_no_acl_found: bool = setting(
        False,
        "with the acl authorizer: allow a resource no ACL names",
        broker_config="allow.everyone.if.no.acl.found",
    )
    sasl_mechanism_inter_broker_protocol: str = setting(
        "SCRAM-SHA-512",
        "SASL mechanism a daemon logs in with on another daemon's SASL listener",
        choices=SASL_MECHANISMS,
        broker_config="sasl.mechanism.inter.broker.protocol",
    )
    inter_broker_sasl_username: str = setting(
        "",
        "SASL user a daemon logs in as on another daemon when that one has only SASL "
        "listeners (transaction markers); a KFS_SUPER_USERS member where ACLs are on",
    )
    inter_broker_sasl_password: str = setting("", "KFS_INTER_BROKER_SASL_USERNAME's password")
    connections_max_reauth_ms: int = setting(
        0,
        "SASL session lifetime; clients re-authenticate before it ends (0: no limit)",
        minimum=0,
        broker_config="connections.max.reauth.ms",
    )

    # --- several daemons on one namespace (kfs_core.cluster) --------------------------
    node_id: int = setting(
        0, "this daemon's node id, unique in the namespace", minimum=0, broker_config="node.id"
    )
    broker_heartbeat_interval_ms: int = setting(
        2000,
        "how often the daemon writes its heartbeat to the store",
        minimum=10,
        broker_config="broker.heartbeat.interval.ms",
    )
    broker_session_timeout_ms: int = setting(
        9000,
        "a daemon whose heartbeat has not moved for this long is dead; its partitions move",
        minimum=30,
        broker_config="broker.session.timeout.ms",
    )
    unclean_leader_election_enable: bool = setting(
        False,
        "take a dead daemon's partitions even in a local-WAL durability mode, losing "
        "what only its WAL held",
        broker_config="unclean.leader.election.enable",
    )
    store_wal_interval_ms: int = setting(
        20,
        "durability=store: the appends of this long become one WAL object in the store",
        minimum=1,
        broker_config="kfs.store.wal.interval.ms",
    )

    # --- durability and the partition log ------------------------------------------
    durability: str = setting(
        "cautious",
        "WAL mode: fsync before the ack (cautious), every 50 frames or 10 ms (normal), "
        "cautious plus the maintenance pause (emergency), in the object store before the "
        "ack, so the loss of the machine loses nothing (store)",
        choices=DURABILITY_MODES,
        broker_config="kfs.durability",
    )
    wal_accept_loss: bool = setting(
        False,
        "start even if acknowledged WAL data is damaged: cut the WAL at the damage and "
        "lose the records after it that are not in the store yet (one restart, then unset)",
    )
    segment_bytes: int = setting(
        4 << 20,
        "seal a partition buffer into a segment at this size",
        size=True,
        minimum=1,
        broker_config="kfs.segment.bytes",
    )
    flush_interval_ms: int = setting(
        500,
        "seal a partition buffer when its oldest batch is this old",
        minimum=1,
        broker_config="kfs.flush.interval.ms",
    )
    pool_bytes: int = setting(
        512 << 20, "memory for all unflushed partition buffers", size=True, minimum=1
    )
    cache_size: int = setting(1 << 30, "L1 cache of whole segments", size=True, minimum=0)
    index_cache_size: int = setting(256 << 20, "L2 cache of parsed indexes", size=True, minimum=0)
    readahead_segments: int = setting(
        2, "whole segments prefetched for sequential consumers", minimum=0
    )
    compression_codec: str = setting(
        "none",
        "recompress batches producers left uncompressed at flush (compression.type=producer)",
        choices=DAEMON_CODECS,
        broker_config="kfs.compression.codec",
    )
    producer_id_expiration_ms: int = setting(
        86_400_000,
        "forget an idempotent producer idle this long",
        minimum=1,
        broker_config="producer.id.expiration.ms",
    )

    # --- the group coordinator (Kafka's group.* and offsets.* broker configs) ------
    group_initial_rebalance_delay_ms: int = setting(
        300,  # Kafka waits 3 s for more members before a new group's first rebalance
        "wait for more members before a new group's first rebalance",
        minimum=0,
        broker_config="group.initial.rebalance.delay.ms",
    )
    group_min_session_timeout_ms: int = setting(
        6_000,
        "shortest session timeout a member may ask for",
        minimum=1,
        broker_config="group.min.session.timeout.ms",
    )
    group_max_session_timeout_ms: int = setting(
        1_800_000,
        "longest session timeout a member may ask for",
        minimum=1,
        broker_config="group.max.session.timeout.ms",
    )
    offsets_retention_minutes: int = setting(
        7 * 24 * 60,
        "expire an empty group's committed offsets after this long",
        minimum=1,
        broker_config="offsets.retention.minutes",
    )
    offsets_retention_check_interval_ms: int = setting(
        600_000,
        "how often expired committed offsets are looked for",
        minimum=1,
        broker_config="offsets.retention.check.interval.ms",
    )
    offsets_topic_num_partitions: int = setting(
        4,
        "partitions of __consumer_offsets when it is created",
        minimum=1,
        broker_config="offsets.topic.num.partitions",
    )
    transaction_max_timeout_ms: int = setting(
        900_000,
        "the longest transaction.timeout.ms a transactional producer may ask for",
        minimum=1,
        broker_config="transaction.max.timeout.ms",
    )
    transactional_id_expiration_ms: int = setting(
        604_800_000,
        "how long an idle transactional id is kept",
        minimum=1,
        broker_config="transactional.id.expiration.ms",
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = setting(
        10_000,
        "how often transactions open past their timeout are looked for and aborted",
        minimum=1,
        broker_config="transaction.abort.timed.out.transaction.cleanup.interval.ms",
    )
    transaction_state_log_num_partitions: int = setting(
        4,
        "partitions of __transaction_state when it is created",
        minimum=1,
        broker_config="transaction.state.log.num.partitions",
    )

    # --- tuning of the partition log (not KFS_* variables) -------------------------
    pressure_ratio: float = tuning(0.75, "pool fill that starts an emergency flush")
    flush_concurrency: int = tuning(8, "partitions flushing at once", minimum=1)
    upload_concurrency: int = tuning(
        4, "segments of one partition's flush uploaded at once", minimum=1
    )
    readahead_concurrency: int = tuning(4, "segments prefetched at once", minimum=1)
    io_threads: int = tuning(32, "the thread pool for store requests and commits", minimum=1)
    index_interval: int = tuning(100, "messages between index entries", minimum=1)
    catalog_refresh_ms: int = tuning(
        1000, "catalog refresh period of partitions being read", minimum=1
    )
    idle_refresh_ms: int = tuning(30_000, "catalog refresh period of idle partitions", minimum=1)
    topic_refresh_ms: int = tuning(5000, "how long a topic's config is cached", minimum=1)
    retry_base_ms: int = tuning(50, "first backoff of a failed upload or commit", minimum=1)
    retry_max_ms: int = tuning(5000, "longest backoff", minimum=1)
    cache_flushed_segments: bool = tuning(True, "put freshly flushed segments into L1")
    decode_records: bool = tuning(False, "decode every produced record (Kafka does; slow here)")
    warmup_partitions: int = tuning(
        1000,
        "after a start, open at most this many of the partitions the WAL names, in the background",
        minimum=0,
    )
    producer_rebuild_bytes: int = tuning(
        16 << 20,
        "without a producer-state snapshot, rebuild from at most this much of the newest segments",
        minimum=0,
    )

    def super_user_principals(self) -> list[str]:
        """``KFS_SUPER_USERS`` as principals (Kafka separates them with ';'; ',' works too)."""
        return [p.strip() for p in self.super_users.replace(",", ";").split(";") if p.strip()]

    def sasl_mechanisms(self) -> list[str]:
        """``KFS_SASL_ENABLED_MECHANISMS`` as a list, upper-cased."""
        return [m.strip().upper() for m in self.sasl_enabled_mechanisms.split(",") if m.strip()]

    def __post_init__(self) -> None:
        for field, spec in _specs():
            value = getattr(self, field.name)
            where = env_name(field.name) if spec.operator else field.name
            if spec.choices and value not in spec.choices:
                raise ValueError(f"{where}={value!r}: expected one of {', '.join(spec.choices)}")
            if spec.minimum is not None and value < spec.minimum:
                least = "positive" if spec.minimum == 1 else f"at least {spec.minimum}"
                raise ValueError(f"{where} must be {least}, got {value}")
        for mechanism in self.sasl_mechanisms():
            if mechanism not in SASL_MECHANISMS:
                raise ValueError(
                    f"KFS_SASL_ENABLED_MECHANISMS: {mechanism!r} is not one of "
                    f"{', '.join(SASL_MECHANISMS)}"
                )
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "KFS_GROUP_MIN_SESSION_TIMEOUT_MS must be at most "
                f"KFS_GROUP_MAX_SESSION_TIMEOUT_MS, got {self.group_min_session_timeout_ms} "
                f"and {self.group_max_session_timeout_ms}"
            )
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise ValueError(
                "KFS_BROKER_HEARTBEAT_INTERVAL_MS must be below KFS_BROKER_SESSION_TIMEOUT_MS, "
                f"got {self.broker_heartbeat_interval_ms} and {self.broker_session_timeout_ms}"
            )
        home = default_home()
        if not self.store_url:
            object.__setattr__(self, "store_url", (home / "store").as_uri())
        if not self.data_dir:
            object.__setattr__(self, "data_dir", str(home / "data"))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """The ``KFS_*`` variables of ``env`` (default: the process's), then ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field, spec in operator_settings():
            raw = env.get(env_name(field.name))
            if raw is None or raw == "":
                continue
            try:
                values[field.name] = _parse(spec, raw)
            except ValueError as exc:
                raise ValueError(f"{env_name(field.name)}: {exc}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_overrides(self, **overrides: Any) -> Settings:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def broker_configs(self) -> dict[str, str]:
        """The settings the broker shows in DescribeConfigs, by their config names."""
        configs: dict[str, str] = {}
        for field, spec in _specs():
            if spec.broker_config is not None:
                value = getattr(self, field.name)
                configs[spec.broker_config] = (
                    str(value).lower() if isinstance(value, bool) else str(value)
                )
        return configs


def _parse(spec: SettingSpec, raw: str) -> object:
    if spec.kind in ("int", "size"):
        return parse_size(raw)
    if spec.kind == "bool":
        return parse_bool(raw)
    if spec.kind == "float":
        return float(raw)
    return raw


def _specs() -> Iterator[tuple[dataclasses.Field[Any], SettingSpec]]:
    for field in fields(Settings):
        yield field, field.metadata["kfs"]


def operator_settings() -> Iterator[tuple[dataclasses.Field[Any], SettingSpec]]:
    """The ``KFS_*`` settings (not the tuning), in declaration order, with their specs."""
    return ((field, spec) for field, spec in _specs() if spec.operator)
