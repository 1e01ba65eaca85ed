"""KFS beside Apache Kafka: the same machine, disk and loads, in one run.

    .venv/bin/python -m bench.peer [--megabytes N] [--seconds S] [--quick]

The brokers run one after the other, never side by side, each with the
machine to itself:

- **KFS**: `kfs serve` with its defaults (durability ``cautious``: an fsync
  of the WAL before each acknowledgement, group-committed), on a local
  directory store;
- **Kafka, defaults**: Apache Kafka (the release ``compat/kafka/pom.xml``
  pins, from ``make kafka-tools``), KRaft, one node acting as broker and
  controller, Kafka's own JVM settings (``-Xmx1G -Xms1G``, G1): no fsync
  before the acknowledgement, which Kafka leaves to replication;
- **Kafka, flush.messages=1**: the same with ``flush.messages=1`` on the
  topics, an fsync before each acknowledgement.  This is KFS's promise:
  the like-for-like comparison.

Each broker's data directory (KFS's WAL and store, Kafka's log dir) is under
the same parent directory, on one disk.  The loads, from producer processes
of their own (librdkafka, C), for topics of 4 and of 64 partitions:

- saturation: ``PRODUCERS`` ``kcat -P`` processes send ``--megabytes`` of 1 KiB
  records, acks=all, no compression (as bench.produce_cpu).  MB/s to the
  last acknowledgement; the broker's CPU (user + system, all its threads,
  from /proc) per MB, for KFS until its flushes have committed what it
  acknowledged; the MB one CPU-second of the broker carries;
- ack latency at half the lowest saturation rate of the three brokers (the
  same rate for all), on a fresh broker after ``WARM_UP_S`` of the same load
  on another topic (a JVM compiles as it goes): the C rate producer
  (``bench/rate_producer.c``), every message's produce-to-ack time, p50 / p99
  / p99.9;
- consumers: ``kafka-consumer-perf-test`` reads the saturation run's records
  at once (tail) and after the broker restarted (cold: the broker's own
  caches are empty; the OS page cache is not dropped, for either);
- the broker's peak RSS (``VmHWM``) over all of it; for KFS, what its caches
  and memory pool hold (`kfs_memory_note`).

The ratios KFS / Kafka, from the same run, with targets at equal durability
(against ``flush.messages=1``): MB per broker CPU-second >= Kafka's, ack p99
<= Kafka's, peak RSS <= Kafka's.  Against Kafka's defaults the ratios are
reported without a target.  ``--quick`` is the short form `make test` runs
(`QUICK`: KFS and Kafka with fsync, a few MB, 4 partitions): it shows the
harness works, not the figures, which a JVM's warm-up dominates at that size.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.produce_cpu import (
    FLUSH_TIMEOUT_S,
    LINE_BYTES,
    MIB,
    CpuSample,
    half_load,
    high_watermarks,
    line_file,
    quantile,
    require_rate_producer,
    run_kcat_producers,
)
from compat.kafka_tools import KAFKA_LIB, LOG4J_CONFIG, ToolClient, kafka_version
from testkit.daemon import Daemon, DaemonFactory
from testkit.ports import free_port
from testkit.waiting import wait_for

PRODUCERS = 4
PARTITION_COUNTS = (4, 64)
DEFAULT_MEGABYTES = 512
DEFAULT_SECONDS = 20.0
START_TIMEOUT_S = 90.0
WARM_UP_S = 5.0  # of the half load, unmeasured, on a topic of its own
KAFKA_HEAP = ("-Xmx1G", "-Xms1G")  # kafka-server-start.sh's default
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS
KAFKA_GC = (
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)  # fmt: skip

KFS = "KFS (cautious)"
KAFKA_DEFAULTS = "Kafka (defaults)"
KAFKA_FSYNC = "Kafka (flush.messages=1)"


# --- the brokers -----------------------------------------------------------------------


@dataclass
class Broker:
    """One running broker: where clients find it, and its process."""

    name: str
    bootstrap: str
    pid: int
    topic_configs: dict[str, str] = field(default_factory=dict)
    kfs: Daemon | None = None  # KFS only: to wait for its flushes


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


class KafkaServer:
    """Apache Kafka in KRaft mode, one node as broker and controller, from the project's jars."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port, self.controller_port = free_port(), free_port()
        self.log_dir = root / "kafka-logs"
        self.config = root / "server.properties"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str, heap: Sequence[str] = ("-Xmx256m",)) -> list[str]:
        return [
            "java", *heap, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            "-cp", f"{KAFKA_LIB}/*", main, *args,
        ]  # fmt: skip

    def format(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            "process.roles=broker,controller\n"
            "node.id=1\n"
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}\n"
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}\n"
            "controller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
            f"log.dirs={self.log_dir}\n"
            "offsets.topic.replication.factor=1\n"
            "transaction.state.log.replication.factor=1\n"
            "transaction.state.log.min.isr=1\n"
            "group.initial.rebalance.delay.ms=0\n"
        )
        cluster_id = str(uuid.uuid4().hex[:22])
        subprocess.run(
            self._java(
                "kafka.tools.StorageTool", "format", "--standalone", "-t", cluster_id,
                "-c", str(self.config),
            ),
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def start(self) -> int:
        log = (self.root / "kafka.log").open("ab")
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(self.config), heap=(*KAFKA_HEAP, *KAFKA_GC)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_for(self._ready, timeout=START_TIMEOUT_S, what="Kafka's listener")
        return self.proc.pid

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"Kafka exited {self.proc.returncode}; see {self.root / 'kafka.log'}"
            )
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        try:
            return admin.list_topics(timeout=5).brokers != {}
        except confluent_kafka.KafkaException:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@contextmanager
def running(name: str, root: Path) -> Iterator[tuple[Broker, KafkaServer | DaemonFactory]]:
    """The broker ``name`` started under ``root``; stopped on exit."""
    if name == KFS:
        factory = DaemonFactory(root)
        try:
            daemon = factory.start(name="kfs")
            assert daemon.proc is not None
            yield Broker(name, daemon.bootstrap, daemon.proc.pid, kfs=daemon), factory
        finally:
            factory.close()
        return
    server = KafkaServer(root)
    server.format()
    try:
        pid = server.start()
        configs = {"flush.messages": "1"} if name == KAFKA_FSYNC else {}
        yield Broker(name, server.bootstrap, pid, configs), server
    finally:
        server.stop()


def restart(broker: Broker, handle: KafkaServer | DaemonFactory) -> None:
    """Stop and start the broker on the same ports and data; its pid is the new process's."""
    if broker.kfs is not None:
        broker.kfs.restart()
        assert broker.kfs.proc is not None
        broker.pid = broker.kfs.proc.pid
        return
    assert isinstance(handle, KafkaServer)
    handle.stop()
    broker.pid = handle.start()


# --- the loads -------------------------------------------------------------------------


@dataclass(frozen=True)
class Saturation:
    megabytes: float
    seconds: float
    cpu_s: float

    @property
    def mb_s(self) -> float:
        return self.megabytes / self.seconds

    @property
    def cpu_ms_per_mb(self) -> float:
        return self.cpu_s * 1000 / self.megabytes

    @property
    def mb_per_cpu_s(self) -> float:
        return self.megabytes / self.cpu_s


def create_topic(broker: Broker, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    new = NewTopic(topic, partitions, 1, config=dict(broker.topic_configs))
    admin.create_topics([new])[topic].result(60)
    wait_for(
        lambda: len(high_watermarks(broker.bootstrap, partitions, topic)) == partitions,
        timeout=60,
        what=f"{topic}'s partitions",
    )


def saturate(
    broker: Broker, lines: Path, megabytes: int, topic: str, partitions: int
) -> Saturation:
    """``PRODUCERS`` kcat processes each send ``megabytes / PRODUCERS`` of ``lines``, acks=all."""
    create_topic(broker, topic, partitions)
    share = max(1, megabytes // PRODUCERS)
    before = CpuSample.of(broker.pid)
    started = time.perf_counter()
    # 4 partitions: one producer each; 64: librdkafka's partitioner spreads them.
    targets = list(range(PRODUCERS)) if partitions == PRODUCERS else [None] * PRODUCERS
    run_kcat_producers(broker.bootstrap, topic, lines, targets)
    seconds = time.perf_counter() - started
    if broker.kfs is not None:  # its cost of a megabyte includes sealing and committing it
        daemon = broker.kfs
        wait_for(
            lambda: daemon.metric("kfs_log_pool_used_bytes") == 0,
            timeout=FLUSH_TIMEOUT_S,
            what="KFS's flushes",
        )
    after = CpuSample.of(broker.pid)
    stored = sum(high_watermarks(broker.bootstrap, partitions, topic))
    expected = share * PRODUCERS * MIB // LINE_BYTES
    if stored != expected:
        raise RuntimeError(f"{broker.name}: expected {expected} records in {topic}, found {stored}")
    cpu = (after.user_s + after.system_s) - (before.user_s + before.system_s)
    return Saturation(share * PRODUCERS, seconds, cpu)


def consume_mb_s(broker: Broker, scratch: Path, topic: str, records: int) -> float:
    """``kafka-consumer-perf-test`` over the whole topic: its MB/s (from the first fetch)."""
    out = ToolClient(broker.bootstrap, scratch=scratch).run(
        "kafka-consumer-perf-test", "--topic", topic, "--num-records", str(records),
        "--timeout", "120000",
    ).stdout  # fmt: skip
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...
    row = out.strip().splitlines()[-1].split(", ")
    if int(row[4]) < records:
        raise RuntimeError(f"{broker.name}: consumed {row[4]} of {records} records")
    return float(row[3])


# --- one run -----------------------------------------------------------------------------


@dataclass
class BrokerFigures:
    name: str
    saturation: dict[int, Saturation] = field(default_factory=dict)
    tail_mb_s: dict[int, float] = field(default_factory=dict)
    cold_mb_s: dict[int, float] = field(default_factory=dict)
    latency_ms: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    memory_note: str = ""


def kfs_memory_note(daemon: Daemon, rss_mb: float) -> str:
    """Where KFS's resident memory goes: its own caches, which Kafka leaves to the page cache."""
    l1 = daemon.metric("kfs_log_l1_bytes") / MIB
    l2 = daemon.metric("kfs_log_l2_bytes") / MIB
    pool = daemon.metric("kfs_log_pool_capacity_bytes") / MIB
    return (
        f"KFS's peak RSS {rss_mb:.0f} MB holds, after the reads, {l1:.0f} MB of segments in its "
        f"L1 cache (KFS_CACHE_SIZE) and {l2:.0f} MB of indexes (L2); during produce its memory "
        f"pool holds up to {pool:.0f} MB (KFS_POOL_BYTES) of acknowledged batches until they "
        "are sealed.  Kafka keeps the same bytes in the OS page cache, which RSS does not count."
    )


def run(
    root: Path,
    *,
    megabytes: int = DEFAULT_MEGABYTES,
    seconds: float = DEFAULT_SECONDS,
    partition_counts: Sequence[int] = PARTITION_COUNTS,
    brokers: Sequence[str] = (KFS, KAFKA_DEFAULTS, KAFKA_FSYNC),
) -> list[BrokerFigures]:
    require_rate_producer()
    if not KAFKA_LIB.is_dir():
        raise SystemExit(f"{KAFKA_LIB} is missing: `make kafka-tools` installs Kafka")
    lines = line_file(root, max(1, megabytes // PRODUCERS))
    records = max(1, megabytes // PRODUCERS) * PRODUCERS * MIB // LINE_BYTES
    figures = {name: BrokerFigures(name) for name in brokers}
    for name in brokers:  # saturation and consumers, one broker at a time
        with running(name, root / slug(name)) as (broker, handle):
            for partitions in partition_counts:
                topic = f"sat-{partitions}"
                figures[name].saturation[partitions] = saturate(
                    broker, lines, megabytes, topic, partitions
                )
                figures[name].tail_mb_s[partitions] = consume_mb_s(broker, root, topic, records)
            restart(broker, handle)
            for partitions in partition_counts:
                figures[name].cold_mb_s[partitions] = consume_mb_s(
                    broker, root, f"sat-{partitions}", records
                )
            figures[name].peak_rss_mb = peak_rss_mb(broker.pid)
            if broker.kfs is not None:
                figures[name].memory_note = kfs_memory_note(broker.kfs, figures[name].peak_rss_mb)
    for partitions in partition_counts:  # the same rate for all: half the lowest saturation
        rate = min(f.saturation[partitions].mb_s for f in figures.values()) / 2
        for name in brokers:
            with running(name, root / f"{slug(name)}-half-{partitions}") as (broker, _):
                # A fresh broker: warm it up (a JVM compiles as it goes) before measuring.
                create_topic(broker, f"warm-{partitions}", partitions)
                half_load(broker.bootstrap, rate, WARM_UP_S, partitions, f"warm-{partitions}")
                topic = f"half-{partitions}"
                create_topic(broker, topic, partitions)
                half = half_load(broker.bootstrap, rate, seconds, partitions, topic)
                figures[name].latency_ms[partitions] = tuple(  # type: ignore[assignment]
                    quantile(half.latencies, q) * 1000 for q in (0.5, 0.99, 0.999)
                )
                figures[name].peak_rss_mb = max(figures[name].peak_rss_mb, peak_rss_mb(broker.pid))
    return list(figures.values())


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


#: ``--quick``: KFS and Kafka at equal durability, a few MB, 4 partitions.
QUICK: dict[str, Any] = {
    "megabytes": 4,
    "seconds": 1.0,
    "partition_counts": (PRODUCERS,),
    "brokers": (KFS, KAFKA_FSYNC),
}


# --- the tables --------------------------------------------------------------------------


def figures_table(results: Sequence[BrokerFigures]) -> str:
    lines = [
        "| broker | partitions | produce MB/s | broker CPU ms/MB | MB per CPU-second "
        "| ack p50 / p99 / p99.9 ms | tail read MB/s | cold read MB/s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in results:
        for partitions, sat in f.saturation.items():
            p50, p99, p999 = f.latency_ms.get(partitions, (float("nan"),) * 3)
            lines.append(
                f"| {f.name} | {partitions} | {sat.mb_s:.0f} | {sat.cpu_ms_per_mb:.2f} "
                f"| {sat.mb_per_cpu_s:.0f} | {p50:.1f} / {p99:.1f} / {p999:.1f} "
                f"| {f.tail_mb_s[partitions]:.0f} | {f.cold_mb_s[partitions]:.0f} "
                f"| {f.peak_rss_mb:.0f} |"
            )
    return "\n".join(lines)


@dataclass(frozen=True)
class Ratio:
    what: str
    partitions: int
    value: float
    target: str  # "" when there is none

    @property
    def judged(self) -> str:
        if not self.target:
            return "no target"
        bound = float(self.target.split()[-1])
        met = self.value >= bound if self.target.startswith(">=") else self.value <= bound
        return "met" if met else "MISSED"


def ratios(results: Sequence[BrokerFigures]) -> list[Ratio]:
    by_name = {f.name: f for f in results}
    kfs = by_name.get(KFS)
    out: list[Ratio] = []
    if kfs is None:
        return out
    for peer, judged in ((KAFKA_FSYNC, True), (KAFKA_DEFAULTS, False)):
        kafka = by_name.get(peer)
        if kafka is None:
            continue
        for partitions, sat in kfs.saturation.items():
            theirs = kafka.saturation[partitions]
            rows = [
                ("MB per broker CPU-second", sat.mb_per_cpu_s / theirs.mb_per_cpu_s, ">= 1"),
                ("produce MB/s", sat.mb_s / theirs.mb_s, ""),
            ]
            if partitions in kfs.latency_ms and partitions in kafka.latency_ms:
                p99 = kfs.latency_ms[partitions][1] / kafka.latency_ms[partitions][1]
                rows.append(("ack p99", p99, "<= 1"))
            rows.append(("peak RSS", kfs.peak_rss_mb / kafka.peak_rss_mb, "<= 1"))
            for what, value, target in rows:
                out.append(
                    Ratio(f"KFS / {peer}: {what}", partitions, value, target if judged else "")
                )
    return out


def ratios_table(rows: Sequence[Ratio]) -> str:
    lines = ["| ratio | partitions | value | target | |", "|---|---|---|---|---|"]
    lines += [
        f"| {r.what} | {r.partitions} | {r.value:.2f} | {r.target or '-'} | {r.judged} |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peer", description="KFS beside Kafka")
    parser.add_argument("--megabytes", type=int, default=DEFAULT_MEGABYTES)
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, help="each half load")
    parser.add_argument("--quick", action="store_true", help="a tiny run: the harness, not figures")
    args = parser.parse_args(argv)
    base = Path(os.environ.get("KFS_BENCH_DIR", tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix="kfs-peer-", dir=base) as scratch:
        if args.quick:
            results = run(Path(scratch), **QUICK)
        else:
            results = run(Path(scratch), megabytes=args.megabytes, seconds=args.seconds)
    print(f"KFS beside Apache Kafka {kafka_version()} (KRaft, one node), one after the other\n")
    print(figures_table(results))
    print()
    print(ratios_table(ratios(results)))
    for figures in results:
        if figures.memory_note:
            print(f"\n{figures.memory_note}")


if __name__ == "__main__":
    main()
