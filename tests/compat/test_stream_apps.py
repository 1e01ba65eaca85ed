"""Quix Streams and faust-streaming exactly-once apps on `kfs serve`: the ``stream apps`` suite.

Each app counts per key with a changelog-backed state store and writes
every count to an output topic under its exactly-once guarantee, then
lives through a ``kill -9`` of itself (its state wiped, restored from the
changelog) and of the daemon; a ``read_committed`` read of the output holds
each count once (`compat.stream_apps`).  The apps' virtualenv is installed
from PyPI on first use; a failed install fails the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.stream_apps import STEPS, SUITE, run_stream_apps, sequence_problems
from compat.suites import judge, load_expected
from testkit.daemon import Daemon, DaemonFactory


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    factory = DaemonFactory(tmp_path / "kfs")
    try:
        yield factory.start(name="apps", extra_args=["--group-initial-rebalance-delay-ms", "0"])
    finally:
        factory.close()


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_exactly_once_apps_count_each_record_once_through_kill_9(
    daemon: Daemon, tmp_path: Path
) -> None:
    def kill_daemon() -> None:
        daemon.kill()
        daemon.start()

    scratch = tmp_path / "apps"
    result = run_stream_apps(daemon.bootstrap, scratch, kill_daemon)
    assert [o.test for o in result.outcomes] == list(STEPS)
    surprises = judge([result], load_expected())
    assert not surprises, (
        f"{SUITE} (app logs in {scratch}, the daemon's in {daemon.log_path}):\n"
        + "\n".join(surprises)
    )


@pytest.mark.unit
def test_the_check_names_repeated_skipped_and_reordered_counts() -> None:
    sent = {"a": [0, 2, 4], "b": [1, 3]}
    assert sequence_problems(sent, {"a": [(1, 0), (2, 2), (3, 4)], "b": [(1, 1), (2, 3)]}) == []
    repeated = sequence_problems(
        sent, {"a": [(1, 0), (2, 2), (2, 2), (3, 4)], "b": [(1, 1), (2, 3)]}
    )
    assert repeated == [
        "a: 4 counts for 3 records, first difference at #2: expected [(3, 4)], got [(2, 2), (3, 4)]"
    ]
    assert sequence_problems(sent, {"a": [(1, 0), (3, 4)], "b": [(1, 1), (2, 3)]})
    assert sequence_problems(sent, {"a": [(1, 0), (2, 4), (3, 2)], "b": [(1, 1), (2, 3)]})
    assert sequence_problems(sent, {"a": [(1, 0), (2, 2), (3, 4)]}) == [
        "b: 0 counts for 2 records, first difference at #0: expected [(1, 1), (2, 3)], got []"
    ]
