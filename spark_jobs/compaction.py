"""Compaction: merge small segments; key-compact ``cleanup.policy=compact`` topics as Kafka does.

Run it with ``spark-submit spark_jobs/compaction.py --store-url URL --namespace NS``
(or ``python -m spark_jobs.compaction``; flags: `build_parser`)::

    spark-submit spark_jobs/compaction.py --store-url s3://bucket/kfs --namespace prod \\
        [--topics a,b] [--dry-run] [--max-read-mb-per-s 50] [--min-inputs 4] [--batch-bytes 1048576] \\
        [--compression-level 1]

Per partition, planned on the driver from the catalog and the topic config
(`plan_partition`):

**Merge** (topics without ``compact`` in ``cleanup.policy``).  Runs of at
least ``--min-inputs`` adjacent live segments, each smaller than
``segment.bytes``, are cut into groups of at most ``segment.bytes`` input
bytes; each group of two or more becomes ``segment.bytes``-sized outputs.

**Key compaction** (``compact`` in ``cleanup.policy``), following Kafka's log
cleaner (``kafka.log.LogCleaner``):

- The newest live segment is never cleaned (Kafka never cleans the active
  segment; here it holds the high watermark).  With ``min.compaction.lag.ms``
  > 0, cleaning also stops at the first segment whose newest timestamp
  (``max_timestamp``; ``created_ms`` without timestamps) is within the lag:
  nothing from there on is read or touched.  The rest is *cleanable*.
- The cleanable range starts with the *clean* segments earlier runs wrote
  (their keys end in ``-c<run>``, which records Kafka's cleaner checkpoint in
  the same atomic commit as the data) and goes on with *dirty* ones.  The
  partition is cleaned only if dirty bytes / cleanable bytes >=
  ``min.cleanable.dirty.ratio`` (and there are dirty bytes).
- Key map, in Spark: executors read every cleanable segment and emit rows
  ``(group, topic, partition, key, offset, clean, expired)``; a ``groupBy``
  over ``(topic, partition, key)`` of the dirty rows keeps each key's maximum
  offset (a shuffle: the map is never one dict on the driver).  Keys longer
  than 32 bytes enter the map as their SHA-256 (``map_key``).  A join of all
  rows with that map gives, per output group, the offsets to drop, which are
  joined to the group's rewrite task.  The rewriter is handed the records to
  drop (the complement of the survivors among keyed records) rather than the
  survivors, so a record the map knows nothing about is kept, never lost.
- A keyed record is dropped when the map holds a later offset for its key.
  A tombstone (null value) that is its key's last record is dropped only
  from the clean part, and only once its timestamp is at least
  ``delete.retention.ms`` older than the cleaning point, the newest timestamp
  of the clean part (Kafka's delete horizon: the last clean segment's time
  minus ``delete.retention.ms``; tombstones in dirty segments are always
  kept).  So a tombstone survives at least one cleaning and stays readable
  for ``delete.retention.ms`` afterwards.
- Records without a key are kept.  Kafka refuses them on produce to a
  compacted topic and its cleaner drops any it finds; KFS is lenient, because
  dropping data a client was told was written would surprise more.
- Transactional and control batches are copied whole and stay out of the key
  map: telling committed from aborted data needs the transaction index Kafka
  keeps and KFS does not, and keeping them keeps more records, never fewer.
- Offsets are never renumbered: survivors keep offset, timestamp, key, value
  and headers; dropped records leave gaps.

**Rewriting** (executors, `rewrite_group`), for both: every input segment is
read (verified: body and batch CRCs), each ordinary batch's surviving records
are re-batched into batches of about ``--batch-bytes`` uncompressed (1 MiB,
never above ``max.message.bytes``) compressed with ``compression.type``
(zstd when it is ``producer``) at ``--compression-level`` (zstd: 1 by
default, see `DEFAULT_ZSTD_LEVEL`).  A new batch spans its source batches' offsets
exactly (base offset of the first, last offset delta to the last), records
keep their offsets, timestamps, keys, values, headers and leader epoch;
only CreateTime batches of one leader epoch are merged, and the producer id
and sequence of non-transactional batches are not kept (KFS's daemon never
reads producer state back from segments).  Records are moved without being
decoded: `kfs_core.records.merge.BatchMerger` rewrites each one's offset and
timestamp deltas and copies the rest of its bytes (checking its structure as
decoding would), and each new batch is compressed once, by a compressor
reused across batches.  Control and transactional batches,
and empty batches, are copied byte for byte; LogAppendTime batches keep their
own boundaries and header and are only recompressed (and filtered).  A source
batch whose records are all dropped disappears.  Outputs start at their
group's first base offset and are cut before they would exceed
``segment.bytes``; `SegmentWriter` builds each output's ``.index``.  Output
keys carry a run suffix (``-m<run>`` merged, ``-c<run>`` key-compacted):
segment keys are never reused, and a rerun writes new ones.

Reads are rate-limited: ``--max-read-mb-per-s`` (default 50 MiB/s, 0 = no
limit) is the job's total, split evenly over the task slots
(``spark.default.parallelism``); every Python worker throttles its reads with
a token bucket (`TokenBucket`).

**Committing** (driver): outputs are uploaded (segment, then index) before
one ``PartitionCatalog.replace(inputs, outputs)`` per partition.  If
retention or another run removed an input meanwhile, the replace raises
`ReplaceConflict`: that partition is reported as a conflict, its outputs are
orphans for retention's orphan sweep, and the other partitions go on.  A
partition whose rewrite failed (a damaged segment, say) is not committed and
the run ends ``failed``.  The emergency pause flag stops the job before it
starts, in every executor task, and before every commit (status ``paused``).

``--dry-run`` plans and reports; it starts no Spark job and writes nothing
but the run summary.  Every step is idempotent: killed anywhere, the catalog
still names whole, verified segments, and a rerun plans afresh.

The summary's counts cover partitions, segments, bytes and records in and out,
``bytes_saved`` (input minus output segment bytes; ``details.storage`` has
the ratio), records removed, conflicts, errors and orphaned objects;
``details.partitions`` lists every partition that had work.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kfs_core.catalog import (
    PartitionCatalog,
    PartitionState,
    SegmentEntry,
    TopicConfig,
    TopicRegistry,
    layout,
)
from kfs_core.errors import CatalogCommitConflict, KfsError, ReplaceConflict
from kfs_core.formats.segment import SegmentReader, SegmentWriter
from kfs_core.maintenance_pause import is_paused
from kfs_core.records import (
    BATCH_HEADER_SIZE,
    CODEC_ZSTD,
    CREATE_TIME,
    BatchHeader,
    decode_batch,
    reencode_batch,
)
from kfs_core.records.codecs import codec_by_name
from kfs_core.records.merge import BatchMerger
from kfs_core.storage import ObjectStore
from spark_jobs import common
from spark_jobs.common import (
    STATUS_OK,
    STATUS_PAUSED,
    JobContext,
    JobOptions,
    JobResult,
    SegmentDescriptor,
    UsageError,
    conclude,
)

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.sql import SparkSession

JOB = "compaction"

MIB = 1 << 20
DEFAULT_MAX_READ_MB_PER_S = 50.0
DEFAULT_MIN_INPUTS = 4
DEFAULT_BATCH_BYTES = MIB
#: zstd level of rebuilt batches unless --compression-level says otherwise.
#: Measured on 1 MiB batches of the JSON-like records of bench/maintenance.py:
#: level 1 saves 80.6 % at about 460 MB/s per core, level 3 (Kafka's producer
#: default) 80.1 % at about 300 MB/s; on other text level 3 saves about one
#: point more.  Compressing is most of the job's CPU, so the job takes 1.
DEFAULT_ZSTD_LEVEL = 1
#: zstd's own bounds for --compression-level (gzip takes 0-9, lz4 0-16).
MIN_LEVEL, MAX_LEVEL = -(1 << 17), 22
INT32_MAX = 2**31 - 1

KIND_MERGE = "merge"
KIND_COMPACT = "compact"
SKIP = "skip"

#: Key suffix marks: ``-m<run>`` for merged outputs, ``-c<run>`` for cleaned ones.
MERGE_MARK = "m"
CLEAN_MARK = "c"
_CLEANED_KEY = re.compile(rf"-{CLEAN_MARK}[0-9a-z]+{re.escape(layout.SEGMENT_SUFFIX)}$")

#: Keys up to this long enter the key map as they are; longer ones as a digest.
MAX_RAW_MAP_KEY = 32
#: Partition reports kept in the summary (the counts cover all of them).
MAX_REPORTED = 1000

Clock = Callable[[], int]

# Outcome statuses of a partition.
MERGED = "merged"
COMPACTED = "compacted"
SKIPPED = "skipped"
CONFLICT = "conflict"
ERROR = "error"
PAUSED = "paused"


# --- options ------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionOptions(JobOptions):
    """`JobOptions` plus the read budget, the merge threshold and the batch size."""

    max_read_mb_per_s: float = DEFAULT_MAX_READ_MB_PER_S
    min_inputs: int = DEFAULT_MIN_INPUTS
    batch_bytes: int = DEFAULT_BATCH_BYTES
    compression_level: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        level = self.compression_level
        if level is not None and not MIN_LEVEL <= level <= MAX_LEVEL:
            raise UsageError(
                f"--compression-level must be within {MIN_LEVEL}..{MAX_LEVEL}, got {level}"
            )
        if not self.max_read_mb_per_s >= 0:
            raise UsageError(f"--max-read-mb-per-s must be >= 0, got {self.max_read_mb_per_s}")
        if self.min_inputs < 2:
            raise UsageError(f"--min-inputs must be at least 2, got {self.min_inputs}")
        if self.batch_bytes < 1:
            raise UsageError(f"--batch-bytes must be positive, got {self.batch_bytes}")

    @property
    def read_bytes_per_s(self) -> float:
        """The job's total read budget in bytes per second (0: unlimited)."""
        return self.max_read_mb_per_s * MIB


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = common.job_parser(JOB, __doc__)
    parser.add_argument(
        "--max-read-mb-per-s",
        type=_non_negative_float,
        default=DEFAULT_MAX_READ_MB_PER_S,
        help="total segment read rate of the job in MiB/s, split over task slots "
        "(default 50; 0 = unlimited)",
    )
    parser.add_argument(
        "--min-inputs",
        type=_positive_int,
        default=DEFAULT_MIN_INPUTS,
        help="merge only runs of at least this many adjacent small segments (default 4)",
    )
    parser.add_argument(
        "--batch-bytes",
        type=_positive_int,
        default=DEFAULT_BATCH_BYTES,
        help="target uncompressed size of rebuilt record batches (default 1 MiB)",
    )
    parser.add_argument(
        "--compression-level",
        type=int,
        default=None,
        help=f"codec level of rebuilt batches (default: zstd {DEFAULT_ZSTD_LEVEL}, "
        "gzip 6, lz4 its fast mode; snappy has none)",
    )
    return parser


# --- read rate limiting (executors) ---------------------------------------------------


class TokenBucket:
    """A token bucket of ``rate`` bytes per second holding at most ``burst`` (one second's worth).

    `acquire` takes its bytes at once and may leave the bucket in debt; the
    caller then sleeps until the debt is paid, so a large object costs its
    time after it is read and the average rate holds.
    """

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self.capacity = rate if burst is None else burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.capacity
        self._updated = clock()
        self._lock = threading.Lock()

    def acquire(self, amount: int) -> float:
        """Take ``amount`` tokens, sleeping as long as the bucket is in debt; the seconds slept."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
            self._updated = now
            self._tokens -= amount
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


_buckets: dict[float, TokenBucket] = {}
_buckets_lock = threading.Lock()


def worker_bucket(rate: float) -> TokenBucket | None:
    """This worker process's bucket for ``rate`` bytes/s (shared by its tasks); None: no limit."""
    if rate <= 0:
        return None
    with _buckets_lock:
        bucket = _buckets.get(rate)
        if bucket is None:
            bucket = _buckets[rate] = TokenBucket(rate)
        return bucket


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


# --- batches --------------------------------------------------------------------------


def key_compactable(header: BatchHeader) -> bool:
    """Whether the batch's records enter the key map and may be dropped."""
    return not (header.is_control or header.is_transactional)


def rebatchable(header: BatchHeader) -> bool:
    """Whether the batch's records may be merged into new batches with others."""
    return (
        key_compactable(header)
        and header.timestamp_type == CREATE_TIME
        and not header.has_delete_horizon
        and header.record_count > 0
    )


def map_key(key: bytes) -> bytes:
    """A record key as the key map holds it: itself up to 32 bytes, else a 33-byte digest.

    The digest form is one byte longer than any raw key, so the two never meet.
    """
    if len(key) <= MAX_RAW_MAP_KEY:
        return bytes(key)
    return b"#" + hashlib.sha256(key).digest()


class _Rebatcher:
    """Merges the surviving records of consecutive batches into new batches of ~target bytes.

    Records are never decoded into objects: `BatchMerger` rewrites each one's
    offset and timestamp deltas and copies the rest.  A source batch is never
    split: a new batch starts before one that would take it past the target
    (or that has another leader epoch, or would stretch its offset deltas
    past int32).
    """

    def __init__(
        self,
        codec: int,
        target_bytes: int,
        emit: Callable[[bytes], None],
        compression_level: int | None = None,
    ) -> None:
        self._target = target_bytes
        self._emit = emit
        self._merger = BatchMerger(codec, compression_level)

    def add(
        self,
        buf: memoryview,
        position: int,
        header: BatchHeader,
        drop: AbstractSet[int],
        object_name: str,
    ) -> None:
        merger = self._merger
        if merger.base_offset is not None and (
            header.partition_leader_epoch != merger.partition_leader_epoch
            or header.last_offset - merger.base_offset > INT32_MAX
        ):
            self.flush()
        records = merger.rebase(buf, position, header, drop=drop, object_name=object_name)
        if merger.record_count and merger.size + records.size > self._target:
            self.flush()  # and rebase again, relative to the batch this one now starts
            records = merger.rebase(buf, position, header, drop=drop, object_name=object_name)
        merger.add(header, records)

    def flush(self) -> None:
        """Emit the pending batch (nothing if every record of its sources was dropped)."""
        batch = self._merger.finish()
        if batch is not None:
            self._emit(batch)


# --- planning (driver, pure) ------------------------------------------------------------


@dataclass(frozen=True)
class PartitionPlan:
    """What one partition gets: ``action`` is `KIND_MERGE`, `KIND_COMPACT` or `SKIP` (``reason``).

    ``groups`` are consecutive runs of input segments; each becomes one
    rewrite task and its outputs.  The compaction fields are zero/empty for
    merges: ``clean_keys`` are the segments of the clean part,
    ``cleaning_point_ms`` its newest timestamp and ``horizon_ms`` the time at
    or before which its tombstones are dropped.
    """

    topic: str
    partition: int
    version: int
    action: str
    reason: str = ""
    compacted: bool = False  # cleanup.policy has "compact"
    groups: tuple[tuple[SegmentDescriptor, ...], ...] = ()
    codec: int = CODEC_ZSTD
    segment_bytes: int = 0
    batch_bytes: int = DEFAULT_BATCH_BYTES
    clean_keys: frozenset[str] = frozenset()
    clean_bytes: int = 0
    dirty_bytes: int = 0
    dirty_ratio: float = 0.0
    cleaning_point_ms: int | None = None
    horizon_ms: int | None = None
    first_uncleanable_offset: int | None = None

    @property
    def inputs(self) -> tuple[SegmentDescriptor, ...]:
        return tuple(d for group in self.groups for d in group)

    @property
    def input_bytes(self) -> int:
        return sum(d.size_bytes for d in self.inputs)


def segment_time_ms(segment: SegmentDescriptor) -> int:
    """A segment's time for the lag and the cleaning point: newest timestamp, else seal time."""
    return segment.max_timestamp if segment.max_timestamp >= 0 else segment.created_ms


def is_cleaned_key(key: str) -> bool:
    """Whether a segment key names an output of key compaction (``...-c<run>.kfs``)."""
    return _CLEANED_KEY.search(key) is not None


def output_codec(config: TopicConfig) -> int:
    """The codec of rebuilt batches: ``compression.type``, zstd for ``producer``."""
    if config.compression_type == "producer":
        return CODEC_ZSTD
    return codec_by_name(config.compression_type)


def target_batch_bytes(config: TopicConfig, batch_bytes: int) -> int:
    """Uncompressed records per rebuilt batch: ``batch_bytes``, within ``max.message.bytes``."""
    return max(1, min(batch_bytes, config.max_message_bytes - BATCH_HEADER_SIZE))


def group_by_size(
    segments: Sequence[SegmentDescriptor], limit: int
) -> list[tuple[SegmentDescriptor, ...]]:
    """Consecutive groups of at most ``limit`` bytes (a bigger segment is a group by itself)."""
    groups: list[tuple[SegmentDescriptor, ...]] = []
    current: list[SegmentDescriptor] = []
    size = 0
    for segment in segments:
        if current and size + segment.size_bytes > limit:
            groups.append(tuple(current))
            current, size = [], 0
        current.append(segment)
        size += segment.size_bytes
    if current:
        groups.append(tuple(current))
    return groups


def plan_merge(
    topic: str,
    partition: int,
    version: int,
    segments: Sequence[SegmentDescriptor],
    config: TopicConfig,
    min_inputs: int = DEFAULT_MIN_INPUTS,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> PartitionPlan:
    """Groups of small adjacent segments to merge (see the module docstring)."""
    limit = config.segment_bytes
    runs: list[list[SegmentDescriptor]] = [[]]
    for segment in segments:
        if segment.size_bytes < limit:
            runs[-1].append(segment)
        elif runs[-1]:
            runs.append([])
    groups = [
        group
        for run in runs
        if len(run) >= min_inputs
        for group in group_by_size(run, limit)
        if len(group) >= 2
    ]
    common_fields: dict[str, Any] = {
        "codec": output_codec(config),
        "segment_bytes": limit,
        "batch_bytes": target_batch_bytes(config, batch_bytes),
    }
    if not groups:
        longest = max((len(run) for run in runs), default=0)
        reason = (
            f"no run of {min_inputs} adjacent segments below segment.bytes={limit} "
            f"(longest: {longest})"
        )
        return PartitionPlan(topic, partition, version, SKIP, reason, **common_fields)
    return PartitionPlan(
        topic, partition, version, KIND_MERGE, groups=tuple(groups), **common_fields
    )


def plan_key_compaction(
    topic: str,
    partition: int,
    version: int,
    segments: Sequence[SegmentDescriptor],
    config: TopicConfig,
    now_ms: int,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> PartitionPlan:
    """The cleanable range, its clean and dirty parts, and whether to clean (see the docstring)."""
    candidates = list(segments[:-1])  # the newest segment is Kafka's active segment
    stop = len(candidates)
    lag = config.min_compaction_lag_ms
    if lag > 0:
        stop = next(
            (i for i, d in enumerate(candidates) if segment_time_ms(d) > now_ms - lag), stop
        )
    cleanable = candidates[:stop]
    first_uncleanable = segments[stop].base_offset if stop < len(segments) else None
    clean_count = 0
    while clean_count < len(cleanable) and is_cleaned_key(cleanable[clean_count].key):
        clean_count += 1
    clean, dirty = cleanable[:clean_count], cleanable[clean_count:]
    clean_bytes = sum(d.size_bytes for d in clean)
    dirty_bytes = sum(d.size_bytes for d in dirty)
    total = clean_bytes + dirty_bytes
    ratio = dirty_bytes / total if total else 0.0
    cleaning_point = max((segment_time_ms(d) for d in clean), default=None)
    horizon = None if cleaning_point is None else cleaning_point - config.delete_retention_ms
    plan = PartitionPlan(
        topic,
        partition,
        version,
        KIND_COMPACT,
        compacted=True,
        codec=output_codec(config),
        segment_bytes=config.segment_bytes,
        batch_bytes=target_batch_bytes(config, batch_bytes),
        clean_keys=frozenset(d.key for d in clean),
        clean_bytes=clean_bytes,
        dirty_bytes=dirty_bytes,
        dirty_ratio=round(ratio, 6),
        cleaning_point_ms=cleaning_point,
        horizon_ms=horizon,
        first_uncleanable_offset=first_uncleanable,
    )
    if dirty_bytes == 0:
        reason = "nothing dirty to clean"
        if len(candidates) > len(cleanable):
            reason += f" before offset {first_uncleanable} (min.compaction.lag.ms={lag})"
        return _skip(plan, reason)
    if ratio < config.min_cleanable_dirty_ratio:
        return _skip(
            plan,
            f"dirty ratio {ratio:.3f} is below min.cleanable.dirty.ratio "
            f"{config.min_cleanable_dirty_ratio}",
        )
    return _replace_plan(plan, groups=tuple(group_by_size(cleanable, config.segment_bytes)))


def _skip(plan: PartitionPlan, reason: str) -> PartitionPlan:
    return _replace_plan(plan, action=SKIP, reason=reason)


def _replace_plan(plan: PartitionPlan, **changes: Any) -> PartitionPlan:
    return dataclasses.replace(plan, **changes)


def plan_partition(
    state: PartitionState,
    config: TopicConfig,
    namespace: str,
    now_ms: int,
    *,
    min_inputs: int = DEFAULT_MIN_INPUTS,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> PartitionPlan:
    """Merge or key-compact one partition, by its topic's ``cleanup.policy``."""
    segments = [
        SegmentDescriptor(namespace, state.topic, state.partition, entry)
        for entry in state.segments
    ]
    if config.compacted:
        return plan_key_compaction(
            state.topic, state.partition, state.version, segments, config, now_ms, batch_bytes
        )
    return plan_merge(
        state.topic, state.partition, state.version, segments, config, min_inputs, batch_bytes
    )


# --- executors --------------------------------------------------------------------------


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
    paused: bool = False
    error: str = ""


def scan_keys(store: ObjectStore, task: KeyScanTask) -> Iterator[tuple[Any, ...]]:
    """The key map rows (`KEY_SCHEMA`) of one segment's compactable keyed records."""
    d = task.segment
    reader = read_segment(store, d, worker_bucket(task.read_bytes_per_s))
    name = d.segment_object_key
    for position, header in reader.iter_batches():
        if not key_compactable(header) or header.record_count == 0:
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
    store: ObjectStore, task: RewriteTask, drop: Iterable[int] | None = None
) -> RewriteResult:
    """Rewrite one group into new segments without the offsets in ``drop`` (an executor task).

    Records without a key and records of control or transactional batches are
    never dropped.  Errors are returned in the result, not raised: one bad
    segment must not fail the Spark job.
    """
    result = RewriteResult(task.group_id, task.topic, task.partition)
    if is_paused(store, task.namespace):
        result.paused = True
        return result
    try:
        _rewrite(store, task, frozenset(drop or ()), result)
    except (KfsError, OSError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def _rewrite(
    store: ObjectStore, task: RewriteTask, drop: frozenset[int], result: RewriteResult
) -> None:
    bucket = worker_bucket(task.read_bytes_per_s)
    outputs = _Outputs(store, task, result)
    batcher = _Rebatcher(task.codec, task.batch_bytes, outputs.append, task.compression_level)
    for d in task.inputs:
        reader = read_segment(store, d, bucket)
        result.segments_in += 1
        result.bytes_in += d.size_bytes
        result.index_bytes_in += d.index_size_bytes
        name = d.segment_object_key
        for position, header in reader.iter_batches():
            result.batches_in += 1
            result.records_in += header.record_count
            if not key_compactable(header) or header.record_count == 0:
                batcher.flush()  # keep the order of offsets
                outputs.append(bytes(reader.batch_bytes(position, header)))
                result.batches_copied += 1
                continue
            if rebatchable(header):
                batcher.add(reader.data, position, header, drop, name)
                continue
            batcher.flush()
            batch = decode_batch(reader.data, position, verify_crc=False, object_name=name)
            kept = (
                [r for r in batch.records if r.key is None or r.offset not in drop]
                if drop
                else batch.records
            )
            if kept:
                outputs.append(
                    reencode_batch(
                        batch, task.codec, records=kept, compression_level=task.compression_level
                    )
                )
    batcher.flush()
    outputs.finish()


# --- Spark: key map and rewrites -----------------------------------------------------------


def _scan_partition(
    store: ObjectStore, tasks: Iterable[KeyScanTask], errors: Any
) -> Iterator[tuple[Any, ...]]:
    try:
        for task in tasks:
            try:
                yield from scan_keys(store, task)
            except (KfsError, OSError, ValueError) as exc:
                # The partition is not committed (see `rewrite_partitions`); the rows
                # already emitted only ever make the rewrite keep more.
                errors.add([(task.segment.topic, task.segment.partition, f"{exc}")])
    finally:
        store.close()


def _rewrite_partition(
    store: ObjectStore, items: Iterable[tuple[int, tuple[RewriteTask, list[int] | None]]]
) -> Iterator[RewriteResult]:
    try:
        for _, (task, drop) in items:
            yield rewrite_group(store, task, drop)
    finally:
        store.close()


class _ListParam:
    """A Spark accumulator of lists (duck-typed ``AccumulatorParam``: pyspark stays a lazy import)."""

    def zero(self, value: list[Any]) -> list[Any]:
        return []

    def addInPlace(self, value1: list[Any], value2: list[Any]) -> list[Any]:  # noqa: N802
        value1.extend(value2)
        return value1


def _list_accumulator(sc: SparkContext) -> Any:
    return sc.accumulator([], _ListParam())  # type: ignore[arg-type]


def drop_offsets(
    spark: SparkSession, store: ObjectStore, scans: Sequence[KeyScanTask], errors: Any
) -> RDD[tuple[int, list[int]]]:
    """Per group id, the offsets key compaction drops: the key map as a Spark shuffle.

    Lazy: nothing is read until the result is used.  ``errors`` (a list
    accumulator) collects ``(topic, partition, message)`` of unreadable segments.
    """
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    slices = min(len(scans), max(1, sc.defaultParallelism * 4))
    rows = sc.parallelize(list(scans), slices).mapPartitions(
        lambda part: _scan_partition(store, part, errors)
    )
    frame = spark.createDataFrame(rows, KEY_SCHEMA)
    latest = (
        frame.where(~F.col("clean"))
        .groupBy("topic", "partition", "map_key")
        .agg(F.max("offset").alias("latest"))
    )
    superseded = F.col("latest").isNotNull() & (F.col("offset") < F.col("latest"))
    drops = (
        frame.join(latest, ["topic", "partition", "map_key"], "left")
        .where(superseded | F.col("expired"))
        .groupBy("grp")
        .agg(F.collect_list("offset").alias("offsets"))
    )
    return drops.rdd.map(lambda row: (int(row["grp"]), list(row["offsets"])))


def rewrite_partitions(
    spark: SparkSession,
    store: ObjectStore,
    tasks: Sequence[RewriteTask],
    scans: Sequence[KeyScanTask],
) -> tuple[list[RewriteResult], list[tuple[str, int, str]]]:
    """Run every rewrite task (joined with its group's drop offsets); results in task order.

    Also returns ``(topic, partition, message)`` for segments the key scan
    could not read: those partitions must not be committed.
    """
    if not tasks:
        return [], []
    sc = spark.sparkContext
    slices = min(len(tasks), max(1, sc.defaultParallelism * 4))
    errors = _list_accumulator(sc)
    keyed = sc.parallelize([(t.group_id, t) for t in tasks], slices)
    if scans:
        joined = keyed.leftOuterJoin(drop_offsets(spark, store, scans, errors), slices)
    else:
        joined = keyed.mapValues(lambda task: (task, None))
    results = joined.mapPartitions(lambda part: _rewrite_partition(store, part)).collect()
    order = {t.group_id: i for i, t in enumerate(tasks)}
    results.sort(key=lambda r: order[r.group_id])
    return results, sorted(set(errors.value))


# --- committing (driver) -------------------------------------------------------------------


@dataclass
class PartitionOutcome:
    """What the run did to one partition; ``status`` is one of the outcome constants."""

    plan: PartitionPlan
    status: str
    message: str = ""
    version: int = -1
    results: list[RewriteResult] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)

    @property
    def outputs(self) -> list[SegmentEntry]:
        return [entry for r in self.results for entry in r.outputs]

    @property
    def committed(self) -> bool:
        return self.status in (MERGED, COMPACTED)

    def total(self, name: str) -> int:
        return sum(getattr(r, name) for r in self.results)


def _object_keys(namespace: str, entries: Iterable[SegmentEntry]) -> list[str]:
    return [layout.join(namespace, k) for e in entries for k in (e.key, e.index_key)]


def commit_partition(
    store: ObjectStore,
    namespace: str,
    plan: PartitionPlan,
    results: Sequence[RewriteResult],
) -> PartitionOutcome:
    """Swap the plan's inputs for the results' outputs in one catalog replace.

    Never raises for a catalog conflict or error: a `ReplaceConflict` (an
    input was removed or replaced meanwhile) or a lost race is ``conflict``,
    anything else ``error``; either way the uploaded outputs are orphans.
    """
    outcome = PartitionOutcome(plan, ERROR, results=list(results))
    outputs = outcome.outputs
    catalog = PartitionCatalog(store, namespace, plan.topic, plan.partition)
    try:
        commit = catalog.replace([d.entry for d in plan.inputs], outputs)
    except (ReplaceConflict, CatalogCommitConflict) as exc:
        outcome.status = CONFLICT
        outcome.message = (
            f"{plan.topic}/{plan.partition} changed since planning ({exc}); nothing replaced, "
            f"{len(outputs)} outputs left as orphans, the next run plans again"
        )
    except KfsError as exc:
        outcome.message = f"commit failed: {type(exc).__name__}: {exc}"
    else:
        outcome.status = MERGED if plan.action == KIND_MERGE else COMPACTED
        outcome.version = commit.version
        return outcome
    outcome.orphans = _object_keys(namespace, outputs)
    return outcome


# --- the job -------------------------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _topic_configs(
    store: ObjectStore, namespace: str, topics: Sequence[str] | None
) -> dict[str, TopicConfig]:
    registry = TopicRegistry(store, namespace)
    names = sorted(set(topics)) if topics is not None else registry.list_topics()
    return {name: registry.describe(name).config for name in names}  # UnknownTopic for a typo


def run_suffix(mark: str, run_id: str) -> str:
    """``-m<run>`` / ``-c<run>``: the run id, lower case, without separators."""
    return f"-{mark}{re.sub(r'[^0-9a-z]', '', run_id.lower())}"


def output_level(codec: int, level: int | None = None) -> int | None:
    """The level rebuilt batches are compressed at: ``level``, else zstd's `DEFAULT_ZSTD_LEVEL`
    and the codec's own default for the others (None)."""
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
                )
            )
            if plan.action == KIND_COMPACT:
                scans.extend(
                    KeyScanTask(
                        group_id, d, d.key in plan.clean_keys, plan.horizon_ms, read_bytes_per_s
                    )
                    for d in group
                )
    return tasks, scans


def _plan_report(plan: PartitionPlan) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "topic": plan.topic,
        "partition": plan.partition,
        "action": plan.action,
        "catalog_version": plan.version,
    }
    if plan.reason:
        doc["reason"] = plan.reason
    if plan.groups:
        doc["inputs"] = [d.key for d in plan.inputs]
        doc["input_bytes"] = plan.input_bytes
        doc["groups"] = len(plan.groups)
    if plan.compacted:
        doc.update(
            clean_bytes=plan.clean_bytes,
            dirty_bytes=plan.dirty_bytes,
            dirty_ratio=plan.dirty_ratio,
            cleaning_point_ms=plan.cleaning_point_ms,
            tombstone_horizon_ms=plan.horizon_ms,
            first_uncleanable_offset=plan.first_uncleanable_offset,
        )
    return doc


def _outcome_report(outcome: PartitionOutcome) -> dict[str, Any]:
    doc = _plan_report(outcome.plan)
    doc["status"] = outcome.status
    if outcome.message:
        doc["message"] = outcome.message
    if outcome.version >= 0:
        doc["committed_version"] = outcome.version
    if outcome.results:
        doc.update(
            outputs=[e.key for e in outcome.outputs],
            output_bytes=outcome.total("bytes_out"),
            records_in=outcome.total("records_in"),
            records_out=outcome.total("records_out"),
            batches_in=outcome.total("batches_in"),
            batches_out=outcome.total("batches_out"),
            batches_copied=outcome.total("batches_copied"),
        )
    if outcome.orphans:
        doc["orphans"] = outcome.orphans
    return doc


def _storage(outcomes: Sequence[PartitionOutcome]) -> dict[str, Any]:
    done = [o for o in outcomes if o.committed]
    bytes_in = sum(o.total("bytes_in") for o in done)
    bytes_out = sum(o.total("bytes_out") for o in done)
    index_in = sum(o.total("index_bytes_in") for o in done)
    index_out = sum(o.total("index_bytes_out") for o in done)
    return {
        "input_bytes": bytes_in,
        "output_bytes": bytes_out,
        "saved_bytes": bytes_in - bytes_out,
        "saved_ratio": round((bytes_in - bytes_out) / bytes_in, 6) if bytes_in else 0.0,
        "input_index_bytes": index_in,
        "output_index_bytes": index_out,
    }


def _counts(plans: Sequence[PartitionPlan], outcomes: Sequence[PartitionOutcome]) -> dict[str, int]:
    done = [o for o in outcomes if o.committed]
    storage = _storage(outcomes)
    return {
        "partitions": len(plans),
        "partitions_planned": sum(1 for p in plans if p.action != SKIP),
        "partitions_merged": sum(1 for o in outcomes if o.status == MERGED),
        "partitions_compacted": sum(1 for o in outcomes if o.status == COMPACTED),
        "segments_in": sum(len(o.plan.inputs) for o in done),
        "segments_out": sum(len(o.outputs) for o in done),
        "bytes_in": storage["input_bytes"],
        "bytes_out": storage["output_bytes"],
        "bytes_saved": storage["saved_bytes"],
        "records_in": sum(o.total("records_in") for o in done),
        "records_out": sum(o.total("records_out") for o in done),
        "records_removed": sum(o.total("records_in") - o.total("records_out") for o in done),
        "conflicts": sum(1 for o in outcomes if o.status == CONFLICT),
        "errors": sum(1 for o in outcomes if o.status == ERROR),
        "orphaned_objects": sum(len(o.orphans) for o in outcomes),
    }


def _dry_run_result(plans: Sequence[PartitionPlan]) -> JobResult:
    work = [p for p in plans if p.action != SKIP]
    counts = {
        "partitions": len(plans),
        "partitions_planned": len(work),
        "segments_in": sum(len(p.inputs) for p in work),
        "bytes_in": sum(p.input_bytes for p in work),
    }
    details = {
        "partitions": [_plan_report(p) for p in plans][:MAX_REPORTED],
    }
    merges = sum(1 for p in work if p.action == KIND_MERGE)
    message = (
        f"would merge {merges} and key-compact {len(work) - merges} of {len(plans)} partitions "
        f"({counts['segments_in']} segments, {counts['bytes_in']} bytes) (dry run)"
    )
    return JobResult(STATUS_OK, message, counts, details)


def _body(
    ctx: JobContext,
    options: CompactionOptions,
    clock: Clock,
    before_commit: Callable[[PartitionPlan], None] | None,
) -> JobResult:
    now_ms = clock()
    store, ns = ctx.store, ctx.namespace
    with ctx.phase("catalog"):
        configs = _topic_configs(store, ns, options.topics)
        states = common.load_partitions(store, ns, list(configs))
    with ctx.phase("plan"):
        plans = [
            plan_partition(
                state,
                configs[state.topic],
                ns,
                now_ms,
                min_inputs=options.min_inputs,
                batch_bytes=options.batch_bytes,
            )
            for state in states
        ]
    if options.dry_run:
        return _dry_run_result(plans)
    work = [p for p in plans if p.action != SKIP]
    skipped = [PartitionOutcome(p, SKIPPED, p.reason) for p in plans if p.action == SKIP]
    if not work:
        return _result(plans, skipped, paused=False, now_ms=now_ms)
    if ctx.check_paused():
        return JobResult(STATUS_PAUSED, "emergency pause flag set before rewriting; nothing done")
    spark = ctx.spark
    per_slot = options.read_bytes_per_s / max(1, spark.sparkContext.defaultParallelism)
    tasks, scans = build_tasks(work, ns, ctx.run_id, per_slot, options.compression_level)
    with ctx.phase("rewrite"):
        results, scan_errors = rewrite_partitions(spark, store, tasks, scans)
    by_partition: dict[tuple[str, int], list[RewriteResult]] = {}
    for result in results:
        by_partition.setdefault((result.topic, result.partition), []).append(result)
    unreadable: dict[tuple[str, int], str] = {}
    for topic, partition, message in scan_errors:
        unreadable.setdefault((topic, partition), message)
    outcomes: list[PartitionOutcome] = []
    paused = False
    with ctx.phase("commit"):
        for plan in work:
            mine = by_partition.get((plan.topic, plan.partition), [])
            outcomes.append(_commit_one(ctx, plan, mine, unreadable, paused, before_commit))
            paused = paused or outcomes[-1].status == PAUSED
    return _result(plans, skipped + outcomes, paused=paused, now_ms=now_ms)


def _commit_one(
    ctx: JobContext,
    plan: PartitionPlan,
    results: list[RewriteResult],
    unreadable: dict[tuple[str, int], str],
    paused: bool,
    before_commit: Callable[[PartitionPlan], None] | None,
) -> PartitionOutcome:
    ns = ctx.namespace
    outcome = PartitionOutcome(plan, ERROR, results=results)
    failed = [r.error for r in results if r.error]
    if (plan.topic, plan.partition) in unreadable:
        failed.insert(0, f"key scan: {unreadable[(plan.topic, plan.partition)]}")
    if paused or any(r.paused for r in results) or ctx.check_paused():
        outcome.status, outcome.message = PAUSED, "emergency pause flag set; not committed"
    elif failed:
        outcome.message = "; ".join(failed[:3])
    elif len(results) != len(plan.groups):
        outcome.message = f"{len(results)} of {len(plan.groups)} rewrite results came back"
    else:
        if before_commit is not None:
            before_commit(plan)
        return commit_partition(ctx.store, ns, plan, results)
    outcome.orphans = _object_keys(ns, outcome.outputs)
    return outcome


def _result(
    plans: Sequence[PartitionPlan],
    outcomes: Sequence[PartitionOutcome],
    *,
    paused: bool,
    now_ms: int,
) -> JobResult:
    counts = _counts(plans, outcomes)
    storage = _storage(outcomes)
    order = {(p.topic, p.partition): i for i, p in enumerate(plans)}
    reports = [
        _outcome_report(o)
        for o in sorted(outcomes, key=lambda o: order[(o.plan.topic, o.plan.partition)])
        if o.status != SKIPPED or o.plan.dirty_bytes
    ]
    details = {
        "now_ms": now_ms,
        "storage": storage,
        "partitions": reports[:MAX_REPORTED],
    }
    message = (
        f"merged {counts['partitions_merged']} and key-compacted "
        f"{counts['partitions_compacted']} of {counts['partitions']} partitions: "
        f"{counts['segments_in']} segments ({counts['bytes_in']} bytes) became "
        f"{counts['segments_out']} ({counts['bytes_out']} bytes), "
        f"{counts['records_removed']} records removed, {counts['bytes_saved']} bytes saved"
    )
    return conclude(
        message,
        counts,
        details,
        paused=paused,
        failed_partitions=counts["errors"],
        conflicts=counts["conflicts"],
    )


def run(
    options: CompactionOptions | JobOptions | argparse.Namespace | Sequence[str] | None = None,
    spark: SparkSession | None = None,
    *,
    clock: Clock | None = None,
    before_commit: Callable[[PartitionPlan], None] | None = None,
) -> dict[str, Any]:
    """Compact a namespace once; the run summary.

    ``clock`` (ms) fixes "now" for ``min.compaction.lag.ms``; ``before_commit``
    is called on the driver with each partition's plan just before its
    replace (tests race other writers there).
    """
    opts = common.coerce_options(options, build_parser(), CompactionOptions)
    return common.execute(
        JOB, opts, lambda ctx: _body(ctx, opts, clock or _now_ms, before_commit), spark
    )


def main(argv: Sequence[str] | None = None) -> int:
    return common.main(run, build_parser(), argv)


if __name__ == "__main__":
    # Run the copy imported by its package name: under spark-submit this file is
    # ``__main__``, and cloudpickle would ship its functions to executors by value,
    # module globals (locks, bucket registry) included, instead of by reference.
    from spark_jobs import compaction as _job

    sys.exit(_job.main())


__all__ = [
    "KEY_SCHEMA",
    "CompactionOptions",
    "KeyScanTask",
    "PartitionOutcome",
    "PartitionPlan",
    "RewriteResult",
    "RewriteTask",
    "TokenBucket",
    "build_parser",
    "build_tasks",
    "commit_partition",
    "drop_offsets",
    "group_by_size",
    "is_cleaned_key",
    "main",
    "map_key",
    "output_codec",
    "output_level",
    "plan_key_compaction",
    "plan_merge",
    "plan_partition",
    "read_segment",
    "rewrite_group",
    "rewrite_partitions",
    "run",
    "scan_keys",
]
