"""Planning, on the driver and Spark-free: what each partition gets (`plan_partition`).

A partition of a topic without ``compact`` in ``cleanup.policy`` has runs of
small adjacent segments merged (`plan_merge`); a compacted one is cleaned as
Kafka's log cleaner does (`plan_key_compaction`): the rules are in the
package docstring, `spark_jobs.compaction`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kfs_core.catalog import PartitionState, TopicConfig, layout
from kfs_core.records import BATCH_HEADER_SIZE, CODEC_ZSTD
from kfs_core.records.codecs import codec_by_name
from spark_jobs.common import SegmentDescriptor
from spark_jobs.compaction.options import DEFAULT_BATCH_BYTES, DEFAULT_MIN_INPUTS

KIND_MERGE = "merge"
KIND_COMPACT = "compact"
SKIP = "skip"

#: Key suffix marks: ``-m<run>`` for merged outputs, ``-c<run>`` for cleaned ones.
MERGE_MARK = "m"
CLEAN_MARK = "c"
_CLEANED_KEY = re.compile(rf"-{CLEAN_MARK}[0-9a-z]+{re.escape(layout.SEGMENT_SUFFIX)}$")


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
    # Key compaction: the partition's aborted transactions, (producer id, first, last offset).
    aborted: tuple[tuple[int, int, int], ...] = ()

    @property
    def inputs(self) -> tuple[SegmentDescriptor, ...]:
        return tuple(d for group in self.groups for d in group)

    @property
    def input_bytes(self) -> int:
        return sum(d.size_bytes for d in self.inputs)


def segment_time_ms(segment: SegmentDescriptor) -> int:
    """A segment's time for the lag and the cleaning point: newest timestamp, else seal time."""
    return segment.max_timestamp if segment.max_timestamp >= 0 else segment.created_ms


def segment_start_ms(segment: SegmentDescriptor) -> int:
    """A segment's first time, for segment.ms and max.compaction.lag.ms: oldest timestamp, else seal time."""
    return segment.min_timestamp if segment.min_timestamp >= 0 else segment.created_ms


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
    """Groups of small adjacent segments to merge (see the package docstring)."""
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
    """The cleanable range, its clean and dirty parts, and whether to clean (see the package)."""
    # The newest segment is Kafka's active segment: it holds the record at the
    # high watermark, which consumers need to reach the end.
    candidates = list(segments[:-1])
    stop = len(candidates)
    lag = config.min_compaction_lag_ms
    if lag > 0:
        stop = next(
            (i for i, d in enumerate(candidates) if segment_time_ms(d) > now_ms - lag), stop
        )
    # Nothing at or above the last stable offset is cleaned (Kafka's cleaner stops there
    # too): an open transaction's outcome is not known yet.
    open_txns = segments[-1].entry.open_txns if segments else ()
    lso = min((o.first_offset for o in open_txns), default=None)
    if lso is not None:
        stop = next((i for i, d in enumerate(candidates) if d.last_offset >= lso), stop)
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
        aborted=tuple(
            (a.producer_id, a.first_offset, a.last_offset)
            for d in segments
            for a in d.entry.aborted
        ),
    )
    if dirty_bytes == 0:
        reason = "nothing dirty to clean"
        if len(candidates) > len(cleanable):
            why = f"min.compaction.lag.ms={lag}" if lso is None else "the last stable offset"
            reason += f" before offset {first_uncleanable} ({why})"
        return _skip(plan, reason)
    overdue = segment_start_ms(dirty[0]) <= now_ms - config.max_compaction_lag_ms
    if ratio < config.min_cleanable_dirty_ratio and not overdue:
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
