"""Kafka's Java client (compat/java, on the pinned 4.x release) against `kfs serve`: the short form.

Every scenario of `compat.java_client` runs over PLAINTEXT against a daemon
that starts a new group's first rebalance at once
(``--group-initial-rebalance-delay-ms 0``), in well under a minute.  A
scenario failing that ``compat/expected_failures.txt`` does not list fails
the test, and so does a listed one that passes.  The program is built with
Maven on first use (a few seconds once the jars are in ~/.m2), and again
only when its sources change.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.java_client import (
    NEVER_REPORTED,
    SCENARIOS,
    SUITE,
    build,
    check_pinned_release,
    list_scenarios,
    outcomes_from_output,
    run_java_client,
)
from compat.kafka_tools import kafka_version
from compat.suites import Outcome, judge, load_expected
from testkit.daemon import Daemon, DaemonFactory


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    factory = DaemonFactory(tmp_path)
    try:
        yield factory.start(
            name="java-client", extra_args=["--group-initial-rebalance-delay-ms", "0"]
        )
    finally:
        factory.close()


@pytest.mark.integration
def test_the_program_builds_on_the_pinned_kafka_release_and_runs_every_scenario() -> None:
    assert check_pinned_release() == kafka_version()
    assert list_scenarios(build()) == list(SCENARIOS)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_java_client_over_plaintext(daemon: Daemon, tmp_path: Path) -> None:
    log = tmp_path / "java-client.log"
    result = run_java_client(daemon.bootstrap, jar=build(), log=log)
    assert [o.test for o in result.outcomes] == list(SCENARIOS), f"output in {log}"
    silent = [o.test for o in result.outcomes if o.detail.startswith(NEVER_REPORTED)]
    assert not silent, f"scenarios that never ran to a result (output in {log}): {silent}"
    surprises = judge([result], load_expected())
    assert not surprises, f"{SUITE} (output in {log}):\n" + "\n".join(surprises)
    assert daemon.alive()


@pytest.mark.unit
def test_a_scenario_without_its_line_failed() -> None:
    stdout = "PASS admin-cluster\nsome stray output\nFAIL admin-offsets: expected 2: got 5\n"
    outcomes = outcomes_from_output(
        stdout, ["admin-cluster", "admin-offsets", "admin-topics"], "never reported"
    )
    assert outcomes == [
        Outcome("admin-cluster", "passed"),
        Outcome("admin-offsets", "failed", "expected 2: got 5"),
        Outcome("admin-topics", "failed", "never reported"),
    ]
