"""The daemons' heartbeats in ``{ns}/_cluster/nodes/`` and who is live by them.

Each daemon writes one JSON document, ``{ns}/_cluster/nodes/{node_id}.json``,
every heartbeat interval; it is the only writer of that key, so a plain put
will do.  The document::

    {"node_id": 3, "incarnation": "9f0c...", "state": "running", "seq": 41,
     "durability": "store", "listeners": {"PLAINTEXT": ["host", 9092]},
     "held": [{"topic": "t", "partition": 0, "epoch": 7}],
     "rack": null, "heartbeat_ms": 1764300000000}

``heartbeat_ms`` is the writer's wall clock, for people reading the document;
nothing compares it.  Liveness is `LivenessObserver`'s: a node is live while
its ``(incarnation, seq)`` keeps changing, timed by the observer's own
monotonic clock, so no two machines' clocks are ever compared.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kfs_core.clock import now_ms
from kfs_core.cluster.view import NodeInfo
from kfs_core.errors import KfsError, ObjectNotFound
from kfs_core.namespace import CLUSTER_DIR
from kfs_core.storage import ObjectStore

__all__ = [
    "NODES_DIR",
    "CorruptHeartbeat",
    "LivenessObserver",
    "NodeIdInUse",
    "NodeRegistry",
    "decode_node",
    "encode_node",
    "node_key",
    "nodes_prefix",
]

log = logging.getLogger(__name__)

NODES_DIR = "nodes"


class NodeIdInUse(KfsError):
    """Another live daemon already runs under this node id in the namespace."""


class CorruptHeartbeat(KfsError):
    """A heartbeat document that is not the JSON `encode_node` writes."""


def nodes_prefix(namespace: str) -> str:
    """The prefix every heartbeat of ``namespace`` starts with."""
    return f"{namespace}/{CLUSTER_DIR}/{NODES_DIR}/"


def node_key(namespace: str, node_id: int) -> str:
    """The key of node ``node_id``'s heartbeat."""
    return f"{nodes_prefix(namespace)}{node_id}.json"


def encode_node(info: NodeInfo, *, heartbeat_ms: int | None = None) -> bytes:
    """The heartbeat document of ``info``; ``heartbeat_ms`` defaults to the wall clock now."""
    held = [
        {"topic": topic, "partition": partition, "epoch": epoch}
        for (topic, partition), epoch in sorted(info.held.items())
    ]
    doc = {
        "node_id": info.node_id,
        "incarnation": info.incarnation,
        "state": info.state,
        "seq": info.seq,
        "durability": info.durability,
        "listeners": {name: [host, port] for name, (host, port) in info.listeners.items()},
        "held": held,
        "rack": info.rack,
        "heartbeat_ms": now_ms() if heartbeat_ms is None else heartbeat_ms,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _field(doc: dict[str, Any], name: str, kind: type | tuple[type, ...], key: str) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CorruptHeartbeat(f"{key}: field {name!r} is {value!r}")
    return value


def decode_node(data: bytes, key: str = "<heartbeat>") -> NodeInfo:
    """The `NodeInfo` of a heartbeat document; `CorruptHeartbeat` naming ``key`` if it is not one."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptHeartbeat(f"{key}: not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CorruptHeartbeat(f"{key}: not a JSON object")
    state = _field(doc, "state", str, key)
    if state not in ("running", "stopped"):
        raise CorruptHeartbeat(f"{key}: unknown state {state!r}")
    listeners: dict[str, tuple[str, int]] = {}
    for name, address in _field(doc, "listeners", dict, key).items():
        if (
            not isinstance(address, list)
            or len(address) != 2
            or not isinstance(address[0], str)
            or not isinstance(address[1], int)
        ):
            raise CorruptHeartbeat(f"{key}: listener {name!r} is {address!r}")
        listeners[name] = (address[0], address[1])
    held: dict[tuple[str, int], int] = {}
    for entry in _field(doc, "held", list, key):
        if not isinstance(entry, dict):
            raise CorruptHeartbeat(f"{key}: held entry {entry!r}")
        topic = _field(entry, "topic", str, key)
        partition = _field(entry, "partition", int, key)
        held[(topic, partition)] = _field(entry, "epoch", int, key)
    rack = doc.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise CorruptHeartbeat(f"{key}: field 'rack' is {rack!r}")
    return NodeInfo(
        node_id=_field(doc, "node_id", int, key),
        incarnation=_field(doc, "incarnation", str, key),
        listeners=listeners,
        durability=_field(doc, "durability", str, key),
        state=state,
        seq=_field(doc, "seq", int, key),
        held=held,
        rack=rack,
    )


class NodeRegistry:
    """Reads and writes the heartbeat documents of one namespace (blocking store calls)."""

    def __init__(self, store: ObjectStore, namespace: str) -> None:
        self._store = store
        self._namespace = namespace
        # Keys already reported corrupt, with the bytes found, so each bad version warns once.
        self._warned: dict[str, bytes] = {}

    @property
    def namespace(self) -> str:
        """The namespace whose heartbeats these are."""
        return self._namespace

    def write(self, info: NodeInfo) -> None:
        """Put ``info``'s heartbeat (a plain put: each node id has one writer)."""
        self._store.put(node_key(self._namespace, info.node_id), encode_node(info))

    def read(self, node_id: int) -> NodeInfo | None:
        """Node ``node_id``'s heartbeat, None if it has none or it is corrupt."""
        key = node_key(self._namespace, node_id)
        try:
            data = self._store.get(key)
        except ObjectNotFound:
            return None
        return self._decode(key, data)

    def read_all(self) -> list[NodeInfo]:
        """Every readable heartbeat, by node id; corrupt ones are skipped with one WARNING."""
        nodes: list[NodeInfo] = []
        for obj in self._store.list(nodes_prefix(self._namespace)):
            if not obj.key.endswith(".json"):
                continue
            try:
                data = self._store.get(obj.key)
            except ObjectNotFound:
                continue  # deleted between the listing and the get
            info = self._decode(obj.key, data)
            if info is not None:
                nodes.append(info)
        return sorted(nodes, key=lambda n: n.node_id)

    def _decode(self, key: str, data: bytes) -> NodeInfo | None:
        try:
            info = decode_node(data, key)
        except CorruptHeartbeat as exc:
            if self._warned.get(key) != data:
                self._warned[key] = data
                log.warning("skipping a corrupt heartbeat: %s", exc)
            return None
        self._warned.pop(key, None)
        return info


@dataclass
class _Seen:
    info: NodeInfo
    first_seen: float  # the observer's monotonic clock when this (incarnation, seq) appeared
    counted_dead: bool = False  # once counted dead, until the heartbeat moves


class LivenessObserver:
    """Who is live, by when this observer first saw each node's latest heartbeat.

    A running node is live while its latest ``(incarnation, seq)`` was first
    seen less than ``session_timeout_ms`` ago, dead once it is older; a node
    whose heartbeat says ``stopped`` is neither.  A node seen for the first
    time counts from that moment: after a restart of the observer every node
    gets a full session timeout before it can be counted dead.  While the
    observer cannot read the heartbeats (`blind`), its clock stands still for
    them: a daemon cut off from the store counts nobody dead for its own outage.
    The same goes for a gap since the last read longer than ``max_gap_s`` (half
    the session timeout by default): the observer was not looking (its process
    was paused, its loop stalled), so a daemon paused past its lease does not
    come back counting the others dead -- before or after its next read -- and
    take their partitions from them.
    """

    def __init__(
        self,
        session_timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_gap_s: float | None = None,
    ) -> None:
        self._timeout = session_timeout_ms / 1000
        self._max_gap = self._timeout / 2 if max_gap_s is None else max_gap_s
        self._clock = clock
        self._seen: dict[int, _Seen] = {}
        self._blind_since: float | None = None
        self._last_observed: float | None = None

    def blind(self) -> None:
        """Reading the heartbeats failed: stop the clock until the next `observe`."""
        if self._blind_since is None:
            self._blind_since = self._clock()

    def _now(self) -> float:
        """The clock heartbeats are judged by: it stands still while this observer is not looking."""
        if self._blind_since is not None:
            return self._blind_since
        now = self._clock()
        if self._last_observed is not None and now - self._last_observed > self._max_gap:
            return self._last_observed  # no read for a while: nobody dies until the next one
        return now

    def observe(self, nodes: Sequence[NodeInfo]) -> None:
        """Take in the heartbeats just read; a node missing from them keeps its last one."""
        now = self._clock()
        unseen = 0.0  # time nobody's heartbeat was looked at
        if self._blind_since is not None:
            unseen = now - self._blind_since
            self._blind_since = None
        elif self._last_observed is not None and now - self._last_observed > self._max_gap:
            unseen = now - self._last_observed
        for earlier in self._seen.values():
            earlier.first_seen += unseen  # a node counted dead stays dead all the same
        self._last_observed = now
        for info in nodes:
            seen = self._seen.get(info.node_id)
            if seen is None or (seen.info.incarnation, seen.info.seq) != (
                info.incarnation,
                info.seq,
            ):
                self._seen[info.node_id] = _Seen(info, now)
            else:
                seen.info = info

    def get(self, node_id: int) -> NodeInfo | None:
        """The latest heartbeat seen of ``node_id``, None if never seen."""
        seen = self._seen.get(node_id)
        return None if seen is None else seen.info

    def is_live(self, node_id: int) -> bool:
        """Whether ``node_id`` is running and its heartbeat moved within the session timeout."""
        seen = self._seen.get(node_id)
        return seen is not None and self._is_live(seen, self._now())

    def _is_live(self, seen: _Seen, now: float) -> bool:
        """Live: running, and its heartbeat moved within the timeout.

        A node once counted dead stays dead until its heartbeat moves, even
        if the clock stands still later (its partitions may have been taken
        over: they must not be handed back to it).
        """
        if seen.info.state != "running" or seen.counted_dead:
            return False
        if now - seen.first_seen >= self._timeout:
            seen.counted_dead = True
            return False
        return True

    def live(self) -> list[NodeInfo]:
        """The running nodes whose heartbeat moved within the session timeout, by node id."""
        now = self._now()
        return [s.info for _, s in sorted(self._seen.items()) if self._is_live(s, now)]

    def silent(self, for_s: float) -> list[NodeInfo]:
        """The live nodes whose heartbeat has not moved for ``for_s`` (not dead yet), by node id."""
        now = self._now()
        return [
            s.info
            for _, s in sorted(self._seen.items())
            if self._is_live(s, now) and now - s.first_seen >= for_s
        ]

    def next_death(self) -> float | None:
        """When the first live node is counted dead unless its heartbeat moves (None: none live).

        On the observer's clock; in the past while that clock stands still
        (`blind`, or no read for a while).
        """
        now = self._now()
        ends = [s.first_seen + self._timeout for s in self._seen.values() if self._is_live(s, now)]
        return min(ends, default=None)

    def dead(self) -> list[NodeInfo]:
        """The running nodes whose heartbeat has not moved for the session timeout, by node id."""
        now = self._now()
        return [
            s.info
            for _, s in sorted(self._seen.items())
            if s.info.state == "running" and not self._is_live(s, now)
        ]

    def stopped(self) -> list[NodeInfo]:
        """The nodes whose heartbeat says they stopped cleanly, by node id."""
        return [s.info for _, s in sorted(self._seen.items()) if s.info.state == "stopped"]
