"""`purge_deleted_topic`: a deleted topic's data goes, and its name is free again.

DeleteTopics only marks the topic deleted in the registry
(`TopicRegistry.delete_topic`); the daemon that answered it drops the topic
from its log at once (`LogManager.forget_topic`) and then purges it, in the
background, with this function (a daemon also purges, when it starts, every
topic still marked deleted; ``kfs topics delete`` purges at once).  For each
partition of the deleted topic:

1. take the partition's lease at a new epoch (`PartitionCatalog.take_lease`).
   A daemon that still held it is fenced: none of its later commits lands,
   and what it wrote to the store WAL under its old epoch is never replayed;
2. commit, fenced by that epoch, the removal of every live segment with the
   log start offset at the log's end -- or past it, above the last offset any
   daemon's WAL holds for the partition (the ``store`` durability mode's
   objects, the purging daemon's own WAL): a topic created later under the
   name starts above every offset the deleted one ever assigned, so no
   replay can take a record of the deleted topic for one of the new;
3. delete every object in the partition's directory but its catalog
   (``_log/``): the segments and indexes, tombstones retention had not yet
   deleted, and uploads whose commit never landed.

Then the registry record goes (`TopicRegistry.purge_topic`) and the name can
be created again.  The partitions' catalogs stay: a topic created later
under the same name continues their offsets above the deleted topic's, and
their lease epochs keep rising, so a deposed holder's epoch never becomes
valid again.  (Kafka's new topic starts at offset 0; here a consumer's old
position of the deleted topic is below the new log start, and its
``auto.offset.reset`` applies, as after retention.)

Every step can be repeated: a purge stopped half-way (the daemon died, the
store failed) is finished by the next.  Two purgers of one topic race on the
leases; the one fenced leaves the partition to the other.  A partition a dead
daemon with a local WAL held waits for that daemon to restart
(`dead_holder_refusal`), as a takeover would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from typing import Protocol

from kfs_core.catalog import layout
from kfs_core.catalog.actions import Action, RemoveSegment, SetLogStartOffset
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import PartitionState
from kfs_core.catalog.topics import TopicRecord, TopicRegistry
from kfs_core.clock import now_ms
from kfs_core.errors import FencedLeaderEpoch, LeaseConflict
from kfs_core.storage.base import ObjectStore

__all__ = [
    "PURGE_INCARNATION_PREFIX",
    "PurgeReport",
    "Refusal",
    "dead_holder_refusal",
    "empty_and_purge",
    "fence_partitions",
    "purge_deleted_topic",
]

log = logging.getLogger(__name__)

#: Leases a purge takes carry this incarnation prefix (the KFS page and
#: ``kfs cluster status`` show it as the holder of a deleted topic's partition).
PURGE_INCARNATION_PREFIX = "purge-"

#: Why a purge may not take a partition from its holder now (None: it may).
Refusal = Callable[[PartitionState], "str | None"]

#: Lease races lost in a row before a partition is left to the winner.
_LEASE_ATTEMPTS = 3


@dataclass
class PurgeReport:
    """What one purge did."""

    topic: str
    partitions: int = 0
    segments_removed: int = 0
    objects_deleted: int = 0
    #: Partitions not emptied: refused (`dead_holder_refusal`) or led at a newer
    #: epoch by another daemon.  A later purge finishes them.
    waiting: list[int] = field(default_factory=list)
    #: The registry record is gone: the name may be created again.
    purged: bool = False


def purge_deleted_topic(
    store: ObjectStore,
    namespace: str,
    name: str,
    *,
    node_id: int,
    incarnation: str,
    registry: TopicRegistry | None = None,
    refusal: Refusal = lambda state: None,
    wal_ends: Callable[[str], Mapping[int, int]] = lambda topic: {},
) -> PurgeReport:
    """Remove the data of deleted topic ``name``, then its registry record: the three steps.

    ``wal_ends(name)`` says, per partition, one past the last offset a WAL
    holds for it (`StoreWalReader.topic_ends`); it is asked after the leases
    are taken.

    A topic that is not marked deleted, or no longer in the registry, is left
    alone (`PurgeReport.purged` false, nothing counted).  Store errors
    propagate; what was done stays done, and a later purge finishes the rest.
    """
    registry = registry if registry is not None else TopicRegistry(store, namespace)
    record = registry.deleted_record(name)
    if record is None:
        return PurgeReport(name)
    epochs = fence_partitions(
        store, namespace, record, node_id=node_id, incarnation=incarnation, refusal=refusal
    )
    return empty_and_purge(store, namespace, record, epochs, wal_ends(name), registry=registry)


def fence_partitions(
    store: ObjectStore,
    namespace: str,
    record: TopicRecord,
    *,
    node_id: int,
    incarnation: str,
    refusal: Refusal = lambda state: None,
) -> dict[int, int]:
    """Step 1: each partition's lease at a new epoch; ``{partition: epoch}``.

    A partition is left out when ``refusal`` gives a reason not to take it
    from its holder (logged), or when every lease race was lost: the daemon
    that won leads it.  A later purge takes it.
    """
    epochs: dict[int, int] = {}
    for partition in range(record.partitions):
        catalog = PartitionCatalog(store, namespace, record.name, partition)
        why = refusal(catalog.refresh())
        if why is not None:
            log.info("deleted topic %r: partition %d waits: %s", record.name, partition, why)
            continue
        for _ in range(_LEASE_ATTEMPTS):
            try:
                state = catalog.take_lease(node_id, PURGE_INCARNATION_PREFIX + incarnation)
            except LeaseConflict:
                continue
            epochs[partition] = state.leader_epoch
            break
    return epochs


class Holder(Protocol):
    """What a daemon's heartbeat says of it (`kfs_core.cluster.view.NodeInfo`)."""

    @property
    def node_id(self) -> int: ...

    @property
    def incarnation(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def durability(self) -> str: ...


def dead_holder_refusal(
    state: PartitionState,
    heartbeats: Mapping[int, Holder],
    live: Set[int],
    *,
    unclean_leader_election: bool,
) -> str | None:
    """Why a purge may not take the partition from its lease holder now; None if it may.

    The rule a takeover follows (`kfs_core.cluster.leases`): a dead daemon
    whose WAL is local (durability other than ``store``) may hold records of
    the partition it acknowledged and never flushed.  Taken from it, they
    would be replayed when it restarts, into whatever topic then has the
    name; so the purge waits for it to restart (its recovery flushes them
    into the deleted topic, and the next purge removes them), unless
    ``unclean.leader.election.enable`` accepts their loss.
    """
    if state.leader_epoch == 0 or unclean_leader_election:
        return None
    node = heartbeats.get(state.leader_node_id)
    if (
        node is None
        or node.incarnation != state.leader_incarnation
        or node.state == "stopped"
        or node.durability == "store"
        or node.node_id in live
    ):
        return None
    return (
        f"dead node {node.node_id} held it and its WAL (durability {node.durability}) may hold "
        "records of it: purged once that node restarts (or unclean.leader.election.enable)"
    )


def empty_and_purge(
    store: ObjectStore,
    namespace: str,
    record: TopicRecord,
    epochs: Mapping[int, int],
    wal_ends: Mapping[int, int] | None = None,
    *,
    registry: TopicRegistry | None = None,
) -> PurgeReport:
    """Steps 2 and 3 under the leases `fence_partitions` took, then the registry record.

    ``wal_ends``: per partition, one past the last offset a WAL holds for it;
    the log starts at least there.
    """
    registry = registry if registry is not None else TopicRegistry(store, namespace)
    name = record.name
    report = PurgeReport(name, partitions=record.partitions)
    for partition in range(record.partitions):
        epoch = epochs.get(partition)
        catalog = PartitionCatalog(store, namespace, name, partition)
        start = (wal_ends or {}).get(partition, 0)
        if epoch is None or not _empty(catalog, epoch, start, report):
            report.waiting.append(partition)
    if report.waiting:
        log.warning(
            "deleted topic %r: partitions %s are not purged yet; a later purge removes "
            "their data and frees the name",
            name,
            report.waiting,
        )
        return report
    registry.purge_topic(name)
    report.purged = True
    log.info(
        "purged deleted topic %r: %d partition(s), %d segment(s), %d object(s) deleted",
        name,
        report.partitions,
        report.segments_removed,
        report.objects_deleted,
    )
    return report


def _empty(catalog: PartitionCatalog, epoch: int, start: int, report: PurgeReport) -> bool:
    """Remove every live segment and start the log at ``start`` or the end, fenced by ``epoch``.

    Then delete the objects.  False if another daemon leads the partition now.
    """
    state = catalog.refresh()
    live = list(state.segments)
    start = max(start, state.high_watermark)
    now = now_ms()
    actions: list[Action] = [
        RemoveSegment(key=s.key, base_offset=s.base_offset, removed_ms=now) for s in live
    ]
    if start > state.log_start_offset:
        actions.append(SetLogStartOffset(offset=start, past_end=True))
    try:
        if actions:
            catalog.commit(actions, operation="purge", leader_epoch=epoch)
        elif state.leader_epoch != epoch:
            return False
    except FencedLeaderEpoch:
        return False
    report.segments_removed += len(live)
    report.objects_deleted += _delete_data(catalog)
    return True


def _delete_data(catalog: PartitionCatalog) -> int:
    """Delete the partition's objects outside ``_log/``; how many."""
    prefix = layout.join(catalog.namespace, layout.partition_dir(catalog.topic, catalog.partition))
    keep = layout.log_prefix(catalog.namespace, catalog.topic, catalog.partition)
    doomed = [i.key for i in catalog.store.list(prefix + "/") if not i.key.startswith(keep)]
    for key in doomed:
        catalog.store.delete(key)
    return len(doomed)
