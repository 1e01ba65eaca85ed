"""A plain-Python model of Kafka's log cleaner: the oracle for the compaction job's tests.

It states, record by record and without Spark, bytes or object stores, what
`spark_jobs.compaction` promises for a ``cleanup.policy=compact`` partition
(the job's module docstring gives the reasons):

- The log is a list of segments in offset order.  The newest one is never
  cleaned (Kafka never cleans the active segment; in KFS it holds the high
  watermark).  With ``min.compaction.lag.ms`` > 0 cleaning also stops at the
  first segment whose newest record is within the lag of ``now``.  What comes
  before that point is the *cleanable* range.
- A cleanable range starts with the segments earlier runs produced (*clean*)
  and continues with the rest (*dirty*).  Nothing dirty, nothing to do.
  (``min.cleanable.dirty.ratio`` counts bytes, which this model has not got:
  tests of the model set it to 0.)
- The key map holds, for every key in the dirty part, its last offset.
- Every record of the cleanable range is kept unless it has a key and the map
  has a later offset for that key, or it is a tombstone (null value) in the
  clean part whose timestamp is at least ``delete.retention.ms`` older than the
  cleaning point: the newest timestamp of the clean part.  Records without a
  key are kept (Kafka refuses them on produce; the job is lenient).
- The survivors keep offset, timestamp, key, value and headers, and the
  cleaned range becomes one clean segment (the tests' segments are far below
  ``segment.bytes``), or none at all when nothing survives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class ModelRecord:
    """One record as a consumer sees it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass
class ModelSegment:
    records: list[ModelRecord]
    clean: bool = False

    @property
    def max_timestamp(self) -> int:
        return max(r.timestamp for r in self.records)


@dataclass(frozen=True)
class CleanerConfig:
    """The topic configs the cleaner reads (Kafka's names, with dots as underscores)."""

    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0


@dataclass
class CompactedLog:
    """One partition of a compacted topic: append segments, clean, read the records back."""

    segments: list[ModelSegment] = field(default_factory=list)

    @property
    def next_offset(self) -> int:
        offsets = [r.offset for s in self.segments for r in s.records]
        return max(offsets, default=-1) + 1

    def append(self, records: Sequence[ModelRecord]) -> None:
        """Seal ``records`` as the newest segment (as the daemon's flush does)."""
        if records:
            self.segments.append(ModelSegment(list(records)))

    def records(self) -> list[ModelRecord]:
        return [r for s in self.segments for r in s.records]

    def cleanable_count(self, now_ms: int, config: CleanerConfig) -> int:
        """How many leading segments a cleaning at ``now_ms`` may rewrite."""
        candidates = self.segments[:-1]
        lag = config.min_compaction_lag_ms
        for i, segment in enumerate(candidates):
            if lag > 0 and segment.max_timestamp > now_ms - lag:
                return i
        return len(candidates)

    def clean(self, now_ms: int, config: CleanerConfig) -> bool:
        """One cleaning at ``now_ms``; False if there was nothing dirty to clean."""
        cleanable = self.segments[: self.cleanable_count(now_ms, config)]
        clean_count = 0
        while clean_count < len(cleanable) and cleanable[clean_count].clean:
            clean_count += 1
        clean, dirty = cleanable[:clean_count], cleanable[clean_count:]
        if not dirty:
            return False
        latest: dict[bytes, int] = {}
        for segment in dirty:
            for record in segment.records:
                if record.key is not None:
                    latest[record.key] = max(latest.get(record.key, -1), record.offset)
        horizon: int | None = None
        if clean:
            cleaning_point = max(s.max_timestamp for s in clean)
            horizon = cleaning_point - config.delete_retention_ms

        def kept(record: ModelRecord, in_clean: bool) -> bool:
            if record.key is None:
                return True
            if record.offset < latest.get(record.key, -1):
                return False
            expired = horizon is not None and record.timestamp <= horizon
            return not (in_clean and record.is_tombstone and expired)

        survivors = [
            record
            for i, segment in enumerate(cleanable)
            for record in segment.records
            if kept(record, i < clean_count)
        ]
        rest = self.segments[len(cleanable) :]
        self.segments = ([ModelSegment(survivors, clean=True)] if survivors else []) + rest
        return True
