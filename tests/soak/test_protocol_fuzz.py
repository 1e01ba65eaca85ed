"""The hostile-input campaign in short form: a few thousand cases at a live daemon."""

from __future__ import annotations

import random

import pytest

from soak import protocol_fuzz
from soak.report import format_table
from testkit.daemon import DaemonFactory

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def test_mutated_requests_and_frame_abuse_leave_clients_and_data_unharmed(
    daemons: DaemonFactory,
) -> None:
    daemon = daemons.start(name="fuzzed", extra_args=protocol_fuzz.daemon_args())
    seed = random.randrange(1 << 30)
    row, outcomes = protocol_fuzz.run(
        daemon, cases=2000, seed=seed, memory_bound=protocol_fuzz.MEMORY_BOUND, idle=500, loris=20
    )
    report = format_table([row]) + "\n" + outcomes.line()
    print(report)
    assert row.acknowledged > 0
    assert outcomes.counts["answered"] > 0 and outcomes.counts["connection closed"] > 0, report
    assert row.passed, report + "\n" + daemon.log()[-3000:]
    assert daemon.alive() and daemon.http("/livez")[0] == 200
