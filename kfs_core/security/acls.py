"""Kafka ACLs: bindings, their store beside the catalog, and the authorizer that applies them.

Kafka's model, with Kafka's numbers (they travel in CreateAcls, DescribeAcls
and DeleteAcls): a binding allows or denies one *operation* to one
*principal* (``User:alice``, or ``User:*``) from one *host* (or ``*``) on a
*resource* (topic, group, cluster, transactional id) named literally, by
prefix, or ``*`` for every name.  `Authorizer.authorize` decides as Kafka's
``AclAuthorizer``:

1. a super user (``KFS_SUPER_USERS``) may do everything;
2. a resource no binding names is open to everyone if
   ``KFS_ALLOW_EVERYONE_IF_NO_ACL_FOUND`` (default false), closed otherwise;
3. a matching DENY wins over any ALLOW;
4. an ALLOW of the operation, or of ``ALL``, allows; an ALLOW of READ,
   WRITE, DELETE or ALTER also allows DESCRIBE, and one of ALTER_CONFIGS
   allows DESCRIBE_CONFIGS.

The whole set is one JSON document per version, ``{ns}/_security/acls/<v>.json``,
written with put-if-absent (a lost race re-reads and retries), so every
daemon on the namespace applies the same set; `AclStore.load` reads the
newest.  The authorizer indexes the set (literal names in a dict, prefixes by
length), so a decision costs a few dict lookups however many bindings there
are.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from kfs_core.catalog import layout
from kfs_core.errors import KfsError, ObjectAlreadyExists
from kfs_core.namespace import SECURITY_DIR
from kfs_core.storage.base import ObjectStore

__all__ = [
    "AclBinding",
    "AclFilter",
    "AclStore",
    "Authorizer",
    "InvalidAcl",
    "Operation",
    "PatternType",
    "Permission",
    "ResourceType",
]

log = logging.getLogger(__name__)

WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"  # Kafka's name of the one cluster resource
ACLS_DIR = "acls"
KEEP_VERSIONS = 10


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: An ALLOW of the key also allows these (Kafka's implied operations).
IMPLIES = {
    Operation.READ: {Operation.DESCRIBE},
    Operation.WRITE: {Operation.DESCRIBE},
    Operation.DELETE: {Operation.DESCRIBE},
    Operation.ALTER: {Operation.DESCRIBE},
    Operation.ALTER_CONFIGS: {Operation.DESCRIBE_CONFIGS},
}
_CONCRETE_RESOURCES = (
    ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
)  # fmt: skip


class InvalidAcl(KfsError):
    """A binding or filter Kafka would refuse (INVALID_REQUEST)."""


@dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> AclBinding:
        """This binding, or `InvalidAcl` saying why Kafka would refuse it."""
        if self.resource_type not in _CONCRETE_RESOURCES:
            raise InvalidAcl(f"resource type {self.resource_type.name} cannot be bound")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"pattern type {self.pattern_type.name}: use LITERAL or PREFIXED")
        if not self.resource_name:
            raise InvalidAcl("an empty resource name")
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAcl(f"the cluster resource is named {CLUSTER_NAME!r}")
        if self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise InvalidAcl("'*' is a LITERAL name (every resource), not a prefix")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidAcl(f"principal {self.principal!r} is not 'User:<name>'")
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise InvalidAcl(f"operation {self.operation.name} cannot be bound")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAcl(f"permission {self.permission.name}: use ALLOW or DENY")
        if not self.host:
            raise InvalidAcl("an empty host (use '*' for every host)")
        return self

    def to_json(self) -> dict[str, object]:
        return {k: (v.name if isinstance(v, enum.Enum) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, doc: dict[str, str]) -> AclBinding:
        return cls(
            ResourceType[doc["resource_type"]],
            doc["resource_name"],
            PatternType[doc["pattern_type"]],
            doc["principal"],
            doc["host"],
            Operation[doc["operation"]],
            Permission[doc["permission"]],
        )


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter: None (or ANY) matches every value of a field.

    A MATCH pattern type with a name matches every binding that would apply to
    that name: the literal name, ``*``, and every prefix of it.
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> AclFilter:
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:
                raise InvalidAcl(f"{type(value).__name__} UNKNOWN cannot be matched")
        return self

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and b.resource_type is not self.resource_type:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation is not Operation.ANY and b.operation is not self.operation:
            return False
        if self.permission is not Permission.ANY and b.permission is not self.permission:
            return False
        if self.pattern_type is PatternType.MATCH:
            name = self.resource_name
            if name is None:
                return True
            if b.pattern_type is PatternType.LITERAL:
                return b.resource_name in (name, WILDCARD)
            return name.startswith(b.resource_name)
        if self.pattern_type is not PatternType.ANY and b.pattern_type is not self.pattern_type:
            return False
        return self.resource_name is None or b.resource_name == self.resource_name


class AclStore:
    """The namespace's bindings: one JSON document per version, the newest wins."""

    def __init__(self, store: ObjectStore, namespace: str) -> None:
        self.store = store
        self._prefix = layout.join(namespace, SECURITY_DIR, ACLS_DIR) + "/"

    def _key(self, version: int) -> str:
        return f"{self._prefix}{version:020d}.json"

    def _versions(self) -> list[int]:
        out = []
        for info in self.store.list(self._prefix):
            leaf = info.key[len(self._prefix) :]
            if leaf.endswith(".json") and leaf[:-5].isdigit():
                out.append(int(leaf[:-5]))
        return sorted(out)

    def load(self) -> tuple[int, list[AclBinding]]:
        """(version, bindings) of the newest document; (-1, []) before the first binding."""
        versions = self._versions()
        if not versions:
            return -1, []
        doc = json.loads(self.store.get(self._key(versions[-1])))
        return versions[-1], [AclBinding.from_json(b) for b in doc["bindings"]]

    def _update(self, change: object) -> list[AclBinding]:
        """Apply ``change(bindings) -> (new bindings, result)`` as a new version; the result."""
        for _ in range(20):
            version, bindings = self.load()
            new, result = change(bindings)  # type: ignore[operator]
            if new == bindings:
                return list(result)
            doc = {"version": version + 1, "bindings": [b.to_json() for b in new]}
            try:
                self.store.put_if_absent(self._key(version + 1), json.dumps(doc, indent=1).encode())
            except ObjectAlreadyExists:
                continue  # another writer won: re-read and apply again
            for old in self._versions()[:-KEEP_VERSIONS]:
                self.store.delete(self._key(old))
            return list(result)
        raise KfsError("the ACLs kept changing under 20 attempts to update them")

    def add(self, bindings: Sequence[AclBinding]) -> list[AclBinding]:
        """Add ``bindings`` (validated; ones already there are kept once); the ones added."""
        for binding in bindings:
            binding.validate()

        def change(current: list[AclBinding]) -> tuple[list[AclBinding], list[AclBinding]]:
            added = [b for b in dict.fromkeys(bindings) if b not in current]
            return current + added, added

        return self._update(change)

    def remove(self, filters: Sequence[AclFilter]) -> list[AclBinding]:
        """Remove every binding any of ``filters`` matches; the ones removed."""
        for f in filters:
            f.validate()

        def change(current: list[AclBinding]) -> tuple[list[AclBinding], list[AclBinding]]:
            gone = [b for b in current if any(f.matches(b) for f in filters)]
            return [b for b in current if b not in gone], gone

        return self._update(change)

    def describe(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [b for b in self.load()[1] if acl_filter.validate().matches(b)]


class Authorizer:
    """Kafka's ACL decisions over one snapshot of the bindings (`replace` swaps it)."""

    def __init__(
        self,
        bindings: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.version = -1
        self.replace(list(bindings), -1)

    def replace(self, bindings: list[AclBinding], version: int) -> None:
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        lengths: dict[ResourceType, set[int]] = {}
        writers: set[str] = set()
        for b in bindings:
            table = literal if b.pattern_type is PatternType.LITERAL else prefixed
            table.setdefault((b.resource_type, b.resource_name), []).append(b)
            if b.pattern_type is PatternType.PREFIXED:
                lengths.setdefault(b.resource_type, set()).add(len(b.resource_name))
            if (
                b.resource_type is ResourceType.TOPIC
                and b.permission is Permission.ALLOW
                and b.operation in (Operation.WRITE, Operation.ALL)
            ):
                writers.add(b.principal)
        # One assignment: a concurrent decision sees the old index or the new one.
        self._index = (literal, prefixed, {t: sorted(n) for t, n in lengths.items()}, writers)
        self.bindings = bindings
        self.version = version

    def _matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        literal, prefixed, lengths, _ = self._index
        found = list(literal.get((resource_type, name), ()))
        found += literal.get((resource_type, WILDCARD), ())
        for n in lengths.get(resource_type, ()):
            if n > len(name):
                break
            found += prefixed.get((resource_type, name[:n]), ())
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        acls = self._matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        principals = (principal, "User:*")
        hosts = (host, WILDCARD)
        applicable = [b for b in acls if b.principal in principals and b.host in hosts]
        if any(
            b.permission is Permission.DENY and b.operation in (operation, Operation.ALL)
            for b in applicable
        ):
            return False
        return any(
            b.permission is Permission.ALLOW
            and (
                b.operation in (operation, Operation.ALL)
                or operation in IMPLIES.get(b.operation, ())
            )
            for b in applicable
        )

    def may_write_some_topic(self, principal: str) -> bool:
        """KIP-679: an idempotent producer needs WRITE on any topic (or IDEMPOTENT_WRITE)."""
        return (
            principal in self.super_users
            or principal in self._index[3]
            or "User:*" in self._index[3]
        )
