"""Index rebuild: regenerate missing or invalid ``.index`` objects from their segments.

Run it with ``spark-submit spark_jobs/index_rebuild.py --store-url URL --namespace NS``
(or ``python -m spark_jobs.index_rebuild``; flags: `build_parser`).

1. Inspect (executors, read-only): for every live segment, its index is
   *missing*, *unreadable* (magic, version, size, entry order: `IndexReader`)
   or *inconsistent* with the batches (`check_index`: an entry off a batch
   start or naming the wrong offset, no entry for the first batch) - or fine.
2. With ``--dry-run``, stop and report what would be rebuilt.
3. Otherwise, unless the emergency pause flag went up meanwhile: re-read the
   catalog and keep only segments that are still live, then in executors
   re-read each segment (verified: body CRC and every batch), inspect its
   index again (another run may have fixed it), build the index the segment
   writer would have written (`build_index_from_segment`, at the interval of
   the old index header when that is readable, else 100), check it against
   the segment and ``put`` it over the old one.

Only ``.index`` objects are written; segments are only read.  An index
whose segment is missing, or too damaged to walk its batches (or, for a
rebuild, to pass its CRCs), can be neither checked nor rebuilt: it is
reported as unfixable and the run's status is ``failed`` (exit 1), so someone
looks at the segment (the validation job says what is wrong with it).  A sound
index over a segment with a bad record CRC is left alone: positions are all
an index holds.  Running the job again after a success finds nothing to do.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kfs_core.catalog import PartitionCatalog, layout
from kfs_core.errors import CorruptionError, ObjectNotFound
from kfs_core.formats.index import (
    DEFAULT_INDEX_INTERVAL,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_MAGIC,
    INDEX_VERSION,
    IndexReader,
)
from kfs_core.formats.index_check import build_index_from_segment, check_index
from kfs_core.formats.segment import SegmentReader
from kfs_core.reports import INDEX_REBUILD_JOB
from kfs_core.storage import ObjectStore
from spark_jobs import common
from spark_jobs.common import JobContext, JobOptions, JobResult, SegmentDescriptor

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = INDEX_REBUILD_JOB

# Inspection outcomes.
OK = "ok"
MISSING = "missing"
UNREADABLE = "unreadable"
INCONSISTENT = "inconsistent"
SEGMENT_MISSING = "segment_missing"
SEGMENT_CORRUPT = "segment_corrupt"
NEEDS_REBUILD = (MISSING, UNREADABLE, INCONSISTENT)
#: Reported items kept in the summary (the counts cover all of them).
MAX_REPORTED = 1000


def build_parser() -> argparse.ArgumentParser:
    return common.job_parser(JOB, __doc__)


@dataclass(frozen=True)
class IndexFinding:
    """What inspecting (and maybe rebuilding) one segment's index found."""

    topic: str
    partition: int
    key: str
    index_key: str
    state: str  # OK, one of NEEDS_REBUILD, SEGMENT_MISSING or SEGMENT_CORRUPT
    reason: str = ""
    interval: int = DEFAULT_INDEX_INTERVAL
    rebuilt: bool = False
    entries: int = 0
    index_size_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "key": self.key,
            "index_key": self.index_key,
            "state": self.state,
            "reason": self.reason,
            "interval": self.interval,
            "rebuilt": self.rebuilt,
            "entries": self.entries,
            "index_size_bytes": self.index_size_bytes,
        }


def _old_interval(index: bytes) -> int | None:
    """The interval of an index header that is readable even if the rest is not."""
    if len(index) < INDEX_HEADER_SIZE:
        return None
    magic, version, _count, interval, _reserved = INDEX_HEADER.unpack_from(index, 0)
    if magic == INDEX_MAGIC and version == INDEX_VERSION and 1 <= interval <= 2**31 - 1:
        return int(interval)
    return None


def _inspect(store: ObjectStore, d: SegmentDescriptor) -> tuple[IndexFinding, SegmentReader | None]:
    finding = IndexFinding(d.topic, d.partition, d.key, d.index_key, OK)
    try:
        data = store.get(d.segment_object_key)
    except ObjectNotFound:
        return _with(finding, state=SEGMENT_MISSING, reason="segment object is missing"), None
    try:
        # Header and footer only: an index is judged by where batches start.
        segment = SegmentReader(data, d.segment_object_key, verify=False)
    except CorruptionError as exc:
        return _with(finding, state=SEGMENT_CORRUPT, reason=str(exc)), None
    try:
        index = store.get(d.index_object_key)
    except ObjectNotFound:
        return _with(finding, state=MISSING, reason="index object is missing"), segment
    interval = _old_interval(index) or DEFAULT_INDEX_INTERVAL
    finding = _with(finding, interval=interval, index_size_bytes=len(index))
    try:
        reader = IndexReader(index, d.index_object_key)
    except CorruptionError as exc:
        return _with(finding, state=UNREADABLE, reason=str(exc)), segment
    try:
        problems = check_index(segment, reader, segment_name=d.segment_object_key)
    except CorruptionError as exc:
        # The batch headers cannot be walked: the segment is damaged.
        return _with(finding, state=SEGMENT_CORRUPT, reason=str(exc)), None
    if problems:
        reason = "; ".join(str(p) for p in problems[:3])
        if len(problems) > 3:
            reason += f"; {len(problems)} problems in all"
        return _with(finding, state=INCONSISTENT, reason=reason), segment
    return _with(finding, entries=len(reader)), segment


def _with(finding: IndexFinding, **changes: Any) -> IndexFinding:
    return IndexFinding(**{**finding.as_dict(), **changes})


def inspect_index(store: ObjectStore, d: SegmentDescriptor) -> IndexFinding:
    """Read one live segment and its index; say whether the index needs a rebuild (read-only)."""
    return _inspect(store, d)[0]


def rebuild_index(store: ObjectStore, d: SegmentDescriptor) -> IndexFinding:
    """Inspect again and, if still needed, regenerate and put the index of one segment."""
    finding, segment = _inspect(store, d)
    if finding.state not in NEEDS_REBUILD or segment is None:
        return finding
    try:
        segment.verify()  # body and batch CRCs: never build an index over damaged bytes
        data = build_index_from_segment(segment, finding.interval)
    except CorruptionError as exc:
        return _with(finding, state=SEGMENT_CORRUPT, reason=f"{finding.reason}; {exc}")
    problems = check_index(segment, data, segment_name=d.segment_object_key)
    if problems:  # a bug, not damage: refuse to write a bad index
        raise AssertionError(f"rebuilt index of {d.segment_object_key} is wrong: {problems[0]}")
    key = d.index_object_key
    if not key.endswith(layout.INDEX_SUFFIX):  # segments are never written
        raise AssertionError(f"refusing to write {key}: not an index key")
    store.put(key, data)
    entries = len(IndexReader(data, key))
    return _with(finding, rebuilt=True, entries=entries, index_size_bytes=len(data))


def _still_live(
    store: ObjectStore, namespace: str, candidates: Sequence[SegmentDescriptor]
) -> list[SegmentDescriptor]:
    """The candidates the newest catalog still lists (compaction or retention may have run)."""
    live: set[tuple[str, int, str]] = set()
    for topic, partition in sorted({(d.topic, d.partition) for d in candidates}):
        state = PartitionCatalog(store, namespace, topic, partition).load()
        live.update((topic, partition, s.key) for s in state.segments)
    return [d for d in candidates if (d.topic, d.partition, d.key) in live]


def run(
    options: JobOptions | argparse.Namespace | Sequence[str] | None = None,
    spark: SparkSession | None = None,
) -> dict[str, Any]:
    """Rebuild bad indexes of a namespace; the run summary."""
    opts = common.coerce_options(options, build_parser(), JobOptions)
    return common.execute(JOB, opts, lambda ctx: _rebuild_job(ctx, opts), spark)


def _rebuild_job(ctx: JobContext, options: JobOptions) -> JobResult:
    with ctx.phase("catalog"):
        descriptors = common.read_descriptors(ctx.store, ctx.namespace, options.topics)
    with ctx.phase("inspect"):
        findings = (
            common.map_in_executors(ctx.spark, ctx.store, descriptors, inspect_index)
            if descriptors
            else []
        )
    by_key = {(d.topic, d.partition, d.key): d for d in descriptors}
    candidates = [
        by_key[(f.topic, f.partition, f.key)] for f in findings if f.state in NEEDS_REBUILD
    ]
    unfixable = [f for f in findings if f.state in (SEGMENT_MISSING, SEGMENT_CORRUPT)]
    counts = {
        "segments": len(descriptors),
        "healthy": sum(1 for f in findings if f.state == OK),
        "needs_rebuild": len(candidates),
        "rebuilt": 0,
        "unfixable": len(unfixable),
    }
    details: dict[str, Any] = {
        "needs_rebuild": [f.as_dict() for f in findings if f.state in NEEDS_REBUILD][:MAX_REPORTED],
        "unfixable": [f.as_dict() for f in unfixable][:MAX_REPORTED],
        "rebuilt": [],
    }
    if options.dry_run:
        return _result(counts, details, f"would rebuild {len(candidates)} indexes (dry run)")
    if not candidates:
        return _result(counts, details, f"all {counts['healthy']} checkable indexes are sound")
    if ctx.check_paused():
        return JobResult(
            common.STATUS_PAUSED,
            f"emergency pause flag set before rebuilding {len(candidates)} indexes; nothing written",
            counts,
            details,
        )
    with ctx.phase("rebuild"):
        live = _still_live(ctx.store, ctx.namespace, candidates)
        results = common.map_in_executors(ctx.spark, ctx.store, live, rebuild_index)
    rebuilt = [f for f in results if f.rebuilt]
    late_unfixable = [f for f in results if f.state in (SEGMENT_MISSING, SEGMENT_CORRUPT)]
    counts["rebuilt"] = len(rebuilt)
    counts["unfixable"] += len(late_unfixable)
    counts["gone"] = len(candidates) - len(live)
    details["rebuilt"] = [f.as_dict() for f in rebuilt][:MAX_REPORTED]
    details["unfixable"] += [f.as_dict() for f in late_unfixable][:MAX_REPORTED]
    return _result(counts, details, f"rebuilt {len(rebuilt)} of {len(candidates)} indexes")


def _result(counts: dict[str, int], details: dict[str, Any], message: str) -> JobResult:
    if counts["unfixable"]:
        message += f"; {counts['unfixable']} cannot be rebuilt (segment missing or damaged)"
        return JobResult(common.STATUS_FAILED, message, counts, details)
    return JobResult(common.STATUS_OK, message, counts, details)


def main(argv: Sequence[str] | None = None) -> int:
    return common.main(run, build_parser(), argv)


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy, so executors unpickle
    # the per-segment functions by reference to spark_jobs.index_rebuild.
    from spark_jobs.index_rebuild import main as _main

    common.exit_driver(_main())
