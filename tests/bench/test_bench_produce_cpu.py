"""The produce-CPU benchmark stays runnable: a short form of `make bench`'s bench.produce_cpu."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from bench.produce_cpu import Settled

pytestmark = pytest.mark.integration


@pytest.mark.skipif(shutil.which("kcat") is None, reason="make kcat installs Debian's kcat")
def test_produce_cpu_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    from bench.produce_cpu import HEADER, format_table_rows, run

    # run() checks every partition's high watermark against the lines kcat sent.
    all_rows = run(
        tmp_path,
        megabytes=8,
        producers=2,
        half_seconds=1.0,
        long_segments=150,
        settle_s=0,
        runs=2,
    )
    names = [row[0] for row in all_rows]
    assert names[:3] == [
        "disk 64 KiB write+fdatasync",
        "disk 1024 KiB write+fdatasync",
        "disk new file (create, write, fsync, rename)",
    ]
    assert float(all_rows[2][3]) >= 0  # system ms per new file (rusage may round it to 0)
    runs = [all_rows[3:9], all_rows[9:15]]
    for number, rows in enumerate(runs, start=1):
        prefix = f"run {number}: "
        assert all(row[0].startswith(prefix) for row in rows)
        names = [row[0].removeprefix(prefix) for row in rows]
        assert names[0] == "kfs produce, 2 kcat producers"
        assert names[1] == "kfs produce again, warm heap"
        warm = dict(zip(HEADER, rows[1], strict=True))
        assert float(warm["user ms/MB"]) + float(warm["sys ms/MB"]) > 0
        assert "new files per MB in the store" in warm["note"]
        produce = dict(zip(HEADER, rows[0], strict=True))
        assert float(produce["MB/s"].replace(",", "")) > 0
        assert float(produce["user ms/MB"]) + float(produce["sys ms/MB"]) > 0
        assert "new files per MB in the store" in produce["note"]
        # The CPU is read once the flushes have committed what was acknowledged.
        assert re.search(
            r"[\d,]+ MB still to flush then, committed [\d.]+ s later", produce["note"]
        )
        assert names[2].startswith("kfs ack latency at half load")
        half = dict(zip(HEADER, rows[2], strict=True))
        assert "p99" in half["note"] and "messages" in half["note"]
        assert float(half["user ms/MB"]) + float(half["sys ms/MB"]) > 0
        assert "Produce requests/s" in half["note"] and "ms of daemon CPU each" in half["note"]
        assert (
            "the request round trip's p99" in half["note"]
            or "no request round-trip" in half["note"]
        )
        # Where the CPU contention shows: each side's threads, run and run-queue wait.
        ran = re.search(r"the daemon's threads ran ([\d.]+) cores and waited", half["note"])
        assert ran is not None and float(ran.group(1)) > 0
        assert "the producer's ran" in half["note"]
        assert "event loop " in half["note"] and "WAL writer " in half["note"]  # by OS thread name
        # What would explain a stall the round trips do not show.
        assert "Produce errors answered: none" in half["note"]
        assert "in the memory pool" in half["note"]
        assert re.search(
            r"librdkafka counted \d+ retries, \d+ request timeouts, \d+ disconnects, "
            r"longest round trip [\d,.]+ ms; statistics writes held the delivery reports up to "
            r"[\d,.]+ ms",
            half["note"],
        )
        assert names[3] == "kfs WAL writer at half load"
        assert rows[3][-1].startswith("busy ") and "writes/s" in rows[3][-1]
        assert names[4] == "kfs ack latency at half load, 150 segments a partition"
        long = dict(zip(HEADER, rows[4], strict=True))
        assert float(long["user ms/MB"]) + float(long["sys ms/MB"]) > 0
        assert "p99" in long["note"] and "Produce requests/s" in long["note"]
        # Its partitions were opened before the timed load: their catalogs
        # load on the first request, a restart's cost the next row times.
        assert re.search(
            r"opened before it by one Produce request, which took [\d,]+ ms", long["note"]
        )
        assert names[5] == "kfs first Produce after a restart, 2 partitions of 150 segments"
        first = re.fullmatch(
            r"([\d,]+) ms sent at readiness, ([\d,]+) ms sent 1 s later \(.*\)", rows[5][-1]
        )
        assert first is not None, rows[5][-1]
    pooled = all_rows[15:]
    assert [row[0] for row in pooled] == [
        "all runs: kfs produce, 2 kcat producers",
        "all runs: kfs produce again, warm heap",
        "all runs: kfs ack latency at half load",
        "all runs: kfs ack latency at half load, 150 segments a partition",
    ]
    first = dict(zip(HEADER, pooled[0], strict=True))
    each = [dict(zip(HEADER, rows[0], strict=True))["daemon CPU ms/MB"].split()[0] for rows in runs]
    assert first["note"] == f"2 runs, 16 MB; daemon CPU ms/MB in each: {', '.join(each)}"
    half = dict(zip(HEADER, pooled[2], strict=True))
    assert re.search(
        r"p99 [\d.]+ ms (met|MISSED) \(<= 10\) over all [\d,]+ messages of 2 runs", half["note"]
    )
    # A finished run's files are emptied, not deleted, so the next run's creates stay cheap.
    store_files = [path for path in (tmp_path / "store").rglob("*") if path.is_file()]
    assert store_files and all(path.stat().st_size == 0 for path in store_files)
    assert format_table_rows(all_rows).splitlines()[0].startswith("run")


def test_the_new_file_row_warns_when_files_deleted_nearby_slow_it() -> None:
    from bench.produce_cpu import NEW_FILE_SLOW_MS, new_file_note

    quiet = new_file_note(NEW_FILE_SLOW_MS)
    assert quiet == "system ms per file, as the local store makes an object (best of 3 x 200)"
    slow = new_file_note(NEW_FILE_SLOW_MS * 2)
    assert slow.startswith(quiet)
    assert "passed over on every create" in slow and "read high" in slow


class _Filesystem:
    """A new-file probe whose cost falls to ``fast_after`` seconds on a fake clock."""

    def __init__(self, slow_ms: float, fast_ms: float, fast_after: float) -> None:
        self.now = 0.0
        self.slow_ms, self.fast_ms, self.fast_after = slow_ms, fast_ms, fast_after
        self.probes: list[float] = []
        self.syncs: list[float] = []

    def probe(self, directory: Path) -> float:
        self.probes.append(self.now)
        return (self.fast_ms if self.now >= self.fast_after else self.slow_ms) / 1000

    def sync(self) -> None:
        self.syncs.append(self.now)

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds

    def clock(self) -> float:
        return self.now


def _settle(fs: _Filesystem, tmp_path: Path, wait_s: float) -> Settled:
    from bench.produce_cpu import settle_filesystem

    return settle_filesystem(
        tmp_path, wait_s, probe=fs.probe, sync=fs.sync, sleep=fs.sleep, clock=fs.clock
    )


@pytest.mark.parametrize(
    ("first_ms", "wait_s"),
    [(0.12, 370), (0.7, 0)],
    ids=["a quiet filesystem", "the short form, which does not wait"],
)
def test_one_probe_without_a_wait(tmp_path: Path, first_ms: float, wait_s: float) -> None:
    fs = _Filesystem(slow_ms=first_ms, fast_ms=0.12, fast_after=1)
    settled = _settle(fs, tmp_path, wait_s=wait_s)
    assert (settled.file_ms, settled.waited_s) == (pytest.approx(first_ms), 0.0)
    assert fs.probes == [0.0] and fs.syncs == []


def test_recent_deletions_are_waited_out_in_full_after_a_sync(tmp_path: Path) -> None:
    from bench.produce_cpu import new_file_note

    # The probe comes down after 60 s; the wait goes on: the probe's
    # directory can be clear of recent deletions before the daemon's are.
    fs = _Filesystem(slow_ms=0.7, fast_ms=0.12, fast_after=60)
    settled = _settle(fs, tmp_path, wait_s=370)
    assert settled.file_ms == pytest.approx(0.12)
    assert settled.waited_s == 370
    assert fs.probes == [0, 370]
    assert fs.syncs == [0.0]  # once, before the wait
    note = new_file_note(settled.file_ms, settled.waited_s)
    assert "370 s spent waiting, after a sync" in note
    assert "read high" not in note


def test_a_filesystem_still_slow_after_the_wait_is_reported(tmp_path: Path) -> None:
    from bench.produce_cpu import new_file_note

    fs = _Filesystem(slow_ms=0.7, fast_ms=0.12, fast_after=1e6)
    settled = _settle(fs, tmp_path, wait_s=370)
    assert (settled.file_ms, settled.waited_s) == (pytest.approx(0.7), 370)
    assert "read high" in new_file_note(settled.file_ms, settled.waited_s)


def test_the_probe_keeps_its_files_and_makes_new_ones_each_time(tmp_path: Path) -> None:
    from bench.produce_cpu import new_file_cost

    assert new_file_cost(tmp_path, count=3) >= 0
    assert new_file_cost(tmp_path, count=3) >= 0
    places = sorted(tmp_path.iterdir())
    assert len(places) == 2  # a directory of its own each time: nothing renamed over
    assert all(len(list(place.iterdir())) == 9 for place in places)


def test_a_pooled_quantile_is_the_quantile_of_all_the_runs_together() -> None:
    import random

    from bench.produce_cpu import pooled_quantile, quantile

    rng = random.Random(7)
    for _ in range(200):
        runs = [
            sorted(
                rng.choice([rng.random(), round(rng.random(), 1)])
                for _ in range(rng.randrange(0, 40))
            )
            for _ in range(rng.randrange(1, 5))
        ]
        together = sorted(value for values in runs for value in values)
        for q in (0.0, 0.5, 0.9, 0.99, 1.0):
            expected = quantile(together, q)
            got = pooled_quantile(runs, q)
            assert got == expected or (math.isnan(expected) and math.isnan(got)), (runs, q)


def test_pooled_rows_judge_the_target_on_all_the_runs_together() -> None:
    from bench.produce_cpu import (
        Backlog,
        HalfLoadFigures,
        SaturationResult,
        pooled_half_load_row,
        pooled_produce_row,
    )

    def saturated(cpu_s: float) -> SaturationResult:
        return SaturationResult(1000, 2.0, Backlog(0, 0), cpu_s / 2, cpu_s / 2, 0, 1.0, 0)

    # 1.2 and 1.7 ms per MB: one run over the target, the two together under it;
    # 1.2 and 1.9 together are over it.
    row = pooled_produce_row("all", [saturated(1.2), saturated(1.7)])
    assert row[4] == "1.45 met (<= 1.5)"
    assert row[-1] == "2 runs, 2,000 MB; daemon CPU ms/MB in each: 1.20, 1.70"
    assert pooled_produce_row("all", [saturated(1.2), saturated(1.9)])[4].endswith(
        "MISSED (<= 1.5)"
    )

    def half(latencies_ms: list[float]) -> HalfLoadFigures:
        return HalfLoadFigures(sorted(ms / 1000 for ms in latencies_ms), 100, 0.1, 0.1, 0, 0.05)

    quiet, noisy = half([5.0] * 99 + [9.0]), half([5.0] * 98 + [12.0] * 2)
    note = pooled_half_load_row("all", [quiet, noisy])[-1]
    # 200 messages: the p99 is the 199th, a 12 ms one; each run's own p99 is its 100th.
    assert note.startswith("p50 5.0 ms, p99 12.0 ms MISSED (<= 10) over all 200 messages of 2 runs")
    assert note.endswith("p99 in each: 9.0, 12.0 ms")


def test_the_half_load_row_names_produce_errors_and_client_retries() -> None:
    from bench.produce_cpu import client_note, pool_note, produce_errors

    series = 'kfs_partition_errors_total{api="PRODUCE",error="%s"}'
    before = {
        series % "REQUEST_TIMED_OUT": 2.0,
        'kfs_partition_errors_total{api="FETCH",error="X"}': 0,
    }
    after = {
        series % "REQUEST_TIMED_OUT": 5.0,
        series % "KAFKA_STORAGE_ERROR": 1.0,
        'kfs_partition_errors_total{api="FETCH",error="X"}': 9.0,
    }
    assert produce_errors(after, before) == "1 KAFKA_STORAGE_ERROR, 3 REQUEST_TIMED_OUT"
    assert produce_errors(before, before) == "none"
    # A stall in the memory pool, told apart from one in the WAL or the client.
    pool = {"kfs_log_pool_waits_total": 4.0, "kfs_log_pool_wait_seconds_total": 1.5}
    grown = {"kfs_log_pool_waits_total": 1_204.0, "kfs_log_pool_wait_seconds_total": 2.5}
    assert pool_note(grown, pool) == (
        "1,200 Produce waits for room in the memory pool, 1,000.0 ms in all"
    )
    assert pool_note(pool, pool) == "no Produce waited for room in the memory pool"

    def window(rtt_max_us: int, retries: int) -> dict[str, Any]:
        bootstrap = {"txretries": 0, "req_timeouts": 1, "disconnects": 0}
        produce = {**bootstrap, "txretries": retries, "rtt": {"cnt": 10, "max": rtt_max_us}}
        return {"brokers": {"bootstrap": bootstrap, "kfs:1": produce}}

    note = client_note([window(91_600, 0), window(4_000, 7)], 1_003.25)
    assert note == (
        "librdkafka counted 7 retries, 2 request timeouts, 0 disconnects, "
        "longest round trip 91.6 ms; statistics writes held the delivery reports up to 1,003.2 ms"
    )
    assert client_note([], 0.01) == (
        "librdkafka reported no statistics; statistics writes held the delivery reports up to "
        "0.0 ms"
    )
