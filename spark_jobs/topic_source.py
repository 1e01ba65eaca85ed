"""``spark.read.format("kfs")``: a topic's records read straight from the object store.

A Spark data source (Spark's Python Data Source API) that reads a topic's
sealed segments from the store, without a Kafka client and without any load
on the daemon.  Register it once per session, then read as with Spark's
Kafka source, whose columns and offset options it keeps::

    from spark_jobs.topic_source import KfsTopicSource

    spark.dataSource.register(KfsTopicSource)
    df = (
        spark.read.format("kfs")
        .option("storeUrl", "s3://bucket/kfs")      # or $KFS_STORE_URL
        .option("namespace", "default")              # or $KFS_NAMESPACE
        .option("topic", "orders")                   # or "subscribe": a comma-separated list
        .option("startingOffsets", "earliest")       # or JSON {"orders": {"0": 42, "1": -2}}
        .option("endingOffsets", "latest")           # or JSON, -1 for latest
        .load()
    )

Columns: ``key`` and ``value`` (binary, null when absent), ``topic``,
``partition``, ``offset``, ``timestamp`` (what a Kafka consumer reports:
the record's CreateTime, or the batch's LogAppendTime), ``timestampType``
(0 CreateTime, 1 LogAppendTime) and, with ``includeHeaders=true``,
``headers`` (array of key, value), as Spark's Kafka source has them.

Options (names as in Spark's Kafka source where one exists):

``storeUrl``, ``namespace``, ``s3EndpointUrl``
    Where the topic lives (defaults: ``$KFS_STORE_URL``, ``$KFS_NAMESPACE`` or
    ``default``, ``$KFS_S3_ENDPOINT_URL``).
``topic`` / ``subscribe``
    One topic, or a comma-separated list.
``partitions``
    A comma-separated list of partition numbers (default: all).
``startingOffsets``, ``endingOffsets``
    ``earliest`` / ``latest`` or Kafka's JSON form (-2 earliest, -1 latest);
    the start is inclusive, the end exclusive.  A partition missing from the
    JSON starts at the earliest and ends at the latest offset.
``startingTimestamp``, ``endingTimestamp``
    Milliseconds since the epoch, for every partition: the start (or end) is
    the first offset whose record timestamp is at or after it, as Kafka's
    ListOffsets finds it; a partition with no such record starts (or ends)
    at its latest offset.  They win over ``startingOffsets`` / ``endingOffsets``.
``maxBytesPerPartition``
    A segment larger than this (default 128 MiB) is read by several Spark
    partitions, split at its index entries.
``isolationLevel``
    ``read_committed`` (default): aborted transactions' records and records
    of transactions still open are left out.  ``read_uncommitted`` keeps them.
    Control batches (transaction markers) never appear.
``includeHeaders``
    ``true`` adds the ``headers`` column.

``filterPushdown``
    ``true`` takes Spark's filters on ``partition``, ``offset`` and
    ``timestamp`` (with ``spark.sql.python.filterPushdown.enabled=true`` in
    the session, which Spark requires of such a reader): the catalog's
    offset and timestamp ranges leave out the segments no row of which can
    match (Spark still applies the filters to the rows).

One Spark partition reads one segment, or one stretch of a large one.  A
start inside a segment is found through the segment's index, and only the
bytes from there are read.

Only what the catalog lists is read: records acknowledged by the daemon
but still in its write-ahead log, not yet sealed into a segment (up to the
flush interval, ``KFS_FLUSH_INTERVAL_MS``), are out of this source's reach;
``latest`` is the newest sealed offset.  `KfsTopicSource` also reads as a
stream (``spark.readStream.format("kfs")``): each micro-batch takes the
segments the catalog committed since the last, its offsets (the next offset
per partition) kept in the query's checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from kfs_core.catalog import layout
from kfs_core.catalog.actions import SegmentEntry
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.errors import CorruptIndex, ObjectNotFound
from kfs_core.formats.index import IndexReader
from kfs_core.formats.segment import SEGMENT_FOOTER_SIZE, SEGMENT_HEADER_SIZE
from kfs_core.records.batch import decode_batch, iter_batch_headers, iter_batches
from kfs_core.records.header import TIMESTAMP_TYPE_BIT
from kfs_core.storage import open_store
from kfs_core.storage.base import ByteRange, ObjectStore

__all__ = [
    "SOURCE_NAME",
    "KfsTopicSource",
    "PartitionPlan",
    "SegmentSlice",
    "SourceOptions",
    "partition_plans",
    "plan_slices",
]

SOURCE_NAME: Final = "kfs"
SCHEMA: Final = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_COLUMN: Final = "headers array<struct<key: string, value: binary>>"
EARLIEST: Final = -2
LATEST: Final = -1
ISOLATION_LEVELS: Final = ("read_committed", "read_uncommitted")
#: Rows per Arrow record batch handed to Spark.
ROWS_PER_BATCH: Final = 8192
DEFAULT_MAX_BYTES_PER_PARTITION: Final = 128 << 20
_KNOWN_OPTIONS: Final = frozenset(
    {
        "storeurl",
        "namespace",
        "s3endpointurl",
        "topic",
        "subscribe",
        "partitions",
        "startingoffsets",
        "endingoffsets",
        "isolationlevel",
        "includeheaders",
        "filterpushdown",
        "startingtimestamp",
        "endingtimestamp",
        "maxbytesperpartition",
        "path",
    }
)


class KfsSourceError(ValueError):
    """An option the source cannot use, or a topic or partition that does not exist."""


# --- options ---------------------------------------------------------------------------


OffsetSpec = str | dict[str, dict[int, int]]  # "earliest" / "latest", or Kafka's JSON form


@dataclass(frozen=True)
class SourceOptions:
    """The reader's options, checked (`parse`)."""

    store_url: str
    namespace: str
    topics: tuple[str, ...]
    s3_endpoint_url: str | None = None
    partitions: frozenset[int] | None = None
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    read_committed: bool = True
    include_headers: bool = False
    filter_pushdown: bool = False
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """From Spark's (case-insensitive) options; `KfsSourceError` naming what is wrong."""
        given = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(given) - _KNOWN_OPTIONS)
        if unknown:
            raise KfsSourceError(
                f"unknown option(s) {', '.join(unknown)} for format {SOURCE_NAME!r}; known: "
                "storeUrl, namespace, s3EndpointUrl, topic, subscribe, partitions, "
                "startingOffsets, endingOffsets, startingTimestamp, endingTimestamp, "
                "maxBytesPerPartition, isolationLevel, includeHeaders, filterPushdown"
            )
        store_url = given.get("storeurl") or os.environ.get("KFS_STORE_URL", "")
        if not store_url:
            raise KfsSourceError("option storeUrl (or $KFS_STORE_URL) is required")
        topics = tuple(
            t.strip() for t in (given.get("topic") or given.get("subscribe") or "").split(",")
        )
        if not any(topics):
            raise KfsSourceError("option topic (or subscribe) is required")
        if not all(topics):
            raise KfsSourceError(f"empty topic name in {','.join(topics)!r}")
        isolation = given.get("isolationlevel", "read_committed").lower()
        if isolation not in ISOLATION_LEVELS:
            raise KfsSourceError(
                f"isolationLevel must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation!r}"
            )
        return cls(
            store_url=store_url,
            namespace=given.get("namespace") or os.environ.get("KFS_NAMESPACE", "default"),
            topics=topics,
            s3_endpoint_url=given.get("s3endpointurl")
            or os.environ.get("KFS_S3_ENDPOINT_URL")
            or None,
            partitions=_partition_list(given.get("partitions")),
            starting=_offset_spec("startingOffsets", given.get("startingoffsets", "earliest")),
            ending=_offset_spec("endingOffsets", given.get("endingoffsets", "latest")),
            read_committed=isolation == "read_committed",
            include_headers=_boolean("includeHeaders", given.get("includeheaders", "false")),
            filter_pushdown=_boolean("filterPushdown", given.get("filterpushdown", "false")),
            starting_timestamp=_milliseconds("startingTimestamp", given.get("startingtimestamp")),
            ending_timestamp=_milliseconds("endingTimestamp", given.get("endingtimestamp")),
            max_bytes_per_partition=_positive(
                "maxBytesPerPartition",
                given.get("maxbytesperpartition", str(DEFAULT_MAX_BYTES_PER_PARTITION)),
            ),
        )

    def open_store(self) -> ObjectStore:
        if self.store_url.lower().startswith("s3://"):
            return open_store(self.store_url, endpoint_url=self.s3_endpoint_url)
        return open_store(self.store_url)

    def schema(self) -> str:
        return f"{SCHEMA}, {HEADERS_COLUMN}" if self.include_headers else SCHEMA


def _partition_list(value: str | None) -> frozenset[int] | None:
    if value is None or not value.strip():
        return None
    try:
        numbers = frozenset(int(p) for p in value.split(","))
    except ValueError:
        raise KfsSourceError(
            f"partitions must be comma-separated partition numbers, got {value!r}"
        ) from None
    if min(numbers) < 0:
        raise KfsSourceError(f"partition numbers are not negative, got {value!r}")
    return numbers


def _offset_spec(name: str, value: str) -> OffsetSpec:
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        doc = json.loads(text)
        spec = {
            str(topic): {int(p): int(o) for p, o in offsets.items()}
            for topic, offsets in doc.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise KfsSourceError(
            f'{name} must be "earliest", "latest" or JSON like {{"topic": {{"0": 42, "1": -2}}}}, '
            f"got {value!r}"
        ) from None
    for topic, offsets in spec.items():
        for partition, offset in offsets.items():
            if offset < EARLIEST:
                raise KfsSourceError(
                    f"{name}: offset {offset} of {topic}-{partition} is neither an offset, "
                    "-2 (earliest) nor -1 (latest)"
                )
    return spec


def _milliseconds(name: str, value: str | None) -> int | None:
    if value is None or not value.strip():
        return None
    try:
        ms = int(value)
    except ValueError:
        raise KfsSourceError(
            f"{name} must be milliseconds since the epoch, got {value!r}"
        ) from None
    if ms < 0:
        raise KfsSourceError(f"{name} must not be negative, got {value!r}")
    return ms


def _positive(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise KfsSourceError(f"{name} must be a positive number of bytes, got {value!r}")
    return number


def _boolean(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise KfsSourceError(f"{name} must be true or false, got {value!r}")
    return lowered == "true"


# --- planning on the driver -------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """What the pushed-down filters allow: partitions, an offset range, a timestamp range."""

    partitions: frozenset[int] | None = None
    min_offset: int = 0
    max_offset: int | None = None  # inclusive
    min_timestamp: int | None = None  # ms, inclusive
    max_timestamp: int | None = None


@dataclass
class SegmentSlice(InputPartition):
    """One Spark partition: offsets ``start`` .. ``end - 1`` of one segment of one partition.

    ``aborted`` are the partition's aborted transactions ``(producer id, first
    offset, marker offset)`` that reach into this slice (read_committed only).
    """

    topic: str
    partition: int
    object_key: str
    index_key: str
    size_bytes: int
    base_offset: int
    start: int
    end: int
    aborted: tuple[tuple[int, int, int], ...] = ()
    stop_position: int | None = None  # where the slice's bytes end (None: the segment's body end)


@dataclass
class PartitionPlan:
    """One partition of a topic as its catalog stands: segments, log start, ends, aborted txns."""

    topic: str
    partition: int
    segments: tuple[SegmentEntry, ...]
    log_start: int
    high_watermark: int
    last_stable: int  # the high watermark, or the first offset of a transaction still open
    aborted: tuple[tuple[int, int, int], ...] = field(default=())


def partition_plans(
    store: ObjectStore, options: SourceOptions, bounds: Bounds
) -> list[PartitionPlan]:
    registry = TopicRegistry(store, options.namespace)
    plans = []
    for topic in options.topics:
        try:
            count = registry.describe(topic).partitions
        except Exception as exc:  # UnknownTopic, or the registry unreadable: say which topic
            raise KfsSourceError(
                f"topic {topic!r} of namespace {options.namespace!r}: {exc}"
            ) from exc
        wanted = set(range(count))
        if options.partitions is not None:
            missing = sorted(options.partitions - wanted)
            if missing:
                raise KfsSourceError(
                    f"topic {topic!r} has {count} partition(s); no partition {missing}"
                )
            wanted &= options.partitions
        if bounds.partitions is not None:
            wanted &= bounds.partitions
        for partition in sorted(wanted):
            state = PartitionCatalog(store, options.namespace, topic, partition).load()
            segments = state.segments
            last_stable = state.high_watermark
            if segments and segments[-1].open_txns:
                last_stable = min(t.first_offset for t in segments[-1].open_txns)
            aborted = tuple(
                sorted(
                    (a.producer_id, a.first_offset, a.last_offset)
                    for s in segments
                    for a in s.aborted
                )
            )
            plans.append(
                PartitionPlan(
                    topic,
                    partition,
                    segments,
                    state.log_start_offset,
                    state.high_watermark,
                    last_stable,
                    aborted,
                )
            )
    return plans


def _resolve(spec: OffsetSpec, plan: PartitionPlan, *, default: int) -> int:
    """The offset ``spec`` names for the partition (-2: its log start, -1: its end)."""
    if isinstance(spec, str):
        offset = EARLIEST if spec == "earliest" else LATEST
    else:
        offset = spec.get(plan.topic, {}).get(plan.partition, default)
    if offset == EARLIEST:
        return plan.log_start
    if offset == LATEST:
        return plan.high_watermark
    return offset


def plan_slices(
    plans: Sequence[PartitionPlan],
    starts: Mapping[tuple[str, int], int],
    ends: Mapping[tuple[str, int], int],
    *,
    read_committed: bool,
    bounds: Bounds = Bounds(),
) -> list[SegmentSlice]:
    """One slice per segment holding offsets in ``[start, end)`` of its partition, pruned by ``bounds``."""
    slices = []
    for plan in plans:
        tp = (plan.topic, plan.partition)
        start = max(starts[tp], plan.log_start, bounds.min_offset)
        end = ends[tp]
        if read_committed:
            end = min(end, plan.last_stable)
        if bounds.max_offset is not None:
            end = min(end, bounds.max_offset + 1)
        for segment in plan.segments:
            if segment.last_offset < start or segment.base_offset >= end:
                continue
            if bounds.min_timestamp is not None and segment.max_timestamp < bounds.min_timestamp:
                continue
            if bounds.max_timestamp is not None and segment.min_timestamp > bounds.max_timestamp:
                continue
            lo, hi = max(start, segment.base_offset), min(end, segment.last_offset + 1)
            aborted = (
                tuple(a for a in plan.aborted if a[1] < hi and a[2] >= lo) if read_committed else ()
            )
            slices.append(
                SegmentSlice(
                    plan.topic,
                    plan.partition,
                    segment.key,
                    segment.index_key,
                    segment.size_bytes,
                    segment.base_offset,
                    lo,
                    hi,
                    aborted,
                )
            )
    return slices


def offset_for_timestamp(
    store: ObjectStore, namespace: str, plan: PartitionPlan, timestamp_ms: int
) -> int:
    """The first offset whose record timestamp is at or after ``timestamp_ms``; else the end.

    As Kafka's ListOffsets answers it, from the segments alone: the first
    segment whose newest timestamp reaches it is read, batch headers first.
    """
    for segment in plan.segments:
        if segment.max_timestamp < timestamp_ms:
            continue
        key = layout.join(namespace, segment.key)
        data = store.get(key)
        body = memoryview(data)[: segment.size_bytes - SEGMENT_FOOTER_SIZE]
        for position, header in iter_batch_headers(body, SEGMENT_HEADER_SIZE, object_name=key):
            if header.max_timestamp < timestamp_ms or header.is_control:
                continue
            batch = decode_batch(body, position, object_name=key)
            for record in batch.records:
                if batch.effective_timestamp(record) >= timestamp_ms:
                    return record.offset
    return plan.high_watermark


def _split_large(
    store: ObjectStore, options: SourceOptions, slices: list[SegmentSlice]
) -> list[SegmentSlice]:
    """Slices of segments over ``maxBytesPerPartition`` cut at index entries; the rest as they are."""
    out: list[SegmentSlice] = []
    for piece in slices:
        if piece.size_bytes <= options.max_bytes_per_partition:
            out.append(piece)
            continue
        try:
            index = IndexReader(
                store.get(layout.join(options.namespace, piece.index_key)), piece.index_key
            )
        except (ObjectNotFound, CorruptIndex):
            out.append(piece)  # read whole: the index rebuild job will mend it
            continue
        out.extend(
            split_slice(piece, index.offsets, index.positions, options.max_bytes_per_partition)
        )
    return out


def split_slice(
    piece: SegmentSlice,
    offsets: Sequence[int],
    positions: Sequence[int],
    max_bytes: int,
) -> list[SegmentSlice]:
    """``piece`` cut at index entries into stretches of about ``max_bytes`` each.

    ``offsets`` and ``positions`` are the index's entries (a batch's base
    offset and byte position).  A cut at entry ``i`` ends one stretch at
    ``positions[i]``, before the batch holding ``offsets[i]``, and starts
    the next there.
    """
    cuts: list[tuple[int, int]] = []  # (offset, position)
    last = positions[0]
    for offset, position in zip(offsets, positions, strict=True):
        if piece.start < offset < piece.end and position - last >= max_bytes:
            cuts.append((offset, position))
            last = position
    if not cuts:
        return [piece]
    pieces = []
    lo = piece.start
    for offset, position in cuts:
        pieces.append(dataclasses.replace(piece, start=lo, end=offset, stop_position=position))
        lo = offset
    pieces.append(dataclasses.replace(piece, start=lo))
    return pieces


# --- reading on the executors -------------------------------------------------------------


def read_slice(
    store: ObjectStore, namespace: str, piece: SegmentSlice, *, include_headers: bool
) -> Iterator[dict[str, list[Any]]]:
    """The slice's records as columns, ``ROWS_PER_BATCH`` rows at a time.

    Control batches never appear; batches of the slice's aborted
    transactions are left out.  Reads from the index's entry at or below
    the start when the slice starts inside the segment (the whole segment
    when its index is missing or damaged).
    """
    key = layout.join(namespace, piece.object_key)
    body_end = piece.stop_position or piece.size_bytes - SEGMENT_FOOTER_SIZE
    position = SEGMENT_HEADER_SIZE
    if piece.start > piece.base_offset:
        try:
            index = IndexReader(store.get(layout.join(namespace, piece.index_key)), piece.index_key)
            position = max(position, index.lookup(piece.start))
        except (ObjectNotFound, CorruptIndex):
            position = SEGMENT_HEADER_SIZE
    data = store.get(key, ByteRange(position, body_end - position))
    aborted_by_producer: dict[int, list[tuple[int, int]]] = {}
    for producer_id, first, last in piece.aborted:
        aborted_by_producer.setdefault(producer_id, []).append((first, last))
    columns = _empty_columns(include_headers)
    for batch in iter_batches(data, object_name=key):
        if batch.next_offset <= piece.start:
            continue
        if batch.base_offset >= piece.end:
            break
        if batch.is_control:
            continue
        if batch.is_transactional and _aborted(
            aborted_by_producer, batch.producer_id, batch.base_offset
        ):
            continue
        log_append = bool(batch.attributes & TIMESTAMP_TYPE_BIT)
        for record in batch.records:
            if not piece.start <= record.offset < piece.end:
                continue
            columns["key"].append(record.key)
            columns["value"].append(record.value)
            columns["offset"].append(record.offset)
            columns["timestamp"].append(batch.max_timestamp if log_append else record.timestamp)
            columns["timestampType"].append(1 if log_append else 0)
            if include_headers:
                columns["headers"].append([{"key": k, "value": v} for k, v in record.headers])
            if len(columns["offset"]) >= ROWS_PER_BATCH:
                yield columns
                columns = _empty_columns(include_headers)
    if columns["offset"]:
        yield columns


def _aborted(ranges: Mapping[int, list[tuple[int, int]]], producer_id: int, offset: int) -> bool:
    return any(first <= offset <= last for first, last in ranges.get(producer_id, ()))


def _empty_columns(include_headers: bool) -> dict[str, list[Any]]:
    names = ["key", "value", "offset", "timestamp", "timestampType"]
    if include_headers:
        names.append("headers")
    return {name: [] for name in names}


def _arrow_batch(piece: SegmentSlice, columns: dict[str, list[Any]], include_headers: bool) -> Any:
    import pyarrow as pa

    rows = len(columns["offset"])
    arrays = [
        pa.array(columns["key"], pa.binary()),
        pa.array(columns["value"], pa.binary()),
        pa.array([piece.topic] * rows, pa.string()),
        pa.array([piece.partition] * rows, pa.int32()),
        pa.array(columns["offset"], pa.int64()),
        pa.array([ms * 1000 for ms in columns["timestamp"]], pa.timestamp("us", tz="UTC")),
        pa.array(columns["timestampType"], pa.int32()),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:
        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        arrays.append(pa.array(columns["headers"], pa.list_(header)))
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _read_arrow(options: SourceOptions, piece: InputPartition) -> Iterator[Any]:
    if not isinstance(piece, SegmentSlice):
        return  # no slice at all: Spark reads one empty partition of its own
    store = options.open_store()
    try:
        for columns in read_slice(
            store, options.namespace, piece, include_headers=options.include_headers
        ):
            yield _arrow_batch(piece, columns, options.include_headers)
    finally:
        store.close()


# --- the data source ------------------------------------------------------------------------


class KfsTopicSource(DataSource):
    """The ``kfs`` format: batch and streaming reads of topics from the object store."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SourceOptions.parse(self.options).schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options)
        if options.filter_pushdown:
            return KfsFilteringTopicReader(options)
        return KfsTopicReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KfsTopicStreamReader(SourceOptions.parse(self.options))


class KfsTopicReader(DataSourceReader):
    """A batch read: one `SegmentSlice` per segment in the offset range asked for."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.bounds = Bounds()

    def partitions(self) -> Sequence[SegmentSlice]:
        options = self.options
        store = options.open_store()
        try:
            plans = partition_plans(store, options, self.bounds)
            starts = {
                (p.topic, p.partition): _resolve(options.starting, p, default=EARLIEST)
                if options.starting_timestamp is None
                else offset_for_timestamp(store, options.namespace, p, options.starting_timestamp)
                for p in plans
            }
            ends = {
                (p.topic, p.partition): _resolve(options.ending, p, default=LATEST)
                if options.ending_timestamp is None
                else offset_for_timestamp(store, options.namespace, p, options.ending_timestamp)
                for p in plans
            }
            slices = plan_slices(
                plans, starts, ends, read_committed=options.read_committed, bounds=self.bounds
            )
            return _split_large(store, options, slices)
        finally:
            store.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_arrow(self.options, partition)


class KfsFilteringTopicReader(KfsTopicReader):
    """`KfsTopicReader` that takes Spark's filters (option ``filterPushdown=true``).

    Spark hands a reader that implements ``pushFilters`` its filters only
    when ``spark.sql.python.filterPushdown.enabled`` is true, and refuses to
    plan the read otherwise: hence a reader of its own, chosen by an option.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Narrow the segments to read by ``partition``, ``offset`` and ``timestamp`` filters.

        Every filter is also handed back: Spark applies it to the rows, so
        pruning only ever leaves out segments where no row could match.
        """
        for spec in filters:
            self.bounds = _narrow(self.bounds, spec)
            yield spec


class KfsTopicStreamReader(DataSourceStreamReader):
    """Micro-batches of the segments committed since the last; offsets: ``{"topic/p": next}``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def _plans(self) -> list[PartitionPlan]:
        store = self.options.open_store()
        try:
            return partition_plans(store, self.options, Bounds())
        finally:
            store.close()

    def initialOffset(self) -> dict[str, int]:
        return {
            _offset_key(p): _resolve(self.options.starting, p, default=EARLIEST)
            for p in self._plans()
        }

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        """Every partition's newest sealed offset (the last stable one for read_committed)."""
        return {
            _offset_key(p): p.last_stable if self.options.read_committed else p.high_watermark
            for p in self._plans()
        }

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[SegmentSlice]:
        plans = self._plans()
        starts = {(p.topic, p.partition): start.get(_offset_key(p), p.log_start) for p in plans}
        ends = {(p.topic, p.partition): end.get(_offset_key(p), p.log_start) for p in plans}
        slices = plan_slices(plans, starts, ends, read_committed=self.options.read_committed)
        store = self.options.open_store()
        try:
            return _split_large(store, self.options, slices)
        finally:
            store.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_arrow(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to acknowledge: the topic is read, never consumed."""


def _offset_key(plan: PartitionPlan) -> str:
    return f"{plan.topic}/{plan.partition}"


def _narrow(bounds: Bounds, spec: Filter) -> Bounds:
    """``bounds`` with what ``spec`` says of ``partition``, ``offset`` or ``timestamp``."""
    path: tuple[str, ...] = tuple(getattr(spec, "attribute", ()))
    column = path[0] if len(path) == 1 else ""
    value = getattr(spec, "value", None)
    if column == "partition":
        if isinstance(spec, EqualTo) and isinstance(value, int):
            return _replace(bounds, partitions=_meet(bounds.partitions, {value}))
        if isinstance(spec, In) and all(isinstance(v, int) for v in spec.value):
            return _replace(bounds, partitions=_meet(bounds.partitions, set(spec.value)))
        return bounds
    if column == "offset" and isinstance(value, int):
        low, high = _range(spec, value)
        return _replace(
            bounds,
            min_offset=max(bounds.min_offset, low if low is not None else 0),
            max_offset=_min(bounds.max_offset, high),
        )
    if column == "timestamp" and value is not None and hasattr(value, "timestamp"):
        ms = int(value.timestamp() * 1000)
        low, high = _range(spec, ms)
        return _replace(
            bounds,
            min_timestamp=_max(bounds.min_timestamp, None if low is None else low - 1),
            max_timestamp=_min(bounds.max_timestamp, None if high is None else high + 1),
        )
    return bounds


def _range(spec: Filter, value: int) -> tuple[int | None, int | None]:
    """The inclusive (low, high) a comparison allows; None: unbounded."""
    if isinstance(spec, EqualTo):
        return value, value
    if isinstance(spec, GreaterThan):
        return value + 1, None
    if isinstance(spec, GreaterThanOrEqual):
        return value, None
    if isinstance(spec, LessThan):
        return None, value - 1
    if isinstance(spec, LessThanOrEqual):
        return None, value
    return None, None


def _meet(current: frozenset[int] | None, allowed: set[int]) -> frozenset[int]:
    return frozenset(allowed) if current is None else current & frozenset(allowed)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _replace(bounds: Bounds, **changes: Any) -> Bounds:
    return dataclasses.replace(bounds, **changes)
