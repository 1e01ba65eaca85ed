"""Kafka ACLs through a real daemon: ``KFS_AUTHORIZER=acl`` over SASL, real clients.

A user allowed only to produce to ``orders`` can do that and nothing else: it
cannot read ``orders``, cannot see other topics in Metadata, cannot join a
group; deny beats allow; prefixed ACLs; CreateAcls / DescribeAcls /
DeleteAcls through confluent-kafka's AdminClient and ``kfs acls`` on the
store; ACLs survive a restart and are shared by two daemons on a namespace;
every denial is an audit line.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from testkit.daemon import Daemon, DaemonFactory, add_user
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.security.test_listeners_sasl import PASSWORD, _confluent, _sasl
from tests.server.conftest import confluent_kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KafkaError = confluent_kafka.KafkaError


def _start(daemons: DaemonFactory, name: str, store_url: str | None = None) -> tuple[Daemon, int]:
    port = free_port()
    args = ["--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}", "--authorizer", "acl",
            "--super-users", "User:admin"]  # fmt: skip
    return daemons.start(name=name, extra_args=args, store_url=store_url), port


def _conf(port: int, user: str) -> dict[str, Any]:
    return _confluent(port, "SASL_PLAINTEXT", None, **_sasl("SCRAM-SHA-512", user))  # type: ignore[arg-type]


def _allow(principal: str, op: Any, name: str, rtype: Any = ResourceType.TOPIC,
           pattern: Any = ResourcePatternType.LITERAL, permission: Any = AclPermissionType.ALLOW) -> Any:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def _create_acls(admin: Any, bindings: list[Any]) -> None:
    for future in admin.create_acls(bindings).values():
        assert future.result(30) is None


def _produce(conf: dict[str, Any], topic: str, n: int = 3) -> list[Any]:
    """Delivery errors (empty: all delivered)."""
    producer = confluent_kafka.Producer({"message.timeout.ms": 15_000, **conf, "acks": "all"})
    errors: list[Any] = []
    for i in range(n):
        producer.produce(topic, b"v%d" % i, on_delivery=lambda err, msg: err and errors.append(err))
    producer.flush(30)
    return errors


def _consume_error(conf: dict[str, Any], topic: str, group: str | None = None) -> Any:
    """The first error a consumer meets on ``topic`` (assigned, or subscribed with ``group``)."""
    # An assigned consumer's group is a "probe-" one every test user may READ: only the
    # topic's ACLs are tested then.
    consumer = confluent_kafka.Consumer(
        {
            **conf,
            "group.id": group or f"probe-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        if group:
            consumer.subscribe([topic])
        else:
            consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                msg = consumer.poll(0.5)
            except confluent_kafka.KafkaException as exc:
                return exc.args[0]
            if msg is not None and msg.error() is not None:
                return msg.error()
            if msg is not None:
                return None  # a record: no error
        return None
    finally:
        consumer.close()


@pytest.fixture
def secured(daemons: DaemonFactory) -> tuple[Daemon, int, Any]:
    daemon, port = _start(daemons, "acl")
    for user in ("admin", "alice", "bob"):
        add_user(daemon, user, PASSWORD, "SCRAM-SHA-512")
    admin = confluent_kafka.admin.AdminClient(_conf(port, "admin"))
    _create_acls(admin, [
        _allow(f"User:{user}", AclOperation.READ, "probe-", ResourceType.GROUP, ResourcePatternType.PREFIXED)
        for user in ("alice", "bob")
    ])  # fmt: skip
    for future in admin.create_topics(
        [NewTopic(t, 1, 1) for t in ("orders", "secret", "payments", "paystubs")]
    ).values():
        future.result(30)
    return daemon, port, admin


def test_a_produce_only_user_can_produce_and_nothing_else(secured: tuple[Daemon, int, Any]) -> None:
    daemon, port, admin = secured
    _create_acls(admin, [_allow("User:alice", AclOperation.WRITE, "orders")])
    alice = _conf(port, "alice")
    assert _produce(alice, "orders") == []
    denied = _produce(alice, "secret")
    assert denied and denied[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _consume_error(alice, "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    visible = confluent_kafka.admin.AdminClient(alice).list_topics(timeout=10).topics
    assert sorted(visible) == ["orders"]  # WRITE implies DESCRIBE; nothing else is shown
    assert _consume_error(alice, "orders", group="alice-app").code() in (
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )
    # Granting READ on the topic and on the group's prefix lets alice consume.
    _create_acls(admin, [
        _allow("User:alice", AclOperation.READ, "orders"),
        _allow("User:alice", AclOperation.READ, "alice-", ResourceType.GROUP, ResourcePatternType.PREFIXED),
    ])  # fmt: skip
    assert _consume_error(alice, "orders", group="alice-app") is None
    log = daemon.log()
    assert "DENIED User:alice from 127.0.0.1: DESCRIBE on TOPIC 'secret' (METADATA)" in log
    assert "DENIED User:alice from 127.0.0.1: CREATE" not in log  # auto-create checks are quiet
    assert PASSWORD not in log


def test_deny_beats_allow_and_prefixes_match(secured: tuple[Daemon, int, Any]) -> None:
    _, port, admin = secured
    _create_acls(admin, [
        _allow("User:bob", AclOperation.ALL, "pay", pattern=ResourcePatternType.PREFIXED),
        _allow("User:bob", AclOperation.READ, "payments", permission=AclPermissionType.DENY),
    ])  # fmt: skip
    bob = _conf(port, "bob")
    assert _produce(bob, "payments") == [] and _produce(bob, "paystubs") == []
    assert _consume_error(bob, "payments").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _consume_error(bob, "paystubs") is None
    assert _produce(bob, "orders")[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_acl_apis_describe_delete_and_refuse_bad_bindings(secured: tuple[Daemon, int, Any]) -> None:
    _, port, admin = secured
    binding = _allow("User:alice", AclOperation.READ, "orders")
    _create_acls(admin, [binding])
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert binding in admin.describe_acls(everything).result(30)
    bad = _allow("User:alice", AclOperation.READ, "*", pattern=ResourcePatternType.PREFIXED)
    with pytest.raises(confluent_kafka.KafkaException, match="not a prefix"):
        admin.create_acls([bad])[bad].result(30)
    alice_admin = confluent_kafka.admin.AdminClient(_conf(port, "alice"))
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        alice_admin.create_acls([binding])[binding].result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    only = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    [deleted] = admin.delete_acls([only]).values()
    assert deleted.result(30) == [binding]
    assert binding not in admin.describe_acls(everything).result(30)


def test_acls_survive_restart_and_are_shared_by_daemons(
    secured: tuple[Daemon, int, Any], daemons: DaemonFactory
) -> None:
    daemon, port, _ = secured
    cli = [
        sys.executable,
        "-m",
        "kfs_core.cli",
        "--store-url",
        daemon.store_url,
        "--namespace",
        "test",
    ]
    subprocess.run([*cli, "acls", "add", "--allow-principal", "User:alice", "--operation", "Write",
                    "--topic", "orders"], check=True, capture_output=True)  # fmt: skip
    listed = subprocess.run([*cli, "acls", "list", "--topic", "orders"], check=True,
                            capture_output=True, text=True).stdout  # fmt: skip
    assert "ALLOW User:alice from *: WRITE on TOPIC 'orders' (LITERAL)" in listed
    second, second_port = _start(daemons, "acl-2", store_url=daemon.store_url)
    for p in (port, second_port):  # the first one picks the store's change up within seconds
        wait_for(lambda p=p: _produce(_conf(p, "alice"), "orders", 1) == [], timeout=30,
                 what="alice allowed to write")  # fmt: skip
        assert (
            _produce(_conf(p, "alice"), "secret", 1)[0].code()
            == KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
    second.stop()
    second.start()
    assert _produce(_conf(second_port, "alice"), "orders", 1) == []
    subprocess.run([*cli, "acls", "remove", "--allow-principal", "User:alice", "--topic", "orders"],
                   check=True, capture_output=True)  # fmt: skip
    wait_for(lambda: _produce(_conf(port, "alice"), "orders", 1) != [], timeout=30,
             what="alice refused once the ACL is gone")  # fmt: skip


def test_without_an_authorizer_the_acl_apis_say_security_disabled(daemons: DaemonFactory) -> None:
    daemon = daemons.start(name="open")
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": daemon.bootstrap})
    binding = _allow("User:alice", AclOperation.READ, "orders")
    with pytest.raises(confluent_kafka.KafkaException) as info:
        admin.create_acls([binding])[binding].result(30)
    assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_scram_credentials_through_the_admin_api(secured: tuple[Daemon, int, Any]) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    daemon, port, admin = secured
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upsert = UserScramCredentialUpsertion("carol", info, b"carol's password")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        assert future.result(30) is None
    futures = admin.describe_user_scram_credentials(["carol", "nobody"])
    carol = futures["carol"].result(30)
    assert [(c.mechanism, c.iterations) for c in carol.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]
    with pytest.raises(confluent_kafka.KafkaException) as missing:
        futures["nobody"].result(30)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    # The new user logs in (its salted password came from the client, never the password).
    carol_conf = _confluent(port, "SASL_PLAINTEXT", None,  # type: ignore[arg-type]
                            **_sasl("SCRAM-SHA-512", "carol", "carol's password"))  # fmt: skip
    assert confluent_kafka.admin.AdminClient(carol_conf).list_topics(timeout=10) is not None
    bad = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw"
    )
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        admin.alter_user_scram_credentials([bad])["dave"].result(30)
    assert refused.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    alice = confluent_kafka.admin.AdminClient(_conf(port, "alice"))
    with pytest.raises(confluent_kafka.KafkaException) as denied:
        alice.alter_user_scram_credentials([upsert])["carol"].result(30)
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
    assert admin.alter_user_scram_credentials([deletion])["carol"].result(30) is None
    assert PASSWORD not in daemon.log() and "carol's password" not in daemon.log()


def test_auto_creating_a_topic_needs_create(secured: tuple[Daemon, int, Any]) -> None:
    _, port, admin = secured
    _create_acls(admin, [_allow("User:alice", AclOperation.WRITE, "fresh")])
    alice = {**_conf(port, "alice"), "message.timeout.ms": 3000}
    assert _produce(alice, "fresh", 1), "produced to a topic alice may not create"
    assert "fresh" not in admin.list_topics(timeout=10).topics
    _create_acls(admin, [_allow("User:alice", AclOperation.CREATE, "fresh")])
    assert _produce({**alice, "message.timeout.ms": 15_000}, "fresh", 1) == []
    assert "fresh" in admin.list_topics(timeout=10).topics
