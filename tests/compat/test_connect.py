"""Kafka Connect (the pinned 4.x release) on `kfs serve`: the short form of the ``kafka connect`` suite.

A distributed worker keeps its config, offset and status topics on one
daemon; the FileStream source and sink connectors carry a file through a
topic and back, and the scenario of `compat.connect` runs whole: the daemon
restarts under the running worker, then the worker itself restarts.  A step
failing that ``compat/expected_failures.txt`` does not list fails the test,
and so does a listed one that passes.  Connect's jars come from Maven
Central on first use (`compat.connect.install`, a few seconds once they are
in ~/.m2); a failed install fails the test.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.connect import (
    STEPS,
    SUITE,
    check_pinned_release,
    describe_difference,
    install,
    make_lines,
    run_connect,
    worker_properties,
)
from compat.kafka_tools import kafka_version
from compat.suites import judge, load_expected
from testkit.daemon import Daemon, DaemonFactory


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    factory = DaemonFactory(tmp_path / "kfs")
    try:
        yield factory.start(name="connect", extra_args=["--group-initial-rebalance-delay-ms", "0"])
    finally:
        factory.close()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_file_goes_through_kafka_connect_on_kfs_and_survives_restarts(
    daemon: Daemon, tmp_path: Path
) -> None:
    try:
        lib = install()
    except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as exc:
        pytest.fail(f"Kafka Connect's jars could not be installed from Maven Central: {exc}")

    def restart_daemon() -> None:
        daemon.restart()

    scratch = tmp_path / "connect"
    result = run_connect(daemon.bootstrap, scratch, restart_daemon, lib=lib)
    assert [o.test for o in result.outcomes] == list(STEPS)
    surprises = judge([result], load_expected())
    assert not surprises, (
        f"{SUITE} (worker logs in {scratch}, the daemon's in {daemon.log_path}):\n"
        + "\n".join(surprises)
    )
    assert daemon.alive()


@pytest.mark.unit
def test_connect_is_pinned_at_the_release_of_kafkas_tools() -> None:
    assert check_pinned_release() == kafka_version()


@pytest.mark.unit
def test_the_worker_keeps_its_topics_on_one_daemon_without_replicas() -> None:
    props = worker_properties("127.0.0.1:9092", "g", 8083)
    topics = {kind: props[f"{kind}.storage.topic"] for kind in ("config", "offset", "status")}
    assert topics == {"config": "g-configs", "offset": "g-offsets", "status": "g-status"}
    assert all(props[f"{kind}.storage.replication.factor"] == "1" for kind in topics)
    assert props["listeners"] == "http://127.0.0.1:8083"
    assert "plugin.path" not in props  # the FileStream connectors are on the classpath


@pytest.mark.unit
def test_a_sink_that_wrote_lines_twice_is_described_by_their_numbers() -> None:
    expected = make_lines(10, 4)
    got = [*expected[:3], expected[1], expected[2]]
    assert describe_difference(expected, got) == (
        "5 lines, expected 4; 2 written twice ['000011', '000012']; "
        "1 missing ['000013']; first difference at line 3"
    )
