"""Dynamic broker configs: AlterConfigs, IncrementalAlterConfigs and DescribeConfigs of BROKER.

With confluent-kafka's admin client against real daemons: a per-broker
config and a cluster default are set, shown with Kafka's sources and
synonyms (own, then default, then static, then Kafka's default), kept across
a restart and seen by another daemon of the namespace; Kafka's refusals
(INVALID_REQUEST with Kafka's message) for a read-only name, a bad value, a
per-broker config on the default, a keystore config without a listener
prefix and another broker's id; ``validate_only`` writes nothing; the
legacy AlterConfigs replaces the whole set.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from kfs_core.server.protocol import ErrorCode
from testkit.daemon import Daemon, DaemonFactory
from testkit.raw_client import RawClient

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka.protocol.admin import (
        AlterConfigsRequest,
        DescribeConfigsRequest,
        IncrementalAlterConfigsRequest,
    )

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SET, DELETE, APPEND = 0, 1, 2
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
SOURCES = {
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
}


class Broker:
    """IncrementalAlterConfigs and DescribeConfigs of BROKER resources, raw (name "" too)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def alter(
        self, name: str, *entries: tuple[str, str | None, int], validate: bool = False
    ) -> tuple[int, str | None]:
        resource = IncrementalAlterConfigsRequest.AlterConfigsResource
        with RawClient(self.bootstrap) as client:
            answer = client.request(
                IncrementalAlterConfigsRequest(
                    version=1,
                    resources=[
                        resource(
                            resource_type=4,
                            resource_name=name,
                            configs=[
                                resource.AlterableConfig(name=k, config_operation=op, value=v)
                                for k, v, op in entries
                            ],
                        )
                    ],
                    validate_only=validate,
                )
            )
        [result] = answer.responses
        return int(result.error_code), result.error_message

    def describe(self, name: str) -> dict[str, Any]:
        resource = DescribeConfigsRequest.DescribeConfigsResource
        with RawClient(self.bootstrap) as client:
            answer = client.request(
                DescribeConfigsRequest(
                    version=4,
                    resources=[
                        resource(resource_type=4, resource_name=name, configuration_keys=None)
                    ],
                    include_synonyms=True,
                    include_documentation=False,
                )
            )
        [result] = answer.results
        assert result.error_code == 0, result.error_message
        return {c.name: c for c in result.configs}


def synonyms(entry: Any) -> list[tuple[str, str | None, str]]:
    return [(s.name, s.value, SOURCES[s.source]) for s in entry.synonyms]


@pytest.fixture
def broker(local_daemon: Daemon) -> Iterator[Broker]:
    client = Broker(local_daemon.bootstrap)
    yield client
    for name in ("0", ""):  # leave the module's daemon as it was
        dynamic = [
            e.name
            for e in client.describe(name).values()
            if e.config_source in (DYNAMIC_BROKER, DYNAMIC_DEFAULT)
        ]
        if dynamic:
            assert client.alter(name, *((n, None, DELETE) for n in dynamic))[0] == 0


def test_a_broker_config_and_a_cluster_default_are_set_and_shown(broker: Broker) -> None:
    assert broker.alter("", ("log.cleaner.threads", "3", SET)) == (0, None)
    assert broker.alter("0", ("log.cleaner.threads", "2", SET)) == (0, None)
    assert broker.alter("0", ("sasl.kerberos.min.time.before.relogin", "58000", SET))[0] == 0

    own = broker.describe("0")
    threads = own["log.cleaner.threads"]
    assert (threads.value, threads.config_source, threads.read_only) == ("2", DYNAMIC_BROKER, False)
    assert synonyms(threads) == [
        ("log.cleaner.threads", "2", "DYNAMIC_BROKER_CONFIG"),
        ("log.cleaner.threads", "3", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("log.cleaner.threads", "1", "DEFAULT_CONFIG"),
    ]
    assert own["sasl.kerberos.min.time.before.relogin"].value == "58000"
    # The daemon's own settings stay read-only and static.
    durability = own["kfs.durability"]
    assert (durability.read_only, durability.config_source) == (True, STATIC)

    defaults = broker.describe("")
    assert set(defaults) == {"log.cleaner.threads"}
    assert defaults["log.cleaner.threads"].config_source == DYNAMIC_DEFAULT

    # DELETE falls back to the default; APPEND adds to a list.
    assert broker.alter("0", ("log.cleaner.threads", None, DELETE))[0] == 0
    assert broker.describe("0")["log.cleaner.threads"].value == "3"
    assert broker.alter("", ("log.cleanup.policy", "compact", APPEND))[0] == 0
    assert broker.describe("")["log.cleanup.policy"].value == "delete,compact"


def test_kafkas_refusals(broker: Broker) -> None:
    cases = {
        "read only": ("0", ("broker.id", "7", SET), "Cannot update these configs dynamically"),
        "kfs setting": ("0", ("kfs.durability", "store", SET), "Cannot update these configs"),
        "bad type": ("0", ("log.retention.ms", "soon", SET), "Not a number of type LONG"),
        "below minimum": ("", ("min.insync.replicas", "0", SET), "Value must be at least 1"),
        "not a choice": ("", ("compression.type", "brotli", SET), "String must be one of"),
        "per broker on default": (
            "",
            ("sasl.kerberos.min.time.before.relogin", "1", SET),
            "broker id must be specified",
        ),
        "keystore without listener": (
            "0",
            ("ssl.keystore.location", "/k.jks", SET),
            "only per-listener using the listener prefix",
        ),
        "another broker": ("5", ("log.cleaner.threads", "2", SET), "Unexpected broker id"),
    }
    for what, (name, entry, message) in cases.items():
        code, text = broker.alter(name, entry)
        assert code == ErrorCode.INVALID_REQUEST, what
        assert text is not None and message in text, (what, text)
    assert broker.alter("0", ("log.cleaner.threads", "2", APPEND))[0] == ErrorCode.INVALID_CONFIG
    assert "log.cleaner.threads" not in broker.describe("0")  # nothing was written

    # A listener-prefixed keystore config is per broker; validate_only writes nothing.
    prefixed = ("listener.name.ssl.ssl.keystore.location", "/k.jks", SET)
    assert broker.alter("0", prefixed, validate=True) == (0, None)
    assert "listener.name.ssl.ssl.keystore.location" not in broker.describe("0")
    # A name Kafka does not know is kept, shown as sensitive.
    assert broker.alter("0", ("custom.setting", "x", SET)) == (0, None)
    custom = broker.describe("0")["custom.setting"]
    assert (custom.is_sensitive, custom.value, custom.read_only) == (True, None, True)


def test_alter_configs_replaces_the_whole_set(local_daemon: Daemon, broker: Broker) -> None:
    changes = (("log.cleaner.threads", "2", SET), ("num.io.threads", "9", SET))
    assert broker.alter("0", *changes) == (0, None)
    resource = AlterConfigsRequest.AlterConfigsResource
    with RawClient(local_daemon.bootstrap) as client:
        answer = client.request(
            AlterConfigsRequest(
                version=1,
                resources=[
                    resource(
                        resource_type=4,
                        resource_name="0",
                        configs=[resource.AlterableConfig(name="num.io.threads", value="10")],
                    )
                ],
                validate_only=False,
            )
        )
    assert answer.responses[0].error_code == 0
    own = broker.describe("0")
    assert own["num.io.threads"].value == "10"
    assert "log.cleaner.threads" not in own


def test_dynamic_configs_outlive_a_restart_and_every_daemon_sees_the_default(
    daemons: DaemonFactory,
) -> None:
    store_url = (daemons.root / "store").as_uri()
    first, second = daemons.start_cluster(2, store_url=store_url)
    assert Broker(first.bootstrap).alter("", ("log.retention.ms", "86400000", SET))[0] == 0
    assert Broker(first.bootstrap).alter("1", ("num.io.threads", "4", SET))[0] == 0
    first.stop()
    first.start()
    assert Broker(first.bootstrap).describe("1")["num.io.threads"].value == "4"
    other = Broker(second.bootstrap).describe("2")
    retention = other["log.retention.ms"]
    assert (retention.value, retention.config_source) == ("86400000", DYNAMIC_DEFAULT)
    assert "num.io.threads" not in other  # node 1's own stays its own
