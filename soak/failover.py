"""The failover campaign: three daemons in ``store`` mode lose one again and again, lose nothing.

Three `kfs serve` daemons share one namespace in the ``store`` durability
mode (a record is acknowledged once it is in the object store), with 200 ms
heartbeats and a 2 s session timeout.  Three idempotent confluent-kafka
producers (acks=all, one codec each) send to a 12-partition topic over all
three daemons while a tail consumer follows every partition.  Each cycle
(seeded: the victim, the action, the delay before it) is one of

- **kill**: ``kill -9`` a daemon, time the failover, start it again and wait
  until the others count it live;
- **pause**: ``SIGSTOP`` a daemon, time the failover (the others take over
  after the session timeout), ``SIGCONT`` it, and wait until it has given up
  the partitions it held (its lease lapsed, or it found them taken at a newer
  epoch) and the others count it live again;
- **rolling**: stop every daemon gracefully (SIGTERM) and start it again, one
  after the other, timing the failover after each stop;
- **crash**: on daemons with a local WAL (``cautious``): ``kill -9`` a
  daemon and start it again at once.  Its partitions are nobody else's to
  take (only its WAL holds what it acknowledged last), so the failover is
  its restart: WAL recovery replays them, then they serve again.

*Failover* is measured from outside, with a client: from the fault until
every partition of the topic has accepted a produce and answered a fetch.
At the fault a probe producer (idempotent, acks=all, 2 s request timeout)
sends one small record to every partition; a partition counts as served once
that record is acknowledged and the tail consumer has fetched it at its
acknowledged offset.  The figure therefore includes the clients' own
timeouts, retry backoffs and metadata refreshes, as an application would see
them; the probe records join the history like any other.

At the end the producers drain and the topic is read from offset 0; the
history (`soak.load.check_log`, `soak.load.check_seen`) must show every
acknowledged record once at its acknowledged offset, no offset holding two
records, and nothing the tail consumer read while the cycles ran changed
afterwards.  A delivery error (what the application sees once the idempotent
producer gives up) is a problem too: all three kinds of fault are meant to
be ridden through.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin

from soak.load import (
    CODECS,
    EXAMPLES,
    QUIET,
    Findings,
    LoadProducer,
    ReadStalled,
    TailConsumer,
    check_log,
    check_seen,
    check_unplaced,
    create_topic,
    merge_model,
    read_range,
    wait_until,
)
from soak.report import Row
from testkit.daemon import Daemon, DaemonFactory

TOPIC = "kfs-failover"
PARTITIONS = 12
NODES = 3
HEARTBEAT_MS = 200
SESSION_TIMEOUT_MS = 2000
#: On S3 (a moto server, on a machine the campaign shares), a slower pace.
S3_HEARTBEAT_MS = 500
S3_SESSION_TIMEOUT_MS = 5000
#: The failover time aimed at: the session timeout, plus 2 s to take over and for clients.
TARGET_S = SESSION_TIMEOUT_MS / 1000 + 2.0
S3_TARGET_S = S3_SESSION_TIMEOUT_MS / 1000 + 2.0
ACTIONS = ("kill", "pause", "rolling", "crash")
FAULTS = {
    "kill": "kill -9",
    "pause": "pause",
    "rolling": "rolling restart",
    "crash": "kill -9 and restart, cautious",
}
#: Short client timeouts, so that a request to a paused daemon is given up in seconds.
PROBE_SETTINGS = {
    "request.timeout.ms": 2000,
    "socket.timeout.ms": 2000,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 200,
    "topic.metadata.refresh.interval.ms": 500,
    "message.timeout.ms": 60_000,
}
TAIL_SETTINGS = {"socket.timeout.ms": 2000, "topic.metadata.refresh.interval.ms": 500}
#: What a daemon logs when it gives up partitions another daemon took while it was paused.
DROPPED = ("giving up", "at a newer epoch", "another daemon took the partition")
#: How long a failover or a rejoin may take before the cycle is a finding.
WAIT_S = 60.0


def start_cluster(
    factory: DaemonFactory,
    *,
    store_url: str,
    s3_endpoint_url: str | None = None,
    durability: str = "store",
) -> list[Daemon]:
    """The campaign's three daemons: ``store`` durability (unless told), short heartbeats."""
    s3 = s3_endpoint_url is not None
    return factory.start_cluster(
        NODES,
        store_url=store_url,
        s3_endpoint_url=s3_endpoint_url,
        durability=durability,
        heartbeat_ms=S3_HEARTBEAT_MS if s3 else HEARTBEAT_MS,
        session_timeout_ms=S3_SESSION_TIMEOUT_MS if s3 else SESSION_TIMEOUT_MS,
    )


def node_id(daemon: Daemon) -> int:
    """The ``--node-id`` a daemon was started with."""
    return int(daemon.args[daemon.args.index("--node-id") + 1])


@dataclass
class Cycle:
    """One fault and what followed it."""

    action: str
    victims: list[int]  # node ids, in the order they were hit
    failover_s: list[float] = field(default_factory=list)  # one per fault
    moved: int = 0  # partitions the victims led before and another daemon led after
    rejoin_s: float = 0.0  # the longest restart or resume -> counted live by the others
    application_errors: int = 0  # delivery errors the load producers reported


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def plan(rng: random.Random, kills: int, pauses: int, rolling: int) -> list[str]:
    """The cycles' actions in a seeded order."""
    actions = ["kill"] * kills + ["pause"] * pauses + ["rolling"] * rolling
    rng.shuffle(actions)
    return actions


class Campaign:
    """The cluster, its clients and the history of one run."""

    def __init__(self, daemons: list[Daemon], seed: int, rate: int) -> None:
        self.daemons = daemons
        self.rng = random.Random(seed)
        self.servers = ",".join(d.bootstrap for d in daemons)
        create_topic(self.servers, topic=TOPIC, partitions=PARTITIONS)
        self.producers = [
            LoadProducer(self.servers, i, seed, codec, rate, topic=TOPIC, partitions=PARTITIONS)
            for i, codec in enumerate(CODECS)
        ]
        self.probe = LoadProducer(
            self.servers, len(CODECS), seed, "none", 0, topic=TOPIC, partitions=PARTITIONS,
            settings=PROBE_SETTINGS,
        )  # fmt: skip
        self.tail = TailConsumer(
            self.servers, topic=TOPIC, partitions=PARTITIONS, settings=TAIL_SETTINGS
        )
        self.findings = Findings()

    # --- what the clients see -------------------------------------------------------------

    def leaders(self, but: Daemon | None = None) -> dict[int, int]:
        """Partition -> leader node id, from a fresh Metadata request to a running daemon."""
        servers = ",".join(d.bootstrap for d in self.daemons if d.alive() and d is not but)
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": servers, **QUIET})
        meta = admin.list_topics(TOPIC, timeout=10)
        return {p.id: p.leader for p in meta.topics[TOPIC].partitions.values()}

    def application_errors(self) -> int:
        return sum(len(p.failed) for p in self.producers)

    def acknowledged(self) -> int:
        return sum(p.acked_count() for p in self.producers)

    def failover(self, since: float) -> float:
        """Seconds from ``since`` until every partition took a probe record and served it back."""
        cursor = self.probe.acked_count()
        probes = {self.probe.send(p): p for p in range(PARTITIONS)}
        fetched: dict[int, float] = {}
        acked: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + WAIT_S
        while len(fetched) < PARTITIONS:
            entries, cursor = self.probe.acked_since(cursor)
            for position, ident in entries:
                if ident in probes:
                    acked[probes[ident]] = position
            for partition, position in acked.items():
                if partition not in fetched and self.tail.holds(position):
                    fetched[partition] = time.monotonic() - since
            if time.monotonic() > deadline:
                waiting = sorted(set(range(PARTITIONS)) - set(fetched))
                raise TimeoutError(f"partitions {waiting} not served {WAIT_S:g} s after the fault")
            time.sleep(0.01)
        return max(fetched.values())

    def wait_live(self, count: int = NODES) -> None:
        """Until every running daemon counts ``count`` live daemons."""
        wait_until(
            lambda: all(d.metric("kfs_cluster_live_nodes") >= count for d in self.daemons),
            WAIT_S,
            f"every daemon counting {count} live daemons",
        )

    def wait_balanced(self) -> None:
        """Until every daemon leads a partition again (the hand-over back after a rejoin)."""

        def balanced() -> bool:
            return set(self.leaders().values()) == {node_id(d) for d in self.daemons}

        wait_until(balanced, WAIT_S, "every daemon leading a partition")

    # --- the faults -----------------------------------------------------------------------

    def moved(self, victim: Daemon, led: set[int]) -> int:
        """How many of the partitions ``victim`` led (``led``) another daemon leads now."""
        now = self.leaders(but=victim)
        return sum(1 for p in led if now[p] != node_id(victim))

    def kill(self, victim: Daemon, cycle: Cycle, led: set[int]) -> None:
        victim.kill()
        cycle.failover_s.append(self.failover(time.monotonic()))
        cycle.moved += self.moved(victim, led)
        started = time.monotonic()
        victim.start()
        self.wait_live()
        cycle.rejoin_s = max(cycle.rejoin_s, time.monotonic() - started)

    def pause(self, victim: Daemon, cycle: Cycle, led: set[int]) -> None:
        logged = len(victim.log())
        victim.pause()
        try:
            cycle.failover_s.append(self.failover(time.monotonic()))
            cycle.moved += self.moved(victim, led)
        finally:
            victim.resume()
        resumed = time.monotonic()
        try:
            wait_until(
                lambda: any(line in victim.log()[logged:] for line in DROPPED),
                WAIT_S,
                f"node {node_id(victim)} giving up the partitions it held while paused",
            )
        except TimeoutError as exc:
            self.findings.problem("paused daemon", str(exc))
        self.wait_live()
        cycle.rejoin_s = max(cycle.rejoin_s, time.monotonic() - resumed)

    def restart(self, victim: Daemon, cycle: Cycle, led: set[int]) -> None:
        stopped = time.monotonic()
        code = victim.stop()
        if code != 0:
            self.findings.problem("graceful stop", f"node {node_id(victim)} exited {code}")
        cycle.failover_s.append(self.failover(stopped))
        cycle.moved += self.moved(victim, led)
        started = time.monotonic()
        victim.start()
        self.wait_live()
        cycle.rejoin_s = max(cycle.rejoin_s, time.monotonic() - started)

    def crash(self, victim: Daemon, cycle: Cycle, led: set[int]) -> None:
        killed = time.monotonic()
        victim.kill()
        victim.start()
        cycle.rejoin_s = max(cycle.rejoin_s, time.monotonic() - killed)
        cycle.failover_s.append(self.failover(killed))
        self.wait_live()

    def cycle(self, action: str, delay_s: tuple[float, float]) -> Cycle:
        """One fault after a seeded delay under load, once the cluster is balanced."""
        self.wait_balanced()
        before = self.acknowledged()
        wait_until(lambda: self.acknowledged() > before, WAIT_S, "an acknowledgement")
        time.sleep(self.rng.uniform(*delay_s))  # the load runs this long before the fault
        victims = list(self.daemons) if action == "rolling" else [self.rng.choice(self.daemons)]
        cycle = Cycle(action, [node_id(v) for v in victims])
        errors = self.application_errors()
        for victim in victims:
            led = {p for p, leader in self.leaders().items() if leader == node_id(victim)}
            fault = {
                "kill": self.kill,
                "pause": self.pause,
                "rolling": self.restart,
                "crash": self.crash,
            }[action]
            fault(victim, cycle, led)
        cycle.application_errors = self.application_errors() - errors
        return cycle

    # --- the end --------------------------------------------------------------------------

    def check(self) -> int:
        """Drain, read the whole topic, judge the history; the acknowledgements judged."""
        for producer in [*self.producers, self.probe]:
            producer.stop()
        sent, acked = merge_model([*self.producers, self.probe])
        try:
            final, ends = read_range(
                self.servers, {}, timeout_s=300, topic=TOPIC, partitions=PARTITIONS
            )
        except (ReadStalled, RuntimeError, confluent_kafka.KafkaException) as exc:
            self.findings.problem("read-back", f"the final read: {exc}")
            self.tail.stop()
            return len(acked)
        try:
            wait_until(lambda: self.tail.count() >= sum(ends.values()), 300, "the tail consumer")
        except TimeoutError as exc:  # judged below all the same: what it read must still hold
            behind = {p: e for p, e in ends.items() if not self.tail.holds((p, e - 1)) and e}
            self.findings.problem("tail consumer stalled", f"{exc}; behind on {sorted(behind)}")
        self.tail.stop()
        check_log(final, sent, acked, self.findings, ends)
        check_unplaced([*self.producers, self.probe], final, sent, self.findings)
        check_seen(self.tail.seen, final, self.findings)
        for error in self.tail.errors[:EXAMPLES]:
            self.findings.problem("tail consumer error", error)
        for producer in [*self.producers, self.probe]:
            for ident, error in list(producer.failed.items())[:EXAMPLES]:
                self.findings.problem("application error", f"{ident.decode()}: {error}")
            if producer.fatal:
                self.findings.problem("producer fatal error", producer.fatal)
        return len(acked)


def summary(action: str, cycles: Sequence[Cycle], target_s: float = TARGET_S) -> list[str]:
    """The figures of one action's cycles, a line each."""
    times = [t for c in cycles for t in c.failover_s]
    if not times:
        return []
    faults = {
        "kill": "kill -9",
        "pause": "pause",
        "rolling": "graceful stop",
        "crash": "kill -9 and restart",
    }[action]
    return [
        f"{len(times)} x {faults}: failover p50 {percentile(times, 0.5):.2f} s, "
        f"p99 {percentile(times, 0.99):.2f} s, max {max(times):.2f} s "
        f"(target {target_s:.1f} s); {sum(c.moved for c in cycles)} partitions moved; "
        f"rejoin max {max(c.rejoin_s for c in cycles):.2f} s; "
        f"application errors {sum(c.application_errors for c in cycles)}"
    ]


def run(
    daemons: list[Daemon],
    *,
    actions: Sequence[str],
    seed: int,
    store: str,
    rate: int = 100,
    delay_s: tuple[float, float] = (0.2, 1.5),
    progress: Callable[[str], None] | None = None,
) -> tuple[Row, list[Cycle]]:
    """Run one cycle per entry of ``actions`` (`ACTIONS`) on a `start_cluster` cluster.

    ``rate`` is records a second per producer; each fault comes ``delay_s``
    (uniform, seeded) after the cluster is balanced and a record was
    acknowledged.  The row is named after the actions run; the cycles carry
    each fault's figures.
    """
    campaign = Campaign(daemons, seed, rate)
    for producer in [*campaign.producers, campaign.probe]:
        producer.start()
    campaign.tail.start()
    cycles: list[Cycle] = []
    attempted: set[str] = set()
    try:
        for n, action in enumerate(actions):
            attempted.add(action)
            try:
                cycles.append(campaign.cycle(action, delay_s))
            except TimeoutError as exc:  # a finding, not a crash of the campaign
                campaign.findings.problem("stalled", f"cycle {n + 1} ({action}): {exc}")
                break
            if progress:
                last = cycles[-1]
                progress(
                    f"cycle {n + 1}/{len(actions)} {action} node {last.victims}: "
                    f"failover {max(last.failover_s):.2f} s, {last.moved} moved, "
                    f"{campaign.acknowledged()} acknowledged"
                )
    finally:
        acknowledged = campaign.check()
    kinds = sorted(attempted or set(actions), key=ACTIONS.index)
    times = [t for c in cycles for t in c.failover_s]
    findings = campaign.findings
    return Row(
        campaign=f"failover ({', '.join(FAULTS[k] for k in kinds)})",
        store=store,
        cycles=len(cycles),
        acknowledged=acknowledged,
        lost=len(findings.lost),
        duplicated=len(findings.duplicated),
        changed=len(findings.changed),
        max_recovery_s=max(times, default=None),
        seed=seed,
        problems=findings.lines(),
        details=[
            line
            for k in kinds
            for line in summary(
                k,
                [c for c in cycles if c.action == k],
                S3_TARGET_S if store == "s3" else TARGET_S,
            )
        ],
    ), cycles


def rows(
    root: Path,
    *,
    s3_store: Callable[[], dict[str, str]],
    kills: int,
    s3_kills: int,
    pauses: int,
    rolling: int,
    seed: int,
    crashes: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Iterator[Row]:
    """`make soak`'s failover rows, each run on a fresh cluster under ``root``; yielded as done.

    kill -9, pause and rolling restart on the local store, and kill -9 on S3
    (``s3_store()`` gives a fresh bucket's ``store_url`` and ``s3_endpoint_url``),
    in ``store`` mode; kill -9 and restart of ``cautious`` daemons.
    """
    plans = [
        ("local", ["kill"] * kills),
        ("local", ["pause"] * pauses),
        ("local", ["rolling"] * rolling),
        ("s3", ["kill"] * s3_kills),
        ("local", ["crash"] * crashes),
    ]
    for n, (store, actions) in enumerate(plans):
        if not actions:
            continue
        factory = DaemonFactory(root / f"failover-{n}")
        durability = "cautious" if actions[0] == "crash" else "store"
        try:
            if store == "s3":
                where = s3_store()
                cluster = start_cluster(
                    factory, store_url=where["store_url"], s3_endpoint_url=where["s3_endpoint_url"]
                )
            else:
                cluster = start_cluster(
                    factory, store_url=(factory.root / "store").as_uri(), durability=durability
                )

            def report(line: str, store: str = store, action: str = actions[0]) -> None:
                if progress:
                    progress(f"{store} {action}: {line}")

            row, _ = run(cluster, actions=actions, seed=seed, store=store, progress=report)
        finally:
            factory.close()  # a daemon left paused by a stalled cycle is woken and killed too
        yield row
