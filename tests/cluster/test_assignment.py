"""The assignment: even, the same everywhere, and moving little when nodes come and go."""

from __future__ import annotations

import subprocess
import sys

from kfs_core.cluster.assignment import assign, assign_topic, weight

PARTITIONS = [(f"topic-{t}", p) for t in range(10) for p in range(30)]  # 300


def _moved(before: dict[tuple[str, int], int], after: dict[tuple[str, int], int]) -> int:
    return sum(1 for tp, node in before.items() if after[tp] != node)


def test_no_nodes_no_assignment() -> None:
    assert assign(PARTITIONS, []) == {}
    assert assign([], [1, 2]) == {}


def test_every_partition_assigned_evenly() -> None:
    for nodes in ([0], [0, 1], [1, 5, 9], [0, 1, 2, 3, 4, 5, 6]):
        result = assign(PARTITIONS, nodes)
        assert set(result) == set(PARTITIONS)
        counts = [sum(1 for n in result.values() if n == node) for node in nodes]
        assert max(counts) - min(counts) <= 1, counts


def test_input_order_and_duplicates_do_not_matter() -> None:
    forward = assign(PARTITIONS, [3, 1, 2])
    backward = assign(list(reversed(PARTITIONS)) + PARTITIONS[:5], [2, 2, 1, 3])
    assert forward == backward


def test_the_same_in_another_process() -> None:
    # Another interpreter has another hash() salt: the weights must not depend on it.
    code = (
        "from kfs_core.cluster.assignment import assign;"
        "print(sorted(assign([('a', p) for p in range(40)], [0, 1, 2]).items()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(sys.path)},
    ).stdout
    assert out.strip() == str(sorted(assign([("a", p) for p in range(40)], [0, 1, 2]).items()))


def test_weight_is_pinned() -> None:
    # The weight is part of the cluster's contract: daemons of different versions
    # must agree, so the function may never change.
    import hashlib

    digest = hashlib.blake2b(b"orders\x007\x003", digest_size=8).digest()
    assert weight("orders", 7, 3) == int.from_bytes(digest, "big")


def test_a_joining_node_moves_about_one_nth() -> None:
    for n in (2, 3, 4, 6):
        before = assign(PARTITIONS, list(range(n)))
        after = assign(PARTITIONS, list(range(n + 1)))
        moved = _moved(before, after)
        # Ideal is len/(n+1) moving to the newcomer; allow twice that.
        assert moved <= 2 * len(PARTITIONS) / (n + 1), (n, moved)
        assert sum(1 for node in after.values() if node == n) >= len(PARTITIONS) // (n + 1)


def test_a_leaving_node_moves_about_only_its_own() -> None:
    for n in (3, 4, 6):
        nodes = list(range(n))
        before = assign(PARTITIONS, nodes)
        leaver = nodes[1]
        own = sum(1 for node in before.values() if node == leaver)
        after = assign(PARTITIONS, [x for x in nodes if x != leaver])
        moved = _moved(before, after)
        assert moved >= own
        # The fair-share cap may move a few more; never many.
        assert moved <= own + len(PARTITIONS) // (2 * n), (n, own, moved)


# --- pins: the operator's placements (kfs partitions reassign) ----------------------------


def test_a_pinned_partition_goes_to_its_live_target_and_nothing_else_moves() -> None:
    nodes = [1, 2, 3]
    before = assign(PARTITIONS, nodes)
    moved = PARTITIONS[:40:7]
    pins = {tp: next(n for n in nodes if n != before[tp]) for tp in moved}
    after = assign(PARTITIONS, nodes, pins)
    assert {tp: after[tp] for tp in moved} == pins
    assert {tp: n for tp, n in after.items() if tp not in pins} == {
        tp: n for tp, n in before.items() if tp not in pins
    }


def test_a_pin_to_a_node_that_is_not_live_leaves_the_computed_placement() -> None:
    nodes = [1, 2, 3]
    tp = PARTITIONS[5]
    assert assign(PARTITIONS, nodes, {tp: 9}) == assign(PARTITIONS, nodes)
    # Once the target is live, the pin applies again.
    assert assign(PARTITIONS, [*nodes, 9], {tp: 9})[tp] == 9


def test_a_pin_of_an_unknown_partition_changes_nothing() -> None:
    assert assign(PARTITIONS, [1, 2], {("elsewhere", 0): 1}) == assign(PARTITIONS, [1, 2])
    assert assign([], [1, 2], {("elsewhere", 0): 1}) == {}
    assert assign(PARTITIONS, [], {PARTITIONS[0]: 1}) == {}


def test_pins_come_out_the_same_whatever_the_order() -> None:
    pins = {PARTITIONS[0]: 2, PARTITIONS[1]: 2, PARTITIONS[299]: 1}
    forward = assign(PARTITIONS, [3, 1, 2], pins)
    backward = assign(list(reversed(PARTITIONS)), [2, 1, 3], dict(reversed(pins.items())))
    assert forward == backward


def test_assign_topic_honours_pins_by_partition_number() -> None:
    plain = assign_topic("orders", 6, [1, 2, 3])
    target = next(n for n in (1, 2, 3) if n != plain[4])
    pinned = assign_topic("orders", 6, [1, 2, 3], {4: target, 9: 1})
    assert pinned == tuple(target if p == 4 else plain[p] for p in range(6))
    assert assign_topic("orders", 6, [], {4: 1}) == ()
