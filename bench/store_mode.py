"""The `store` durability mode and high availability: ack latency, PUTs, CPU, failover, spread.

    .venv/bin/python -m bench.store_mode [--seconds S] [--half-seconds S] [--repeats N] [--quick]

In `store` mode a produce is acknowledged once its records are in the object
store: the appends of every partition queued during one
``KFS_STORE_WAL_INTERVAL_MS`` become one WAL object.  What that costs, each
figure beside ``cautious`` (the local WAL with fdatasync) in the same run:

- saturation and half load, on the local directory store and on S3 (a moto
  server), for ``store`` and ``cautious`` side by side: one
  ``bench/rate_producer.c`` process (librdkafka in C, acks=all, 1 KiB values,
  ``linger.ms`` 5) sends unthrottled for ``--seconds`` (its MB/s counts to
  the last acknowledgement), then at half that setup's own rate for
  ``--half-seconds``; the ack latency p50/p99 of every message as librdkafka
  times it.  The ``cautious`` daemon then also runs at ``store``'s half-load
  rate, so the two modes are seen under the same load too.  Targets (``store`` only): p99 <= 100 ms on the local store, and
  on S3 below the 400 ms the leaderless object-store systems publish;
- the daemon's CPU (``/proc/<pid>/stat``, user + system) per MB in those
  saturation runs, read once the flushes have committed everything
  acknowledged (`bench.produce_cpu.flushed`);
- object-store PUTs of the store WAL at 1, 10 and 100 partitions, on S3, the
  producer sending at 50 MB/s (or as fast as the store takes, if slower):
  WAL objects (``kfs_wal_objects_total``) and every other PUT (segments,
  indexes, catalog commits: ``kfs_object_store_requests_total`` for ``put``
  and ``put_if_absent`` less the WAL objects), per GB of values
  and per hour at the rate reached.  Target: <= 1,000 WAL PUTs per GB at
  50 MB/s over 100 partitions; the row says the rate it reached;
- load spread: three daemons in ``store`` mode on one namespace, topics of 12
  and 100 partitions, one message to every partition, then each partition's
  leader (Metadata) per topic and ``kfs_cluster_held_partitions`` per daemon.
  Target: max - min <= 1 partitions per daemon in each topic;
- failover: on the same three daemons, ``kill -9`` one of them (each in turn,
  ``--repeats`` times); a librdkafka producer that knew the cluster sends one
  message to every partition of the 12-partition topic right after the kill;
  the time until the last of them is acknowledged (the client's metadata
  refresh and reconnect backoff included: 250 ms / 100 ms here).  The killed
  daemon starts again and the leases settle between repetitions.  Target:
  <= session timeout + 2 s, p50 and max.

Missed targets are reported, not failed: the command exits 0 unless a daemon
or a producer fails.  ``--quick`` is the short form.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient

from bench.produce_cpu import (
    CpuSample,
    flushed,
    half_load,
    quantile,
    require_rate_producer,
    verdict,
)
from bench.produce_fetch import Daemon, create_topic
from testkit.daemon import Daemon as ClusterDaemon
from testkit.daemon import DaemonFactory
from testkit.metrics import parse_metrics, series_delta
from testkit.moto_s3 import fake_credentials, moto_server
from testkit.waiting import wait_for

MB = 1_000_000  # the rate producer's unit: rates and sizes here are decimal
GB = 1_000_000_000
VALUE_BYTES = 1024
UNTHROTTLED_MB_S = 1e6  # a rate the producer never reaches: it sends as fast as acks return
LATENCY_PARTITIONS = 4
LOCAL_P99_TARGET_MS = 100.0
S3_P99_TARGET_MS = 400.0  # the leaderless object-store systems' published p99
PUT_PARTITIONS = (1, 10, 100)
PUTS_PER_GB_TARGET = 1000.0
PUTS_TARGET_MB_S = 50.0  # the rate the PUT target is stated at
SPREAD_TOPICS = ((12, "spread-12"), (100, "spread-100"))  # (partitions, topic)
SPREAD_TARGET = 1
CLUSTER_SIZE = 3
HEARTBEAT_MS = 200
SESSION_TIMEOUT_MS = 2000
FAILOVER_SLACK_S = 2.0
FAILOVER_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0
# The failover client: how quickly librdkafka looks again after a dead leader.
FAILOVER_CLIENT: dict[str, str | int] = {
    "acks": "all",
    "linger.ms": 0,
    "message.timeout.ms": int(FAILOVER_TIMEOUT_S * 1000),
    "topic.metadata.refresh.interval.ms": 250,
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 100,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 100,
    "log_level": 0,
}

Row = tuple[str, str, str, str]  # measure, KFS, target, note
HEADER: Row = ("measure", "KFS", "target", "note")


# --- pure parts ----------------------------------------------------------------------


def puts_per_gb(puts: float, value_bytes: float) -> float:
    """PUTs for every GB (10^9 bytes) of values; infinite when nothing was written."""
    return puts * GB / value_bytes if value_bytes else float("inf")


def puts_per_hour(puts: float, seconds: float) -> float:
    """The PUT rate of a run, scaled to an hour."""
    return puts * 3600 / seconds if seconds > 0 else float("nan")


def spread(counts: dict[int, int], nodes: Sequence[int]) -> int:
    """The gap between the most and fewest partitions per node (nodes holding none count)."""
    per_node = [counts.get(node, 0) for node in nodes]
    return max(per_node) - min(per_node)


def failover_target_s(session_timeout_ms: int = SESSION_TIMEOUT_MS) -> float:
    """The failover goal: the session timeout plus two seconds."""
    return session_timeout_ms / 1000 + FAILOVER_SLACK_S


def format_table(rows: Sequence[Row]) -> str:
    """The rows under `HEADER`, in aligned columns."""
    table = [HEADER, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in table
    )


# --- one daemon: latency, CPU, PUTs --------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """Where a daemon keeps its objects: the local directory store or a bucket on moto."""

    name: str
    store_url: str | None = None  # None: the daemon's own directory
    endpoint: str | None = None

    def args(self, durability: str) -> tuple[str, ...]:
        """The `kfs serve` flags for this store and ``durability`` (they win over Daemon's)."""
        s3 = ("--store-url", self.store_url, "--s3-endpoint-url", self.endpoint)
        return ("--durability", durability, *(s3 if self.store_url and self.endpoint else ()))


@contextlib.contextmanager
def s3_backend(root: Path) -> Iterator[Backend]:
    """A moto server with a fresh bucket, for the run's S3 rows."""
    import boto3

    fake_credentials()
    with moto_server(root / "moto.log") as endpoint:
        bucket = f"kfs-store-mode-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        yield Backend("S3 (moto)", f"s3://{bucket}/kfs", endpoint)


@dataclass(frozen=True)
class LatencyFigures:
    """One daemon's saturation and half-load figures."""

    backend: str
    durability: str
    saturated_mb_s: float
    cpu_ms_per_mb: float
    half_mb_s: float
    latencies: Sequence[float]  # seconds, sorted
    # The same daemon at another setup's half-load rate (cautious at store's), if asked
    also_mb_s: float | None = None
    also_latencies: Sequence[float] = ()

    def ms(self, q: float) -> float:
        """Quantile ``q`` of the half-load ack latencies, in ms."""
        return quantile(self.latencies, q) * 1000


def saturate(daemon: Daemon, topic: str, partitions: int, seconds: float) -> tuple[float, float]:
    """``(MB/s, daemon CPU ms per MB)`` of one unthrottled producer, flushes included."""
    assert daemon.proc is not None
    before = CpuSample.of(daemon.proc.pid)
    result = half_load(daemon.bootstrap, UNTHROTTLED_MB_S, seconds, partitions, topic)
    flushed(daemon)
    after = CpuSample.of(daemon.proc.pid)
    megabytes = result.sent * VALUE_BYTES / MB
    cpu_s = after.user_s - before.user_s + after.system_s - before.system_s
    return megabytes / result.seconds, cpu_s * 1000 / megabytes


def latency_run(
    root: Path,
    backend: Backend,
    durability: str,
    seconds: float,
    half_seconds: float,
    also_mb_s: float | None = None,
) -> LatencyFigures:
    """Saturation, then half of that rate, then ``also_mb_s`` if given, on one new daemon."""
    # A namespace of its own: on S3 every run shares one bucket.
    flags = (*backend.args(durability), "--namespace", root.name, "--log-level", "warning")
    daemon = Daemon(root, extra_args=flags)
    daemon.data_dir.mkdir(parents=True, exist_ok=True)
    daemon.start()
    try:
        create_topic(daemon.bootstrap, "saturate", LATENCY_PARTITIONS)
        create_topic(daemon.bootstrap, "half", LATENCY_PARTITIONS)
        mb_s, cpu = saturate(daemon, "saturate", LATENCY_PARTITIONS, seconds)
        half = half_load(daemon.bootstrap, mb_s / 2, half_seconds, LATENCY_PARTITIONS, "half")
        also: Sequence[float] = ()
        if also_mb_s is not None:
            create_topic(daemon.bootstrap, "also", LATENCY_PARTITIONS)
            also = half_load(
                daemon.bootstrap, also_mb_s, half_seconds, LATENCY_PARTITIONS, "also"
            ).latencies
        daemon.stop()
    finally:
        daemon.kill()
    return LatencyFigures(
        backend.name, durability, mb_s, cpu, mb_s / 2, half.latencies, also_mb_s, also
    )


def same_rate_note(cautious: LatencyFigures) -> str:
    """The cautious daemon's latency at the store daemon's half-load rate, if it was run."""
    if cautious.also_mb_s is None or not cautious.also_latencies:
        return ""
    ms = [quantile(cautious.also_latencies, q) * 1000 for q in (0.5, 0.99)]
    return (
        f"; cautious at store's rate ({cautious.also_mb_s:,.1f} MB/s): "
        f"p50 {ms[0]:.1f} ms, p99 {ms[1]:.1f} ms"
    )


def latency_rows(figures: Sequence[LatencyFigures]) -> list[Row]:
    """One row per backend: `store` beside `cautious`, then the CPU rows."""
    rows: list[Row] = []
    by = {(f.backend, f.durability): f for f in figures}
    for backend in dict.fromkeys(f.backend for f in figures):
        store, cautious = by[(backend, "store")], by[(backend, "cautious")]
        target = S3_P99_TARGET_MS if backend.startswith("S3") else LOCAL_P99_TARGET_MS
        rows.append(
            (
                f"ack latency at half load, {backend}: store / cautious",
                f"p50 {store.ms(0.5):.1f} / {cautious.ms(0.5):.1f} ms, "
                f"p99 {store.ms(0.99):.1f} / {cautious.ms(0.99):.1f} ms",
                f"store p99 {verdict(store.ms(0.99), target)}",
                f"half load {store.half_mb_s:,.1f} / {cautious.half_mb_s:,.1f} MB/s; "
                f"{len(store.latencies):,} / {len(cautious.latencies):,} messages timed"
                + same_rate_note(cautious),
            )
        )
    for backend in dict.fromkeys(f.backend for f in figures):
        store, cautious = by[(backend, "store")], by[(backend, "cautious")]
        rows.append(
            (
                f"daemon CPU per MB at saturation, {backend}: store / cautious",
                f"{store.cpu_ms_per_mb:.2f} / {cautious.cpu_ms_per_mb:.2f} ms "
                f"({store.cpu_ms_per_mb / cautious.cpu_ms_per_mb:.2f}x)",
                "-",
                f"saturation {store.saturated_mb_s:,.1f} / {cautious.saturated_mb_s:,.1f} MB/s, "
                f"{LATENCY_PARTITIONS} partitions, flushes included",
            )
        )
    return rows


def put_rows(root: Path, backend: Backend, seconds: float) -> list[Row]:
    """WAL and other PUTs per GB and per hour at `PUTS_TARGET_MB_S` (or what the store takes)."""
    flags = (*backend.args("store"), "--namespace", root.name, "--log-level", "warning")
    daemon = Daemon(root, extra_args=flags)
    daemon.data_dir.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    daemon.start()
    try:
        for partitions in PUT_PARTITIONS:
            topic = f"puts-{partitions}"
            create_topic(daemon.bootstrap, topic, partitions)
            before = daemon.metrics()
            started = time.perf_counter()
            result = half_load(daemon.bootstrap, PUTS_TARGET_MB_S, seconds, partitions, topic)
            elapsed = time.perf_counter() - started
            flushed(daemon)
            after = daemon.metrics()
            wal = series_delta(after, before, "kfs_wal_objects_total")
            puts = series_delta(
                after, before, "kfs_object_store_requests_total", 'op="put"'
            ) + series_delta(after, before, "kfs_object_store_requests_total", 'op="put_if_absent"')
            values = result.sent * VALUE_BYTES
            mb_s = values / MB / result.seconds
            per_gb = puts_per_gb(wal, values)
            at_target = partitions == PUT_PARTITIONS[-1]
            target = (
                f"{verdict(per_gb, PUTS_PER_GB_TARGET)} at {mb_s:,.1f} MB/s, not the "
                f"{PUTS_TARGET_MB_S:g} MB/s it is stated at"
                if at_target and mb_s < PUTS_TARGET_MB_S
                else verdict(per_gb, PUTS_PER_GB_TARGET)
                if at_target
                else "-"
            )
            rows.append(
                (
                    f"store WAL PUTs, {partitions} partition{'s' * (partitions > 1)}, {backend.name}",
                    f"{per_gb:,.0f} per GB, {puts_per_hour(wal, elapsed):,.0f} per hour",
                    target,
                    f"sent at {PUTS_TARGET_MB_S:g} MB/s, reached {mb_s:,.1f} MB/s "
                    f"over {result.seconds:.1f} s; "
                    f"{wal:,.0f} WAL objects of {values / max(wal, 1) / 1024:,.0f} KiB mean; "
                    f"other PUTs (segments, indexes, catalog commits) "
                    f"{puts_per_gb(puts - wal, values):,.0f} per GB",
                )
            )
        daemon.stop()
    finally:
        daemon.kill()
    return rows


# --- three daemons: spread and failover ----------------------------------------------


def scrape(daemon: ClusterDaemon) -> dict[str, float]:
    """Every series on one cluster daemon's /metrics."""
    status, body = daemon.http("/metrics")
    assert status == 200, body
    return parse_metrics(body)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's leader node id, as Metadata answers it."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    meta = admin.list_topics(topic, timeout=30).topics[topic]
    return {p: info.leader for p, info in meta.partitions.items()}


def bootstraps(daemons: Sequence[ClusterDaemon]) -> str:
    """The bootstrap list of the daemons that are running."""
    return ",".join(d.bootstrap for d in daemons if d.alive())


def produce_everywhere(producer: confluent_kafka.Producer, topic: str, partitions: int) -> float:
    """One message to each partition; seconds until the last is acknowledged."""
    acked: dict[int, float] = {}
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(err)
        else:
            acked[msg.partition()] = time.perf_counter()

    started = time.perf_counter()
    for partition in range(partitions):
        producer.produce(topic, b"x" * 100, partition=partition, on_delivery=on_delivery)
    producer.flush(FAILOVER_TIMEOUT_S)
    if failed or len(acked) != partitions:
        raise RuntimeError(f"{len(acked)} of {partitions} partitions acknowledged: {failed[:3]}")
    return max(acked.values()) - started


def held(daemons: Sequence[ClusterDaemon]) -> list[int]:
    """``kfs_cluster_held_partitions`` of each running daemon."""
    return [int(scrape(d).get("kfs_cluster_held_partitions", 0)) for d in daemons if d.alive()]


def spread_rows(daemons: Sequence[ClusterDaemon]) -> list[Row]:
    """Partitions per daemon in each topic after one message to every partition."""
    rows: list[Row] = []
    nodes = list(range(1, len(daemons) + 1))
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstraps(daemons), **FAILOVER_CLIENT}
    )
    for partitions, topic in SPREAD_TOPICS:
        create_topic(daemons[0].bootstrap, topic, partitions)
        produce_everywhere(producer, topic, partitions)
    for partitions, topic in SPREAD_TOPICS:
        counts = Counter(leaders(daemons[0].bootstrap, topic).values())
        gap = spread(dict(counts), nodes)
        rows.append(
            (
                f"load spread, {len(daemons)} daemons, a topic of {partitions} partitions",
                " / ".join(str(counts.get(n, 0)) for n in nodes) + " partitions (nodes "
                + ", ".join(map(str, nodes)) + ")",
                f"max - min {gap} {verdict(gap, SPREAD_TARGET)}",
                "each partition's leader as Metadata answers it",
            )
        )  # fmt: skip
    total = held(daemons)
    rows.append(
        (
            f"kfs_cluster_held_partitions, {len(daemons)} daemons, both topics",
            " / ".join(map(str, total)),
            "-",
            f"{sum(total)} held in all, {sum(p for p, _ in SPREAD_TOPICS)} in the two topics "
            f"(any more are internal topics'); each topic is assigned on its own, "
            f"at most ceil(partitions / daemons) of it to a daemon",
        )
    )
    return rows


def settle(daemons: Sequence[ClusterDaemon], settled: list[int]) -> None:
    """Wait until every daemon sees the others and holds what it held before the kill.

    A partition's new owner takes it on its first request, so every
    partition is sent a message until the holdings are back.
    """
    wait_for(
        lambda: all(scrape(d)["kfs_cluster_live_nodes"] == len(daemons) for d in daemons),
        timeout=SETTLE_TIMEOUT_S,
        what="every daemon seeing the others",
    )
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstraps(daemons), **FAILOVER_CLIENT}
    )

    def touched() -> bool:
        for partitions, topic in SPREAD_TOPICS:
            produce_everywhere(producer, topic, partitions)
        return held(daemons) == settled

    wait_for(touched, timeout=SETTLE_TIMEOUT_S, interval=0.2, what="the leases settling")


def failover_row(daemons: Sequence[ClusterDaemon], repeats: int) -> Row:
    """Kill (-9) one daemon, each in turn; seconds until every partition takes a produce again."""
    partitions, topic = SPREAD_TOPICS[0]
    settled = held(daemons)
    times: list[float] = []
    for repeat in range(repeats):
        victim = daemons[repeat % len(daemons)]
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstraps(daemons), **FAILOVER_CLIENT}
        )
        produce_everywhere(producer, topic, partitions)  # the client knows every leader
        victim.kill()
        times.append(produce_everywhere(producer, topic, partitions))
        producer.flush(0)
        victim.start()
        settle(daemons, settled)
    target = failover_target_s()
    return (
        f"failover, {len(daemons)} daemons, kill -9 one, {partitions} partitions",
        f"p50 {statistics.median(times):.2f} s, max {max(times):.2f} s",
        f"max {verdict(max(times), target)}",
        f"{repeats} kills (each daemon in turn), session timeout {SESSION_TIMEOUT_MS} ms, "
        f"heartbeat {HEARTBEAT_MS} ms; each: " + ", ".join(f"{t:.2f}" for t in times) + " s",
    )


def cluster_rows(root: Path, repeats: int) -> list[Row]:
    """Spread, then failover, on three `store`-mode daemons sharing a local store."""
    factory = DaemonFactory(root / "cluster")
    try:
        daemons = factory.start_cluster(
            CLUSTER_SIZE,
            store_url=(root / "cluster-store").as_uri(),
            heartbeat_ms=HEARTBEAT_MS,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            extra_args=("--log-level", "warning"),
        )
        rows = spread_rows(daemons)
        rows.append(failover_row(daemons, repeats))
        return rows
    finally:
        factory.close()


# --- the whole run -------------------------------------------------------------------


def run(
    root: Path,
    seconds: float,
    half_seconds: float,
    repeats: int,
    *,
    s3: bool = True,
    put_seconds: float | None = None,
) -> list[Row]:
    """Every row: latency and CPU on each store, PUTs on S3 (local without ``s3``), the cluster."""
    require_rate_producer()
    figures: list[LatencyFigures] = []
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        backends = [Backend("local store")]
        if s3:
            backends.append(stack.enter_context(s3_backend(root)))
        for backend in backends:
            place = root / backend.name.split()[0].lower()
            store = latency_run(place / "store", backend, "store", seconds, half_seconds)
            # cautious at its own half load, then at store's: the same load side by side
            cautious = latency_run(
                place / "cautious", backend, "cautious", seconds, half_seconds, store.half_mb_s
            )
            figures += [store, cautious]
        rows += latency_rows(figures)
        rows += put_rows(root / "puts", backends[-1], put_seconds or seconds)
    rows += cluster_rows(root, repeats)
    return rows


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="each unthrottled run")
    parser.add_argument("--half-seconds", type=float, default=20.0, help="each half-load run")
    parser.add_argument("--repeats", type=int, default=6, help="failovers (kill -9)")
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args()
    seconds, half_seconds, repeats = args.seconds, args.half_seconds, args.repeats
    if args.quick:
        seconds, half_seconds, repeats = 3.0, 5.0, 2
    root = Path(tempfile.mkdtemp(prefix="kfs-bench-store-mode-"))
    try:
        rows = run(root, seconds, half_seconds, repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"settings: unthrottled {seconds:g} s, half load {half_seconds:g} s, "
        f"{repeats} failovers, store WAL interval: the default"
    )
    print(format_table(rows))


if __name__ == "__main__":
    main()
