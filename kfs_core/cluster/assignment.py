"""Which live node each partition belongs to: rendezvous hashing with a fair share.

Every daemon computes the assignment on its own, from the same inputs (the
live node ids and a topic's partition count: each topic is spread on its
own, `assign_topic`, so a daemon needs to know only the topics it is asked
about), so it must come out the
same on every machine: a weight is a BLAKE2b digest of the topic, the
partition and the node id joined by NUL bytes, never Python's salted ``hash()``.

Each partition, taken in sorted order, goes to the node that weighs it
highest among those still below their share (``partitions // nodes``, one
more for ``partitions % nodes`` of them).  Without the cap, rendezvous hashing moves only ``1/n`` of the
partitions when a node joins and only the leaver's when one leaves, but can
pile many on one node; the cap keeps the spread within one partition of even
at the price of a few more moves.

An operator can pin partitions to nodes (`kfs partitions reassign`, the
document of `kfs_core.cluster.reassignments`): a pinned partition goes to its
target while that node is live, and to its computed node otherwise.  The
others keep the placement they have without pins, so a reassignment moves
exactly the partitions it names, as Kafka's does; pins count for nothing in
the fair shares, which stay those of the whole topic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

__all__ = ["assign", "assign_topic", "weight"]


def weight(topic: str, partition: int, node: int) -> int:
    """The stable rendezvous weight of ``node`` for one partition (64 bits)."""
    digest = hashlib.blake2b(f"{topic}\0{partition}\0{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(
    partitions: Sequence[tuple[str, int]],
    nodes: Sequence[int],
    pins: Mapping[tuple[str, int], int] | None = None,
) -> dict[tuple[str, int], int]:
    """``{(topic, partition): node}`` for every partition; empty when there are no nodes.

    Each node's share is ``len(partitions) // len(nodes)``, and the
    ``len(partitions) % len(nodes)`` nodes that weigh the whole set highest
    take one more, so the spread is never more than one apart.  Then each
    partition ``pins`` names goes to its target node if that node is among
    ``nodes``; a pin of a partition not in ``partitions`` changes nothing.
    """
    candidates = sorted(set(nodes))
    if not candidates:
        return {}
    keys = sorted(set(partitions))
    base, extra = divmod(len(keys), len(candidates))
    first = keys[0] if keys else ("", 0)
    favoured = sorted(candidates, key=lambda n: (-weight(first[0], -1, n), n))[:extra]
    room = {n: base + (n in favoured) for n in candidates}
    result: dict[tuple[str, int], int] = {}
    for topic, partition in keys:
        # Ties (astronomically rare) go to the lower node id, the same everywhere.
        ranked = sorted(candidates, key=lambda n: (-weight(topic, partition, n), n))
        owner = next(n for n in ranked if room[n] > 0)
        room[owner] -= 1
        result[(topic, partition)] = owner
    for tp, target in (pins or {}).items():
        if tp in result and target in room:
            result[tp] = target
    return result


def assign_topic(
    topic: str, partitions: int, nodes: Sequence[int], pins: Mapping[int, int] | None = None
) -> tuple[int, ...]:
    """The node of each of ``topic``'s partitions, by partition number; empty without nodes.

    ``pins`` maps a partition number to the node it is pinned to (`assign`).
    """
    keyed = {(topic, p): node for p, node in (pins or {}).items()}
    owners = assign([(topic, p) for p in range(partitions)], nodes, keyed)
    return tuple(owners[(topic, p)] for p in range(partitions)) if owners else ()
