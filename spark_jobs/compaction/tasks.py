"""What the executors do, Spark-free: read a segment, scan its keys, rewrite a group.

The driver turns plans into picklable tasks (`build_tasks`): a `RewriteTask`
per group of input segments and, for key-compacted partitions, a
`KeyScanTask` per cleanable segment.  `scan_keys` emits one segment's key map
rows; `rewrite_group` reads a group's segments (verified: body and batch
CRCs), rewrites their batches with `kfs_core.records.rewrite.BatchRewriter`
and uploads the outputs (segment, then index), cut before they would exceed
``segment.bytes``.  Nothing here commits: that is `spark_jobs.compaction.commit`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kfs_core.catalog import SegmentEntry, layout
from kfs_core.errors import KfsError
from kfs_core.formats.segment import SegmentReader, SegmentWriter
from kfs_core.maintenance_pause import is_paused
from kfs_core.records import CODEC_ZSTD, decode_batch
from kfs_core.records.header import BatchHeader
from kfs_core.records.rewrite import AbortedTransactions, BatchRewriter, key_compactable
from kfs_core.storage import ObjectStore
from spark_jobs.common import SegmentDescriptor
from spark_jobs.compaction.options import DEFAULT_ZSTD_LEVEL
from spark_jobs.compaction.plan import (
    CLEAN_MARK,
    KIND_COMPACT,
    KIND_MERGE,
    MERGE_MARK,
    PartitionPlan,
)
from spark_jobs.compaction.throttle import ReadThrottle, TokenBucket

#: Keys up to this long enter the key map as they are; longer ones as a digest.
MAX_RAW_MAP_KEY = 32


@dataclass(frozen=True)
class RewriteTask:
    """One group of input segments to rewrite into outputs: picklable, shipped to an executor."""

    group_id: int
    namespace: str
    topic: str
    partition: int
    kind: str  # KIND_MERGE or KIND_COMPACT
    inputs: tuple[SegmentDescriptor, ...]
    codec: int
    segment_bytes: int
    batch_bytes: int
    suffix: str  # of every output key: "-m<run>" or "-c<run>"
    read_bytes_per_s: float
    compression_level: int | None = None  # None: the codec's default
    # Key compaction: the partition's aborted transactions (`PartitionPlan.aborted`).
    aborted: tuple[tuple[int, int, int], ...] | None = None
    # Key compaction: markers no newer than this may go (the tombstones' delete horizon).
    marker_horizon_ms: int | None = None

    @property
    def created_ms(self) -> int:
        """Outputs carry their inputs' newest seal time (Kafka keeps the last input's mtime)."""
        return max(d.created_ms for d in self.inputs)


@dataclass(frozen=True)
class KeyScanTask:
    """One cleanable segment to read for the key map."""

    group_id: int
    segment: SegmentDescriptor
    clean: bool
    horizon_ms: int | None
    read_bytes_per_s: float
    aborted: tuple[tuple[int, int, int], ...] = ()


#: Rows of the key map DataFrame, one per keyed record of a cleanable segment.
KEY_SCHEMA = (
    "grp int, topic string, partition int, map_key binary, offset long, "
    "clean boolean, expired boolean"
)


@dataclass
class RewriteResult:
    """What `rewrite_group` wrote for one group (outputs are uploaded, not yet committed)."""

    group_id: int
    topic: str
    partition: int
    outputs: list[SegmentEntry] = field(default_factory=list)
    segments_in: int = 0
    bytes_in: int = 0
    index_bytes_in: int = 0
    bytes_out: int = 0
    index_bytes_out: int = 0
    records_in: int = 0
    records_out: int = 0
    batches_in: int = 0
    batches_out: int = 0
    batches_copied: int = 0
    aborted_batches: int = 0  # left out: their transaction was aborted
    removed_markers: int = 0  # transaction markers left out, past the delete horizon
    removed_abort_markers: tuple[int, ...] = ()  # their offsets, for the catalog's aborted lists
    paused: bool = False
    error: str = ""


def scan_keys(
    store: ObjectStore, task: KeyScanTask, throttle: ReadThrottle | None = None
) -> Iterator[tuple[Any, ...]]:
    """The key map rows (`KEY_SCHEMA`) of one segment's compactable keyed records.

    ``throttle``: the Spark task's read budget (a fresh one when None).
    """
    d = task.segment
    throttle = throttle or ReadThrottle()
    reader = read_segment(store, d, throttle.bucket(task.read_bytes_per_s))
    name = d.segment_object_key
    aborted = AbortedTransactions(task.aborted)
    for position, header in reader.iter_batches():
        if not key_compactable(header, aborted) or header.record_count == 0:
            continue
        batch = decode_batch(reader.data, position, verify_crc=False, object_name=name)
        for record in batch.records:
            if record.key is None:
                continue
            expired = (
                task.clean
                and record.value is None
                and task.horizon_ms is not None
                and batch.effective_timestamp(record) <= task.horizon_ms
            )
            yield (
                task.group_id,
                d.topic,
                d.partition,
                map_key(record.key),
                record.offset,
                task.clean,
                expired,
            )


class _Outputs:
    """Appends batches to output segments, cut at ``segment.bytes``; uploads each when sealed."""

    def __init__(self, store: ObjectStore, task: RewriteTask, result: RewriteResult) -> None:
        self._store = store
        self._task = task
        self._result = result
        self._writer: SegmentWriter | None = None

    def append(self, batch: bytes) -> None:
        writer = self._writer
        if (
            writer is not None
            and writer.batch_count
            and (writer.size + len(batch) > self._task.segment_bytes)
        ):
            self._seal()
            writer = None
        if writer is None:
            # The first output starts where the group does (as Kafka's cleaned segment takes
            # its first input's base offset); later ones at their first batch.
            base = self._task.inputs[0].base_offset if not self._result.outputs else None
            writer = self._writer = SegmentWriter(base, created_ms=self._task.created_ms)
        writer.append(batch)
        self._result.batches_out += 1

    def finish(self) -> None:
        if self._writer is not None and self._writer.batch_count:
            self._seal()

    def _seal(self) -> None:
        assert self._writer is not None
        sealed = self._writer.finish()
        self._writer = None
        meta = sealed.meta
        task = self._task
        entry = SegmentEntry.for_sealed(task.topic, task.partition, sealed, key_suffix=task.suffix)
        # Segment first, then its index: the catalog commit comes after both.
        self._store.put(layout.join(task.namespace, entry.key), sealed.data)
        self._store.put(layout.join(task.namespace, entry.index_key), sealed.index)
        result = self._result
        result.outputs.append(entry)
        result.bytes_out += meta.size
        result.index_bytes_out += len(sealed.index)
        result.records_out += meta.record_count


def rewrite_group(
    store: ObjectStore,
    task: RewriteTask,
    drop: Iterable[int] | None = None,
    throttle: ReadThrottle | None = None,
) -> RewriteResult:
    """Rewrite one group into new segments without the offsets in ``drop`` (an executor task).

    Records without a key and control batches are never dropped; an aborted
    transaction's batches are, where the task knows the aborted transactions
    (`kfs_core.records.rewrite.BatchRewriter`).  Errors are
    returned in the result, not raised: one bad segment must not fail the
    Spark job.  ``throttle``: the Spark task's read budget (a fresh one when None).
    """
    result = RewriteResult(task.group_id, task.topic, task.partition)
    if is_paused(store, task.namespace):
        result.paused = True
        return result
    try:
        _rewrite(store, task, frozenset(drop or ()), result, throttle or ReadThrottle())
    except (KfsError, OSError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def _rewrite(
    store: ObjectStore,
    task: RewriteTask,
    drop: frozenset[int],
    result: RewriteResult,
    throttle: ReadThrottle,
) -> None:
    bucket = throttle.bucket(task.read_bytes_per_s)
    outputs = _Outputs(store, task, result)
    aborted = None if task.aborted is None else AbortedTransactions(task.aborted)
    rewriter = BatchRewriter(
        task.codec,
        task.batch_bytes,
        outputs.append,
        task.compression_level,
        aborted,
        marker_horizon_ms=task.marker_horizon_ms,
    )
    for d in task.inputs:
        reader = read_segment(store, d, bucket)
        result.segments_in += 1
        result.bytes_in += d.size_bytes
        result.index_bytes_in += d.index_size_bytes
        name = d.segment_object_key
        batches = list(reader.iter_batches())
        last_batches = _last_batch_of_each_producer(batches) | _last_marker_of_each_producer(
            batches
        )
        for position, header in batches:
            result.batches_in += 1
            result.records_in += header.record_count
            keep_header = position in last_batches
            if rewriter.add(reader.data, position, header, drop, name, keep_header=keep_header):
                result.batches_copied += 1
    rewriter.flush()
    outputs.finish()
    result.aborted_batches = rewriter.aborted_batches
    result.removed_markers = len(rewriter.removed_markers)
    result.removed_abort_markers = tuple(rewriter.removed_abort_markers)


def _last_batch_of_each_producer(batches: Sequence[tuple[int, BatchHeader]]) -> set[int]:
    """The positions of each producer's last data batch in a segment.

    Kafka's cleaner keeps a producer's last batch (empty if it must) so the
    producer's last sequence and epoch outlive compaction: a daemon that
    rebuilds producer state from the segments (a takeover, a lost snapshot)
    still knows the producer, and deduplicates its retries.  Here the last
    of each input segment is kept, a few more than Kafka keeps.
    """
    last: dict[int, int] = {}
    for position, header in batches:
        if header.producer_id >= 0 and not header.is_control:
            last[header.producer_id] = position
    return set(last.values())


def _last_marker_of_each_producer(batches: Sequence[tuple[int, BatchHeader]]) -> set[int]:
    """The positions of the markers that are their producer's last batch in a segment.

    Such a marker stays past the delete horizon, as Kafka's cleaner keeps a
    producer's last batch when it is a marker: it holds the producer's epoch.
    """
    last: dict[int, tuple[int, bool]] = {}
    for position, header in batches:
        if header.producer_id >= 0:
            last[header.producer_id] = (position, header.is_control)
    return {position for position, control in last.values() if control}


def read_segment(
    store: ObjectStore, segment: SegmentDescriptor, bucket: TokenBucket | None
) -> SegmentReader:
    """Get, throttle and verify one live segment (body CRC, every batch, header, footer)."""
    name = segment.segment_object_key
    data = store.get(name)
    if bucket is not None:
        bucket.acquire(len(data))
    reader = SegmentReader(data, name)
    meta = reader.verify()
    if meta.base_offset != segment.base_offset or meta.last_offset != segment.last_offset:
        raise ValueError(
            f"{name} holds offsets {meta.base_offset}..{meta.last_offset}, the catalog says "
            f"{segment.base_offset}..{segment.last_offset}"
        )
    return reader


def map_key(key: bytes) -> bytes:
    """A record key as the key map holds it: itself up to 32 bytes, else a 33-byte digest.

    The digest form is one byte longer than any raw key, so the two never meet.
    """
    if len(key) <= MAX_RAW_MAP_KEY:
        return bytes(key)
    return b"#" + hashlib.sha256(key).digest()


def run_suffix(mark: str, run_id: str) -> str:
    """``-m<run>`` / ``-c<run>``: the run id, lower case, without separators."""
    return f"-{mark}{re.sub(r'[^0-9a-z]', '', run_id.lower())}"


def output_level(codec: int, level: int | None = None) -> int | None:
    """The level rebuilt batches are compressed at.

    That is ``level``, else zstd's `DEFAULT_ZSTD_LEVEL` and the codec's own
    default for the others (None).
    """
    if level is not None:
        return level
    return DEFAULT_ZSTD_LEVEL if codec == CODEC_ZSTD else None


def build_tasks(
    plans: Sequence[PartitionPlan],
    namespace: str,
    run_id: str,
    read_bytes_per_s: float,
    compression_level: int | None = None,
) -> tuple[list[RewriteTask], list[KeyScanTask]]:
    """The rewrite tasks of every group and the key scans of the key-compacted ones."""
    tasks: list[RewriteTask] = []
    scans: list[KeyScanTask] = []
    for plan in plans:
        mark = MERGE_MARK if plan.action == KIND_MERGE else CLEAN_MARK
        for group in plan.groups:
            group_id = len(tasks)
            tasks.append(
                RewriteTask(
                    group_id=group_id,
                    namespace=namespace,
                    topic=plan.topic,
                    partition=plan.partition,
                    kind=plan.action,
                    inputs=group,
                    codec=plan.codec,
                    segment_bytes=plan.segment_bytes,
                    batch_bytes=plan.batch_bytes,
                    suffix=run_suffix(mark, run_id),
                    read_bytes_per_s=read_bytes_per_s,
                    compression_level=output_level(plan.codec, compression_level),
                    aborted=plan.aborted if plan.action == KIND_COMPACT else None,
                    marker_horizon_ms=plan.horizon_ms if plan.action == KIND_COMPACT else None,
                )
            )
            if plan.action == KIND_COMPACT:
                scans.extend(
                    KeyScanTask(
                        group_id,
                        d,
                        d.key in plan.clean_keys,
                        plan.horizon_ms,
                        read_bytes_per_s,
                        plan.aborted,
                    )
                    for d in group
                )
    return tasks, scans
