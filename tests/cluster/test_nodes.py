"""Heartbeat documents, the registry of them, and liveness by one observer's clock."""

from __future__ import annotations

import json
import logging
import math

import pytest

from kfs_core.cluster.nodes import (
    CorruptHeartbeat,
    LivenessObserver,
    NodeRegistry,
    decode_node,
    encode_node,
    node_key,
)
from kfs_core.cluster.view import NodeInfo
from kfs_core.storage import ObjectStore

NS = "ns"


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _node(node_id: int = 1, **changes: object) -> NodeInfo:
    fields: dict[str, object] = {
        "node_id": node_id,
        "incarnation": f"inc-{node_id}",
        "listeners": {"PLAINTEXT": ("10.0.0.1", 9092), "SASL_SSL": ("kfs.example", 9094)},
        "durability": "store",
        "seq": 4,
        "held": {("orders", 0): 3, ("orders", 2): 5},
        "rack": "r1",
    }
    fields.update(changes)
    return NodeInfo(**fields)  # type: ignore[arg-type]


def test_document_round_trip_and_layout() -> None:
    info = _node()
    data = encode_node(info, heartbeat_ms=1_764_300_000_000)
    assert decode_node(data) == info
    doc = json.loads(data)
    assert doc == {
        "node_id": 1,
        "incarnation": "inc-1",
        "state": "running",
        "seq": 4,
        "durability": "store",
        "listeners": {"PLAINTEXT": ["10.0.0.1", 9092], "SASL_SSL": ["kfs.example", 9094]},
        "held": [
            {"topic": "orders", "partition": 0, "epoch": 3},
            {"topic": "orders", "partition": 2, "epoch": 5},
        ],
        "rack": "r1",
        "heartbeat_ms": 1_764_300_000_000,
    }
    stopped = _node(state="stopped", held={}, rack=None)
    assert decode_node(encode_node(stopped)) == stopped


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"node_id": 1}',
        json.dumps({**json.loads(encode_node(_node())), "state": "paused"}).encode(),
        json.dumps({**json.loads(encode_node(_node())), "seq": "4"}).encode(),
        json.dumps({**json.loads(encode_node(_node())), "node_id": True}).encode(),
        json.dumps({**json.loads(encode_node(_node())), "held": [{"topic": "t"}]}).encode(),
        json.dumps({**json.loads(encode_node(_node())), "listeners": {"P": ["h"]}}).encode(),
    ],
)
def test_corrupt_documents_are_refused(data: bytes) -> None:
    with pytest.raises(CorruptHeartbeat, match=r"nodes/7\.json"):
        decode_node(data, "ns/_cluster/nodes/7.json")


def test_registry_writes_and_reads_every_node(store: ObjectStore) -> None:
    registry = NodeRegistry(store, NS)
    registry.write(_node(2))
    registry.write(_node(1))
    registry.write(_node(1, seq=5))
    assert node_key(NS, 2) == "ns/_cluster/nodes/2.json"
    assert [(n.node_id, n.seq) for n in registry.read_all()] == [(1, 5), (2, 4)]
    assert registry.read(2) == _node(2)
    assert registry.read(3) is None
    assert NodeRegistry(store, "other").read_all() == []


def test_a_corrupt_heartbeat_is_skipped_with_one_warning(
    local_store: ObjectStore, caplog: pytest.LogCaptureFixture
) -> None:
    registry = NodeRegistry(local_store, NS)
    registry.write(_node(1))
    local_store.put(node_key(NS, 2), b"{not json")
    with caplog.at_level(logging.WARNING, logger="kfs_core.cluster.nodes"):
        for _ in range(3):
            assert [n.node_id for n in registry.read_all()] == [1]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "nodes/2.json" in warnings[0].getMessage()
    # Repaired, then broken again differently: warned again.
    registry.write(_node(2))
    assert [n.node_id for n in registry.read_all()] == [1, 2]
    local_store.put(node_key(NS, 2), b"[]")
    with caplog.at_level(logging.WARNING, logger="kfs_core.cluster.nodes"):
        assert [n.node_id for n in registry.read_all()] == [1]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_a_node_is_live_while_its_seq_moves() -> None:
    clock = FakeClock()
    observer = LivenessObserver(9000, clock, max_gap_s=math.inf)
    observer.observe([_node(1, seq=1), _node(2, seq=1)])
    assert [n.node_id for n in observer.live()] == [1, 2]
    clock.advance(5)
    observer.observe([_node(1, seq=2), _node(2, seq=1)])  # 2 did not move
    clock.advance(4.5)
    assert [n.node_id for n in observer.live()] == [1]
    assert [n.node_id for n in observer.dead()] == [2]
    assert observer.is_live(1) and not observer.is_live(2) and not observer.is_live(3)
    # A new incarnation with a lower seq is a move too.
    observer.observe([_node(2, seq=0, incarnation="again")])
    assert [n.node_id for n in observer.live()] == [1, 2]
    assert observer.get(2) is not None and observer.get(2).incarnation == "again"  # type: ignore[union-attr]


def test_a_missing_heartbeat_keeps_the_last_one_seen() -> None:
    clock = FakeClock()
    observer = LivenessObserver(1000, clock, max_gap_s=math.inf)
    observer.observe([_node(1)])
    observer.observe([])
    assert [n.node_id for n in observer.live()] == [1]
    clock.advance(1.0)
    assert [n.node_id for n in observer.dead()] == [1]


def test_stopped_nodes_are_neither_live_nor_dead() -> None:
    clock = FakeClock()
    observer = LivenessObserver(1000, clock, max_gap_s=math.inf)
    observer.observe([_node(1, state="stopped", seq=9), _node(2)])
    assert [n.node_id for n in observer.stopped()] == [1]
    assert [n.node_id for n in observer.live()] == [2]
    clock.advance(10)
    assert [n.node_id for n in observer.stopped()] == [1]
    assert [n.node_id for n in observer.dead()] == [2]
    # Restarted: running again under a new incarnation.
    observer.observe([_node(1, incarnation="new", seq=1)])
    assert [n.node_id for n in observer.live()] == [1]
    assert observer.stopped() == []


def test_an_observer_that_cannot_read_counts_nobody_dead() -> None:
    """Its own outage is not the others' death: the clock stands still while it is blind."""
    now = [0.0]
    observer = LivenessObserver(1000, clock=lambda: now[0])
    observer.observe([NodeInfo(1, "i", {}, "store", seq=1)])
    now[0] = 0.5
    observer.blind()
    now[0] = 5.0
    assert observer.is_live(1)
    observer.observe([NodeInfo(1, "i", {}, "store", seq=1)])  # read again: unchanged since
    assert observer.is_live(1)
    now[0] = 5.3
    observer.observe([NodeInfo(1, "i", {}, "store", seq=1)])
    now[0] = 5.6
    assert not observer.is_live(1)


def test_an_observer_that_was_not_looking_counts_nobody_dead_for_it() -> None:
    """A daemon paused past the session timeout does not come back counting the others dead."""
    now = [0.0]
    observer = LivenessObserver(1000, clock=lambda: now[0])
    observer.observe([NodeInfo(1, "i", {}, "store", seq=1)])
    now[0] = 0.4
    observer.observe([NodeInfo(1, "i", {}, "store", seq=1)])  # a read half a timeout apart
    now[0] = 5.0  # paused: nothing read for 4.6 s
    assert observer.is_live(1)  # not judged dead before the next read...
    observer.observe([NodeInfo(1, "i", {}, "store", seq=1)])
    assert observer.is_live(1)  # ...nor by it
    now[0] = 5.3
    observer.observe([NodeInfo(1, "i", {}, "store", seq=1)])
    assert observer.is_live(1)
    now[0] = 5.8  # a timeout of reads without a new heartbeat
    observer.observe([NodeInfo(1, "i", {}, "store", seq=1)])
    assert not observer.is_live(1)


def test_silent_nodes_and_the_next_death() -> None:
    """A node silent for a while is named before it is dead; its death is foreseen to the tick."""
    clock = FakeClock()
    observer = LivenessObserver(4000, clock, max_gap_s=math.inf)
    assert observer.next_death() is None
    observer.observe([_node(1, seq=1), _node(2, seq=1)])
    assert observer.next_death() == pytest.approx(clock() + 4.0)
    clock.advance(1.5)
    observer.observe([_node(1, seq=2), _node(2, seq=1)])  # 2 did not move
    assert observer.silent(1.0) == [observer.get(2)]
    assert observer.silent(2.0) == []
    assert observer.next_death() == pytest.approx(clock() + 2.5)  # node 2's, the earlier
    clock.advance(2.5)
    assert [n.node_id for n in observer.dead()] == [2]
    assert observer.silent(0.0) == [observer.get(1)]  # the dead are not silent: they are dead
    assert observer.next_death() == pytest.approx(clock() + 1.5)  # node 1's now
    observer.observe([_node(1, seq=3), _node(2, seq=1)])
    assert observer.silent(0.5) == []


def test_the_next_death_stands_in_the_past_while_the_observer_is_blind() -> None:
    clock = FakeClock()
    observer = LivenessObserver(1000, clock, max_gap_s=math.inf)
    observer.observe([_node(1, seq=1)])
    observer.blind()
    clock.advance(5)
    assert observer.is_live(1)
    death = observer.next_death()
    assert death is not None and death < clock()  # the keeper's loop ticks on its interval


def test_a_node_counted_dead_stays_dead_while_the_clock_stands_still() -> None:
    """A long tick (it took the dead node's partitions over) does not bring the node back."""
    clock = FakeClock()
    observer = LivenessObserver(1000, clock, max_gap_s=0.5)
    observer.observe([_node(1, seq=1), _node(2, seq=1)])
    clock.advance(0.45)
    observer.observe([_node(1, seq=1), _node(2, seq=2)])
    clock.advance(0.45)
    observer.observe([_node(1, seq=1), _node(2, seq=3)])  # 1 silent for 0.9 s
    clock.advance(0.15)  # the tick goes on after its read: 1 is dead now
    assert [n.node_id for n in observer.dead()] == [1]
    clock.advance(3.0)  # ... and takes 1's partitions over for 3 s
    observer.observe([_node(1, seq=1), _node(2, seq=3)])
    assert [n.node_id for n in observer.dead()] == [1]  # not back to life
    assert [n.node_id for n in observer.live()] == [2]  # 2 gets its time again
    observer.blind()
    clock.advance(3.0)
    observer.observe([_node(1, seq=1), _node(2, seq=3)])
    assert [n.node_id for n in observer.dead()] == [1]
    assert [n.node_id for n in observer.live()] == [2]
    observer.observe([_node(1, seq=2), _node(2, seq=3)])  # 1's heartbeat moves: live again
    assert [n.node_id for n in observer.live()] == [1, 2]
