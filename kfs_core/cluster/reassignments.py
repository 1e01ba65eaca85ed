"""Pinned placements: the partitions an operator moved by hand (`kfs partitions reassign`).

The pins are one JSON document per version, under ``{ns}/_cluster/reassignments/``::

    {version:020}.json
    {"version": 3, "updated_ms": 1764300000000,
     "partitions": [{"topic": "t", "partition": 0, "node_id": 2}]}

Each version is complete, so the newest readable one is the set of pins.  A
change (`ReassignmentStore.update`) reads the newest version, applies itself
and writes the next with put-if-absent; the loser of a race re-reads and
applies its change again to the winner's document, so two operators never
lose each other's pins.  The store has no compare-and-swap on a fixed key,
which is why versions are separate objects (as the topic registry's
revisions and the ACL documents are); the newest `KEEP_VERSIONS` are kept.

A daemon reads the pins in every heartbeat tick through a
`ReassignmentFollower`: one GET of the version after the one it has, which is
absent unless someone changed the pins, and a LIST instead at its first read
and every `RELIST_READS` reads, which catches up a daemon that fell more than
`KEEP_VERSIONS` behind (paused, or cut off from the store).  A document that
cannot be read leaves the last good pins in force, with one WARNING line.
What the pins do to the assignment is `kfs_core.cluster.assignment`'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kfs_core.clock import now_ms
from kfs_core.errors import CorruptionError, KfsError, ObjectAlreadyExists, ObjectNotFound
from kfs_core.namespace import CLUSTER_DIR
from kfs_core.storage import ObjectStore

__all__ = [
    "KEEP_VERSIONS",
    "REASSIGNMENTS_DIR",
    "RELIST_READS",
    "CorruptReassignments",
    "ReassignmentFollower",
    "ReassignmentStore",
    "Reassignments",
    "decode_reassignments",
    "encode_reassignments",
    "reassignments_prefix",
]

log = logging.getLogger(__name__)

REASSIGNMENTS_DIR = "reassignments"
#: How many versions a change leaves in the store (the newest ones).
KEEP_VERSIONS = 10
#: A follower LISTs the versions once in this many reads, and GETs the next one otherwise.
RELIST_READS = 30
#: How many times `ReassignmentStore.update` re-reads after losing the race to write.
_UPDATE_ATTEMPTS = 20

TopicPartition = tuple[str, int]


class CorruptReassignments(CorruptionError):
    """A reassignment document that is not the JSON `encode_reassignments` writes."""


#: What is told of each unreadable version passed over: its number and why.
OnCorrupt = Callable[[int, CorruptReassignments], None]


@dataclass(frozen=True)
class Reassignments:
    """The pins of one version: each pinned partition's target node id.

    ``version`` -1 is the state before any document was written: no pins.
    """

    version: int = -1
    targets: Mapping[TopicPartition, int] = field(default_factory=dict)

    def of_topic(self, topic: str) -> dict[int, int]:
        """``{partition: node_id}`` of the pins of ``topic``."""
        return {p: node for (t, p), node in self.targets.items() if t == topic}


def reassignments_prefix(namespace: str) -> str:
    """The prefix every version of ``namespace``'s reassignment document starts with."""
    return f"{namespace}/{CLUSTER_DIR}/{REASSIGNMENTS_DIR}/"


def encode_reassignments(pins: Reassignments, *, updated_ms: int | None = None) -> bytes:
    """The document of ``pins``; ``updated_ms`` (for people reading it) defaults to now."""
    doc = {
        "version": pins.version,
        "updated_ms": now_ms() if updated_ms is None else updated_ms,
        "partitions": [
            {"topic": topic, "partition": partition, "node_id": node}
            for (topic, partition), node in sorted(pins.targets.items())
        ],
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _corrupt(key: str, message: str, offset: int = 0) -> CorruptReassignments:
    return CorruptReassignments(message, object_name=key, offset=offset)


def _int_field(doc: dict[str, Any], name: str, key: str) -> int:
    value = doc.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _corrupt(key, f"field {name!r} is {value!r}, not a non-negative integer")
    return value


def decode_reassignments(data: bytes, key: str = "<reassignments>") -> Reassignments:
    """The pins a document holds; `CorruptReassignments` naming ``key`` if it is not one."""
    try:
        doc = json.loads(data)
    except UnicodeDecodeError as exc:
        raise _corrupt(key, f"not UTF-8: {exc.reason}", exc.start) from exc
    except json.JSONDecodeError as exc:
        raise _corrupt(key, f"not JSON: {exc.msg}", exc.pos) from exc
    if not isinstance(doc, dict):
        raise _corrupt(key, "not a JSON object")
    version = _int_field(doc, "version", key)
    entries = doc.get("partitions")
    if not isinstance(entries, list):
        raise _corrupt(key, f"field 'partitions' is {entries!r}, not a list")
    targets: dict[TopicPartition, int] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise _corrupt(key, f"partition entry {entry!r}")
        tp = (entry["topic"], _int_field(entry, "partition", key))
        if tp in targets:
            raise _corrupt(key, f"partition {tp[0]}-{tp[1]} is pinned twice")
        targets[tp] = _int_field(entry, "node_id", key)
    return Reassignments(version, targets)


class ReassignmentStore:
    """Reads and changes the reassignment documents of one namespace (blocking store calls)."""

    def __init__(self, store: ObjectStore, namespace: str) -> None:
        self._store = store
        self._prefix = reassignments_prefix(namespace)

    def key(self, version: int) -> str:
        """The key of one version of the document."""
        return f"{self._prefix}{version:020d}.json"

    def versions(self) -> list[int]:
        """Every version in the store, oldest first (one LIST)."""
        out = []
        for info in self._store.list(self._prefix):
            leaf = info.key[len(self._prefix) :]
            if leaf.endswith(".json") and leaf[:-5].isdigit():
                out.append(int(leaf[:-5]))
        return sorted(out)

    def read(self, version: int) -> Reassignments:
        """One version; `ObjectNotFound` if absent, `CorruptReassignments` if unreadable.

        A document whose version field is not the one its key names is corrupt too.
        """
        key = self.key(version)
        pins = decode_reassignments(self._store.get(key), key)
        if pins.version != version:
            raise _corrupt(key, f"holds version {pins.version}")
        return pins

    def newest(
        self,
        versions: list[int] | None = None,
        on_corrupt: OnCorrupt | None = None,
    ) -> Reassignments:
        """The newest readable version of ``versions`` (default: a LIST); no pins if none is.

        Each unreadable version passed over goes to ``on_corrupt`` (default: a WARNING).
        """
        for version in reversed(self.versions() if versions is None else versions):
            try:
                return self.read(version)
            except ObjectNotFound:
                continue  # pruned between the listing and the get
            except CorruptReassignments as exc:
                if on_corrupt is None:
                    log.warning("skipping a corrupt reassignment document: %s", exc)
                else:
                    on_corrupt(version, exc)
        return Reassignments()

    def update(
        self,
        change: Callable[[Reassignments], Mapping[TopicPartition, int]],
        on_corrupt: OnCorrupt | None = None,
    ) -> Reassignments:
        """Write ``change(newest pins)`` as the next version; the pins then in force.

        ``change`` may run more than once (after a lost race it sees the
        winner's pins); when it changes nothing, nothing is written.
        """
        for _ in range(_UPDATE_ATTEMPTS):
            versions = self.versions()
            current = self.newest(versions, on_corrupt)
            targets = dict(change(current))
            if targets == dict(current.targets):
                return current
            written = Reassignments((versions[-1] if versions else -1) + 1, targets)
            try:
                self._store.put_if_absent(self.key(written.version), encode_reassignments(written))
            except ObjectAlreadyExists:
                continue  # another operator's change landed first: apply ours to theirs
            for old in versions[: max(0, len(versions) + 1 - KEEP_VERSIONS)]:
                self._store.delete(self.key(old))
            return written
        raise KfsError(
            f"the partition reassignments kept changing under {_UPDATE_ATTEMPTS} attempts "
            "to update them"
        )


class ReassignmentFollower:
    """The pins as a daemon follows them, read once per heartbeat tick; `read` never raises."""

    def __init__(self, documents: ReassignmentStore, *, relist_reads: int = RELIST_READS) -> None:
        self._documents = documents
        self._relist_reads = relist_reads
        self._current = Reassignments()
        self._cursor: int | None = None  # the newest version seen, readable or not
        self._reads = 0
        self._failing = False
        self._warned: set[int] = set()

    @property
    def current(self) -> Reassignments:
        """The pins in force here: those of the newest version read that could be decoded."""
        return self._current

    def read(self) -> Reassignments:
        """The pins now; after a store error, the last good ones (one WARNING per outage)."""
        try:
            if self._cursor is None or self._reads % self._relist_reads == 0:
                self._relist()
            else:
                self._probe(self._cursor)
        except (KfsError, OSError) as exc:
            if not self._failing:
                self._failing = True
                log.warning(
                    "reading the partition reassignments failed; keeping version %d: %s",
                    self._current.version,
                    exc,
                )
            return self._current
        finally:
            self._reads += 1
        if self._failing:
            self._failing = False
            log.info("reading the partition reassignments works again")
        return self._current

    def _relist(self) -> None:
        versions = self._documents.versions()
        newest = versions[-1] if versions else -1
        if newest != self._current.version:
            # Also a reset: someone removed the documents and wrote from 0 again.
            fresh = [v for v in versions if v not in self._warned]
            self._current = self._documents.newest(fresh, self._warn)
        self._cursor = newest

    def _probe(self, cursor: int) -> None:
        for version in range(cursor + 1, cursor + 1 + KEEP_VERSIONS):
            try:
                self._current = self._documents.read(version)
            except ObjectNotFound:
                return
            except CorruptReassignments as exc:
                self._warn(version, exc)
            self._cursor = version

    def _warn(self, version: int, exc: CorruptReassignments) -> None:
        if version not in self._warned:
            self._warned.add(version)
            log.warning(
                "skipping a corrupt reassignment document (keeping version %d): %s",
                self._current.version,
                exc,
            )
