"""`kfs_core.cluster.broker_configs`: Kafka's rules for dynamic broker configs, and their store."""

from __future__ import annotations

import threading

import pytest

from kfs_core.cluster.broker_configs import (
    DEFAULT_RESOURCE,
    DYNAMIC_KEYS,
    BrokerConfigError,
    BrokerConfigStore,
    base_name,
    check_changes,
)
from kfs_core.storage.base import ObjectStore

pytestmark = pytest.mark.unit


def test_kafkas_dynamic_set_and_listener_prefixes() -> None:
    assert DYNAMIC_KEYS["sasl.kerberos.min.time.before.relogin"].per_broker
    assert not DYNAMIC_KEYS["log.retention.ms"].per_broker
    assert DYNAMIC_KEYS["ssl.keystore.location"].per_listener
    assert base_name("listener.name.internal.ssl.keystore.location") == "ssl.keystore.location"
    assert base_name("listener.name.sasl_ssl.plain.sasl.jaas.config") == "sasl.jaas.config"
    assert base_name("log.retention.ms") == "log.retention.ms"


@pytest.mark.parametrize(
    ("configs", "per_broker", "message"),
    [
        ({"broker.id": "1", "log.dirs": "/x"}, True, "dynamically: [broker.id, log.dirs]"),
        ({"kfs.durability": "store"}, True, "dynamically: [kfs.durability]"),
        ({"num.partitions": "3"}, False, "dynamically: [num.partitions]"),
        ({"ssl.truststore.location": "/t"}, True, "listener prefix: [ssl.truststore.location]"),
        ({"log.retention.ms": "1h"}, False, "Invalid value 1h for configuration log.retention.ms"),
        ({"num.io.threads": "0"}, False, "Value must be at least 1"),
        ({"unclean.leader.election.enable": "yes"}, False, "either true or false"),
        ({"log.cleanup.policy": "compact,never"}, False, "String must be one of"),
        ({"listener.name.a.sasl.kerberos.min.time.before.relogin": "x"}, True, "type LONG"),
        ({"listeners": "PLAINTEXT://:1"}, False, "broker id must be specified: [listeners]"),
        ({"listener.name.a.ssl.keystore.location": "/k"}, False, "broker id must be specified"),
    ],
)
def test_kafkas_refusals(configs: dict[str, str], per_broker: bool, message: str) -> None:
    with pytest.raises(BrokerConfigError) as caught:
        check_changes(configs, per_broker=per_broker)
    assert message in str(caught.value)


def test_what_kafka_accepts() -> None:
    check_changes(
        {
            "log.retention.ms": "86400000",
            "listener.name.a.max.connections": "100",  # cluster-level listener config
            "log.cleanup.policy": "compact,delete",
            "custom.name": "anything",  # kept as a custom config, as Kafka keeps it
        },
        per_broker=False,
    )
    check_changes(
        {"listener.name.a.ssl.keystore.location": "/k", "sasl.kerberos.kinit.cmd": "kinit"},
        per_broker=True,
    )


def test_concurrent_changes_are_all_kept(local_store: ObjectStore) -> None:
    configs = BrokerConfigStore(local_store, "ns")
    names = [f"custom.{i}" for i in range(8)]

    def add(name: str) -> None:
        configs.update(DEFAULT_RESOURCE, lambda current: {**current, name: "1"})

    threads = [threading.Thread(target=add, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(configs.read(DEFAULT_RESOURCE)) == names
    assert configs.read("1") == {}
    keys = list(local_store.list("ns/_cluster/broker-configs/default/"))
    assert len(keys) <= 5  # older versions pruned
