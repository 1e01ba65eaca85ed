"""The ACL model on its own: Kafka's decision rules, filters, validation, the versioned store."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kfs_core.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclStore,
    Authorizer,
    InvalidAcl,
)
from kfs_core.security.acls import Operation as Op
from kfs_core.security.acls import PatternType as Pat
from kfs_core.security.acls import Permission as Perm
from kfs_core.security.acls import ResourceType as Res
from kfs_core.storage.local import LocalObjectStore

ALICE = "User:alice"


def acl(name: str, op: Op, perm: Perm = Perm.ALLOW, *, principal: str = ALICE,
        pattern: Pat = Pat.LITERAL, res: Res = Res.TOPIC, host: str = "*") -> AclBinding:  # fmt: skip
    return AclBinding(res, name, pattern, principal, host, op, perm)


def test_kafkas_decision_rules() -> None:
    authorizer = Authorizer(
        [
            acl("orders", Op.WRITE),
            acl("pay", Op.ALL, pattern=Pat.PREFIXED),
            acl("payments", Op.READ, Perm.DENY),
            acl("*", Op.DESCRIBE, principal="User:*", res=Res.GROUP),
            acl("configs", Op.ALTER_CONFIGS),
            acl("lan-only", Op.READ, host="10.0.0.1"),
        ],
        super_users=["User:admin"],
    )

    def may(
        op: Op, name: str, principal: str = ALICE, res: Res = Res.TOPIC, host: str = "h"
    ) -> bool:
        return authorizer.authorize(principal, host, op, res, name)

    assert may(Op.WRITE, "orders") and may(Op.DESCRIBE, "orders")  # WRITE implies DESCRIBE
    assert not may(Op.READ, "orders") and not may(Op.DELETE, "orders")
    assert may(Op.READ, "paystubs") and may(Op.DELETE, "pay")  # prefix, ALL
    assert not may(Op.READ, "payments") and may(Op.WRITE, "payments")  # deny wins, for READ only
    assert not may(Op.READ, "pa")  # shorter than the prefix
    assert may(Op.DESCRIBE, "any-group", "User:bob", Res.GROUP)  # '*' name, 'User:*'
    assert not may(Op.READ, "any-group", "User:bob", Res.GROUP)
    assert may(Op.DESCRIBE_CONFIGS, "configs") and not may(Op.DESCRIBE, "configs")
    assert may(Op.READ, "lan-only", host="10.0.0.1") and not may(
        Op.READ, "lan-only", host="10.0.0.2"
    )
    assert not may(Op.READ, "unnamed")  # no ACL: closed by default
    assert may(Op.ALTER, CLUSTER_NAME, "User:admin", Res.CLUSTER)  # a super user
    open_ = Authorizer([acl("orders", Op.WRITE)], allow_if_no_acl=True)
    assert open_.authorize("User:x", "h", Op.READ, Res.TOPIC, "unnamed")
    assert not open_.authorize("User:x", "h", Op.READ, Res.TOPIC, "orders")  # named: ACLs apply
    assert authorizer.may_write_some_topic(ALICE) and not authorizer.may_write_some_topic(
        "User:bob"
    )


@pytest.mark.parametrize(
    ("binding", "why"),
    [
        (acl("*", Op.READ, pattern=Pat.PREFIXED), "not a prefix"),
        (acl("t", Op.READ, principal="alice"), "User:<name>"),
        (acl("", Op.READ), "empty resource"),
        (acl("t", Op.ANY), "cannot be bound"),
        (acl("t", Op.READ, Perm.ANY), "ALLOW or DENY"),
        (acl("t", Op.READ, pattern=Pat.MATCH), "LITERAL or PREFIXED"),
        (acl("other", Op.ALTER, res=Res.CLUSTER), "kafka-cluster"),
        (acl("t", Op.READ, res=Res.ANY), "cannot be bound"),
        (acl("t", Op.READ, host=""), "empty host"),
    ],
)
def test_invalid_bindings_are_refused_with_a_reason(binding: AclBinding, why: str) -> None:
    with pytest.raises(InvalidAcl, match=why):
        binding.validate()


def test_filters_match_as_describe_and_delete_do() -> None:
    literal, wildcard, prefix = (
        acl("orders", Op.READ),
        acl("*", Op.READ),
        acl("ord", Op.READ, pattern=Pat.PREFIXED),
    )
    match = AclFilter(Res.TOPIC, "orders", Pat.MATCH)
    assert all(match.matches(b) for b in (literal, wildcard, prefix))
    assert not match.matches(acl("other", Op.READ))
    exact = AclFilter(Res.TOPIC, "orders", Pat.LITERAL)
    assert exact.matches(literal) and not exact.matches(wildcard) and not exact.matches(prefix)
    assert AclFilter(permission=Perm.DENY).matches(acl("t", Op.READ, Perm.DENY))
    assert not AclFilter(principal="User:bob").matches(literal)
    with pytest.raises(InvalidAcl):
        AclFilter(Res.UNKNOWN).validate()


def test_the_store_keeps_versions_and_survives_racing_writers(tmp_path: Path) -> None:
    store = LocalObjectStore(str(tmp_path))
    first, second = AclStore(store, "ns"), AclStore(store, "ns")
    assert first.load() == (-1, [])
    errors: list[BaseException] = []

    def add(writer: AclStore, prefix: str) -> None:
        try:
            for i in range(10):
                writer.add([acl(f"{prefix}{i}", Op.READ)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(w, p)) for w, p in ((first, "a"), (second, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    version, bindings = first.load()
    assert version == 19 and len(bindings) == 20  # every add landed, none lost to the race
    assert first.add([acl("a0", Op.READ)]) == []  # already there: no new version
    removed = second.remove([AclFilter(Res.TOPIC, "a", Pat.MATCH)])
    assert removed == [] and len(second.load()[1]) == 20  # MATCH 'a' matches no prefix 'a?'
    removed = second.remove([AclFilter(Res.TOPIC, None, Pat.LITERAL, ALICE)])
    assert len(removed) == 20 and first.load()[1] == []
    keys = [i.key for i in store.list("ns/_security/acls/")]
    assert len(keys) == 10  # older versions are pruned


def test_ten_thousand_acls_decide_by_lookup() -> None:
    bindings = [acl(f"topic-{i}", Op.READ, principal=f"User:u{i % 100}") for i in range(10_000)]
    bindings += [acl(f"team-{i}-", Op.WRITE, pattern=Pat.PREFIXED) for i in range(100)]
    authorizer = Authorizer(bindings)
    assert authorizer.authorize("User:u7", "h", Op.READ, Res.TOPIC, "topic-107")
    assert not authorizer.authorize("User:u8", "h", Op.READ, Res.TOPIC, "topic-107")
    assert authorizer.authorize(ALICE, "h", Op.WRITE, Res.TOPIC, "team-42-orders")
