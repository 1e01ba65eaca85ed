"""End-to-end produce and fetch through a real `kfs serve`, beside same-run disk baselines.

    .venv/bin/python -m bench.produce_fetch [--messages N] [--seconds S]

Starts ``python -m kfs_core.cli serve`` as a subprocess (temporary data
directory, a ``file://`` store beside it, cautious durability, free loopback
ports) and drives it with confluent-kafka:

- produce: acks=all, 1 KiB incompressible values, compression none,
  ``linger.ms`` 5 and ``batch.size`` 1000000 (librdkafka's defaults), one
  delivery callback for every message, messages round-robin over the
  partitions of a 1-partition and an 8-partition topic; MB/s of values and the
  per-message ack latency (``produce()`` to acknowledgement, as librdkafka
  times it: ``Message.latency()``), p50 and p99.  The producer's local queue
  is capped (``queue.buffering.max.kbytes``) so the latency is the broker's
  pipeline, not a deep client backlog.  The settings are printed first; the
  row's note has the CPU the daemon and the producer used (cores busy);
- the baseline of produce is the disk: sequential ``pwrite`` + ``fdatasync``
  into fresh preallocated 16 MiB files (the WAL's layout) in the WAL's
  filesystem, the same volume the WAL wrote, in writes the size of the WAL's
  average group commit (WAL bytes / WAL fdatasyncs of the run), best of two
  runs because virtual disks are noisy.  Target: produce / disk >= 0.5.
  Writes of the WAL's own size are what the disk would have to do for this
  run, so the ratio is the daemon's overhead over the disk.  The earlier
  baseline -- writes the size of the average Produce request, as if every
  request had its own fdatasync -- is still printed, on the row below: it
  is slower (smaller writes per fdatasync), so its ratio also credits group
  commit;
- tail read: right after each produce run, one consumer (``assign()``, no
  group management, no commits) reads the newest 512 MiB of the topic (half
  the default L1 cache), which the daemon should still hold in memory or L1;
  baseline: the produce rate;
- cold read: the daemon is stopped with SIGTERM (a graceful flush puts
  everything in the store) and started again with empty caches; each topic is
  read from offset 0 out of the object store; baseline: reading the topic's
  segment files straight from the store directory in 1 MiB reads;
- the daemon's peak RSS, sampled with psutil, and VmHWM from
  ``/proc/<pid>/status`` before each stop; baseline: its configured memory
  (partition pool + L1 segment cache + L2 index cache).  Target: the peak
  (the larger of the two) within the baseline plus 256 MiB, once after the
  producer floods (1 and 8 partitions) and tail reads, once after the cold
  reads from a restart.

Each read row's note says which tiers answered the fetches (the daemon's
``kfs_log_fetch_from_*`` counters).  A missed ratio target is reported, not
failed: the command exits 0 unless the daemon or a client fails.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import psutil
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from kfs_core.config import Settings
from testkit.daemon import serve_command, serve_env, wait_ready
from testkit.metrics import parse_metrics, series_delta
from testkit.ports import free_port

KIB = 1024
MIB = 1024 * 1024
VALUE_BYTES = 1024
DISTINCT_VALUES = 256  # random values cycled through by the producer
WAL_FILE_BYTES = 16 * MIB  # the WAL manager's preallocated file size
# What the producer is told, printed with the results.  linger.ms and batch.size
# are librdkafka's defaults, spelled out; the capped local queue keeps the ack
# latency the broker's pipeline rather than a deep client backlog (librdkafka's
# default queue of 1 GiB would measure client queueing).
PRODUCER_CONFIG: dict[str, str | int] = {
    "acks": "all",
    "compression.type": "none",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.kbytes": 16 * 1024,
}
RATIO_TARGET = 0.5
RSS_HEADROOM = 256 * MIB  # peak RSS target: configured pool + L1 + L2 plus this
REFERENCE_DISK_BYTES = 256 * MIB  # volume of the fixed-size disk reference rows
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 180.0  # a graceful stop flushes up to the whole pool to the store
RSS_SAMPLE_S = 0.05
NAMESPACE = "bench"
TOPICS = ((1, "bench-p1"), (8, "bench-p8"))  # (partitions, topic)
DEFAULTS = Settings(store_url="file:///unused", data_dir="/unused")  # the daemon's defaults
TAIL_BYTES = DEFAULTS.cache_size // 2  # the tail read: what memory and L1 should still hold


# --- the daemon ----------------------------------------------------------------------


class RssSampler:
    """Samples a process's resident set size on a thread: the peak, overall and per phase."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self._stop = threading.Event()
        self.peak = 0
        self.phase = "start"
        self.phase_peaks: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rss = self._process.memory_info().rss
            except psutil.Error:
                return  # the process is gone
            self.peak = max(self.peak, rss)
            self.phase_peaks[self.phase] = max(self.phase_peaks.get(self.phase, 0), rss)
            self._stop.wait(RSS_SAMPLE_S)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


@dataclass(frozen=True)
class Memory:
    """A stopped daemon's memory: sampled peak RSS (overall, per phase) and VmHWM, in bytes."""

    peak: int
    phases: dict[str, int]
    high_water_mark: int


@dataclass
class Daemon:
    """One `kfs serve` subprocess; `start` after `stop` reuses its ports and directories."""

    root: Path
    kafka_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    sampler: RssSampler | None = None
    extra_args: tuple[str, ...] = ()  # more `kfs serve` flags (an experiment's settings)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def store_dir(self) -> Path:
        return self.root / "store"

    @property
    def log_path(self) -> Path:
        return self.root / "kfs-serve.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def start(self) -> None:
        args = [
            "--listen", self.bootstrap,
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
            "--data-dir", str(self.data_dir),
            "--store-url", self.store_dir.as_uri(),
            "--namespace", NAMESPACE,
            "--durability", "cautious",
            "--log-level", "warning",
            *self.extra_args,
        ]  # fmt: skip
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                serve_command(args),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=serve_env(self.root),
                cwd=Path(__file__).resolve().parent.parent,
            )
        self.sampler = RssSampler(self.proc.pid)
        wait_ready(
            self.proc, lambda: self._get("/readyz")[0] == 200, self.log_tail, READY_TIMEOUT_S
        )

    def _get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""
        except OSError:
            return 0, ""

    def metrics(self) -> dict[str, float]:
        status, body = self._get("/metrics")
        if status != 200:
            raise RuntimeError(f"GET /metrics answered {status}")
        return parse_metrics(body)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def high_water_mark(self) -> int:
        """VmHWM (peak resident set) from /proc/<pid>/status, in bytes; 0 where unavailable."""
        assert self.proc is not None
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * KIB
        return 0

    def phase(self, name: str) -> None:
        """Attribute the RSS samples from now on to phase ``name``."""
        assert self.sampler is not None
        self.sampler.phase = name

    def stop(self) -> Memory:
        """SIGTERM and wait for the graceful flush; how much memory the process used."""
        assert self.proc is not None and self.sampler is not None
        hwm = self.high_water_mark()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"kfs serve ignored SIGTERM:\n{self.log_tail()}") from None
        peak = self.sampler.stop()
        if code != 0:
            raise RuntimeError(f"kfs serve exited {code} on SIGTERM:\n{self.log_tail()}")
        return Memory(peak, dict(self.sampler.phase_peaks), hwm)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.sampler is not None:
            self.sampler.stop()


def tiers_note(after: dict[str, float], before: dict[str, float]) -> str:
    """Which tiers answered the fetches between two metric snapshots."""
    counts = {
        tier: int(series_delta(after, before, f"kfs_log_fetch_from_{tier}_total"))
        for tier in ("memory", "cache", "store")
    }
    gets = int(series_delta(after, before, "kfs_log_store_gets_total"))
    return "fetches from " + ", ".join(f"{t} {n}" for t, n in counts.items()) + f"; {gets} GETs"


# --- clients -------------------------------------------------------------------------


@dataclass
class ProduceResult:
    topic: str
    partitions: int
    messages: int
    seconds: float
    latencies: list[float]  # seconds, sorted
    ends: dict[int, int]  # partition -> next offset
    wire_bytes: float  # record batch bytes the daemon accepted
    requests: float  # Produce requests the daemon answered
    wal_bytes: float
    wal_fsyncs: float
    daemon_cpu: float  # CPU seconds of the daemon (all threads) per second of the run
    producer_cpu: float  # the same for this process: the producer and its librdkafka threads

    @property
    def mb_per_second(self) -> float:
        return self.messages * VALUE_BYTES / self.seconds / 1e6

    @property
    def request_bytes(self) -> float:
        """The average Produce request the daemon received (record batch bytes)."""
        return self.wire_bytes / max(1.0, self.requests)

    @property
    def fsync_bytes(self) -> float:
        """The average WAL group commit: bytes written per fdatasync."""
        return self.wal_bytes / max(1.0, self.wal_fsyncs)

    def latency(self, quantile: float) -> float:
        return self.latencies[min(len(self.latencies) - 1, int(quantile * len(self.latencies)))]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})  # no info chatter
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions)])
    futures[topic].result(timeout=30)


def produce(
    daemon: Daemon, topic: str, partitions: int, messages: int, seconds: float
) -> ProduceResult:
    """Up to ``messages`` 1 KiB values round-robin over the partitions, for at most ``seconds``."""
    values = [os.urandom(VALUE_BYTES) for _ in range(DISTINCT_VALUES)]
    producer = confluent_kafka.Producer({"bootstrap.servers": daemon.bootstrap, **PRODUCER_CONFIG})
    latencies: list[float] = []
    ends: dict[int, int] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        # One callback for every message, as an application would register it;
        # librdkafka times each message from produce() to its acknowledgement.
        if err is not None:
            errors.append(err)
            return
        latencies.append(msg.latency())
        partition, offset = msg.partition(), msg.offset()
        if offset >= ends.get(partition, 0):
            ends[partition] = offset + 1

    assert daemon.proc is not None
    daemon_process = psutil.Process(daemon.proc.pid)
    before = daemon.metrics()
    daemon_cpu, producer_cpu = _cpu_seconds(daemon_process), _own_cpu_seconds()
    began = time.perf_counter()
    deadline = began + seconds
    sent = 0
    while sent < messages:
        if sent % 1000 == 0 and time.perf_counter() > deadline:
            break
        try:
            producer.produce(
                topic,
                value=values[sent % DISTINCT_VALUES],
                partition=sent % partitions,
                on_delivery=on_delivery,
            )
        except BufferError:  # the capped local queue is full: serve callbacks, retry
            producer.poll(0.001)
            continue
        producer.poll(0)
        sent += 1
    if producer.flush(60) != 0:
        raise RuntimeError(f"{topic}: messages still unacknowledged after 60 s")
    elapsed = time.perf_counter() - began
    daemon_cpu = _cpu_seconds(daemon_process) - daemon_cpu
    producer_cpu = _own_cpu_seconds() - producer_cpu
    if errors:
        raise RuntimeError(f"{topic}: {len(errors)} delivery errors, first {errors[0]}")
    after = daemon.metrics()
    return ProduceResult(
        topic=topic,
        partitions=partitions,
        messages=sent,
        seconds=elapsed,
        latencies=sorted(latencies),
        ends=ends,
        wire_bytes=series_delta(after, before, "kfs_produce_bytes_total"),
        requests=series_delta(after, before, "kfs_requests_total", 'api="PRODUCE"'),
        wal_bytes=series_delta(after, before, "kfs_wal_bytes_total"),
        wal_fsyncs=series_delta(after, before, "kfs_wal_fsyncs_total"),
        daemon_cpu=daemon_cpu / elapsed,
        producer_cpu=producer_cpu / elapsed,
    )


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class ReadResult:
    messages: int
    value_bytes: int
    seconds: float
    note: str

    @property
    def mb_per_second(self) -> float:
        return self.value_bytes / self.seconds / 1e6


def consume(
    daemon: Daemon, topic: str, starts: dict[int, int], ends: dict[int, int], timeout: float
) -> ReadResult:
    """The records of ``topic`` from ``starts`` to ``ends`` (by partition), with assign()."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": daemon.bootstrap,
            "group.id": "kfs-bench",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    expected = sum(end - starts[p] for p, end in ends.items())
    received = value_bytes = 0
    before = daemon.metrics()
    try:
        began = time.perf_counter()
        consumer.assign([confluent_kafka.TopicPartition(topic, p, starts[p]) for p in sorted(ends)])
        deadline = began + timeout
        while received < expected:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{topic}: {received} of {expected} records in {timeout:g} s")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is not None:
                    raise RuntimeError(f"{topic}: {msg.error()}")
                received += 1
                value_bytes += len(msg.value() or b"")
        elapsed = time.perf_counter() - began
    finally:
        consumer.close()
    if received != expected:
        raise RuntimeError(f"{topic}: read {received} records, expected {expected}")
    return ReadResult(received, value_bytes, elapsed, tiers_note(daemon.metrics(), before))


# --- baselines -----------------------------------------------------------------------


@dataclass(frozen=True)
class DiskResult:
    chunk: int
    volume: int
    seconds: float
    write_latencies: list[float]  # seconds per pwrite + fdatasync, sorted

    @property
    def mb_per_second(self) -> float:
        return self.volume / self.seconds / 1e6

    def latency(self, quantile: float) -> float:
        lat = self.write_latencies
        return lat[min(len(lat) - 1, int(quantile * len(lat)))]


def disk_write(directory: Path, volume: int, chunk: int) -> DiskResult:
    """``volume`` bytes in ``chunk``-sized pwrite + fdatasync, into fresh preallocated files."""
    data = os.urandom(chunk)
    scratch = Path(tempfile.mkdtemp(prefix="disk-baseline-", dir=directory))
    latencies: list[float] = []
    try:
        written = index = 0
        began = time.perf_counter()
        while written < volume:
            fd = os.open(scratch / f"{index:06}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            index += 1
            try:
                os.posix_fallocate(fd, 0, max(WAL_FILE_BYTES, chunk))
                os.fsync(fd)
                position = 0
                while written < volume and position + chunk <= max(WAL_FILE_BYTES, chunk):
                    start = time.perf_counter()
                    os.pwrite(fd, data, position)
                    os.fdatasync(fd)
                    latencies.append(time.perf_counter() - start)
                    position += chunk
                    written += chunk
            finally:
                os.close(fd)
        elapsed = time.perf_counter() - began
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return DiskResult(chunk, written, elapsed, sorted(latencies))


def best_disk_write(directory: Path, volume: int, chunk: int, repeat: int = 2) -> DiskResult:
    return max(
        (disk_write(directory, volume, chunk) for _ in range(repeat)), key=lambda r: r.mb_per_second
    )


def store_read(store_dir: Path, topic: str) -> ReadResult:
    """Read every object of ``topic`` in the store directory, in 1 MiB reads: the store's limit."""
    paths = sorted((store_dir / NAMESPACE / topic).rglob("segment-*.kfs"))
    total = 0
    began = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as file:
            while chunk := file.read(MIB):
                total += len(chunk)
    elapsed = time.perf_counter() - began
    return ReadResult(0, total, elapsed, f"{len(paths)} segment files, page cache warm")


# --- the run -------------------------------------------------------------------------


@dataclass
class Row:
    measure: str
    value: str
    baseline: str = "-"
    ratio: str = "-"
    note: str = ""


def mb(value: float) -> str:
    return f"{value:,.1f} MB/s"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def mib(value: float) -> str:
    return f"{value / MIB:,.0f} MiB"


def size(value: float) -> str:
    return f"{value / MIB:.2f} MiB" if value >= MIB else f"{value / KIB:.0f} KiB"


def memory_budget() -> int:
    """The daemon's configured memory: partition pool + L1 segment cache + L2 index cache."""
    return DEFAULTS.pool_bytes + DEFAULTS.cache_size + DEFAULTS.index_cache_size


def label(partitions: int) -> str:
    return f"{partitions} partition{'s' if partitions > 1 else ''}"


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(f"  {row.measure}: {row.value}", flush=True)


def bench_topic(
    report: Report, daemon: Daemon, partitions: int, topic: str, messages: int, seconds: float
) -> ProduceResult:
    """Produce into a new topic, read it back at once, then write the same volume to disk."""
    create_topic(daemon.bootstrap, topic, partitions)
    daemon.phase(f"produce {partitions}p")
    result = produce(daemon, topic, partitions, messages, seconds)
    daemon.phase(f"tail {partitions}p")
    tail_records = TAIL_BYTES // VALUE_BYTES // partitions
    starts = {p: max(0, end - tail_records) for p, end in result.ends.items()}
    tail = consume(daemon, topic, starts, result.ends, timeout=max(60.0, 4 * result.seconds))
    daemon.phase(f"idle {partitions}p")  # its last buffers flushed while the tail was read
    volume = int(result.wal_bytes)
    disk = best_disk_write(daemon.data_dir, volume, max(KIB, int(result.fsync_bytes)))
    by_request = best_disk_write(daemon.data_dir, volume, max(KIB, int(result.request_bytes)))
    ratio = result.mb_per_second / disk.mb_per_second
    if ratio < RATIO_TARGET:
        report.missed.append(f"produce, {label(partitions)}: {ratio:.2f} of the disk")
    report.add(
        Row(
            f"produce, {label(partitions)}",
            mb(result.mb_per_second),
            mb(disk.mb_per_second),
            f"{ratio:.2f}" + ("" if ratio >= RATIO_TARGET else " MISSED"),
            f"{result.messages:,} msgs; baseline: {mib(disk.volume)} in {size(disk.chunk)} "
            f"writes (the WAL's avg group commit); CPU: daemon {result.daemon_cpu:.2f}, "
            f"producer {result.producer_cpu:.2f} of {os.cpu_count()} cores",
        )
    )
    report.add(
        Row(
            f"  (vs request-sized writes), {label(partitions)}",
            mb(result.mb_per_second),
            mb(by_request.mb_per_second),
            f"{result.mb_per_second / by_request.mb_per_second:.2f}",
            f"the earlier baseline: {mib(by_request.volume)} in {size(by_request.chunk)} writes "
            "(the avg Produce request)",
        )
    )
    for name, quantile in (("p50", 0.5), ("p99", 0.99)):
        value, floor = result.latency(quantile), disk.latency(quantile)
        report.add(
            Row(
                f"ack latency {name}, {label(partitions)}",
                ms(value),
                ms(floor),
                f"{value / floor:,.0f}x",
                f"baseline: {name} of one {size(disk.chunk)} write+fdatasync",
            )
        )
    report.add(
        Row(
            f"tail read, {label(partitions)}",
            mb(tail.mb_per_second),
            mb(result.mb_per_second),
            f"{tail.mb_per_second / result.mb_per_second:.2f}",
            f"last {mib(tail.value_bytes)}; baseline: produce rate; {tail.note}",
        )
    )
    return result


def bench_disk_reference(report: Report, directory: Path, volume: int) -> None:
    """Fixed 64 KiB and 1 MiB writes, to set the produce baselines in context."""
    for chunk in (64 * KIB, MIB):
        disk = disk_write(directory, volume, chunk)
        report.add(
            Row(
                f"disk write+fdatasync, {size(chunk)}",
                mb(disk.mb_per_second),
                note=f"reference: {mib(volume)}, p50 {ms(disk.latency(0.5))} per write",
            )
        )


def bench_cold(report: Report, daemon: Daemon, result: ProduceResult) -> None:
    """Read a topic from offset 0 through a daemon with empty caches, and the raw store."""
    daemon.phase(f"cold {result.partitions}p")
    starts = dict.fromkeys(result.ends, 0)
    timeout = max(120.0, 10 * result.seconds)
    cold = consume(daemon, result.topic, starts, result.ends, timeout)
    raw = store_read(daemon.store_dir, result.topic)
    report.add(
        Row(
            f"cold read, {label(result.partitions)}",
            mb(cold.mb_per_second),
            mb(raw.mb_per_second),
            f"{cold.mb_per_second / raw.mb_per_second:.2f}",
            f"baseline: read {raw.note}; {cold.note}",
        )
    )


def report_rss(report: Report, daemon: Daemon, run: str, note: str = "") -> None:
    """Stop the daemon gracefully and add its peak RSS, with the peak of each phase."""
    memory = daemon.stop()
    budget = memory_budget()
    peak = max(memory.peak, memory.high_water_mark)
    met = peak <= budget + RSS_HEADROOM
    if not met:
        report.missed.append(f"daemon peak RSS, {run}: {mib(peak)}")
    phases = ", ".join(f"{name} {mib(peak)}" for name, peak in memory.phases.items())
    report.add(
        Row(
            f"daemon peak RSS, {run}",
            mib(memory.peak),
            mib(budget),
            f"{memory.peak / budget:.2f}" + ("" if met else " MISSED"),
            f"VmHWM {mib(memory.high_water_mark)}; target: <= baseline + "
            f"{mib(RSS_HEADROOM)}, {'met' if met else 'MISSED'}; {phases}{note}",
        )
    )


def run(root: Path, messages: int, seconds: float) -> Report:
    report = Report()
    daemon = Daemon(root)
    try:
        daemon.start()
        produced = [
            bench_topic(report, daemon, partitions, topic, messages, seconds)
            for partitions, topic in TOPICS
        ]
        volume = min(REFERENCE_DISK_BYTES, int(max(r.wal_bytes for r in produced)))
        bench_disk_reference(report, daemon.data_dir, volume)
        report_rss(report, daemon, "first run", "; baseline: pool + L1 + L2 configured")
        daemon.start()  # empty caches: the reads below start from the object store
        for result in produced:
            bench_cold(report, daemon, result)
        report_rss(report, daemon, "after restart")
    finally:
        daemon.kill()
    return report


def format_table(rows: list[Row]) -> str:
    columns = ("measure", "value", "baseline", "ratio", "note")
    cells = [columns, *((r.measure, r.value, r.baseline, r.ratio, r.note) for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns) - 1)]

    def line(row: tuple[str, ...]) -> str:
        left = row[0].ljust(widths[0])
        numbers = (cell.rjust(width) for cell, width in zip(row[1:4], widths[1:4], strict=True))
        return "  ".join((left, *numbers, row[4])).rstrip()

    header = line(columns)
    return "\n".join([header, "-" * len(header), *(line(row) for row in cells[1:])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000, help="1 KiB messages per topic")
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="stop each produce run after this long"
    )
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the daemon's data goes")
    args = parser.parse_args()
    if args.messages < max(partitions for partitions, _ in TOPICS):
        parser.error("--messages must be at least the largest partition count")
    root = Path(tempfile.mkdtemp(prefix="kfs-produce-fetch-", dir=args.dir))
    try:
        print(f"data dir and store under {root}; {args.messages:,} x 1 KiB per topic")
        print("producer: " + ", ".join(f"{k}={v}" for k, v in PRODUCER_CONFIG.items()))
        report = run(root, args.messages, args.seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(format_table(report.rows))
    print()
    if report.missed:
        print(
            f"TARGET MISSED (produce / disk >= {RATIO_TARGET}, peak RSS <= pool + L1 + L2 + "
            f"{mib(RSS_HEADROOM)}): " + "; ".join(report.missed)
        )
    else:
        print(
            f"targets met: produce / disk >= {RATIO_TARGET} for every topic, peak RSS within "
            f"pool + L1 + L2 + {mib(RSS_HEADROOM)}"
        )


if __name__ == "__main__":
    main()
