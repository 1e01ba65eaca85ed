"""The network-cut campaign: one of three ``store``-mode daemons loses a real network path, again and again.

Nodes 1 and 2 run in this network namespace, node 3 in one of its own
(`testkit.netns`), all on S3 on a moto server that listens on the
namespace's ``store`` path, under the failover campaign's load
(`soak.failover.Campaign`: three idempotent producers, a probe producer, a
tail consumer, 12 partitions).  Each cycle (seeded: which cut, whether it
drops both directions or only what node 3 sends, the delay before it) is one of

- **store**: node 3's path to S3 is cut.  Its heartbeats stop landing, so
  it stops acknowledging at its lease deadline and nodes 1 and 2 take its
  partitions; *failover* is timed from the cut until every partition took a
  probe record and the tail consumer fetched it.  Then the path is restored,
  and *rejoin* is timed until every daemon counts three live and node 3
  leads its share again.
- **clients**: node 3's path to its clients is cut for ``hold_s``.  Its
  heartbeats still land, so by design it keeps its leases: the others count
  it live, Metadata goes on naming it leader of its partitions, and those
  partitions answer nobody until the path is restored.  During the cut
  every partition's leader must stay as it was and no record may be
  acknowledged on node 3's partitions; *resume* is timed from the restore
  until every partition served a probe again.

At the end the history is judged as in the failover campaign (every
acknowledged record once at its offset, nothing the tail consumer read
changed afterwards, no delivery error reaching the application).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import boto3

from kfs_core.cluster.assignment import assign_topic
from soak.failover import PARTITIONS, TOPIC, Campaign, node_id, percentile
from soak.load import wait_until
from soak.report import Row
from testkit.daemon import Daemon, DaemonFactory
from testkit.moto_s3 import moto_server
from testkit.netns import NetNamespace, NetnsUnavailable, network_namespace

ACTIONS = ("store", "clients")
NAMES = {"store": "cut from the store", "clients": "cut from its clients"}
HEARTBEAT_MS = 500
SESSION_TIMEOUT_MS = 5000
#: How long a cut from the clients lasts: twice the session timeout.
HOLD_S = 2 * SESSION_TIMEOUT_MS / 1000
#: How long a failover, a rejoin or a resume may take before the cycle is a finding.
WAIT_S = 60.0


def start_cluster(factory: DaemonFactory, netns: NetNamespace, endpoint: str) -> list[Daemon]:
    """Nodes 1 and 2 here, node 3 in ``netns``, on a fresh bucket of ``endpoint``; converged."""
    bucket = f"kfs-cuts-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    store_url = f"s3://{bucket}/kfs"
    daemons = factory.start_cluster(
        2, store_url=store_url, s3_endpoint_url=endpoint,
        heartbeat_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_TIMEOUT_MS,
    )  # fmt: skip
    daemons += factory.start_cluster(
        1, store_url=store_url, s3_endpoint_url=endpoint, first_node_id=3, netns=netns,
        heartbeat_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_TIMEOUT_MS,
    )  # fmt: skip
    wait_until(
        lambda: all(d.metric("kfs_cluster_live_nodes") >= 3 for d in daemons),
        WAIT_S,
        "every daemon counting three live daemons",
    )
    return daemons


@dataclass
class Cut:
    """One cut and what followed it."""

    action: str
    one_way: bool
    failover_s: float | None = None  # store: cut -> every partition served
    rejoin_s: float | None = None  # store: restore -> node 3 live and leading its share
    resume_s: float | None = None  # clients: restore -> every partition served
    moved: int = 0  # store: node 3's partitions another daemon leads after the failover
    application_errors: int = 0


def plan(rng: random.Random, store: int, clients: int) -> list[str]:
    """The cycles' actions, ``store`` and ``clients`` cuts, in a seeded order."""
    actions = ["store"] * store + ["clients"] * clients
    rng.shuffle(actions)
    return actions


class CutCampaign:
    """The failover campaign's cluster and clients, with node 3 behind ``netns``."""

    def __init__(self, campaign: Campaign, netns: NetNamespace, hold_s: float) -> None:
        self.campaign = campaign
        self.netns = netns
        self.hold_s = hold_s
        self.victim = next(d for d in campaign.daemons if d.netns is netns)
        self.node = node_id(self.victim)

    def acked_on(self, partitions: set[int], cursors: list[int]) -> list[tuple[int, int]]:
        """The acknowledgements on ``partitions`` since ``cursors`` (one per producer)."""
        found = []
        producers = [*self.campaign.producers, self.campaign.probe]
        for i, producer in enumerate(producers):
            entries, cursors[i] = producer.acked_since(cursors[i])
            found += [position for position, _ in entries if position[0] in partitions]
        return found

    def wait_settled(self) -> None:
        """Until every partition is led by its assignee among the three (no hand-over under way).

        A partition handed back to node 3 after a cut is taken on its first
        request; a cut from the clients that began before would hold that
        partition leaderless, which is the hand-over's doing, not the cut's.
        """
        c = self.campaign
        owners = dict(enumerate(assign_topic(TOPIC, PARTITIONS, [node_id(d) for d in c.daemons])))
        wait_until(lambda: c.leaders() == owners, WAIT_S, "every partition on its assignee")

    def cursors(self) -> list[int]:
        return [p.acked_count() for p in [*self.campaign.producers, self.campaign.probe]]

    def store(self, cut: Cut) -> None:
        c, victim = self.campaign, self.victim
        led = {p for p, leader in c.leaders(but=victim).items() if leader == self.node}
        started = time.monotonic()
        self.netns.cut("store", one_way=cut.one_way)
        try:
            cut.failover_s = c.failover(started)
            cut.moved = c.moved(victim, led)
            if victim.metric("kfs_cluster_lease_valid") != 0:
                c.findings.problem("store cut", f"node {self.node} still held a valid lease")
        finally:
            self.netns.restore("store")
        restored = time.monotonic()
        c.wait_live()
        self.wait_settled()
        cut.rejoin_s = time.monotonic() - restored

    def clients(self, cut: Cut) -> None:
        c, victim = self.campaign, self.victim
        before = c.leaders(but=victim)
        led = {p for p, leader in before.items() if leader == self.node}
        self.netns.cut("clients", one_way=cut.one_way)
        try:
            # Answers already on the wire may land; once another partition is
            # acknowledged after the cut, none of node 3's can be.
            settle, others = self.cursors(), set(before) - led
            wait_until(
                lambda: bool(self.acked_on(others, settle)), WAIT_S, "an acknowledgement elsewhere"
            )
            cursors = self.cursors()
            until = time.monotonic() + self.hold_s
            while time.monotonic() < until:
                self.check_held(before, led, cursors)
                time.sleep(0.5)
        finally:
            self.netns.restore("clients")
        cut.resume_s = c.failover(time.monotonic())

    def check_held(self, before: dict[int, int], led: set[int], cursors: list[int]) -> None:
        """During a cut from the clients: node 3 keeps its partitions and acknowledges none."""
        c = self.campaign
        now = c.leaders(but=self.victim)
        if now != before:
            moved = {p: f"{before[p]} -> {now.get(p)}" for p in before if now.get(p) != before[p]}
            c.findings.problem("clients cut", f"leaders changed while node 3 was live: {moved}")
        if self.victim.metric("kfs_cluster_lease_valid") != 1:
            c.findings.problem("clients cut", f"node {self.node}'s lease lapsed")
        acked = self.acked_on(led, cursors)
        if acked:
            c.findings.problem("clients cut", f"acknowledged while unreachable: {acked[:3]}")

    def cycle(self, action: str, delay_s: tuple[float, float]) -> Cut:
        c = self.campaign
        self.wait_settled()
        before = c.acknowledged()
        wait_until(lambda: c.acknowledged() > before, WAIT_S, "an acknowledgement")
        time.sleep(c.rng.uniform(*delay_s))  # the load runs this long before the cut
        cut = Cut(action, one_way=c.rng.random() < 0.5)
        errors = c.application_errors()
        {"store": self.store, "clients": self.clients}[action](cut)
        cut.application_errors = c.application_errors() - errors
        return cut


def summary(action: str, cuts: Sequence[Cut]) -> list[str]:
    """The figures of one action's cuts, a line each."""
    if not cuts:
        return []

    def spread(values: Sequence[float]) -> str:
        return (
            f"p50 {percentile(values, 0.5):.2f} s, p99 {percentile(values, 0.99):.2f} s, "
            f"max {max(values):.2f} s"
        )

    one_way = sum(c.one_way for c in cuts)
    head = f"{len(cuts)} x {NAMES[action]} ({one_way} one way)"
    errors = sum(c.application_errors for c in cuts)
    if action == "store":
        failovers = [c.failover_s for c in cuts if c.failover_s is not None]
        rejoins = [c.rejoin_s for c in cuts if c.rejoin_s is not None]
        return [
            f"{head}: failover {spread(failovers)}; {sum(c.moved for c in cuts)} partitions "
            f"moved; rejoin max {max(rejoins, default=0.0):.2f} s; application errors {errors}"
        ]
    resumes = [c.resume_s for c in cuts if c.resume_s is not None]
    return [f"{head}: resume after restore {spread(resumes)}; application errors {errors}"]


def run(
    daemons: list[Daemon],
    netns: NetNamespace,
    *,
    actions: Sequence[str],
    seed: int,
    rate: int = 100,
    hold_s: float = HOLD_S,
    delay_s: tuple[float, float] = (0.2, 1.5),
    progress: Callable[[str], None] | None = None,
) -> tuple[Row, list[Cut]]:
    """One cut per entry of ``actions`` (`ACTIONS`) on a `start_cluster` cluster; the row."""
    campaign = Campaign(daemons, seed, rate)
    cuts_campaign = CutCampaign(campaign, netns, hold_s)
    for producer in [*campaign.producers, campaign.probe]:
        producer.start()
    campaign.tail.start()
    cuts: list[Cut] = []
    try:
        for n, action in enumerate(actions):
            try:
                cuts.append(cuts_campaign.cycle(action, delay_s))
            except TimeoutError as exc:  # a finding, not a crash of the campaign
                campaign.findings.problem("stalled", f"cycle {n + 1} ({action}): {exc}")
                break
            if progress:
                last = cuts[-1]
                took = last.failover_s if action == "store" else last.resume_s
                progress(
                    f"cycle {n + 1}/{len(actions)} {NAMES[action]}"
                    f"{' (one way)' if last.one_way else ''}: {took or 0.0:.2f} s, "
                    f"{campaign.acknowledged()} acknowledged"
                )
    finally:
        acknowledged = campaign.check()
    findings = campaign.findings
    times = [t for c in cuts for t in (c.failover_s, c.resume_s) if t is not None]
    kinds = [a for a in ACTIONS if a in actions]
    return Row(
        campaign=f"network cuts ({', '.join(NAMES[k] for k in kinds)})",
        store="s3",
        cycles=len(cuts),
        acknowledged=acknowledged,
        lost=len(findings.lost),
        duplicated=len(findings.duplicated),
        changed=len(findings.changed),
        max_recovery_s=max(times, default=None),
        seed=seed,
        problems=findings.lines(),
        details=[line for k in kinds for line in summary(k, [c for c in cuts if c.action == k])],
    ), cuts


def rows(
    root: Path,
    *,
    store_cuts: int,
    client_cuts: int,
    seed: int,
    progress: Callable[[str], None] | None = None,
) -> Iterator[Row]:
    """`make soak`'s network-cut row: its own namespace, moto server and cluster under ``root``.

    Where network namespaces cannot be made the row fails, saying why.
    """
    actions = plan(random.Random(seed), store_cuts, client_cuts)
    if not actions:
        return
    try:
        with network_namespace() as netns:
            endpoint_log = root / "network-cuts-moto.log"
            with moto_server(endpoint_log, host=netns.outside("store")) as endpoint:
                factory = DaemonFactory(root / "network-cuts")
                try:
                    daemons = start_cluster(factory, netns, endpoint)
                    row, _ = run(daemons, netns, actions=actions, seed=seed, progress=progress)
                finally:
                    factory.close()
    except NetnsUnavailable as exc:
        row = Row("network cuts", "s3", 0, seed=seed, problems=[f"not run: {exc}"])
    yield row
