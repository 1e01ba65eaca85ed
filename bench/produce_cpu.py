"""The daemon's CPU per durable megabyte, with the producers in processes of their own.

    .venv/bin/python -m bench.produce_cpu [--megabytes N] [--producers K] [--runs R] [--quick]

`bench.produce_fetch` drives the daemon with a Python producer in the
benchmark's own process, which takes the other core of a 2-core machine.
Here the load generator is kept out of the way, so the daemon's own cost is
what is measured:

- disk baselines, independent of the daemon, in the WAL's directory: 64 KiB
  and 1 MiB ``pwrite`` + ``fdatasync`` into fresh preallocated 16 MiB files
  (the WAL's layout), best of three, with the fdatasync latency p50/p99 and
  the system CPU each megabyte cost the benchmark process; then what a new
  file costs there, as the local store makes an object.  Run within a minute
  or so of another run's clean-up, that cost is several times its usual
  figure and the daemon's rows read high (ext4 without a journal passes over
  recently deleted inodes on every create, for up to six minutes), so a slow
  probe syncs and waits a little over six minutes before the daemon's rows
  (`settle_filesystem`; ``--quick`` does not wait), and the row says how
  long it waited;
- saturation: ``--producers`` ``kcat -P -l`` processes (librdkafka, C; acks=all,
  no compression, 1 KiB lines) each send their share of ``--megabytes`` to
  their own partition of one topic.  MB/s of values (to the last
  acknowledgement), the daemon's user and system CPU per MB
  (``/proc/<pid>/stat`` before the run and after the flushes have committed
  everything it acknowledged: they trail the producers by up to the memory
  pool's size), its minor page faults per MB, the producers' CPU per MB,
  and the ratio of MB/s to the 1 MiB disk baseline.  Target: daemon CPU
  <= 1.5 ms per MB;
- the same again on another topic of the same daemon: the first run grows
  the heap to hold the memory pool, faulting in and zeroing every new page
  (about 200 minor faults per MB); this one reuses them, as a daemon that
  has run for a while does;
- half load: one librdkafka producer in C (``bench/rate_producer.c``, built by
  ``make rate-producer``) in a process of its own, rate-limited to half the
  saturation rate, acks=all; the ack latency p50/p99 of every message as
  librdkafka times it (``rd_kafka_message_latency``, which includes
  ``linger.ms`` and the client's queue), the request round trip's p99 per second as
  librdkafka's statistics give it (request sent to response read), and the daemon's CPU per MB
  and per Produce request meanwhile (the producer sends smaller requests than
  at saturation, so the cost per request shows).  Target: p99 <= 10 ms, beside
  the disk's own fdatasync p99; then what the WAL writer thread did meanwhile:
  how busy it was, its writes per second and their size, and the mean time of
  a write and of an fdatasync, which include the wait for the GIL after each
  call (the disk rows are the device's own time for the same calls);
- half load again, on a topic whose partitions already hold 10,000 segments
  each (their catalog entries committed while the daemon was stopped), as a
  partition does after weeks of traffic: a flush must cost what it costs in
  a new partition.  One Produce request opens its partitions first (its
  round trip is in the row's note): after the restart that wrote those
  entries, the first request to a partition loads its catalog, which holds
  up more than 1 % of a row's messages -- a restart's cost, which the next
  row times;
- the daemon's rows again, ``--runs`` times in all (3 by default), each with
  a daemon of its own, then the runs added up: the CPU of all of them over
  all their megabytes, and the p50/p99 over every message of every run.  The
  targets are judged on those sums: one run's p99 moves by a millisecond or
  two from run to run on this machine.  A finished run's files are emptied,
  not deleted, so that the next run's creates do not pass over them.

Missed targets are reported, not failed: the command exits 0 unless the
daemon or a producer fails.  ``--quick`` is the short form `make test` runs.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.catalog_load import fill_partition
from bench.produce_fetch import (
    NAMESPACE,
    Daemon,
    DiskResult,
    best_disk_write,
    create_topic,
)
from kfs_core.catalog import PartitionCatalog
from kfs_core.records.batch import Record, encode_batch
from kfs_core.server.protocol.messages import ProduceRequest
from kfs_core.storage.local import LocalObjectStore
from testkit.metrics import series_delta
from testkit.raw_client import RawClient

KIB = 1 << 10
MIB = 1 << 20
LINE_BYTES = 1024  # 1023 printable bytes and the newline kcat splits on
TOPIC = "bench-cpu"
CPU_TARGET_MS = 1.5
LATENCY_TARGET_MS = 10.0
HALF_LOAD_SECONDS = 10.0
DEFAULT_RUNS = 3  # daemons, one after another: one run's p99 moves by a millisecond or two
LONG_TOPIC = "bench-cpu-long"
WARM_TOPIC = "bench-cpu-warm"
LONG_SEGMENTS = 10_000  # a partition's segments in the last half-load row: 40 GB at 4 MiB
PRODUCER_TIMEOUT_S = 600.0
FLUSH_TIMEOUT_S = 120.0
RECONNECT_DELAY_S = 1.0  # librdkafka's reconnect backoff grows from 0.1 s towards 10 s
_CLK_TCK = os.sysconf("SC_CLK_TCK")

# One librdkafka producer at a fixed rate, in C, in its own process
# (bench/rate_producer.c, built by `make rate-producer`).  A Python producer
# calling produce() 170,000 times a second took half a core of a 2-core
# machine, and the daemon's threads waited for a CPU behind it.
RATE_PRODUCER = Path(__file__).resolve().parent.parent / ".build" / "rate-producer"


@dataclass(frozen=True)
class CpuSample:
    user_s: float
    system_s: float
    minor_faults: int

    @classmethod
    def of(cls, pid: int) -> CpuSample:
        # /proc/<pid>/stat: fields after the command name; minflt is field 10, utime 14, stime 15.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return cls(int(fields[11]) / _CLK_TCK, int(fields[12]) / _CLK_TCK, int(fields[7]))


DAEMON_THREADS = "the daemon's threads"
# The names the daemon's threads give the OS (kfs_core/threads.py), without "_<n>".
_THREAD_ROLES = {
    "kfs-wal-writer": "WAL writer",
    "kfs-log-io": "I/O pool",
    "kfs-catalog": "catalog pool",
}
PRODUCER_THREADS = "the producer's"


@dataclass(frozen=True)
class RunQueue:
    """A process's threads, summed: seconds on a CPU and seconds runnable but waiting for one."""

    ran_s: float
    waited_s: float

    @classmethod
    def by_role(cls, pid: int) -> dict[str, RunQueue]:
        """The daemon's threads grouped by what they do, from the names they give the OS.

        From /proc/<pid>/task/*/schedstat: the threads alive now, since each began.
        """
        roles: dict[str, RunQueue] = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                fields = (task / "schedstat").read_text().split()
                name = (task / "comm").read_text().strip()
                role = (
                    "event loop"
                    if task.name == str(pid)
                    else _THREAD_ROLES.get(name.rsplit("_", 1)[0], "other threads")
                )
                thread = cls(int(fields[0]) / 1e9, int(fields[1]) / 1e9)
                roles[role] = roles.get(role, cls(0, 0)) + thread
        return roles

    def __add__(self, other: RunQueue) -> RunQueue:
        return RunQueue(self.ran_s + other.ran_s, self.waited_s + other.waited_s)

    def since(self, earlier: RunQueue) -> RunQueue:
        return RunQueue(self.ran_s - earlier.ran_s, self.waited_s - earlier.waited_s)

    def note(self, who: str, seconds: float) -> str:
        return (
            f"{who} ran {self.ran_s / seconds:.2f} cores and waited for a CPU "
            f"{self.waited_s / seconds:.2f} core-seconds a second"
        )


@dataclass(frozen=True)
class SaturationResult:
    megabytes: float
    seconds: float  # the producers' run, to their last acknowledgement
    backlog: Backlog  # what was still to flush then; the CPU figures include flushing it
    daemon_user_s: float
    daemon_system_s: float
    daemon_faults: int
    producer_cpu_s: float
    files_made: int  # objects the run added to the store: segments, indexes, commits, snapshots

    @property
    def mb_per_second(self) -> float:
        return self.megabytes / self.seconds

    def per_mb(self, seconds: float) -> float:
        return seconds * 1000 / self.megabytes

    @property
    def daemon_cpu_ms_per_mb(self) -> float:
        return self.per_mb(self.daemon_user_s + self.daemon_system_s)


def line_file(directory: Path, megabytes: int) -> Path:
    """``megabytes`` of 1 KiB lines of printable, poorly compressible bytes, fsynced."""
    path = directory / f"lines-{megabytes}.txt"
    alphabet = bytes(range(33, 127))
    block = b"".join(
        bytes(alphabet[b % len(alphabet)] for b in os.urandom(LINE_BYTES - 1)) + b"\n"
        for _ in range(MIB // LINE_BYTES)
    )
    with path.open("wb") as out:
        out.write(block * megabytes)
        # Left dirty, the kernel would write it back 30 s later
        # (vm.dirty_expire_centisecs), in the middle of a later row, holding
        # the disk for 60-90 ms.
        out.flush()
        os.fsync(out.fileno())
    return path


def run_kcat_producers(
    bootstrap: str, topic: str, lines: Path, partitions: Sequence[int | None]
) -> None:
    """One ``kcat -P -l`` process per entry, each sending all of ``lines``, and wait for them.

    acks=all, linger.ms 5, batch.size 1 MB, no compression; an entry is the
    partition that process writes, or None for librdkafka's partitioner.
    """
    procs = [
        subprocess.Popen(
            [
                "kcat",
                "-P",
                "-b",
                bootstrap,
                "-t",
                topic,
                *(["-p", str(partition)] if partition is not None else []),
                "-X",
                "acks=all",
                "-X",
                "linger.ms=5",
                "-X",
                "batch.size=1000000",
                "-l",
                str(lines),
            ],
            stderr=subprocess.PIPE,
        )
        for partition in partitions
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=PRODUCER_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"kcat exited {proc.returncode}: {err.decode(errors='replace')}")


def saturate(
    daemon: Daemon, lines: Path, megabytes: int, producers: int, topic: str = TOPIC
) -> SaturationResult:
    """Each of ``producers`` kcat processes sends all of ``lines`` (``megabytes / producers``)."""
    assert daemon.proc is not None
    share = max(1, megabytes // producers)
    create_topic(daemon.bootstrap, topic, producers)
    files_before = _store_files(daemon)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = CpuSample.of(daemon.proc.pid)
    started = time.perf_counter()
    run_kcat_producers(daemon.bootstrap, topic, lines, list(range(producers)))
    seconds = time.perf_counter() - started
    backlog = flushed(daemon)
    after = CpuSample.of(daemon.proc.pid)
    stored = high_watermarks(daemon.bootstrap, producers, topic)
    expected = share * MIB // LINE_BYTES
    if stored != [expected] * producers:
        raise RuntimeError(f"expected {expected} records in each partition, found {stored}")
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    producer_cpu = (children_after.ru_utime + children_after.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    return SaturationResult(
        share * producers,
        seconds,
        backlog,
        after.user_s - before.user_s,
        after.system_s - before.system_s,
        after.minor_faults - before.minor_faults,
        producer_cpu,
        _store_files(daemon) - files_before,
    )


@dataclass(frozen=True)
class Backlog:
    """Acknowledged bytes not yet in committed segments when the producers finished."""

    megabytes: float
    seconds: float  # until the flushes had committed them

    def note(self) -> str:
        return f"{self.megabytes:,.0f} MB still to flush then, committed {self.seconds:.2f} s later"


def flushed(daemon: Daemon, timeout_s: float = FLUSH_TIMEOUT_S) -> Backlog:
    """Wait until the daemon holds no acknowledged byte outside a committed segment.

    An acknowledged megabyte is durable in the WAL, but its cost includes
    sealing, uploading and committing it: at saturation the flushes trail
    the producers by up to the memory pool's size, so the CPU figures are
    read once the pool is empty, not when the last acknowledgement arrives.
    """
    started = time.perf_counter()
    deadline = started + timeout_s
    first = daemon.metrics()["kfs_log_pool_used_bytes"]
    used = first
    while used > 0:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{used:,.0f} bytes still unflushed after {timeout_s:g} s")
        time.sleep(0.02)
        used = daemon.metrics()["kfs_log_pool_used_bytes"]
    return Backlog(first / MIB, time.perf_counter() - started)


def _store_files(daemon: Daemon) -> int:
    return sum(1 for path in daemon.store_dir.rglob("*") if path.is_file())


def high_watermarks(bootstrap: str, partitions: int, topic: str = TOPIC) -> list[int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cpu"})
    try:
        return [
            consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


@dataclass(frozen=True)
class HalfLoad:
    latencies: Sequence[float]  # seconds, sorted: every message's produce() to ack
    sent: int
    producer_cpu_s: float
    seconds: float
    # librdkafka's Produce request round trip (request sent to response read,
    # so without linger.ms and the client's queue), p99 of each 1 s window
    rtt_p99_s: list[float]
    # The producer's threads over its life: seconds on a CPU, and runnable but
    # waiting for one (/proc/<pid>/task/*/schedstat)
    producer_sched: RunQueue
    # What else librdkafka saw: retries, request timeouts, reconnects, the
    # longest single round trip (`client_note`)
    client_events: str

    def rtt_note(self) -> str:
        if not self.rtt_p99_s:
            return "no request round-trip window reported"
        windows = sorted(self.rtt_p99_s)
        return (
            f"the request round trip's p99 (librdkafka, per second) median "
            f"{quantile(windows, 0.5) * 1000:.1f} ms, worst {windows[-1] * 1000:.1f} ms "
            f"over {len(windows)} s"
        )


def require_rate_producer() -> None:
    if not os.access(RATE_PRODUCER, os.X_OK):
        raise SystemExit(f"{RATE_PRODUCER} is missing: `make rate-producer` builds it")


def half_load(
    bootstrap: str, rate_mb_s: float, seconds: float, partitions: int, topic: str = TOPIC
) -> HalfLoad:
    """Ack latencies (s) of one rate-limited producer process at ``rate_mb_s``.

    The same load as the saturation run (its partitions; linger.ms 5 and
    batch.size 1 MB, as kcat was told), at a fixed rate.  Every message
    sent must be in the log afterwards (the high watermarks grow by that many).
    """
    before = sum(high_watermarks(bootstrap, partitions, topic))
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    require_rate_producer()
    out = subprocess.run(
        [
            RATE_PRODUCER,
            bootstrap,
            topic,
            str(partitions),
            str(rate_mb_s * 1e6),
            str(seconds),
        ],
        capture_output=True,
        timeout=seconds + 120,
        check=True,
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    *stats, result = (json.loads(line) for line in out.stdout.splitlines())
    stored = sum(high_watermarks(bootstrap, partitions, topic)) - before
    if stored != result["sent"]:
        raise RuntimeError(f"the producer sent {result['sent']} messages, the log gained {stored}")
    cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    rtts = [p99 / 1e6 for p99 in _produce_rtt_p99_us(stats)]
    ran_ns, waited_ns = result["sched_ns"]
    sched = RunQueue(ran_ns / 1e9, waited_ns / 1e9)
    latencies = array("d", sorted(us / 1e6 for us in result["latencies_us"]))
    events = client_note(stats, result["stats_write_max_us"] / 1000)
    return HalfLoad(latencies, result["sent"], cpu, elapsed, rtts, sched, events)


def client_note(stats: list[dict[str, Any]], stats_write_max_ms: float) -> str:
    """What the producer's brokers counted over the run (librdkafka's cumulative statistics).

    Retries, request timeouts and reconnects each delay their messages by
    a backoff the broker's round trip does not show; the longest single
    round trip is the window maxima's maximum.  ``stats_write_max_ms`` is
    the producer's longest write of a statistics line to its stdout: the
    delivery reports wait behind it, and their latencies include the wait.
    """
    held = f"statistics writes held the delivery reports up to {stats_write_max_ms:,.1f} ms"
    if not stats:
        return f"librdkafka reported no statistics; {held}"
    brokers = stats[-1]["brokers"].values()
    retries = sum(b.get("txretries", 0) for b in brokers)
    timeouts = sum(b.get("req_timeouts", 0) for b in brokers)
    disconnects = sum(b.get("disconnects", 0) for b in brokers)
    longest = max((b["rtt"]["max"] for w in stats for b in _timed_brokers(w)), default=0)
    return (
        f"librdkafka counted {retries} retries, {timeouts} request timeouts, "
        f"{disconnects} disconnects, longest round trip {longest / 1000:,.1f} ms; {held}"
    )


def _produce_rtt_p99_us(stats: list[dict[str, Any]]) -> list[int]:
    """The Produce round trip's p99 in each statistics window, from the broker the batches went to.

    The bootstrap connection answers Metadata only; the one with the most
    round trips carried the Produce requests.
    """
    p99s = []
    for window in stats:
        brokers = _timed_brokers(window)
        if brokers:
            p99s.append(max(brokers, key=lambda b: b["rtt"]["cnt"])["rtt"]["p99"])
    return p99s


def _timed_brokers(window: dict[str, Any]) -> list[dict[str, Any]]:
    """The brokers of one statistics window that timed round trips in it."""
    return [b for b in window["brokers"].values() if b.get("rtt", {}).get("cnt")]


def histogram_bound(
    after: dict[str, float], before: dict[str, float], name: str, q: float, labels: str = ""
) -> float:
    """The upper bound of the bucket holding quantile ``q`` of a daemon histogram, between scrapes."""
    buckets = []
    for series, count in after.items():
        if series.startswith(f"{name}_bucket{{") and labels in series:
            bound = series.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(bound), count - before.get(series, 0.0)))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    for upper, count in buckets:
        if total and count >= q * total:
            return upper
    return float("nan")


def histogram_totals(
    after: dict[str, float], before: dict[str, float], name: str, labels: str = ""
) -> tuple[float, float]:
    """``(sum, count)`` of a daemon histogram between scrapes."""
    return (
        series_delta(after, before, f"{name}_sum", labels),
        series_delta(after, before, f"{name}_count", labels),
    )


def writer_note(after: dict[str, float], before: dict[str, float], seconds: float) -> str:
    """What the WAL writer thread did between scrapes: how busy it was, and with what.

    Its write time is the staging copy, the ``pwrite`` and the wait for the
    GIL after it; its fdatasync time is the call and the wait for the GIL
    after it.  Set beside the disk rows (the device's own time for the same
    calls), the difference is what the thread spends waiting to run Python.
    """
    stage = "kfs_wal_append_stage_seconds"
    write_s, writes = histogram_totals(after, before, stage, 'stage="write"')
    sync_s, syncs = histogram_totals(after, before, "kfs_wal_fsync_seconds")
    produced = series_delta(after, before, "kfs_produce_bytes_total")
    if not writes or seconds <= 0:
        return "no WAL writes"
    # The p99s of both are in the half-load row already.
    return (
        f"busy {(write_s + sync_s) / seconds:.0%} of the time: {writes / seconds:,.0f} writes/s "
        f"of {produced / writes / KIB:,.0f} KiB of batches each, write {write_s / writes * 1000:.2f} ms "
        f"mean, fdatasync {sync_s / max(syncs, 1) * 1000:.2f} ms mean; both include "
        f"the wait for the GIL after the call (the disk rows above are the device's own)"
    )


def verdict(value: float, target: float) -> str:
    """``met (<= target)`` or ``MISSED (<= target)``, as every row with a target says it."""
    return f"{'met' if value <= target else 'MISSED'} (<= {target:g})"


def quantile(values: Sequence[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def pooled_quantile(runs: Sequence[Sequence[float]], q: float) -> float:
    """`quantile` of all the runs' values together, each run sorted, without merging them.

    The answer is the value of rank ``int(q * n) + 1`` among all ``n``; in each
    run, a bisection finds its first value with at least that many values at
    or below it, and the smallest of those is the one.
    """
    total = sum(len(values) for values in runs)
    if not total:
        return float("nan")
    rank = min(total - 1, int(q * total)) + 1
    best = float("inf")
    for values in runs:
        lo, hi = 0, len(values)
        while lo < hi:
            mid = (lo + hi) // 2
            if sum(bisect.bisect_right(other, values[mid]) for other in runs) >= rank:
                hi = mid
            else:
                lo = mid + 1
        if lo < len(values):
            best = min(best, values[lo])
    return best


def new_file_cost(directory: Path, count: int = 200, size: int = 4 * KIB) -> float:
    """System CPU seconds one new file costs, made as the local store makes an object.

    Create a temporary file, write ``size`` bytes, fsync it, rename it into
    place, fsync the directory: the best of three rounds of ``count`` files,
    in a directory of their own (kept: deleting them would slow the creates
    that follow).  On ext4 without a journal, creating an inode checks it
    against every inode deleted in the last minutes (``recently_deleted``),
    so this cost depends on what was deleted nearby before the run, not on KFS.
    """
    place = Path(tempfile.mkdtemp(prefix="new-files-", dir=directory))
    data = os.urandom(size)
    rounds = []
    for attempt in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        dir_fd = os.open(place, os.O_RDONLY)
        try:
            for i in range(count):
                temp = place / f".tmp-{attempt}-{i}"
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(temp, place / f"object-{attempt}-{i}")
                os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        rounds.append((resource.getrusage(resource.RUSAGE_SELF).ru_stime - before) / count)
    return min(rounds)


#: On this machine a new file costs 0.10-0.19 ms of system time when nothing
#: was deleted nearby in the minutes before, and 0.27-0.87 ms after another
#: run's clean-up (docs/performance-notes.md, "The filesystem").
NEW_FILE_SLOW_MS = 0.25
#: A deleted inode is passed over for 60 s after its deletion, or for 360 s
#: while its inode table block is dirty (ext4's ``recently_deleted``), and
#: every create in that block dirties it again: in a directory that keeps
#: making files, the longer window holds (a probe 90 s after a sync still read
#: 0.53 ms).  So once the first probe finds recent deletions, everything
#: deleted before the run is out of that window this long after it.
SETTLE_S = 370.0


@dataclass(frozen=True)
class Settled:
    file_ms: float  # what a new file cost at the last probe
    waited_s: float  # how long it waited for the deletions to age out (0: not at all)


def settle_filesystem(
    directory: Path,
    wait_s: float = SETTLE_S,
    *,
    probe: Callable[[Path], float] = new_file_cost,
    sync: Callable[[], None] = os.sync,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Settled:
    """The new-file cost in ``directory``, after files deleted nearby before the run age out.

    Run straight after another run's clean-up, the daemon's rows below read
    high (every create passes over the thousands of inodes just freed).  A
    slow first probe means such deletions: then the filesystem is synced (so
    that no write-back of the last run's files lands in a row), and the run
    waits ``wait_s`` in full before it probes again (0: measure once, do not
    wait).  It does not stop at the first fast probe: the probe's directory
    can be clear before the daemon's are (once, a probe read 0.16 ms after
    63 s, and the daemon's rows still read 1.84 / 1.45 ms per MB).
    """
    started = clock()
    file_ms = probe(directory) * 1000
    if file_ms <= NEW_FILE_SLOW_MS or wait_s <= 0:
        return Settled(file_ms, 0.0)
    sync()
    sleep(wait_s)
    file_ms = probe(directory) * 1000
    return Settled(file_ms, clock() - started)


def new_file_note(file_ms: float, waited_s: float = 0.0) -> str:
    """The new-file row's note: what it measures, and a warning when it reads slow."""
    note = "system ms per file, as the local store makes an object (best of 3 x 200)"
    if waited_s > 0:
        note += (
            f"; {waited_s:.0f} s spent waiting, after a sync, for the files deleted "
            "nearby before the run to stop slowing creates"
        )
    if file_ms > NEW_FILE_SLOW_MS:
        note += (
            f"; over {NEW_FILE_SLOW_MS:g} ms: on ext4 without a journal, files deleted "
            "nearby in the last minutes are passed over on every create, so the daemon's "
            "rows below read high (docs/performance-notes.md: the filesystem)"
        )
    return note


def disk_rows(directory: Path, volume: int, settle_s: float = SETTLE_S) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for chunk in (64 << 10, MIB):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        result: DiskResult = best_disk_write(directory, volume, chunk, repeat=3)
        system = (resource.getrusage(resource.RUSAGE_SELF).ru_stime - before) / 3
        rows.append(
            (
                f"disk {chunk >> 10} KiB write+fdatasync",
                f"{result.mb_per_second:,.0f}",
                "-",
                f"{system * 1000 / (volume / MIB):.2f}",
                "-",
                "-",
                "-",
                f"fdatasync p50 {result.latency(0.5) * 1000:.2f} ms, "
                f"p99 {result.latency(0.99) * 1000:.2f} ms",
            )
        )
    settled = settle_filesystem(directory, settle_s)
    rows.append(
        (
            "disk new file (create, write, fsync, rename)",
            "-",
            "-",
            f"{settled.file_ms:.3f}",
            "-",
            "-",
            "-",
            new_file_note(settled.file_ms, settled.waited_s),
        )
    )
    return rows


def produce_row(
    name: str, sat: SaturationResult, disk_mb_s: float, file_ms: float
) -> tuple[str, ...]:
    cpu = sat.daemon_cpu_ms_per_mb
    return (
        name,
        f"{sat.mb_per_second:,.0f}",
        f"{sat.per_mb(sat.daemon_user_s):.2f}",
        f"{sat.per_mb(sat.daemon_system_s):.2f}",
        f"{cpu:.2f} {verdict(cpu, CPU_TARGET_MS)}",
        f"{sat.daemon_faults / sat.megabytes:,.0f}",
        f"{sat.per_mb(sat.producer_cpu_s):.2f}",
        f"{sat.megabytes:,.0f} MB, {sat.seconds:.1f} s; {sat.backlog.note()}; "
        f"{sat.mb_per_second / disk_mb_s:.2f} of the 1 MiB disk rate; "
        f"{sat.files_made / sat.megabytes:.2f} new files per MB in the store, "
        f"about {sat.files_made / sat.megabytes * file_ms:.2f} ms at the new-file row's cost",
    )


@dataclass(frozen=True)
class HalfLoadFigures:
    """What a half-load row's pooled form adds up over several runs."""

    latencies: Sequence[float]  # seconds, sorted
    megabytes: float
    user_s: float
    system_s: float
    faults: int
    producer_cpu_s: float


def half_load_row(
    daemon: Daemon, rate: float, seconds: float, partitions: int, topic: str
) -> tuple[tuple[str, ...], dict[str, float], HalfLoadFigures]:
    """A half-load row's cells after its name, the daemon's metrics after it, and its figures."""
    scraped = daemon.metrics()
    assert daemon.proc is not None
    cpu_before = CpuSample.of(daemon.proc.pid)
    roles_before = RunQueue.by_role(daemon.proc.pid)
    half = half_load(daemon.bootstrap, rate, seconds, partitions, topic)
    cpu_after = CpuSample.of(daemon.proc.pid)
    roles = {
        role: queue.since(roles_before.get(role, RunQueue(0, 0)))
        for role, queue in RunQueue.by_role(daemon.proc.pid).items()
    }
    run_queue = sum(roles.values(), RunQueue(0, 0))
    by_role = ", ".join(
        f"{role} {q.ran_s / half.seconds:.2f}/{q.waited_s / half.seconds:.2f}"
        for role, q in sorted(roles.items(), key=lambda item: -item[1].ran_s)
        if (q.ran_s + q.waited_s) / half.seconds >= 0.005
    )
    latencies = half.latencies
    p99 = quantile(latencies, 0.99) * 1000
    metrics = daemon.metrics()
    produce_p99 = histogram_bound(
        metrics, scraped, "kfs_request_latency_seconds", 0.99, 'api="PRODUCE"'
    )
    fsync_p99 = histogram_bound(metrics, scraped, "kfs_wal_fsync_seconds", 0.99)
    stage = "kfs_wal_append_stage_seconds"
    wait_p99 = histogram_bound(metrics, scraped, stage, 0.99, 'stage="queue_wait"')
    write_p99 = histogram_bound(metrics, scraped, stage, 0.99, 'stage="write"')
    lag_p99 = histogram_bound(metrics, scraped, "kfs_event_loop_lag_seconds", 0.99)
    half_mb = half.sent * LINE_BYTES / MIB
    user_s = cpu_after.user_s - cpu_before.user_s
    system_s = cpu_after.system_s - cpu_before.system_s
    produces = series_delta(metrics, scraped, "kfs_requests_total", 'api="PRODUCE"')
    cells = (
        "-",
        f"{user_s * 1000 / half_mb:.2f}",
        f"{system_s * 1000 / half_mb:.2f}",
        f"{(user_s + system_s) * 1000 / half_mb:.2f}",
        f"{(cpu_after.minor_faults - cpu_before.minor_faults) / half_mb:,.0f}",
        f"{half.producer_cpu_s * 1000 / half_mb:.2f}",
        f"p50 {quantile(latencies, 0.5) * 1000:.1f} ms, p99 {p99:.1f} ms "
        f"{verdict(p99, LATENCY_TARGET_MS)}, "
        f"{len(latencies):,} of {half.sent:,} messages timed, the producer using "
        f"{half.producer_cpu_s / half.seconds:.2f} cores; {half.rtt_note()}; "
        f"in the daemon, Produce p99 <= "
        f"{produce_p99 * 1000:g} ms, WAL queue wait p99 <= {wait_p99 * 1000:g} ms, "
        f"write p99 <= {write_p99 * 1000:g} ms, fdatasync p99 <= {fsync_p99 * 1000:g} ms, "
        f"event loop lag p99 <= {lag_p99 * 1000:g} ms; "
        f"Produce errors answered: {produce_errors(metrics, scraped)}; "
        f"{pool_note(metrics, scraped)}; {half.client_events}; "
        f"{produces / half.seconds:,.0f} Produce requests/s, "
        f"{(user_s + system_s) * 1000 / max(produces, 1):.2f} ms of daemon CPU each; "
        f"{run_queue.note(DAEMON_THREADS, half.seconds)} (ran/waited by thread: {by_role}), "
        f"{half.producer_sched.note(PRODUCER_THREADS, half.seconds)}",
    )
    figures = HalfLoadFigures(
        latencies,
        half_mb,
        user_s,
        system_s,
        cpu_after.minor_faults - cpu_before.minor_faults,
        half.producer_cpu_s,
    )
    return cells, metrics, figures


def first_produce_ms(bootstrap: str, topic: str, partitions: int) -> float:
    """The round trip (ms) of one Produce request, a small batch to each partition, acks=all.

    On a connection of its own, opened first and not timed, so the figure
    is the daemon's: opening the partitions (their catalogs, if not loaded
    yet), the WAL's group commit and the answer.
    """
    batch = encode_batch([Record(0, int(time.time() * 1000), None, b"x" * 100)])
    topic_data = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        version=7,
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            topic_data(
                name=topic,
                partition_data=[
                    topic_data.PartitionProduceData(index=p, records=batch)
                    for p in range(partitions)
                ],
            )
        ],
    )
    with RawClient(bootstrap, timeout=60) as client:
        started = time.perf_counter()
        response = client.request(request)
        elapsed = time.perf_counter() - started
    codes = {p.error_code for t in response.responses for p in t.partition_responses}
    if codes != {0}:
        raise RuntimeError(f"the first produce after a restart answered error codes {codes}")
    return elapsed * 1000


def restart_row(daemon: Daemon, topic: str, partitions: int, segments: int) -> tuple[str, ...]:
    """The first Produce to long partitions after a restart, at readiness and a second later.

    A restarted daemon opens the partitions its WAL names in the background
    (its warm-up); producers usually come back after their reconnect
    backoff, which the second figure stands for.
    """
    figures = []
    for delay_s in (0.0, RECONNECT_DELAY_S):
        daemon.stop()
        daemon.start()
        time.sleep(delay_s)  # a producer's reconnect backoff, not a wait for a condition
        figures.append(first_produce_ms(daemon.bootstrap, topic, partitions))
    at_ready, later = figures
    return (
        f"kfs first Produce after a restart, {partitions} partitions of {segments:,} segments",
        "-", "-", "-", "-", "-", "-",
        f"{at_ready:,.0f} ms sent at readiness, {later:,.0f} ms sent {RECONNECT_DELAY_S:g} s "
        f"later (the warm-up opened the partitions the WAL names meanwhile)",
    )  # fmt: skip


def pool_note(after: dict[str, float], before: dict[str, float]) -> str:
    """How often the memory pool made a Produce wait for room between scrapes, and how long."""
    waits = series_delta(after, before, "kfs_log_pool_waits_total")
    seconds = series_delta(after, before, "kfs_log_pool_wait_seconds_total")
    if not waits:
        return "no Produce waited for room in the memory pool"
    return (
        f"{waits:,.0f} Produce waits for room in the memory pool, {seconds * 1000:,.1f} ms in all"
    )


def produce_errors(after: dict[str, float], before: dict[str, float]) -> str:
    """The error codes the daemon answered Produce partitions with between scrapes, or "none"."""
    counts: dict[str, float] = {}
    for series, value in after.items():
        if series.startswith("kfs_partition_errors_total{") and 'api="PRODUCE"' in series:
            grew = value - before.get(series, 0.0)
            if grew:
                name = series.split('error="', 1)[1].split('"', 1)[0]
                counts[name] = counts.get(name, 0.0) + grew
    return ", ".join(f"{count:,.0f} {name}" for name, count in sorted(counts.items())) or "none"


def fill_catalogs(daemon: Daemon, topic: str, partitions: int, segments: int) -> None:
    """Commit ``segments`` segment entries to each partition's catalog (the daemon stopped).

    Entries only: nothing reads them (the load produces at the end of the
    log), so their objects are not written, and they are old enough that no
    producer-state rebuild reads them either.
    """
    store = LocalObjectStore(daemon.store_dir)
    for partition in range(partitions):
        catalog = PartitionCatalog(store, NAMESPACE, topic, partition)
        catalog.load()
        fill_partition(catalog, segments)


@dataclass(frozen=True)
class DaemonRun:
    """One daemon's rows, and the figures the pooled rows add up."""

    rows: list[tuple[str, ...]]
    saturated: SaturationResult
    warm: SaturationResult
    half: HalfLoadFigures
    long: HalfLoadFigures


def daemon_run(
    daemon: Daemon,
    lines: Path,
    megabytes: int,
    producers: int,
    half_seconds: float,
    long_segments: int,
    disk_mb_s: float,
    file_ms: float,
) -> DaemonRun:
    """The daemon's rows: saturation twice, half load, half load on long partitions."""
    rows: list[tuple[str, ...]] = []
    daemon.start()
    try:
        sat = saturate(daemon, lines, megabytes, producers)
        rows.append(
            produce_row(f"kfs produce, {producers} kcat producers", sat, disk_mb_s, file_ms)
        )
        # The same again: the first run grew the heap to hold the memory pool
        # (every new page faulted in and zeroed); a daemon that has run for a
        # while reuses those pages, as this run does.
        warm = saturate(daemon, lines, megabytes, producers, WARM_TOPIC)
        rows.append(produce_row("kfs produce again, warm heap", warm, disk_mb_s, file_ms))
        scraped = daemon.metrics()
        rate = max(sat.mb_per_second, warm.mb_per_second) / 2
        row, metrics, half = half_load_row(daemon, rate, half_seconds, producers, TOPIC)
        rows.append((f"kfs ack latency at half load ({rate:,.0f} MB/s)", *row))
        rows.append(
            ("kfs WAL writer at half load", "-", "-", "-", "-", "-", "-",
             writer_note(metrics, scraped, half_seconds))
        )  # fmt: skip
        # The same load on partitions that already hold many segments, as a
        # partition does after weeks: a flush must cost what it did.
        create_topic(daemon.bootstrap, LONG_TOPIC, producers)
        daemon.stop()
        fill_catalogs(daemon, LONG_TOPIC, producers, long_segments)
        daemon.start()
        # Opened first, by one request: a partition's first request after a
        # start loads its catalog (41-53 ms for 10,000 segments, holding the
        # GIL), which at this rate holds up more than 1 % of a row's messages.
        # That is a restart's cost, which `restart_row` times; this row is
        # about what a flush costs in a long partition.
        opened_ms = first_produce_ms(daemon.bootstrap, LONG_TOPIC, producers)
        row, _, long = half_load_row(daemon, rate, half_seconds, producers, LONG_TOPIC)
        *cells, note = row
        note = (
            f"{note}; its partitions were opened before it by one Produce request, "
            f"which took {opened_ms:,.0f} ms (the WAL named none of them: no warm-up)"
        )
        rows.append(
            (f"kfs ack latency at half load, {long_segments:,} segments a partition", *cells, note)
        )
        rows.append(restart_row(daemon, LONG_TOPIC, producers, long_segments))
        daemon.stop()
    finally:
        daemon.kill()
    return DaemonRun(rows, sat, warm, half, long)


def empty_files(directory: Path) -> None:
    """Free a finished run's disk space, keeping its inodes.

    Deleting the files would slow every file the next run creates (ext4
    without a journal passes over inodes deleted in the last minutes), so
    they are truncated, and deleted with the rest once every run is done.
    """
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.truncate(path, 0)


def pooled_produce_row(name: str, results: Sequence[SaturationResult]) -> tuple[str, ...]:
    """Saturation runs added up: their CPU over their megabytes, and each run's figure."""
    megabytes = sum(r.megabytes for r in results)
    user_s = sum(r.daemon_user_s for r in results)
    system_s = sum(r.daemon_system_s for r in results)
    cpu = (user_s + system_s) * 1000 / megabytes
    each = ", ".join(f"{r.daemon_cpu_ms_per_mb:.2f}" for r in results)
    return (
        name,
        f"{megabytes / sum(r.seconds for r in results):,.0f}",
        f"{user_s * 1000 / megabytes:.2f}",
        f"{system_s * 1000 / megabytes:.2f}",
        f"{cpu:.2f} {verdict(cpu, CPU_TARGET_MS)}",
        f"{sum(r.daemon_faults for r in results) / megabytes:,.0f}",
        f"{sum(r.producer_cpu_s for r in results) * 1000 / megabytes:.2f}",
        f"{len(results)} runs, {megabytes:,.0f} MB; daemon CPU ms/MB in each: {each}",
    )


def pooled_half_load_row(name: str, results: Sequence[HalfLoadFigures]) -> tuple[str, ...]:
    """Half-load runs added up: the latency quantiles over every message of every run."""
    megabytes = sum(r.megabytes for r in results)
    user_s = sum(r.user_s for r in results)
    system_s = sum(r.system_s for r in results)
    runs = [r.latencies for r in results]
    p99 = pooled_quantile(runs, 0.99) * 1000
    each = ", ".join(f"{quantile(r, 0.99) * 1000:.1f}" for r in runs)
    return (
        name,
        "-",
        f"{user_s * 1000 / megabytes:.2f}",
        f"{system_s * 1000 / megabytes:.2f}",
        f"{(user_s + system_s) * 1000 / megabytes:.2f}",
        f"{sum(r.faults for r in results) / megabytes:,.0f}",
        f"{sum(r.producer_cpu_s for r in results) * 1000 / megabytes:.2f}",
        f"p50 {pooled_quantile(runs, 0.5) * 1000:.1f} ms, p99 {p99:.1f} ms "
        f"{verdict(p99, LATENCY_TARGET_MS)} "
        f"over all {sum(len(r) for r in runs):,} messages of {len(runs)} runs; "
        f"p99 in each: {each} ms",
    )


def run(
    root: Path,
    megabytes: int,
    producers: int,
    half_seconds: float,
    long_segments: int = LONG_SEGMENTS,
    settle_s: float = SETTLE_S,
    runs: int = 1,
) -> list[tuple[str, ...]]:
    """The disk rows, then ``runs`` daemons' rows one after another, then (``runs`` > 1) their sums.

    The targets are judged on the sums: the CPU of all runs over their
    megabytes, the p99 over every message of every run.  One run's p99 moves
    by a millisecond or two from run to run on this machine.
    """
    daemon = Daemon(root)
    daemon.data_dir.mkdir(parents=True, exist_ok=True)
    # The producers' input, on disk before anything is measured.
    lines = line_file(root, max(1, megabytes // producers))
    rows = disk_rows(daemon.data_dir, min(256, megabytes) * MIB, settle_s)
    disk_mb_s = float(rows[1][1].replace(",", ""))
    file_ms = float(rows[2][3])
    done: list[DaemonRun] = []
    for number in range(1, runs + 1):
        if number > 1:
            daemon = Daemon(root / f"run-{number}")
            daemon.data_dir.mkdir(parents=True)
        result = daemon_run(
            daemon, lines, megabytes, producers, half_seconds, long_segments, disk_mb_s, file_ms
        )
        done.append(result)
        prefix = f"run {number}: " if runs > 1 else ""
        rows += [(prefix + name, *cells) for name, *cells in result.rows]
        if number < runs:  # the last run's are deleted with the rest by the caller
            empty_files(daemon.data_dir)
            empty_files(daemon.store_dir)
    if runs > 1:
        rows += [
            pooled_produce_row(
                f"all runs: kfs produce, {producers} kcat producers", [r.saturated for r in done]
            ),
            pooled_produce_row("all runs: kfs produce again, warm heap", [r.warm for r in done]),
            pooled_half_load_row("all runs: kfs ack latency at half load", [r.half for r in done]),
            pooled_half_load_row(
                f"all runs: kfs ack latency at half load, {long_segments:,} segments a partition",
                [r.long for r in done],
            ),
        ]
    return rows


HEADER = (
    "run",
    "MB/s",
    "user ms/MB",
    "sys ms/MB",
    "daemon CPU ms/MB",
    "faults/MB",
    "producer ms/MB",
    "note",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument(
        "--runs",
        type=int,
        default=DEFAULT_RUNS,
        help="daemons run one after another; the targets are judged on all of them together",
    )
    parser.add_argument("--quick", action="store_true", help="a short run (for make test)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if shutil.which("kcat") is None:
        raise SystemExit("bench.produce_cpu needs kcat (make kcat installs Debian's)")
    require_rate_producer()
    megabytes = 32 if args.quick else args.megabytes
    half_seconds = 2.0 if args.quick else HALF_LOAD_SECONDS
    long_segments = 500 if args.quick else LONG_SEGMENTS
    root = Path(tempfile.mkdtemp(prefix="kfs-bench-cpu-"))
    try:
        # The short form measures the filesystem as it finds it, without waiting.
        settle_s = 0.0 if args.quick else SETTLE_S
        runs = 1 if args.quick else args.runs
        rows = run(root, megabytes, args.producers, half_seconds, long_segments, settle_s, runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(format_table_rows(rows))


def format_table_rows(rows: list[tuple[str, ...]]) -> str:
    table = [HEADER, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in table
    )


if __name__ == "__main__":
    main()
