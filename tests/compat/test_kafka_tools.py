"""Apache Kafka's tools (the pinned 4.x release) against `kfs serve`: the short form of `make compat`.

Every check of `compat.kafka_tools` runs over PLAINTEXT; over SASL_SSL with
SCRAM and ACLs, the checks that differ there (logging in, TLS, the
authorizer, SCRAM credentials) run.  A check failing that
``compat/expected_failures.txt`` does not list fails the test, and so does
a listed one that passes.  The jars come from ``make kafka-tools``, which
`make test` runs first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.daemons import plaintext_daemon, sasl_ssl_daemon
from compat.kafka_tools import CHECKS, KAFKA_LIB, ToolClient, kafka_version, run_kafka_tools
from compat.suites import judge, load_expected
from testkit.daemon import DaemonFactory
from testkit.pki import make_pki

pytestmark = pytest.mark.integration

SASL_SSL_CHECKS = (
    "kafka-topics",
    "kafka-console-producer/consumer",
    "kafka-acls",
    "kafka-configs users",
)


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonFactory]:
    daemons = DaemonFactory(tmp_path_factory.mktemp("compat"))
    try:
        yield daemons
    finally:
        daemons.close()


def test_the_tools_are_the_pinned_kafka_4_release() -> None:
    version = kafka_version()
    assert version.startswith("4.")
    assert (KAFKA_LIB / f"kafka-tools-{version}.jar").is_file(), "run `make kafka-tools`"


def test_kafka_tools_over_plaintext(factory: DaemonFactory, tmp_path: Path) -> None:
    daemon = plaintext_daemon(factory)
    tools = ToolClient(daemon.bootstrap, scratch=tmp_path)
    result = run_kafka_tools(
        tools, suite="kafka tools PLAINTEXT", kinds=frozenset({"any", "no-authorizer"})
    )
    assert len(result.outcomes) == sum(c.needs in ("any", "no-authorizer") for c in CHECKS)
    assert judge([result], load_expected()) == [], "\n\n".join(tools.log[-3:])
    assert daemon.alive()


def test_kafka_tools_over_sasl_ssl_with_acls(factory: DaemonFactory, tmp_path: Path) -> None:
    secured = sasl_ssl_daemon(factory, make_pki(tmp_path / "pki"), tmp_path)
    tools = ToolClient(secured.bootstrap, scratch=tmp_path, command_config=secured.properties)
    result = run_kafka_tools(
        tools,
        suite="kafka tools SASL_SSL",
        kinds=frozenset({"any", "authorizer", "sasl"}),
        only=SASL_SSL_CHECKS,
    )
    assert [o.test for o in result.outcomes] == list(SASL_SSL_CHECKS)
    assert judge([result], load_expected()) == [], "\n\n".join(tools.log[-3:])
