"""The exactly-once campaign in short form: a transactional app through crashes, each record once.

``make soak`` runs it at length (100 faults); here three faults (kill -9 of the daemon,
a crash of the app mid-transaction) keep it honest in CI.  The checker is
shown able to fail on a lost, a duplicated, a changed and a reordered output.
"""

from __future__ import annotations

import random

import pytest

from soak import exactly_once
from soak.load import Findings
from testkit.daemon import DaemonFactory

pytestmark = pytest.mark.integration


def test_the_checker_finds_lost_duplicated_and_changed_outputs() -> None:
    output = [
        (0, b"in-00000004", b"value-4|out"),
        (0, b"in-00000000", b"value-0|out"),  # before 4 in its partition
        (1, b"in-00000001", b"value-1|out"),
        (1, b"in-00000001", b"value-1|out"),  # twice
        (3, b"in-00000003", b"something else"),
    ]  # in-00000002 is missing
    findings = Findings()
    exactly_once.check_output(5, output, findings)
    assert findings.lost == {(2, 0)}
    assert findings.duplicated == {b"in-00000001"}
    assert findings.changed == {(3, 0)}
    assert findings.problems["order"][0] == "output partition 0: input 0 after 4"


def test_three_crashes_leave_every_record_processed_exactly_once(tmp_path) -> None:
    factory = DaemonFactory(tmp_path)
    try:
        daemon = factory.start(extra_args=["--flush-interval-ms", "50"])
        seed = random.randrange(1 << 30)
        row = exactly_once.run(daemon, cycles=3, seed=seed, store="local", records=3000)
    finally:
        factory.close()
    assert row.passed, "\n".join([f"seed {seed}", *row.problems, *row.details])
    assert (row.lost, row.duplicated, row.changed) == (0, 0, 0)
