"""The object-store fault campaign: a live daemon on S3 through a `FaultProxy`, under load.

Three idempotent producers and a tail consumer run (`soak.load`) while the
proxy in front of the moto server goes through the phases of `PHASES`:
30 % of requests failing 500/503, responses seconds late, uploads reset
midway, and a full outage.  Throughout, the campaign samples what an
operator sees -- ``/readyz``'s lines, ``kfs_store_unavailable_seconds``, the
pool's fill and waiting produce requests, the produce error codes sent, the
daemon's RSS -- and afterwards it heals the store and checks:

- the WAL drains to the store (the pool empties) with nothing lost,
  changed or duplicated (`check_log` on the whole topic, the tail's view);
- every partition's catalog holds segments that follow each other with no
  overlap: no segment was committed twice by a retried upload or commit;
- ``/readyz`` reported the outage while it lasted and stops once it ends;
- the RSS stayed within the configured pool and caches plus 256 MiB.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import psutil

from kfs_core.catalog import PartitionCatalog
from kfs_core.storage import open_store
from soak.fault_proxy import FaultProxy
from soak.load import (
    CODECS,
    PARTITIONS,
    TOPIC,
    Findings,
    LoadProducer,
    TailConsumer,
    check_log,
    create_topic,
    read_range,
    wait_until,
)
from soak.report import Row

#: (name, proxy faults, seconds at full scale) in the order they run.
PHASES: tuple[tuple[str, dict[str, Any], float], ...] = (
    ("30% of requests fail 500/503", {"error_rate": 0.3}, 60.0),
    ("every response 2 s late", {"delay_s": 2.0}, 60.0),
    ("30% of uploads reset midway", {"reset_rate": 0.3}, 60.0),
    ("outage", {"outage": True}, 120.0),
)
HEADROOM = 256 << 20  # RSS allowed above the configured pool and caches


def daemon_args(pool_bytes: int) -> list[str]:
    """`kfs serve` flags: small segments and quick flushes, so the store is busy all the time."""
    return [
        "--segment-bytes", "256KiB",
        "--flush-interval-ms", "100",
        "--pool-bytes", str(pool_bytes),
        "--cache-size", "64MiB",
        "--index-cache-size", "16MiB",
    ]  # fmt: skip


RSS_BOUND_EXTRA = (64 << 20) + (16 << 20) + HEADROOM  # the caches above, plus the headroom


@dataclasses.dataclass
class Observed:
    """What the operator's view showed during one phase."""

    phase: str
    seconds: float
    readyz: set[str] = dataclasses.field(default_factory=set)  # distinct first words of lines
    max_unavailable_s: float = 0.0
    max_pool_fill: float = 0.0
    max_waiters: int = 0
    max_rss: int = 0
    produce_errors: dict[str, float] = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        errors = ", ".join(f"{k} {int(v)}" for k, v in sorted(self.produce_errors.items()))
        return (
            f"{self.phase} ({self.seconds:.0f} s): readyz {sorted(self.readyz) or ['ready']}, "
            f"store failing up to {self.max_unavailable_s:.0f} s, pool up to "
            f"{self.max_pool_fill:.0%}, {self.max_waiters} produce waiting, produce errors "
            f"[{errors}], RSS up to {self.max_rss >> 20} MiB"
        )


class OpsView:
    """The daemon's /readyz and /metrics, and its RSS, as the campaign samples them."""

    def __init__(self, daemon: Any) -> None:
        self._get = daemon.http  # (status, body) of a GET on the ops endpoint
        self.process = psutil.Process(daemon.proc.pid)

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for line in self._get("/metrics")[1].splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def readyz(self) -> list[str]:
        """/readyz's lines: ``ready`` (or ``HTTP <status>``), then a line per degraded part."""
        status, body = self._get("/readyz")
        lines = body.splitlines()
        return lines if status == 200 else [f"HTTP {status}", *lines]

    def sample(self, observed: Observed, before: dict[str, float]) -> None:
        lines = self.readyz()
        if lines[:1] != ["ready"]:
            observed.readyz.add(lines[0] if lines else "no answer")
        observed.readyz.update(line.split(":")[0] for line in lines[1:])
        m = self.metrics()
        observed.max_unavailable_s = max(
            observed.max_unavailable_s, m.get("kfs_store_unavailable_seconds", 0.0)
        )
        capacity = m.get("kfs_log_pool_capacity_bytes", 0.0)
        if capacity:
            fill = m.get("kfs_log_pool_used_bytes", 0.0) / capacity
            observed.max_pool_fill = max(observed.max_pool_fill, fill)
        observed.max_waiters = max(observed.max_waiters, int(m.get("kfs_log_pool_waiters", 0)))
        observed.max_rss = max(observed.max_rss, self.process.memory_info().rss)
        for name, value in m.items():
            if name.startswith('kfs_partition_errors_total{api="PRODUCE"'):
                code = name.split('error="')[1].split('"')[0]
                observed.produce_errors[code] = value - before.get(name, 0.0)


def check_catalogs(store_url: str, endpoint: str, namespace: str, findings: Findings) -> int:
    """Each partition's segments follow each other exactly; how many segments were committed."""
    store = open_store(store_url, endpoint_url=endpoint, region_name="us-east-1")
    total = 0
    try:
        for partition in range(PARTITIONS):
            state = PartitionCatalog(store, namespace, TOPIC, partition).load()
            expected = state.log_start_offset
            for segment in state.segments:
                if segment.base_offset != expected:
                    findings.problem(
                        "catalog",
                        f"partition {partition}: a segment starts at {segment.base_offset}, "
                        f"expected {expected} (overlap or hole)",
                    )
                expected = segment.last_offset + 1
            total += len(state.segments)
    finally:
        store.close()
    return total


def run(
    daemon: Any,
    proxy: FaultProxy,
    *,
    store_url: str,
    moto_endpoint: str,
    pool_bytes: int,
    scale: float,
    seed: int,
    namespace: str = "test",
    rate: int = 300,
    progress: Callable[[str], None] | None = None,
) -> tuple[Row, list[Observed]]:
    """The phases at ``scale`` (1.0: a minute of errors ... two minutes of outage); the row.

    ``daemon`` (`testkit.daemon.Daemon`) runs on S3 at ``proxy.url`` with `daemon_args`;
    ``moto_endpoint`` is the store itself, for checking catalogs past the proxy.
    """
    create_topic(daemon.bootstrap)
    producers = [
        LoadProducer(daemon.bootstrap, i, seed, codec, rate) for i, codec in enumerate(CODECS)
    ]
    tail = TailConsumer(daemon.bootstrap)
    ops = OpsView(daemon)
    findings = Findings()
    observations: list[Observed] = []
    for producer in producers:
        producer.start()
    tail.start()
    try:
        wait_until(lambda: any(p.snapshot()[1] for p in producers), 60, "a first acknowledgement")
        phases: list[tuple[str, dict[str, Any], float]] = [("healthy", {}, 5.0)]
        phases += [(n, f, s * scale) for n, f, s in PHASES]
        for name, faults, seconds in phases:
            observed = Observed(name, seconds)
            before = ops.metrics()
            proxy.set(**faults)
            deadline = time.monotonic() + observed.seconds
            while time.monotonic() < deadline:
                ops.sample(observed, before)
                time.sleep(0.25)  # the sampling period, not a synchronisation
            observations.append(observed)
            if progress:
                progress(observed.line())
        proxy.set()
        wait_until(
            lambda: not any(line.startswith("store") for line in ops.readyz()[1:]),
            120,
            "/readyz to stop reporting the store",
        )
    finally:
        proxy.set()
        for producer in producers:
            producer.stop(drain_s=300)
    wait_until(
        lambda: ops.metrics().get("kfs_log_pool_used_bytes", 1.0) == 0.0,
        300,
        "the WAL to drain to the store",
    )
    sent: dict[bytes, Any] = {}
    acked: list[Any] = []
    for producer in producers:
        s, a = producer.snapshot()
        sent.update(s)
        acked += a
        if producer.fatal:
            findings.problem("producer fatal error", producer.fatal)
    log, ends = read_range(daemon.bootstrap, {})
    wait_until(lambda: tail.count() >= sum(ends.values()), 120, "the tail consumer")
    tail.stop()
    check_log(log, sent, acked, findings, ends)
    for position, record in tail.seen.items():
        if log.get(position) != record:
            findings.changed.add(position)
    for error in tail.errors[:5]:
        findings.problem("tail consumer error", error)
    segments = check_catalogs(store_url, moto_endpoint, namespace, findings)
    outage = observations[-1]
    if "store" not in outage.readyz:
        findings.problem("readyz", "did not report the store during the outage")
    bound = pool_bytes + RSS_BOUND_EXTRA
    peak = max(o.max_rss for o in observations)
    if peak > bound:
        findings.problem("memory", f"RSS {peak >> 20} MiB above the bound {bound >> 20} MiB")
    row = Row(
        campaign=f"store faults ({segments} segments)",
        store="s3 via proxy",
        cycles=len(PHASES),
        acknowledged=len(acked),
        lost=len(findings.lost),
        duplicated=len(findings.duplicated),
        changed=len(findings.changed),
        seed=seed,
        problems=findings.lines(),
    )
    return row, observations
