"""LeaseKeeper: several daemons' keepers in one event loop over one local store.

Each keeper has its own fake monotonic clock, and the tests call `tick`
themselves: a node dies by not ticking while another's clock moves past the
session timeout.  The partition catalogs are a small stand-in with the
catalog's lease semantics (an epoch per put-if-absent object, so exactly one
daemon wins each epoch).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kfs_core.cluster.assignment import assign, assign_topic
from kfs_core.cluster.leases import Acquired, LeaseKeeper, twin_moved
from kfs_core.cluster.nodes import NodeIdInUse, NodeRegistry
from kfs_core.cluster.reassignments import ReassignmentStore
from kfs_core.cluster.view import NO_LEADER, ClusterView, Leader, NodeInfo
from kfs_core.config import Settings
from kfs_core.errors import (
    LeaseConflict,
    NotLeaderOrFollower,
    ObjectAlreadyExists,
    TransientStoreError,
)
from kfs_core.storage import ByteRange, LocalObjectStore, ObjectInfo, ObjectStore

NS = "ns"
PARTS = [("t", p) for p in range(12)]
INTERVAL_MS = 50
SESSION_MS = 300
SESSION = SESSION_MS / 1000


def _counts(partitions: Sequence[tuple[str, int]]) -> Callable[[str], int | None]:
    """The partition count of each topic ``partitions`` names, as the daemon's topic cache says."""
    counts: dict[str, int] = {}
    for topic, partition in partitions:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts.get


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FlakyStore(ObjectStore):
    """A store whose puts fail while ``fail_puts`` is set (a daemon cut off from the store)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.fail_puts = False

    def put(self, key: str, data: bytes) -> ObjectInfo:
        if self.fail_puts:
            raise TransientStoreError(f"put {key}: connection refused")
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        if self.fail_puts:
            raise TransientStoreError(f"put {key}: connection refused")
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        return self.inner.get(key, byte_range)

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


@dataclass(frozen=True)
class LeaseRecord:
    """The lease fields of a catalog state."""

    leader_epoch: int = -1
    leader_node_id: int | None = None
    leader_incarnation: str | None = None


class FakeCatalog:
    """One partition's leases: ``lease-{epoch}.json`` objects written put-if-absent."""

    def __init__(self, cluster: Cluster, topic: str, partition: int) -> None:
        self._store = cluster.store
        self._prefix = f"{NS}/{topic}/{partition}/lease-"
        self._cluster = cluster

    def refresh(self) -> LeaseRecord:
        keys = [o.key for o in self._store.list(self._prefix)]
        if not keys:
            return LeaseRecord()
        doc = json.loads(self._store.get(max(keys)))
        return LeaseRecord(doc["epoch"], doc["node_id"], doc["incarnation"])

    def take_lease(self, node_id: int, incarnation: str) -> LeaseRecord:
        epoch = self.refresh().leader_epoch + 1
        doc = {"epoch": epoch, "node_id": node_id, "incarnation": incarnation}
        if self._cluster.before_put is not None:
            self._cluster.before_put()
        try:
            self._store.put_if_absent(f"{self._prefix}{epoch:010}.json", json.dumps(doc).encode())
        except ObjectAlreadyExists as exc:
            raise LeaseConflict(f"epoch {epoch} is taken") from exc
        self._cluster.takes.append(epoch)
        return LeaseRecord(epoch, node_id, incarnation)


@dataclass
class Node:
    """One daemon's keeper, its clock and what its log was asked to do."""

    keeper: LeaseKeeper
    clock: FakeClock
    released: list[tuple[str, int]] = field(default_factory=list)
    taken: list[list[tuple[str, int]]] = field(default_factory=list)
    acquired: dict[tuple[str, int], Acquired] = field(default_factory=dict)

    def wire(self) -> None:
        """Register callbacks that behave like the log: release drops, takeover acquires."""

        async def on_release(topic: str, partition: int) -> None:
            self.released.append((topic, partition))

        async def on_takeover(keys: list[tuple[str, int]]) -> None:
            self.taken.append(keys)
            for tp in keys:
                self.acquired[tp] = await self.keeper.acquire(*tp)

        self.keeper.set_callbacks(on_release, on_takeover)

    async def acquire_assigned(self) -> None:
        """Acquire every partition the assignment gives this node now."""
        for tp in PARTS:
            if self.keeper.leader(*tp) == Leader(self.keeper.node_id, -1):
                self.acquired[tp] = await self.keeper.acquire(*tp)


class Cluster:
    """Keepers sharing one store and one set of partition catalogs."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.takes: list[int] = []
        #: Run by a lease take between reading the newest epoch and writing the next.
        self.before_put: Callable[[], None] | None = None

    def catalog_for(self, topic: str, partition: int) -> FakeCatalog:
        return FakeCatalog(self, topic, partition)

    def node(
        self,
        node_id: int,
        *,
        durability: str = "cautious",
        unclean: bool = False,
        store: ObjectStore | None = None,
        wire: bool = True,
        partitions: Sequence[tuple[str, int]] = PARTS,
    ) -> Node:
        settings = Settings(
            node_id=node_id,
            broker_heartbeat_interval_ms=INTERVAL_MS,
            broker_session_timeout_ms=SESSION_MS,
            unclean_leader_election_enable=unclean,
            durability=durability,
        )
        clock = FakeClock()
        keeper = LeaseKeeper(
            store or self.store,
            NS,
            settings,
            {"PLAINTEXT": ("127.0.0.1", 9092 + node_id)},
            _counts(partitions),
            self.catalog_for,
            clock=clock,
            # The fake clock jumps where a daemon would read every interval.
            observer_max_gap_s=math.inf,
        )
        node = Node(keeper, clock)
        if wire:
            node.wire()
        return node


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    store = LocalObjectStore(tmp_path / "store")
    yield Cluster(store)
    store.close()


async def _tick(*nodes: Node) -> None:
    for node in nodes:
        await node.keeper.tick()


def _assigned(node_ids: Sequence[int], node_id: int) -> list[tuple[str, int]]:
    return sorted(tp for tp, n in assign(PARTS, node_ids).items() if n == node_id)


def test_partitions_spread_over_the_live_nodes(cluster: Cluster) -> None:
    async def main() -> None:
        nodes = [cluster.node(i) for i in range(3)]
        for node in nodes:
            await node.keeper.start(run_loop=False)
        await _tick(*nodes, *nodes)
        expected = assign(PARTS, [0, 1, 2])
        for node in nodes:
            view: ClusterView = node.keeper
            assert [n.node_id for n in view.live_nodes()] == [0, 1, 2]
            assert node.keeper.live_node_count == 3
            assert all(view.leader(*tp) == Leader(expected[tp], -1) for tp in PARTS)
        counts = [sum(1 for n in expected.values() if n == i) for i in range(3)]
        assert counts == [4, 4, 4]

        for node in nodes:
            await node.acquire_assigned()
        assert sorted(cluster.takes) == [0] * 12
        await _tick(*nodes, *nodes)  # every heartbeat written, then every one read
        for node in nodes:
            assert all(node.keeper.leader(*tp) == Leader(expected[tp], 0) for tp in PARTS)
            for tp in PARTS:
                mine = expected[tp] == node.keeper.node_id
                assert node.keeper.local_epoch(*tp) == (0 if mine else None)
            assert sorted(node.keeper.held) == _assigned([0, 1, 2], node.keeper.node_id)
            assert node.keeper.last_heartbeat_ok is True

        # Another node's partition is refused, whoever asks.
        foreign = next(tp for tp in PARTS if expected[tp] != 0)
        with pytest.raises(NotLeaderOrFollower, match=f"assigned to node {expected[foreign]}"):
            await nodes[0].keeper.acquire(*foreign)
        # The heartbeat lists what the node holds.
        info = NodeRegistry(cluster.store, NS).read(1)
        assert info is not None and dict(info.held) == dict(nodes[1].keeper.held)
        assert info.listeners == {"PLAINTEXT": ("127.0.0.1", 9093)}

    asyncio.run(main())


def test_liveness_follows_the_observers_clock(cluster: Cluster) -> None:
    async def main() -> None:
        a, b = cluster.node(0), cluster.node(1)
        await a.keeper.start(run_loop=False)
        await b.keeper.start(run_loop=False)
        await _tick(a, b)
        assert [n.node_id for n in b.keeper.live_nodes()] == [0, 1]
        b.clock.advance(SESSION - 0.01)
        await _tick(b)
        assert b.keeper.live_node_count == 2
        b.clock.advance(0.02)
        await _tick(b)
        assert [n.node_id for n in b.keeper.live_nodes()] == [1]
        # Its heartbeat moves again: live again.
        await _tick(a, b)
        assert [n.node_id for n in b.keeper.live_nodes()] == [0, 1]

    asyncio.run(main())


def test_a_stopped_node_is_taken_over_at_once(cluster: Cluster) -> None:
    async def main() -> None:
        a, b = cluster.node(0), cluster.node(1)
        for node in (a, b):
            await node.keeper.start(run_loop=False)
        await _tick(a, b, a, b)
        await a.acquire_assigned()
        await b.acquire_assigned()
        await _tick(a, b)
        a_parts = sorted(a.keeper.held)
        assert a_parts == _assigned([0, 1], 0)

        await a.keeper.stop(flushed=True)
        stopped = NodeRegistry(cluster.store, NS).read(0)
        assert stopped is not None and stopped.state == "stopped" and not stopped.held
        await _tick(b)  # no clock moved: a stopped holder never blocks
        assert b.taken == [a_parts]
        assert sorted(b.keeper.held) == PARTS
        for tp in a_parts:
            assert b.acquired[tp] == Acquired(1, 0, a.keeper.incarnation, "cautious")
            assert b.keeper.leader(*tp) == Leader(1, 1)
        assert [n.node_id for n in b.keeper.live_nodes()] == [1]
        await _tick(b)
        assert len(b.taken) == 1

    asyncio.run(main())


def test_a_holder_silent_for_half_a_session_is_reported_before_it_is_dead(
    cluster: Cluster,
) -> None:
    """The log hears of a silent holder (to read ahead its takeover), then takes it over."""

    async def main() -> None:
        a, b = cluster.node(0, durability="store"), cluster.node(1)
        c = cluster.node(2)  # holds nothing: its silence is nobody's concern
        for node in (a, b, c):
            await node.keeper.start(run_loop=False)
        await _tick(a, b, c, a, b, c)
        await a.acquire_assigned()
        await b.acquire_assigned()
        await _tick(a, b)
        warned: list[float] = []

        async def on_release(topic: str, partition: int) -> None:
            pass

        async def on_takeover(keys: list[tuple[str, int]]) -> None:
            b.taken.append(keys)

        b.keeper.set_callbacks(on_release, on_takeover, lambda: warned.append(b.clock()))
        b.clock.advance(SESSION / 2 - 0.01)
        await _tick(b)
        assert warned == []
        b.clock.advance(0.02)  # a and c silent for half the session timeout; only a holds any
        await _tick(b)
        assert warned == [b.clock()]
        await _tick(c, b)  # c moves: a is silent all the same
        assert len(warned) == 2
        b.clock.advance(SESSION / 2)
        await _tick(b)  # a is dead now, and taken over
        assert len(warned) == 2 and len(b.taken) == 1
        assert b.taken[0] and set(b.taken[0]) <= set(_assigned([0, 1, 2], 0))

    asyncio.run(main())


def test_a_dead_store_mode_node_is_taken_over_after_the_session_timeout(
    cluster: Cluster,
) -> None:
    async def main() -> None:
        a, b = cluster.node(0, durability="store"), cluster.node(1)
        for node in (a, b):
            await node.keeper.start(run_loop=False)
        await _tick(a, b, a, b)
        await a.acquire_assigned()
        await _tick(a, b)
        a_parts = sorted(a.keeper.held)
        # a is killed: it ticks no more.
        b.clock.advance(SESSION - 0.05)
        await _tick(b)
        assert b.taken == []
        assert b.keeper.leader(*a_parts[0]) == Leader(0, 0)
        with pytest.raises(NotLeaderOrFollower, match="node 0"):
            await b.keeper.acquire(*a_parts[0])
        b.clock.advance(0.06)
        await _tick(b)
        assert b.taken == [a_parts]
        assert all(b.acquired[tp].epoch == 1 for tp in a_parts)
        assert all(b.acquired[tp].previous_durability == "store" for tp in a_parts)
        assert all(b.keeper.leader(*tp) == Leader(1, 1) for tp in a_parts)

    asyncio.run(main())


@pytest.mark.parametrize("unclean", [False, True])
def test_a_dead_local_wal_node_waits_unless_unclean(
    cluster: Cluster, unclean: bool, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        a, b = cluster.node(0), cluster.node(1, unclean=unclean)
        for node in (a, b):
            await node.keeper.start(run_loop=False)
        await _tick(a, b, a, b)
        await a.acquire_assigned()
        await _tick(a, b)
        a_parts = sorted(a.keeper.held)
        b.clock.advance(SESSION + 0.01)
        with caplog.at_level(logging.WARNING, logger="kfs_core.cluster.leases"):
            await _tick(b, b)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        if not unclean:
            assert b.taken == []
            assert warnings == []
            assert all(b.keeper.leader(*tp) == NO_LEADER for tp in a_parts)
            assert not b.keeper.may_take(*a_parts[0])
            assert "dead node 0" in (b.keeper.refusal(*a_parts[0]) or "")
            with pytest.raises(NotLeaderOrFollower, match="dead node 0"):
                await b.keeper.acquire(*a_parts[0])
        else:
            assert b.taken == [a_parts]
            assert all(b.acquired[tp].epoch == 1 for tp in a_parts)
            assert len(warnings) == len(a_parts)  # one line per partition, not per tick
            assert all("node 0" in w and "lost" in w for w in warnings)
        # b's own partitions were never in question.
        assert set(_assigned([0, 1], 1)) <= {tp for tp in PARTS if b.keeper.may_take(*tp)}

    asyncio.run(main())


def test_the_same_node_id_restarted_takes_its_partitions_back(cluster: Cluster) -> None:
    async def main() -> None:
        old = cluster.node(0)
        await old.keeper.start(run_loop=False)
        await _tick(old)
        await old.acquire_assigned()
        await _tick(old)
        assert sorted(old.keeper.held) == PARTS
        # Killed; started again with its WAL (cautious mode).
        new = cluster.node(0)
        await new.keeper.start(run_loop=False)
        assert new.keeper.incarnation != old.keeper.incarnation
        await _tick(new)
        assert all(new.keeper.leader(*tp) == Leader(0, -1) for tp in PARTS)
        got = await new.keeper.acquire("t", 3)
        assert got == Acquired(1, 0, old.keeper.incarnation, None)

    asyncio.run(main())


def test_a_joining_node_gets_its_share_by_hand_over(cluster: Cluster) -> None:
    async def main() -> None:
        a = cluster.node(0)
        await a.keeper.start(run_loop=False)
        await _tick(a)
        await a.acquire_assigned()
        await _tick(a)
        assert sorted(a.keeper.held) == PARTS

        b = cluster.node(1)
        await b.keeper.start(run_loop=False)
        await _tick(b)
        moving = _assigned([0, 1], 1)
        assert all(b.keeper.leader(*tp) == Leader(0, 0) for tp in moving)
        with pytest.raises(NotLeaderOrFollower, match="live node 0 holds it"):
            await b.keeper.acquire(*moving[0])

        await _tick(a)  # a sees b, hands over b's share and says so at once
        assert sorted(a.released) == moving
        assert sorted(a.keeper.held) == _assigned([0, 1], 0)
        assert all(a.keeper.local_epoch(*tp) is None for tp in moving)
        await _tick(b)
        assert b.taken == []  # a is live: nothing to take over, b takes on request
        await b.acquire_assigned()
        assert sorted(b.keeper.held) == moving
        assert all(
            b.acquired[tp] == Acquired(1, 0, a.keeper.incarnation, "cautious") for tp in moving
        )
        await _tick(b, a)
        assert all(a.keeper.leader(*tp) == Leader(1, 1) for tp in moving)

    asyncio.run(main())


def test_a_pinned_partition_moves_to_its_target_by_hand_over(cluster: Cluster) -> None:
    async def main() -> None:
        nodes = [cluster.node(i) for i in range(3)]
        for node in nodes:
            await node.keeper.start(run_loop=False)
        await _tick(*nodes)
        for node in nodes:
            await node.acquire_assigned()
        await _tick(*nodes)
        expected = assign(PARTS, [0, 1, 2])
        tp = PARTS[3]
        source, target = nodes[expected[tp]], nodes[(expected[tp] + 1) % 3]
        documents = ReassignmentStore(cluster.store, NS)
        # A pin to a node that is not live changes nothing.
        documents.update(lambda current: {tp: 7})
        await _tick(*nodes)
        assert source.released == [] and tp in source.keeper.held

        documents.update(lambda current: {tp: target.keeper.node_id})
        await _tick(target)  # the holder has not handed it over yet: nothing to take
        assert target.taken == []
        assert target.keeper.leader(*tp) == Leader(source.keeper.node_id, 0)
        await _tick(source)  # the holder sees the pin and hands the partition over
        assert source.released == [tp] and tp not in source.keeper.held
        await _tick(target)  # the target takes it at once, at the next epoch
        assert target.taken == [[tp]]
        assert target.acquired[tp] == Acquired(1, source.keeper.node_id, source.keeper.incarnation,
                                               "cautious")  # fmt: skip
        await _tick(*nodes, *nodes)
        for node in nodes:
            assert node.keeper.leader(*tp) == Leader(target.keeper.node_id, 1)
        # Nothing else moved.
        assert all(n.released in ([], [tp]) for n in nodes)
        assert sorted(source.keeper.held) == [p for p in _assigned([0, 1, 2], expected[tp])
                                              if p != tp]  # fmt: skip

        # Dropping the pin gives the partition back to its computed node, which
        # takes it on request as after any hand-over.
        documents.update(lambda current: {})
        await _tick(target, source)
        assert target.released == [tp] and tp not in target.keeper.held
        assert source.keeper.leader(*tp) == Leader(source.keeper.node_id, -1)
        await source.acquire_assigned()
        assert source.keeper.held[tp] == 2

    asyncio.run(main())


def test_without_callbacks_nothing_moves(cluster: Cluster) -> None:
    async def main() -> None:
        a = cluster.node(0, wire=False)
        await a.keeper.start(run_loop=False)
        await _tick(a)
        for tp in PARTS:
            await a.keeper.acquire(*tp)
        b = cluster.node(1, wire=False)
        await b.keeper.start(run_loop=False)
        await _tick(b, a)
        assert sorted(a.keeper.held) == PARTS

    asyncio.run(main())


def test_concurrent_acquires_share_one_attempt(cluster: Cluster) -> None:
    async def main() -> None:
        a = cluster.node(0)
        await a.keeper.start(run_loop=False)
        await _tick(a)
        results = await asyncio.gather(*(a.keeper.acquire("t", 5) for _ in range(5)))
        assert set(results) == {Acquired(0)}
        assert cluster.takes == [0]
        assert await a.keeper.acquire("t", 5) == Acquired(0)
        assert cluster.takes == [0]

    asyncio.run(main())


def test_losing_the_epoch_race_is_not_leader(cluster: Cluster) -> None:
    async def main() -> None:
        a = cluster.node(0)
        await a.keeper.start(run_loop=False)
        await _tick(a)

        def another_daemon_wins() -> None:
            cluster.before_put = None
            cluster.catalog_for("t", 1).take_lease(7, "elsewhere")

        cluster.before_put = another_daemon_wins
        outcomes = await asyncio.gather(
            *(a.keeper.acquire("t", 1) for _ in range(3)), return_exceptions=True
        )
        assert all(isinstance(o, NotLeaderOrFollower) for o in outcomes), outcomes
        assert "another daemon took the lease" in str(outcomes[0])
        assert cluster.takes == [0]  # the other daemon's; this one tried once and lost
        assert a.keeper.local_epoch("t", 1) is None

    asyncio.run(main())


def test_lost_forgets_the_partition(cluster: Cluster) -> None:
    async def main() -> None:
        a = cluster.node(0)
        await a.keeper.start(run_loop=False)
        await _tick(a)
        await a.keeper.acquire("t", 2)
        await _tick(a)
        a.keeper.lost("t", 2)
        assert a.keeper.local_epoch("t", 2) is None
        await _tick(a)
        info = NodeRegistry(cluster.store, NS).read(0)
        assert info is not None and ("t", 2) not in info.held

    asyncio.run(main())


def test_a_local_wal_daemon_keeps_its_leases_through_a_store_outage(cluster: Cluster) -> None:
    """Nobody may take a cautious daemon's partitions, so failing heartbeats change nothing."""

    async def main() -> None:
        flaky = FlakyStore(cluster.store)
        a = cluster.node(0, store=flaky, durability="cautious")
        await a.keeper.start(run_loop=False)
        await _tick(a)
        await a.keeper.acquire("t", 0)
        flaky.fail_puts = True
        for _ in range(10):
            a.clock.advance(SESSION)
            await _tick(a)
        assert a.keeper.last_heartbeat_ok is False
        assert a.keeper.local_epoch("t", 0) == 0
        assert a.keeper.held == {("t", 0): 0}

    asyncio.run(main())


def test_the_lease_lapses_when_heartbeats_fail(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        flaky = FlakyStore(cluster.store)
        a = cluster.node(0, store=flaky, durability="store")
        await a.keeper.start(run_loop=False)
        await _tick(a)
        sent_at = a.clock.now
        await a.keeper.acquire("t", 0)
        assert a.keeper.local_epoch("t", 0) == 0
        assert a.keeper.lease_deadline == pytest.approx(sent_at + SESSION - INTERVAL_MS / 1000)

        flaky.fail_puts = True
        with caplog.at_level(logging.WARNING, logger="kfs_core.cluster.leases"):
            for _ in range(4):
                a.clock.advance(0.05)
                await _tick(a)
        assert a.keeper.last_heartbeat_ok is False
        assert a.keeper.local_epoch("t", 0) == 0  # 0.2 s since the last heartbeat landed
        failures = [r for r in caplog.records if "writing the heartbeat failed" in r.getMessage()]
        assert len(failures) == 1  # once per outage
        a.clock.advance(0.06)
        assert a.keeper.local_epoch("t", 0) is None
        # Held until the next tick, yet no longer named to clients as the leader.
        assert a.keeper.held == {("t", 0): 0}
        assert a.keeper.leader("t", 0) == NO_LEADER
        with pytest.raises(NotLeaderOrFollower, match="heartbeats are failing"):
            await a.keeper.acquire("t", 1)
        await _tick(a)
        assert a.keeper.held == {}

        flaky.fail_puts = False
        await _tick(a)
        assert a.keeper.last_heartbeat_ok is True
        assert await a.keeper.acquire("t", 0) == Acquired(1, 0, a.keeper.incarnation, "store")
        assert a.keeper.local_epoch("t", 0) == 1

    asyncio.run(main())


def test_a_holder_cut_off_from_the_store_names_its_heir_to_clients(cluster: Cluster) -> None:
    """Past its lease deadline, a holder that cannot write names who takes its partitions."""

    async def main() -> None:
        flaky = FlakyStore(cluster.store)
        a = cluster.node(0, store=flaky, durability="store")
        b, c = cluster.node(1, durability="store"), cluster.node(2, durability="store")
        for node in (a, b, c):
            await node.keeper.start(run_loop=False)
        await _tick(a, b, c, a, b, c)
        await a.acquire_assigned()
        held = sorted(a.keeper.held)
        assert held and all(a.keeper.leader(*tp) == Leader(0, 0) for tp in held)
        await _tick(a, b, c)
        flaky.fail_puts = True
        a.clock.advance(SESSION)
        # What b and c assign these partitions to once they count a dead.
        heirs = dict(zip(PARTS, assign_topic("t", len(PARTS), [1, 2]), strict=True))
        assert all(a.keeper.leader(*tp) == Leader(heirs[tp], -1) for tp in held)
        for node in (b, c):
            node.clock.advance(SESSION / 2)
        await _tick(b, c)
        for node in (b, c):
            node.clock.advance(SESSION / 2 + 0.01)
        await _tick(b, c, b, c)
        # b and c count a dead and take its partitions where a said they would go.
        assert sorted(tp for taken in b.taken for tp in taken) == [
            tp for tp in held if heirs[tp] == 1
        ]
        assert sorted(tp for taken in c.taken for tp in taken) == [
            tp for tp in held if heirs[tp] == 2
        ]

    asyncio.run(main())


def test_a_resumed_holder_drops_what_was_taken_at_a_newer_epoch(cluster: Cluster) -> None:
    async def main() -> None:
        a, b = cluster.node(0, durability="store"), cluster.node(1)
        for node in (a, b):
            await node.keeper.start(run_loop=False)
        await _tick(a, b, a, b)
        await a.acquire_assigned()
        await _tick(a, b)
        a_parts = sorted(a.keeper.held)
        b.clock.advance(SESSION + 0.01)  # a is paused
        await _tick(b, b)
        assert b.taken == [a_parts]
        # a resumes: its next tick sees b hold them at a newer epoch.
        await _tick(a)
        assert sorted(a.released) == a_parts
        assert a.keeper.held == {}
        assert all(a.keeper.leader(*tp) == Leader(1, 1) for tp in a_parts)

    asyncio.run(main())


def test_a_heartbeat_landing_after_the_deadline_revives_no_lease(cluster: Cluster) -> None:
    """Paused past its deadline, a holder's next heartbeat must not make its old epochs valid.

    The heartbeat task may land one before the tick that drops the lapsed
    partitions runs: meanwhile another daemon may have taken them.
    """

    async def main() -> None:
        a = cluster.node(0, durability="store")
        await a.keeper.start(run_loop=False)
        await _tick(a)
        await a.keeper.acquire("t", 0)
        assert a.keeper.local_epoch("t", 0) == 0
        a.clock.advance(SESSION)  # paused
        await a.keeper._heartbeat()  # as the heartbeat task does, first thing on resuming
        assert a.keeper.lease_deadline is not None and a.keeper.lease_deadline > a.clock.now
        assert a.keeper.local_epoch("t", 0) is None
        assert a.keeper.leader("t", 0) != Leader(0, 0)
        with pytest.raises(NotLeaderOrFollower, match="lapsed"):
            await a.keeper.acquire("t", 0)
        await _tick(a)
        assert a.released == [("t", 0)]
        assert a.keeper.held == {}
        # Taken again, at a new epoch, it is valid under the new heartbeat.
        assert (await a.keeper.acquire("t", 0)).epoch == 1
        assert a.keeper.local_epoch("t", 0) == 1

    asyncio.run(main())


def test_a_take_under_way_when_the_lease_lapses_is_not_served(cluster: Cluster) -> None:
    """Paused between its heartbeat and its lease commit, a daemon serves nothing it took."""

    async def main() -> None:
        a = cluster.node(0, durability="store")
        await a.keeper.start(run_loop=False)
        await _tick(a)
        cluster.before_put = lambda: a.clock.advance(SESSION)  # the pause, mid-take
        with pytest.raises(NotLeaderOrFollower, match="lapsed"):
            await a.keeper.acquire("t", 0)
        cluster.before_put = None
        assert a.keeper.held == {}
        await _tick(a, a)  # nothing of it to give up; the next heartbeat lands
        assert a.released == []
        assert (await a.keeper.acquire("t", 0)).epoch == 1  # the next epoch, served
        assert a.keeper.local_epoch("t", 0) == 1

    asyncio.run(main())


def test_a_second_daemon_with_a_live_node_id_refuses_to_start(tmp_path: Path) -> None:
    async def main() -> None:
        store = LocalObjectStore(tmp_path / "store")
        cluster = Cluster(store)

        def real_clock_keeper() -> LeaseKeeper:
            # The newcomer watches for two intervals: wide enough for a loaded machine.
            settings = Settings(
                node_id=4, broker_heartbeat_interval_ms=400, broker_session_timeout_ms=2000
            )
            return LeaseKeeper(store, NS, settings, {}, _counts(PARTS), cluster.catalog_for)

        first = real_clock_keeper()
        await first.start()  # its loop ticks every heartbeat interval
        with pytest.raises(NodeIdInUse, match="node id 4 is in use") as refused:
            await real_clock_keeper().start()
        assert "\n" not in str(refused.value)
        # Killed: its heartbeat stops moving, and the node id is free again.
        await first.stop(flushed=False)
        again = real_clock_keeper()
        await again.start(run_loop=False)
        info = NodeRegistry(store, NS).read(4)
        assert info is not None and info.incarnation == again.incarnation
        await again.stop(flushed=True)
        store.close()

    asyncio.run(main())


def _info(incarnation: str, seq: int, state: str = "running") -> NodeInfo:
    return NodeInfo(4, incarnation, {}, "cautious", state=state, seq=seq)  # type: ignore[arg-type]


def test_twin_decision() -> None:
    first = _info("a", 3)
    assert not twin_moved(first, None)
    assert not twin_moved(first, _info("a", 3))
    assert twin_moved(first, _info("a", 4))
    assert twin_moved(first, _info("b", 0))
    assert not twin_moved(first, _info("a", 4, "stopped"))


def test_the_loop_writes_a_heartbeat_soon_after_an_acquire(tmp_path: Path) -> None:
    async def main() -> None:
        store = LocalObjectStore(tmp_path / "store")
        cluster = Cluster(store)
        settings = Settings(
            node_id=2, broker_heartbeat_interval_ms=60_000, broker_session_timeout_ms=180_000
        )
        keeper = LeaseKeeper(store, NS, settings, {}, _counts(PARTS), cluster.catalog_for)
        await keeper.start()
        registry = NodeRegistry(store, NS)
        first = registry.read(2)
        assert first is not None and first.seq == 1 and not first.held
        await keeper.acquire("t", 4)

        async def listed() -> NodeInfo:
            # The interval is a minute: only the acquire's wake-up can write this soon.
            while True:
                info = await asyncio.to_thread(registry.read, 2)
                # Listed at -1 while the lease is taken, then at its epoch.
                if info is not None and info.held.get(("t", 4), -1) >= 0:
                    return info
                await asyncio.sleep(0.01)

        info = await asyncio.wait_for(listed(), timeout=10)
        assert info.held == {("t", 4): 0} and info.state == "running"
        await keeper.stop(flushed=True)
        final = registry.read(2)
        assert final is not None and final.state == "stopped" and not final.held
        assert final.seq > info.seq
        store.close()

    asyncio.run(main())


def test_a_holder_whose_newest_heartbeat_is_unseen_keeps_its_partition(cluster: Cluster) -> None:
    """The taker reads the holder's heartbeat after the catalog: the lease's holder is listed there.

    Node 1 takes a partition after node 0 last read its heartbeat; node 0's
    view of node 1 still lacks it, yet node 0 must not take it away.
    """

    async def main() -> None:
        a, b = cluster.node(0, durability="store"), cluster.node(1, durability="store")
        for node in (a, b):
            await node.keeper.start(run_loop=False)
        await _tick(a, b, a, b)
        tp = next(tp for tp in PARTS if b.keeper.leader(*tp) == Leader(1, -1))
        await b.keeper.acquire(*tp)  # node 0 has not read node 1's heartbeat since
        assert tp not in next(n for n in a.keeper.live_nodes() if n.node_id == 1).held
        why = await a.keeper._catalog_holder_refusal(tp, 1, b.keeper.incarnation)
        assert why == "live node 1 holds it"
        b.keeper.lost(*tp)
        await _tick(b)  # a heartbeat without it
        assert await a.keeper._catalog_holder_refusal(tp, 1, b.keeper.incarnation) is None

    asyncio.run(main())


@pytest.mark.parametrize("turns", range(5))
def test_stop_ends_the_loops_when_a_wake_up_meets_the_cancel(tmp_path: Path, turns: int) -> None:
    """A stop that lands ``turns`` loop turns after the loop was woken still ends.

    One of these turns lands the cancel just as the loop's wait for the
    wake-up has finished: Python 3.11's ``wait_for`` then returns instead of
    raising, and a loop that only stopped on cancellation would go on forever.
    """

    async def main() -> None:
        store = LocalObjectStore(tmp_path / "store")
        cluster = Cluster(store)
        settings = Settings(
            node_id=1, broker_heartbeat_interval_ms=60_000, broker_session_timeout_ms=180_000
        )
        keeper = LeaseKeeper(store, NS, settings, {}, _counts(PARTS), cluster.catalog_for)
        await keeper.start()
        await keeper.acquire("t", 4)
        await asyncio.sleep(0.05)  # the loop's tick after the take has ended: it waits again
        keeper.lost("t", 4)  # wakes the loop
        for _ in range(turns):
            await asyncio.sleep(0)
        stopping = asyncio.ensure_future(keeper.stop(flushed=True))
        done, _ = await asyncio.wait({stopping}, timeout=10)
        assert stopping in done, "stop did not end the loops"
        store.close()

    asyncio.run(main())
