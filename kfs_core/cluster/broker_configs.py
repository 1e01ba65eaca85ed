"""Dynamic broker configs: what ``kafka-configs --entity-type brokers --alter`` sets.

Kafka lets an operator change some broker configs at run time, for one broker
(resource name its node id) or as the cluster's default (resource name
``""``), with AlterConfigs or IncrementalAlterConfigs on a BROKER resource;
DescribeConfigs then shows them with the sources DYNAMIC_BROKER_CONFIG and
DYNAMIC_DEFAULT_BROKER_CONFIG.  KFS accepts the same names (`DYNAMIC_KEYS`,
Kafka 4's dynamic set), validates them as Kafka does and with Kafka's
messages (`check_changes`), keeps them in the store so they survive restarts
and every daemon sees them, and shows them.  KFS itself takes its settings
from ``kfs serve`` flags and ``KFS_*`` variables: a dynamic broker config
changes nothing in what a daemon does (KFS has no Kerberos, no replica
fetchers, its own thread pools and segment sizes, topic defaults of its own);
tools that set them (librdkafka's and Kafka's admin tests, provisioning
scripts) keep working.

Layout, under ``{ns}/_cluster/broker-configs/``::

    {resource}/{version:020}.json   resource: ``default``, or a node id
    {"version": 2, "updated_ms": ..., "configs": {"log.cleaner.threads": "2"}}

Each version is complete; a change reads the newest, applies itself and
writes the next with put-if-absent, so concurrent changes never lose one
another (as `kfs_core.cluster.reassignments` does).  Reading is one LIST and
one GET: only admin requests read them.

Rules, as Kafka 4's broker applies them (all answered INVALID_REQUEST, as
Kafka does):

- a name Kafka cannot change at run time (``broker.id``, ``log.dirs``, KFS's
  own ``kfs.*``, ...): "Cannot update these configs dynamically: [...]";
- a keystore or truststore config without a ``listener.name.<l>.`` prefix;
- a value of the wrong type or out of range: "Invalid value ... for
  configuration ...";
- a per-broker config (listeners, SASL, SSL) on the cluster default.

A name Kafka does not know is kept as a custom config, as Kafka keeps it,
and shown as sensitive (value null).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from kfs_core.clock import now_ms
from kfs_core.errors import ObjectAlreadyExists, ObjectNotFound
from kfs_core.namespace import CLUSTER_DIR
from kfs_core.storage import ObjectStore

__all__ = [
    "DEFAULT_RESOURCE",
    "DYNAMIC_KEYS",
    "BrokerConfigError",
    "BrokerConfigStore",
    "DynamicKey",
    "base_name",
    "check_changes",
]

BROKER_CONFIGS_DIR = "broker-configs"
#: The resource directory of the cluster-wide defaults (Kafka's resource name "").
DEFAULT_RESOURCE = "default"
#: How many versions of a resource a change leaves in the store (the newest ones).
KEEP_VERSIONS = 5
_UPDATE_ATTEMPTS = 20
_LONG_MAX = str(2**63 - 1)
_INT_MAX = str(2**31 - 1)

# name, type, default ("-" for none), minimum ("" for none); Kafka 4's values.
_CLUSTER_WIDE = """
background.threads int 10 1
num.io.threads int 8 1
num.network.threads int 3 1
num.recovery.threads.per.data.dir int 2 1
num.replica.fetchers int 1 1
message.max.bytes int 1048588 0
min.insync.replicas int 1 1
unclean.leader.election.enable boolean false
compression.type string producer
compression.gzip.level int -1
compression.lz4.level int 9
compression.zstd.level int 3
max.connections int INT_MAX 0
max.connections.per.ip int INT_MAX 0
max.connections.per.ip.overrides string -
max.connection.creation.rate int INT_MAX 0
metric.reporters list org.apache.kafka.common.metrics.JmxReporter
producer.id.expiration.ms int 86400000 0
transaction.partition.verification.enable boolean true
log.retention.ms long -
log.retention.bytes long -1
log.segment.bytes int 1073741824 1048576
log.roll.ms long - 1
log.roll.jitter.ms long - 0
log.flush.interval.messages long LONG_MAX 1
log.flush.interval.ms long -
log.segment.delete.delay.ms long 60000 0
log.index.interval.bytes int 4096 0
log.index.size.max.bytes int 10485760 4
log.cleanup.policy list delete
log.preallocate boolean false
log.message.timestamp.type string CreateTime
log.message.timestamp.before.max.ms long LONG_MAX 0
log.message.timestamp.after.max.ms long 3600000 0
log.local.retention.ms long -2
log.local.retention.bytes long -2
log.cleaner.threads int 1 1
log.cleaner.backoff.ms long 15000 0
log.cleaner.dedupe.buffer.size long 134217728
log.cleaner.io.buffer.size int 524288 0
log.cleaner.io.buffer.load.factor double 0.9
log.cleaner.io.max.bytes.per.second double 1.7976931348623157E308
log.cleaner.delete.retention.ms long 86400000 0
log.cleaner.min.compaction.lag.ms long 0 0
log.cleaner.max.compaction.lag.ms long LONG_MAX 1
log.cleaner.min.cleanable.ratio double 0.5 0
remote.fetch.max.wait.ms int 500 1
remote.list.offsets.request.timeout.ms long 30000 1
remote.log.index.file.cache.total.size.bytes long 1073741824 1
remote.log.manager.copy.max.bytes.per.second long LONG_MAX 1
remote.log.manager.fetch.max.bytes.per.second long LONG_MAX 1
remote.log.manager.copier.thread.pool.size int 10 1
remote.log.manager.expiration.thread.pool.size int 10 1
remote.log.reader.threads int 10 1
leader.replication.throttled.rate long LONG_MAX 0
follower.replication.throttled.rate long LONG_MAX 0
replica.alter.log.dirs.io.max.bytes.per.second long LONG_MAX 0
"""
_PER_BROKER = """
listeners string PLAINTEXT://:9092
listener.security.protocol.map string SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT
principal.builder.class class org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder
sasl.enabled.mechanisms list GSSAPI
sasl.mechanism.inter.broker.protocol string GSSAPI
sasl.jaas.config password -
sasl.kerberos.service.name string -
sasl.kerberos.kinit.cmd string /usr/bin/kinit
sasl.kerberos.min.time.before.relogin long 60000
sasl.kerberos.ticket.renew.window.factor double 0.8
sasl.kerberos.ticket.renew.jitter double 0.05
sasl.kerberos.principal.to.local.rules list DEFAULT
sasl.login.refresh.window.factor double 0.8
sasl.login.refresh.window.jitter double 0.05
sasl.login.refresh.min.period.seconds short 60
sasl.login.refresh.buffer.seconds short 300
ssl.protocol string TLSv1.3
ssl.provider string -
ssl.cipher.suites list -
ssl.enabled.protocols list TLSv1.2,TLSv1.3
ssl.keymanager.algorithm string SunX509
ssl.trustmanager.algorithm string PKIX
ssl.endpoint.identification.algorithm string https
ssl.secure.random.implementation string -
ssl.client.auth string none
ssl.engine.factory.class class -
"""
# Only with a listener prefix (``listener.name.<l>.ssl.keystore.location``).
_PER_LISTENER = """
ssl.keystore.type string JKS
ssl.keystore.location string -
ssl.keystore.password password -
ssl.key.password password -
ssl.keystore.certificate.chain password -
ssl.keystore.key password -
ssl.truststore.type string JKS
ssl.truststore.location string -
ssl.truststore.password password -
ssl.truststore.certificates password -
"""
_CHOICES: Mapping[str, tuple[str, ...]] = {
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "log.cleanup.policy": ("compact", "delete"),
    "log.message.timestamp.type": ("CreateTime", "LogAppendTime"),
    "ssl.client.auth": ("required", "requested", "none"),
}
#: Listener configs the cluster default may set (Kafka's ClusterLevelListenerConfigs).
_CLUSTER_LEVEL_LISTENER = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
#: Names a broker cannot change at run time besides KFS's own: Kafka 4's read-only ones.
_READ_ONLY = frozenset(
    {
        "broker.id", "node.id", "log.dirs", "log.dir", "num.partitions", "process.roles",
        "default.replication.factor", "auto.create.topics.enable", "advertised.listeners",
        "log.retention.hours", "log.retention.minutes", "log.roll.hours",
        "log.roll.jitter.hours", "log.flush.scheduler.interval.ms",
        "log.flush.offset.checkpoint.interval.ms", "log.retention.check.interval.ms",
        "log.cleaner.enable", "queued.max.requests", "remote.log.manager.thread.pool.size",
        "sasl.login.callback.handler.class", "sasl.login.class",
        "sasl.server.callback.handler.class", "connections.max.reauth.ms",
        "ssl.principal.mapping.rules", "ssl.allow.dn.changes", "ssl.allow.san.changes",
        "super.users", "allow.everyone.if.no.acl.found", "authorizer.class.name",
        "security.inter.broker.protocol", "inter.broker.listener.name",
        "broker.heartbeat.interval.ms", "broker.session.timeout.ms", "broker.rack",
        "metadata.log.dir",
    }
)  # fmt: skip
_READ_ONLY_PREFIXES = (
    "kfs.", "group.", "offsets.", "share.", "socket.", "transaction.state.", "transactional.",
    "transaction.max.", "transaction.abort.", "controller.", "metadata.", "sasl.oauthbearer.",
)  # fmt: skip
_LISTENER_PREFIX = re.compile(r"listener\.name\.[^.]*\.(.*)")
_MECHANISM_CONFIGS = (
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.server.callback.handler.class",
    "connections.max.reauth.ms",
)


@dataclass(frozen=True)
class DynamicKey:
    """One of Kafka's dynamic broker configs: its type, default and scope."""

    name: str
    kind: str  # boolean, short, int, long, double, string, list, class, password
    default: str | None
    minimum: int | None
    per_broker: bool
    per_listener: bool = False


def _parse_table(table: str, *, per_broker: bool, per_listener: bool = False) -> list[DynamicKey]:
    keys = []
    for line in table.strip().splitlines():
        name, kind, written, *rest = line.split(" ")
        default = {"-": None, "INT_MAX": _INT_MAX, "LONG_MAX": _LONG_MAX}.get(written, written)
        minimum = int(rest[0]) if rest else None
        keys.append(DynamicKey(name, kind, default, minimum, per_broker, per_listener))
    return keys


#: Kafka 4's dynamic broker configs by name.
DYNAMIC_KEYS: Mapping[str, DynamicKey] = {
    key.name: key
    for key in (
        *_parse_table(_CLUSTER_WIDE, per_broker=False),
        *_parse_table(_PER_BROKER, per_broker=True),
        *_parse_table(_PER_LISTENER, per_broker=True, per_listener=True),
    )
}


class BrokerConfigError(ValueError):
    """A change Kafka's broker refuses; the message is Kafka's (INVALID_REQUEST)."""


def base_name(name: str) -> str:
    """The config a listener-prefixed name sets (``listener.name.l.x`` -> ``x``); else ``name``."""
    match = _LISTENER_PREFIX.fullmatch(name)
    if match is None:
        return name
    rest = match.group(1)
    for mechanism_config in _MECHANISM_CONFIGS:
        if rest.endswith("." + mechanism_config):
            return mechanism_config
    return rest


def key_of(name: str) -> DynamicKey | None:
    """The dynamic key ``name`` sets (through a listener prefix too); None if none."""
    return DYNAMIC_KEYS.get(base_name(name))


def is_read_only(name: str, static_names: Collection[str] = ()) -> bool:
    """Whether ``name`` is a broker config that cannot change at run time."""
    if _LISTENER_PREFIX.fullmatch(name):
        return False
    if name in DYNAMIC_KEYS:
        return False
    return name in _READ_ONLY or name in static_names or name.startswith(_READ_ONLY_PREFIXES)


def is_sensitive(name: str) -> bool:
    """Passwords, and custom names Kafka knows nothing of, are shown without their value."""
    key = key_of(name)
    return key is None or key.kind == "password"


def _listing(names: Iterable[str]) -> str:
    return "[" + ", ".join(sorted(names)) + "]"


def _check_value(name: str, key: DynamicKey, value: str) -> None:
    def invalid(why: str) -> BrokerConfigError:
        return BrokerConfigError(f"Invalid value {value} for configuration {name}: {why}")

    if key.kind == "boolean":
        if value.lower() not in ("true", "false"):
            raise invalid("Expected value to be either true or false")
        return
    if key.kind in ("short", "int", "long"):
        try:
            number = int(value.strip())
        except ValueError:
            raise invalid(f"Not a number of type {key.kind.upper()}") from None
        bits = {"short": 15, "int": 31, "long": 63}[key.kind]
        if not -(2**bits) <= number < 2**bits:
            raise invalid(f"Not a number of type {key.kind.upper()}")
        if key.minimum is not None and number < key.minimum:
            raise invalid(f"Value must be at least {key.minimum}")
    elif key.kind == "double":
        try:
            number_f = float(value.strip())
        except ValueError:
            raise invalid("Not a number of type DOUBLE") from None
        if key.minimum is not None and number_f < key.minimum:
            raise invalid(f"Value must be at least {key.minimum}")
    choices = _CHOICES.get(key.name)
    if choices is not None:
        items = [v.strip() for v in value.split(",")] if key.kind == "list" else [value]
        if any(item not in choices for item in items):
            raise invalid(f"String must be one of: {', '.join(choices)}")


def check_changes(
    configs: Mapping[str, str], *, per_broker: bool, static_names: Collection[str] = ()
) -> None:
    """Refuse what Kafka's broker refuses in a resource's new dynamic configs (in its order).

    ``configs`` is the whole set the resource would hold; ``per_broker``
    whether the resource is a node id (not the cluster default);
    ``static_names`` the daemon's own read-only settings.
    """
    read_only = [n for n in configs if is_read_only(n, static_names)]
    if read_only:
        raise BrokerConfigError(f"Cannot update these configs dynamically: {_listing(read_only)}")
    unprefixed = [n for n in configs if n in DYNAMIC_KEYS and DYNAMIC_KEYS[n].per_listener]
    if unprefixed:
        raise BrokerConfigError(
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {_listing(unprefixed)}"
        )
    for name, value in configs.items():
        key = key_of(name)
        if key is not None:
            _check_value(name, key, value)
    if not per_broker:
        scoped = [
            n
            for n in configs
            if (key := key_of(n)) is not None
            and (key.per_broker or (n != key.name and key.name not in _CLUSTER_LEVEL_LISTENER))
        ]
        if scoped:
            raise BrokerConfigError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {_listing(scoped)}"
            )


class BrokerConfigStore:
    """The dynamic broker configs of one namespace in the store (blocking calls)."""

    def __init__(self, store: ObjectStore, namespace: str) -> None:
        self._store = store
        self._prefix = f"{namespace}/{CLUSTER_DIR}/{BROKER_CONFIGS_DIR}/"

    def _key(self, resource: str, version: int) -> str:
        return f"{self._prefix}{resource}/{version:020d}.json"

    def _versions(self, resource: str) -> list[int]:
        prefix = f"{self._prefix}{resource}/"
        versions = []
        for info in self._store.list(prefix):
            leaf = info.key[len(prefix) :]
            if leaf.endswith(".json") and leaf[:-5].isdigit():
                versions.append(int(leaf[:-5]))
        return sorted(versions)

    def _read(self, resource: str) -> tuple[int, dict[str, str]]:
        for version in reversed(self._versions(resource)):
            try:
                doc = json.loads(self._store.get(self._key(resource, version)))
            except ObjectNotFound:
                continue  # pruned between the listing and the get
            configs = doc.get("configs") if isinstance(doc, dict) else None
            if isinstance(configs, dict):
                return version, {str(k): str(v) for k, v in configs.items()}
        return -1, {}

    def read(self, resource: str) -> dict[str, str]:
        """The dynamic configs of ``resource`` (`DEFAULT_RESOURCE` or a node id as a string)."""
        return self._read(resource)[1]

    def update(
        self, resource: str, change: Callable[[Mapping[str, str]], Mapping[str, str]]
    ) -> dict[str, str]:
        """Write ``change(current configs)`` as the resource's next version; the new configs.

        ``change`` runs again on the winner's configs when another writer
        wins the race; what it raises propagates.
        """
        for _ in range(_UPDATE_ATTEMPTS):
            version, current = self._read(resource)
            configs = dict(change(current))
            doc = {"version": version + 1, "updated_ms": now_ms(), "configs": configs}
            body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
            try:
                self._store.put_if_absent(self._key(resource, version + 1), body)
            except ObjectAlreadyExists:
                continue
            for old in self._versions(resource)[:-KEEP_VERSIONS]:
                self._store.delete(self._key(resource, old))
            return configs
        raise BrokerConfigError(
            f"broker configs of {resource!r}: {_UPDATE_ATTEMPTS} writers raced; try again"
        )
