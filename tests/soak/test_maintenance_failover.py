"""Maintenance while partitions move, in short form: `make soak` runs many more rounds.

Three ``store``-mode daemons under two idempotent producers and tail
consumers; one round: compaction with a partition killed (``kill -9``) just
before its replace, retention meanwhile, the victim back with checkpoints
running while its partitions move back; see `soak.maintenance_failover`.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from soak import maintenance_failover
from soak.report import format_table
from testkit.daemon import DaemonFactory


@pytest.mark.spark
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_jobs_while_a_partition_moves_lose_nothing_they_may_not(
    daemons: DaemonFactory, spark: Any
) -> None:
    cluster = maintenance_failover.start_cluster(
        daemons, store_url=(daemons.root / "store").as_uri()
    )
    seed = random.randrange(1 << 30)
    row, moves = maintenance_failover.run(
        cluster, spark, actions=["kill"], seed=seed, store_url=cluster[0].store_url
    )
    report = format_table([row])
    print(report)  # the seed replays the run: maintenance_failover.run(..., seed=seed)
    logs = "\n".join(d.log()[-2000:] for d in cluster)
    assert row.passed, report + "\n" + logs
    assert [m.action for m in moves] == ["kill"]
    (move,) = moves
    assert move.replace_version > move.lease_version >= 0  # the replace landed after the lease
    assert row.acknowledged > maintenance_failover.WARM_UP_RECORDS
