"""bench.store_mode stays runnable and its arithmetic holds: a tiny form of its `make bench` rows."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from bench.produce_cpu import RATE_PRODUCER
from bench.store_mode import (
    HEADER,
    Backend,
    LatencyFigures,
    failover_target_s,
    format_table,
    latency_rows,
    puts_per_gb,
    puts_per_hour,
    run,
    spread,
)


def test_puts_per_gb_and_per_hour() -> None:
    # 50 objects a second at 50 MB/s: one object per MB, 1,000 per GB.
    assert puts_per_gb(50, 50_000_000) == pytest.approx(1000)
    assert puts_per_gb(3, 0) == float("inf")
    assert puts_per_hour(50, 1.0) == 180_000
    assert puts_per_hour(10, 0) != puts_per_hour(10, 0)  # nan: no time, no rate


def test_spread_counts_the_nodes_that_hold_nothing() -> None:
    assert spread({1: 4, 2: 4, 3: 4}, [1, 2, 3]) == 0
    assert spread({1: 34, 2: 33, 3: 33}, [1, 2, 3]) == 1
    assert spread({1: 6, 2: 6}, [1, 2, 3]) == 6


def test_failover_target_is_the_session_timeout_plus_two_seconds() -> None:
    assert failover_target_s(2000) == 4.0
    assert failover_target_s(9000) == 11.0


def test_backend_flags_override_the_daemons_store_only_for_s3() -> None:
    assert Backend("local store").args("store") == ("--durability", "store")
    s3 = Backend("S3 (moto)", "s3://b/kfs", "http://127.0.0.1:1")
    assert s3.args("cautious") == (
        "--durability", "cautious",
        "--store-url", "s3://b/kfs",
        "--s3-endpoint-url", "http://127.0.0.1:1",
    )  # fmt: skip


def test_latency_rows_judge_store_against_each_backends_target() -> None:
    ms = [x / 1000 for x in range(1, 101)]  # 1..100 ms, sorted: p50 51 ms, p99 100 ms

    def figures(backend: str, durability: str, scale: float) -> LatencyFigures:
        return LatencyFigures(
            backend, durability, 100.0, 2.0 * scale, 50.0, [t * scale for t in ms]
        )

    rows = latency_rows(
        [
            figures("local store", "store", 1.0),
            figures("local store", "cautious", 0.1),
            figures("S3 (moto)", "store", 5.0),
            figures("S3 (moto)", "cautious", 0.1),
        ]
    )
    assert [r[0] for r in rows] == [
        "ack latency at half load, local store: store / cautious",
        "ack latency at half load, S3 (moto): store / cautious",
        "daemon CPU per MB at saturation, local store: store / cautious",
        "daemon CPU per MB at saturation, S3 (moto): store / cautious",
    ]
    assert rows[0][1] == "p50 51.0 / 5.1 ms, p99 100.0 / 10.0 ms"
    assert rows[0][2] == "store p99 met (<= 100)"
    assert rows[1][2] == "store p99 MISSED (<= 400)"  # 500 ms
    assert rows[2][1] == "2.00 / 0.20 ms (10.00x)"
    assert format_table(rows).splitlines()[0].split() == ["measure", "KFS", "target", "note"]


@pytest.mark.integration
@pytest.mark.skipif(
    not os.access(RATE_PRODUCER, os.X_OK), reason="make rate-producer builds the C producer"
)
def test_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    rows = run(tmp_path, seconds=1.0, half_seconds=1.0, repeats=1, s3=False, put_seconds=0.5)
    names = [row[0] for row in rows]
    assert names == [
        "ack latency at half load, local store: store / cautious",
        "daemon CPU per MB at saturation, local store: store / cautious",
        "store WAL PUTs, 1 partition, local store",
        "store WAL PUTs, 10 partitions, local store",
        "store WAL PUTs, 100 partitions, local store",
        "load spread, 3 daemons, a topic of 12 partitions",
        "load spread, 3 daemons, a topic of 100 partitions",
        "kfs_cluster_held_partitions, 3 daemons, both topics",
        "failover, 3 daemons, kill -9 one, 12 partitions",
    ]
    assert all(len(row) == len(HEADER) for row in rows)
    assert re.fullmatch(r"p50 [\d.]+ / [\d.]+ ms, p99 [\d.]+ / [\d.]+ ms", rows[0][1])
    assert re.match(r"store p99 (met|MISSED)", rows[0][2])
    for puts in rows[2:5]:
        # Every WAL object was counted: a store-mode produce is acked only once one is written.
        objects = re.search(r"([\d,]+) WAL objects", puts[3])
        assert objects is not None and int(objects.group(1).replace(",", "")) > 0
        assert re.match(r"[\d,]+ per GB, [\d,]+ per hour", puts[1])
    # The two topics' partitions are all held, each by one daemon.
    held = [int(n) for n in rows[7][1].split(" / ")]
    assert len(held) == 3 and sum(held) >= 112
    failover = re.fullmatch(r"p50 ([\d.]+) s, max ([\d.]+) s", rows[8][1])
    assert failover is not None
    # A dead daemon's partitions wait for its session timeout (2 s) counted from its
    # last heartbeat (sent up to one 200 ms interval before the kill).
    assert float(failover.group(2)) >= 1.7
