"""Restoring a topic's catalog from a snapshot (`kfs_core.catalog.snapshots`).

`restore_topic` makes each partition's live segments equal to the
snapshot's with one catalog commit per partition: live segments the snapshot
does not have are removed (they become tombstones, deleted by retention after
its grace period); snapshot segments that are no longer live are re-added.
What a restore can and cannot do, given the catalog's rules:

- Re-added segments are *copied* to fresh keys (``segment-{base}-r{token}.kfs``
  and its ``.index``) before the commit.  A removed segment's key may never
  be re-added while its tombstone exists (retention would delete the object
  under a live entry), and an untracked object may be swept as an orphan at
  any moment; a fresh copy is safe from both.  The copy's entry is the
  snapshot's entry with the new keys, so the restored partition holds the
  same offsets, bytes and timestamps.  A segment counts as present if its key
  is live or a live segment has the same offsets, sizes and timestamps (an
  earlier restore's copy), which makes a repeated restore a no-op.
- Every object to copy is checked before anything changes; if any segment or
  index object was deleted, the restore refuses with `SnapshotObjectsMissing`
  naming them.
- The log start offset only moves forwards and the high watermark never moves
  back, so offsets are never reused.  A restore therefore cannot bring back
  segments below the current log start offset (removed by retention, say):
  it refuses with `RestoreRefused` naming them, or with ``allow_partial=True``
  restores the rest and reports them.  Segments added after the snapshot
  (newer offsets) are removed like any other live segment the snapshot lacks;
  producers continue at the unchanged high watermark, leaving a gap in the
  offsets exactly as compaction does.
- The topic must still exist with the snapshot's topic id (a deleted and
  re-created topic reuses segment keys for different data).  Its config
  overrides are set back to the snapshot's (``restore_configs``), so that, for
  example, a too-short ``retention.ms`` does not remove the restored segments
  again; partitions added since the snapshot are left alone and reported.
- Commits race like any other writer's: a segment the daemon adds meanwhile
  stays; one that compaction or retention changed meanwhile aborts that
  partition's commit (reported as a conflict, its copies deleted); rerunning
  the restore finishes the job.  Restored segments are subject to retention
  like any others.

`plan_restore` works out what would change and checks it (nothing is
written); `restore_topic` copies the segments to re-add and commits each
partition.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from kfs_core.catalog import layout
from kfs_core.catalog.actions import Action, AddSegment, RemoveSegment, SegmentEntry
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.snapshots import (
    IO_THREADS,
    PartitionSnapshot,
    RestoreRefused,
    SnapshotError,
    SnapshotObjectsMissing,
    read_partition_state,
    read_snapshot,
    read_topic_record,
)
from kfs_core.catalog.state import Checkpoint, PartitionState
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.clock import now_ms
from kfs_core.errors import (
    InvalidCatalogAction,
    ObjectAlreadyExists,
    ObjectNotFound,
    ReplaceConflict,
    UnknownTopic,
)
from kfs_core.storage.base import ObjectStore

log = logging.getLogger(__name__)

#: How many missing object keys an error message names before it says "and N more".
MAX_KEYS_IN_MESSAGE = 10


def _identity(segment: SegmentEntry) -> tuple[int, ...]:
    """What makes two entries the same data whatever their keys (a restored copy)."""
    return (
        segment.base_offset,
        segment.last_offset,
        segment.record_count,
        segment.size_bytes,
        segment.index_size_bytes,
        segment.min_timestamp,
        segment.max_timestamp,
        segment.codec,
        segment.created_ms,
    )


@dataclass(frozen=True)
class PartitionRestorePlan:
    """What restoring one partition changes.

    ``remove``: live segments the snapshot does not have.  ``restore``:
    snapshot segments no longer live, at or above the log start offset (they
    are copied to fresh keys and re-added).  ``unrestorable``: snapshot
    segments that are not live and start below the current log start offset.
    """

    partition: int
    current_version: int
    snapshot_version: int
    log_start_offset: int
    snapshot_log_start_offset: int
    remove: tuple[SegmentEntry, ...]
    restore: tuple[SegmentEntry, ...]
    unrestorable: tuple[SegmentEntry, ...]

    @property
    def changes(self) -> bool:
        return bool(self.remove or self.restore)


@dataclass(frozen=True)
class RestorePlan:
    """What `restore_topic` would do; `plan_restore` computes it without changing anything."""

    namespace: str
    topic: str
    snapshot: str
    partitions: tuple[PartitionRestorePlan, ...]
    config_set: dict[str, str]  # overrides to set back to the snapshot's values
    config_delete: tuple[str, ...]  # overrides the snapshot did not have
    untouched_partitions: tuple[int, ...]  # added after the snapshot: left alone
    missing_objects: tuple[str, ...]  # store keys of objects a restore needs that are gone

    @property
    def unrestorable(self) -> tuple[SegmentEntry, ...]:
        return tuple(s for p in self.partitions for s in p.unrestorable)


@dataclass(frozen=True)
class PartitionRestoreOutcome:
    """``status``: ``restored`` (committed ``version``), ``unchanged`` or ``conflict``."""

    partition: int
    status: Literal["restored", "unchanged", "conflict"]
    version: int
    removed: tuple[str, ...]  # keys turned into tombstones
    added: tuple[str, ...]  # keys of the re-added copies
    message: str = ""


@dataclass(frozen=True)
class RestoreResult:
    plan: RestorePlan
    outcomes: tuple[PartitionRestoreOutcome, ...]
    configs_restored: bool
    dry_run: bool

    @property
    def ok(self) -> bool:
        """False if any partition's commit lost to a conflicting change (rerun the restore)."""
        return all(o.status != "conflict" for o in self.outcomes)


def _keys_message(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:MAX_KEYS_IN_MESSAGE])
    more = len(keys) - MAX_KEYS_IN_MESSAGE
    return shown + (f" and {more} more" if more > 0 else "")


def _check_objects(
    store: ObjectStore, namespace: str, segments: Sequence[SegmentEntry]
) -> list[str]:
    """Store keys of the segment and index objects that are gone or not the recorded size."""
    wanted = [(layout.join(namespace, s.key), s.size_bytes) for s in segments] + [
        (layout.join(namespace, s.index_key), s.index_size_bytes) for s in segments
    ]

    def problem(item: tuple[str, int]) -> str | None:
        key, size = item
        try:
            info = store.head(key)
        except ObjectNotFound:
            return key
        return None if info.size == size else f"{key} (size {info.size}, expected {size})"

    if not wanted:
        return []
    with ThreadPoolExecutor(min(IO_THREADS, len(wanted))) as pool:
        return sorted(p for p in pool.map(problem, wanted) if p is not None)


def _plan_partition(
    state: PartitionState, snapshot: Checkpoint | None, partition: PartitionSnapshot
) -> PartitionRestorePlan:
    wanted = snapshot.segments if snapshot is not None else ()
    wanted_keys = {s.key for s in wanted}
    wanted_ids = {_identity(s) for s in wanted}
    live_keys = {s.key for s in state.segments}
    live_ids = {_identity(s) for s in state.segments}
    remove = tuple(
        s for s in state.segments if s.key not in wanted_keys and _identity(s) not in wanted_ids
    )
    absent = [s for s in wanted if s.key not in live_keys and _identity(s) not in live_ids]
    lso = state.log_start_offset
    return PartitionRestorePlan(
        partition=partition.partition,
        current_version=state.version,
        snapshot_version=partition.version,
        log_start_offset=lso,
        snapshot_log_start_offset=partition.log_start_offset,
        remove=remove,
        restore=tuple(s for s in absent if s.base_offset >= lso),
        unrestorable=tuple(s for s in absent if s.base_offset < lso),
    )


def plan_restore(store: ObjectStore, namespace: str, topic: str, name: str) -> RestorePlan:
    """What restoring ``topic`` from snapshot ``name`` would change; changes nothing.

    Raises `SnapshotNotFound`, `RestoreRefused` (topic not in the snapshot,
    deleted, re-created, or with fewer partitions than the snapshot), and
    `UnknownTopic`-derived refusals; missing objects and unrestorable
    segments are reported in the plan (`restore_topic` refuses them).
    """
    manifest = read_snapshot(store, namespace, name)
    snap = manifest.topic(topic)
    if snap is None:
        held = ", ".join(t.name for t in manifest.topics) or "none"
        raise RestoreRefused(
            f"snapshot {name!r} has no topic {topic!r} (it has: {held})", name=name, topic=topic
        )
    snap_record = read_topic_record(store, namespace, name, topic)
    registry = TopicRegistry(store, namespace)
    try:
        current = registry.get(topic)
    except UnknownTopic:
        raise RestoreRefused(
            f"topic {topic!r} does not exist (deleted?); a restore needs the topic that the "
            f"snapshot {name!r} recorded",
            name=name,
            topic=topic,
        ) from None
    if current.topic_id != snap.topic_id:
        raise RestoreRefused(
            f"topic {topic!r} was deleted and re-created since snapshot {name!r} (topic id "
            f"{snap.topic_id} then, {current.topic_id} now); its segments cannot be restored "
            "into the new topic",
            name=name,
            topic=topic,
        )
    if current.partitions < len(snap.partitions):  # pragma: no cover - Kafka never lowers it
        raise RestoreRefused(
            f"topic {topic!r} has {current.partitions} partitions, fewer than the "
            f"{len(snap.partitions)} of snapshot {name!r}",
            name=name,
            topic=topic,
        )

    def plan_one(partition: PartitionSnapshot) -> PartitionRestorePlan:
        saved = read_partition_state(store, namespace, name, topic, partition)
        state = PartitionCatalog(store, namespace, topic, partition.partition).load()
        return _plan_partition(state, saved, partition)

    with ThreadPoolExecutor(min(IO_THREADS, max(1, len(snap.partitions)))) as pool:
        plans = tuple(pool.map(plan_one, snap.partitions))
    missing = _check_objects(store, namespace, [s for p in plans for s in p.restore])
    config_set = {k: v for k, v in snap_record.configs.items() if current.configs.get(k) != v}
    config_delete = tuple(sorted(k for k in current.configs if k not in snap_record.configs))
    return RestorePlan(
        namespace=namespace,
        topic=topic,
        snapshot=name,
        partitions=plans,
        config_set=config_set,
        config_delete=config_delete,
        untouched_partitions=tuple(range(len(snap.partitions), current.partitions)),
        missing_objects=tuple(missing),
    )


def _copy_segment(
    store: ObjectStore, namespace: str, topic: str, partition: int, segment: SegmentEntry
) -> SegmentEntry:
    """Copy a segment and its index to fresh keys; the entry naming the copies."""
    source = layout.join(namespace, segment.key)
    source_index = layout.join(namespace, segment.index_key)
    data = store.get(source)
    index = store.get(source_index)
    for _ in range(8):
        key = layout.segment_key(topic, partition, segment.base_offset, f"-r{secrets.token_hex(4)}")
        copy = segment.model_copy(update={"key": key, "index_key": layout.index_key_for(key)})
        try:
            store.put_if_absent(layout.join(namespace, copy.key), data)
        except ObjectAlreadyExists:
            continue
        store.put(layout.join(namespace, copy.index_key), index)
        return copy
    raise SnapshotError(f"could not find a free key to copy {source} to")  # pragma: no cover


def _delete_copies(store: ObjectStore, namespace: str, copies: Sequence[SegmentEntry]) -> None:
    for copy in copies:
        for key in (copy.key, copy.index_key):
            try:
                store.delete(layout.join(namespace, key))
            except Exception:  # an uncommitted copy left behind is an orphan
                log.warning("could not delete uncommitted copy %s", key, exc_info=True)


def restore_topic(
    store: ObjectStore,
    namespace: str,
    topic: str,
    snapshot_name: str,
    *,
    dry_run: bool = False,
    allow_partial: bool = False,
    restore_configs: bool = True,
    clock: Callable[[], int] | None = None,
) -> RestoreResult:
    """Make ``topic``'s catalog equal to snapshot ``snapshot_name``'s (`kfs catalog restore`).

    One commit per partition (see the module docstring for what a restore
    can and cannot do).  Refuses before changing anything: `SnapshotObjectsMissing`
    if objects it needs were deleted, `RestoreRefused` if segments lie below
    the log start offset (unless ``allow_partial``).  A partition whose commit
    conflicts with a concurrent change is reported (``RestoreResult.ok`` is
    False); rerun to finish.  ``dry_run`` returns the plan without changes.
    """
    now = clock or now_ms
    plan = plan_restore(store, namespace, topic, snapshot_name)
    if plan.missing_objects:
        raise SnapshotObjectsMissing(
            f"cannot restore {topic!r} from snapshot {snapshot_name!r}: "
            f"{len(plan.missing_objects)} object(s) it needs were deleted: "
            f"{_keys_message(plan.missing_objects)}",
            keys=list(plan.missing_objects),
        )
    if plan.unrestorable and not allow_partial:
        below = [
            f"{topic}/{p.partition}: {len(p.unrestorable)} segment(s) from offset "
            f"{p.unrestorable[0].base_offset} (log start offset is now {p.log_start_offset})"
            for p in plan.partitions
            if p.unrestorable
        ]
        raise RestoreRefused(
            f"cannot restore {topic!r} from snapshot {snapshot_name!r}: segments below the log "
            f"start offset cannot come back (offsets are never reused): {'; '.join(below)}; "
            "pass allow_partial (--allow-partial) to restore the rest",
            name=snapshot_name,
            topic=topic,
        )
    if dry_run:
        return RestoreResult(plan, (), False, True)

    configs_restored = False
    if restore_configs and (plan.config_set or plan.config_delete):
        TopicRegistry(store, namespace).alter_configs(topic, plan.config_set, plan.config_delete)
        configs_restored = True

    # Secure every copy before the first commit, so a missing object changes nothing.
    copies: dict[int, list[SegmentEntry]] = {}
    try:
        for p in plan.partitions:
            copies[p.partition] = []
            for segment in p.restore:
                copies[p.partition].append(
                    _copy_segment(store, namespace, topic, p.partition, segment)
                )
    except ObjectNotFound as exc:
        _delete_copies(store, namespace, [c for cs in copies.values() for c in cs])
        raise SnapshotObjectsMissing(
            f"cannot restore {topic!r} from snapshot {snapshot_name!r}: an object was deleted "
            f"while it was being copied: {exc}",
            keys=[str(exc)],
        ) from None

    outcomes = [
        _commit_partition(store, namespace, topic, p, copies[p.partition], now)
        for p in plan.partitions
    ]
    return RestoreResult(plan, tuple(outcomes), configs_restored, False)


def _commit_partition(
    store: ObjectStore,
    namespace: str,
    topic: str,
    plan: PartitionRestorePlan,
    copies: Sequence[SegmentEntry],
    now: Callable[[], int],
) -> PartitionRestoreOutcome:
    if not plan.changes:
        return PartitionRestoreOutcome(plan.partition, "unchanged", plan.current_version, (), ())
    removed_ms = now()
    actions: list[Action] = [
        RemoveSegment(key=s.key, base_offset=s.base_offset, removed_ms=removed_ms)
        for s in plan.remove
    ]
    actions += [AddSegment(segment=c) for c in copies]
    catalog = PartitionCatalog(store, namespace, topic, plan.partition, clock=now)
    try:
        result = catalog.commit(actions, operation="restore")
    except (ReplaceConflict, InvalidCatalogAction) as exc:
        _delete_copies(store, namespace, copies)
        return PartitionRestoreOutcome(
            plan.partition,
            "conflict",
            plan.current_version,
            (),
            (),
            f"the partition changed during the restore ({exc}); nothing was changed, rerun",
        )
    return PartitionRestoreOutcome(
        plan.partition,
        "restored",
        result.version,
        tuple(s.key for s in plan.remove),
        tuple(c.key for c in copies),
    )
