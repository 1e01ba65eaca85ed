"""Named snapshots of a namespace's catalog, and restoring a topic from one.

A snapshot records, for every topic (or the topics asked for), the topic
registry record and, per partition, the catalog version and a full copy of
the partition state in the catalog's checkpoint format.  It copies catalog
metadata only, never segment data: a snapshot is cheap, and a segment it
names can be restored only while its objects still exist (retention deletes
removed segments after its grace period).  Layout, under ``{ns}/_snapshots/``::

    {name}/{topic}/topic.json                   the TopicRecord at snapshot time
    {name}/{topic}/{partition}.checkpoint.json  the partition state (catalog checkpoint format)
    _manifests/{name}.json                      SnapshotManifest, written last

Every file is written with ``put_if_absent``.  A snapshot exists once its
manifest does, so listing one prefix finds every complete snapshot and an
interrupted one is invisible.  Taking the same name again after a crash
resumes it: files already written are read back and kept, the rest are
written, then the manifest.  Each partition's copy is one consistent catalog
version; partitions are read one after another, not at a single instant.

A partition's copy includes its lease (epoch, node, incarnation) as a
checkpoint does; a restore never commits it back (`kfs_core.catalog.restore`
changes segments only), so the partition's epoch keeps growing.  Restoring a
topic from a snapshot lives in `kfs_core.catalog.restore`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from pydantic import StrictInt, StrictStr

from kfs_core.catalog import layout
from kfs_core.catalog.actions import (
    FORMAT_VERSION,
    NonNegative,
    _Model,
    encode_document,
    parse_model,
)
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import Checkpoint, PartitionState, decode_checkpoint, lease_header
from kfs_core.catalog.topics import TopicRecord, TopicRegistry
from kfs_core.clock import now_ms
from kfs_core.errors import (
    CatalogError,
    ObjectAlreadyExists,
    ObjectNotFound,
)
from kfs_core.namespace import SNAPSHOTS_DIR
from kfs_core.storage.base import ObjectStore

MANIFESTS_DIR = "_manifests"
TOPIC_RECORD_NAME = "topic.json"
CHECKPOINT_SUFFIX = ".checkpoint.json"
#: Prefix of the names `auto_snapshot_name` makes (the checkpoint job's scheduled snapshots).
AUTO_PREFIX = "auto-"
MAX_NAME_LENGTH = 128
#: Store requests one snapshot, read or restore issues in parallel.
IO_THREADS = 16
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# --- errors --------------------------------------------------------------------


class SnapshotError(CatalogError):
    """A snapshot could not be taken, read or restored."""


class InvalidSnapshotName(SnapshotError):
    """A snapshot name breaks the naming rules."""


class SnapshotNotFound(SnapshotError):
    """No complete snapshot of that name exists."""


class SnapshotExists(SnapshotError):
    """A complete snapshot of that name exists already; names are never reused."""


class SnapshotObjectsMissing(SnapshotError):
    """Segment or index objects a restore needs were physically deleted; ``keys`` names them."""


class RestoreRefused(SnapshotError):
    """The restore cannot be done as asked (log start offset, topic id, missing partitions)."""


# --- names and keys ------------------------------------------------------------------


def validate_snapshot_name(name: object) -> str:
    """``name`` if it is a valid snapshot name; `InvalidSnapshotName` otherwise.

    A name is 1 to 128 ASCII letters, digits, ``.``, ``_`` and ``-``,
    starting with a letter or digit (so it can never be ``_manifests``).
    """
    if not isinstance(name, str) or not name:
        raise InvalidSnapshotName(f"snapshot name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidSnapshotName(
            f"snapshot name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}",
            name=name,
        )
    if not _NAME.match(name):
        raise InvalidSnapshotName(
            f"snapshot name {name!r} is illegal: use ASCII letters, digits, '.', '_' and '-', "
            "starting with a letter or digit",
            name=name,
        )
    return name


def auto_snapshot_name(now_ms: int) -> str:
    """``auto-20240102T030405Z``: the name of a scheduled snapshot taken at ``now_ms``."""
    when = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
    return AUTO_PREFIX + when.strftime("%Y%m%dT%H%M%SZ")


def snapshots_prefix(namespace: str) -> str:
    """``{ns}/_snapshots/`` (with the trailing slash)."""
    return layout.join(namespace, SNAPSHOTS_DIR) + "/"


def manifests_prefix(namespace: str) -> str:
    """``{ns}/_snapshots/_manifests/``: one object per complete snapshot."""
    return layout.join(namespace, SNAPSHOTS_DIR, MANIFESTS_DIR) + "/"


def manifest_key(namespace: str, name: str) -> str:
    return manifests_prefix(namespace) + f"{name}.json"


def snapshot_dir(namespace: str, name: str) -> str:
    """``{ns}/_snapshots/{name}/``: the snapshot's topic records and partition states."""
    return layout.join(namespace, SNAPSHOTS_DIR, name) + "/"


def topic_record_key(namespace: str, name: str, topic: str) -> str:
    return layout.join(namespace, SNAPSHOTS_DIR, name, topic, TOPIC_RECORD_NAME)


def partition_state_key(namespace: str, name: str, topic: str, partition: int) -> str:
    return layout.join(namespace, SNAPSHOTS_DIR, name, topic, f"{partition}{CHECKPOINT_SUFFIX}")


# --- the manifest ------------------------------------------------------------------


class PartitionSnapshot(_Model):
    """One partition in a snapshot: its catalog version (-1: no commits) and a summary."""

    partition: NonNegative
    version: StrictInt
    log_start_offset: NonNegative
    high_watermark: NonNegative
    segments: NonNegative
    size_bytes: NonNegative


class TopicSnapshot(_Model):
    name: StrictStr
    topic_id: StrictStr
    partitions: tuple[PartitionSnapshot, ...]


class SnapshotManifest(_Model):
    """``_manifests/{name}.json``: a complete snapshot; its presence is what makes it exist."""

    format: Literal[1] = FORMAT_VERSION
    name: StrictStr
    namespace: StrictStr
    created_ms: StrictInt
    topics: tuple[TopicSnapshot, ...]

    def topic(self, name: str) -> TopicSnapshot | None:
        return next((t for t in self.topics if t.name == name), None)

    @property
    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics)

    @property
    def segment_count(self) -> int:
        return sum(p.segments for t in self.topics for p in t.partitions)

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for t in self.topics for p in t.partitions)


@dataclass(frozen=True)
class SnapshotTask:
    """One partition to copy into snapshot ``name``: small and picklable (Spark executors)."""

    namespace: str
    name: str
    topic: str
    partition: int


def _encode_state(state: PartitionState) -> bytes:
    header = {
        "format": FORMAT_VERSION,
        "version": state.version,
        "timestamp_ms": state.timestamp_ms,
        "log_start_offset": state.log_start_offset,
        "high_watermark": state.high_watermark,
        "config": dict(state.config),
        **lease_header(state),
    }
    if state.leader_epoch:  # as a checkpoint has them: the copy says who led at that version
        header["leader_epoch"] = state.leader_epoch
        header["leader_node_id"] = state.leader_node_id
        header["leader_incarnation"] = state.leader_incarnation
    segments = [s.model_dump_json() for s in state.segments]
    tombstones = [t.model_dump_json() for t in state.tombstones]
    return encode_document(header, [("segments", segments), ("tombstones", tombstones)])


def _summary(partition: int, checkpoint: Checkpoint) -> PartitionSnapshot:
    return PartitionSnapshot(
        partition=partition,
        version=checkpoint.version,
        log_start_offset=checkpoint.log_start_offset,
        high_watermark=checkpoint.high_watermark,
        segments=len(checkpoint.segments),
        size_bytes=sum(s.size_bytes for s in checkpoint.segments),
    )


# --- taking a snapshot ---------------------------------------------------------------


def snapshot_partition(store: ObjectStore, task: SnapshotTask) -> PartitionSnapshot:
    """Copy one partition's newest catalog state into the snapshot; its summary.

    A partition without commits gets no file (version -1).  If the file
    exists already (an interrupted attempt at the same snapshot), it is kept
    and summarised instead.
    """
    key = partition_state_key(task.namespace, task.name, task.topic, task.partition)
    state = PartitionCatalog(store, task.namespace, task.topic, task.partition).load()
    if state.version < 0:
        return PartitionSnapshot(
            partition=task.partition,
            version=-1,
            log_start_offset=state.log_start_offset,
            high_watermark=state.high_watermark,
            segments=0,
            size_bytes=0,
        )
    data = _encode_state(state)
    try:
        store.put_if_absent(key, data)
    except ObjectAlreadyExists:
        data = store.get(key)
    return _summary(task.partition, decode_checkpoint(data, key))


def _snapshot_topic_record(
    store: ObjectStore, namespace: str, name: str, record: TopicRecord
) -> TopicRecord:
    key = topic_record_key(namespace, name, record.name)
    try:
        store.put_if_absent(key, record.model_dump_json(indent=1).encode() + b"\n")
    except ObjectAlreadyExists:
        return parse_model(TopicRecord, store.get(key), key)
    return record


def prepare_snapshot(
    store: ObjectStore, namespace: str, name: str, topics: Sequence[str] | None = None
) -> tuple[list[TopicRecord], list[SnapshotTask]]:
    """Validate the name, record the topics; the partition tasks left to run.

    `SnapshotExists` if a complete snapshot has this name; `UnknownTopic`
    for a topic in ``topics`` that does not exist.
    """
    validate_snapshot_name(name)
    if store.exists(manifest_key(namespace, name)):
        raise SnapshotExists(f"snapshot {name!r} already exists", name=name)
    registry = TopicRegistry(store, namespace)
    names = sorted(set(topics)) if topics is not None else registry.list_topics()
    records = [
        _snapshot_topic_record(store, namespace, name, registry.get(topic)) for topic in names
    ]
    tasks = [
        SnapshotTask(namespace, name, record.name, partition)
        for record in records
        for partition in range(record.partitions)
    ]
    return records, tasks


def finish_snapshot(
    store: ObjectStore,
    namespace: str,
    name: str,
    records: Sequence[TopicRecord],
    partitions: Sequence[tuple[SnapshotTask, PartitionSnapshot]],
    *,
    created_ms: int | None = None,
) -> SnapshotManifest:
    """Write the manifest that makes the snapshot exist (`SnapshotExists` if it lost a race)."""
    by_topic: dict[str, list[PartitionSnapshot]] = {r.name: [] for r in records}
    for task, summary in partitions:
        by_topic[task.topic].append(summary)
    manifest = SnapshotManifest(
        name=name,
        namespace=namespace,
        created_ms=now_ms() if created_ms is None else created_ms,
        topics=tuple(
            TopicSnapshot(
                name=r.name,
                topic_id=r.topic_id,
                partitions=tuple(sorted(by_topic[r.name], key=lambda p: p.partition)),
            )
            for r in records
        ),
    )
    for topic in manifest.topics:
        record = next(r for r in records if r.name == topic.name)
        if len(topic.partitions) != record.partitions:
            raise SnapshotError(
                f"snapshot {name!r}: topic {topic.name!r} has {record.partitions} partitions "
                f"but {len(topic.partitions)} were copied",
                name=name,
            )
    try:
        store.put_if_absent(
            manifest_key(namespace, name), manifest.model_dump_json(indent=1).encode() + b"\n"
        )
    except ObjectAlreadyExists:
        raise SnapshotExists(f"snapshot {name!r} already exists", name=name) from None
    return manifest


def take_snapshot(
    store: ObjectStore,
    namespace: str,
    name: str,
    *,
    topics: Sequence[str] | None = None,
    clock: Callable[[], int] | None = None,
    map_partitions: Callable[[Sequence[SnapshotTask]], list[PartitionSnapshot]] | None = None,
) -> SnapshotManifest:
    """Snapshot the catalog of every topic (or ``topics``) of the namespace as ``name``.

    ``map_partitions`` runs `snapshot_partition` over the tasks (the
    checkpoint job passes one that uses Spark executors); by default a
    thread pool does.
    """
    records, tasks = prepare_snapshot(store, namespace, name, topics)
    if map_partitions is None:
        with ThreadPoolExecutor(IO_THREADS) as pool:
            summaries = list(pool.map(lambda t: snapshot_partition(store, t), tasks))
    else:
        summaries = map_partitions(tasks)
    created = (clock or now_ms)()
    return finish_snapshot(
        store,
        namespace,
        name,
        records,
        list(zip(tasks, summaries, strict=True)),
        created_ms=created,
    )


# --- reading snapshots ---------------------------------------------------------------


def read_snapshot(store: ObjectStore, namespace: str, name: str) -> SnapshotManifest:
    """The manifest of snapshot ``name``; `SnapshotNotFound` if there is no complete one."""
    validate_snapshot_name(name)
    key = manifest_key(namespace, name)
    try:
        data = store.get(key)
    except ObjectNotFound:
        raise SnapshotNotFound(
            f"no snapshot {name!r} in namespace {namespace!r}", name=name
        ) from None
    return parse_model(SnapshotManifest, data, key)


def list_snapshots(store: ObjectStore, namespace: str) -> list[SnapshotManifest]:
    """Every complete snapshot of the namespace, oldest first (`kfs catalog snapshots`)."""
    prefix = manifests_prefix(namespace)
    keys = [
        info.key
        for info in store.list(prefix)
        if info.key.endswith(".json") and "/" not in info.key[len(prefix) :]
    ]
    if not keys:
        return []
    with ThreadPoolExecutor(min(IO_THREADS, len(keys))) as pool:
        found = list(pool.map(lambda k: _read_manifest_or_none(store, k), keys))
    manifests = [m for m in found if m is not None]
    return sorted(manifests, key=lambda m: (m.created_ms, m.name))


def _read_manifest_or_none(store: ObjectStore, key: str) -> SnapshotManifest | None:
    try:
        return parse_model(SnapshotManifest, store.get(key), key)
    except ObjectNotFound:  # deleted while we listed
        return None


def read_topic_record(store: ObjectStore, namespace: str, name: str, topic: str) -> TopicRecord:
    """The topic registry record as snapshot ``name`` recorded it."""
    key = topic_record_key(namespace, name, topic)
    try:
        return parse_model(TopicRecord, store.get(key), key)
    except ObjectNotFound:
        raise SnapshotError(
            f"snapshot {name!r} is damaged: {key} is missing", name=name, key=key
        ) from None


def read_partition_state(
    store: ObjectStore, namespace: str, name: str, topic: str, partition: PartitionSnapshot
) -> Checkpoint | None:
    """The partition state snapshot ``name`` holds (None for a partition without commits)."""
    if partition.version < 0:
        return None
    key = partition_state_key(namespace, name, topic, partition.partition)
    try:
        data = store.get(key)
    except ObjectNotFound:
        raise SnapshotError(
            f"snapshot {name!r} is damaged: {key} is missing", name=name, key=key
        ) from None
    return decode_checkpoint(data, key, partition.version)


def delete_snapshot(store: ObjectStore, namespace: str, name: str) -> int:
    """Delete snapshot ``name`` (manifest first, so it vanishes at once); objects deleted.

    Also removes the leftovers of an interrupted snapshot that has no manifest.
    """
    validate_snapshot_name(name)
    deleted = 0
    key = manifest_key(namespace, name)
    if store.exists(key):
        store.delete(key)
        deleted += 1
    for info in store.list(snapshot_dir(namespace, name)):
        store.delete(info.key)
        deleted += 1
    return deleted
