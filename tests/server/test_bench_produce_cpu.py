"""The produce-CPU benchmark stays runnable: a short form of `make bench`'s bench.produce_cpu."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from bench.produce_cpu import Settled

pytestmark = pytest.mark.integration


@pytest.mark.skipif(shutil.which("kcat") is None, reason="make kcat installs Debian's kcat")
def test_produce_cpu_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    from bench.produce_cpu import HEADER, format_table_rows, run

    # run() checks every partition's high watermark against the lines kcat sent.
    rows = run(
        tmp_path, megabytes=8, producers=2, half_seconds=1.0, long_segments=150, settle_limit_s=0
    )
    names = [row[0] for row in rows]
    assert names[:3] == [
        "disk 64 KiB write+fdatasync",
        "disk 1024 KiB write+fdatasync",
        "disk new file (create, write, fsync, rename)",
    ]
    assert names[3] == "kfs produce, 2 kcat producers"
    assert names[4] == "kfs produce again, warm heap"
    warm = dict(zip(HEADER, rows[4], strict=True))
    assert float(warm["user ms/MB"]) + float(warm["sys ms/MB"]) > 0
    assert "new files per MB in the store" in warm["note"]
    del rows[4], names[4]  # the rows below keep their places
    assert names[4].startswith("kfs ack latency at half load")
    assert float(rows[2][3]) >= 0  # system ms per new file (rusage may round it to 0)
    produce = dict(zip(HEADER, rows[3], strict=True))
    assert float(produce["MB/s"].replace(",", "")) > 0
    assert float(produce["user ms/MB"]) + float(produce["sys ms/MB"]) > 0
    assert "new files per MB in the store" in produce["note"]
    # The CPU is read once the flushes have committed what was acknowledged.
    assert re.search(r"[\d,]+ MB still to flush then, committed [\d.]+ s later", produce["note"])
    assert "p99" in rows[4][-1] and "messages" in rows[4][-1]
    half = dict(zip(HEADER, rows[4], strict=True))
    assert float(half["user ms/MB"]) + float(half["sys ms/MB"]) > 0
    assert "Produce requests/s" in half["note"] and "ms of daemon CPU each" in half["note"]
    assert "the request round trip's p99" in half["note"] or "no request round-trip" in half["note"]
    # Where the CPU contention shows: each side's threads, run and run-queue wait.
    ran = re.search(r"the daemon's threads ran ([\d.]+) cores and waited", half["note"])
    assert ran is not None and float(ran.group(1)) > 0
    assert "the producer's ran" in half["note"]
    assert "event loop " in half["note"] and "WAL writer " in half["note"]  # by OS thread name
    assert names[5] == "kfs WAL writer at half load"
    assert rows[5][-1].startswith("busy ") and "writes/s" in rows[5][-1]
    assert names[6] == "kfs ack latency at half load, 150 segments a partition"
    long = dict(zip(HEADER, rows[6], strict=True))
    assert float(long["user ms/MB"]) + float(long["sys ms/MB"]) > 0
    assert "p99" in long["note"] and "Produce requests/s" in long["note"]
    assert format_table_rows(rows).splitlines()[0].startswith("run")


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


def _settle(fs: _Filesystem, tmp_path: Path, limit_s: float) -> Settled:
    from bench.produce_cpu import settle_filesystem

    return settle_filesystem(
        tmp_path, limit_s, probe=fs.probe, sync=fs.sync, sleep=fs.sleep, clock=fs.clock
    )


def test_a_quiet_filesystem_is_measured_once_without_waiting(tmp_path: Path) -> None:
    fs = _Filesystem(slow_ms=0.12, fast_ms=0.12, fast_after=0)
    settled = _settle(fs, tmp_path, limit_s=90)
    assert (settled.file_ms, settled.waited_s) == (pytest.approx(0.12), 0.0)
    assert fs.probes == [0.0] and fs.syncs == []


def test_recent_deletions_are_waited_out_after_a_sync(tmp_path: Path) -> None:
    from bench.produce_cpu import SETTLE_STEP_S, new_file_note

    fs = _Filesystem(slow_ms=0.7, fast_ms=0.12, fast_after=2.5 * SETTLE_STEP_S)
    settled = _settle(fs, tmp_path, limit_s=10 * SETTLE_STEP_S)
    assert settled.file_ms == pytest.approx(0.12)
    assert settled.waited_s == 3 * SETTLE_STEP_S  # the first probe after it came down
    assert fs.probes == [0, SETTLE_STEP_S, 2 * SETTLE_STEP_S, 3 * SETTLE_STEP_S]
    assert fs.syncs == [0.0]  # once, before the first wait
    note = new_file_note(settled.file_ms, settled.waited_s)
    assert f"{3 * SETTLE_STEP_S:.0f} s spent waiting, after a sync" in note
    assert "read high" not in note


def test_the_wait_is_bounded_and_a_still_slow_filesystem_is_reported(tmp_path: Path) -> None:
    from bench.produce_cpu import SETTLE_STEP_S, new_file_note

    fs = _Filesystem(slow_ms=0.7, fast_ms=0.12, fast_after=1e6)
    limit_s = 1.5 * SETTLE_STEP_S
    settled = _settle(fs, tmp_path, limit_s=limit_s)
    assert settled.file_ms == pytest.approx(0.7)
    assert settled.waited_s == limit_s  # the last step is cut to the limit
    assert fs.probes == [0, SETTLE_STEP_S, limit_s]
    assert "read high" in new_file_note(settled.file_ms, settled.waited_s)


def test_the_short_form_does_not_wait(tmp_path: Path) -> None:
    fs = _Filesystem(slow_ms=0.7, fast_ms=0.12, fast_after=1)
    settled = _settle(fs, tmp_path, limit_s=0)
    assert (settled.file_ms, settled.waited_s) == (pytest.approx(0.7), 0.0)
    assert fs.probes == [0.0] and fs.syncs == []


def test_the_probe_keeps_its_files_and_makes_new_ones_each_time(tmp_path: Path) -> None:
    from bench.produce_cpu import new_file_cost

    assert new_file_cost(tmp_path, count=3) >= 0
    assert new_file_cost(tmp_path, count=3) >= 0
    places = sorted(tmp_path.iterdir())
    assert len(places) == 2  # a directory of its own each time: nothing renamed over
    assert all(len(list(place.iterdir())) == 9 for place in places)
